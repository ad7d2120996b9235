package daemon

import (
	"context"
	"errors"
	"time"

	"cyberos.dev/audit/auditstore"
)

// scrubLoop verifies the whole audit chain (auditstore.Store.Scrub) once at
// start and then every interval, until ctx ends. Damage found makes the
// store refuse new invocations (handleInvoke answers 503); each scrub's
// result is in the cyberos_audit_scrub_* metrics and the log.
func (d *Daemon) scrubLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		d.scrubOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrubOnce runs one scrub and records its result.
func (d *Daemon) scrubOnce(ctx context.Context) {
	start := time.Now()
	rep, err := d.store.Scrub(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // shutting down
	}
	took := time.Since(start)
	m := d.metrics
	m.AuditScrubLast.Set(float64(time.Now().Unix()))
	m.AuditScrubDuration.Set(took.Seconds())
	m.AuditScrubRows.Set(float64(rep.Rows))
	m.AuditScrubProblems.Set(float64(len(rep.Problems)))
	switch {
	case err != nil:
		m.AuditScrubOK.Set(0)
		d.log.Error("audit scrub: the store could not be read", "err", err, "took", took)
	case !rep.OK:
		m.AuditScrubOK.Set(0)
		d.log.Error("audit scrub: the chain is damaged; no invocation is taken until it is repaired",
			"problems", len(rep.Problems), "rows", rep.Rows, "repair", auditstore.RepairCommand(d.cfg.StateDir), "err", d.store.Damage(), "severity", "sev-1")
	default:
		m.AuditScrubOK.Set(1)
		d.log.Info("audit scrub: the chain verifies", "rows", rep.Rows, "checkpoints", rep.Checkpoints, "took", took)
	}
}
