// Package telemetry holds what the supervisor tells operators besides audit
// rows: Prometheus metrics and W3C trace context.
package telemetry
