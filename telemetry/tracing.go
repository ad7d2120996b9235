package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the supervisor's tracer (the instrumentation scope).
const TracerName = "cyberos.dev"

// ContextWithRemoteParent returns ctx carrying tc (and its tracestate) as
// the remote parent span of spans started from it, read by the W3C
// propagator: the caller's traceparent becomes the parent of skill.invoke,
// a skill's own traceparent the parent of its tool call. A tc without a
// valid parent leaves ctx as it is.
func ContextWithRemoteParent(ctx context.Context, tc TraceContext) context.Context {
	c := propagation.MapCarrier{"traceparent": tc.String()}
	if tc.State != "" {
		c["tracestate"] = tc.State
	}
	if out := propagator.Extract(ctx, c); trace.SpanContextFromContext(out).IsValid() {
		return out
	}
	return ctx
}

// OTLPFromEnv reports whether OpenTelemetry's standard variables ask for
// trace export (OTEL_EXPORTER_OTLP_ENDPOINT or ..._TRACES_ENDPOINT set, the
// SDK not disabled, the traces exporter not "none"): with no otlp_endpoint
// in the config, the daemon follows them.
func OTLPFromEnv() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// CheckOTLPEnv refuses the standard variables NewTracerProvider cannot
// follow: a protocol other than http/protobuf, or resource attributes that
// do not parse. `serve --check` calls it too.
func CheckOTLPEnv() error {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return fmt.Errorf("otlp: %s=%s: only http/protobuf is built in", v, p)
			}
			break
		}
	}
	if _, err := resource.New(context.Background(), resource.WithFromEnv()); err != nil {
		return fmt.Errorf("otlp: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	return nil
}

// NewTracerProvider is the daemon's tracer provider: spans are exported
// over OTLP/HTTP (protobuf) in batches. endpoint is host:port (plain HTTP,
// path /v1/traces) or a URL (a URL without a path gets /v1/traces); ""
// leaves the exporter to OpenTelemetry's standard variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, ..._HEADERS, ..._TIMEOUT). The resource is
// service.name cyberos-supervisor unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES say otherwise; the sampler is the SDK's, so
// OTEL_TRACES_SAMPLER applies (default: follow the caller's sampled flag,
// sample root spans). Its IDGenerator gives a root skill.invoke the trace
// id its audit rows carry. The caller shuts it down (which flushes).
func NewTracerProvider(ctx context.Context, endpoint string) (*sdktrace.TracerProvider, error) {
	if err := CheckOTLPEnv(); err != nil {
		return nil, err
	}
	var opts []otlptracehttp.Option
	u, perr := url.Parse(endpoint)
	switch {
	case endpoint == "": // the standard variables
	case perr == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "":
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	default:
		opts = append(opts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %q: %w", endpoint, err)
	}
	fromEnv, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otlp: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName("cyberos-supervisor")), fromEnv)
	if err != nil {
		return nil, fmt.Errorf("otlp resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(IDGenerator())), nil
}

// namespaced are the spec's span attribute names and their twins in the
// cyberos. namespace, which OpenTelemetry asks of an application's own
// attributes; spans carry both.
var namespaced = map[attribute.Key]attribute.Key{
	"skill_id":          "cyberos.skill.id",
	"skill_version":     "cyberos.skill.version",
	"invocation_id":     "cyberos.invocation.id",
	"tenant_id":         "cyberos.tenant.id",
	"outcome":           "cyberos.outcome",
	"duration_ms":       "cyberos.duration_ms",
	"tool_name":         "cyberos.tool.name",
	"args_size_bytes":   "cyberos.tool.args_size_bytes",
	"result_size_bytes": "cyberos.tool.result_size_bytes",
	"reason":            "cyberos.denial.reason",
}

// Attrs returns kvs, each followed by its cyberos.* twin when the spec's
// name has one.
func Attrs(kvs ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, 2*len(kvs))
	for _, kv := range kvs {
		out = append(out, kv)
		if k, ok := namespaced[kv.Key]; ok {
			out = append(out, attribute.KeyValue{Key: k, Value: kv.Value})
		}
	}
	return out
}
