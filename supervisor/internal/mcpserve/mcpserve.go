// Package mcpserve serves the installed skills to MCP clients: every
// tools/call becomes one invocation on the daemon's ordinary path
// (sandbox, broker, policy, audit), reached through a Backend; an
// instructions-only skill is a prompt, its files skill:// resources.
package mcpserve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/client"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
)

// Call is one tools/call as the daemon's invocation request.
type Call struct {
	SkillID     string          `json:"skill_id"`
	Args        json.RawMessage `json:"args,omitempty"`
	TenantID    string          `json:"tenant_id,omitempty"`
	Traceparent string          `json:"traceparent,omitempty"`
	RequestID   string          `json:"request_id,omitempty"`
	// CancelOnDisconnect is always set: an MCP call whose context ends
	// (notifications/cancelled) cancels its invocation.
	CancelOnDisconnect bool `json:"cancel_on_disconnect"`
}

// Backend is the daemon as the server sees it: the admin socket for
// `cyberos mcp serve`, the daemon itself for /mcp.
type Backend interface {
	// Skills lists the usable installed skills.
	Skills(ctx context.Context) ([]*policy.Policy, error)
	// Invoke runs one invocation. A refusal (nothing ran, or the daemon
	// answered with an error) is an *APIError. h is the HTTP header of an
	// /mcp request (tenant, traceparent), nil over stdio.
	Invoke(ctx context.Context, c Call, h http.Header) (*supervisor.Envelope, error)
	// Files lists the regular files of a skill's folder; ReadFile reads
	// one (size-capped by the daemon).
	Files(ctx context.Context, id string) ([]File, error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	// Events streams a skill's invocation events from now until ctx
	// ends (GET /v1/events?skill=ID); the channel is closed at the end.
	Events(ctx context.Context, skill string) (<-chan Event, error)
}

// Event is one line of the daemon's events stream, as progress needs it.
type Event struct {
	Type         string `json:"type"`
	InvocationID string `json:"invocation_id"`
	RequestID    string `json:"request_id"`
	Outcome      string `json:"outcome"`
	Call         *struct {
		Tool    string `json:"tool"`
		Outcome string `json:"outcome"`
	} `json:"call"`
}

// File is one file of a skill folder.
type File = client.SkillFile

// APIError is the daemon's refusal of a call.
type APIError = client.Error

// metaRequestID is the _meta key under which the transport wrappers put a
// tools/call's JSON-RPC id (IDTransport, IDHandler); a client's own value
// under it is overwritten.
const metaRequestID = "dev.cyberos/jsonrpc-id"

// Options configure a Server.
type Options struct {
	Tenant string       // tenant of every call ("" : the daemon's default)
	Log    *slog.Logger // nil: discard
	// Version is reported to clients as the server's version.
	Version string
}

// Server is the MCP server of one Backend.
type Server struct {
	b    Backend
	opts Options
	srv  *mcp.Server

	// salt is random per Server: a stdio session has no id of its own, and
	// two servers' calls must never share a request_id.
	salt string

	mu      sync.Mutex
	tools   map[string]*entry // skill id → what is registered
	prompts map[string]string // instructions skill id → its prompt's JSON
	res     map[string]bool   // resource URIs registered
}

type entry struct {
	pol  *policy.Policy
	sig  string // the registered tool's JSON, to notice a change
	tool *mcp.Tool
}

// New builds the server; its tool list is loaded from b at once (a
// failure is logged: the daemon may not be up yet) and again on every
// tools/list, so installs and removals reach clients (the SDK sends
// notifications/tools/list_changed when the list changes).
func New(ctx context.Context, b Backend, o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	s := &Server{b: b, opts: o, tools: map[string]*entry{}, prompts: map[string]string{}, res: map[string]bool{}, salt: hex.EncodeToString(rnd[:])}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "cyberos", Version: o.Version}, &mcp.ServerOptions{
		Logger: o.Log,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
			Prompts: &mcp.PromptCapabilities{ListChanged: true}, Resources: &mcp.ResourceCapabilities{ListChanged: true}},
	})
	s.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" || method == "prompts/list" || method == "resources/list" {
				if err := s.Refresh(ctx); err != nil {
					return nil, fmt.Errorf("list skills: %w", err)
				}
			}
			return next(ctx, method, req)
		}
	})
	if err := s.Refresh(ctx); err != nil {
		o.Log.Warn("mcp: list skills", "err", err)
	}
	return s
}

// MCP is the SDK server, to Run on a transport or serve over HTTP.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Refresh loads the skills and brings the tool list in line with them.
func (s *Server) Refresh(ctx context.Context) error {
	skills, err := s.b.Skills(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshInstructions(ctx, skills)
	seen := map[string]bool{}
	for _, p := range skills {
		if !Executable(p) {
			continue
		}
		seen[p.Name] = true
		t := toolOf(p)
		sig, _ := json.Marshal(t)
		if old := s.tools[p.Name]; old != nil && old.sig == string(sig) {
			old.pol = p
			continue
		}
		s.tools[p.Name] = &entry{pol: p, sig: string(sig), tool: t}
		s.srv.AddTool(t, s.handler(p.Name))
	}
	var gone []string
	for id := range s.tools {
		if !seen[id] {
			gone = append(gone, id)
			delete(s.tools, id)
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	return nil
}

// Watch refreshes the lists every interval until ctx ends, so a skill
// installed, removed or changed reaches connected clients as
// notifications/tools/list_changed (and prompts, resources) without their
// asking.
func (s *Server) Watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				s.opts.Log.Warn("mcp: list skills", "err", err)
			}
		}
	}
}

// Executable reports whether the skill is a tool (it has an entrypoint to
// run) rather than instructions only.
func Executable(p *policy.Policy) bool { return p.Kind == policy.KindTool && p.Entrypoint != "" }

// toolOf is the MCP tool of a skill.
func toolOf(p *policy.Policy) *mcp.Tool {
	t := &mcp.Tool{Name: p.Name, Description: p.Description, InputSchema: json.RawMessage(`{"type":"object"}`)}
	if len(p.InputSchema) > 0 {
		t.InputSchema = p.InputSchema
	}
	if len(p.OutputSchema) > 0 {
		t.OutputSchema = p.OutputSchema
	}
	t.Annotations = &mcp.ToolAnnotations{Title: p.Name, ReadOnlyHint: readOnly(p)}
	return t
}

// readOnly: every tool the skill may call only reads (policy.EffectFree).
func readOnly(p *policy.Policy) bool {
	for _, t := range policy.NewEnforcer(p, policy.EnforcerOptions{}).Tools() {
		if !policy.EffectFree(t) {
			return false
		}
	}
	return true
}

func (s *Server) policyOf(id string) *policy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.tools[id]; e != nil {
		return e.pol
	}
	return nil
}

// RequestID derives the invocation's request_id from the MCP session and
// the call's JSON-RPC id: a client that resends the same call gets the
// first call's answer rather than a second run.
func RequestID(session string, id any) string {
	b, _ := json.Marshal(id)
	h := sha256.Sum256([]byte(session + "\x00" + string(b)))
	return "mcp-" + hex.EncodeToString(h[:16])
}

func (s *Server) handler(id string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := s.policyOf(id)
		if p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", id)}
		}
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		// Refused here, before any sandbox exists.
		if err := p.CheckArgs(args); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("tool %q: %v", id, err)}
		}
		c := Call{SkillID: id, Args: args, TenantID: s.opts.Tenant, CancelOnDisconnect: true}
		if tp, ok := req.Params.Meta["traceparent"].(string); ok {
			c.Traceparent = tp
		}
		if rid, ok := req.Params.Meta[metaRequestID]; ok {
			sess := s.salt
			if req.Session != nil {
				sess += "/" + req.Session.ID()
			}
			c.RequestID = RequestID(sess, rid)
		}
		progress(ctx, req, 0, "started")
		steps := s.followCalls(ctx, req, id, c.RequestID)
		var h http.Header
		if req.Extra != nil {
			h = req.Extra.Header
		}
		env, err := s.b.Invoke(ctx, c, h)
		n := steps(env)
		var ae *APIError
		switch {
		case errors.As(err, &ae) && ae.Code == "not_found":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q: %s", id, ae.Message)}
		case errors.As(err, &ae) && ae.Code == "invalid":
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: ae.Message}
		case err != nil:
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		progress(ctx, req, n+1, string(env.Outcome))
		return resultOf(env), nil
	}
}

// progress sends notifications/progress when the caller asked for it.
func progress(ctx context.Context, req *mcp.CallToolRequest, n float64, msg string) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return
	}
	_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: msg})
}

// resultOf maps an envelope to a tool result: success → the skill's JSON
// as structuredContent (when an object) and as text; any other outcome →
// isError with the message and the invocation id.
func resultOf(env *supervisor.Envelope) *mcp.CallToolResult {
	meta := mcp.Meta{"dev.cyberos/invocation-id": env.InvocationID, "dev.cyberos/outcome": string(env.Outcome)}
	if env.Outcome != supervisor.OutcomeSuccess {
		msg := env.ErrorMessage
		if msg == "" {
			msg = string(env.Outcome)
		}
		text := fmt.Sprintf("skill %s: %s: %s (invocation %s)", env.SkillID, env.Outcome, msg, env.InvocationID)
		return &mcp.CallToolResult{Meta: meta, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	}
	r := &mcp.CallToolResult{Meta: meta, Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimSpace(string(env.Result))}}}
	var obj map[string]any
	if json.Unmarshal(env.Result, &obj) == nil && obj != nil {
		r.StructuredContent = env.Result
	}
	return r
}
