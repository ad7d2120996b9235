package telemetry

import (
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"cyberos.dev/audit"
)

// Metrics are the supervisor's Prometheus series, named as Prometheus
// asks: the cyberos_ prefix, base units (seconds), _total counters. Label
// values come from the skill registry and fixed outcome sets, never from
// callers. The spec's names map onto them: skill_invoked_total is
// cyberos_skill_invocations_total, skill_invoked_duration_ms is
// cyberos_skill_invocation_duration_seconds, skill_audit_emit_failures_total
// is cyberos_audit_emit_failures_total.
type Metrics struct {
	Registry           *prometheus.Registry
	InvokedTotal       *prometheus.CounterVec   // cyberos_skill_invocations_total{skill_id,outcome}
	InvokedDuration    *prometheus.HistogramVec // cyberos_skill_invocation_duration_seconds{skill_id}
	InvocationsLost    prometheus.Counter       // cyberos_skill_invocations_lost_total
	AuditEmitFailures  *prometheus.CounterVec   // cyberos_audit_emit_failures_total{stage}
	AuditEmitDuration  *prometheus.HistogramVec // cyberos_audit_emit_duration_seconds{stage}: start, completed, tool_call_started
	SandboxStart       prometheus.Histogram     // cyberos_sandbox_start_duration_seconds
	InvocationsRunning prometheus.Gauge         // cyberos_skill_invocations_running
	ToolCalls          *prometheus.CounterVec   // cyberos_tool_calls_total{skill_id,tool,outcome}
	ResponseTruncated  prometheus.Counter       // cyberos_broker_responses_truncated_total
	WarmSandboxes      *prometheus.GaugeVec     // cyberos_warm_sandboxes{skill_id}
	WarmClaims         *prometheus.CounterVec   // cyberos_warm_claims_total{skill_id,result}
	WarmRefill         prometheus.Histogram     // cyberos_warm_refill_duration_seconds
	AuditShipLag       prometheus.Gauge         // cyberos_audit_ship_lag_rows
	AuditShipped       prometheus.Counter       // cyberos_audit_shipped_rows_total
	AuditShipErrors    *prometheus.CounterVec   // cyberos_audit_ship_errors_total{reason}
	AuditScrubLast     prometheus.Gauge         // cyberos_audit_scrub_last_timestamp_seconds
	AuditScrubOK       prometheus.Gauge         // cyberos_audit_scrub_last_ok
	AuditScrubProblems prometheus.Gauge         // cyberos_audit_scrub_last_problems
	AuditScrubRows     prometheus.Gauge         // cyberos_audit_scrub_last_rows
	AuditScrubDuration prometheus.Gauge         // cyberos_audit_scrub_last_duration_seconds
	// AuditWitnessUnchecked is 1 while the local chain has not been
	// compared with the rows the fleet's PostgreSQL holds for this host
	// (it was away at start), 0 once it has.
	AuditWitnessUnchecked prometheus.Gauge // cyberos_audit_witness_unchecked

	// Operations (issue 41): the admin API's refusals and requests.
	AdmissionRefused *prometheus.CounterVec // cyberos_admission_refusals_total{reason}
	AdminRequests    *prometheus.CounterVec // cyberos_admin_requests_total{route,code}
	ToolDenials      *prometheus.CounterVec // cyberos_tool_denials_total{skill_id,reason}

	auditDamaged atomic.Pointer[func() bool] // cyberos_audit_damaged (WatchAuditDamage)
}

// Audit shipping failures, the reason label of audit_ship_errors_total:
// PostgreSQL unreachable or failing, another daemon shipping under this
// host id, or a local chain that no longer continues the shipped one.
const (
	ShipErrorDatabase = "database"
	ShipErrorHostID   = "host_id_in_use"
	ShipErrorDiverged = "diverged"
)

// Admission refusals, the reason label of admission_refusals_total: the
// invocations the admin API turned away before running them, max_concurrent
// with 429, the others with 503.
const (
	RefusedMaxConcurrent = "max_concurrent"
	RefusedShuttingDown  = "shutting_down"
	RefusedAuditDamaged  = "audit_damaged"
)

// Audit emit stages, the stage label of the audit series: the invocation's
// started and completed rows.
const (
	StageStart     = "start"
	StageCompleted = "completed"
)

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

// NewMetrics registers every series on a new registry, with the Go
// runtime's, the process's and cyberos_build_info. Both stages of the audit
// series exist at 0 from the start.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		InvokedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_skill_invocations_total", Help: "Skill invocations ended, by outcome.",
		}, []string{"skill_id", "outcome"}),
		InvokedDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyberos_skill_invocation_duration_seconds", Help: "Skill invocation duration, from dispatch to the skill's end.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"skill_id"}),
		InvocationsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cyberos_skill_invocations_lost_total", Help: "Invocations a previous daemon left without a completed row, closed as lost at start.",
		}),
		AuditEmitFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_audit_emit_failures_total", Help: "Invocation audit rows that could not be written, by stage (start refuses the invocation; completed is sev-1).",
		}, []string{"stage"}),
		AuditEmitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cyberos_audit_emit_duration_seconds", Help: "Time to make an audit row durable before acting, by stage: an invocation's start and completed rows (the spec's budget: p95 under 50 ms), a tool call's started row before its tool runs (tool_call_started).",
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"stage"}),
		SandboxStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cyberos_sandbox_start_duration_seconds", Help: "Sandbox start latency (a warm sandbox: its activation).",
			Buckets: []float64{.001, .0025, .005, .01, .015, .025, .05, .075, .1, .25, .5, 1},
		}),
		InvocationsRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_skill_invocations_running", Help: "Invocations running now.",
		}),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_tool_calls_total", Help: "Broker tool calls by outcome (success, denied, error, timeout).",
		}, []string{"skill_id", "tool", "outcome"}),
		ResponseTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cyberos_broker_responses_truncated_total", Help: "Broker responses over the 16 MiB cap, replaced by a response_too_large error.",
		}),
		WarmSandboxes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cyberos_warm_sandboxes", Help: "Warm sandboxes ready for the skill's next invocations.",
		}, []string{"skill_id"}),
		WarmClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_warm_claims_total", Help: "Invocations by whether a warm sandbox was ready (hit), came from a refill under way that the invocation waited for (waited), or the sandbox started cold (miss).",
		}, []string{"skill_id", "result"}),
		WarmRefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cyberos_warm_refill_duration_seconds", Help: "Time to make one warm sandbox.",
			Buckets: []float64{.01, .025, .05, .075, .1, .25, .5, 1, 2.5},
		}),
		AuditShipLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_ship_lag_rows", Help: "Audit rows durable in this host's journal and not yet in the fleet's PostgreSQL (0 without a fleet).",
		}),
		AuditShipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cyberos_audit_shipped_rows_total", Help: "Audit rows shipped to the fleet's PostgreSQL.",
		}),
		AuditShipErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cyberos_audit_ship_errors_total", Help: "Failed shipping attempts, by reason (database, host_id_in_use, diverged); shipping retries.",
		}, []string{"reason"}),
		AuditScrubLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_scrub_last_timestamp_seconds", Help: "When the last scrub of the whole audit chain ended (Unix time; 0: none yet).",
		}),
		AuditScrubOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_scrub_last_ok", Help: "1 when the last scrub found the audit chain sound, 0 when it found damage or could not read it.",
		}),
		AuditScrubProblems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_scrub_last_problems", Help: "Damaged rows (problems) the last scrub found.",
		}),
		AuditScrubRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_scrub_last_rows", Help: "Rows the last scrub verified.",
		}),
		AuditScrubDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_scrub_last_duration_seconds", Help: "How long the last scrub took.",
		}),
		AuditWitnessUnchecked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cyberos_audit_witness_unchecked", Help: "1 while this host's audit chain has not been compared with the rows the fleet's PostgreSQL holds for it since start (it was unreachable), else 0.",
		}),
	}
	m.addOps()
	m.Registry.MustRegister(m.InvokedTotal, m.InvokedDuration, m.InvocationsLost, m.AuditEmitFailures, m.AuditEmitDuration,
		m.SandboxStart, m.InvocationsRunning, m.ToolCalls, m.ResponseTruncated, m.WarmSandboxes, m.WarmClaims, m.WarmRefill,
		m.AuditShipLag, m.AuditShipped, m.AuditShipErrors, m.AuditWitnessUnchecked,
		m.AuditScrubLast, m.AuditScrubOK, m.AuditScrubProblems, m.AuditScrubRows, m.AuditScrubDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cyberos_audit_damaged", Help: "1 while the audit store is found damaged and no invocation is taken (until `cyberos audit repair`).",
		}, func() float64 {
			if f := m.auditDamaged.Load(); f != nil && (*f)() {
				return 1
			}
			return 0
		}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	for _, r := range []string{ShipErrorDatabase, ShipErrorHostID, ShipErrorDiverged} {
		m.AuditShipErrors.WithLabelValues(r)
	}
	for _, stage := range []string{StageStart, StageCompleted} {
		m.AuditEmitFailures.WithLabelValues(stage)
		m.AuditEmitDuration.WithLabelValues(stage)
	}
	return m
}

// addOps registers the admin API's series, each refusal reason at 0.
func (m *Metrics) addOps() {
	m.AdmissionRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cyberos_admission_refusals_total", Help: "Invocations the admin API refused before running them, by reason (max_concurrent: 429; shutting_down, audit_damaged: 503).",
	}, []string{"reason"})
	m.AdminRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cyberos_admin_requests_total", Help: "Admin API requests answered, by route pattern and HTTP status code.",
	}, []string{"route", "code"})
	m.ToolDenials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cyberos_tool_denials_total", Help: "Broker tool calls refused, by skill and the denial's reason (the skill.tool_denied row's).",
	}, []string{"skill_id", "reason"})
	m.Registry.MustRegister(m.AdmissionRefused, m.AdminRequests, m.ToolDenials)
	for _, r := range []string{RefusedMaxConcurrent, RefusedShuttingDown, RefusedAuditDamaged} {
		m.AdmissionRefused.WithLabelValues(r)
	}
}

// WatchAuditDamage makes cyberos_audit_damaged report damaged(): 1 while
// damage (the start-up check's or a scrub's) stops the daemon taking
// invocations.
func (m *Metrics) WatchAuditDamage(damaged func() bool) { m.auditDamaged.Store(&damaged) }

// Handler serves m's registry as /metrics: Prometheus text, or
// OpenMetrics when the scraper asks for it.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// buildInfo is cyberos_build_info{version,revision,goversion} 1: the
// module version, the VCS revision the binary was built from, and its Go.
func buildInfo() prometheus.Collector {
	b := Build()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cyberos_build_info", Help: "The build: module version, VCS revision and Go version, as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	}, func() float64 { return 1 })
}

// BuildFacts say what a binary was built from (`cyberos version`,
// cyberos_build_info).
type BuildFacts struct {
	Version   string // the module version; "(devel)" for a build from a checkout
	Revision  string // the VCS revision, "+dirty" when the tree had changes; "unknown" without VCS data
	Time      string // the revision's commit time (RFC 3339), when known
	GoVersion string
	Platform  string // GOOS/GOARCH
}

// Build reads the facts Go stamps into every binary.
func Build() BuildFacts {
	b := BuildFacts{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "unknown" {
		b.Revision += "+dirty"
	}
	return b
}
