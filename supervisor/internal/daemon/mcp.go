package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/mcpclient"
	"cyberos.dev/supervisor/internal/mcpserve"
)

// TenantHeader names the tenant of an MCP call over /mcp (DefaultTenant
// when absent), as --tenant does for `cyberos mcp serve`.
const TenantHeader = "Cyberos-Tenant"

// MCPRefreshInterval is how often the MCP server looks at skills_dir for
// installed, removed or changed skills.
const MCPRefreshInterval = 2 * time.Second

// mcpSessionIdle closes an /mcp session no request has used for this long.
const mcpSessionIdle = 30 * time.Minute

// mcpHandler is Streamable HTTP at /mcp: the same MCP server as
// `cyberos mcp serve`, its calls going to handleInvoke in-process.
func (d *Daemon) mcpHandler() http.Handler {
	s := mcpserve.New(context.Background(), localBackend{d}, mcpserve.Options{Log: d.log})
	ctx, cancel := context.WithCancel(context.Background())
	d.mcpStop = cancel
	go s.Watch(ctx, MCPRefreshInterval)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.MCP() },
		&mcp.StreamableHTTPOptions{Logger: d.log, SessionTimeout: mcpSessionIdle})
	inner := mcpserve.IDHandler(h, MaxInvokeBody)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxInvokeBody {
			w.Header().Set("Connection", "close")
			apiErr(w, kindTooLarge, fmt.Errorf("body: over %d bytes", MaxInvokeBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxInvokeBody)
		inner.ServeHTTP(w, r)
	})
}

// localBackend is the daemon itself as an mcpserve.Backend.
type localBackend struct{ d *Daemon }

func (b localBackend) Skills(context.Context) ([]*policy.Policy, error) {
	skills, _, err := InstalledSkills(b.d.cfg.SkillsDir)
	return skills, err
}

// Invoke runs the call through handleInvoke, so /mcp and the HTTP API
// share admission, idempotency and every refusal.
func (b localBackend) Invoke(ctx context.Context, c mcpserve.Call, h http.Header) (*supervisor.Envelope, error) {
	if c.TenantID == "" {
		c.TenantID = h.Get(TenantHeader)
	}
	if c.Traceparent == "" {
		c.Traceparent = h.Get("traceparent")
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/v1/invocations", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	rec := &recorder{h: http.Header{}, code: http.StatusOK}
	b.d.handleInvoke(rec, r)
	if rec.code != http.StatusOK {
		var ae APIError
		_ = json.Unmarshal(rec.body.Bytes(), &ae)
		return nil, &mcpserve.APIError{Status: rec.code, Code: ae.Code, Message: ae.Error}
	}
	var env supervisor.Envelope
	if err := json.Unmarshal(rec.body.Bytes(), &env); err != nil {
		return nil, fmt.Errorf("invocation answer: %w", err)
	}
	return &env, nil
}

// Files lists a skill folder's files through handleSkillFiles.
func (b localBackend) Files(ctx context.Context, id string) ([]mcpserve.File, error) {
	rec, err := b.get(ctx, b.d.handleSkillFiles, id, "")
	if err != nil {
		return nil, err
	}
	var files []mcpserve.File
	if err := json.Unmarshal(rec.body.Bytes(), &files); err != nil {
		return nil, fmt.Errorf("skill files: %w", err)
	}
	return files, nil
}

// ReadFile reads one file of a skill folder through handleSkillFile.
func (b localBackend) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	rec, err := b.get(ctx, b.d.handleSkillFile, id, p)
	if err != nil {
		return nil, err
	}
	return rec.body.Bytes(), nil
}

// get runs an admin GET handler in-process with the path values set.
func (b localBackend) get(ctx context.Context, h http.HandlerFunc, id, p string) (*recorder, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return nil, err
	}
	r.SetPathValue("id", id)
	r.SetPathValue("path", p)
	rec := &recorder{h: http.Header{}, code: http.StatusOK}
	h(rec, r)
	if rec.code != http.StatusOK {
		var ae APIError
		_ = json.Unmarshal(rec.body.Bytes(), &ae)
		return nil, &mcpserve.APIError{Status: rec.code, Code: ae.Code, Message: ae.Error}
	}
	return rec, nil
}

// Events follows the hub as GET /v1/events?skill=ID does.
func (b localBackend) Events(ctx context.Context, skill string) (<-chan mcpserve.Event, error) {
	wt := b.d.hub.watch(skill)
	ch := make(chan mcpserve.Event, subscriberBuffer)
	go func() {
		defer close(ch)
		defer b.d.hub.unwatch(wt)
		for {
			select {
			case ev, ok := <-wt.ch:
				if !ok {
					return
				}
				out := mcpserve.Event{Type: ev.Type, InvocationID: ev.InvocationID, RequestID: ev.RequestID, Outcome: ev.Outcome}
				if ev.Call != nil {
					out.Call = &struct {
						Tool    string `json:"tool"`
						Outcome string `json:"outcome"`
					}{ev.Call.Tool, ev.Call.Outcome}
				}
				select {
				case ch <- out:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// recorder keeps handleInvoke's answer in memory.
type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// mcpStatuser is the MCP pool as GET /v1/mcp/servers reads it.
type mcpStatuser interface {
	Status() []mcpclient.InstanceStatus
}

// handleMCPServers is GET /v1/mcp/servers: every configured MCP server's
// instances with their state, restarts and tools (none started by asking).
func (d *Daemon) handleMCPServers(w http.ResponseWriter, _ *http.Request) {
	out := []mcpclient.InstanceStatus{}
	for _, src := range d.sup.Sources {
		if p, ok := src.(mcpStatuser); ok {
			out = append(out, p.Status()...)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
