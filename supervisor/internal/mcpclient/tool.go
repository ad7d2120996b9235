package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// Tool is one registered MCP tool, as the broker calls it.
type Tool struct {
	srv      *Server
	name     string      // the server's name for it
	full     policy.Tool // mcp__<server>__<name>
	desc     string
	schema   json.RawMessage
	resolved *jsonschema.Resolved
	defHash  string
	// changed: the definition differs from the approved one (cleared
	// once the store approves this very definition).
	changed atomic.Bool
}

// refused reports whether the tool's definition is still not approved,
// looking at the store again: `cyberos mcp approve` takes effect on the
// next call.
func (t *Tool) refused() bool {
	if !t.changed.Load() {
		return false
	}
	if t.srv.o.Approvals.Approved(t.srv.o.Name, t.name) == t.defHash {
		t.changed.Store(false)
		return false
	}
	return true
}

var (
	_ tools.Tool       = (*Tool)(nil)
	_ tools.Schemed    = (*Tool)(nil)
	_ tools.AuditExtra = (*Tool)(nil)
)

// Name is mcp__<server>__<tool>.
func (t *Tool) Name() policy.Tool { return t.full }

// Description is the server's description of the tool.
func (t *Tool) Description() string { return t.desc }

// InputSchema is the tool's inputSchema as the server gave it.
func (t *Tool) InputSchema() json.RawMessage { return t.schema }

// DefinitionHash is the hash of the tool's definition (DefinitionHash).
func (t *Tool) DefinitionHash() string { return t.defHash }

// AuditFields are the server's name and the definition hash.
func (t *Tool) AuditFields() (string, string) { return t.srv.o.Name, t.defHash }

// maxErrorText bounds the text of an isError result passed to the skill
// as the error's detail.
const maxErrorText = 4096

// Call validates the args against the inputSchema, then sends tools/call
// with the call's traceparent in params._meta, bounded by the server's
// call timeout and ctx (the invocation's). When either ends first, the SDK
// sends notifications/cancelled. The result (content and
// structuredContent) is returned as the server's JSON; isError is a
// failure whose text reaches the skill.
func (t *Tool) Call(ctx context.Context, c *tools.Call) (any, error) {
	if t.refused() {
		return nil, &policy.Denial{Reason: policy.ReasonDefinitionChanged, Tool: t.full}
	}
	var args any
	if err := json.Unmarshal(c.Args, &args); err != nil {
		return nil, &tools.SkillError{Class: tools.ErrInvalidParams, Msg: "args must be a JSON object"}
	}
	if err := t.resolved.Validate(args); err != nil {
		return nil, &tools.SkillError{Class: tools.ErrInvalidParams, Msg: clip("args do not match the tool's inputSchema: "+err.Error(), 1024)}
	}
	t.srv.begin()
	defer t.srv.end()
	ss, err := t.srv.current(ctx)
	if err != nil {
		return nil, &tools.SkillError{Class: tools.ErrFailed, Msg: "MCP server " + t.srv.o.Name + " is not available"}
	}
	ctx, cancel := context.WithTimeout(ctx, t.srv.o.CallTimeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: t.name, Arguments: c.Args}
	if c.Traceparent != "" {
		params.Meta = mcp.Meta{"traceparent": c.Traceparent}
	}
	began := time.Now()
	res, err := ss.cs.CallTool(ctx, params)
	t.srv.o.Metrics.call(t.srv.o.Name, time.Since(began))
	switch {
	case err == nil:
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: mcp %s: %w", tools.ErrTimeout, t.full, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w: mcp %s: cancelled: %w", tools.ErrFailed, t.full, err)
	case errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || !ss.alive():
		t.srv.log.Warn("mcp: server ended during a call", "tool", t.name, "err", err)
		t.srv.drop(ss)
		return nil, &tools.SkillError{Class: tools.ErrFailed, Msg: "MCP server " + t.srv.o.Name + " ended during the call"}
	default:
		return nil, &tools.SkillError{Class: tools.ErrFailed, Msg: clip("MCP server error: "+err.Error(), 1024)}
	}
	if res.IsError {
		return nil, &tools.SkillError{Class: tools.ErrFailed, Msg: clip(errorText(res), maxErrorText)}
	}
	raw, err := json.Marshal(struct {
		Content           []mcp.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
	}{res.Content, res.StructuredContent})
	if err != nil {
		return nil, fmt.Errorf("%w: mcp %s: result does not encode: %w", tools.ErrFailed, t.full, err)
	}
	// The encoding is held until the response is written: it counts in the
	// broker's budgets of response bytes as a native tool's result does, and
	// one that does not fit is refused (memory_budget). What the SDK read
	// to decode it is the frame cap's to bound.
	if c.Mem != nil {
		if err := c.Mem.Reserve(ctx, int64(len(raw))); err != nil {
			return nil, err
		}
	}
	return json.RawMessage(raw), nil
}

// errorText joins the text blocks of an isError result.
func errorText(res *mcp.CallToolResult) string {
	var b strings.Builder
	b.WriteString("MCP tool error")
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(": ")
			b.WriteString(tc.Text)
			if b.Len() > maxErrorText {
				break
			}
		}
	}
	return b.String()
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Source serves a set of servers' tools to one invocation's broker.
type Source struct {
	servers map[string]*Server
}

var _ tools.Source = (*Source)(nil)

// NewSource serves servers' tools.
func NewSource(servers ...*Server) *Source {
	m := make(map[string]*Server, len(servers))
	for _, s := range servers {
		m[s.o.Name] = s
	}
	return &Source{servers: m}
}

// Lookup finds mcp__<server>__<tool>, starting the server on first use. A
// tool whose definition changed is returned with a tool_definition_changed
// denial; a server that cannot start is a failure (ErrFailed).
func (s *Source) Lookup(ctx context.Context, name policy.Tool) (tools.Tool, bool, error) {
	server, tool, ok := name.SplitMCP()
	if !ok {
		return nil, false, nil
	}
	srv := s.servers[server]
	if srv == nil {
		return nil, false, nil
	}
	t, _, err := srv.tool(ctx, tool)
	switch {
	case err != nil:
		return nil, true, &tools.SkillError{Class: tools.ErrFailed, Msg: "MCP server " + server + " is not available"}
	case t == nil:
		return nil, false, nil
	case t.refused():
		return t, true, &policy.Denial{Reason: policy.ReasonDefinitionChanged, Tool: name,
			Detail: "the tool's definition changed since an operator approved it"}
	}
	return t, true, nil
}

// Tools lists the tools e permits, starting only the servers e grants
// something of; a server that cannot start is left out.
func (s *Source) Tools(ctx context.Context, e *policy.Enforcer) []tools.Tool {
	names := make([]string, 0, len(s.servers))
	for name := range s.servers {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []tools.Tool
	for _, name := range names {
		if !e.MCPServerGranted(name) {
			continue
		}
		ts, err := s.servers[name].Tools(ctx)
		if err != nil {
			continue
		}
		slices.SortFunc(ts, func(a, b *Tool) int { return strings.Compare(a.name, b.name) })
		for _, t := range ts {
			if !t.refused() && e.CheckTool(t.full) == nil {
				out = append(out, t)
			}
		}
	}
	return out
}
