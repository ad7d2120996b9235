package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServerEnv makes this test binary serve one noop MCP tool over stdio.
const mcpServerEnv = "CYBEROS_BENCH_MCP_SERVER"

func init() {
	if os.Getenv(mcpServerEnv) == "" {
		return
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "noop", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "noop"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// BenchmarkToolCallVsMCP: back-to-back tool calls for 5 s each, in the same
// run: (a) from inside a real sandbox through the broker, enforced and
// audited to the durable store — the tool is Read of a 5-byte allowed file
// (the cheapest real tool: one openat2 + read); (b) the MCP Go SDK serving a
// noop tool over stdio to an SDK client. Reports calls/s, p50, p99 and the
// ratio. go test -tags seccomp -run '^$' -bench ToolCallVsMCP -benchtime 1x ./integration/
func BenchmarkToolCallVsMCP(b *testing.B) {
	e := newEnv(b)
	data := filepath.Join(e.base, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("hello"), 0o644)
	dir := e.skill("callbench", fmt.Sprintf("effort_minutes: 1\nallowed_tools: [Read]\nx-allowed-files: [\"%s/**\"]\n", data), "probe:callbench")
	const seconds = 5
	for i := 0; i < b.N; i++ {
		args := fmt.Sprintf(`{"tool":"Read","args":{"path":"%s/x.txt"},"seconds":%d}`, data, seconds)
		// The cost bounds are the operator's: lifted for the measurement.
		r := e.run(dir, "--args", args, "--rate-limit-per-minute", "1000000", "--max-audit-rows", "100000000")
		if r.env.Outcome != "success" {
			b.Fatalf("callbench: %s %s %s", r.env.Outcome, r.env.ErrorMessage, r.stderr)
		}
		var ours map[string]float64
		json.Unmarshal(r.env.Result, &ours)

		mcpRate, mcpP50, mcpP99 := runMCP(b, seconds*time.Second)
		b.ReportMetric(ours["calls_per_s"], "broker-calls/s")
		b.ReportMetric(ours["p50_us"], "broker-p50-µs")
		b.ReportMetric(ours["p99_us"], "broker-p99-µs")
		b.ReportMetric(mcpRate, "mcp-calls/s")
		b.ReportMetric(mcpP50, "mcp-p50-µs")
		b.ReportMetric(mcpP99, "mcp-p99-µs")
		b.ReportMetric(ours["calls_per_s"]/mcpRate, "broker/mcp")
		b.ReportMetric(0, "ns/op")
	}
}

func runMCP(b *testing.B, d time.Duration) (rate, p50, p99 float64) {
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mcpServerEnv+"=1")
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "noop", Arguments: map[string]any{}}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	total := time.Since(start)
	slices.Sort(lat)
	return float64(len(lat)) / total.Seconds(), float64(lat[len(lat)/2].Microseconds()), float64(lat[len(lat)*99/100].Microseconds())
}
