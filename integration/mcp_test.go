//go:build linux

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/testutil"
)

const (
	mcpTenantA = "aaaaaaaa-0000-4000-8000-000000000001"
	mcpTenantB = "bbbbbbbb-0000-4000-8000-000000000002"
)

// mcpSkills installs the skills the MCP tests call: greet (an input schema,
// no tools: read-only), writer (may emit memory), fails (exits 1), slow.
func mcpSkills(e *env) {
	e.skill("greet", "x-input-schema:\n  type: object\n  properties:\n    name: {type: string, maxLength: 20}\n  required: [name]\n  additionalProperties: false\nx-output-schema:\n  type: object\n",
		"#!/bin/sh\nn=$(sed -n 's/.*\"name\":\"\\([^\"]*\\)\".*/\\1/p')\nprintf '{\"greeting\":\"hello %s\"}\\n' \"$n\"\n")
	e.skill("writer", "allowed_tools: [MemoryEmit]\nallowed_memory_scopes: [\"notes/**\"]\n", "#!/bin/sh\necho '{\"ok\":true}'\n")
	e.skill("fails", "", "#!/bin/sh\necho 'broken on purpose' >&2\nexit 1\n")
}

// mcpStdio connects the SDK's client to `cyberos mcp serve` for tenant.
func mcpStdio(t *testing.T, d *daemonProc, tenant string, opts ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), slow(30*time.Second))
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, clientOpts(opts))
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cyberos("mcp", "serve", "--socket", d.adminSocket, "--tenant", tenant)}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// headerRT adds a header to every request.
type headerRT struct {
	rt     http.RoundTripper
	header http.Header
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.rt.RoundTrip(r)
}

// mcpHTTP connects the SDK's client to the daemon's /mcp (Streamable
// HTTP on the admin socket), the tenant in the header.
func mcpHTTP(t *testing.T, d *daemonProc, tenant string, opts ...*mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), slow(30*time.Second))
	defer cancel()
	hc := &http.Client{Transport: headerRT{rt: d.client.Transport, header: http.Header{"Cyberos-Tenant": {tenant}}}}
	c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, clientOpts(opts))
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://cyberos/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func clientOpts(o []*mcp.ClientOptions) *mcp.ClientOptions {
	if len(o) > 0 {
		return o[0]
	}
	return nil
}

// mcpConnect connects a client session to the daemon for a tenant.
type mcpConnect func(t *testing.T, d *daemonProc, tenant string, opts ...*mcp.ClientOptions) *mcp.ClientSession

// mcpTransports are the two ways a client reaches the skills.
var mcpTransports = []struct {
	name    string
	connect mcpConnect
}{{"stdio", mcpStdio}, {"http", mcpHTTP}}

// startedRows returns the skill.invoked_started rows' payloads of skill.
func startedRows(e *env, skill string) []map[string]any {
	var out []map[string]any
	for _, r := range e.auditRows() {
		if r.Kind != "skill.invoked_started" {
			continue
		}
		var p map[string]any
		if json.Unmarshal(r.Payload, &p) == nil && p["skill_id"] == skill {
			out = append(out, p)
		}
	}
	return out
}

// TestMCPToolsAndCalls: the SDK's client over `cyberos mcp serve` and /mcp
// lists the skills as tools (schemas, readOnlyHint), calls one (result as
// structuredContent and text, tenant from --tenant), gets isError with the
// invocation id for a failing skill, and -32602 for bad arguments (refused
// before any sandbox: no started row) and for an unknown tool.
func TestMCPToolsAndCalls(t *testing.T) {
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) { testMCPToolsAndCalls(t, tr.connect) })
	}
}

func testMCPToolsAndCalls(t *testing.T, connect mcpConnect) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	cs := connect(t, d, mcpTenantA)
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range lt.Tools {
		tools[tl.Name] = tl
	}
	if len(tools) != 3 || tools["greet"] == nil || tools["writer"] == nil || tools["fails"] == nil {
		t.Fatalf("tools: %v", tools)
	}
	in, _ := json.Marshal(tools["greet"].InputSchema)
	if !strings.Contains(string(in), `"required":["name"]`) || tools["greet"].Description != "test skill" || tools["greet"].OutputSchema == nil {
		t.Errorf("greet: schema %s, description %q, output %v", in, tools["greet"].Description, tools["greet"].OutputSchema)
	}
	if in, _ := json.Marshal(tools["writer"].InputSchema); string(in) != `{"type":"object"}` {
		t.Errorf("writer's default schema: %s", in)
	}
	if !tools["greet"].Annotations.ReadOnlyHint || tools["writer"].Annotations.ReadOnlyHint {
		t.Errorf("readOnlyHint: greet %v, writer %v; want true, false", tools["greet"].Annotations.ReadOnlyHint, tools["writer"].Annotations.ReadOnlyHint)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "ada"},
		Meta: mcp.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if res.IsError || string(sc) != `{"greeting":"hello ada"}` || len(res.Content) != 1 {
		t.Fatalf("greet: isError %v, structured %s, content %v", res.IsError, sc, res.Content)
	}
	if txt, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(txt.Text, "hello ada") {
		t.Errorf("text block: %#v", res.Content[0])
	}
	rows := startedRows(e, "greet")
	if len(rows) != 1 || rows[0]["tenant_id"] != mcpTenantA {
		t.Errorf("greet's started rows: %v, want one for tenant %s", rows, mcpTenantA)
	}
	if tp, _ := rows[0]["trace_id"].(string); len(rows) == 1 && tp != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace_id %q: the traceparent of _meta was not used", tp)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fails", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	inv, _ := res.Meta["dev.cyberos/invocation-id"].(string)
	if !res.IsError || inv == "" || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, inv) {
		t.Errorf("fails: isError %v, meta %v, content %v", res.IsError, res.Meta, res.Content)
	}

	for _, args := range []any{map[string]any{"name": 5}, map[string]any{}, map[string]any{"name": "ada", "extra": true}, map[string]any{"name": strings.Repeat("x", 21)}} {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: args})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("greet %v: err %v, want JSON-RPC -32602", args, err)
		}
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "no-such-skill", Arguments: map[string]any{}})
	if je := (*jsonrpc.Error)(nil); !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("unknown tool: err %v, want -32602", err)
	}
	if rows := startedRows(e, "greet"); len(rows) != 1 {
		t.Errorf("greet has %d started rows after the refused calls, want 1 (refused before any sandbox)", len(rows))
	}
}

// TestMCPTwoTenants: one session per tenant (--tenant over stdio, the
// Cyberos-Tenant header over HTTP); each call's rows carry its tenant.
func TestMCPTwoTenants(t *testing.T) {
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) { testMCPTwoTenants(t, tr.connect) })
	}
}

func testMCPTwoTenants(t *testing.T, connect mcpConnect) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()
	for _, tenant := range []string{mcpTenantA, mcpTenantB} {
		if _, err := connect(t, d, tenant).CallTool(ctx, &mcp.CallToolParams{Name: "writer", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[any]int{}
	for _, r := range startedRows(e, "writer") {
		got[r["tenant_id"]]++
	}
	if len(got) != 2 || got[mcpTenantA] != 1 || got[mcpTenantB] != 1 {
		t.Errorf("writer's started rows by tenant: %v", got)
	}
}

// rawStdio runs `cyberos mcp serve` with pipes, for what the SDK's client
// would never send.
type rawStdio struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
}

func startRawStdio(t *testing.T, d *daemonProc) *rawStdio {
	t.Helper()
	cmd := cyberos("mcp", "serve", "--socket", d.adminSocket, "--tenant", mcpTenantA)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	r := &rawStdio{t: t, in: in, out: sc}
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	r.answer(0)
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return r
}

func (r *rawStdio) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.in, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

type rpcAnswer struct {
	ID     any             `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// answer reads lines until the answer to id (notifications are skipped).
func (r *rawStdio) answer(id any) rpcAnswer {
	r.t.Helper()
	want := fmt.Sprint(id)
	for r.out.Scan() {
		var a rpcAnswer
		if err := json.Unmarshal(r.out.Bytes(), &a); err != nil {
			r.t.Fatalf("server wrote %q: %v", r.out.Text(), err)
		}
		if a.Method == "" && fmt.Sprint(a.ID) == want {
			return a
		}
	}
	r.t.Fatalf("no answer to id %v: %v", id, r.out.Err())
	return rpcAnswer{}
}

// TestMCPStdioRetryIsIdempotent: the same tools/call (same JSON-RPC id in
// the same session) sent again gets the first answer; one started row.
func TestMCPStdioRetryIsIdempotent(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	r := startRawStdio(t, d)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"writer","arguments":{}}}`
	r.send(call)
	a1 := r.answer(7)
	r.send(call)
	a2 := r.answer(7)
	if a1.Error != nil || string(a1.Result) != string(a2.Result) {
		t.Fatalf("first %s %v, retry %s %v", a1.Result, a1.Error, a2.Result, a2.Error)
	}
	if rows := startedRows(e, "writer"); len(rows) != 1 {
		t.Errorf("writer: %d started rows after a retry, want 1", len(rows))
	}
	// Another id is another invocation.
	r.send(strings.Replace(call, `"id":7`, `"id":8`, 1))
	if a := r.answer(8); a.Error != nil || string(a.Result) == string(a1.Result) {
		t.Errorf("id 8: %s %v", a.Result, a.Error)
	}
}

// TestMCPStdioBadInput: what a broken or hostile client sends gets the
// JSON-RPC error the spec names, and neither the server nor the daemon
// goes down.
func TestMCPStdioBadInput(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	r := startRawStdio(t, d)
	r.send(`{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`)
	if a := r.answer(1); a.Error == nil || a.Error.Code != jsonrpc.CodeMethodNotFound {
		t.Errorf("unknown method: %+v, want -32601", a.Error)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"greet","arguments":"not an object"}}`)
	if a := r.answer(2); a.Error == nil || a.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("arguments not an object: %+v %s, want -32602", a.Error, a.Result)
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"greet","arguments":{"name":"` + strings.Repeat("x", 3<<20) + `"}}}`)
	if a := r.answer(3); a.Error == nil || a.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("huge request: %+v, want -32602", a.Error)
	}
	r.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"../etc","arguments":{}}}`)
	if a := r.answer(4); a.Error == nil || a.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("unknown skill: %+v, want -32602", a.Error)
	}
	// Still serving.
	r.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"greet","arguments":{"name":"bob"}}}`)
	if a := r.answer(5); a.Error != nil || !strings.Contains(string(a.Result), "hello bob") {
		t.Errorf("after bad input: %s %+v", a.Result, a.Error)
	}
	// A line that is not JSON: the SDK ends the session; the daemon
	// still serves (status fails the test if it does not answer).
	r.send(`{not json`)
	for r.out.Scan() {
	}
	d.status()
}

// TestMCPHTTPBadInput: /mcp refuses a body that is not JSON-RPC, one over
// the admin API's body cap, and an unknown method with the errors the spec
// names, and the daemon goes on serving.
func TestMCPHTTPBadInput(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	post := func(session, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://cyberos/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sess := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || sess == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	post(sess, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	if resp, body := post(sess, `{not json`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("not JSON: %d %s, want 400", resp.StatusCode, body)
	}
	// The SDK's HTTP transport refuses a method it does not know before
	// the JSON-RPC layer (over stdio the same call is -32601).
	if resp, body := post(sess, `{"jsonrpc":"2.0","id":1,"method":"no/such/method"}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "no/such/method") {
		t.Errorf("unknown method: %d %s, want 400 naming it", resp.StatusCode, body)
	}
	huge := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"greet","arguments":{"name":"` + strings.Repeat("x", 3<<20) + `"}}}`
	if resp, body := post(sess, huge); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("huge request: %d %.200s, want 413", resp.StatusCode, body)
	}
	if resp, body := post(sess, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"greet","arguments":{"name":7}}}`); !strings.Contains(body, fmt.Sprint(jsonrpc.CodeInvalidParams)) {
		t.Errorf("wrong argument type: %d %s, want -32602", resp.StatusCode, body)
	}
	if resp, body := post(sess, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"greet","arguments":{"name":"eve"}}}`); !strings.Contains(body, "hello eve") {
		t.Errorf("after bad input: %d %s", resp.StatusCode, body)
	}
	if rows := startedRows(e, "greet"); len(rows) != 1 {
		t.Errorf("greet: %d started rows, want 1 (only the good call)", len(rows))
	}
}

// mcpCompletedRow is the skill.invoked_completed row's payload of invocation id.
func mcpCompletedRow(e *env, id string) map[string]any {
	for _, r := range e.auditRows() {
		var p map[string]any
		if r.Kind == "skill.invoked_completed" && json.Unmarshal(r.Payload, &p) == nil && p["invocation_id"] == id {
			return p
		}
	}
	return nil
}

// TestMCPProgressAndCancel: a call with a progressToken gets
// notifications/progress at its start, each tool call and its end; a call the client cancels
// (notifications/cancelled, sent by the SDK when its context ends) is
// ended through the deadline path: a completed row with outcome cancelled,
// and no process or cgroup left.
func TestMCPProgressAndCancel(t *testing.T) {
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) { testMCPProgressAndCancel(t, tr.connect) })
	}
}

func testMCPProgressAndCancel(t *testing.T, connect mcpConnect) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	e.skill("sleeper", "effort_minutes: 2\n", "#!/bin/sh\nexec sleep 600\n")
	callsSkill(e, "calls")
	d := startDaemon(t, e)
	var mu sync.Mutex
	var got []string
	cs := connect(t, d, mcpTenantA, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%v:%s", r.Params.ProgressToken, r.Params.Message))
	}})
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()
	p := &mcp.CallToolParams{Name: "calls", Arguments: map[string]any{}}
	p.SetProgressToken("tok-1")
	if _, err := cs.CallTool(ctx, p); err != nil {
		t.Fatal(err)
	}
	want := "tok-1:started|tok-1:tool_call Read: success|tok-1:tool_call Bash: denied|tok-1:success"
	waitFor(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 4 })
	mu.Lock()
	if strings.Join(got, "|") != want {
		t.Errorf("progress:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	mu.Unlock()

	callCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "sleeper", Arguments: map[string]any{}})
		done <- err
	}()
	waitFor(t, 20*time.Second, func() bool { return len(procsMatching("sleep 600")) > 0 })
	rows := startedRows(e, "sleeper")
	if len(rows) != 1 {
		t.Fatalf("sleeper: %d started rows", len(rows))
	}
	inv, _ := rows[0]["invocation_id"].(string)
	stop()
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error")
	}
	var row map[string]any
	waitFor(t, 20*time.Second, func() bool { row = mcpCompletedRow(e, inv); return row != nil })
	if row["outcome"] != "cancelled" {
		t.Errorf("completed row of %s: %v, want outcome cancelled", inv, row)
	}
	// The sandbox is torn down once the row is durable.
	waitFor(t, 10*time.Second, func() bool {
		return len(procsMatching("sleep 600")) == 0 && !hasCgroup(t, inv) && d.status().ActiveInvocations == 0
	})
}

// TestDaemonCancelByID: POST /v1/invocations/{id}/cancel ends a running
// invocation with outcome cancelled; an id that does not run is 404.
func TestDaemonCancelByID(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	e.skill("sleeper", "effort_minutes: 2\n", "#!/bin/sh\nexec sleep 600\n")
	d := startDaemon(t, e)
	type answer struct {
		code int
		env  envelope
	}
	done := make(chan answer, 1)
	go func() {
		code, env, _ := d.invoke(map[string]any{"skill_id": "sleeper"})
		done <- answer{code, env}
	}()
	waitFor(t, 20*time.Second, func() bool { return len(startedRows(e, "sleeper")) == 1 })
	inv, _ := startedRows(e, "sleeper")[0]["invocation_id"].(string)
	post := func(id string) int {
		resp, err := d.client.Post("http://cyberos/v1/invocations/"+id+"/cancel", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("01NOSUCHINVOCATION"); code != http.StatusNotFound {
		t.Errorf("cancel of an unknown id: %d, want 404", code)
	}
	// `cyberos cancel ID` is that request: an unknown id exits non-zero
	// naming it; a running one prints its id and ends.
	if out, err := cyberos("cancel", "--socket", d.adminSocket, "01NOSUCHINVOCATION").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "01NOSUCHINVOCATION is not running here") {
		t.Errorf("cyberos cancel of an unknown id: %v %s", err, out)
	}
	if out, err := cyberos("cancel", "--socket", d.adminSocket, inv).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != inv {
		t.Fatalf("cyberos cancel %s: %v %s", inv, err, out)
	}
	a := <-done
	if a.code != 200 || a.env.Outcome != "cancelled" || a.env.InvocationID != inv {
		t.Errorf("answer %d %+v, want 200 cancelled", a.code, a.env)
	}
	if row := mcpCompletedRow(e, inv); row["outcome"] != "cancelled" {
		t.Errorf("completed row %v", row)
	}
}

// instructionsSkill installs "guide": a SKILL.md with no executable, a
// reference file, a symlink out of the folder and a file over the cap.
func instructionsSkill(t *testing.T, e *env) {
	dir := filepath.Join(e.base, "skills", "guide")
	if err := os.MkdirAll(filepath.Join(dir, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: guide\ndescription: How to write a release note.\n---\n\n# Release notes\nList what changed.\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "refs", "style.md"), []byte("Use the past tense.\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, 2<<20), 0o644))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "shadow")))
}

// TestMCPInstructionsSkill: an instructions-only skill is a prompt (its
// body) and resources (its files, no symlink, none over the cap), never a
// tool: not listed, a tools/call is -32602, and POST /v1/invocations is
// refused before any sandbox. validate and list say its kind.
func TestMCPInstructionsSkill(t *testing.T) {
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) { testMCPInstructionsSkill(t, tr.connect) })
	}
}

func testMCPInstructionsSkill(t *testing.T, connect mcpConnect) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	instructionsSkill(t, e)
	d := startDaemon(t, e)
	cs := connect(t, d, mcpTenantA)
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()

	lp, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(lp.Prompts) != 1 || lp.Prompts[0].Name != "guide" || lp.Prompts[0].Description != "How to write a release note." {
		t.Errorf("prompts: %+v", lp.Prompts)
	}
	gp, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "guide"})
	if err != nil {
		t.Fatal(err)
	}
	if len(gp.Messages) != 1 || gp.Messages[0].Content.(*mcp.TextContent).Text != "# Release notes\nList what changed.\n" {
		t.Errorf("prompt messages: %+v", gp.Messages)
	}
	lr, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, r := range lr.Resources {
		uris = append(uris, r.URI)
	}
	if strings.Join(uris, " ") != "skill://guide/SKILL.md skill://guide/refs/style.md" {
		t.Errorf("resources: %v, want SKILL.md and refs/style.md only", uris)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "skill://guide/refs/style.md"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "Use the past tense.\n" {
		t.Errorf("read refs/style.md: %+v %v", rr, err)
	}
	for _, uri := range []string{"skill://guide/shadow", "skill://guide/../greet/main", "skill://guide/big.bin"} {
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("read %s: no error", uri)
		}
	}

	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if tl.Name == "guide" {
			t.Error("the instructions skill is listed as a tool")
		}
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "guide", Arguments: map[string]any{}})
	if je := (*jsonrpc.Error)(nil); !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("tools/call guide: %v, want -32602", err)
	}
	if code, _, raw := d.invoke(map[string]any{"skill_id": "guide"}); code != http.StatusBadRequest {
		t.Errorf("POST /v1/invocations guide: %d %s, want 400", code, raw)
	}
	if rows := startedRows(e, "guide"); len(rows) != 0 {
		t.Errorf("guide has %d started rows, want none", len(rows))
	}

	out, stderr, code := cli(t, nil, "skill", "validate", filepath.Join(e.base, "skills", "guide"))
	if code != 0 || !strings.Contains(out, "guide 0.0.0: valid (instructions only") {
		t.Errorf("validate: exit %d %q %q", code, out, stderr)
	}
	out, _, _ = cli(t, nil, "skill", "list", "--socket", d.adminSocket)
	if !regexp.MustCompile(`(?m)^guide\s+0\.0\.0\s+instructions\s`).MatchString(out) || !regexp.MustCompile(`(?m)^greet\s+0\.0\.0\s+tool\s`).MatchString(out) {
		t.Errorf("skill list:\n%s", out)
	}
}

// TestMCPToolListChanged: a skill installed while a client is connected
// reaches it as notifications/tools/list_changed, unasked; a removal too.
func TestMCPToolListChanged(t *testing.T) {
	for _, tr := range mcpTransports {
		t.Run(tr.name, func(t *testing.T) { testMCPToolListChanged(t, tr.connect) })
	}
}

func testMCPToolListChanged(t *testing.T, connect mcpConnect) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	changed := make(chan struct{}, 16)
	cs := connect(t, d, mcpTenantA, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()
	names := func() string {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, tl := range lt.Tools {
			n = append(n, tl.Name)
		}
		return strings.Join(n, ",")
	}
	if got := names(); got != "fails,greet,writer" {
		t.Fatalf("tools %s", got)
	}
	e.skill("newcomer", "", "#!/bin/sh\necho '{}'\n")
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after an install")
	}
	if got := names(); got != "fails,greet,newcomer,writer" {
		t.Errorf("tools after the install: %s", got)
	}
	for len(changed) > 0 {
		<-changed
	}
	if err := os.RemoveAll(filepath.Join(e.base, "skills", "fails")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no notifications/tools/list_changed after a removal")
	}
	if got := names(); got != "greet,newcomer,writer" {
		t.Errorf("tools after the removal: %s", got)
	}
}
