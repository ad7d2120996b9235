package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/telemetry"
)

// completedRetries are the waits between the tries of a completed row
// before the caller is told ErrAuditIncomplete.
var completedRetries = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond}

// record closes the dispatched invocation's record: the broker closes
// (every tool call's rows are durable before), the skill.timeout row of a
// timeout, then the skill.invoked_completed row, whatever happened. A
// completed row that cannot be made durable is retried in the background
// and the caller gets ErrAuditIncomplete with the envelope.
func (inv *invocation) record() (Envelope, error) {
	s, env, log, ctx := inv.s, &inv.env, inv.log, inv.workCtx()
	if brk, err := inv.brokerUp(); err == nil {
		if cerr := brk.Close(); cerr != nil {
			log.Error("broker close", "err", cerr)
		}
	}
	dispatched := s.now().Sub(inv.t0)
	env.DurationMS = dispatched.Milliseconds()
	if inv.exit != nil {
		inv.ended = []any{"outcome", env.Outcome, "exit_code", inv.exit.Code, "signal", signalName(inv.exit.Signal),
			"duration", time.Duration(env.DurationMS) * time.Millisecond}
		if env.Outcome != OutcomeSuccess {
			// A failure is a warning that says why: the envelope's error
			// (with the stderr tail) and the audited reason.
			inv.endedLevel = slog.LevelWarn
			inv.ended = append(inv.ended, "error", env.ErrorMessage, "reason", inv.auditMsg)
		}
		if brk, err := inv.brokerUp(); err == nil {
			st := brk.Stats() // final: the broker is closed
			inv.ended = append(inv.ended, "tool_calls", st.ToolCalls, "denied", st.Denied)
		}
	}

	if env.Outcome == OutcomeTimeout {
		if _, err := s.Audit.Emit(ctx, audit.Timeout(inv.common, env.DeadlineMS, env.SignalSent)); err != nil {
			log.Error("audit: skill.timeout not written", "err", err)
		}
	}
	completed := audit.InvokedCompletedAbuse(inv.common, string(env.Outcome), env.DurationMS, env.ResultHash, inv.auditMsg, env.ProtocolAbuse)
	var incomplete error
	err := s.emitCompleted(ctx, completed)
	if inv.stats != nil {
		env.Stats = <-inv.stats
	}
	if err != nil {
		// sev-1: the skill's effects stand (they cannot be reversed), and
		// the caller is told the record is not durable: never a plain
		// success. The row is retried in the background; if this process
		// ends first, the next start closes the invocation as lost.
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageCompleted).Inc()
		log.Error("audit: skill.invoked_completed not written; sev-1, effects not reversed", "severity", "sev-1", "err", err)
		go s.retryCompleted(ctx, completed, log, inv.holds.keepReservation())
		incomplete = fmt.Errorf("%w: invocation %s: %w", ErrAuditIncomplete, inv.common.InvocationID, err)
	}
	s.metrics().InvokedTotal.WithLabelValues(inv.common.SkillID, string(env.Outcome)).Inc()
	s.metrics().InvokedDuration.WithLabelValues(inv.common.SkillID).Observe(dispatched.Seconds())
	return *env, incomplete
}

// emitCompleted writes the completed row, trying again after each of
// completedRetries: a full disk may clear as logs are cut.
func (s *Supervisor) emitCompleted(ctx context.Context, d audit.Draft) error {
	_, err := s.emitTimed(ctx, telemetry.StageCompleted, d)
	for _, wait := range completedRetries {
		if err == nil {
			break
		}
		time.Sleep(wait)
		_, err = s.Audit.Emit(ctx, d)
	}
	return err
}

// retryCompleted keeps trying a completed row that could not be written,
// every few seconds, for as long as this process lives; the row's reserved
// space is released once it lands.
func (s *Supervisor) retryCompleted(ctx context.Context, d audit.Draft, log *slog.Logger, release func()) {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		time.Sleep(wait)
		if _, err := s.Audit.Emit(ctx, d); err == nil {
			release()
			log.Warn("audit: skill.invoked_completed written late")
			return
		}
	}
}
