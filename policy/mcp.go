package policy

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// MCP tools are named mcp__<server>__<tool>, as agents name them in their
// permission rules. A rule names a whole server ("mcp__github", or
// "mcp__github__*", the same thing) or one tool
// ("mcp__github__create_issue"); a bare "mcp__*" is invalid, so a skill
// never gets every server's tools by accident. Disallowed beats allowed;
// without an allowed rule naming it, an MCP tool is denied.

// MCPPrefix starts every MCP tool's name.
const MCPPrefix = "mcp__"

// mcpSep separates the server from the tool.
const mcpSep = "__"

// MaxMCPToolName bounds the tool part of mcp__<server>__<tool> (the MCP
// specification's tool name length).
const MaxMCPToolName = 128

var (
	mcpServerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9_-]{1,32}$`) })
	// mcpToolRE is the MCP specification's tool name alphabet.
	mcpToolRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`) })
)

// ValidMCPServer reports whether s may name an MCP server: [a-z0-9_-]{1,32}
// without "__".
func ValidMCPServer(s string) bool {
	return mcpServerRE().MatchString(s) && !strings.Contains(s, mcpSep)
}

// ValidMCPToolName reports whether s may be the tool part of an MCP tool's
// name: [A-Za-z0-9_.-]{1,128}.
func ValidMCPToolName(s string) bool { return mcpToolRE().MatchString(s) }

// MCPTool is the broker's name of tool on server.
func MCPTool(server, tool string) Tool { return Tool(MCPPrefix + server + mcpSep + tool) }

// IsMCP reports whether t is named as an MCP tool (mcp__...), valid or not.
func (t Tool) IsMCP() bool { return strings.HasPrefix(string(t), MCPPrefix) }

// SplitMCP splits mcp__<server>__<tool> at the first "__" after the
// prefix; ok is false unless both parts are valid.
func (t Tool) SplitMCP() (server, tool string, ok bool) {
	rest, found := strings.CutPrefix(string(t), MCPPrefix)
	if !found {
		return "", "", false
	}
	server, tool, found = strings.Cut(rest, mcpSep)
	if !found || !ValidMCPServer(server) || !ValidMCPToolName(tool) {
		return "", "", false
	}
	return server, tool, true
}

// mcpRule reads an allowed_tools/disallowed_tools entry starting with
// mcp__: the whole server (mcp__s, mcp__s__*) or one tool (mcp__s__t).
// The rule's Tool is mcp__s for a server, mcp__s__t for a tool.
func mcpRule(s string, hasPattern bool) (ToolRule, string) {
	const shapes = "write mcp__<server> or mcp__<server>__* for a whole server, mcp__<server>__<tool> for one tool"
	if hasPattern {
		return ToolRule{}, "an MCP tool takes no (pattern): " + shapes
	}
	rest := strings.TrimPrefix(s, MCPPrefix)
	if rest == "*" || rest == "" || strings.HasPrefix(rest, "*") {
		return ToolRule{}, fmt.Sprintf("%q is not allowed: name the server; %s", s, shapes)
	}
	server, tool, hasTool := strings.Cut(rest, mcpSep)
	if !ValidMCPServer(server) {
		return ToolRule{}, fmt.Sprintf("%q: server name %q must match [a-z0-9_-]{1,32} without \"__\"; %s", s, server, shapes)
	}
	switch {
	case !hasTool, tool == "*":
		return ToolRule{Tool: Tool(MCPPrefix + server)}, ""
	case strings.Contains(tool, "*"):
		return ToolRule{}, fmt.Sprintf("%q: \"*\" stands only for the whole tool (mcp__%s__*); %s", s, server, shapes)
	case !ValidMCPToolName(tool):
		return ToolRule{}, fmt.Sprintf("%q: tool name %q must match [A-Za-z0-9_.-]{1,128}", s, tool)
	}
	return ToolRule{Tool: MCPTool(server, tool)}, ""
}

// mcpRules are an Enforcer's compiled MCP rules: names of whole servers
// (by server) and of single tools (by full name).
type mcpRules struct {
	allowServers, denyServers map[string]bool
	allowTools, denyTools     map[Tool]bool
}

func (m *mcpRules) add(r ToolRule, allow bool) {
	rest := strings.TrimPrefix(string(r.Tool), MCPPrefix)
	server, _, hasTool := strings.Cut(rest, mcpSep)
	set := func(p *map[string]bool) {
		if *p == nil {
			*p = map[string]bool{}
		}
		(*p)[server] = true
	}
	setTool := func(p *map[Tool]bool) {
		if *p == nil {
			*p = map[Tool]bool{}
		}
		(*p)[r.Tool] = true
	}
	valid := r.Pattern == "" && ValidMCPServer(server)
	if hasTool {
		_, _, valid = r.Tool.SplitMCP()
		valid = valid && r.Pattern == ""
	}
	switch {
	case !valid && allow: // dropped, as every invalid allowed rule
	case !valid: // fail closed: an invalid deny rule denies its server
		if ValidMCPServer(server) {
			set(&m.denyServers)
		}
	case hasTool && allow:
		setTool(&m.allowTools)
	case hasTool:
		setTool(&m.denyTools)
	case allow:
		set(&m.allowServers)
	default:
		set(&m.denyServers)
	}
}

// checkMCP judges a call of the MCP tool t.
func (m *mcpRules) check(t Tool) error {
	server, _, ok := t.SplitMCP()
	switch {
	case !ok:
		return &Denial{Reason: ReasonUnknownTool, Tool: t}
	case m.denyServers[server]:
		return &Denial{Reason: ReasonToolDenied, Tool: t, Detail: "its server is listed in disallowed_tools"}
	case m.denyTools[t]:
		return &Denial{Reason: ReasonToolDenied, Tool: t, Detail: "listed in disallowed_tools"}
	case m.allowServers[server], m.allowTools[t]:
		return nil
	}
	return &Denial{Reason: ReasonToolNotAllowed, Tool: t}
}

// MCPServerGranted reports whether some allowed rule names server or one
// of its tools, and no disallowed rule names the whole server: whether any
// of its tools may be called (starting it is worth it).
func (e *Enforcer) MCPServerGranted(server string) bool {
	m := &e.mcp
	if !ValidMCPServer(server) || m.denyServers[server] {
		return false
	}
	if m.allowServers[server] {
		return true
	}
	for t := range m.allowTools {
		if s, _, ok := t.SplitMCP(); ok && s == server && !m.denyTools[t] {
			return true
		}
	}
	return false
}
