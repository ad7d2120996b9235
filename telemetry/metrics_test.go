package telemetry

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"cyberos.dev/audit"
)

// TestOutcomeLabelsCoverAudit: every outcome audit accepts is a label value
// the metrics expose (lost aside: no supervisor counts it), so an outcome
// added to audit cannot be missing from the zeroed series.
func TestOutcomeLabelsCoverAudit(t *testing.T) {
	for _, o := range audit.InvocationOutcomes() {
		if o != audit.OutcomeLost && !slices.Contains(InvocationOutcomes(), o) {
			t.Errorf("invocation outcome %q is not a cyberos_skill_invocations_total label value", o)
		}
	}
	if slices.Contains(InvocationOutcomes(), audit.OutcomeLost) {
		t.Errorf("cyberos_skill_invocations_total has a %q label value no supervisor counts", audit.OutcomeLost)
	}
	for _, o := range audit.ToolCallOutcomes() {
		if !slices.Contains(ToolCallOutcomes(), o) {
			t.Errorf("tool-call outcome %q is not a cyberos_tool_calls_total label value", o)
		}
	}
	if slices.Contains(audit.ToolCallOutcomes(), ToolCallDenied) {
		t.Errorf("%q is an audit tool-call outcome; a refusal is a skill.tool_denied row", ToolCallDenied)
	}
}

// TestOutcomeLabelsKept: the label values dashboards and alerts already use
// stay; new ones may be added.
func TestOutcomeLabelsKept(t *testing.T) {
	for _, o := range []string{"success", "error", "panic", "timeout", "killed"} {
		if !slices.Contains(InvocationOutcomes(), o) {
			t.Errorf("cyberos_skill_invocations_total lost outcome label %q", o)
		}
	}
	for _, o := range []string{"success", "denied", "error", "timeout"} {
		if !slices.Contains(ToolCallOutcomes(), o) {
			t.Errorf("cyberos_tool_calls_total lost outcome label %q", o)
		}
	}
}

// TestMetricsLintClean: every series, with a sample in each labelled one,
// passes Prometheus's own naming lint (promlint: base units, _total
// counters, no reserved suffixes), the Go and process collectors included.
func TestMetricsLintClean(t *testing.T) {
	m := sampled()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var ours int
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "cyberos_") {
			ours++
		}
	}
	if ours != 26 {
		t.Errorf("%d cyberos_ series gathered, want 26", ours)
	}
}

// sampled is NewMetrics with a sample in each labelled series, so every
// family is exposed.
func sampled() *Metrics {
	m := NewMetrics()
	m.InvokedTotal.WithLabelValues("s", "success").Inc()
	m.InvokedDuration.WithLabelValues("s").Observe(0.1)
	m.ToolCalls.WithLabelValues("s", "Read", "success").Inc()
	m.WarmSandboxes.WithLabelValues("s").Set(1)
	m.WarmClaims.WithLabelValues("s", "hit").Inc()
	m.AdminRequests.WithLabelValues("POST /v1/invocations", "200").Inc()
	m.ToolDenials.WithLabelValues("s", "file_violation").Inc()
	return m
}
