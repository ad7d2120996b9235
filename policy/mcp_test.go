package policy

import (
	"errors"
	"strings"
	"testing"
)

// The MCP rule shapes agents write: a whole server (mcp__s, mcp__s__*),
// one tool (mcp__s__t); denylist wins; default deny.
func TestMCPCheckTool(t *testing.T) {
	echo := MCPTool("everything", "echo")
	add := MCPTool("everything", "add")
	for _, tc := range []struct {
		name, yaml string
		tool       Tool
		want       Reason
	}{
		{"whole server", "allowed_tools: [mcp__everything]", echo, ""},
		{"whole server, star", "allowed_tools: [mcp__everything__*]", add, ""},
		{"one tool", "allowed_tools: [mcp__everything__echo]", echo, ""},
		{"one tool, not another", "allowed_tools: [mcp__everything__echo]", add, ReasonToolNotAllowed},
		{"other server", "allowed_tools: [mcp__everything]", MCPTool("github", "create_issue"), ReasonToolNotAllowed},
		{"default deny", "allowed_tools: [Read]", echo, ReasonToolNotAllowed},
		{"no lists", "", echo, ReasonToolNotAllowed},
		{"tool denied beats server allowed", "allowed_tools: [mcp__everything]\ndisallowed_tools: [mcp__everything__echo]", echo, ReasonToolDenied},
		{"tool denied leaves the others", "allowed_tools: [mcp__everything]\ndisallowed_tools: [mcp__everything__echo]", add, ""},
		{"server denied beats tool allowed", "allowed_tools: [mcp__everything__echo]\ndisallowed_tools: [mcp__everything__*]", echo, ReasonToolDenied},
		{"server denied beats server allowed", "allowed_tools: [mcp__everything]\ndisallowed_tools: [mcp__everything]", echo, ReasonToolDenied},
		{"hyphenated string form", "allowed-tools: Read, mcp__everything__echo", echo, ""},
		{"a server's prefix is not the server", "allowed_tools: [mcp__every]", echo, ReasonToolNotAllowed},
		{"malformed call name", "allowed_tools: [mcp__everything]", Tool("mcp__everything"), ReasonUnknownTool},
		{"malformed call name, bad tool", "allowed_tools: [mcp__everything]", Tool("mcp__everything__ech o"), ReasonUnknownTool},
		{"tool part holding __ splits at the first", "allowed_tools: [mcp__a__b__c]", Tool("mcp__a__b__c"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			checkReason(t, string(tc.tool), e.CheckTool(tc.tool), tc.tool, tc.want)
		})
	}
}

// Invalid MCP rules are refused at validation with a reason naming the
// shapes; above all a bare mcp__* never grants every server.
func TestMCPRuleInvalid(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"mcp__*", "name the server"},
		{"mcp__", "name the server"},
		{"mcp__*__echo", "name the server"},
		{"mcp__Every", "server name"},
		{"mcp__a__b/c", "tool name"},
		{"mcp__everything__ec*", `"*" stands only for the whole tool`},
		{"mcp__everything__echo(x)", "takes no (pattern)"},
		{"mcp__" + strings.Repeat("a", 33), "server name"},
		{"mcp__everything__" + strings.Repeat("t", 129), "tool name"},
	} {
		for _, key := range []string{"allowed_tools", "disallowed_tools"} {
			_, err := Parse([]byte(doc(base + key + ": ['" + tc.rule + "']")))
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), key) {
				t.Errorf("%s: %s: err %v, want a FieldError naming %s with %q", key, tc.rule, err, key, tc.want)
			}
		}
	}
}

// A hand-built policy's invalid deny rule fails closed: it denies its
// whole server; an invalid allow rule grants nothing.
func TestMCPHandBuiltFailsClosed(t *testing.T) {
	echo := MCPTool("everything", "echo")
	e := NewEnforcer(&Policy{
		AllowedTools:    []ToolRule{{Tool: "mcp__everything"}, {Tool: "mcp__other__x", Pattern: "y"}},
		DisallowedTools: []ToolRule{{Tool: "mcp__everything__ec*o"}},
	}, EnforcerOptions{})
	checkReason(t, "invalid deny", e.CheckTool(echo), echo, ReasonToolDenied)
	x := MCPTool("other", "x")
	checkReason(t, "invalid allow", e.CheckTool(x), x, ReasonToolNotAllowed)
}

func TestMCPSplit(t *testing.T) {
	s, tool, ok := Tool("mcp__fs__read_text_file").SplitMCP()
	if !ok || s != "fs" || tool != "read_text_file" {
		t.Errorf("SplitMCP = %q %q %v", s, tool, ok)
	}
	for _, bad := range []Tool{"Read", "mcp__fs", "mcp____x", "mcp__FS__x", "mcp__fs__"} {
		if _, _, ok := bad.SplitMCP(); ok {
			t.Errorf("%q split", bad)
		}
	}
}

func TestMCPServerGranted(t *testing.T) {
	for _, tc := range []struct {
		yaml   string
		server string
		want   bool
	}{
		{"allowed_tools: [mcp__fs]", "fs", true},
		{"allowed_tools: [mcp__fs__read]", "fs", true},
		{"allowed_tools: [mcp__fs__read]", "other", false},
		{"allowed_tools: [mcp__fs]\ndisallowed_tools: [mcp__fs__*]", "fs", false},
		{"allowed_tools: [mcp__fs__read]\ndisallowed_tools: [mcp__fs__read]", "fs", false},
		{"allowed_tools: [Read]", "fs", false},
	} {
		if got := newEnforcer(t, tc.yaml, EnforcerOptions{}).MCPServerGranted(tc.server); got != tc.want {
			t.Errorf("%q, %s: %v, want %v", tc.yaml, tc.server, got, tc.want)
		}
	}
}
