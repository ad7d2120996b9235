package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"syscall"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/trace"
)

// Built-in per-invocation bounds on what one skill costs the supervisor.
const (
	DefaultRateLimitPerMinute   = 600
	DefaultMaxBrokerConnections = 16
	DefaultMaxAuditRows         = 1000
)

// invocationRows are the rows of an invocation the supervisor writes
// itself (started, timeout, completed), counted against MaxAuditRows.
const invocationRows = 3

// limits are an invocation's bounds on its cost to the supervisor.
type limits struct {
	ratePerMinute, maxConns, maxAuditRows int
}

// costLimits resolves the bounds: the operator's defaults (or the built-in
// ones), the rate lowered by the frontmatter's.
func costLimits(pol *policy.Policy, d *Defaults) limits {
	l := limits{DefaultRateLimitPerMinute, DefaultMaxBrokerConnections, DefaultMaxAuditRows}
	if d != nil {
		for _, v := range []struct {
			dst *int
			src int
		}{{&l.ratePerMinute, d.RateLimitPerMinute}, {&l.maxConns, d.MaxBrokerConnections}, {&l.maxAuditRows, d.MaxAuditRows}} {
			if v.src > 0 {
				*v.dst = v.src
			}
		}
	}
	if pol.RateLimitPerMinute > 0 && pol.RateLimitPerMinute < l.ratePerMinute {
		l.ratePerMinute = pol.RateLimitPerMinute
	}
	return l
}

// errNotRunning: a tool that needs the sandbox was called before it ran.
var errNotRunning = errors.New("the sandbox is not running")

// startBrokerAsync starts inv's broker in the background; the returned
// function waits for it (and may be called more than once). A panic there
// is the start's error.
func (s *Supervisor) startBrokerAsync(inv *invocation, log *slog.Logger) func() (*broker.Broker, error) {
	type started struct {
		brk *broker.Broker
		err error
	}
	c := make(chan started, 1)
	go func() {
		var r started
		defer func() {
			if p := recover(); p != nil {
				log.Error("supervisor panic during broker start", "panic", p, "stack", string(debug.Stack()))
				r = started{err: fmt.Errorf("panic: %v", p)}
			}
			c <- r
		}()
		r.brk, r.err = s.startBroker(inv, log)
	}()
	return sync.OnceValues(func() (*broker.Broker, error) {
		r := <-c
		return r.brk, r.err
	})
}

// startBroker starts the invocation's broker: its socket is owned by the
// skill's host uid, only the sandbox's own processes may connect, and Bash
// runs inside the sandbox once it is running.
func (s *Supervisor) startBroker(inv *invocation, log *slog.Logger) (*broker.Broker, error) {
	running := &inv.running
	env := &tools.Env{
		SkillID:      inv.common.SkillID,
		InvocationID: inv.common.InvocationID,
		TenantID:     inv.common.TenantID,
		Policy:       inv.pol,
		Enforcer:     inv.enforcer,
		Memory:       s.memory(),
		Exec: func(ctx context.Context, r tools.ExecRequest) (tools.ExecResult, error) {
			p := running.Load()
			if p == nil {
				return tools.ExecResult{}, errNotRunning
			}
			ex, err := (*p).Exec(ctx, sandbox.ExecSpec{Argv: r.Argv, Env: r.Env, Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Timeout: r.Timeout})
			if err != nil {
				return tools.ExecResult{}, err
			}
			res := tools.ExecResult{ExitCode: ex.Code, TimedOut: ex.TimedOut}
			if sig, ok := ex.Signal.(syscall.Signal); ok {
				res.Signal = signalName(sig)
			}
			return res, nil
		},
	}
	uid, gid := inv.ident.UID, inv.ident.GID
	// Without a span (no tracer) calls still need a traceparent: one in
	// the invocation's trace, its parent made up; nothing is exported.
	tc := inv.trace
	if tc.ParentID == "" {
		tc.ParentID = telemetry.NewTraceContext().ParentID
	}
	tp := tc.String()
	if sc := trace.SpanContextFromContext(inv.spanCtx); sc.IsValid() && !sc.IsRemote() {
		// Tool calls (and what they send on, e.g. HttpFetch's header) are
		// children of skill.invoke.
		tp = fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
	}
	var sock *broker.Socket
	if inv.warm != nil {
		sock = inv.warm.sock
	}
	return broker.Start(broker.Config{
		Socket:         sock,
		SocketDir:      s.SocketDir,
		Common:         inv.common,
		Traceparent:    tp,
		Env:            env,
		Tools:          s.Tools,
		Sources:        s.toolSources(inv),
		Audit:          s.Audit,
		Metrics:        s.metrics(),
		Log:            log,
		SocketUID:      uid,
		SocketGID:      gid,
		AllowPeer:      func(pid int32) bool { return s.Runner.Owns(inv.spec.ID, pid) },
		Hold:           inv.durable,
		NoConnectAfter: s.NoConnectAfter,
		RatePerMinute:  inv.limits.ratePerMinute,
		MaxConns:       inv.limits.maxConns,
		MaxAuditRows:   inv.limits.maxAuditRows,
		OtherAuditRows: invocationRows,
		OnAuditCap: func() {
			// End the invocation: its outcome is killed (dispatch).
			inv.capHit.Store(true)
			if p := running.Load(); p != nil {
				if err := (*p).KillAll(); err != nil {
					log.Error("audit row cap: kill", "err", err)
				}
			}
		},
		Budget:          s.responseBudget(),
		OnProtocolAbuse: inv.req.OnProtocolAbuse,
		OnDecided:       inv.req.OnToolCall,
		Tracer:          s.Tracer,
		SpanParent:      inv.spanCtx,
	})
}

// ToolSources gives an invocation the tools registered besides the native
// ones (mcpclient.Pool: the configured MCP servers).
type ToolSources interface {
	For(tenantID, invocationID string) tools.Source
}

// toolSources is the invocation's view of s.MCP, none without it.
func (s *Supervisor) toolSources(inv *invocation) []tools.Source {
	if s.MCP == nil {
		return nil
	}
	return []tools.Source{s.MCP.For(inv.common.TenantID, inv.common.InvocationID)}
}

// responseBudget is the daemon's budget of response bytes in flight,
// shared by every invocation's broker.
func (s *Supervisor) responseBudget() *broker.Budget {
	s.responseOnce.Do(func() {
		n := s.ResponseBudget
		if n <= 0 {
			n = broker.DefaultDaemonBudget
		}
		s.responseMem = broker.NewBudget(n, "the daemon's")
	})
	return s.responseMem
}
