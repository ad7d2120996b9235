package broker

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/audit"
	"cyberos.dev/internal/mcptest"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/mcpclient"
	"cyberos.dev/supervisor/internal/tools"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe() // the hostile MCP server is this binary re-executed
	os.Exit(m.Run())
}

// The test skill for MCP: one server whole but a denied tool, another
// server not at all.
const mcpSkill = `---
name: test-skill
description: Broker MCP tests.
allowed_tools: [Read, mcp__hostile, mcp__down__x]
disallowed_tools: [mcp__hostile__crash, mcp__hostile__hang]
---
`

// hostileServer is a client of the hostile server, counting its starts.
func hostileServer(t *testing.T, name string, starts *atomic.Int64) *mcpclient.Server {
	t.Helper()
	a, err := mcpclient.OpenApprovals(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcpclient.New(mcpclient.Options{Name: name, Approvals: a, CallTimeout: 5 * time.Second,
		Transport: func(context.Context) (mcp.Transport, error) {
			starts.Add(1)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mcptest.EnvServe+"=1")
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mcpEnv(t *testing.T, servers ...*mcpclient.Server) *testEnv {
	return startEnv(t, func(c *Config) {
		c.Env.Enforcer = testEnforcer(t, mcpSkill)
		c.Sources = []tools.Source{mcpclient.NewSource(servers...)}
	})
}

// An MCP tool is called through the broker like a native one: its rows
// carry tool_name mcp__s__t, mcp_server, the definition hash, args_hash
// and the hash of the result the skill got.
func TestMCPCallAudited(t *testing.T) {
	var starts atomic.Int64
	srv := hostileServer(t, "hostile", &starts)
	e := mcpEnv(t, srv)
	c := e.dial()
	args := `{"text":"hello"}`
	r := c.rpc(callBody(1, "mcp__hostile__echo", args, ""))
	if r.Error != nil {
		t.Fatalf("error %+v", r.Error)
	}
	if string(r.Result) != `{"content":[{"type":"text","text":"hello"}]}` {
		t.Errorf("result %s", r.Result)
	}
	ts, _ := srv.Tools(context.Background())
	var defHash string
	for _, tl := range ts {
		if tl.Name() == "mcp__hostile__echo" {
			defHash = tl.DefinitionHash()
		}
	}
	st, done := e.audit.kind(audit.KindToolCallStarted), e.audit.kind(audit.KindToolCallCompleted)
	if len(st) != 1 || len(done) != 1 {
		t.Fatalf("rows: %d started, %d completed", len(st), len(done))
	}
	for _, rw := range []row{st[0], done[0]} {
		if rw.str("tool_name") != "mcp__hostile__echo" || rw.str("mcp_server") != "hostile" || rw.str("tool_definition_hash") != defHash || defHash == "" {
			t.Errorf("%s: %v (definition %s)", rw.Kind, rw.Payload, defHash)
		}
	}
	if st[0].str("args_hash") != hashOf(t, args) || done[0].str("result_hash") != hashOf(t, string(r.Result)) || done[0].str("outcome") != audit.OutcomeSuccess {
		t.Errorf("hashes: %v %v", st[0].Payload, done[0].Payload)
	}
	// The traceparent reaches the server in params._meta.
	r = c.rpc(callBody(2, "mcp__hostile__meta", `{}`, `"traceparent":"`+testTraceparent+`"`))
	if r.Error != nil || !strings.Contains(string(r.Result), testTraceparent) {
		t.Errorf("meta: %s %+v", r.Result, r.Error)
	}
}

// tool.list shows the permitted MCP tools with their inputSchema, and
// neither the denied ones nor a changed or refused definition.
func TestMCPToolList(t *testing.T) {
	var starts atomic.Int64
	e := mcpEnv(t, hostileServer(t, "hostile", &starts))
	r := e.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"tool.list"}`)
	var res struct{ Tools []ToolInfo }
	if err := json.Unmarshal(r.Result, &res); err != nil {
		t.Fatal(err)
	}
	got := map[string]ToolInfo{}
	for _, ti := range res.Tools {
		got[ti.Name] = ti
	}
	if echo, ok := got["mcp__hostile__echo"]; !ok || !strings.Contains(string(echo.InputSchema), `"required":["text"]`) {
		t.Errorf("echo: %+v", echo)
	}
	for _, no := range []string{"mcp__hostile__crash", "mcp__hostile__hang", "mcp__hostile__ansi", "Bash"} {
		if _, ok := got[no]; ok {
			t.Errorf("tool.list offers %s", no)
		}
	}
	if _, ok := got["Read"]; !ok {
		t.Error("the native tools are gone from tool.list")
	}
}

// Refusals: a denied tool, a server the skill is not granted, a bare
// unknown name. None starts a server; each is a tool_denied row.
func TestMCPDeniedStartsNothing(t *testing.T) {
	var starts atomic.Int64
	other := hostileServer(t, "other", &starts)
	e := mcpEnv(t, other)
	c := e.dial()
	for i, tc := range []struct{ tool, reason string }{
		{"mcp__other__echo", string(policy.ReasonToolNotAllowed)},
		{"mcp__hostile__crash", string(policy.ReasonToolDenied)},
		{"mcp__*", string(policy.ReasonUnknownTool)},
		{"mcp__hostile__nope", string(policy.ReasonUnknownTool)}, // allowed server, not configured here
	} {
		r := c.rpc(callBody(i+1, tc.tool, `{}`, ""))
		if r.reason() != tc.reason || r.Error.Code != CodeInternal {
			t.Errorf("%s: %+v, want %s", tc.tool, r.Error, tc.reason)
		}
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("refused calls started %d servers", n)
	}
	if d := e.audit.kind(audit.KindToolDenied); len(d) != 4 {
		t.Errorf("%d tool_denied rows, want 4", len(d))
	}
}

// Failures keep their shapes: bad args are -32602 before anything is
// sent, isError is outcome error, a server that will not start fails the
// call with both rows written.
func TestMCPFailures(t *testing.T) {
	var starts atomic.Int64
	a, _ := mcpclient.OpenApprovals(t.TempDir())
	down, err := mcpclient.New(mcpclient.Options{Name: "down", Approvals: a, Transport: func(context.Context) (mcp.Transport, error) {
		return &mcp.CommandTransport{Command: exec.Command("/bin/false")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := mcpEnv(t, hostileServer(t, "hostile", &starts), down)
	c := e.dial()
	if r := c.rpc(callBody(1, "mcp__hostile__echo", `{"text":5}`, "")); r.Error == nil || r.Error.Code != CodeInvalidParams || !strings.Contains(r.Error.Message, "inputSchema") {
		t.Errorf("bad args: %+v", r.Error)
	}
	if r := c.rpc(callBody(2, "mcp__hostile__fail", `{}`, "")); r.Error == nil || r.Error.Code != CodeToolError || !strings.Contains(r.Error.Data.Detail, "it went wrong") {
		t.Errorf("isError: %+v", r.Error)
	}
	if r := c.rpc(callBody(3, "mcp__down__x", `{}`, "")); r.Error == nil || r.Error.Code != CodeToolError || !strings.Contains(r.Error.Data.Detail, "not available") {
		t.Errorf("down: %+v", r.Error)
	}
	done := e.audit.kind(audit.KindToolCallCompleted)
	if len(done) != 3 {
		t.Fatalf("%d completed rows, want 3", len(done))
	}
	for _, rw := range done {
		if rw.str("outcome") != audit.OutcomeError || rw.str("mcp_server") == "" {
			t.Errorf("completed: %v", rw.Payload)
		}
	}
}

// A definition changed after approval is refused as
// tool_definition_changed, audited with the server and the new hash.
func TestMCPRugPullDenied(t *testing.T) {
	var starts atomic.Int64
	srv := hostileServer(t, "hostile", &starts)
	e := mcpEnv(t, srv)
	c := e.dial()
	if r := c.rpc(callBody(1, "mcp__hostile__mutable", `{}`, "")); r.Error != nil {
		t.Fatalf("before: %+v", r.Error)
	}
	if r := c.rpc(callBody(2, "mcp__hostile__mutate", `{"description":"also exfiltrate"}`, "")); r.Error != nil {
		t.Fatalf("mutate: %+v", r.Error)
	}
	// Wait for the server's list_changed to reach the broker: until then a
	// call still sees the approved definition.
	id := 2
	testutil.WaitFor(t, 10*time.Second, func() bool {
		id++
		return c.rpc(callBody(id, "mcp__hostile__mutable", `{}`, "")).reason() == string(policy.ReasonDefinitionChanged)
	})
	d := e.audit.kind(audit.KindToolDenied)
	last := d[len(d)-1]
	if last.str("reason") != string(policy.ReasonDefinitionChanged) || last.str("mcp_server") != "hostile" || len(last.str("tool_definition_hash")) != 64 {
		t.Errorf("denied row %v", last.Payload)
	}
}

// BenchmarkMCPEcho compares one echo call of the hostile server made
// directly with the Go SDK over stdio (direct) with the same call made by
// a skill through the broker (brokered: framing, policy, args validation,
// both rows to an in-memory sink, the SDK call), both to an unsandboxed
// server. The bound is brokered <= 1.2x direct plus one fdatasync.
func BenchmarkMCPEcho(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), mcptest.EnvServe+"=1")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		params := &mcp.CallToolParams{Name: "echo", Arguments: json.RawMessage(`{"text":"hello"}`)}
		b.ResetTimer()
		for b.Loop() {
			if _, err := cs.CallTool(context.Background(), params); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("brokered", func(b *testing.B) {
		var starts atomic.Int64
		a, err := mcpclient.OpenApprovals(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		srv, err := mcpclient.New(mcpclient.Options{Name: "hostile", Approvals: a, Transport: func(context.Context) (mcp.Transport, error) {
			starts.Add(1)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mcptest.EnvServe+"=1")
			return &mcp.CommandTransport{Command: cmd}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Close()
		e := startEnv(b, func(c *Config) {
			c.Env.Enforcer = testEnforcer(b, mcpSkill)
			c.Sources = []tools.Source{mcpclient.NewSource(srv)}
			c.RatePerMinute = 0
		})
		c := e.dial()
		body := []byte(callBody(1, "mcp__hostile__echo", `{"text":"hello"}`, ""))
		if r := c.rpc(string(body)); r.Error != nil { // the server's start is not measured
			b.Fatal(r.Error)
		}
		b.ResetTimer()
		for b.Loop() {
			c.send(body)
			c.recv()
		}
	})
}
