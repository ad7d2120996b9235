package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ErrTraceparent: the caller's traceparent is not a valid W3C header.
var ErrTraceparent = errors.New("invalid traceparent")

// propagator reads and writes W3C Trace Context (traceparent, tracestate).
var propagator = propagation.TraceContext{}

// TraceContext is the parsed W3C traceparent of a caller, with its
// tracestate. A trace the daemon starts itself has no ParentID.
type TraceContext struct {
	Version  string
	TraceID  string // 32 lowercase hex, not all zeros
	ParentID string // 16 lowercase hex, not all zeros; "" for a root
	Flags    string // 2 lowercase hex
	State    string // the tracestate header, "" without one
}

// String renders the traceparent header value.
func (tc TraceContext) String() string {
	return tc.Version + "-" + tc.TraceID + "-" + tc.ParentID + "-" + tc.Flags
}

// ParseTraceparent parses a traceparent with OpenTelemetry's W3C Trace
// Context propagator (lowercase hex only, version ff invalid, ids not all
// zeros, later versions may carry more fields), and holds version 00 to
// exactly 55 characters, which the propagator lets pass with a trailing "-".
func ParseTraceparent(s string) (TraceContext, error) {
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": s}))
	switch {
	case len(s) < 55:
		return TraceContext{}, fmt.Errorf("%w: too short", ErrTraceparent)
	case !sc.IsValid():
		return TraceContext{}, fmt.Errorf("%w: not lowercase hex fields with non-zero ids, or a version or flags W3C forbids", ErrTraceparent)
	case s[:2] == "00" && len(s) != 55:
		return TraceContext{}, fmt.Errorf("%w: version 00 must be exactly 55 characters", ErrTraceparent)
	}
	return TraceContext{Version: s[:2], TraceID: sc.TraceID().String(), ParentID: sc.SpanID().String(), Flags: sc.TraceFlags().String()}, nil
}

// FromHeaders reads a caller's traceparent and tracestate from HTTP
// headers with the propagator: ("", "") when there is no valid
// traceparent (W3C: an invalid one is ignored); an invalid tracestate is
// dropped.
func FromHeaders(h http.Header) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.HeaderCarrier(h)))
	if !sc.IsValid() {
		return "", ""
	}
	m := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), m)
	return m["traceparent"], m["tracestate"]
}

// NewTraceContext is a made-up caller context: random ids, sampled. Only
// for what needs a traceparent when no span exists to be its parent.
func NewTraceContext() TraceContext {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return TraceContext{Version: "00", TraceID: NewTraceID(), ParentID: hex.EncodeToString(b[:]), Flags: "01"}
}

// NewRootTraceContext is the trace of an invocation whose caller sent no
// traceparent: a new trace id, no parent, sampled.
func NewRootTraceContext() TraceContext {
	return TraceContext{Version: "00", TraceID: NewTraceID(), Flags: "01"}
}

// NewTraceID returns a random W3C trace id.
func NewTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rootTraceIDKey carries the trace id a root span started from the context
// must get (ContextWithRootTraceID).
type rootTraceIDKey struct{}

// ContextWithRootTraceID returns ctx asking the daemon's ID generator to
// give the root span started from it traceID (32 hex): the audit rows,
// written before the span starts, already carry it.
func ContextWithRootTraceID(ctx context.Context, traceID string) context.Context {
	var tid trace.TraceID
	if b, err := hex.DecodeString(traceID); err == nil && len(b) == len(tid) {
		copy(tid[:], b)
		return context.WithValue(ctx, rootTraceIDKey{}, tid)
	}
	return ctx
}

// IDGenerator is the daemon's span and trace id source: random, except
// that a root span started from a ContextWithRootTraceID context gets that
// trace id. NewTracerProvider installs it.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(rootTraceIDKey{}).(trace.TraceID)
	if !ok || !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}
