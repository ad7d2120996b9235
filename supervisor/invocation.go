package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/cgroups"
	"cyberos.dev/memory"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Run performs one invocation, audited as spec 000 §1 says: the
// skill.invoked_started row is durable before the skill is dispatched (if it
// cannot be written nothing runs: AuditEmitError), and every dispatch that
// started ends in a skill.invoked_completed row, whatever happened. A
// returned error means nothing ran (ErrInvalidSkill, ErrRefused,
// AuditEmitError) or that the completed row is not durable yet
// (ErrAuditIncomplete); otherwise the Envelope carries the outcome.
//
// The invocation's rows, span and tool calls carry ctx's values, not its
// cancellation: once ctx ends while the skill runs, the skill is ended
// through the timeout path (SIGTERM now, SIGKILL after the grace, at most
// StopKillAfter) and its rows are still written. The outcome is timeout
// when ctx's cause is ErrStopping, cancelled otherwise. An end of ctx before
// the sandbox runs ends it as soon as it does.
//
// One invocation goes through its phases in order, one file each: prepare,
// admit, start, wait, record, teardown.
func (s *Supervisor) Run(ctx context.Context, req Request) (Envelope, error) {
	id := NewID()
	// The lock and reservation are file system work that prepare's checks
	// need not wait for: admit waits for them.
	h := s.takeHolds(id)
	inv, err := s.prepare(ctx, req, id)
	if err != nil {
		h.end()
		return Envelope{}, err
	}
	inv.holds = h
	defer inv.teardown()
	if err := inv.admit(); err != nil {
		return Envelope{}, err
	}
	if err := inv.start(); err != nil {
		return Envelope{}, err
	}
	if inv.env.Outcome == "" { // start decided none: the skill runs
		inv.wait()
	}
	return inv.record()
}

// invocation is one request on its way through the phases. Each group of
// fields is set by the phase that names it and only read after it.
type invocation struct {
	// Set by prepare, with the request below.
	s   *Supervisor
	ctx context.Context // Run's: its values for the work, its end for wait
	log *slog.Logger    // with the invocation's ids

	// Set by prepare: the validated request.
	req        Request
	obs        Observer // req.Observer or a NoopObserver
	pol        *policy.Policy
	enforcer   *policy.Enforcer
	policyHash string // of pol, for skill.invoked_started
	limits     limits
	deadline   time.Duration
	persona    string
	argsHash   string
	trace      telemetry.TraceContext
	common     audit.Common
	stdout     *cappedBuffer
	stderr     *tailBuffer
	// spec is built by prepare; admit names its sandbox (ID) and start
	// its broker socket.
	spec sandbox.Spec
	// containment is checked by prepare; admit adds the sandbox's start
	// kind and host identity, which the started row records.
	containment sandbox.Containment
	// env is the answer: prepare fills its identity, start the sandbox's
	// containment, wait the outcome, record the duration and accounting.
	env Envelope

	// Set by Run before admit: the in-flight lock and reservation, which
	// teardown ends.
	holds *holds

	// Set by admit: what the invocation may run with.
	warm        *warmBox // the warm sandbox claimed, nil for a cold start
	warmDone    func()   // ends the warm claim (the shape's refill); nil without one
	releaseSlot func()   // gives back a cold start's StartSlot; nil without one
	reserved    bool     // a cold start's host identity was reserved
	ident       sandbox.Identity
	span        trace.Span      // skill.invoke; nil before admit made it
	spanCtx     context.Context // carries skill.invoke

	// Set by start: the broker, the started row, the sandbox.
	durable    chan struct{} // closed once the started row is durable
	brokerUp   func() (*broker.Broker, error)
	dispatched bool            // the started row is durable: record and a completed row follow
	t0         time.Time       // dispatch began, for duration_ms
	base       Envelope        // env before dispatch, what a panic answers with
	proc       sandbox.Process // the started sandbox, destroyed by teardown
	// running is the started sandbox too, for the broker's Bash tool,
	// which waits for it.
	running atomic.Pointer[sandbox.Process]
	capHit  atomic.Bool // the broker reached the audit row cap (set by the broker)

	// Set by wait: how the skill ended (start sets auditMsg for a sandbox
	// that did not start, recoverDispatch for a panic).
	auditMsg string        // the audit row's error message, in our words only
	exit     *sandbox.Exit // nil unless the skill ran and ended
	// stats gets the sandbox's accounting, read beside the completed row.
	stats chan cgroups.Stats

	// Set by record: the "invocation ended" line, which teardown writes
	// after the answer (a stalled log sink must not hold it).
	ended      []any
	endedLevel slog.Level // Warn for a failure
}

// recoverDispatch, deferred by the phases that dispatch the skill (start's
// sandbox start, wait), turns a panic of ours into the outcome panic
// instead of an unterminated started row. The envelope is the one from
// before dispatch, with the panic; the audit row's message never carries
// the skill's stderr.
func (inv *invocation) recoverDispatch() {
	r := recover()
	if r == nil {
		return
	}
	inv.log.Error("supervisor panic during dispatch", "panic", r, "stack", string(debug.Stack()))
	inv.env = inv.base
	inv.env.Outcome, inv.env.Result, inv.env.ResultHash = OutcomePanic, nil, ""
	inv.env.ErrorMessage = fmt.Sprintf("supervisor panic: %v", r)
	inv.auditMsg = inv.env.ErrorMessage
}

// workCtx is the context of the invocation's own work (rows, spans, tool
// calls): Run's values without its cancellation, so that an invocation
// ended by its caller is still recorded.
func (inv *invocation) workCtx() context.Context { return context.WithoutCancel(inv.ctx) }

// emitTimed writes an invocation row and records how long it took to be
// durable (cyberos_audit_emit_duration_seconds, the spec's 50 ms p95).
func (s *Supervisor) emitTimed(ctx context.Context, stage string, d audit.Draft) (audit.Row, error) {
	t0 := time.Now()
	row, err := s.Audit.Emit(ctx, d)
	s.metrics().AuditEmitDuration.WithLabelValues(stage).Observe(time.Since(t0).Seconds())
	return row, err
}

func (s *Supervisor) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

func (s *Supervisor) metrics() *telemetry.Metrics {
	s.metricsOnce.Do(func() {
		if s.Metrics == nil {
			s.Metrics = telemetry.NewMetrics()
		}
	})
	return s.Metrics
}

func (s *Supervisor) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func (s *Supervisor) tracer() trace.Tracer {
	if s.Tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return s.Tracer
}

// memory returns the memory store (nil while it is not open).
func (s *Supervisor) memory() *memory.Store {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	return s.Memory
}

func signalName(sig os.Signal) string {
	if sig == nil {
		return ""
	}
	if s, ok := sig.(syscall.Signal); ok {
		if name := sigNames[s]; name != "" {
			return name
		}
	}
	return sig.String()
}

var sigNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGKILL: "SIGKILL",
	syscall.SIGTERM: "SIGTERM", syscall.SIGBUS: "SIGBUS", syscall.SIGILL: "SIGILL",
	syscall.SIGFPE: "SIGFPE", syscall.SIGSYS: "SIGSYS", syscall.SIGINT: "SIGINT",
	syscall.SIGHUP: "SIGHUP", syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGXFSZ: "SIGXFSZ", // a write past RLIMIT_FSIZE
}

// cappedBuffer keeps the first max bytes and drops (but accepts) the rest,
// so a skill writing too much is never blocked on a full pipe.
type cappedBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.overflow = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

func (c *cappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes()
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// Tail returns the last n bytes as text.
func (t *tailBuffer) Tail(n int) string {
	b := t.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
