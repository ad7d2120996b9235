// Package mcpclient connects the broker to MCP servers with the official Go
// SDK: it initializes a session, lists every tool, refuses definitions that
// are malformed or changed since approved, and serves the rest as tools
// named mcp__<server>__<tool> whose calls are validated against their
// inputSchema before they are sent.
package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/policy"
)

// Error classes.
var (
	// ErrUnavailable: the server could not be started or initialized, or
	// it ended.
	ErrUnavailable = errors.New("mcp server unavailable")
	// ErrRefused: a tool definition the server offered was refused at
	// registration (too long, control characters, a bad schema).
	ErrRefused = errors.New("mcp tool definition refused")
)

// Limits on what a server may register.
const (
	MaxTools       = 1024
	MaxDescription = 8192
	MaxSchema      = 64 << 10
	// DefaultCallTimeout bounds a call when Options.CallTimeout is 0.
	DefaultCallTimeout = 60 * time.Second
	// restartBackoff is the least time between two starts of a server that
	// failed or ended, doubled per consecutive failure up to maxBackoff.
	restartBackoff = 200 * time.Millisecond
	maxBackoff     = 30 * time.Second
)

// Options configure one server's client.
type Options struct {
	// Name is the server's configured name (the <server> of its tools).
	Name string
	// Transport returns a new transport for each connection: for a stdio
	// server, a new process.
	Transport func(ctx context.Context) (mcp.Transport, error)
	// CallTimeout bounds one tools/call; the caller's context (the
	// invocation's) bounds it too. 0: DefaultCallTimeout.
	CallTimeout time.Duration
	// AutoApprove accepts a changed definition (and records it); without
	// it a changed definition is refused until approved.
	AutoApprove bool
	// Approvals records each tool's approved definition hash. Required.
	Approvals *Approvals
	// Log may be nil.
	Log *slog.Logger
	// Now is the clock for restart backoff; nil: time.Now.
	Now func() time.Time
	// Slots, when set, bounds the sessions running at once across the
	// servers sharing it: a session holds one from its start to its end,
	// and a start finding none free fails (each sandboxed server holds a
	// host id range the skills' sandboxes draw from too).
	Slots chan struct{}
	// Metrics may be nil.
	Metrics *Metrics
}

// Server is one configured MCP server's client: it connects on first use,
// reconnects after the session ended (with backoff), and holds the tools
// of its current session.
type Server struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	sess     *session
	failures int
	nextTry  time.Time
	closed   bool
	lastUsed time.Time
	inflight int
	starts   int // sessions started, for Status' restarts
	// retiring: the server was removed or changed by a reload; it closes
	// once its calls in flight are done.
	retiring bool
}

// New returns a server's client; it connects on first use.
func New(o Options) (*Server, error) {
	switch {
	case !policy.ValidMCPServer(o.Name):
		return nil, fmt.Errorf("mcpclient: server name %q is not valid", o.Name)
	case o.Transport == nil:
		return nil, errors.New("mcpclient: no transport")
	case o.Approvals == nil:
		return nil, errors.New("mcpclient: no approvals store")
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{o: o, log: log.With("mcp_server", o.Name)}, nil
}

// Name is the server's configured name.
func (s *Server) Name() string { return s.o.Name }

// session is one connection to the server and the tools it registered.
type session struct {
	cs   *mcp.ClientSession
	done chan struct{} // closed when the session ended

	mu    sync.RWMutex
	tools map[string]*Tool // by the server's tool name
}

func (ss *session) alive() bool {
	select {
	case <-ss.done:
		return false
	default:
		return true
	}
}

// current returns a live session, connecting when there is none (within
// the restart backoff). Connecting holds s.mu: concurrent first calls wait
// for one start.
func (s *Server) current(ctx context.Context) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%w: %s: closed", ErrUnavailable, s.o.Name)
	}
	s.lastUsed = s.o.Now()
	if s.sess != nil && s.sess.alive() {
		return s.sess, nil
	}
	if now := s.o.Now(); now.Before(s.nextTry) {
		return nil, fmt.Errorf("%w: %s: restarting (next try in %v)", ErrUnavailable, s.o.Name, s.nextTry.Sub(now).Round(time.Millisecond))
	}
	ss, err := s.connect(ctx)
	s.o.Metrics.started(s.o.Name, err)
	if err != nil {
		s.failures++
		s.nextTry = s.o.Now().Add(min(maxBackoff, restartBackoff<<min(s.failures-1, 16)))
		s.log.Warn("mcp: server did not start", "err", err, "failures", s.failures)
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, s.o.Name, err)
	}
	s.failures = 0
	s.starts++
	s.sess = ss
	return ss, nil
}

// connect starts a session: initialize, then every page of tools/list.
func (s *Server) connect(ctx context.Context) (_ *session, err error) {
	if s.o.Slots != nil {
		select {
		case s.o.Slots <- struct{}{}:
		default:
			return nil, fmt.Errorf("%d MCP servers are running, the most allowed", cap(s.o.Slots))
		}
		defer func() {
			if err != nil {
				<-s.o.Slots
			}
		}()
	}
	t, err := s.o.Transport(ctx)
	if err != nil {
		return nil, err
	}
	ss := &session{done: make(chan struct{})}
	client := mcp.NewClient(&mcp.Implementation{Name: "cyberos-supervisor", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{}, // no roots, sampling or elicitation
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Re-read off the reading goroutine: a request from inside a
			// notification handler would wait on the reader itself.
			go s.relist(ss)
		},
	})
	// The session outlives ctx (the first caller's): it ends when the
	// server does or Close is called.
	cs, err := client.Connect(context.WithoutCancel(ctx), t, nil)
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	ss.cs = cs
	waited := make(chan struct{})
	go func() {
		err := cs.Wait()
		close(ss.done)
		s.log.Info("mcp: session ended", "err", err)
		close(waited)
	}()
	if lerr := s.list(ctx, ss); lerr != nil {
		cs.Close()
		<-waited // the slot is released by the deferred receive
		return nil, fmt.Errorf("tools/list: %w", lerr)
	}
	go func() {
		<-waited
		s.o.Metrics.ended(s.o.Name)
		if s.o.Slots != nil {
			<-s.o.Slots
		}
	}()
	return ss, nil
}

// relist re-reads the tool list after notifications/tools/list_changed.
func (s *Server) relist(ss *session) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.CallTimeout)
	defer cancel()
	if err := s.list(ctx, ss); err != nil && ss.alive() {
		s.log.Warn("mcp: re-reading the tool list failed; the previous list stands", "err", err)
	}
}

// list reads every page of tools/list and replaces ss's tools with those
// that pass registration.
func (s *Server) list(ctx context.Context, ss *session) error {
	tools := map[string]*Tool{}
	n := 0
	for t, err := range ss.cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		if n++; n > MaxTools {
			s.log.Warn("mcp: server lists too many tools; the rest are ignored", "max", MaxTools)
			break
		}
		tool, err := s.register(t)
		if err != nil {
			s.log.Warn("mcp: tool refused at registration", "err", err)
			continue
		}
		if _, dup := tools[tool.name]; dup {
			s.log.Warn("mcp: tool listed twice; the first stands", "tool", tool.name)
			continue
		}
		tools[tool.name] = tool
	}
	ss.mu.Lock()
	ss.tools = tools
	ss.mu.Unlock()
	return nil
}

// tool returns the current session's tool called name.
func (s *Server) tool(ctx context.Context, name string) (*Tool, *session, error) {
	ss, err := s.current(ctx)
	if err != nil {
		return nil, nil, err
	}
	ss.mu.RLock()
	t := ss.tools[name]
	ss.mu.RUnlock()
	return t, ss, nil
}

// Tools returns the current session's tools (connecting if needed).
func (s *Server) Tools(ctx context.Context) ([]*Tool, error) {
	ss, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	out := make([]*Tool, 0, len(ss.tools))
	for _, t := range ss.tools {
		out = append(out, t)
	}
	return out, nil
}

// drop retires a session whose connection failed: the next call starts a
// new one (after the restart backoff), and the old one is closed, ending
// its process.
func (s *Server) drop(ss *session) {
	s.mu.Lock()
	if s.sess == ss {
		s.sess = nil
		s.failures++
		s.nextTry = s.o.Now().Add(min(maxBackoff, restartBackoff<<min(s.failures-1, 16)))
	}
	s.mu.Unlock()
	go ss.cs.Close()
}

// begin and end bracket a call, so an idle stop never ends a session
// with a call in flight.
func (s *Server) begin() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

func (s *Server) end() {
	s.mu.Lock()
	s.inflight--
	s.lastUsed = s.o.Now()
	last := s.retiring && s.inflight == 0
	s.mu.Unlock()
	if last {
		_ = s.Close()
	}
}

// retire closes the server once no call is in flight (now when none is);
// a call that finds it closed fails as unavailable.
func (s *Server) retire() {
	s.mu.Lock()
	s.retiring = true
	idle := s.inflight == 0
	s.mu.Unlock()
	if idle {
		_ = s.Close()
	}
}

// idleFor is how long the server has had a session and no call.
func (s *Server) idleFor(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil || s.inflight > 0 {
		return 0
	}
	return now.Sub(s.lastUsed)
}

// stopIdle ends the session when it is still idle for d at now; the next
// use starts it again.
func (s *Server) stopIdle(now time.Time, d time.Duration) bool {
	s.mu.Lock()
	ss := s.sess
	if ss == nil || s.inflight > 0 || now.Sub(s.lastUsed) < d {
		s.mu.Unlock()
		return false
	}
	s.sess = nil
	s.mu.Unlock()
	_ = ss.cs.Close()
	return true
}

// Running reports whether the server has a live session.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess != nil && s.sess.alive()
}

// Close ends the session, if any; later calls fail.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.sess == nil {
		return nil
	}
	err := s.sess.cs.Close()
	s.sess = nil
	return err
}

// Server states, as Status reports them.
const (
	StatusUp         = "up"         // a live session
	StatusRestarting = "restarting" // its session ended or its start failed: the next use starts it (after the backoff)
	StatusStopped    = "stopped"    // never started, stopped when idle, or closed
)

// ToolStatus is one registered tool and its definition hash.
type ToolStatus struct {
	Name           string `json:"name"`
	DefinitionHash string `json:"definition_hash"`
	// Changed: the definition differs from the approved one and is
	// refused until approved.
	Changed bool `json:"changed,omitempty"`
}

// InstanceStatus is one instance of a server as `cyberos mcp list` shows
// it: its state, how often it was started again, and the tools of its
// current session.
type InstanceStatus struct {
	Server   string       `json:"server"`
	Instance string       `json:"instance,omitempty"`
	Status   string       `json:"status"`
	Restarts int          `json:"restarts"`
	Tools    []ToolStatus `json:"tools,omitempty"`
}

// status reports s without starting it.
func (s *Server) status() InstanceStatus {
	s.mu.Lock()
	ss, failures, starts := s.sess, s.failures, s.starts
	s.mu.Unlock()
	st := InstanceStatus{Server: s.o.Name, Status: StatusStopped, Restarts: max(starts-1, 0)}
	switch {
	case ss != nil && ss.alive():
		st.Status = StatusUp
	case ss != nil || failures > 0:
		st.Status = StatusRestarting
	}
	if ss != nil {
		ss.mu.RLock()
		for _, t := range ss.tools {
			st.Tools = append(st.Tools, ToolStatus{Name: string(t.full), DefinitionHash: t.defHash, Changed: t.changed.Load()})
		}
		ss.mu.RUnlock()
		slices.SortFunc(st.Tools, func(a, b ToolStatus) int { return strings.Compare(a.Name, b.Name) })
	}
	return st
}
