package supervisor

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"cyberos.dev/telemetry"
)

// TestInvokeWithoutParentIsRoot: an invocation whose caller sent no
// traceparent has a root skill.invoke span (no invented parent that no one
// exports), and the trace id the envelope and audit rows carry is that
// span's.
func TestInvokeWithoutParentIsRoot(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(tracerProviderOptions(exp)...)
	sup := newSup(t, &fakeRunner{stdout: `{"ok":true}`})
	sup.Tracer = tp.Tracer("test")
	env, err := sup.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	var inv []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "skill.invoke" {
			inv = append(inv, s)
		}
	}
	if len(inv) != 1 {
		t.Fatalf("%d skill.invoke spans, want 1", len(inv))
	}
	if inv[0].Parent.IsValid() {
		t.Errorf("skill.invoke has parent %s (remote %v) though the caller sent none; want a root span", inv[0].Parent.SpanID(), inv[0].Parent.IsRemote())
	}
	if got := inv[0].SpanContext.TraceID().String(); got != env.TraceID {
		t.Errorf("skill.invoke trace id %s, envelope's %s", got, env.TraceID)
	}
}

// TestInvokeWithParentIsChild: with the caller's traceparent, skill.invoke
// is the remote parent's child in the caller's trace, carrying its
// tracestate.
func TestInvokeWithParentIsChild(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(tracerProviderOptions(exp)...)
	sup := newSup(t, &fakeRunner{stdout: `{"ok":true}`})
	sup.Tracer = tp.Tracer("test")
	env, err := sup.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Traceparent: callerTP, Tracestate: "vendor=abc"})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	spans := exp.GetSpans()
	if len(spans) == 0 || spans[len(spans)-1].Name != "skill.invoke" {
		t.Fatalf("spans %v", spans)
	}
	s := spans[len(spans)-1]
	if !s.Parent.IsRemote() || s.Parent.SpanID().String() != "00f067aa0ba902b7" || s.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("skill.invoke parent %v trace %s, want the caller's", s.Parent, s.SpanContext.TraceID())
	}
	if got := s.SpanContext.TraceState().Get("vendor"); got != "abc" {
		t.Errorf("tracestate vendor=%q, want abc", got)
	}
	if env.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("envelope trace id %s", env.TraceID)
	}
}

// tracerProviderOptions are the daemon's (NewTracerProvider's) with a
// synchronous in-memory exporter.
func tracerProviderOptions(exp sdktrace.SpanExporter) []sdktrace.TracerProviderOption {
	return []sdktrace.TracerProviderOption{sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(telemetry.IDGenerator())}
}
