package broker

import (
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDenialsCountedByReason: every refused call counts once in
// cyberos_tool_denials_total under its skill and the denial's reason, the
// broker's own refusals and a tool's resource check alike.
func TestDenialsCountedByReason(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	c.rpc(callBody(1, "Bash", `{"cmd":"ls"}`, ""))
	c.rpc(callBody(2, "NoSuchTool", `{}`, ""))
	c.rpc(callBody(3, "Write", `{"path":"/etc/passwd","body":"x"}`, ""))
	c.rpc(callBody(4, "Write", `{"path":"/etc/shadow","body":"x"}`, ""))
	for reason, want := range map[string]float64{"tool_not_in_allowed_tools": 1, "unknown_tool": 1, "file_violation": 2} {
		if got := promtest.ToFloat64(e.metrics.ToolDenials.WithLabelValues("test-skill", reason)); got != want {
			t.Errorf("cyberos_tool_denials_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
