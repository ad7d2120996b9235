package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
// and a run tool has its skill.tool.<tool>.exec child. OnStarted and
// OnToolCall see the invocation and each decided call, in order.
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
	var mu sync.Mutex
	var started []Started
	var calls []broker.Decided
	env, err := sup.Run(Request{
		SkillDir:    skillDir(t, "allowed_tools: [Read]\nx-allowed-files: ['"+files+"/**']\n"),
		Traceparent: callerTP,
		OnStarted:   func(s Started) { mu.Lock(); started = append(started, s); mu.Unlock() },
		OnToolCall:  func(d broker.Decided) { mu.Lock(); calls = append(calls, d); mu.Unlock() },
	})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	if len(started) != 1 || started[0].InvocationID != env.InvocationID {
		t.Errorf("OnStarted %+v", started)
	}
	if len(calls) != 2 || calls[0].Tool != "Read" || calls[0].Outcome != "success" || len(calls[0].ArgsHash) != 64 ||
		calls[1].Tool != "Bash" || calls[1].Outcome != "denied" || calls[1].Reason != "tool_not_in_allowed_tools" {
		t.Errorf("OnToolCall %+v", calls)
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

// Request.Stop ends a running invocation through the timeout path:
// SIGTERM at once, the kill after the grace, outcome timeout with the
// skill.timeout row, and the completed row.
func TestStopEndsThroughTimeoutPath(t *testing.T) {
	f := &fakeRunner{hang: true, ignoreTerm: true}
	sup := newSup(t, f)
	stop := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	t0 := time.Now()
	env, err := sup.Run(Request{SkillDir: skillDir(t, ""), Deadline: 3 * time.Second, Stop: stop})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if env.Outcome != OutcomeTimeout || env.SignalSent != "SIGKILL" || took > 2*time.Second {
		t.Fatalf("outcome %s signal %s after %v (events %v)", env.Outcome, env.SignalSent, took, f.events)
	}
	store := sup.Audit.(*auditstore.Store)
	rows, _ := store.Rows(context.Background(), auditstore.Filter{InvocationID: env.InvocationID})
	var kinds []audit.Kind
	for _, r := range rows {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Equal(kinds, []audit.Kind{audit.KindInvokedStarted, audit.KindTimeout, audit.KindInvokedCompleted}) {
		t.Errorf("rows %v", kinds)
	}
}
