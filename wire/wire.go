// Package wire is the broker's contract with skills, declared once for both
// sides: the socket, the frames and their caps, the error object, codes and reasons.
package wire

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Where a skill finds its broker, and the other variables the supervisor
// sets in the skill's otherwise empty environment.
const (
	// EnvSocket holds the broker socket path.
	EnvSocket = "CYBEROS_BROKER_SOCKET"
	// SandboxSocket is where the socket is bind-mounted inside the sandbox.
	SandboxSocket = "/run/cyberos/broker.sock"

	EnvSkillID      = "CYBEROS_SKILL_ID"
	EnvInvocationID = "CYBEROS_INVOCATION_ID"
	EnvTenantID     = "CYBEROS_TENANT_ID"
)

// Frames: a HeaderLen-byte big-endian body length, then the body.
const (
	HeaderLen = 4
	// MaxRequest is the largest request body the broker reads; a longer
	// frame is discarded unread and answered with request_too_large.
	MaxRequest = 1 << 20
	// MaxResponse is the largest response body the broker writes; a longer
	// response is replaced by a response_too_large error.
	MaxResponse = 16 << 20
)

// PutHeader writes the header of an n-byte body into hdr[:HeaderLen].
func PutHeader(hdr []byte, n uint32) { binary.BigEndian.PutUint32(hdr, n) }

// BodyLen reads the body length from a frame header.
func BodyLen(hdr []byte) uint32 { return binary.BigEndian.Uint32(hdr) }

// JSON-RPC 2.0 error codes the broker answers with.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603 // every enforcement refusal, with data.reason
	CodeToolError      = -32000 // the tool ran and failed (data.reason tool_error or timeout)
)

// Refusals of the policy enforcer: the values of policy.Reason (policy
// imports nothing of this module, so it repeats them; a test ties the two).
const (
	ReasonToolNotInAllowedTools = "tool_not_in_allowed_tools"
	ReasonToolDenied            = "tool_denied"
	ReasonScopeViolation        = "scope_violation"
	ReasonFileViolation         = "file_violation"
	ReasonDomainViolation       = "domain_violation"
	ReasonRequestTooLarge       = "request_too_large"
	ReasonRateLimited           = "rate_limited"
	ReasonUnknownTool           = "unknown_tool"
	ReasonDefinitionChanged     = "tool_definition_changed"
	ReasonMemoryBudget          = "memory_budget"
)

// Reasons the broker itself gives in data.reason.
const (
	ReasonResponseTooLarge = "response_too_large"
	ReasonAuditUnavailable = "audit_unavailable"
	ReasonToolError        = "tool_error"
	ReasonTimeout          = "timeout"
	ReasonInvalidParams    = "invalid_params"
	ReasonBatchTooLarge    = "batch_too_large"
	ReasonNestingTooDeep   = "nesting_too_deep"
	ReasonAuditCapReached  = "audit_cap_reached"
)

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int        `json:"code"`
	Message string     `json:"message"`
	Data    *ErrorData `json:"data,omitempty"`
}

// ErrorData is the error object's data member: Reason is one of the
// Reason constants.
type ErrorData struct {
	Reason  string `json:"reason"`
	Tool    string `json:"tool,omitempty"`
	SkillID string `json:"skill_id,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Partial is what a timed-out tool had produced (Bash's output so far).
	Partial json.RawMessage `json:"partial,omitempty"`
}

func (e *RPCError) Error() string {
	if e.Data != nil && e.Data.Reason != "" {
		return fmt.Sprintf("json-rpc error %d: %s (%s)", e.Code, e.Message, e.Data.Reason)
	}
	return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message)
}

// Reason returns Data.Reason, or "".
func (e *RPCError) Reason() string {
	if e.Data == nil {
		return ""
	}
	return e.Data.Reason
}
