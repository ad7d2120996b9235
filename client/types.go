package client

import (
	"encoding/json"

	"cyberos.dev/policy"
)

// DefaultTenant is the tenant of a request that names none.
const DefaultTenant = "00000000-0000-0000-0000-000000000000"

// InvokeRequest is the body of POST /v1/invocations.
type InvokeRequest struct {
	SkillID       string          `json:"skill_id"`
	Version       string          `json:"version,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	TenantID      string          `json:"tenant_id,omitempty"`
	CallerPersona string          `json:"caller_persona,omitempty"`
	// Traceparent is the caller's W3C traceparent. It wins over the
	// request's traceparent header (and that header's tracestate is then
	// not used): the body is what the caller wrote for this invocation.
	// An invalid one here is a 400; an invalid header is ignored, as W3C
	// Trace Context asks.
	Traceparent string `json:"traceparent,omitempty"`
	// DeadlineMS shortens effort_minutes like `skill run --deadline`; at
	// most a day, 0 keeps effort_minutes.
	DeadlineMS int64  `json:"deadline_ms,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
	// CancelOnDisconnect: a caller that goes away before the answer
	// cancels the invocation (outcome cancelled), as an MCP client's
	// notifications/cancelled does. Without it the invocation runs on.
	CancelOnDisconnect bool `json:"cancel_on_disconnect,omitempty"`
}

// Status is GET /v1/status (and `cyberos skill broker status`).
type Status struct {
	ActiveInvocations int   `json:"active_invocations"`
	ToolCallsToday    int64 `json:"tool_calls_today"`
	DeniedToday       int64 `json:"denied_today"`
	// ProtocolAbuseToday counts skill.protocol_abuse rows: each kind of
	// broker protocol abuse once per invocation.
	ProtocolAbuseToday int64        `json:"protocol_abuse_today"`
	Day                string       `json:"day"` // the UTC day counted, YYYY-MM-DD
	Invocations        []ActiveView `json:"invocations"`
	// SandboxCgroups says where this daemon makes its sandboxes' cgroups,
	// and why (`cyberos doctor` shows it).
	SandboxCgroups string `json:"sandbox_cgroups,omitempty"`
}

// ActiveView is one running invocation in Status.
type ActiveView struct {
	InvocationID string `json:"invocation_id"`
	SkillID      string `json:"skill_id"`
	TenantID     string `json:"tenant_id"`
	StartedAt    string `json:"started_at"`
	ToolCalls    int64  `json:"tool_calls"`
	// ProtocolAbuse lists the kinds of protocol abuse seen so far.
	ProtocolAbuse []string `json:"protocol_abuse,omitempty"`
}

// Recent is one ended invocation of GET /v1/invocations, newest first.
type Recent struct {
	InvocationID string `json:"invocation_id"`
	SkillID      string `json:"skill_id"`
	TenantID     string `json:"tenant_id"`
	EndedAt      string `json:"ended_at"`
	Outcome      string `json:"outcome"`
	DurationMS   int64  `json:"duration_ms"`
}

// ToolCall is one decided tool call: a line of a tail stream, an element
// of a replay, the call of a tool_call Event. Its fields are the broker's
// Decided event's, in the same order.
type ToolCall struct {
	TS           string `json:"ts"` // RFC 3339, UTC
	InvocationID string `json:"invocation_id"`
	Tool         string `json:"tool"`
	// Outcome is success, error, timeout or denied.
	Outcome    string `json:"outcome"`
	DurationMS int64  `json:"duration_ms"`
	ArgsHash   string `json:"args_hash"`
	// Reason is the denial's data.reason; empty unless Outcome is denied.
	Reason string `json:"reason,omitempty"`
	// PolicyHash is the policy_hash of the invocation's
	// skill.invoked_started row: which policy judged the call.
	PolicyHash string `json:"policy_hash,omitempty"`
}

// Event types of GET /v1/events.
const (
	EventWatching          = "watching"
	EventInvocationStarted = "invocation_started"
	EventToolCall          = "tool_call"
	EventInvocationEnded   = "invocation_ended"
)

// Event is one line of GET /v1/events: an invocation started, one of its
// tool calls decided, or the invocation ended. The first line of a stream
// is type "watching".
type Event struct {
	Type         string    `json:"type"`
	InvocationID string    `json:"invocation_id,omitempty"`
	SkillID      string    `json:"skill_id,omitempty"`
	TenantID     string    `json:"tenant_id,omitempty"`
	RequestID    string    `json:"request_id,omitempty"` // invocation_started
	TS           string    `json:"ts,omitempty"`
	Outcome      string    `json:"outcome,omitempty"` // invocation_ended
	Call         *ToolCall `json:"call,omitempty"`    // tool_call
}

// SkillList is GET /v1/skills: the skills of skills_dir as the next
// invocation would load them (SKILL.md is read again), and the folders
// that are not usable, with why.
type SkillList struct {
	Skills   []*policy.Policy `json:"skills"`
	Unusable []UnusableSkill  `json:"unusable"`
}

// UnusableSkill is a folder of skills_dir that is not a usable skill.
type UnusableSkill struct {
	SkillID string `json:"skill_id"`
	Error   string `json:"error"`
}

// SkillFile is one regular file of a skill's folder.
type SkillFile struct {
	Path string `json:"path"` // slash-separated, relative to the folder
	Size int64  `json:"size"`
}

// MCPServer is one MCP server instance as the daemon runs it (GET
// /v1/mcp/servers): its status, restarts, and tools with their definition
// hashes.
type MCPServer struct {
	Server   string    `json:"server"`
	Instance string    `json:"instance,omitempty"` // the tenant or invocation of a shared-by instance
	Status   string    `json:"status"`             // up, restarting, stopped
	Restarts int       `json:"restarts"`
	Tools    []MCPTool `json:"tools,omitempty"`
}

// MCPTool is one tool of an MCP server instance.
type MCPTool struct {
	Name           string `json:"name"`
	DefinitionHash string `json:"definition_hash"`
	// Changed: the definition differs from the approved one and is refused
	// until approved.
	Changed bool `json:"changed,omitempty"`
}
