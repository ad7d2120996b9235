package audit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestMCPRows(t *testing.T) {
	c := Common{InvocationID: "inv", SkillID: "s", TenantID: "t", TraceID: "tr"}
	h := strings.Repeat("ab", 32)
	m := MCP{Server: "everything", DefinitionHash: h}
	for _, d := range []Draft{
		ToolCallStartedMCP(c, "1", "mcp__everything__echo", h, m),
		ToolCallCompletedMCP(c, "1", "mcp__everything__echo", OutcomeSuccess, 3, h, "", m),
		ToolDeniedMCP(c, "mcp__everything__echo", "tool_definition_changed", h, m),
	} {
		if err := d.Validate(); err != nil {
			t.Fatalf("%s: %v", d.Kind, err)
		}
		var p map[string]any
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p["mcp_server"] != "everything" || p["tool_definition_hash"] != h || p["tool_name"] != "mcp__everything__echo" {
			t.Errorf("%s: payload %s", d.Kind, d.Payload)
		}
		// A hand-made draft with the same members validates too (Verify
		// reads stored rows so).
		if err := (Draft{Kind: d.Kind, Payload: append(json.RawMessage(nil), d.Payload...)}).Validate(); err != nil {
			t.Errorf("%s re-validated: %v", d.Kind, err)
		}
	}
	// The zero MCP adds nothing: the native rows.
	if a, b := ToolCallStartedMCP(c, "1", "Read", h, MCP{}), ToolCallStarted(c, "1", "Read", h); string(a.Payload) != string(b.Payload) {
		t.Errorf("zero MCP: %s vs %s", a.Payload, b.Payload)
	}
	// Other kinds do not take the members; a bad hash is refused.
	bad := Draft{Kind: KindNoConnect, Payload: json.RawMessage(`{"invocation_id":"i","skill_id":"s","request_id":"","tenant_id":"","trace_id":"","waited_ms":1,"mcp_server":"x"}`)}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidRow) {
		t.Errorf("mcp_server on no_connect: %v", err)
	}
	if err := ToolCallStartedMCP(c, "1", "mcp__a__b", h, MCP{Server: "a", DefinitionHash: "nothex"}).Validate(); !errors.Is(err, ErrInvalidRow) {
		t.Errorf("bad definition hash: %v", err)
	}
}
