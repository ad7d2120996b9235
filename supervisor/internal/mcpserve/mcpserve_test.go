package mcpserve

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/supervisor"
)

// TestResultOf: success is the skill's JSON as text, and as
// structuredContent when an object; every other outcome is isError with
// the message and the invocation id.
func TestResultOf(t *testing.T) {
	r := resultOf(&supervisor.Envelope{InvocationID: "inv1", Outcome: supervisor.OutcomeSuccess, Result: json.RawMessage(`{"a":1}`)})
	if r.IsError || string(r.StructuredContent.(json.RawMessage)) != `{"a":1}` || r.Content[0].(*mcp.TextContent).Text != `{"a":1}` {
		t.Errorf("object: %+v", r)
	}
	r = resultOf(&supervisor.Envelope{InvocationID: "inv2", Outcome: supervisor.OutcomeSuccess, Result: json.RawMessage(`[1,2]`)})
	if r.IsError || r.StructuredContent != nil || r.Content[0].(*mcp.TextContent).Text != `[1,2]` {
		t.Errorf("array: %+v", r)
	}
	for _, o := range []supervisor.Outcome{supervisor.OutcomeError, supervisor.OutcomePanic, supervisor.OutcomeTimeout, supervisor.OutcomeKilled, supervisor.OutcomeCancelled} {
		r := resultOf(&supervisor.Envelope{SkillID: "s", InvocationID: "inv3", Outcome: o, ErrorMessage: "it broke"})
		txt := r.Content[0].(*mcp.TextContent).Text
		if !r.IsError || !strings.Contains(txt, "inv3") || !strings.Contains(txt, "it broke") || r.Meta["dev.cyberos/invocation-id"] != "inv3" {
			t.Errorf("%s: %+v %q", o, r, txt)
		}
	}
}
