// The journal writer: Emit and Enqueue fill a batch, the syncer (or a lone
// Emit itself) chains it onto the journal's head and appends it with one
// fdatasync (group commit).

package auditstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// startAt gives the writer its first guess of the chain head, h at journal
// offset end (commit checks it under the lock before every append).
func (s *Store) startAt(h head, end int64) {
	s.tip, s.tipEnd, s.cur = h, end, newBatch(0)
}

// Emit validates d, adds it to the batch being filled and returns the
// stored row once that batch is durable (in the journal, fdatasynced). An
// invalid draft fails with ErrInvalidRow and nothing is written. Emit waits
// (and gives up with ctx.Err(), writing nothing) only while the batch being
// filled is full; once its row is in a batch, Emit waits for that batch's
// outcome whatever ctx does, so a nil error always means a durable row.
// Write failures wrap ErrUnavailable.
func (s *Store) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	return s.emit(ctx, d, nil, 0)
}

// emit is Emit of a row that, when after is set, follows row afterIdx of
// batch after (see EnqueueFollowed).
func (s *Store) emit(ctx context.Context, d audit.Draft, after *batch, afterIdx int) (audit.Row, error) {
	b, i, first, err := s.add(ctx, d, true, after, afterIdx, nil)
	if err != nil {
		return audit.Row{}, err
	}
	s.commitInline(first)
	<-b.done
	if s.beforeResume != nil {
		s.beforeResume()
	}
	if b.resumed.Add(1) == b.waiters {
		close(b.ran) // the last of the batch's emitters to run again
	}
	return b.result(i)
}

// Enqueue adds d like Emit and returns at once; wait returns when the row
// is durable (or failed). Rows are written in the order they were added, so
// a row emitted after Enqueue returned is never durable before d: the broker
// answers a tool call once its completed row is added, and the skill's next
// call cannot act before its own started row, which follows it, is durable.
// Nobody needs d durable sooner, so a batch of only enqueued rows waits up
// to lazyHold for an Emit to share its fdatasync: a skill's calls in a row
// then cost one fdatasync each (completed row and the next started row
// together), not two.
func (s *Store) Enqueue(ctx context.Context, d audit.Draft) (wait func() (audit.Row, error), err error) {
	b, i, _, err := s.add(ctx, d, false, nil, 0, nil)
	if err != nil {
		return nil, err
	}
	return func() (audit.Row, error) { return b.result(i) }, nil
}

// EnqueueNotify is Enqueue for a caller that only needs the outcome: done
// gets the row's failure (nil once it is durable) when its append is over,
// on the goroutine that committed it, so it must not block. Nothing waits
// on the row meanwhile: no goroutine per row, and none to wake at the
// commit. When EnqueueNotify returns an error, done is never called.
func (s *Store) EnqueueNotify(ctx context.Context, d audit.Draft, done func(error)) error {
	_, _, _, err := s.add(ctx, d, false, nil, 0, done)
	return err
}

// EnqueueFollowed is Enqueue of a row that another must follow: then emits
// that row (as Emit does), and writes it only if d was written. When d's
// append failed and then's row would land in a later append, it is not
// written and fails with ErrUnavailable, so the journal never holds a row
// without the row it follows (a tool call's completed row without its
// started row). then is for rows that are not terminal (see isTerminal).
func (s *Store) EnqueueFollowed(ctx context.Context, d audit.Draft) (wait func() (audit.Row, error), then func(context.Context, audit.Draft) (audit.Row, error), err error) {
	b, i, _, err := s.add(ctx, d, false, nil, 0, nil)
	if err != nil {
		return nil, nil, err
	}
	wait = func() (audit.Row, error) { return b.result(i) }
	then = func(ctx context.Context, next audit.Draft) (audit.Row, error) { return s.emit(ctx, next, b, i) }
	return wait, then, nil
}

// failed is row i's failure once b is done (nil when it was written).
func (b *batch) failed(i int) error {
	if b.err != nil {
		return b.err
	}
	if b.errs != nil {
		return b.errs[i]
	}
	return nil
}

// writerState is the Store's journal writer: the batch being filled, the
// syncer's chain head and scratch, and the tests' hooks.
type writerState struct {
	// The writer (see add and run). pmu guards cur, the batch being filled,
	// and shut; ready (cap 1) tells the syncer an emitter waits for cur.
	pmu sync.Mutex
	cur *batch
	// cmu is held by whoever takes a batch and commits it: the syncer, or
	// an emitter committing inline (commitInline). Batches are taken and
	// written in the order they were filled.
	cmu         sync.Mutex
	hold        *time.Timer // wakes the syncer when an enqueued-only batch has waited lazyHold
	shut        bool
	closing     bool // Close has begun: it signs the head before shutting
	ready       chan struct{}
	stop        chan struct{} // closed by Close: the syncer commits what is left and exits
	done        chan struct{} // closed by the syncer on exit
	waitingRoom atomic.Int32  // emitters waiting for room in a full batch
	lazyHold    time.Duration // see Enqueue
	resumeWait  time.Duration // see letEmittersRun

	// The committer's (cmu's holder's): the chain head after this writer's
	// last append and the journal end it left (while the journal still ends
	// there, no other process appended and the head need not be read back),
	// row ids, the hash state for chaining, and the last batch's line
	// buffer for reuse.
	tipEnd int64
	tip    head
	// jmu serializes this process's holders of the journal's statedir.Flock (the
	// committer and Reserve): an statedir.Flock belongs to the open file, so it does
	// not exclude goroutines sharing the descriptor.
	jmu         sync.Mutex
	entropy     *ulid.MonotonicEntropy
	digest      hash.Hash
	spare       []byte
	lastSize    int         // slots in the last batch: the next one's initial capacity
	lastWaiters int32       // the last batch's waiters (see take)
	resumeTimer *time.Timer // bounds letEmittersRun's wait

	commits atomic.Int64 // durable appends (tests prove group commit with it)

	// beforeCommit, when set (tests only), runs for each batch with the
	// journal locked, just before the append; an error aborts the batch.
	beforeCommit func() error
	// beforeResume, when set (tests only), runs in Emit once the row's
	// batch is durable, before Emit counts itself as resumed.
	beforeResume func()
}

// The writer. There is no queue and no goroutine per row: Emit does the
// work that does not depend on the chain itself (validation, canonical
// payload, the SHA-256 of the hashed text's prefix, see Row.writerHash)
// and then only appends that to the batch being filled (s.cur) under s.pmu,
// a few stores. One goroutine, the syncer (run), takes the whole batch
// whenever it is free and, under the journal lock, chains it onto the
// journal's head (seq, row_id, ts, prev_hash, the hash's suffix, the
// journal lines) and appends it in one write and one fdatasync (group
// commit: N concurrent emitters cost one fdatasync, not N queued behind a
// lock). While a batch is being synced the next one fills; one channel
// close wakes every emitter of a batch, and the syncer lets them run before
// it takes the next one (letEmittersRun). An Emit that finds nobody
// committing and is the only emitter waiting for its batch (and was for
// the batch before) does the syncer's work itself (commitInline): a lone
// caller's rows are then durable without waking the syncer and being woken
// by it.

// slot is an emitted row waiting in a batch: what Emit could prepare.
type slot struct {
	kind    audit.Kind
	payload []byte
	prefix  [sha256StateLen]byte // SHA-256 state after audit.AppendHashPrefix
	// after, when set, is the batch of the row this one follows (its index
	// afterIdx): the row is written only if that one was.
	after    *batch
	afterIdx int
	// done, when set, is told the row's outcome (EnqueueNotify).
	done func(error)
}

// sha256StateLen is the size of a marshalled crypto/sha256 state.
const sha256StateLen = 108

// batch is the rows of one append.
type batch struct {
	slots []slot
	rows  []audit.Row   // the stored rows, set by commit before done closes
	taken chan struct{} // closed when the batch is taken (take)
	done  chan struct{} // closed when the append is durable, or failed (err)
	err   error         // the append's failure, set before done closes
	errs  []error       // when set: row i's own failure (a split batch, see commit)

	urgent bool      // an emitter waits for a row of it (Emit, not Enqueue)
	since  time.Time // when its first row was added

	waiters int32         // its rows added by Emit (not Enqueue)
	resumed atomic.Int32  // of those, how many Emit calls run again since done closed
	ran     chan struct{} // closed when all waiters have run again
}

func newBatch(slotsHint int) *batch {
	return &batch{
		slots: make([]slot, 0, slotsHint),
		taken: make(chan struct{}),
		done:  make(chan struct{}),
		ran:   make(chan struct{}),
	}
}

// result waits for row i's batch and returns the stored row.
func (b *batch) result(i int) (audit.Row, error) {
	<-b.done
	if b.err != nil {
		return audit.Row{}, b.err
	}
	if b.errs != nil && b.errs[i] != nil {
		return audit.Row{}, b.errs[i]
	}
	return b.rows[i], nil
}

// prefixHasher is Emit's scratch for hashing a row's prefix; recycled.
type prefixHasher struct {
	h     hash.Hash
	text  []byte
	state []byte
}

var prefixHashers = sync.Pool{New: func() any {
	return &prefixHasher{h: sha256.New(), text: make([]byte, 0, 1024), state: make([]byte, 0, sha256StateLen)}
}}

// prepare validates d and makes its slot: the canonical payload and the
// SHA-256 state after the hashed text's prefix.
func prepare(d audit.Draft) (slot, error) {
	payload, err := d.Canonical()
	if err != nil {
		return slot{}, err
	}
	sl := slot{kind: d.Kind, payload: payload}
	ph := prefixHashers.Get().(*prefixHasher)
	defer prefixHashers.Put(ph)
	ph.text = audit.AppendHashPrefix(ph.text[:0], d.Kind, payload)
	ph.h.Reset()
	ph.h.Write(ph.text)
	ph.state, err = ph.h.(encoding.BinaryAppender).AppendBinary(ph.state[:0])
	if err != nil {
		return slot{}, fmt.Errorf("%w: sha256 state: %w", ErrUnavailable, err)
	}
	if n := copy(sl.prefix[:], ph.state); n != sha256StateLen {
		return slot{}, fmt.Errorf("%w: sha256 state: %d bytes", ErrUnavailable, n)
	}
	return sl, nil
}

// lazyHold bounds how long a batch of only enqueued rows waits for an
// emitted one (see Enqueue); Store.lazyHold is this unless a test set it.
const lazyHold = time.Millisecond

// add prepares d's slot and adds it to the batch being filled; it returns
// that batch and the slot's index in it. urgent: the caller waits for the
// row (Emit), so the batch goes as soon as no other one is being committed;
// first: the batch had no urgent row before this one.
func (s *Store) add(ctx context.Context, d audit.Draft, urgent bool, after *batch, afterIdx int, done func(error)) (b *batch, i int, first bool, err error) {
	sl, err := prepare(d)
	if err != nil {
		return nil, 0, false, err
	}
	if d.Kind == audit.KindInvokedStarted {
		// A damaged store finishes the invocations it runs, and starts none.
		if err := s.Damage(); err != nil {
			return nil, 0, false, err
		}
	}
	sl.after, sl.afterIdx, sl.done = after, afterIdx, done
	if err := ctx.Err(); err != nil {
		return nil, 0, false, err
	}
	s.pmu.Lock()
	for !s.shut && len(s.cur.slots) >= s.opts.maxBatch {
		// Full: wait for the syncer to take it.
		taken := s.cur.taken
		s.pmu.Unlock()
		s.waitingRoom.Add(1)
		select {
		case <-taken:
		case <-ctx.Done():
			s.waitingRoom.Add(-1)
			return nil, 0, false, ctx.Err()
		}
		s.waitingRoom.Add(-1)
		s.pmu.Lock()
	}
	if s.shut {
		s.pmu.Unlock()
		return nil, 0, false, ErrClosed
	}
	b, i = s.cur, len(s.cur.slots)
	b.slots = append(b.slots, sl)
	if i == 0 {
		b.since = time.Now()
	}
	first = urgent && !b.urgent
	b.urgent = b.urgent || urgent
	if urgent {
		b.waiters++
	}
	s.pmu.Unlock()
	if i == 0 && !urgent {
		s.hold.Reset(s.lazyHold) // see await; an urgent row is committed at once (commitInline)
	}
	return b, i, first, nil
}

// wake tells the syncer the batch being filled may be ready.
func (s *Store) wake() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// commitInline commits the batch being filled on the emitter's own
// goroutine when nobody else is committing and it is the only emitter
// waiting (see take): a lone emitter's row is then durable without two
// hand-offs between goroutines. Otherwise the syncer is told, by the
// batch's first urgent row (first): it takes the batch once the commit in
// progress is over.
func (s *Store) commitInline(first bool) {
	if !s.cmu.TryLock() {
		if first {
			s.wake()
		}
		return
	}
	b := s.take(true)
	if b != nil {
		s.commitBatch(b)
	}
	s.cmu.Unlock()
	if b == nil && first {
		s.wake()
	}
}

// run is the syncer: it commits each batch and wakes its emitters. After
// Close it commits what was added before and exits.
func (s *Store) run() {
	defer close(s.done)
	for {
		if !s.await() {
			// Shut with nothing left to take; an emitter may still be
			// appending what it took: Close must not go on before it ends.
			s.cmu.Lock()
			defer s.cmu.Unlock()
			return
		}
		s.cmu.Lock()
		b := s.take(false)
		if b == nil {
			// An emitter committed it inline. Once shut, nothing more comes.
			s.pmu.Lock()
			shut := s.shut && len(s.cur.slots) == 0
			s.pmu.Unlock()
			s.cmu.Unlock()
			if shut {
				return
			}
			continue
		}
		s.commitBatch(b)
		s.letEmittersRun(b)
		s.cmu.Unlock()
	}
}

// commitBatch commits b, wakes its emitters and tells its rows' done
// callbacks (cmu held).
func (s *Store) commitBatch(b *batch) {
	if err := s.commit(b); errors.Is(err, ErrUnavailable) {
		b.err = err
	} else if err != nil {
		b.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	close(b.done)
	for i := range b.slots {
		if done := b.slots[i].done; done != nil {
			b.slots[i].done = nil
			done(b.failed(i))
		}
	}
}

// resumeWait bounds how long the syncer waits for the emitters it just
// woke (see letEmittersRun); Store.resumeWait is this unless a test set it.
const resumeWait = time.Millisecond

// letEmittersRun lets the emitters of b, just woken, run before the syncer
// takes the next batch: those that emit again at once join it instead of
// waiting a whole cycle (an fdatasync in flight, then their own). With two
// or more of them the syncer waits until every one has run again (the last
// closes b.ran): only the scheduling of goroutines already runnable, not
// anything they do next; resumeWait bounds it. A Gosched would not do:
// another P runs the syncer at once, and many emitters would miss the next
// append, so batches alternate between full and half full (rows/commit in
// BenchmarkEmit). With one it yields instead: there is nothing to gather,
// and waiting would cost the wakeup of another P (BenchmarkEmit/emitters=1).
func (s *Store) letEmittersRun(b *batch) {
	if b.waiters < 2 {
		runtime.Gosched()
		return
	}
	s.resumeTimer.Reset(s.resumeWait)
	select {
	case <-b.ran:
	case <-s.resumeTimer.C:
	}
	s.resumeTimer.Stop()
}

// stoppedTimer returns a timer that is not running, for Reset.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// await waits until the batch being filled should go: an emitter waits
// for it, it is full, the store is shutting, or its rows were only
// enqueued and have waited lazyHold. It returns false once the store is
// shut and nothing is left.
func (s *Store) await() bool {
	for {
		s.pmu.Lock()
		n := len(s.cur.slots)
		if n == 0 && s.shut {
			s.pmu.Unlock()
			return false
		}
		if n > 0 {
			left := s.lazyHold - time.Since(s.cur.since)
			if s.cur.urgent || s.shut || n >= s.opts.maxBatch || left <= 0 {
				s.pmu.Unlock()
				return true
			}
			s.hold.Reset(left) // only enqueued rows: wait a little for an emitted one
		}
		s.pmu.Unlock()
		select {
		case <-s.ready:
		case <-s.stop:
		case <-s.hold.C:
		}
	}
}

// take takes the batch being filled, if it has rows, and starts the next
// one (cmu held). lone: only if at most one emitter waits for it, and did
// for the batch before; several are the syncer's to commit, which lets
// them run again before the next batch (letEmittersRun), so that they
// share it.
func (s *Store) take(lone bool) *batch {
	next := newBatch(s.lastSize) // allocated outside the lock emitters wait on
	s.pmu.Lock()
	if len(s.cur.slots) == 0 || lone && max(s.cur.waiters, s.lastWaiters) > 1 {
		s.pmu.Unlock()
		return nil
	}
	b := s.cur
	s.cur = next
	s.pmu.Unlock()
	close(b.taken)
	s.lastSize, s.lastWaiters = len(b.slots), b.waiters
	return b
}

// commit chains b's rows onto the journal's head and appends them as one
// write and one fdatasync, under the journal's exclusive lock. The head is
// the journal's last line, read under that lock (or remembered from this
// writer's last append while the journal still ends there), so writers in
// other processes cannot fork the chain. A failed append is cut off again
// before the lock is released: nothing of it remains for the next batch to
// chain from.
func (s *Store) commit(b *batch) error {
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if err := statedir.Flock(s.j.w, statedir.LockExclusive); err != nil {
		return fmt.Errorf("lock journal: %w", err)
	}
	defer statedir.Unlock(s.j.w)
	start, size, err := s.j.appendPoint()
	if err != nil {
		return fmt.Errorf("read journal end: %w", err)
	}
	h := s.tip
	if start != s.tipEnd {
		// Another process appended since this writer's last batch (or
		// since Open, which set the tip): read the head back.
		if h, start, size, err = s.readHead(); err != nil {
			return err
		}
	}
	// slots are the rows to write; keep, when set, their indexes in b.
	slots, keep := b.slots, []int(nil)
	at := func(k int) int {
		if keep == nil {
			return k
		}
		return keep[k]
	}
	// A row whose row before it failed in an earlier append is not written
	// (EnqueueFollowed); in the same append, both share its fate.
	for i, sl := range b.slots {
		if sl.after == nil || sl.after == b {
			continue
		}
		b.slots[i].after = nil // no chain of batches kept alive
		if ferr := sl.after.failed(sl.afterIdx); ferr != nil {
			if b.errs == nil {
				b.errs = make([]error, len(b.slots))
			}
			b.errs[i] = fmt.Errorf("%w: the row it follows was not written: %w", ErrUnavailable, ferr)
		}
	}
	if b.errs != nil {
		slots = nil
		keep = []int{}
		for i, sl := range b.slots {
			if b.errs[i] == nil {
				keep = append(keep, i)
				slots = append(slots, sl)
			}
		}
		if len(slots) == 0 {
			b.rows = make([]audit.Row, len(b.slots))
			return nil
		}
	}
	rows, buf, err := s.chain(slots, h, s.spare[:0])
	s.spare = buf
	if err != nil {
		return err
	}
	if hasPlain(slots) {
		if size, err = s.makeRoom(start+int64(len(buf)), size); err != nil {
			// Rows other than terminal ones would use space reserved for
			// running invocations' terminal rows (or that space cannot be
			// told): refuse those, write the terminal rows.
			var terminal []slot
			var terminalAt []int
			for k, sl := range slots {
				if isTerminal(sl.kind) {
					terminalAt = append(terminalAt, at(k))
					terminal = append(terminal, sl)
				}
			}
			if errors.Is(err, ErrNoSpace) && !errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: %w", err, syscall.ENOSPC)
			} else if !errors.Is(err, ErrUnavailable) {
				err = fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			if len(terminal) == 0 {
				return err
			}
			if b.errs == nil {
				b.errs = make([]error, len(b.slots))
			}
			for i := range b.errs {
				if b.errs[i] == nil {
					b.errs[i] = err
				}
			}
			slots, keep = terminal, terminalAt
			rows, buf, err = s.chain(slots, h, s.spare[:0])
			s.spare = buf
			if err != nil {
				return err
			}
		}
	}
	if s.beforeCommit != nil {
		if err := s.beforeCommit(); err != nil {
			return err
		}
	}
	if err := s.j.write(buf, start, size); err != nil {
		return fmt.Errorf("append seq %d..%d: %w", rows[0].Seq, rows[len(rows)-1].Seq, err)
	}
	last := rows[len(rows)-1]
	s.tipEnd, s.tip = start+int64(len(buf)), head{last.Seq, last.RowHash}
	s.commits.Add(1)
	s.handOff(appended{start: start, end: s.tipEnd, rows: rows})
	if keep != nil {
		all := make([]audit.Row, len(b.slots))
		for k, i := range keep {
			all[i], b.errs[i] = rows[k], nil
		}
		rows = all
	}
	b.rows = rows
	return nil
}

// hasPlain reports whether slots hold a row that is not a terminal one
// (see isTerminal): only those are refused to keep reserved space.
func hasPlain(slots []slot) bool {
	for i := range slots {
		if !isTerminal(slots[i].kind) {
			return true
		}
	}
	return false
}

// chain makes the rows of slots, continuing h, and their journal lines
// (appended to buf). It is the only place rows get seq, row_id, ts,
// prev_hash and row_hash. The rows of one batch are committed together and
// share its ts; their row ids are monotonic. It runs between two
// fdatasyncs, so it allocates one string per row (row_id and row_hash
// share it) and nothing else per row (see BenchmarkChain).
func (s *Store) chain(slots []slot, h head, buf []byte) ([]audit.Row, []byte, error) {
	rows := make([]audit.Row, len(slots))
	var text [256]byte
	var sum [sha256.Size]byte
	var id ulid.ULID
	var idHash [ulid.EncodedSize + 2*sha256.Size]byte // row_id, then row_hash, as text
	now := time.Now().UTC()
	ms, ts := ulid.Timestamp(now), now.Format(audit.TimeFormat)
	for i := range slots {
		sl := &slots[i]
		seq := h.seq + 1
		if seq > audit.MaxJSONInt {
			return nil, buf, fmt.Errorf("seq %d out of range", seq)
		}
		if err := id.SetTime(ms); err != nil {
			return nil, buf, fmt.Errorf("row id: %w", err)
		}
		if err := s.entropy.MonotonicRead(ms, id[6:]); err != nil {
			return nil, buf, fmt.Errorf("row id: %w", err)
		}
		if err := id.MarshalTextTo(idHash[:ulid.EncodedSize]); err != nil {
			return nil, buf, fmt.Errorf("row id: %w", err)
		}
		if err := s.digest.(encoding.BinaryUnmarshaler).UnmarshalBinary(sl.prefix[:]); err != nil {
			return nil, buf, fmt.Errorf("sha256 state: %w", err)
		}
		s.digest.Write(audit.AppendHashSuffix(text[:0], h.hash, idHash[:ulid.EncodedSize], seq, ts))
		hex.Encode(idHash[ulid.EncodedSize:], s.digest.Sum(sum[:0]))
		both := string(idHash[:])
		row := audit.Row{Seq: seq, RowID: both[:ulid.EncodedSize], Kind: sl.kind, TS: ts, PrevHash: h.hash, RowHash: both[ulid.EncodedSize:], Payload: sl.payload}
		rows[i] = row
		buf = audit.AppendJournalLine(buf, row)
		h = head{row.Seq, row.RowHash}
	}
	return rows, buf, nil
}

// head is a chain head: the last row's seq and row_hash (0 and GenesisHash
// for an empty chain).
type head struct {
	seq  int64
	hash string
}

// readHead returns the chain head from the journal's last line (cutting a
// torn tail first), or from the index when the journal is empty (a store
// from before the journal existed), and the journal's end and size. The
// journal must be locked.
func (s *Store) readHead() (h head, end, size int64, err error) {
	end, size, last, err := s.j.tail()
	if err != nil {
		return head{}, 0, 0, fmt.Errorf("read journal tail: %w", err)
	}
	h, err = s.headOf(last)
	return h, end, size, err
}

// headOf returns the chain head given the journal's last line: that row's,
// or the index's last row's when the journal is empty (nil), or the genesis.
func (s *Store) headOf(last []byte) (head, error) {
	if last != nil {
		r, err := audit.DecodeRow(last)
		if err != nil {
			return head{}, fmt.Errorf("journal's last line: %w", err)
		}
		return head{r.Seq, r.RowHash}, nil
	}
	h := head{0, audit.GenesisHash}
	if err := s.db.QueryRowContext(context.Background(), statedir.HeadQuery).Scan(&h.seq, &h.hash); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return head{}, fmt.Errorf("read chain head: %w", err)
	}
	return h, nil
}
