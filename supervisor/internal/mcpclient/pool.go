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
	"cyberos.dev/supervisor/internal/tools"
)

// Share is which invocations share one running server.
type Share int

const (
	// SharePerTenant: one server per tenant (the default): tenants never
	// see each other's server state.
	SharePerTenant Share = iota
	// SharePerInvocation: a server for each invocation, ended with it.
	SharePerInvocation
	// ShareGlobal: one server for everyone (a stateless server).
	ShareGlobal
)

// Spec is one configured server, as the pool runs it.
type Spec struct {
	Name        string
	Share       Share
	Idle        time.Duration // 0: never stopped for idleness
	CallTimeout time.Duration
	AutoApprove bool
	// Transport returns the transport factory of one instance of the
	// server: instance is "global", the tenant id or the invocation id.
	Transport func(instance string) (func(context.Context) (mcp.Transport, error), error)
	// Standby, when set, is the stdio server's sandbox made ahead (see
	// Standby), closed when the pool retires the spec (Apply) or closes.
	Standby *Standby
}

// Pool runs the configured servers' instances: made on first use by an
// invocation, shared as their Share says, stopped after Idle unused (and
// started again on the next use), ended with the pool.
type Pool struct {
	specs     map[string]Spec
	approvals *Approvals
	log       *slog.Logger
	slots     chan struct{} // one per running session (NewPool's maxRunning)
	// Metrics, when set before the first use, count the servers' sessions
	// and calls.
	Metrics *Metrics

	mu        sync.Mutex
	instances map[instanceKey]*Server
	closed    bool
	stop      chan struct{}
	done      chan struct{}
}

type instanceKey struct{ server, instance string }

// NewPool runs specs' servers on demand, at most maxRunning sessions at
// once (0: no bound); approvals is shared by all.
func NewPool(specs []Spec, approvals *Approvals, maxRunning int, log *slog.Logger) (*Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{specs: map[string]Spec{}, approvals: approvals, log: log, instances: map[instanceKey]*Server{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if maxRunning > 0 {
		p.slots = make(chan struct{}, maxRunning)
	}
	minIdle := time.Duration(0)
	for _, s := range specs {
		if !policy.ValidMCPServer(s.Name) || s.Transport == nil {
			return nil, fmt.Errorf("mcpclient: server %q: invalid spec", s.Name)
		}
		p.specs[s.Name] = s
		if s.Idle > 0 && (minIdle == 0 || s.Idle < minIdle) {
			minIdle = s.Idle
		}
	}
	// The reaper runs whatever the specs say: a reload may add a server
	// with an idle timeout.
	every := reapEvery
	if minIdle > 0 {
		every = min(max(minIdle/4, 100*time.Millisecond), reapEvery)
	}
	go p.reap(every)
	return p, nil
}

// reapEvery is the reaper's longest period.
const reapEvery = time.Second

// Apply changes the configured servers (a reload): each server in remove
// is retired, its instances ended once their calls in flight are done;
// each spec in add is served from its next use (a changed server is in
// both: its new instances start with the new spec).
func (p *Pool) Apply(remove []string, add []Spec) error {
	for _, s := range add {
		if !policy.ValidMCPServer(s.Name) || s.Transport == nil {
			return fmt.Errorf("mcpclient: server %q: invalid spec", s.Name)
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("%w: the pool is closed", ErrUnavailable)
	}
	var retired []*Server
	var standbys []*Standby
	for _, name := range remove {
		standbys = append(standbys, p.specs[name].Standby)
		delete(p.specs, name)
		for k, s := range p.instances {
			if k.server == name {
				retired = append(retired, s)
				delete(p.instances, k)
			}
		}
	}
	for _, s := range add {
		p.specs[s.Name] = s
	}
	p.mu.Unlock()
	for _, s := range retired {
		s.retire()
	}
	for _, sb := range standbys {
		sb.Close()
	}
	return nil
}

// StandbyReady reports whether server has a standby sandbox ready for its
// next start.
func (p *Pool) StandbyReady(server string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.specs[server].Standby.Ready()
}

// Servers are the configured names, sorted.
func (p *Pool) Servers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.specs))
	for n := range p.specs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// instance returns the server instance for (server, tenant, invocation),
// making it (not starting it) on first use.
func (p *Pool) instance(server, tenant, invocation string) (*Server, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	spec, ok := p.specs[server]
	if !ok {
		return nil, nil
	}
	inst := "global"
	switch spec.Share {
	case SharePerTenant:
		inst = "tenant-" + tenant
	case SharePerInvocation:
		inst = "invocation-" + invocation
	}
	k := instanceKey{server, inst}
	if p.closed {
		return nil, fmt.Errorf("%w: %s: the pool is closed", ErrUnavailable, server)
	}
	if s := p.instances[k]; s != nil {
		return s, nil
	}
	tr, err := spec.Transport(inst)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, server, err)
	}
	s, err := New(Options{Name: server, Transport: tr, CallTimeout: spec.CallTimeout, AutoApprove: spec.AutoApprove,
		Approvals: p.approvals, Log: p.log.With("mcp_instance", inst), Slots: p.slots, Metrics: p.Metrics})
	if err != nil {
		return nil, err
	}
	p.instances[k] = s
	return s, nil
}

// reap stops instances idle for their server's Idle.
func (p *Pool) reap(every time.Duration) {
	defer close(p.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			type idler struct {
				s *Server
				d time.Duration
			}
			var idle []idler
			for k, s := range p.instances {
				if d := p.specs[k.server].Idle; d > 0 && s.idleFor(now) >= d {
					idle = append(idle, idler{s, d})
				}
			}
			p.mu.Unlock()
			for _, i := range idle {
				if s := i.s; s.stopIdle(now, i.d) {
					p.log.Info("mcp: server stopped after idling", "mcp_server", s.o.Name)
				}
			}
		}
	}
}

// Close ends every instance.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	all := make([]*Server, 0, len(p.instances))
	for _, s := range p.instances {
		all = append(all, s)
	}
	var standbys []*Standby
	for _, s := range p.specs {
		standbys = append(standbys, s.Standby)
	}
	p.mu.Unlock()
	defer func() {
		for _, sb := range standbys {
			sb.Close()
		}
	}()
	select {
	case <-p.done:
	default:
		close(p.stop)
		<-p.done
	}
	var errs []error
	for _, s := range all {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// For returns one invocation's view of the pool: a tools.Source whose
// servers are the instances of tenant (or of the invocation, or global);
// closing it ends the invocation's own instances.
func (p *Pool) For(tenant, invocation string) tools.Source {
	return &invocationSource{p: p, tenant: tenant, invocation: invocation}
}

// invocationSource is Pool.For's source.
type invocationSource struct {
	p                  *Pool
	tenant, invocation string
}

func (s *invocationSource) Lookup(ctx context.Context, name policy.Tool) (tools.Tool, bool, error) {
	server, _, ok := name.SplitMCP()
	if !ok {
		return nil, false, nil
	}
	srv, err := s.p.instance(server, s.tenant, s.invocation)
	if err != nil {
		return nil, true, &tools.SkillError{Class: tools.ErrFailed, Msg: "MCP server " + server + " is not available"}
	}
	if srv == nil {
		return nil, false, nil
	}
	return NewSource(srv).Lookup(ctx, name)
}

func (s *invocationSource) Tools(ctx context.Context, e *policy.Enforcer) []tools.Tool {
	var servers []*Server
	for _, name := range s.p.Servers() {
		if !e.MCPServerGranted(name) {
			continue
		}
		if srv, err := s.p.instance(name, s.tenant, s.invocation); err == nil && srv != nil {
			servers = append(servers, srv)
		}
	}
	return NewSource(servers...).Tools(ctx, e)
}

// Close ends the invocation's per-invocation instances.
func (s *invocationSource) Close() error {
	suffix := "invocation-" + s.invocation
	s.p.mu.Lock()
	var mine []*Server
	for k, srv := range s.p.instances {
		if k.instance == suffix && strings.HasPrefix(k.instance, "invocation-") {
			mine = append(mine, srv)
			delete(s.p.instances, k)
		}
	}
	s.p.mu.Unlock()
	var errs []error
	for _, srv := range mine {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

// Status reports every configured server: one entry per instance (by
// server, then instance), and one "stopped" entry for a server with none.
// Nothing is started.
func (p *Pool) Status() []InstanceStatus {
	p.mu.Lock()
	type inst struct {
		k instanceKey
		s *Server
	}
	var all []inst
	for k, s := range p.instances {
		all = append(all, inst{k, s})
	}
	p.mu.Unlock()
	slices.SortFunc(all, func(a, b inst) int {
		if c := strings.Compare(a.k.server, b.k.server); c != 0 {
			return c
		}
		return strings.Compare(a.k.instance, b.k.instance)
	})
	var out []InstanceStatus
	for _, name := range p.Servers() {
		n := len(out)
		for _, i := range all {
			if i.k.server == name {
				st := i.s.status()
				st.Instance = i.k.instance
				out = append(out, st)
			}
		}
		if len(out) == n {
			out = append(out, InstanceStatus{Server: name, Status: StatusStopped})
		}
	}
	return out
}
