//go:build linux

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// everythingConfig is the daemon's mcp_servers section for
// server-everything alone, as the MCP tests configure it.
func everythingConfig(cache string) []string {
	return []string{
		"mcp_servers:",
		"  everything:",
		"    command: /usr/bin/node",
		"    args: [" + everythingIndex(cache) + ", stdio]",
		"    files: [{path: " + cache + "}]",
		"    memory_mb: 512",
		"    approve: auto",
	}
}

func everythingIndex(cache string) string {
	return filepath.Join(cache, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// The daemon's histogram of its MCP calls (the SDK's tools/call to the
// sandboxed server, as the broker times it).
const (
	mcpCallSum   = `cyberos_mcp_call_duration_seconds_sum{server="everything"}`
	mcpCallCount = `cyberos_mcp_call_duration_seconds_count{server="everything"}`
)

// The daemon's histogram of the started rows it made durable before their
// tool ran (the echo's; a Read's rows go with its reply).
const (
	startedRowSum   = `cyberos_audit_emit_duration_seconds_sum{stage="tool_call_started"}`
	startedRowCount = `cyberos_audit_emit_duration_seconds_count{stage="tool_call_started"}`
)

// BenchmarkMCPServerEcho: issue 39's brokered MCP call against its
// reference, interleaved in the same run. Brokered: the callbench probe in
// a real sandbox calls mcp__everything__echo back to back through a real
// daemon's broker (policy, inputSchema validation, durable rows) to
// server-everything in its own cyberos sandbox, as mcp_servers configures
// it. Direct: the Go SDK's client over stdio (mcp.CommandTransport) to the
// same server unsandboxed, the same call. Then one fdatasync of a row
// appended to the stopped daemon's journal (rowSyncFloor). Metrics: p50,
// p99 and calls/s of each (brokered-*, direct-*; each the median over the
// rounds), the CPU a call of the daemon, of each node and of the callers,
// the mean of the daemon's own tools/call to the sandboxed server (its
// histogram: brokered-sdk-call-mean-µs) beside the direct calls' mean,
// the mean of the echo's started row made durable before the call (its
// histogram: brokered-started-row-mean-µs),
// the fdatasync floor's (row-fdatasync-*), and the p50 of a native Read
// by the same skill through the same broker (brokered-read-p50-µs: the
// broker's round trip with its durable rows), and of the direct call
// made after a row's fdatasync each (direct-synced-p50-µs: the server
// idles through the fdatasync, as it does through the broker's started
// row). scripts/benchplot marks the brokered p50 against the direct p50
// plus one fdatasync (issue 39 asks for at most 1.2×), and beside it the
// floor of a brokered call: that Read plus the synced direct call.
//
//	go test -tags seccomp -run '^$' -bench BenchmarkMCPServerEcho -benchtime 1x ./integration/
func BenchmarkMCPServerEcho(b *testing.B) {
	cache := mcpServers(b)
	e := newEnv(b)
	data := filepath.Join(e.base, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "echo.txt"), []byte("hello from the bench"), 0o644); err != nil {
		b.Fatal(err)
	}
	e.skill("callbench", "effort_minutes: 1\nallowed_tools: [mcp__everything__echo, Read]\nx-allowed-files: ['"+data+"/**']\n", "probe:callbench")
	// The cost bounds are the operator's: lifted for the measurement.
	d := startDaemon(b, e, append([]string{"shutdown_grace: 0s", "defaults:", "  rate_limit_per_minute: 1000000", "  max_audit_rows: 100000000"},
		everythingConfig(cache)...)...)
	const message = "hello from the bench"
	args := func(seconds float64) map[string]any {
		return map[string]any{"tool": "mcp__everything__echo", "args": map[string]string{"message": message}, "seconds": seconds}
	}
	// The broker's own part of the floor: a native call of the same size
	// (Read of a 20-byte file) through the same broker, its rows durable
	// with one fdatasync as the echo's are.
	readArgs := func(seconds float64) map[string]any {
		return map[string]any{"tool": "Read", "args": map[string]string{"path": filepath.Join(data, "echo.txt")}, "seconds": seconds}
	}
	brokeredWith := func(a map[string]any) (map[string]float64, error) {
		code, env, raw := d.invoke(map[string]any{"skill_id": "callbench", "args": a})
		if code != 200 || env.Outcome != "success" {
			return nil, fmt.Errorf("callbench: %d %s", code, raw)
		}
		var r map[string]float64
		return r, json.Unmarshal(env.Result, &r)
	}
	brokered := func(seconds float64) (map[string]float64, error) { return brokeredWith(args(seconds)) }
	// The server's first start (its sandbox, node, initialize, tools/list),
	// the page cache, the skill's warm sandboxes.
	for range 3 {
		if _, err := brokered(0.3); err != nil {
			b.Fatal(err)
		}
	}
	m := map[string][]float64{} // each round's figures, by metric
	ctx, cancel := context.WithTimeout(context.Background(), slow(5*time.Minute))
	defer cancel()
	cmd := exec.Command("/usr/bin/node", everythingIndex(cache), "stdio")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"} // the sandboxed server's
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	// A row's fdatasync on the state dir's filesystem, as the broker's
	// started row has before each call: a row-sized write into a
	// preallocated file (as the journal is) and its fdatasync.
	sf, err := os.OpenFile(filepath.Join(e.base, "bench-sync"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	const syncSize, rowSize = 8 << 20, 1600
	if _, err := sf.Write(make([]byte, syncSize)); err != nil {
		b.Fatal(err)
	}
	if err := sf.Sync(); err != nil {
		b.Fatal(err)
	}
	syncRow, syncAt := bytes.Repeat([]byte{'x'}, rowSize), int64(0)
	rowSync := func() error {
		if syncAt+rowSize > syncSize {
			syncAt = 0
		}
		if _, err := sf.WriteAt(syncRow, syncAt); err != nil {
			return err
		}
		syncAt += rowSize
		return unix.Fdatasync(int(sf.Fd()))
	}
	// direct calls back to back; synced: each after a row's fdatasync (the
	// server idles as long as the broker's started row takes), the call
	// alone timed.
	direct := func(seconds float64, synced bool) (map[string]float64, error) {
		var lat []time.Duration
		end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
		start := time.Now()
		for time.Now().Before(end) {
			if synced {
				if err := rowSync(); err != nil {
					return nil, err
				}
			}
			t0 := time.Now()
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": message}})
			if err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0))
			if r.IsError || len(r.Content) == 0 {
				return nil, fmt.Errorf("echo: %+v", r)
			}
		}
		total := time.Since(start)
		slices.Sort(lat)
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		if synced {
			return map[string]float64{"p50_us": float64(lat[len(lat)/2].Microseconds())}, nil
		}
		m["direct-mean-µs"] = append(m["direct-mean-µs"], float64(sum.Microseconds())/float64(len(lat)))
		return map[string]float64{"calls": float64(len(lat)), "calls_per_s": float64(len(lat)) / total.Seconds(),
			"p50_us": float64(lat[len(lat)/2].Microseconds()), "p99_us": float64(lat[len(lat)*99/100].Microseconds())}, nil
	}
	if _, err := direct(0.3, false); err != nil {
		b.Fatal(err)
	}
	delete(m, "direct-mean-µs")
	// The processes whose CPU each side's calls cost: the daemon and the
	// sandboxed node (brokered; the skill's own process is the caller, as
	// this process is for the direct calls), the unsandboxed node (direct).
	sandboxedNode := sandboxedProc(b, e, "mcp-everything-", "node")
	const rounds, seconds = 3, 2.0
	add := func(side string, r map[string]float64, cpu map[string]float64) {
		for _, k := range []string{"p50_us", "p99_us", "calls_per_s"} {
			m[side+"-"+k] = append(m[side+"-"+k], r[k])
		}
		for k, v := range cpu {
			m[side+"-"+k] = append(m[side+"-"+k], v/r["calls"])
		}
	}
	self := os.Getpid()
	for i := 0; i < b.N; i++ {
		for range rounds {
			c0 := pidsCPU(b, d.cmd.Process.Pid, sandboxedNode)
			h0 := d.sums(b, mcpCallSum, mcpCallCount, startedRowSum, startedRowCount)
			r, err := brokered(seconds)
			if err != nil {
				b.Fatal(err)
			}
			h1 := d.sums(b, mcpCallSum, mcpCallCount, startedRowSum, startedRowCount)
			c1 := pidsCPU(b, d.cmd.Process.Pid, sandboxedNode)
			add("brokered", r, map[string]float64{"daemon-cpu-µs": c1[0] - c0[0], "node-cpu-µs": c1[1] - c0[1]})
			m["brokered-sdk-call-mean-µs"] = append(m["brokered-sdk-call-mean-µs"], (h1[0]-h0[0])/(h1[1]-h0[1])*1e6)
			m["brokered-started-row-mean-µs"] = append(m["brokered-started-row-mean-µs"], (h1[2]-h0[2])/(h1[3]-h0[3])*1e6)
			if r, err = brokeredWith(readArgs(seconds / 2)); err != nil {
				b.Fatal(err)
			}
			m["brokered-read-p50_us"] = append(m["brokered-read-p50_us"], r["p50_us"])
			c0 = pidsCPU(b, self, cmd.Process.Pid)
			if r, err = direct(seconds, false); err != nil {
				b.Fatal(err)
			}
			c1 = pidsCPU(b, self, cmd.Process.Pid)
			add("direct", r, map[string]float64{"client-cpu-µs": c1[0] - c0[0], "node-cpu-µs": c1[1] - c0[1]})
			if r, err = direct(seconds/2, true); err != nil {
				b.Fatal(err)
			}
			m["direct-synced-p50_us"] = append(m["direct-synced-p50_us"], r["p50_us"])
		}
	}
	d.stop(60 * time.Second)
	rowSyncFloor(b, e.stateDir)
	med := func(k string) float64 {
		v := slices.Clone(m[k])
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(med("brokered-read-p50_us"), "brokered-read-p50-µs")
	b.ReportMetric(med("direct-synced-p50_us"), "direct-synced-p50-µs")
	for _, side := range []string{"brokered", "direct"} {
		b.ReportMetric(med(side+"-p50_us"), side+"-p50-µs")
		b.ReportMetric(med(side+"-p99_us"), side+"-p99-µs")
		b.ReportMetric(med(side+"-calls_per_s"), side+"-calls/s")
	}
	for _, k := range []string{"brokered-sdk-call-mean-µs", "brokered-started-row-mean-µs", "direct-mean-µs", "brokered-daemon-cpu-µs", "brokered-node-cpu-µs", "direct-client-cpu-µs", "direct-node-cpu-µs"} {
		b.ReportMetric(med(k), k)
	}
	b.ReportMetric(0, "ns/op")
}

// pidsCPU is each pid's CPU so far (user and system), in µs.
func pidsCPU(b *testing.B, pids ...int) []float64 {
	out := make([]float64, len(pids))
	for i, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command name, which may hold spaces.
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64) // utime, field 14
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[i] = (ut + stime) * 1e6 / 100 // clock ticks of 10 ms
	}
	return out
}

// sandboxedProc is the pid of the process named comm in e's one sandbox
// whose id starts with prefix, from its cgroup.
func sandboxedProc(b *testing.B, e *env, prefix, comm string) int {
	var found []int
	for _, cg := range envCgroups(e) {
		if !strings.HasPrefix(filepath.Base(cg), prefix) {
			continue
		}
		procs, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		for _, f := range strings.Fields(string(procs)) {
			pid, _ := strconv.Atoi(f)
			if c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(c)) == comm && !slices.Contains(found, pid) {
				found = append(found, pid)
			}
		}
	}
	if len(found) != 1 {
		b.Fatalf("%s processes in the sandboxes %s*: %v", comm, prefix, found)
	}
	return found[0]
}
