package audit

// mcpFields are the members a call of an MCP tool adds to its
// tool_call_started, tool_call_completed and tool_denied rows.
var mcpFields = []field{
	{"mcp_server", nonEmptyString},
	{"tool_definition_hash", hexDigest},
}

// MCP says which MCP server a tool call went to and the hash of the tool's
// definition (name, description, inputSchema, annotations) it was judged
// by. The zero value adds nothing: a native tool's rows.
type MCP struct {
	Server         string
	DefinitionHash string
}

func (m MCP) add(p *payload) {
	if m.Server == "" {
		return
	}
	p.required("mcp_server", m.Server)
	p.hash("tool_definition_hash", m.DefinitionHash)
}

// ToolCallStartedMCP is ToolCallStarted with m's members.
func ToolCallStartedMCP(c Common, callID, tool, argsHash string, m MCP) Draft {
	p := newPayload(KindToolCallStarted, c)
	p.required("call_id", callID)
	p.required("tool_name", tool)
	p.hash("args_hash", argsHash)
	m.add(p)
	return p.draft()
}

// ToolCallCompletedMCP is ToolCallCompleted with m's members.
func ToolCallCompletedMCP(c Common, callID, tool, outcome string, durationMS int64, resultHash, errorMessage string, m MCP) Draft {
	p := newPayload(KindToolCallCompleted, c)
	p.required("call_id", callID)
	p.required("tool_name", tool)
	p.oneOf("outcome", outcome, toolCallOutcomes)
	p.count("duration_ms", durationMS)
	p.hash("result_hash", resultHash)
	p.strOrNull("error_message", errorMessage)
	m.add(p)
	return p.draft()
}

// ToolDeniedMCP is ToolDenied with m's members.
func ToolDeniedMCP(c Common, tool, reason, attemptedArgsHash string, m MCP) Draft {
	p := newPayload(KindToolDenied, c)
	p.required("tool_name", tool)
	p.required("reason", reason)
	p.hash("attempted_args_hash", attemptedArgsHash)
	m.add(p)
	return p.draft()
}
