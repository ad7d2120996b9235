package daemon

import (
	"cyberos.dev/client"
	"cyberos.dev/supervisor/internal/broker"
)

// The admin API's bodies are the daemon client's types: one definition
// for both ends of the socket.
type (
	InvokeRequest = client.InvokeRequest
	Status        = client.Status
	ActiveView    = client.ActiveView
	Recent        = client.Recent
	SkillList     = client.SkillList
	UnusableSkill = client.UnusableSkill
	SkillFile     = client.SkillFile
)

// DefaultTenant is the tenant of a request that names none.
const DefaultTenant = client.DefaultTenant

// A tool call reaches the client as the broker decided it: the conversion
// stops compiling when the two differ.
var _ = client.ToolCall(broker.Decided{})
