package telemetry

import (
	"slices"
	"testing"

	"github.com/cyberos/supervisor/audit"
)

// TestOutcomeLabelsCoverAudit: every outcome audit accepts is a label value
// the metrics expose (lost aside: no supervisor counts it), so an outcome
// added to audit cannot be missing from the zeroed series.
func TestOutcomeLabelsCoverAudit(t *testing.T) {
	for _, o := range audit.InvocationOutcomes() {
		if o != audit.OutcomeLost && !slices.Contains(InvocationOutcomes(), o) {
			t.Errorf("invocation outcome %q is not a skill_invoked_total label value", o)
		}
	}
	if slices.Contains(InvocationOutcomes(), audit.OutcomeLost) {
		t.Errorf("skill_invoked_total has a %q label value no supervisor counts", audit.OutcomeLost)
	}
	for _, o := range audit.ToolCallOutcomes() {
		if !slices.Contains(ToolCallOutcomes(), o) {
			t.Errorf("tool-call outcome %q is not a tool_calls_total label value", o)
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
			t.Errorf("skill_invoked_total lost outcome label %q", o)
		}
	}
	for _, o := range []string{"success", "denied", "error", "timeout"} {
		if !slices.Contains(ToolCallOutcomes(), o) {
			t.Errorf("tool_calls_total lost outcome label %q", o)
		}
	}
}
