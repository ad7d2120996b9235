package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/audit"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/policy"
	"cyberos.dev/skillclient"
	"cyberos.dev/supervisor/internal/tools"
)

func metric(e *testEnv, tool, outcome string) float64 {
	return promtest.ToFloat64(e.metrics.ToolCalls.WithLabelValues("test-skill", tool, outcome))
}

// AC 1 + AC 14: an allowed call succeeds, and is audited by exactly one
// started and one completed row, paired by call_id, carrying the
// invocation's id and the call's trace id, hashes instead of raw values.
func TestToolCallAuditedPair(t *testing.T) {
	e := startEnv(t)
	c, err := skillclient.Dial(e.b.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Traceparent = testTraceparent
	args := map[string]any{"path": "memories/projects/cyberos/notes/x.md"}
	var res struct {
		Args    map[string]any `json:"args"`
		TraceID string         `json:"trace_id"`
		TP      string         `json:"traceparent"`
	}
	if err := c.Call(context.Background(), "Read", args, &res); err != nil {
		t.Fatal(err)
	}
	if res.Args["path"] != args["path"] || res.TraceID != testTraceID || res.TP != testTraceparent {
		t.Fatalf("the tool got %+v", res)
	}

	rows := e.audit.all()
	if len(rows) != 2 || rows[0].Kind != audit.KindToolCallStarted || rows[1].Kind != audit.KindToolCallCompleted {
		t.Fatalf("rows %+v, want started then completed", rows)
	}
	st, co := rows[0], rows[1]
	for _, r := range rows {
		if r.str("invocation_id") != e.cfg.Common.InvocationID || r.str("trace_id") != testTraceID ||
			r.str("skill_id") != "test-skill" || r.str("tenant_id") != e.cfg.Common.TenantID || r.str("tool_name") != "Read" {
			t.Errorf("row %v does not carry the invocation and the call's trace", r)
		}
	}
	if st.str("call_id") == "" || st.str("call_id") != co.str("call_id") {
		t.Errorf("call ids %q / %q", st.str("call_id"), co.str("call_id"))
	}
	if want := hashOf(t, `{"path":"memories/projects/cyberos/notes/x.md"}`); st.str("args_hash") != want {
		t.Errorf("args_hash %s, want %s", st.str("args_hash"), want)
	}
	if co.str("outcome") != "success" || len(co.str("result_hash")) != 64 || co.Payload["error_message"] != nil {
		t.Errorf("completed row %v", co.Payload)
	}
	if got := metric(e, "Read", "success"); got != 1 {
		t.Errorf("cyberos_tool_calls_total{success} = %v", got)
	}
	if s := e.b.Stats(); s.ToolCalls != 1 || s.Denied != 0 {
		t.Errorf("stats %+v", s)
	}
}

// The result hash covers exactly the result the skill got.
func TestResultHashMatchesResponse(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	r := c.rpc(callBody(1, "Read", `{"b":2,"a":1}`, ""))
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	co := e.audit.kind(audit.KindToolCallCompleted)
	if len(co) != 1 || co[0].str("result_hash") != hashOf(t, string(r.Result)) {
		t.Fatalf("result_hash %v, want the hash of %s", co, r.Result)
	}
}

// AC 2, AC 15, AC 17: a tool not in allowed_tools is refused with -32603
// tool_not_in_allowed_tools, nothing runs, and one skill.tool_denied row
// records reason, attempted_args_hash and trace_id.
func TestToolNotInAllowedTools(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	r := c.rpc(callBody(7, "Bash", `{"cmd":"ls"}`, `"traceparent":"`+testTraceparent+`"`))
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "tool_not_in_allowed_tools" ||
		r.Error.Data.Tool != "Bash" || r.Error.Data.SkillID != "test-skill" || string(r.ID) != "7" {
		t.Fatalf("response %+v %+v", r, r.Error)
	}
	if e.tools.calls(policy.ToolBash) != 0 {
		t.Fatal("a refused tool ran")
	}
	rows := e.audit.all()
	if len(rows) != 1 || rows[0].Kind != audit.KindToolDenied {
		t.Fatalf("rows %+v, want one tool_denied", rows)
	}
	d := rows[0]
	if d.str("reason") != "tool_not_in_allowed_tools" || d.str("tool_name") != "Bash" || d.str("trace_id") != testTraceID ||
		d.str("attempted_args_hash") != hashOf(t, `{"cmd":"ls"}`) || d.str("invocation_id") != e.cfg.Common.InvocationID {
		t.Errorf("denied row %v", d.Payload)
	}
	if got := metric(e, "Bash", "denied"); got != 1 {
		t.Errorf("cyberos_tool_calls_total{denied} = %v", got)
	}
	if s := e.b.Stats(); s.ToolCalls != 1 || s.Denied != 1 {
		t.Errorf("stats %+v", s)
	}
}

// AC 3: disallowed_tools overrides; AC 15/17 for it and for unknown names.
func TestDisallowedAndUnknownTools(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	for _, tc := range []struct{ tool, reason, metricTool string }{
		{"MemoryEmit", "tool_denied", "MemoryEmit"},
		{"NoSuchTool", "unknown_tool", "unknown"},
	} {
		r := c.rpc(callBody(1, tc.tool, `{"x":1}`, ""))
		if r.Error == nil || r.Error.Code != -32603 || r.reason() != tc.reason || r.Error.Data.Tool != tc.tool {
			t.Errorf("%s: %+v", tc.tool, r.Error)
		}
		if got := metric(e, tc.metricTool, "denied"); got != 1 {
			t.Errorf("%s: cyberos_tool_calls_total{tool=%s,denied} = %v", tc.tool, tc.metricTool, got)
		}
	}
	denied := e.audit.kind(audit.KindToolDenied)
	if len(denied) != 2 || denied[0].str("reason") != "tool_denied" || denied[1].str("reason") != "unknown_tool" ||
		denied[1].str("tool_name") != "NoSuchTool" || denied[1].str("trace_id") != invTraceID {
		t.Fatalf("denied rows %+v", denied)
	}
	if len(e.audit.kind(audit.KindToolCallStarted)) != 0 {
		t.Fatal("a refused call has a started row")
	}
}

// A Denial from inside the tool (its resource check) closes the started
// row with a completed row (outcome error) and records a tool_denied row.
func TestResourceDenialFromTool(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	r := c.rpc(callBody(3, "Write", `{"path":"/etc/passwd","body":"x"}`, ""))
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "file_violation" || r.Error.Data.Tool != "Write" {
		t.Fatalf("%+v", r.Error)
	}
	rows := e.audit.all()
	kinds := []audit.Kind{}
	for _, r := range rows {
		kinds = append(kinds, r.Kind)
	}
	want := []audit.Kind{audit.KindToolCallStarted, audit.KindToolCallCompleted, audit.KindToolDenied}
	if !slices.Equal(kinds, want) {
		t.Fatalf("rows %v, want %v", kinds, want)
	}
	if rows[1].str("outcome") != "error" || rows[1].str("error_message") != "denied: file_violation" ||
		rows[1].str("call_id") != rows[0].str("call_id") {
		t.Errorf("completed %v", rows[1].Payload)
	}
	if rows[2].str("reason") != "file_violation" || rows[2].str("attempted_args_hash") != rows[0].str("args_hash") {
		t.Errorf("denied %v", rows[2].Payload)
	}
	if got := metric(e, "Write", "denied"); got != 1 {
		t.Errorf("cyberos_tool_calls_total{Write,denied} = %v", got)
	}
}

// Tool failures: -32000 tool_error / timeout, -32602 for invalid params,
// -32603 tool_error for a panic; every one closes its pair with the right
// outcome, and nothing of the tool's own error text reaches the skill.
func TestToolFailures(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	for _, tc := range []struct {
		tool, reason, outcome, metricOutcome string
		code                                 int
	}{
		{"Grep", "tool_error", "error", "error", -32000},
		{"Edit", "timeout", "timeout", "timeout", -32000},
		{"Glob", "tool_error", "error", "error", -32603},
		{"HttpPost", "", "error", "error", -32602},
	} {
		before := len(e.audit.all())
		r := c.rpc(callBody(1, tc.tool, `{}`, ""))
		if r.Error == nil || r.Error.Code != tc.code || r.reason() != tc.reason {
			t.Errorf("%s: %+v", tc.tool, r.Error)
			continue
		}
		b, _ := json.Marshal(r.Error)
		if strings.Contains(string(b), "/") || strings.Contains(string(b), "errno") || strings.Contains(string(b), "EACCES") {
			t.Errorf("%s: host detail reached the skill: %s", tc.tool, b)
		}
		rows := e.audit.all()[before:]
		if len(rows) != 2 || rows[1].Kind != audit.KindToolCallCompleted || rows[1].str("outcome") != tc.outcome ||
			rows[1].str("error_message") == "" || strings.Contains(rows[1].str("error_message"), "/") {
			t.Errorf("%s: rows %+v", tc.tool, rows)
		}
		if got := metric(e, tc.tool, tc.metricOutcome); got != 1 {
			t.Errorf("%s: cyberos_tool_calls_total{%s} = %v", tc.tool, tc.metricOutcome, got)
		}
	}
	// The broker survived the panic.
	if r := c.rpc(callBody(2, "MemoryRead", `{}`, "")); r.Error != nil {
		t.Fatal(r.Error)
	}
}

// When the started row cannot be written the tool does not run.
func TestAuditUnavailableRefusesCall(t *testing.T) {
	e := startEnv(t)
	e.audit.setFail(audit.KindToolCallStarted)
	c := e.dial()
	r := c.rpc(callBody(1, "MemoryRead", `{}`, ""))
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "audit_unavailable" {
		t.Fatalf("%+v", r.Error)
	}
	if e.tools.calls(policy.ToolMemoryRead) != 0 {
		t.Fatal("the tool ran without its started row")
	}
}

// A failed completed row is logged; the call's result still goes out.
func TestCompletedRowFailureKeepsResult(t *testing.T) {
	e := startEnv(t)
	e.audit.setFail(audit.KindToolCallCompleted)
	c := e.dial()
	if r := c.rpc(callBody(1, "MemoryRead", `{}`, "")); r.Error != nil {
		t.Fatal(r.Error)
	}
}

// AC 16: a 2 MiB request gets request_too_large and the same connection
// keeps working.
func TestRequestTooLargeKeepsConnection(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	big := callBody(1, "Read", `{"blob":"`+strings.Repeat("a", 2<<20)+`"}`, "")
	r := c.rpc(big)
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "request_too_large" || string(r.ID) != "null" {
		t.Fatalf("%+v", r.Error)
	}
	if r := c.rpc(callBody(2, "Read", `{"ok":true}`, "")); r.Error != nil || string(r.ID) != "2" {
		t.Fatalf("the connection did not survive: %+v", r.Error)
	}
	if e.tools.calls(policy.ToolRead) != 1 {
		t.Fatal("the oversized request reached a tool")
	}
}

// A result over 16 MiB is cut to response_too_large (logged, counted) and
// its pair closed with outcome error; a batch whose whole response is over
// the cap is cut as a whole.
func TestResponseTooLarge(t *testing.T) {
	// Writing 15 MiB can take seconds on a loaded machine: a short write
	// deadline would cut the connection, which is not what this tests.
	e := startEnv(t, func(c *Config) { c.FrameTimeout = time.Minute })
	c := e.dial()
	slowRPC := func(body string) wireResponse {
		t.Helper()
		c.send([]byte(body))
		b, err := c.tryRecv(time.Minute) // hashing MiBs is slow under -race
		if err != nil {
			t.Fatal(err)
		}
		return decodeWire(t, b)
	}
	r := slowRPC(callBody(1, "HttpFetch", fmt.Sprintf(`{"n":%d}`, 17<<20), ""))
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "response_too_large" || string(r.ID) != "1" {
		t.Fatalf("%+v", r.Error)
	}
	co := e.audit.kind(audit.KindToolCallCompleted)
	if len(co) != 1 || co[0].str("outcome") != "error" {
		t.Fatalf("completed %+v", co)
	}
	if got := promtest.ToFloat64(e.metrics.ResponseTruncated); got != 1 {
		t.Fatalf("cyberos_broker_responses_truncated_total = %v", got)
	}

	nine := callBody(2, "HttpFetch", fmt.Sprintf(`{"n":%d}`, 9<<20), "")
	r = slowRPC("[" + nine + "," + strings.Replace(nine, `"id":2`, `"id":3`, 1) + "]")
	if r.Error == nil || r.reason() != "response_too_large" || string(r.ID) != "null" {
		t.Fatalf("batch cut: %+v", r.Error)
	}
	if got := promtest.ToFloat64(e.metrics.ResponseTruncated); got != 2 {
		t.Fatalf("cyberos_broker_responses_truncated_total = %v", got)
	}
	// Under the cap, a large result is delivered whole.
	r = slowRPC(callBody(4, "HttpFetch", fmt.Sprintf(`{"n":%d}`, 15<<20), ""))
	if r.Error != nil || len(r.Result) != 15<<20+2 {
		t.Fatalf("15 MiB result: %v, %d bytes", r.Error, len(r.Result))
	}
}

// AC 17: every refusal uses -32603 with a data.reason.
func TestEveryRefusalIsInternalError(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.RatePerMinute = 3 })
	c := e.dial()
	bodies := map[string]string{
		"tool_not_in_allowed_tools": callBody(1, "Bash", `{}`, ""),
		"tool_denied":               callBody(1, "MemoryEmit", `{}`, ""),
		"unknown_tool":              callBody(1, "Nope", `{}`, ""),
		"file_violation":            callBody(1, "Write", `{}`, ""),
		"request_too_large":         strings.Repeat(" ", MaxRequest+1),
	}
	for reason, body := range bodies {
		r := c.rpc(body)
		if r.Error == nil || r.Error.Code != -32603 || r.reason() != reason {
			t.Errorf("%s: %+v", reason, r.Error)
		}
	}
	// Write ran once: one admitted call of three; two more admitted, then
	// the limit.
	for range 2 {
		if r := c.rpc(callBody(1, "MemoryRead", `{}`, "")); r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	if r := c.rpc(callBody(1, "MemoryRead", `{}`, "")); r.Error == nil || r.Error.Code != -32603 || r.reason() != "rate_limited" {
		t.Errorf("rate_limited: %+v", r.Error)
	}
}

// Rate limits count admitted calls per invocation over a sliding minute;
// a limited call is audited as denied.
func TestRateLimit(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.RatePerMinute = 2 })
	now := time.Now()
	var mu sync.Mutex
	e.b.d.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	c := e.dial()
	call := func() wireResponse { return c.rpc(callBody(1, "MemoryRead", `{"q":1}`, "")) }
	if call().Error != nil {
		t.Fatal("first call")
	}
	advance(30 * time.Second)
	if call().Error != nil {
		t.Fatal("second call")
	}
	if r := call(); r.reason() != "rate_limited" {
		t.Fatalf("third call: %+v", r.Error)
	}
	advance(31 * time.Second) // the first call left the window
	if r := call(); r.Error != nil {
		t.Fatalf("after the window moved: %+v", r.Error)
	}
	if r := call(); r.reason() != "rate_limited" {
		t.Fatalf("the second call is still in the window: %+v", r.Error)
	}
	d := e.audit.kind(audit.KindToolDenied)
	if len(d) != 2 || d[0].str("reason") != "rate_limited" || d[0].str("attempted_args_hash") != hashOf(t, `{"q":1}`) {
		t.Fatalf("denied rows %+v", d)
	}
	if s := e.b.Stats(); s.ToolCalls != 5 || s.Denied != 2 {
		t.Errorf("stats %+v", s)
	}
}

// Survival: hostile frames never take the broker down, and a broken
// connection does not affect the others.
func TestSurvivesHostileInput(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.FrameTimeout = 300 * time.Millisecond })
	healthy := func() {
		t.Helper()
		c := e.dial()
		if r := c.rpc(`{"jsonrpc":"2.0","id":"h","method":"broker.status"}`); r.Error != nil {
			t.Fatalf("healthy connection: %+v", r.Error)
		}
		c.Close()
	}

	t.Run("length 0xFFFFFFFF without a body", func(t *testing.T) {
		c := e.dial()
		if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff, '{'}); err != nil {
			t.Fatal(err)
		}
		// The broker tries to discard 4 GiB, times out, says why, hangs up.
		r := decodeWire(t, c.recv())
		if r.reason() != "request_too_large" || r.Error.Code != -32603 {
			t.Fatalf("%+v", r.Error)
		}
		if _, err := c.tryRecv(2 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("connection not closed: %v", err)
		}
		healthy()
	})

	t.Run("invalid JSON", func(t *testing.T) {
		c := e.dial()
		for _, body := range []string{`{"jsonrpc":"2.0",`, "", "\xff\xfe", `{"a":1}}`, "nul"} {
			r := c.rpc(body)
			if r.Error == nil || r.Error.Code != -32700 || string(r.ID) != "null" {
				t.Errorf("%q: %+v", body, r.Error)
			}
		}
		if r := c.rpc(`{"jsonrpc":"2.0","id":1,"method":"tool.list"}`); r.Error != nil {
			t.Fatal(r.Error)
		}
	})

	t.Run("half-sent frame", func(t *testing.T) {
		c := e.dial()
		hdr := make([]byte, 4)
		binary.BigEndian.PutUint32(hdr, 100)
		if _, err := c.Write(append(hdr, `{"jsonrpc"`...)); err != nil {
			t.Fatal(err)
		}
		healthy() // served while the other connection stalls
		start := time.Now()
		if _, err := c.tryRecv(3 * time.Second); !errors.Is(err, io.EOF) {
			t.Fatalf("stalled connection not closed: %v", err)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatal("frame timeout not applied")
		}
		healthy()
	})

	t.Run("batch of 1000", func(t *testing.T) {
		c := e.dial()
		items := make([]string, 1000)
		for i := range items {
			items[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tool.call","params":{"tool":"MemoryRead"}}`, i)
		}
		r := c.rpc("[" + strings.Join(items, ",") + "]")
		if r.Error == nil || r.Error.Code != -32600 || r.reason() != "batch_too_large" {
			t.Fatalf("%+v", r.Error)
		}
		if e.tools.calls(policy.ToolMemoryRead) != 0 {
			t.Fatal("entries of a refused batch ran")
		}
		healthy()
	})

	t.Run("nested 100000 deep", func(t *testing.T) {
		c := e.dial()
		for _, body := range []string{
			strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
			strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000),
			strings.Repeat("[", 100000), // unterminated
			callBody(1, "Read", strings.Repeat(`{"a":`, 100000)+"1"+strings.Repeat("}", 100000), ""),
		} {
			r := c.rpc(body)
			if r.Error == nil || r.Error.Code != -32600 || r.reason() != "nesting_too_deep" {
				t.Errorf("%.20s…: %+v", body, r.Error)
			}
		}
		// Deep but within the limit is fine.
		ok := callBody(1, "Read", strings.Repeat(`{"a":`, 60)+"1"+strings.Repeat("}", 60), "")
		if r := c.rpc(ok); r.Error != nil {
			t.Fatalf("depth 62: %+v", r.Error)
		}
		healthy()
	})

	t.Run("garbage after the peer hangs up", func(t *testing.T) {
		c := e.dial()
		c.Write([]byte{0, 0})
		c.Close()
		healthy()
	})
}

// JSON-RPC 2.0 conformance of the envelope.
func TestJSONRPCEnvelope(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	for _, tc := range []struct {
		body string
		code int
		id   string
	}{
		{`{"jsonrpc":"2.0","method":"nope","id":1}`, -32601, "1"},
		{`{"jsonrpc":"1.0","method":"tool.list","id":1}`, -32600, "1"},
		{`{"method":"tool.list","id":"a"}`, -32600, `"a"`},
		{`{"jsonrpc":"2.0","method":5,"id":1}`, -32600, "1"},
		{`{"jsonrpc":"2.0","id":1}`, -32600, "1"},
		{`{"jsonrpc":"2.0","method":"tool.list","id":{}}`, -32600, "null"},
		{`{"jsonrpc":"2.0","method":"tool.list","id":true}`, -32600, "null"},
		{`{"jsonrpc":"2.0","method":"tool.list","id":1,"extra":1}`, -32600, "1"},
		{`{"jsonrpc":"2.0","method":"tool.list","id":1,"id":2}`, -32600, "null"},
		{`{"jsonrpc":"2.0","method":"tool.list","params":5,"id":1}`, -32600, "1"},
		{`{"jsonrpc":"2.0","method":"tool.list","params":null,"id":1}`, -32600, "1"},
		{`[]`, -32600, "null"},
		{`5`, -32600, "null"},
		{`"x"`, -32600, "null"},
		{`{"jsonrpc":"2.0","method":"tool.call","id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":[],"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"args":{}},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":5},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","args":[1]},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","extra":1},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","tool":"Bash"},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","traceparent":"00-bad"},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","_meta":{"traceparent":"x"}},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Read","_meta":[]},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"` + strings.Repeat("x", 200) + `"},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Re\nad"},"id":1}`, -32602, "1"},
		{`{"jsonrpc":"2.0","method":"tool.list","params":{"x":1},"id":1}`, -32602, "1"},
	} {
		r := c.rpc(tc.body)
		if r.Error == nil || r.Error.Code != tc.code || string(r.ID) != tc.id {
			t.Errorf("%s: got id %s error %+v, want code %d id %s", tc.body, r.ID, r.Error, tc.code, tc.id)
		}
	}
	// No tool rows: one skill.protocol_abuse row per kind, the counts kept.
	var kinds []string
	for _, r := range e.audit.all() {
		if r.Kind != audit.KindProtocolAbuse {
			t.Errorf("malformed requests wrote a %s row", r.Kind)
		}
		kinds = append(kinds, r.str("abuse_kind"))
	}
	if fmt.Sprint(kinds) != "[unknown_method invalid_request invalid_params]" {
		t.Errorf("protocol_abuse rows %v; want one per kind", kinds)
	}
	if got := fmt.Sprint(e.b.ProtocolAbuse()); got != "map[invalid_params:13 invalid_request:13 unknown_method:1]" {
		t.Errorf("abuse counts %s", got)
	}
	// Ids come back exactly as sent.
	for _, id := range []string{`"abc"`, `null`, `1.5e3`, `-7`, `"` + strings.Repeat("i", 1000) + `"`} {
		r := c.rpc(`{"jsonrpc":"2.0","method":"tool.list","params":{},"id":` + id + `}`)
		if r.Error != nil || string(r.ID) != id {
			t.Errorf("id %s: got %s %+v", id, r.ID, r.Error)
		}
	}
	// A batch answers each entry; entries that are not requests get -32600.
	c.send([]byte(`[{"jsonrpc":"2.0","method":"tool.list","id":1}, 5, {"jsonrpc":"2.0","method":"broker.status","id":2}]`))
	var batch []wireResponse
	if err := json.Unmarshal(c.recv(), &batch); err != nil || len(batch) != 3 {
		t.Fatalf("batch: %v %v", batch, err)
	}
	if string(batch[0].ID) != "1" || batch[0].Error != nil || batch[1].Error.Code != -32600 || string(batch[2].ID) != "2" {
		t.Errorf("batch %+v", batch)
	}
}

// Notifications are executed (and audited) but never answered; a batch of
// only notifications gets no response at all.
func TestNotifications(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	c.send([]byte(`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"MemoryRead"}}`))
	c.send([]byte(`{"jsonrpc":"2.0","method":"no.such.method"}`))
	c.send([]byte(`[{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"MemoryRead"}},{"jsonrpc":"2.0","method":"tool.list"}]`))
	c.send([]byte(`[{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"MemoryRead"}},{"jsonrpc":"2.0","method":"tool.list","id":9}]`))
	var batch []wireResponse
	if err := json.Unmarshal(c.recv(), &batch); err != nil || len(batch) != 1 || string(batch[0].ID) != "9" {
		t.Fatalf("first answer on the wire: %+v %v", batch, err)
	}
	if e.tools.calls(policy.ToolMemoryRead) != 3 {
		t.Errorf("notification calls ran %d times, want 3", e.tools.calls(policy.ToolMemoryRead))
	}
	if n := len(e.audit.kind(audit.KindToolCallCompleted)); n != 3 {
		t.Errorf("%d completed rows, want 3 (notifications are audited)", n)
	}
	// An invalid request without an id still gets an answer (id null).
	if r := c.rpc(`{"jsonrpc":"2.0","method":7}`); r.Error == nil || r.Error.Code != -32600 || string(r.ID) != "null" {
		t.Fatalf("%+v", r)
	}
}

// tool.list shows only what the enforcer allows, in KnownTools order.
func TestToolList(t *testing.T) {
	e := startEnv(t)
	c, err := skillclient.Dial(e.b.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ti := range list {
		names = append(names, ti.Name)
		if ti.Description != "fake "+ti.Name {
			t.Errorf("%s: description %q", ti.Name, ti.Description)
		}
	}
	if !slices.Equal(names, allowedInOrder) {
		t.Fatalf("tool.list %v, want %v", names, allowedInOrder)
	}

	// A skill allowed nothing lists nothing (an empty array, not null).
	e2 := startEnv(t, func(c *Config) {
		c.Env = &tools.Env{Enforcer: testEnforcer(t, "---\nname: bare\ndescription: none\n---\n")}
	})
	r := e2.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"tool.list"}`)
	if string(r.Result) != `{"tools":[]}` {
		t.Fatalf("empty list: %s", r.Result)
	}
}

func TestBrokerStatus(t *testing.T) {
	e := startEnv(t)
	c, err := skillclient.Dial(e.b.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	_ = c.Call(ctx, "MemoryRead", nil, nil)
	_ = c.Call(ctx, "Bash", nil, nil)
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.InvocationID != e.cfg.Common.InvocationID || s.SkillID != "test-skill" || s.ToolCalls != 2 || s.Denied != 1 || s.UptimeMS < 0 {
		t.Fatalf("status %+v", s)
	}
	r := e.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`)
	var m map[string]any
	_ = json.Unmarshal(r.Result, &m)
	for _, k := range []string{"invocation_id", "skill_id", "tool_calls", "denied", "uptime_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("broker.status lacks %q: %s", k, r.Result)
		}
	}
}

// The call's trace: params.traceparent, else params._meta.traceparent (as
// MCP sends it), else the invocation's.
func TestTraceparentSources(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	other := "00-11111111111111111111111111111111-2222222222222222-01"
	for _, tc := range []struct{ extra, traceID string }{
		{`"traceparent":"` + testTraceparent + `"`, testTraceID},
		{`"_meta":{"traceparent":"` + testTraceparent + `","progressToken":1}`, testTraceID},
		{`"_meta":{"traceparent":"` + other + `"},"traceparent":"` + testTraceparent + `"`, testTraceID},
		{`"_meta":{}`, invTraceID},
		{``, invTraceID},
	} {
		r := c.rpc(callBody(1, "Read", `{}`, tc.extra))
		var res struct {
			TraceID string `json:"trace_id"`
			TP      string `json:"traceparent"`
		}
		if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || res.TraceID != tc.traceID || !strings.Contains(res.TP, tc.traceID) {
			t.Errorf("%s: %+v %s", tc.extra, r.Error, r.Result)
		}
		rows := e.audit.all()
		for _, row := range rows[len(rows)-2:] {
			if row.str("trace_id") != tc.traceID {
				t.Errorf("%s: row trace_id %s, want %s", tc.extra, row.str("trace_id"), tc.traceID)
			}
		}
	}
}

// A peer AllowPeer refuses is closed before it is served; AllowPeer sees
// the connecting pid.
func TestPeerCheck(t *testing.T) {
	var mu sync.Mutex
	var seen []int32
	allow := false
	e := startEnv(t, func(c *Config) {
		c.AllowPeer = func(pid int32) bool {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, pid)
			return allow
		}
	})
	c := e.dial()
	c.trySend([]byte(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`))
	if _, err := c.tryRecv(2 * time.Second); err == nil {
		t.Fatal("a refused peer was served")
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != int32(os.Getpid()) {
		t.Fatalf("AllowPeer saw %v, want [%d]", seen, os.Getpid())
	}
	allow = true
	mu.Unlock()
	if r := e.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`); r.Error != nil {
		t.Fatal(r.Error)
	}
}

// A peer whose uid is neither SocketUID nor root is refused (needs root to
// connect as another uid).
func TestPeerUIDCheck(t *testing.T) {
	testutil.RequiresRoot(t)
	e := startEnv(t, func(c *Config) { c.SocketUID, c.SocketGID = 4242, 4242 })
	if err := os.Chmod(filepath.Dir(e.b.Path()), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.b.Path(), 0o666); err != nil { // let uid 4343 reach accept
		t.Fatal(err)
	}
	cred := &syscall.Credential{Uid: 4343, Gid: 4343}
	out, err := helperProcess(t, cred, e.b.Path())
	if err == nil || !strings.Contains(out, "refused") {
		t.Fatalf("a foreign uid was served: %v %s", err, out)
	}
	if r := e.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`); r.Error != nil {
		t.Fatal(r.Error) // root is allowed
	}
}

// No connection within NoConnectAfter: one no_connect row, OnNoConnect.
func TestNoConnect(t *testing.T) {
	fired := make(chan struct{}, 2)
	e := startEnv(t, func(c *Config) {
		c.NoConnectAfter = 50 * time.Millisecond
		c.OnNoConnect = func() { fired <- struct{}{} }
	})
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("OnNoConnect not called")
	}
	// The row is emitted before OnNoConnect is called.
	rows := e.audit.kind(audit.KindNoConnect)
	if len(rows) != 1 || rows[0].str("invocation_id") != e.cfg.Common.InvocationID || rows[0].Payload["waited_ms"] != float64(50) {
		t.Fatalf("no_connect rows %+v", rows)
	}
	// The broker still serves a late skill, and its connection does not
	// fire the callback again.
	if r := e.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`); r.Error != nil {
		t.Fatal(r.Error)
	}
	if len(fired) != 0 {
		t.Fatal("OnNoConnect called twice")
	}

	// A skill that connects in time gets no row.
	e2 := startEnv(t, func(c *Config) { c.NoConnectAfter = 200 * time.Millisecond })
	e2.dial().rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`)
	time.Sleep(300 * time.Millisecond) // the subject: past NoConnectAfter, still no row
	if rows := e2.audit.kind(audit.KindNoConnect); len(rows) != 0 {
		t.Fatalf("no_connect after a connection: %+v", rows)
	}
}

// The socket: named for the invocation, mode 0600, owned by SocketUID and
// SocketGID, removed by Close.
func TestSocketFile(t *testing.T) {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 12345, 23456
	}
	e := startEnv(t, func(c *Config) { c.SocketUID, c.SocketGID = uid, gid })
	p := e.b.Path()
	if filepath.Base(p) != "cyberos-skill-broker."+e.cfg.Common.InvocationID+".sock" || filepath.Dir(p) != e.cfg.SocketDir {
		t.Fatalf("path %s", p)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("socket %v uid %d gid %d", fi.Mode(), st.Uid, st.Gid)
	}
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if err := e.b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.Dial("unix", p); err == nil {
		t.Fatal("dial after Close worked")
	}
}

// Start refuses an unsafe directory, a path already taken (never unlinking
// it), and an incomplete configuration.
func TestStartRefuses(t *testing.T) {
	cfg, _, _ := testConfig(t)
	path := filepath.Join(cfg.SocketDir, SocketName(cfg.Common.InvocationID))

	// A file, a symlink, a stale socket at the path: refused, left alone.
	if err := os.WriteFile(path, []byte("attacker"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(cfg); err == nil {
		t.Fatal("started over an existing file")
	}
	if b, _ := os.ReadFile(path); string(b) != "attacker" {
		t.Fatal("the existing file was touched")
	}
	os.Remove(path)
	if err := os.Symlink("/nonexistent/target", path); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(cfg); err == nil {
		t.Fatal("started over a symlink")
	}
	if l, err := os.Readlink(path); err != nil || l != "/nonexistent/target" {
		t.Fatal("the symlink was touched")
	}
	os.Remove(path)

	mod := func(f func(*Config)) Config { c := cfg; f(&c); return c }
	other := socketDir(t)
	if err := os.Chmod(other, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(socketDir(t), "link")
	if err := os.Symlink(cfg.SocketDir, link); err != nil {
		t.Fatal(err)
	}
	missing := map[policy.Tool]tools.Tool{}
	for k, v := range cfg.Tools {
		if k != policy.ToolBash {
			missing[k] = v
		}
	}
	for name, c := range map[string]Config{
		"dir mode 0755":        mod(func(c *Config) { c.SocketDir = other }),
		"dir is a symlink":     mod(func(c *Config) { c.SocketDir = link }),
		"dir missing":          mod(func(c *Config) { c.SocketDir = filepath.Join(cfg.SocketDir, "nope") }),
		"relative dir":         mod(func(c *Config) { c.SocketDir = "rel" }),
		"registry incomplete":  mod(func(c *Config) { c.Tools = missing }),
		"no enforcer":          mod(func(c *Config) { c.Env = &tools.Env{} }),
		"no audit":             mod(func(c *Config) { c.Audit = nil }),
		"invocation id a path": mod(func(c *Config) { c.Common.InvocationID = "../x" }),
		"no skill id":          mod(func(c *Config) { c.Common.SkillID = "" }),
		"bad traceparent":      mod(func(c *Config) { c.Traceparent = "00-zz" }),
	} {
		if b, err := Start(c); err == nil {
			b.Close()
			t.Errorf("%s: started", name)
		}
	}
	// And with all of that fixed, it starts.
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// Several connections at once, all served.
func TestConcurrentConnections(t *testing.T) {
	e := startEnv(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			c, err := skillclient.Dial(e.b.Path())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for range 50 {
				if err := c.Call(context.Background(), "MemoryRead", map[string]int{"a": 1}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, co := e.audit.kind(audit.KindToolCallStarted), e.audit.kind(audit.KindToolCallCompleted)
	if len(st) != 400 || len(co) != 400 {
		t.Fatalf("%d started, %d completed, want 400 each", len(st), len(co))
	}
	ids := map[string]int{}
	for _, r := range st {
		ids[r.str("call_id")]++
	}
	for _, r := range co {
		ids[r.str("call_id")]--
	}
	for id, n := range ids {
		if n != 0 {
			t.Fatalf("call %s unpaired", id)
		}
	}
}

// Connections over MaxConns are closed at once; the others are served.
func TestMaxConns(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxConns = 2 })
	a, b := e.dial(), e.dial()
	a.rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`)
	b.rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`)
	c := e.dial()
	c.trySend([]byte(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`))
	if _, err := c.tryRecv(2 * time.Second); err == nil {
		t.Fatal("a third connection was served")
	}
	a.Close()
	testutil.WaitFor(t, 2*time.Second, func() bool {
		d := e.dial()
		d.trySend([]byte(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`))
		_, err := d.tryRecv(time.Second)
		d.Close()
		return err == nil
	})
}

// Close waits for calls in flight: their tools see a cancelled context and
// their completed rows are written before Close returns.
func TestCloseWaitsForInFlightCalls(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	c.send([]byte(callBody(1, "MemorySearch", `{}`, "")))
	<-e.tools.entered
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	co := e.audit.kind(audit.KindToolCallCompleted)
	if len(co) != 1 || co[0].str("outcome") != "error" {
		t.Fatalf("completed rows after Close: %+v", co)
	}
	if _, err := os.Lstat(e.b.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("socket left behind")
	}
}

// A call that finishes normally while another connection idles.
func TestIdleConnectionDoesNotTimeOut(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.FrameTimeout = 100 * time.Millisecond })
	c := e.dial()
	time.Sleep(300 * time.Millisecond) // idle between frames is allowed
	if r := c.rpc(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`); r.Error != nil {
		t.Fatal(r.Error)
	}
}

// helperProcess runs this test binary as another user, as a client of the
// socket at path (TestHelperClient); it returns what the client printed.
func helperProcess(t *testing.T, cred *syscall.Credential, path string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The build directory is private to root: copy the binary out.
	dir := socketDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperClient$")
	cmd.Env = []string{"BROKER_HELPER_SOCKET=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelperClient is the client helperProcess runs; otherwise it does
// nothing.
func TestHelperClient(t *testing.T) {
	path := os.Getenv("BROKER_HELPER_SOCKET")
	if path == "" {
		return
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("refused: dial:", err)
		os.Exit(1)
	}
	cc := &conn{t: t, Conn: c}
	cc.trySend([]byte(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`))
	if _, err := cc.tryRecv(2 * time.Second); err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("served")
}

// The audit row cap: every call up to it is audited in full, the call that
// would go over and every later one are refused unaudited, the cap is
// recorded once and OnAuditCap called once; no more rows than the cap.
func TestAuditRowCap(t *testing.T) {
	var capped atomic.Int32
	const max, others = 40, 3
	e := startEnv(t, func(c *Config) {
		c.MaxAuditRows, c.OtherAuditRows = max, others
		c.OnAuditCap = func() { capped.Add(1) }
	})
	c := e.dial()
	var reasons []string
	for i := range 60 {
		tool := "Bash" // denied: one row
		if i%3 == 0 {
			tool = "Read" // allowed: two rows
		}
		reasons = append(reasons, c.rpc(callBody(i, tool, `{"path":"/etc/hostname"}`, "")).reason())
	}
	rows := e.audit.all()
	if len(rows) > max-others {
		t.Errorf("%d rows; the cap leaves the broker %d", len(rows), max-others)
	}
	var capRows []row
	for _, r := range rows {
		if r.Kind == audit.KindAuditCapReached {
			capRows = append(capRows, r)
		}
	}
	if len(capRows) != 1 || capRows[0].Payload["max_audit_rows"] != float64(max) || capped.Load() != 1 {
		t.Fatalf("cap rows %+v, OnAuditCap called %d times", capRows, capped.Load())
	}
	first := slices.Index(reasons, ReasonAuditCapReached)
	if first < 0 || slices.ContainsFunc(reasons[first:], func(r string) bool { return r != ReasonAuditCapReached }) {
		t.Fatalf("reasons %v: want audit_cap_reached from one call on", reasons)
	}
	// Every call before the cap has its rows.
	tools := len(e.audit.kind(audit.KindToolDenied)) + len(e.audit.kind(audit.KindToolCallStarted))
	if tools != first || len(e.audit.kind(audit.KindToolCallCompleted)) != len(e.audit.kind(audit.KindToolCallStarted)) {
		t.Errorf("%d calls before the cap, %d audited", first, tools)
	}
	if !e.b.AuditCapReached() {
		t.Error("AuditCapReached false")
	}
}

// Text where a length prefix belongs (an HTTP request) is answered with a
// parse error at once and the connection closed; the abuse is recorded
// once per kind however often it comes, and repeated warnings are counted,
// not logged.
func TestProtocolAbuseRecordedOncePerKind(t *testing.T) {
	var logs bytes.Buffer
	var first []string
	e := startEnv(t, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
		c.OnProtocolAbuse = func(kind string) { first = append(first, kind) }
	})
	for range 20 {
		c := e.dial()
		c.Write([]byte("GET /info HTTP/1.0\r\n\r\n"))
		b, err := c.tryRecv(2 * time.Second)
		if err != nil {
			t.Fatalf("no answer to an HTTP request: %v", err)
		}
		if r := decodeWire(t, b); r.Error == nil || r.Error.Code != CodeParseError {
			t.Fatalf("HTTP request answered %s", b)
		}
		if _, err := c.tryRecv(2 * time.Second); err == nil {
			t.Fatal("the connection stayed open after an HTTP request")
		}
	}
	rows := e.audit.kind(audit.KindProtocolAbuse)
	if len(rows) != 1 || rows[0].str("abuse_kind") != audit.AbuseNotJSONRPC {
		t.Fatalf("protocol_abuse rows %+v", rows)
	}
	if n := e.b.ProtocolAbuse()[audit.AbuseNotJSONRPC]; n != 20 {
		t.Errorf("count %d, want 20", n)
	}
	e.b.Close()
	if n := strings.Count(logs.String(), "not a framed request"); n != logBurst+1 {
		t.Errorf("%d log lines name the abuse; want %d and a summary\n%s", n, logBurst+1, logs.String())
	}
	if !strings.Contains(logs.String(), "suppressed=15") || fmt.Sprint(first) != "[not_json_rpc]" {
		t.Errorf("no summary of the suppressed lines, or OnProtocolAbuse %v\n%s", first, logs.String())
	}
}

// Connections are accepted at a bounded rate: a burst, then, once the
// bucket is empty, a batch of them per batch/rate.
func TestAcceptRate(t *testing.T) {
	k := bucket{rate: 100, burst: 20, tokens: 20, last: time.Unix(0, 0)}
	now := time.Unix(0, 0)
	for range 20 {
		if w := k.take(now); w != 0 {
			t.Fatalf("the burst waits %v", w)
		}
	}
	w := k.take(now)
	if w != 100*time.Millisecond {
		t.Fatalf("past the burst: wait %v, want 100ms (a batch of %d at 100/s)", w, acceptBatch)
	}
	now = now.Add(w)
	for i := range acceptBatch - 1 {
		if w := k.take(now); w != 0 {
			t.Fatalf("take %d of the batch waits %v", i, w)
		}
	}
	if w := k.take(now); w == 0 {
		t.Fatal("more than a batch without waiting")
	}
}

// Hold: until it is closed no connection is accepted, so no call is read
// or audited (the supervisor closes it once the started row is durable);
// then the waiting connection is served. A broker closed while holding
// ends without serving it.
func TestHoldDelaysEveryCall(t *testing.T) {
	hold := make(chan struct{})
	e := startEnv(t, func(c *Config) { c.Hold = hold })
	c := e.dial() // queued in the listen backlog
	c.send([]byte(callBody(1, "Bash", `{"cmd":"true"}`, "")))
	if b, err := c.tryRecv(200 * time.Millisecond); err == nil {
		t.Fatalf("answered while held: %s", b)
	}
	if rows := e.audit.all(); len(rows) != 0 {
		t.Fatalf("rows written while held: %+v", rows)
	}
	close(hold)
	if r := decodeWire(t, c.recv()); r.Error == nil || r.reason() != "tool_not_in_allowed_tools" {
		t.Fatalf("after the hold: %+v, want the call judged (denied)", r)
	}
	if rows := e.audit.all(); len(rows) == 0 {
		t.Fatal("no row for the call judged after the hold")
	}

	e2 := startEnv(t, func(c *Config) { c.Hold = make(chan struct{}) })
	c2 := e2.dial()
	c2.send([]byte(`{"jsonrpc":"2.0","id":1,"method":"broker.status"}`))
	if err := e2.b.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := c2.tryRecv(time.Second); err == nil {
		t.Fatalf("a broker closed while holding answered: %s", b)
	}
	if rows := e2.audit.all(); len(rows) != 0 {
		t.Fatalf("rows written by a broker closed while holding: %+v", rows)
	}
}
