package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// errorObject maps every class once; what it says carries no host detail.
func TestErrorObject(t *testing.T) {
	hostly := ": open /var/lib/cyberos/x: errno 13"
	for _, tc := range []struct {
		err    error
		code   int
		reason string
	}{
		{&policy.Denial{Reason: policy.ReasonScope, Tool: policy.ToolMemoryRead, Detail: "memory path \"a\" is not in allowed_memory_scopes"}, -32603, "scope_violation"},
		{fmt.Errorf("wrapped: %w", &policy.Denial{Reason: policy.ReasonDomain, Tool: policy.ToolHttpFetch}), -32603, "domain_violation"},
		{&FrameTooLargeError{Length: 2 << 20, Max: MaxRequest}, -32603, "request_too_large"},
		{errResponseTooLarge, -32603, "response_too_large"},
		{errAuditUnavailable, -32603, "audit_unavailable"},
		{errToolPanic, -32603, "tool_error"},
		{errParse, -32700, ""},
		{errBatchTooLarge, -32600, "batch_too_large"},
		{errEmptyBatch, -32600, ""},
		{errTooDeep, -32600, "nesting_too_deep"},
		{fmt.Errorf("%w: x", errInvalidRequest), -32600, ""},
		{errMethodNotFound, -32601, ""},
		{invalidParams("tool is required"), -32602, ""},
		{fmt.Errorf("%w"+hostly, tools.ErrInvalidParams), -32602, ""},
		{fmt.Errorf("%w"+hostly, tools.ErrTimeout), -32000, "timeout"},
		{fmt.Errorf("%w"+hostly, tools.ErrNotFound), -32000, "tool_error"},
		{fmt.Errorf("%w"+hostly, tools.ErrTooLarge), -32000, "tool_error"},
		{fmt.Errorf("%w"+hostly, tools.ErrFailed), -32000, "tool_error"},
		{errors.New("anything else" + hostly), -32000, "tool_error"},
	} {
		e := errorObject(tc.err)
		got := ""
		if e.Data != nil {
			got = e.Data.Reason
		}
		if e.Code != tc.code || got != tc.reason || e.Message == "" {
			t.Errorf("%v: %+v, want %d %q", tc.err, e, tc.code, tc.reason)
		}
		b, _ := json.Marshal(e)
		if strings.Contains(string(b), "/var") || strings.Contains(string(b), "errno") {
			t.Errorf("%v: host detail in %s", tc.err, b)
		}
	}
}

func TestTooDeep(t *testing.T) {
	for _, tc := range []struct {
		s    string
		deep bool
	}{
		{`{"a":[1,2,{"b":3}]}`, false},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), false},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), true},
		{`"` + strings.Repeat("[", 1000) + `"`, false},   // inside a string
		{`"\"` + strings.Repeat("{", 1000) + `"`, false}, // after an escaped quote
		{`"\\"` + strings.Repeat("{", 1000), true},       // the string ended
		{strings.Repeat("[]", 10000), false},             // wide, not deep
		{strings.Repeat("[", 100000), true},
	} {
		if got := tooDeep([]byte(tc.s), MaxDepth); got != tc.deep {
			t.Errorf("%.30s…: %v, want %v", tc.s, got, tc.deep)
		}
	}
}

// fuzzDispatcher is a dispatcher over fast fakes: no socket, no blocking
// tool, no multi-MiB results.
func fuzzDispatcher(t testing.TB) *dispatcher {
	ft := newFakeTools()
	ft.m[policy.ToolMemorySearch] = &fakeTool{name: policy.ToolMemorySearch, fn: func(context.Context, *tools.Call) (any, error) {
		return []int{1, 2, 3}, nil
	}}
	ft.m[policy.ToolHttpFetch] = &fakeTool{name: policy.ToolHttpFetch, fn: func(context.Context, *tools.Call) (any, error) {
		return "fetched", nil
	}}
	return &dispatcher{
		common:      audit.Common{InvocationID: "inv", SkillID: "test-skill", TraceID: invTraceID},
		env:         &tools.Env{Enforcer: testEnforcer(t, testSkill)},
		tools:       ft.m,
		audit:       &fakeAudit{},
		log:         slog.New(slog.DiscardHandler),
		traceparent: "00-" + invTraceID + "-b7ad6b7169203331-01",
		limiter:     &window{limit: 1000},
		started:     time.Now(),
		now:         time.Now,
	}
}

// checkResponse holds one response object to JSON-RPC 2.0.
func checkResponse(t *testing.T, raw json.RawMessage) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("response is not an object: %s", raw)
	}
	_, hasResult := m["result"]
	_, hasError := m["error"]
	id, hasID := m["id"]
	if string(m["jsonrpc"]) != `"2.0"` || hasResult == hasError || !hasID || len(m) != 3 {
		t.Fatalf("not a JSON-RPC 2.0 response: %s", raw)
	}
	switch jsonKind(id) {
	case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
	default:
		t.Fatalf("bad id in %s", raw)
	}
	if hasError {
		var e RPCError
		if err := json.Unmarshal(m["error"], &e); err != nil || e.Code == 0 || e.Message == "" {
			t.Fatalf("bad error object in %s", raw)
		}
	}
}

// silent reports whether body may legitimately get no response: a request
// object without "id", or a non-empty batch of only such objects.
func silent(body []byte) bool {
	isNotification := func(raw json.RawMessage) bool {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || m == nil {
			return false
		}
		_, hasID := m["id"]
		return !hasID
	}
	switch jsonKind(body) {
	case '{':
		return isNotification(body)
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(body, &items) != nil || len(items) == 0 {
			return false
		}
		for _, it := range items {
			if !isNotification(it) {
				return false
			}
		}
		return true
	}
	return false
}

// FuzzDispatch: any bytes as a frame body never panic the dispatcher and
// get exactly one valid JSON-RPC response (an object, or a non-empty array
// of them), or none, only for notifications.
func FuzzDispatch(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"Read","args":{"path":"/tmp/x"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tool.call","params":{"tool":"Bash","args":{"cmd":"ls"},"traceparent":"` + testTraceparent + `"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tool.call","params":{"tool":"Glob","_meta":{"traceparent":"` + testTraceparent + `"}}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tool.list"}`,
		`{"jsonrpc":"2.0","method":"tool.call","params":{"tool":"Grep"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"broker.status"},{"jsonrpc":"2.0","method":"tool.list"},5]`,
		`[{"jsonrpc":"2.0","method":"tool.list"}]`,
		`[]`, `{}`, `[[[]]]`, `"x"`, `{"jsonrpc":"2.0","id":1,"id":2,"method":"tool.list"}`,
		`{"jsonrpc":"2.0","id":1.5e300,"method":"tool.call","params":{"tool":"Write","args":{"n":1e400}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"Edit","args":null}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"HttpPost","args":{"a":"\ud800"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d := fuzzDispatcher(t)
		out := d.handle(context.Background(), body)
		// Every audit row the body caused is valid (fakeAudit validates)
		// and every started row is closed.
		open := 0
		for _, r := range d.audit.(*fakeAudit).all() {
			switch r.Kind {
			case audit.KindToolCallStarted:
				open++
			case audit.KindToolCallCompleted:
				open--
			}
		}
		if open != 0 {
			t.Fatalf("unpaired started rows for %q", body)
		}
		for _, leak := range [][]byte{[]byte("/host/path"), []byte("/var/lib/secret"), []byte("errno")} {
			if bytes.Contains(out, leak) && !bytes.Contains(body, leak) {
				t.Fatalf("host detail in %s", out)
			}
		}
		if out == nil {
			if !silent(body) {
				t.Fatalf("no response to %q", body)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON response %q", out)
		}
		if jsonKind(out) == '[' {
			var items []json.RawMessage
			if err := json.Unmarshal(out, &items); err != nil || len(items) == 0 {
				t.Fatalf("bad batch response %s", out)
			}
			for _, it := range items {
				checkResponse(t, it)
			}
			return
		}
		checkResponse(t, out)
	})
}

// TestErrorObjectSkillDetail: a tool's own message for the skill is passed
// on as data.detail; any other tool error text stays out.
func TestErrorObjectSkillDetail(t *testing.T) {
	e := errorObject(&tools.SkillError{Class: tools.ErrFailed, Msg: "old_string not found"})
	if e.Code != CodeToolError || e.Data == nil || e.Data.Detail != "old_string not found" {
		t.Errorf("skill error: %+v %+v", e, e.Data)
	}
	e = errorObject(fmt.Errorf("%w: open /var/lib/secret: permission denied", tools.ErrFailed))
	if e.Data == nil || e.Data.Detail != "" || strings.Contains(e.Message, "/var") {
		t.Errorf("host text reached the skill: %+v %+v", e, e.Data)
	}
	e = errorObject(fmt.Errorf("wrapped: %w", &tools.SkillError{Class: tools.ErrInvalidParams, Msg: "url is required"}))
	if e.Code != CodeInvalidParams || e.Data == nil || e.Data.Detail != "url is required" {
		t.Errorf("invalid params: %+v %+v", e, e.Data)
	}
}

// objectMembersCases are objects (and things that are not) for the
// scanner and the decoder to agree on.
var objectMembersCases = []string{
	`{}`, ` { } `, `{"a":1}`, "{\n\"a\" :\t1 , \"b\": -2.5e3 }\n", `{"a":"x\"}y","b":[1,{"c":"]"}],"d":{"e":[]}}`,
	`{"jsonrpc":"2.0","id":7,"method":"tool.call","params":{"tool":"Read","args":{"path":"a b"}}}`,
	`{"a":true,"b":false,"c":null}`, `{"a":"\\"}`, `{"a":"é"}`, `{"é":1}`, `{"\u0061":1}`, `{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`, `[1]`, `"x"`, `{"a":1}x`, `{"a":}`, `{"a":1,}`, ``, `{"a":1} {}`, "{\"a\":\"\xff\"}", "{\"\xff\":1}",
}

// The fast path splits exactly what the decoder does, or defers to it.
func TestScanMembersAgreesWithDecoder(t *testing.T) {
	for _, in := range objectMembersCases {
		checkScanMembers(t, []byte(in))
	}
	for _, in := range objectMembersCases[:7] { // plain keys: the fast path
		if _, ok := scanMembers([]byte(in)); !ok {
			t.Errorf("%q went to the decoder", in)
		}
	}
}

func checkScanMembers(t *testing.T, in []byte) {
	t.Helper()
	got, ok := scanMembers(in)
	if !ok {
		return
	}
	want, err := decodeMembers(in)
	if err != nil {
		t.Fatalf("%q: scanned as %v, the decoder says %v", in, got, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%q: scanned %v, decoded %v", in, got, want)
	}
	for i := range got {
		if got[i].key != want[i].key || !bytes.Equal(got[i].val, want[i].val) {
			t.Fatalf("%q: member %d scanned %q=%s, decoded %q=%s", in, i, got[i].key, got[i].val, want[i].key, want[i].val)
		}
	}
}

func FuzzScanMembers(f *testing.F) {
	for _, in := range objectMembersCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkScanMembers(t, in) })
}
