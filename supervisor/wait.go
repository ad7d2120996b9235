package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"cyberos.dev/cgroups"
)

// termNum/termDen of the deadline is when SIGTERM is sent.
const termNum, termDen = 9, 10

// wait enforces the deadline on the running skill (SIGTERM at 90 %, the
// kill at 100 %), ends it early through the same path once Run's context
// ends, waits for it to end and classifies how it did: the outcome.
func (inv *invocation) wait() {
	defer inv.recoverDispatch()
	s, env, proc, log, deadline := inv.s, &inv.env, inv.proc, inv.log, inv.deadline
	var termSent, killSent, stopSent, cancelSent atomic.Bool
	termTimer := time.AfterFunc(deadline*termNum/termDen, func() {
		termSent.Store(true)
		if err := proc.Terminate(); err != nil {
			log.Warn("deadline SIGTERM", "err", err)
		}
	})
	killTimer := time.AfterFunc(deadline, func() {
		killSent.Store(true)
		if err := proc.KillAll(); err != nil {
			log.Error("deadline kill", "err", err)
		}
	})
	var timersMu sync.Mutex
	waited := make(chan struct{})
	if done := inv.ctx.Done(); done != nil {
		go func() {
			select {
			case <-done:
			case <-waited:
				return
			}
			timersMu.Lock()
			defer timersMu.Unlock()
			select {
			case <-waited:
				return
			default:
			}
			if errors.Is(context.Cause(inv.ctx), ErrStopping) {
				stopSent.Store(true)
				log.Warn("supervisor stopping: ending the invocation through the timeout path")
			} else {
				cancelSent.Store(true)
				log.Info("invocation cancelled: ending it through the deadline path")
			}
			termTimer.Reset(0)
			killTimer.Reset(min(deadline-deadline*termNum/termDen, StopKillAfter))
		}()
	}
	exit, werr := proc.Wait()
	timersMu.Lock()
	close(waited)
	termTimer.Stop()
	killTimer.Stop()
	timersMu.Unlock()
	// The outcome needs the OOM kills; the rest of the accounting only
	// fills the envelope, and is read while the completed row becomes
	// durable (record waits for it after the row).
	oomKills, oerr := proc.OOMKills()
	if oerr != nil {
		log.Warn("cgroup oom kills", "err", oerr)
	}
	inv.stats = make(chan cgroups.Stats, 1)
	go func() {
		st, serr := proc.Stats()
		if serr != nil {
			log.Warn("cgroup stats", "err", serr)
		}
		inv.stats <- st
	}()
	if brk, err := inv.brokerUp(); err == nil { // up: start used it
		env.ProtocolAbuse = brk.ProtocolAbuse()
	}
	env.LogTail = inv.stderr.Tail(LogTailBytes)
	s.writeLog(env.InvocationID, inv.stderr.Bytes(), log)

	v := classify(ending{
		waitErr: werr, exit: exit, capHit: inv.capHit.Load(),
		termSent: termSent.Load(), killSent: killSent.Load(), stopSent: stopSent.Load(), cancelSent: cancelSent.Load(),
		oomKills: oomKills, stdoutOverflow: inv.stdout.overflow, stdout: inv.stdout.Bytes(), logTail: env.LogTail,
		deadline: deadline, maxAuditRows: inv.limits.maxAuditRows, memoryMB: inv.pol.MemoryMB,
	})
	env.Outcome = v.outcome
	if v.signalSent != "" {
		env.SignalSent = v.signalSent
	}
	if v.outcome == OutcomeSuccess {
		env.Result, env.ResultHash = v.result, v.resultHash
	} else {
		env.ErrorMessage = v.errorMessage
	}
	inv.auditMsg = v.auditMsg
	inv.exit = &exit
}

// writeLog keeps the skill's stderr (capped) as the invocation's log.
// The logs share a budget (LogBudget), oldest removed first.
func (s *Supervisor) writeLog(id string, b []byte, log *slog.Logger) {
	s.logsOnce.Do(func() { s.logs = newLogStore(filepath.Join(s.StateDir, "logs"), s.LogBudget) })
	if err := s.logs.keep(id, b); err != nil {
		log.Warn("keep skill log", "err", err)
	}
}
