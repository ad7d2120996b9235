package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
)

// An invocation holds an exclusive flock on <state>/inflight/<id>.lock from
// before its started row until after its completed row. The kernel drops
// the lock when the supervisor dies, so at the next start a started row
// whose lock can be taken belongs to a dead supervisor: that invocation is
// lost. A live one, in another process, keeps its lock and is left alone.

func inflightPath(stateDir, id string) string {
	return filepath.Join(stateDir, "inflight", id+".lock")
}

func lockInflight(stateDir, id string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Join(stateDir, "inflight"), 0o700); err != nil {
		return nil, fmt.Errorf("in-flight lock: %w", err)
	}
	f, err := os.OpenFile(inflightPath(stateDir, id), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("in-flight lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("in-flight lock %s: %w", id, err)
	}
	return f, nil
}

func releaseInflight(stateDir, id string, f *os.File) {
	_ = os.Remove(inflightPath(stateDir, id))
	f.Close()
}

// Reconciler is what reconciliation needs of the audit store.
type Reconciler interface {
	Auditor
	Unterminated(ctx context.Context) ([]audit.Row, error)
	Rows(ctx context.Context, f auditstore.Filter) ([]audit.Row, error)
}

// Reconcile closes every invocation left started by a supervisor that died:
// its sandbox, cgroup and socket have already been cleaned by the runner
// (sandbox leftovers are removed when a runner starts), so it only writes
// the terminal skill.invoked_completed row with outcome lost. It returns
// the invocation ids it closed.
func (s *Supervisor) Reconcile(ctx context.Context, store Reconciler) ([]string, error) {
	rows, err := store.Unterminated(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	var closed []string
	var errs []error
	for _, r := range rows {
		var c audit.Common
		var p struct {
			InvocationID string `json:"invocation_id"`
			RequestID    string `json:"request_id"`
			SkillID      string `json:"skill_id"`
			TenantID     string `json:"tenant_id"`
			TraceID      string `json:"trace_id"`
		}
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			errs = append(errs, fmt.Errorf("row %d: %w", r.Seq, err))
			continue
		}
		c = audit.Common{InvocationID: p.InvocationID, RequestID: p.RequestID, SkillID: p.SkillID, TenantID: p.TenantID, TraceID: p.TraceID}
		lock, err := lockInflight(s.StateDir, c.InvocationID)
		if err != nil {
			continue // its supervisor is alive: in flight, not lost
		}
		// Holding the lock, look again: its supervisor may have written the
		// completed row and released the lock since Unterminated read.
		if done, err := store.Rows(ctx, auditstore.Filter{InvocationID: c.InvocationID, Kind: audit.KindInvokedCompleted}); err != nil || len(done) > 0 {
			releaseInflight(s.StateDir, c.InvocationID, lock)
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// Its broker socket died with it; remove the file.
		if s.SocketDir != "" {
			_ = os.Remove(filepath.Join(s.SocketDir, "cyberos-skill-broker."+c.InvocationID+".sock"))
		}
		// The real end is unknown: the duration is an upper bound, from the
		// started row to now.
		var dur int64
		if ts, perr := time.Parse(time.RFC3339Nano, r.TS); perr == nil {
			dur = time.Since(ts).Milliseconds()
		}
		_, err = store.Emit(ctx, audit.InvokedCompleted(c, string(OutcomeLost), dur, "", "supervisor died before the invocation ended"))
		releaseInflight(s.StateDir, c.InvocationID, lock)
		if err != nil {
			errs = append(errs, fmt.Errorf("close %s as lost: %w", c.InvocationID, err))
			continue
		}
		s.logger().Warn("invocation closed as lost", "invocation_id", c.InvocationID, "skill_id", c.SkillID)
		s.metrics().InvocationsLost.Inc()
		closed = append(closed, c.InvocationID)
	}
	return closed, errors.Join(errs...)
}

// holds are what an invocation keeps on the state dir from before its
// started row until after its completed row: the in-flight lock and the
// journal space reserved for its terminal rows. Run takes them on another
// goroutine while prepare checks the request: both are file system work
// that the checks need not wait for, nor the checks for them.
type holds struct {
	stateDir, id string
	done         chan struct{}
	lock         *os.File
	lockErr      error
	release      func() // the reservation's; nil without one
	reserveErr   error
}

// takeHolds starts taking id's lock, then its reservation when the audit
// store reserves; wait returns once both are taken or refused.
func (s *Supervisor) takeHolds(id string) *holds {
	h := &holds{stateDir: s.StateDir, id: id, done: make(chan struct{})}
	r, reserves := s.Audit.(Reserver)
	go func() {
		defer close(h.done)
		defer func() {
			if p := recover(); p != nil { // as the handler's own recovery would
				h.reserveErr = fmt.Errorf("panic while reserving: %v", p)
			}
		}()
		if h.lock, h.lockErr = lockInflight(h.stateDir, id); h.lockErr != nil || !reserves {
			return
		}
		h.release, h.reserveErr = r.Reserve(id)
	}()
	return h
}

func (h *holds) wait() { <-h.done }

// keepReservation hands the reservation to the caller (a completed row
// still to be written keeps its space); end then leaves it.
func (h *holds) keepReservation() func() {
	h.wait()
	rel := h.release
	h.release = nil
	if rel == nil {
		rel = func() {}
	}
	return rel
}

// end releases the reservation and the lock, whichever were taken.
func (h *holds) end() {
	h.wait()
	if h.release != nil {
		h.release()
		h.release = nil
	}
	if h.lock != nil {
		releaseInflight(h.stateDir, h.id, h.lock)
		h.lock = nil
	}
}
