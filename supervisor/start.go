package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// start dispatches the admitted invocation: its broker starts while its
// skill.invoked_started row is made durable (a failed row refuses it:
// nothing runs), the observer is told, then the sandbox is started (or the
// warm one activated). A sandbox that does not start decides the outcome
// here; otherwise wait does.
func (inv *invocation) start() error {
	s := inv.s
	// The broker reads no call before the row is durable (and no process
	// of the sandbox runs before it is activated or started, after it).
	inv.durable = make(chan struct{})
	inv.brokerUp = s.startBrokerAsync(inv)
	started := audit.InvokedStartedPolicy(inv.common, inv.pol.Version, inv.persona, inv.argsHash, inv.policyHash, inv.containment)
	startedAt := s.now()
	if _, err := s.emitTimed(inv.workCtx(), telemetry.StageStart, started); err != nil {
		if brk, berr := inv.brokerUp(); berr == nil {
			_ = brk.Close()
		}
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageStart).Inc()
		inv.log.Error("audit: skill.invoked_started not written; skill not dispatched", "err", err)
		inv.span.SetStatus(codes.Error, "audit start row not written")
		return &AuditEmitError{Stage: "start", Err: err}
	}
	close(inv.durable)
	inv.obs.Started(Started{InvocationID: inv.common.InvocationID, SkillID: inv.common.SkillID, TenantID: inv.common.TenantID, StartedAt: startedAt})
	inv.dispatched = true
	s.metrics().InvocationsRunning.Inc()
	inv.t0 = s.now()
	inv.base = inv.env
	inv.startSandbox()
	return nil
}

// startSandbox starts the skill's sandbox once its broker is up; a failure
// (or a start that hangs past the deadline) is the outcome.
func (inv *invocation) startSandbox() {
	defer inv.recoverDispatch()
	s, env := inv.s, &inv.env
	// The broker exists before the skill does: its socket is bind-mounted
	// into the sandbox. Tool calls that need the sandbox (Bash) wait for it.
	brk, err := inv.brokerUp()
	if err != nil {
		env.Outcome = OutcomeError
		env.ErrorMessage = "broker did not start: " + err.Error()
		inv.log.Error("broker start", "err", err)
		inv.auditMsg = "broker did not start"
		return
	}
	inv.spec.BrokerSocket = brk.Path()
	var proc sandbox.Process
	var hung bool
	if inv.warm != nil {
		proc, err = inv.warm.w.Activate(sandbox.Activation{Env: inv.spec.Env, Stdin: inv.spec.Stdin, Stdout: inv.spec.Stdout, Stderr: inv.spec.Stderr, Deadline: inv.spec.Deadline})
	} else {
		proc, hung, err = s.startWithin(inv.spec, inv.deadline, inv.log)
	}
	if inv.releaseSlot != nil {
		inv.releaseSlot()
	}
	if hung {
		// startWithin kills whatever the start returns later.
		env.Outcome = OutcomeTimeout
		env.SignalSent = "SIGKILL"
		env.ErrorMessage = fmt.Sprintf("deadline of %v reached while the sandbox was starting", inv.deadline)
		inv.auditMsg = env.ErrorMessage
		return
	}
	if err != nil {
		env.Outcome = OutcomeError
		env.ErrorMessage = "sandbox did not start: " + err.Error()
		inv.log.Error("sandbox start", "err", err)
		inv.auditMsg = "sandbox did not start"
		return
	}
	inv.running.Store(&proc)
	inv.proc = proc
	if inv.capHit.Load() { // reached while the sandbox was starting
		_ = proc.KillAll()
	}
	env.Containment = proc.Containment()
	env.Containment.Egress = tools.EgressMode
	env.Containment.Start = inv.containment.Start
	if proc.Containment().Start == StartCold && inv.warm != nil {
		// Its init died between the claim and the activation: the runner
		// made it again, cold, with the identity the started row records.
		env.Containment.Start = StartCold
		inv.log.Warn("warm sandbox's init died after its claim: it was made again, cold")
	}
	env.SandboxStartMS = float64(proc.StartLatency().Microseconds()) / 1000
	s.metrics().SandboxStart.Observe(proc.StartLatency().Seconds())
}

// startWithin starts the sandbox, giving up at the deadline: a start that
// hangs ends the invocation as a timeout, and whatever the start returns
// later is killed and cleaned up in the background.
func (s *Supervisor) startWithin(spec sandbox.Spec, deadline time.Duration, log *slog.Logger) (p sandbox.Process, hung bool, err error) {
	type started struct {
		p        sandbox.Process
		err      error
		panicked any
	}
	ch := make(chan started, 1)
	go func() {
		// A panic here is re-raised in the caller's goroutine, where
		// recoverDispatch turns it into the outcome panic.
		defer func() {
			if r := recover(); r != nil {
				ch <- started{panicked: r}
			}
		}()
		p, err := s.Runner.Start(spec)
		ch <- started{p: p, err: err}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case st := <-ch:
		if st.panicked != nil {
			panic(st.panicked)
		}
		return st.p, false, st.err
	case <-timer.C:
		log.Error("sandbox start hung past the deadline")
		go func() {
			if st := <-ch; st.p != nil {
				_ = st.p.KillAll()
				_, _ = st.p.Wait()
				_ = st.p.Close()
			}
		}()
		return nil, true, nil
	}
}

// errNotRunning: a tool that needs the sandbox was called before it ran.
var errNotRunning = errors.New("the sandbox is not running")

// startBrokerAsync starts inv's broker in the background; the returned
// function waits for it (and may be called more than once). A panic there
// is the start's error.
func (s *Supervisor) startBrokerAsync(inv *invocation) func() (*broker.Broker, error) {
	type started struct {
		brk *broker.Broker
		err error
	}
	c := make(chan started, 1)
	go func() {
		var r started
		defer func() {
			if p := recover(); p != nil {
				inv.log.Error("supervisor panic during broker start", "panic", p, "stack", string(debug.Stack()))
				r = started{err: fmt.Errorf("panic: %v", p)}
			}
			c <- r
		}()
		r.brk, r.err = s.startBroker(inv)
	}()
	return sync.OnceValues(func() (*broker.Broker, error) {
		r := <-c
		return r.brk, r.err
	})
}

// startBroker starts the invocation's broker: its socket is owned by the
// skill's host uid, only the sandbox's own processes may connect, and Bash
// runs inside the sandbox once it is running.
func (s *Supervisor) startBroker(inv *invocation) (*broker.Broker, error) {
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
	// Without an observer the broker builds no events.
	var onDecided func(broker.Decided)
	var onAbuse func(string)
	if obs := inv.req.Observer; obs != nil {
		onDecided = func(d broker.Decided) {
			// Live tool-call events name the policy that judged them, as
			// replay does from the started row.
			d.PolicyHash = inv.policyHash
			obs.ToolCall(d)
		}
		onAbuse = obs.ProtocolAbuse
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
		Log:            inv.log,
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
			// End the invocation: its outcome is killed (wait).
			inv.capHit.Store(true)
			if p := running.Load(); p != nil {
				if err := (*p).KillAll(); err != nil {
					inv.log.Error("audit row cap: kill", "err", err)
				}
			}
		},
		Budget:          s.responseBudget(),
		OnProtocolAbuse: onAbuse,
		OnDecided:       onDecided,
		Tracer:          s.Tracer,
		SpanParent:      inv.spanCtx,
	})
}

// ToolSources gives an invocation the tools registered besides the native
// ones (e.g. mcpclient.Pool: the configured MCP servers).
type ToolSources interface {
	For(tenantID, invocationID string) tools.Source
}

// toolSources is the invocation's view of s.Sources.
func (s *Supervisor) toolSources(inv *invocation) []tools.Source {
	var out []tools.Source
	for _, src := range s.Sources {
		out = append(out, src.For(inv.common.TenantID, inv.common.InvocationID))
	}
	return out
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
