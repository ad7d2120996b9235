package tools

import (
	"context"
	"encoding/json"

	"cyberos.dev/policy"
)

// Source is a set of tools registered besides the native ones: an MCP
// server's, named mcp__<server>__<tool>. The broker looks a call's tool up
// in the native registry, then in its sources; the enforcer judges it
// either way.
type Source interface {
	// Lookup returns the tool registered as name. ok is false when the
	// source does not hold it; err (a *policy.Denial or an error class of
	// this package) when it does but the tool may not be called now, e.g.
	// its definition changed since it was approved.
	Lookup(ctx context.Context, name policy.Tool) (t Tool, ok bool, err error)
	// Tools lists the source's tools e permits (a source starts no server
	// e grants nothing of).
	Tools(ctx context.Context, e *policy.Enforcer) []Tool
}

// Schemed is a tool whose tool.list entry carries its JSON Schema.
type Schemed interface {
	InputSchema() json.RawMessage
}

// AuditExtra is a tool whose audit rows carry more than a native tool's:
// an MCP tool's server and the hash of its definition.
type AuditExtra interface {
	AuditFields() (mcpServer, definitionHash string)
}
