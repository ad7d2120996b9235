// Package telemetry holds what the supervisor tells operators besides audit
// rows: Prometheus metrics, OpenTelemetry traces (W3C trace context, the
// OTLP exporter and its OTEL_* variables) and how log attributes are written.
package telemetry
