package policy

import "fmt"

// Reason is why the enforcer refused a call; it is the JSON-RPC error's
// data.reason and the skill.tool_denied row's reason.
type Reason string

// The refusal reasons of DESIGN.md "JSON-RPC 2.0".
const (
	ReasonToolNotAllowed Reason = "tool_not_in_allowed_tools"
	ReasonToolDenied     Reason = "tool_denied"
	ReasonScope          Reason = "scope_violation"
	ReasonFile           Reason = "file_violation"
	ReasonDomain         Reason = "domain_violation"
	ReasonTooLarge       Reason = "request_too_large"
	ReasonRateLimited    Reason = "rate_limited"
	ReasonUnknownTool    Reason = "unknown_tool"
	// ReasonDefinitionChanged: an MCP tool's definition differs from the
	// one first recorded, and no operator has approved the change.
	ReasonDefinitionChanged Reason = "tool_definition_changed"
	// ReasonMemoryBudget: the call would hold more response bytes than the
	// invocation's or the daemon's budget has free (the broker's refusal).
	ReasonMemoryBudget Reason = "memory_budget"
)

// Denial is an enforcement refusal. Detail is for the skill and the log; it
// never holds host paths beyond what the skill itself asked for.
type Denial struct {
	Reason Reason
	Tool   Tool
	Detail string
}

func (d *Denial) Error() string {
	if d.Detail == "" {
		return fmt.Sprintf("%s: %s", d.Tool, d.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", d.Tool, d.Reason, d.Detail)
}
