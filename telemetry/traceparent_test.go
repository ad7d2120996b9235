package telemetry

import (
	"context"
	"errors"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestParseTraceparent(t *testing.T) {
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tc, err := ParseTraceparent(good)
	if err != nil || tc.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || tc.ParentID != "00f067aa0ba902b7" || tc.String() != good {
		t.Fatalf("%+v %v", tc, err)
	}
	if _, err := ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"); err != nil {
		t.Errorf("a later version with extra fields must parse: %v", err)
	}
	for _, s := range []string{
		"",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // v00 with extra
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	} {
		if _, err := ParseTraceparent(s); !errors.Is(err, ErrTraceparent) {
			t.Errorf("%q: err %v, want ErrTraceparent", s, err)
		}
	}
}

func TestNewTraceContextIsValid(t *testing.T) {
	tc := NewTraceContext()
	if _, err := ParseTraceparent(tc.String()); err != nil {
		t.Fatal(err)
	}
}

// TestFromHeaders: the propagator reads traceparent and tracestate from
// HTTP headers; an invalid traceparent is ignored (W3C), an invalid
// tracestate dropped with the traceparent kept.
func TestFromHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		h         http.Header
		tp, state string
	}{
		{http.Header{"Traceparent": {tp}, "Tracestate": {"vendor=abc"}}, tp, "vendor=abc"},
		{http.Header{"Traceparent": {tp}, "Tracestate": {"not a state"}}, tp, ""},
		{http.Header{"Traceparent": {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}}, "", ""},
		{http.Header{}, "", ""},
	} {
		gotTP, gotState := FromHeaders(c.h)
		if gotTP != c.tp || gotState != c.state {
			t.Errorf("%v: (%q, %q), want (%q, %q)", c.h, gotTP, gotState, c.tp, c.state)
		}
	}
}

// TestRootTraceID: a root span started from ContextWithRootTraceID gets
// that trace id from the daemon's ID generator and has no parent; without
// it, a random one.
func TestRootTraceID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(IDGenerator()))
	id := NewTraceID()
	_, s := tp.Tracer("t").Start(ContextWithRootTraceID(context.Background(), id), "root", trace.WithNewRoot())
	s.End()
	_, s = tp.Tracer("t").Start(context.Background(), "other")
	s.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].SpanContext.TraceID().String() != id || spans[0].Parent.IsValid() {
		t.Fatalf("spans %+v, want a root in trace %s", spans, id)
	}
	if spans[1].SpanContext.TraceID().String() == id || !spans[1].SpanContext.IsValid() {
		t.Errorf("a span without the context got trace %s", spans[1].SpanContext.TraceID())
	}
}

// TestRemoteParentCarriesState: ContextWithRemoteParent hands the
// tracestate on with the parent; a root context (no parent) is left alone.
func TestRemoteParentCarriesState(t *testing.T) {
	tc, err := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	tc.State = "vendor=abc"
	sc := trace.SpanContextFromContext(ContextWithRemoteParent(context.Background(), tc))
	if !sc.IsRemote() || sc.SpanID().String() != "00f067aa0ba902b7" || sc.TraceState().Get("vendor") != "abc" {
		t.Errorf("remote parent %+v", sc)
	}
	if sc := trace.SpanContextFromContext(ContextWithRemoteParent(context.Background(), NewRootTraceContext())); sc.IsValid() {
		t.Errorf("a root trace context made parent %+v", sc)
	}
}
