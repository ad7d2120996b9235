package telemetry

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cyberos/supervisor/audit"
)

// Metrics are the supervisor's Prometheus series. Label values come from
// the skill registry and fixed outcome sets, never from callers.
type Metrics struct {
	Registry           *prometheus.Registry
	InvokedTotal       *prometheus.CounterVec   // skill_invoked_total{skill_id,outcome}
	InvokedDurationMS  *prometheus.HistogramVec // skill_invoked_duration_ms{skill_id}
	AuditEmitFailures  *prometheus.CounterVec   // skill_audit_emit_failures_total{stage}
	SandboxStartMS     prometheus.Histogram     // skill_sandbox_start_ms
	InvocationsRunning prometheus.Gauge         // skill_active_invocations
	ToolCalls          *prometheus.CounterVec   // tool_calls_total{skill_id,tool,outcome}
	ResponseTruncated  prometheus.Counter       // broker_response_truncated_total
	WarmSandboxes      *prometheus.GaugeVec     // skill_warm_sandboxes{skill_id}
	WarmClaims         *prometheus.CounterVec   // skill_warm_claims_total{skill_id,result}
	WarmRefillMS       prometheus.Histogram     // skill_warm_refill_ms
}

// Tool-call outcomes, the outcome label of tool_calls_total: audit's words,
// plus denied (a refusal, audited as skill.tool_denied rather than as an outcome).
const (
	ToolCallSuccess = audit.OutcomeSuccess
	ToolCallDenied  = "denied"
	ToolCallError   = audit.OutcomeError
	ToolCallTimeout = audit.OutcomeTimeout
)

// ToolCallOutcomes returns every outcome label value of tool_calls_total.
func ToolCallOutcomes() []string { return append(audit.ToolCallOutcomes(), ToolCallDenied) }

// InvocationOutcomes returns every outcome label value of
// skill_invoked_total: audit's invocation outcomes except lost, which
// startup reconciliation writes only to the audit trail.
func InvocationOutcomes() []string {
	return slices.DeleteFunc(audit.InvocationOutcomes(), func(o string) bool { return o == audit.OutcomeLost })
}

// NewMetrics registers every series on a new registry. Both stages of the
// audit-failure counter exist at 0 from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		InvokedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skill_invoked_total", Help: "Skill invocations by outcome.",
		}, []string{"skill_id", "outcome"}),
		InvokedDurationMS: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "skill_invoked_duration_ms", Help: "Skill invocation duration in milliseconds.",
			Buckets: []float64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000},
		}, []string{"skill_id"}),
		AuditEmitFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skill_audit_emit_failures_total", Help: "Audit rows that could not be written, by stage (start refuses the invocation; completed is sev-1).",
		}, []string{"stage"}),
		SandboxStartMS: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "skill_sandbox_start_ms", Help: "Sandbox start latency in milliseconds.",
			Buckets: []float64{5, 10, 15, 25, 50, 75, 100, 250, 500, 1000},
		}),
		InvocationsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "skill_active_invocations", Help: "Invocations running now.",
		}),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tool_calls_total", Help: "Broker tool calls by outcome (success, denied, error, timeout).",
		}, []string{"skill_id", "tool", "outcome"}),
		ResponseTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "broker_response_truncated_total", Help: "Broker responses over the 16 MiB cap, replaced by a response_too_large error.",
		}),
		WarmSandboxes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "skill_warm_sandboxes", Help: "Warm sandboxes ready for the skill's next invocations.",
		}, []string{"skill_id"}),
		WarmClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skill_warm_claims_total", Help: "Invocations by whether a warm sandbox was ready (hit) or the sandbox started cold (miss).",
		}, []string{"skill_id", "result"}),
		WarmRefillMS: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "skill_warm_refill_ms", Help: "Time to make one warm sandbox, in milliseconds.",
			Buckets: []float64{10, 25, 50, 75, 100, 250, 500, 1000, 2500},
		}),
	}
	m.Registry.MustRegister(m.InvokedTotal, m.InvokedDurationMS, m.AuditEmitFailures, m.SandboxStartMS, m.InvocationsRunning,
		m.ToolCalls, m.ResponseTruncated, m.WarmSandboxes, m.WarmClaims, m.WarmRefillMS)
	m.AuditEmitFailures.WithLabelValues("start")
	m.AuditEmitFailures.WithLabelValues("completed")
	return m
}
