package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/skillclient"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/sandbox"
)

const callerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// AC 22: skill.invoke is a child of the caller's traceparent; each tool
// call is a skill.broker.tool_call child of it with the spec's attributes,
// and a run tool has its skill.tool.<tool>.exec child. The Observer sees
// the invocation and each decided call, in order, with its policy hash.
func TestSpansHooksAndCallerTrace(t *testing.T) {
	files := t.TempDir()
	if err := os.WriteFile(filepath.Join(files, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := trace.NewTracerProvider(trace.WithSyncer(exp))
	f := &fakeRunner{stdout: `{"ok":true}`}
	f.during = func(spec sandbox.Spec) {
		c, err := skillclient.Dial(spec.BrokerSocket)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		var out map[string]any
		if err := c.Call(context.Background(), "Read", map[string]any{"path": filepath.Join(files, "a.txt")}, &out); err != nil {
			t.Errorf("Read: %v", err)
		}
		if err := c.Call(context.Background(), "Bash", map[string]any{"command": "true"}, &out); err == nil {
			t.Error("Bash should be denied")
		}
	}
	sup := newSup(t, f)
	sup.Tracer = tp.Tracer("test")
	obs := &recObserver{}
	env, err := sup.Run(t.Context(), Request{
		SkillDir:    skillDir(t, "allowed_tools: [Read]\nx-allowed-files: ['"+files+"/**']\n"),
		Traceparent: callerTP,
		Observer:    obs,
	})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	obs.mu.Lock()
	started, calls := obs.started, obs.calls
	obs.mu.Unlock()
	if len(started) != 1 || started[0].InvocationID != env.InvocationID {
		t.Errorf("Observer.Started %+v", started)
	}
	if len(calls) != 2 || calls[0].Tool != "Read" || calls[0].Outcome != "success" || len(calls[0].ArgsHash) != 64 ||
		calls[1].Tool != "Bash" || calls[1].Outcome != "denied" || calls[1].Reason != "tool_not_in_allowed_tools" {
		t.Errorf("Observer.ToolCall %+v", calls)
	}
	for _, c := range calls {
		if len(c.PolicyHash) != 64 {
			t.Errorf("tool call %s without the policy hash that judged it: %q", c.Tool, c.PolicyHash)
		}
	}
	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		if s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %s has trace id %s, not the caller's", s.Name, s.SpanContext.TraceID())
		}
	}
	inv := byName["skill.invoke"]
	if len(inv) != 1 || inv[0].Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("skill.invoke spans %+v", inv)
	}
	tc := byName["skill.broker.tool_call"]
	if len(tc) != 2 {
		t.Fatalf("%d tool_call spans, want 2", len(tc))
	}
	for _, s := range tc {
		if s.Parent.SpanID() != inv[0].SpanContext.SpanID() {
			t.Errorf("tool_call span's parent %s is not skill.invoke", s.Parent.SpanID())
		}
		var keys []string
		for _, a := range s.Attributes {
			keys = append(keys, string(a.Key))
		}
		for _, k := range []string{"skill_id", "tool_name", "outcome", "duration_ms", "args_size_bytes", "result_size_bytes"} {
			if !slices.Contains(keys, k) {
				t.Errorf("tool_call span lacks %s: %v", k, keys)
			}
		}
	}
	ex := byName["skill.tool.read.exec"]
	if len(ex) != 1 || ex[0].Parent.SpanID() != tc[0].SpanContext.SpanID() {
		t.Errorf("skill.tool.read.exec spans %+v", ex)
	}
	if len(byName["skill.tool.bash.exec"]) != 0 {
		t.Error("a denied call must not run its tool")
	}
}

// recObserver records what it is told; it implements only Started and
// ToolCall (NoopObserver the rest). onStarted, when set, runs in Started.
type recObserver struct {
	NoopObserver
	mu        sync.Mutex
	started   []Started
	calls     []broker.Decided
	onStarted func()
}

func (o *recObserver) Started(s Started) {
	o.mu.Lock()
	o.started = append(o.started, s)
	o.mu.Unlock()
	if o.onStarted != nil {
		o.onStarted()
	}
}

func (o *recObserver) ToolCall(d broker.Decided) {
	o.mu.Lock()
	o.calls = append(o.calls, d)
	o.mu.Unlock()
}

// rowKinds are the kinds of the invocation's rows, in order.
func rowKinds(t *testing.T, sup *Supervisor, id string) []audit.Kind {
	t.Helper()
	rows, err := sup.Audit.(*auditstore.Store).Rows(context.Background(), auditstore.Filter{InvocationID: id})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []audit.Kind
	for _, r := range rows {
		kinds = append(kinds, r.Kind)
	}
	return kinds
}

// Run's context ended with ErrStopping (the daemon's shutdown) ends a
// running invocation through the timeout path: SIGTERM at once, the kill
// after the grace, outcome timeout with the skill.timeout row, and the
// completed row.
func TestStopEndsThroughTimeoutPath(t *testing.T) {
	f := &fakeRunner{hang: true, ignoreTerm: true}
	sup := newSup(t, f)
	ctx, stop := context.WithCancelCause(t.Context())
	defer stop(nil)
	t0 := time.Now()
	env, err := sup.Run(ctx, Request{SkillDir: skillDir(t, ""), Deadline: 3 * time.Second,
		Observer: &recObserver{onStarted: func() { stop(ErrStopping) }}})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if env.Outcome != OutcomeTimeout || env.SignalSent != "SIGKILL" || took > 2*time.Second {
		t.Fatalf("outcome %s signal %s after %v (events %v)", env.Outcome, env.SignalSent, took, f.events)
	}
	if kinds := rowKinds(t, sup, env.InvocationID); !slices.Equal(kinds, []audit.Kind{audit.KindInvokedStarted, audit.KindTimeout, audit.KindInvokedCompleted}) {
		t.Errorf("rows %v", kinds)
	}
	if !strings.Contains(env.ErrorMessage, "shut down") {
		t.Errorf("error message %q, want the shutdown's", env.ErrorMessage)
	}
}

// Run's context cancelled (the caller gave up) ends a running invocation
// through the same path with the outcome cancelled: SIGTERM, then the kill
// after the grace, and no skill.timeout row.
func TestCancelledContextEndsCancelled(t *testing.T) {
	f := &fakeRunner{hang: true, ignoreTerm: true}
	sup := newSup(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	t0 := time.Now()
	env, err := sup.Run(ctx, Request{SkillDir: skillDir(t, ""), Deadline: 3 * time.Second,
		Observer: &recObserver{onStarted: cancel}})
	if err != nil {
		t.Fatal(err)
	}
	if env.Outcome != OutcomeCancelled || env.SignalSent != "SIGKILL" || time.Since(t0) > 2*time.Second {
		t.Fatalf("outcome %s signal %s after %v (events %v)", env.Outcome, env.SignalSent, time.Since(t0), f.events)
	}
	if kinds := rowKinds(t, sup, env.InvocationID); !slices.Equal(kinds, []audit.Kind{audit.KindInvokedStarted, audit.KindInvokedCompleted}) {
		t.Errorf("rows %v", kinds)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) != 2 || !strings.HasPrefix(f.events[0], "TERM@") || !strings.HasPrefix(f.events[1], "KILL@") {
		t.Errorf("signals %v, want SIGTERM then the kill", f.events)
	}
}
