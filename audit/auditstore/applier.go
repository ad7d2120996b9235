// The index applier: copies journal rows into audit.db behind the writer,
// and catches the index up before every read.

package auditstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// anchorEvery is how often the applier records the head while rows flow
// (a variable so tests can shorten it).
var anchorEvery = 10 * time.Second

// applierState is the Store's index applier: what it has applied, the
// appends handed to it, and its wakeup and stop signals.
type applierState struct {
	// applyMu serialises apply (it owns wconn); written is the
	// journal end after this process's last durable append; pending holds
	// the rows of recent appends so the applier need not parse them back.
	applyMu     sync.Mutex
	appliedHint int64 // journal bytes known applied (applyMu)
	appliedHead head  // the index's head after this process's last apply (applyMu)
	anchorAt    time.Time
	cpRowSeq    atomic.Int64 // seq of this process's last checkpoint row
	written     atomic.Int64
	pendMu      sync.Mutex
	pending     []appended
	pendRows    int
	kick        chan struct{} // cap 1: wakes the idle applier
	kicked      atomic.Bool   // a kick was sent since the applier last started applying
	applyStop   chan struct{}
	applyDone   chan struct{}
}

// appended is one durable append of this process: journal bytes
// [start, end) hold rows.
type appended struct {
	start, end int64
	rows       []audit.Row
}

// maxPendingRows bounds the rows kept for the applier; past it the oldest
// appends are dropped and the applier reads them back from the journal.
const maxPendingRows = 1 << 14

// handOff gives a durable append to the applier. Only the first append
// after the applier went idle wakes it; it watches the rest on its timer,
// so a busy writer does not wake it once per commit.
func (s *Store) handOff(a appended) {
	s.pendMu.Lock()
	s.pending = append(s.pending, a)
	s.pendRows += len(a.rows)
	for s.pendRows > maxPendingRows && len(s.pending) > 1 {
		s.pendRows -= len(s.pending[0].rows)
		s.pending[0] = appended{}
		s.pending = s.pending[1:]
	}
	s.pendMu.Unlock()
	s.written.Store(a.end)
	if !s.kicked.Swap(true) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// When the applier runs. The index is work the emitters need not wait for,
// and it competes with them for CPU (SQLite's work per row, see
// BenchmarkApply), so the applier runs when appends pause for applyIdle, and
// otherwise at least every applyMaxLag or once maxPendingRows rows wait.
// Reads never see the lag: they catch up first.
const (
	applyIdle   = 20 * time.Millisecond
	applyMaxLag = time.Second
)

// applier keeps the index behind the journal: it applies what this process
// appended (and whatever other processes appended before it).
func (s *Store) applier() {
	defer close(s.applyDone)
	// On exit (the writer has exited) apply the last appends, so the index
	// is complete when Close returns. A failure is left for the next Open,
	// which applies the journal first.
	defer func() { _ = s.apply(context.Background(), s.written.Load()) }()
	tick := time.NewTimer(time.Hour)
	tick.Stop()
	for {
		// Idle until an append.
		select {
		case <-s.kick:
		case <-s.applyStop:
			return
		}
		first, seen := time.Now(), s.written.Load()
		for wait := true; wait; {
			tick.Reset(applyIdle)
			select {
			case <-tick.C:
			case <-s.applyStop:
				tick.Stop()
				return
			}
			s.pendMu.Lock()
			backlog := s.pendRows
			s.pendMu.Unlock()
			now := s.written.Load()
			wait = now != seen && time.Since(first) < applyMaxLag && backlog < maxPendingRows
			seen = now
		}
		// Appends from here on wake the applier again.
		s.kicked.Store(false)
		// A failure leaves the rows in the journal; the next apply, or a
		// reader's catch-up (which reports the error), tries again.
		if s.apply(context.Background(), s.written.Load()) == nil && time.Since(s.anchorAt) >= anchorEvery {
			s.applyMu.Lock()
			h := s.appliedHead
			s.applyMu.Unlock()
			if statedir.AdvanceAnchor(filepath.Dir(s.path), h.seq, h.hash, s.opts.signer) == nil {
				s.anchorAt = time.Now()
				s.toSink(h)
				s.enqueueCheckpoint(h)
			}
		}
	}
}

// catchUp applies every durable journal row the index lacks. Every read
// calls it first.
func (s *Store) catchUp(ctx context.Context) error {
	end, err := s.j.durableEnd()
	if err != nil {
		return fmt.Errorf("%w: journal: %w", ErrUnavailable, err)
	}
	if err := s.apply(ctx, end); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// apply copies the journal's whole lines below upTo that the index lacks
// into the index, in one transaction that also records how far the journal
// is applied. Any process may apply any row; the recorded offset and the
// index's chain head (the next row must continue it exactly) make that
// safe.
func (s *Store) apply(ctx context.Context, upTo int64) (err error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if upTo <= s.appliedHint {
		return nil
	}
	conn := s.wconn
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("index: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
		}
	}()
	var from int64
	if err := conn.QueryRowContext(ctx, `SELECT applied FROM journal_state`).Scan(&from); err != nil {
		return fmt.Errorf("index: read applied offset: %w", err)
	}
	if from >= upTo {
		if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
			return fmt.Errorf("index: commit: %w", err)
		}
		s.applied(from)
		return nil
	}
	seq, prev := int64(0), audit.GenesisHash
	if err := s.head.QueryRowContext(ctx).Scan(&seq, &prev); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("index: read chain head: %w", err)
	}
	rows, to, err := s.journalRows(from, upTo)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Seq != seq+1 || r.PrevHash != prev {
			return fmt.Errorf("journal and index disagree: journal row seq %d (row %s, prev_hash %.12s…) does not follow the index head seq %d (%.12s…)",
				r.Seq, r.RowID, r.PrevHash, seq, prev)
		}
		seq, prev = r.Seq, r.RowHash
	}
	args := make([]any, 0, 7*insertChunks[0])
	for i := 0; i < len(rows); {
		n := chunk(len(rows) - i)
		args = args[:0]
		for _, row := range rows[i : i+n] {
			args = append(args, row.Seq, row.RowID, string(row.Kind), row.TS, row.PrevHash, row.RowHash, string(row.Payload))
		}
		if _, err := s.insert[n].ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("index: insert seq %d..%d: %w", rows[i].Seq, rows[i+n-1].Seq, err)
		}
		i += n
	}
	if _, err := conn.ExecContext(ctx, `UPDATE journal_state SET applied = ?`, to); err != nil {
		return fmt.Errorf("index: record applied offset: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("index: commit: %w", err)
	}
	s.appliedHead = head{seq, prev}
	s.applied(to)
	return nil
}

// applied records that the journal is applied up to off and drops the
// handed-off rows below it.
func (s *Store) applied(off int64) {
	s.appliedHint = max(s.appliedHint, off)
	s.pendMu.Lock()
	i := 0
	for i < len(s.pending) && s.pending[i].end <= off {
		s.pendRows -= len(s.pending[i].rows)
		i++
	}
	clear(s.pending[:i])
	s.pending = s.pending[i:]
	s.pendMu.Unlock()
}

// journalRows returns the rows of the whole lines in [from, upTo) and the
// offset after the last of them: handed-off rows where this process wrote
// them, parsed from the file where another process did (or the hand-off
// was dropped).
func (s *Store) journalRows(from, upTo int64) ([]audit.Row, int64, error) {
	s.pendMu.Lock()
	pend := slices.Clone(s.pending)
	held := s.pendRows
	s.pendMu.Unlock()
	rows := make([]audit.Row, 0, held) // most of them, in one allocation
	cur := from
	for cur < upTo {
		i := slices.IndexFunc(pend, func(a appended) bool { return a.end > cur })
		if i >= 0 && pend[i].start == cur && pend[i].end <= upTo {
			rows = append(rows, pend[i].rows...)
			cur = pend[i].end
			continue
		}
		stop := upTo
		if i >= 0 && pend[i].start > cur {
			stop = min(stop, pend[i].start)
		}
		data, end, err := s.j.readRange(cur, stop)
		if err != nil {
			return nil, 0, fmt.Errorf("read journal: %w", err)
		}
		if end == cur {
			break // no whole line yet
		}
		for line := range bytes.Lines(data) {
			r, err := audit.DecodeRow(bytes.TrimSuffix(line, []byte("\n")))
			if err != nil {
				return nil, 0, fmt.Errorf("journal line at offset %d: %w", cur, err)
			}
			rows = append(rows, r)
			cur += int64(len(line))
		}
	}
	return rows, cur, nil
}

// enqueueCheckpoint adds a checkpoint row signing h behind the rows being
// written (best effort: on a full disk the signed anchor still holds h).
func (s *Store) enqueueCheckpoint(h head) {
	if s.opts.signer == nil || h.seq < 1 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	wait, err := s.Enqueue(ctx, s.opts.signer.CheckpointRow(h.seq, h.hash))
	if err != nil {
		return
	}
	go func() {
		if r, err := wait(); err == nil {
			s.cpRowSeq.Store(r.Seq)
		}
	}()
}

// checkpointAtClose signs the head this process leaves behind: once every
// row it wrote is applied, a checkpoint row of the index's head, unless that
// head is its own last checkpoint row or it wrote nothing.
func (s *Store) checkpointAtClose() {
	if s.opts.signer == nil || s.commits.Load() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.apply(ctx, s.written.Load()) != nil {
		return
	}
	s.applyMu.Lock()
	h := s.appliedHead
	s.applyMu.Unlock()
	if h.seq < 1 || h.seq == s.cpRowSeq.Load() {
		return
	}
	if r, err := s.Emit(ctx, s.opts.signer.CheckpointRow(h.seq, h.hash)); err == nil {
		s.cpRowSeq.Store(r.Seq)
	}
}

// toSink sends the signed head h to the store's sink, if it has one.
func (s *Store) toSink(h head) {
	if s.opts.sink == nil || s.opts.signer == nil || h.seq < 1 {
		return
	}
	s.opts.sink(audit.Checkpoint{Seq: h.seq, RowHash: h.hash, PublicKey: s.opts.signer.PublicKey(), Signature: s.opts.signer.Sign(h.seq, h.hash)})
}
