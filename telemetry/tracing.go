package telemetry

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the supervisor's tracer (the instrumentation scope).
const TracerName = "github.com/cyberos/supervisor"

// ContextWithRemoteParent returns ctx carrying tc as the remote parent span
// of spans started from it: the caller's traceparent becomes the parent of
// skill.invoke, a skill's own traceparent the parent of its tool call.
func ContextWithRemoteParent(ctx context.Context, tc TraceContext) context.Context {
	var tid trace.TraceID
	var sid trace.SpanID
	if b, err := hex.DecodeString(tc.TraceID); err == nil && len(b) == len(tid) {
		copy(tid[:], b)
	}
	if b, err := hex.DecodeString(tc.ParentID); err == nil && len(b) == len(sid) {
		copy(sid[:], b)
	}
	var flags trace.TraceFlags
	if tc.Flags == "01" || (len(tc.Flags) == 2 && hexNibble(tc.Flags[1])&1 == 1) {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func hexNibble(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 0
}

// NewTracerProvider is the daemon's tracer provider: spans are exported
// over OTLP/HTTP to endpoint in batches. endpoint is host:port (plain HTTP,
// path /v1/traces) or a URL; a URL without a path gets /v1/traces, the
// OTLP/HTTP default. The caller shuts it down (which flushes). Sampling
// follows the parent (the caller's sampled flag); root spans are sampled.
func NewTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if u, err := url.Parse(endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %q: %w", endpoint, err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("cyberos-supervisor"))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	), nil
}
