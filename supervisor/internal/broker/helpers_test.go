package broker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/telemetry"
)

// The test skill's frontmatter: every fake tool allowed but Bash (absent:
// tool_not_in_allowed_tools) and MemoryEmit (disallowed: tool_denied).
const testSkill = `---
name: test-skill
description: Broker tests.
allowed_tools: [Read, MemoryRead, Grep, Glob, Edit, Write, HttpFetch, HttpPost, MemorySearch]
disallowed_tools: [MemoryEmit]
---
`

// allowedInOrder is what tool.list must show, in KnownTools order.
var allowedInOrder = []string{"Read", "Write", "Edit", "Glob", "Grep", "MemoryRead", "MemorySearch", "HttpFetch", "HttpPost"}

const (
	testTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	testTraceID     = "0af7651916cd43dd8448eb211c80319c"
	invTraceID      = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// fakeTool is a tools.Tool whose Call is a function.
type fakeTool struct {
	name  policy.Tool
	calls atomic.Int64
	fn    func(ctx context.Context, c *tools.Call) (any, error)
}

func (f *fakeTool) Name() policy.Tool   { return f.name }
func (f *fakeTool) Description() string { return "fake " + string(f.name) }
func (f *fakeTool) Call(ctx context.Context, c *tools.Call) (any, error) {
	f.calls.Add(1)
	return f.fn(ctx, c)
}

// fakeTools is the test registry (every native name, as CheckRegistry
// wants), each tool exercising one path of the broker:
//
//	Read         echoes {"args","traceparent","trace_id"}
//	MemoryRead   a no-op ({})
//	Grep         fails with a host path in its error (must not leak)
//	Glob         panics
//	Edit         times out
//	Write        refuses its resource (file_violation) from inside
//	HttpFetch    returns a string of args.n bytes
//	HttpPost     invalid params
//	MemorySearch blocks until released or its context ends
//	Bash, MemoryEmit are refused by policy before they run
type fakeTools struct {
	m       map[policy.Tool]tools.Tool
	release chan struct{} // MemorySearch returns when closed
	entered chan struct{} // MemorySearch signals each entry
}

func newFakeTools() *fakeTools {
	ft := &fakeTools{m: map[policy.Tool]tools.Tool{}, release: make(chan struct{}), entered: make(chan struct{}, 100)}
	add := func(n policy.Tool, fn func(ctx context.Context, c *tools.Call) (any, error)) {
		ft.m[n] = &fakeTool{name: n, fn: fn}
	}
	noop := func(context.Context, *tools.Call) (any, error) { return struct{}{}, nil }
	add(policy.ToolRead, func(_ context.Context, c *tools.Call) (any, error) {
		return map[string]any{"args": c.Args, "traceparent": c.Traceparent, "trace_id": c.TraceID}, nil
	})
	add(policy.ToolMemoryRead, noop)
	add(policy.ToolBash, noop)
	add(policy.ToolMemoryEmit, noop)
	add(policy.ToolGrep, func(context.Context, *tools.Call) (any, error) {
		return nil, fmt.Errorf("%w: open /var/lib/secret/host/path: errno 13 (EACCES)", tools.ErrFailed)
	})
	add(policy.ToolGlob, func(context.Context, *tools.Call) (any, error) { panic("fake tool panic at /host/path") })
	add(policy.ToolEdit, func(context.Context, *tools.Call) (any, error) {
		return nil, fmt.Errorf("%w: after 5s", tools.ErrTimeout)
	})
	add(policy.ToolWrite, func(context.Context, *tools.Call) (any, error) {
		return nil, &policy.Denial{Reason: policy.ReasonFile, Tool: policy.ToolWrite, Detail: `path "/etc/passwd" is not in x-allowed-files`}
	})
	add(policy.ToolHttpFetch, func(_ context.Context, c *tools.Call) (any, error) {
		var a struct{ N int }
		_ = json.Unmarshal(c.Args, &a)
		return strings.Repeat("x", min(max(a.N, 0), 20<<20)), nil
	})
	add(policy.ToolHttpPost, func(context.Context, *tools.Call) (any, error) {
		return nil, fmt.Errorf("%w: url is required", tools.ErrInvalidParams)
	})
	add(policy.ToolMemorySearch, func(ctx context.Context, _ *tools.Call) (any, error) {
		ft.entered <- struct{}{}
		select {
		case <-ft.release:
			return struct{}{}, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", tools.ErrFailed, ctx.Err())
		}
	})
	return ft
}

func (ft *fakeTools) calls(n policy.Tool) int64 { return ft.m[n].(*fakeTool).calls.Load() }

// fakeAudit records rows, checking each as the store would.
type fakeAudit struct {
	mu   sync.Mutex
	rows []row
	fail map[audit.Kind]bool
}

// row is a recorded draft with its payload decoded.
type row struct {
	Kind    audit.Kind
	Payload map[string]any
}

func (r row) str(key string) string { s, _ := r.Payload[key].(string); return s }

func (a *fakeAudit) Emit(_ context.Context, d audit.Draft) (audit.Row, error) {
	if err := d.Validate(); err != nil {
		return audit.Row{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail[d.Kind] {
		return audit.Row{}, errors.New("fake audit: disk full")
	}
	var p map[string]any
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return audit.Row{}, err
	}
	a.rows = append(a.rows, row{d.Kind, p})
	return audit.Row{Kind: d.Kind, Payload: d.Payload}, nil
}

func (a *fakeAudit) setFail(k audit.Kind) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail == nil {
		a.fail = map[audit.Kind]bool{}
	}
	a.fail[k] = true
}

func (a *fakeAudit) all() []row {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]row(nil), a.rows...)
}

func (a *fakeAudit) kind(k audit.Kind) []row {
	var out []row
	for _, r := range a.all() {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// testEnv is a running broker with its fakes.
type testEnv struct {
	t       testing.TB
	b       *Broker
	cfg     Config
	audit   *fakeAudit
	tools   *fakeTools
	metrics *telemetry.Metrics
}

// socketDir returns a fresh private directory with a short path (a Unix
// socket path must fit in 104 bytes; t.TempDir's can be long).
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "brk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testEnforcer(t testing.TB, skill string) *policy.Enforcer {
	t.Helper()
	p, err := policy.Parse([]byte(skill))
	if err != nil {
		t.Fatal(err)
	}
	return policy.NewEnforcer(p, policy.EnforcerOptions{})
}

// testConfig is a complete Config over fakes.
func testConfig(t testing.TB) (Config, *fakeAudit, *fakeTools) {
	t.Helper()
	id := ulid.Make().String()
	fa, ft := &fakeAudit{}, newFakeTools()
	cfg := Config{
		SocketDir: socketDir(t),
		Common: audit.Common{InvocationID: id, RequestID: "req-1", SkillID: "test-skill",
			TenantID: "0e3b1a2c-4f5d-6789-abcd-ef0123456789", TraceID: invTraceID},
		Env:            &tools.Env{SkillID: "test-skill", InvocationID: id, Enforcer: testEnforcer(t, testSkill)},
		Tools:          ft.m,
		Audit:          fa,
		SocketUID:      os.Geteuid(),
		SocketGID:      os.Getegid(),
		NoConnectAfter: -1,
		FrameTimeout:   2 * time.Second,
	}
	return cfg, fa, ft
}

func startEnv(t testing.TB, mods ...func(*Config)) *testEnv {
	t.Helper()
	cfg, fa, ft := testConfig(t)
	m := telemetry.NewMetrics()
	cfg.Metrics = m
	for _, mod := range mods {
		mod(&cfg)
	}
	b, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &testEnv{t: t, b: b, cfg: cfg, audit: fa, tools: ft, metrics: m}
}

// conn is a raw client connection speaking frames.
type conn struct {
	t testing.TB
	net.Conn
}

func (e *testEnv) dial() *conn {
	e.t.Helper()
	c, err := net.Dial("unix", e.b.Path())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return &conn{t: e.t, Conn: c}
}

func (c *conn) send(body []byte) {
	c.t.Helper()
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, uint32(len(body)))
	if _, err := c.Write(append(hdr, body...)); err != nil {
		c.t.Fatal(err)
	}
}

// trySend sends a frame to a peer that may already have hung up.
func (c *conn) trySend(body []byte) {
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, uint32(len(body)))
	_, _ = c.Write(append(hdr, body...))
}

// recv reads one response frame (5 s at most).
func (c *conn) recv() []byte {
	c.t.Helper()
	b, err := c.tryRecv(5 * time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

func (c *conn) tryRecv(d time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// rpc sends one body and decodes the one response.
func (c *conn) rpc(body string) wireResponse {
	c.t.Helper()
	c.send([]byte(body))
	return decodeWire(c.t, c.recv())
}

// wireResponse is a response as a client decodes it.
type wireResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *RPCError       `json:"error"`
}

func decodeWire(t testing.TB, b []byte) wireResponse {
	t.Helper()
	var r wireResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("response %q: %v", b, err)
	}
	if r.JSONRPC != "2.0" || (r.Error == nil) == (r.Result == nil) {
		t.Fatalf("not a JSON-RPC 2.0 response: %s", b)
	}
	return r
}

func (r wireResponse) reason() string {
	if r.Error == nil || r.Error.Data == nil {
		return ""
	}
	return r.Error.Data.Reason
}

func callBody(id int, tool string, args string, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tool.call","params":{"tool":%q,"args":%s%s}}`, id, tool, args, extra)
}

func hashOf(t testing.TB, raw string) string {
	t.Helper()
	h, err := audit.HashJSON([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
