package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// FileName is the store's file inside the state dir.
const FileName = "audit.db"

// schemaVersion is PRAGMA user_version of a store this code can write.
const schemaVersion = 2

// schema: one table of rows keyed by seq. payload is the canonical JSON text
// that was hashed, byte for byte. invocation_id is derived from it (never
// stored separately, so it cannot disagree with the hashed payload) and
// indexed for per-invocation reads; the json_valid guard keeps reads working
// on a store whose payload was damaged, so Verify can name the row. The
// triggers make the table append-only for anyone using SQL; they are not a
// security boundary (whoever can write the file can drop them), the hash
// chain is what detects tampering.
const schema = `
CREATE TABLE IF NOT EXISTS audit_rows (
	seq           INTEGER PRIMARY KEY CHECK (seq > 0),
	row_id        TEXT NOT NULL,
	kind          TEXT NOT NULL,
	ts            TEXT NOT NULL,
	prev_hash     TEXT NOT NULL,
	row_hash      TEXT NOT NULL,
	payload       TEXT NOT NULL,
	invocation_id ANY GENERATED ALWAYS AS (
		CASE WHEN json_valid(payload) THEN json_extract(payload, '$.invocation_id') END
	) VIRTUAL
) STRICT;
CREATE INDEX IF NOT EXISTS audit_rows_kind ON audit_rows (kind);
CREATE INDEX IF NOT EXISTS audit_rows_invocation ON audit_rows (invocation_id);
CREATE TRIGGER IF NOT EXISTS audit_rows_no_update BEFORE UPDATE ON audit_rows
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_rows_no_delete BEFORE DELETE ON audit_rows
BEGIN SELECT RAISE(ABORT, 'audit rows are append-only'); END;
CREATE TABLE IF NOT EXISTS journal_state (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	applied INTEGER NOT NULL CHECK (applied >= 0)
) STRICT;
INSERT OR IGNORE INTO journal_state (id, applied) VALUES (1, 0);
`

const rowColumns = `seq, row_id, kind, ts, prev_hash, row_hash, payload`

// insertChunks are the multi-row INSERT statements prepared, largest first.
var insertChunks = []int{64, 16, 4, 1}

// chunk returns the largest prepared statement size not above n.
func chunk(n int) int {
	for _, c := range insertChunks {
		if c <= n {
			return c
		}
	}
	return 1
}

// Defaults for the Options.
const (
	DefaultMaxBatch    = 512
	DefaultBusyTimeout = 30 * time.Second // no Emit waits on it: only Open, reads and the applier
)

type options struct {
	maxBatch    int
	busyTimeout time.Duration
	checkIndex  bool
}

// Option tunes Open.
type Option func(*options)

// WithMaxBatch bounds how many rows one append (one fdatasync) carries. At
// most two batches are in flight (one being synced, one filling); Emit
// waits, or gives up with its ctx, while the filling one is full.
func WithMaxBatch(n int) Option { return func(o *options) { o.maxBatch = max(n, 1) } }

// WithIndexCheck makes Open run SQLite's quick_check over the whole index
// (a cost that grows with it: for the daemon's start, not every `skill
// run`), so a damaged page anywhere is refused, not only in the rows Open
// reads.
func WithIndexCheck() Option { return func(o *options) { o.checkIndex = true } }

// WithBusyTimeout sets how long a statement waits for another process's
// lock on the file (e.g. a concurrent `audit verify`) before failing.
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// Store is the durable, hash-chained audit trail of a state dir. It is safe
// for concurrent use, and several processes may share one state dir.
//
// Two files hold it. <stateDir>/audit.jsonl, the journal, is the durable
// record: Emit returns once its row is appended there and fdatasynced;
// concurrent emitters share one append (group commit, see run). Rows are
// chained in the journal, under its lock, so the chain cannot fork.
// <stateDir>/audit.db (SQLite, WAL) is the index every read uses: an applier
// copies journal rows into it behind the writer, off the emitters' path,
// and every read first applies what the journal has beyond the index, so a
// read sees every row emitted before it. Verify checks both and that they
// agree.
type Store struct {
	path string
	opts options
	j    *journal

	db     *sql.DB           // readers
	wdb    *sql.DB           // the writer's single connection
	wconn  *sql.Conn         // pinned, so BEGIN/COMMIT and the statements share it
	insert map[int]*sql.Stmt // rows per INSERT statement (insertChunks) → statement
	head   *sql.Stmt

	// The applier. applyMu serialises apply (it owns wconn); written is the
	// journal end after this process's last durable append; pending holds
	// the rows of recent appends so the applier need not parse them back.
	applyMu     sync.Mutex
	appliedHint int64 // journal bytes known applied (applyMu)
	appliedHead head  // the index's head after this process's last apply (applyMu)
	anchorAt    time.Time
	written     atomic.Int64
	pendMu      sync.Mutex
	pending     []appended
	pendRows    int
	kick        chan struct{} // cap 1: wakes the idle applier
	kicked      atomic.Bool   // a kick was sent since the applier last started applying
	applyStop   chan struct{}
	applyDone   chan struct{}

	// The writer (see add and run). pmu guards cur, the batch being filled,
	// and shut; ready (cap 1) tells the syncer cur got its first row.
	pmu         sync.Mutex
	cur         *batch
	shut        bool
	ready       chan struct{}
	stop        chan struct{} // closed by Close: the syncer commits what is left and exits
	done        chan struct{} // closed by the syncer on exit
	waitingRoom atomic.Int32  // emitters waiting for room in a full batch
	lazyHold    time.Duration // see Enqueue
	resumeWait  time.Duration // see letEmittersRun

	// The syncer's own: the chain head after this writer's last append and
	// the journal end it left (while the journal still ends there, no other
	// process appended and the head need not be read back), row ids, the
	// hash state for chaining, and the last batch's line buffer for reuse.
	tipEnd      int64
	tip         head
	entropy     *ulid.MonotonicEntropy
	digest      hash.Hash
	spare       []byte
	lastSize    int         // slots in the last batch: the next one's initial capacity
	resumeTimer *time.Timer // bounds letEmittersRun's wait

	commits atomic.Int64 // durable appends (tests prove group commit with it)

	// beforeCommit, when set (tests only), runs for each batch with the
	// journal locked, just before the append; an error aborts the batch.
	beforeCommit func() error
	// beforeResume, when set (tests only), runs in Emit once the row's
	// batch is durable, before Emit counts itself as resumed.
	beforeResume func()
}

// appended is one durable append of this process: journal bytes
// [start, end) hold rows.
type appended struct {
	start, end int64
	rows       []Row
}

// maxPendingRows bounds the rows kept for the applier; past it the oldest
// appends are dropped and the applier reads them back from the journal.
const maxPendingRows = 1 << 14

// Open opens (creating if needed) the store in stateDir: the directory is
// created 0700, the files 0600. Rows the journal holds beyond the index are
// applied, and the chain's tail is verified, so a store whose last rows were
// altered, whose index and journal disagree, or that is not a database at
// all is refused. Every error wraps ErrUnavailable: the caller must not
// dispatch skills without a store.
func Open(stateDir string, opts ...Option) (*Store, error) {
	o := options{maxBatch: DefaultMaxBatch, busyTimeout: DefaultBusyTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	// A fresh store opened by many processes at once (parallel `skill run`)
	// can see SQLITE_BUSY while one of them switches it to WAL, which the
	// busy handler does not cover: retry that until the busy timeout.
	deadline := time.Now().Add(o.busyTimeout)
	for {
		s, err := open(stateDir, o)
		if err == nil {
			return s, nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			if errors.Is(err, ErrNeedsRepair) {
				return nil, err
			}
			if isCorrupt(err) {
				dir, _ := filepath.Abs(stateDir)
				return nil, fmt.Errorf("%w: %w; %s", ErrNeedsRepair, err, repairHint(dir))
			}
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		time.Sleep(time.Duration(5+mrand.IntN(20)) * time.Millisecond)
	}
}

func open(stateDir string, o options) (_ *Store, err error) {
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// Create the file ourselves so it is 0600 from the start (SQLite would
	// use 0644); its -wal and -shm files take the same mode.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f.Close()

	s := &Store{
		path:        path,
		opts:        o,
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		ready:       make(chan struct{}, 1),
		lazyHold:    lazyHold,
		resumeWait:  resumeWait,
		resumeTimer: stoppedTimer(),
		kick:        make(chan struct{}, 1),
		applyStop:   make(chan struct{}),
		applyDone:   make(chan struct{}),
		entropy:     ulid.Monotonic(rand.Reader, 0),
		digest:      sha256.New(),
	}
	defer func() {
		if err != nil {
			s.closeDB()
		}
	}()
	jpath := filepath.Join(dir, JournalName)
	if _, lerr := os.Lstat(jpath); os.IsNotExist(lerr) {
		// Created here: if this Open is refused because the index holds
		// rows the (missing) journal should have, remove it again while
		// nothing was written to it, so the state dir stays as it was. (Any
		// other process is refused the same way; after another failure, such
		// as a busy retry, a concurrent Open may be using the new file.)
		defer func() {
			if fi, serr := os.Stat(jpath); errors.Is(err, ErrNeedsRepair) && serr == nil && fi.Size() == 0 {
				_ = os.Remove(jpath)
			}
		}()
	}
	if s.j, err = openJournal(jpath); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}

	uri := (&url.URL{Scheme: "file", Path: path}).String()
	// synchronous=NORMAL: the index need not be durable commit by commit,
	// the journal is; what a crash takes from the index is applied again.
	// temp_store=MEMORY: the statement journal of a multi-row INSERT stays
	// in memory instead of a temporary file.
	params := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(0)&_pragma=temp_store(MEMORY)",
		o.busyTimeout.Milliseconds())
	// The writer first: it sets WAL mode (persistent in the file) and
	// creates the schema before any reader looks.
	// wal_autocheckpoint: see checkpointPages.
	if s.wdb, err = sql.Open("sqlite", uri+"?"+params+fmt.Sprintf("&_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(%d)&_txlock=immediate", checkpointPages)); err != nil {
		return nil, err
	}
	s.wdb.SetMaxOpenConns(1)
	ctx := context.Background()
	if s.wconn, err = s.wdb.Conn(ctx); err != nil {
		return nil, err
	}
	if err := s.initSchema(ctx); err != nil {
		return nil, err
	}
	if o.checkIndex {
		var check string
		if err := s.wconn.QueryRowContext(ctx, `PRAGMA quick_check(1)`).Scan(&check); err != nil {
			return nil, fmt.Errorf("%s: quick_check: %w", s.path, err)
		}
		if check != "ok" {
			return nil, fmt.Errorf("%w: %s is damaged (quick_check: %s); %s", ErrNeedsRepair, s.path, check, repairHint(dir))
		}
	}
	if s.db, err = sql.Open("sqlite", uri+"?"+params+"&_pragma=query_only(1)"); err != nil {
		return nil, err
	}
	s.db.SetMaxOpenConns(4)
	s.insert = map[int]*sql.Stmt{}
	for _, n := range insertChunks {
		values := strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?), `, n), `, `)
		if s.insert[n], err = s.wconn.PrepareContext(ctx,
			`INSERT INTO audit_rows (`+rowColumns+`) VALUES `+values); err != nil {
			return nil, fmt.Errorf("prepare insert: %w", err)
		}
	}
	if s.head, err = s.wconn.PrepareContext(ctx, headQuery); err != nil {
		return nil, fmt.Errorf("prepare head: %w", err)
	}
	if err := s.openJournalTail(ctx); err != nil {
		return nil, err
	}
	if err := s.checkTail(ctx); err != nil {
		return nil, err
	}
	go s.run()
	go s.applier()
	return s, nil
}

func (s *Store) initSchema(ctx context.Context) error {
	var mode string
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("%s: journal_mode is %q, want wal", s.path, mode)
	}
	var syncMode int
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncMode); err != nil || syncMode != 1 {
		return fmt.Errorf("%s: synchronous is %d (%v), want NORMAL (1)", s.path, syncMode, err)
	}
	var version int
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if version > schemaVersion {
		return fmt.Errorf("%s: schema version %d is newer than this build's %d", s.path, version, schemaVersion)
	}
	// Always a write transaction, even on an existing store: a store that
	// cannot take a write fails here, at Open, not at the first Emit.
	tx, err := s.wconn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", s.path, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("%s: create schema: %w", s.path, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit schema: %w", s.path, err)
	}
	return nil
}

// checkTail verifies the last two rows: the last row's hash recomputes and
// it links to the one before (or to GenesisHash when it is seq 1). A full
// check is Verify's job; this one is cheap enough for every Open.
func (s *Store) checkTail(ctx context.Context) error {
	rows, err := s.query(ctx, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq DESC LIMIT 2`)
	if err != nil {
		return fmt.Errorf("%s: read tail: %w", s.path, err)
	}
	if len(rows) == 0 {
		return nil
	}
	last := rows[0]
	var prev *Row
	if len(rows) == 2 {
		prev = &rows[1]
	} else if last.Seq != 1 {
		return fmt.Errorf("%s: corrupt: only row has seq %d", s.path, last.Seq)
	}
	if reasons, _ := rowProblems(prev, last); len(reasons) > 0 {
		return fmt.Errorf("%s: corrupt chain tail at seq %d (row %s): %s", s.path, last.Seq, last.RowID, strings.Join(reasons, "; "))
	}
	return nil
}

// openJournalTail, with the journal locked (no process appends meanwhile):
// cuts a torn tail, zeroes what a crash left past the end, applies every
// row the index lacks, and checks that the journal's last row is the
// index's last row; otherwise new rows would chain from a different head
// than the index's. An empty journal continues the index (a store from
// before the journal).
func (s *Store) openJournalTail(ctx context.Context) error {
	if err := flock(s.j.w, lockExclusive); err != nil {
		return fmt.Errorf("%s: lock journal: %w", s.j.path, err)
	}
	defer flock(s.j.w, lockNone)
	end, size, last, err := s.j.tail()
	if err == nil {
		err = s.j.clearAfter(end, size)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.j.path, err)
	}
	if err := s.checkJournalLength(ctx, end, last); err != nil {
		return err
	}
	s.j.reserve(end, size)
	if err := s.apply(ctx, end); err != nil {
		return fmt.Errorf("%s: %w", s.j.path, err)
	}
	if last == nil {
		h, err := s.headOf(nil)
		if err != nil {
			return fmt.Errorf("%s: %w", s.path, err)
		}
		if err := s.checkAnchor(ctx, h.seq); err != nil {
			return err
		}
		s.startAt(h, end)
		return nil
	}
	j, err := decodeRow(last)
	if err != nil {
		return fmt.Errorf("%s: corrupt last line: %w", s.j.path, err)
	}
	heads, err := s.query(ctx, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq DESC LIMIT 1`)
	if err != nil {
		return fmt.Errorf("%s: read tail: %w", s.path, err)
	}
	if len(heads) == 0 {
		return fmt.Errorf("%s: the journal ends at seq %d, the index is empty", s.j.path, j.Seq)
	}
	if diff := rowDiff(heads[0], j); diff != "" {
		return fmt.Errorf("%s: the journal ends at seq %d, the index at seq %d (row %s): they disagree (%s)", s.j.path, j.Seq, heads[0].Seq, heads[0].RowID, diff)
	}
	if err := s.checkAnchor(ctx, j.Seq); err != nil {
		return err
	}
	s.startAt(head{j.Seq, j.RowHash}, end)
	return nil
}

// checkJournalLength refuses a journal shorter than what the index says it
// applied from it (deleted, or its tail cut): a new row would start a chain
// from nothing, or from an older head, while the index holds later rows.
func (s *Store) checkJournalLength(ctx context.Context, end int64, last []byte) error {
	var applied int64
	if err := s.wconn.QueryRowContext(ctx, `SELECT applied FROM journal_state`).Scan(&applied); err != nil {
		return fmt.Errorf("%s: read applied offset: %w", s.path, err)
	}
	if end >= applied {
		return nil
	}
	var seq int64
	if err := s.wconn.QueryRowContext(ctx, headQuery).Scan(&seq, new(string)); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: read chain head: %w", s.path, err)
	}
	what := fmt.Sprintf("the journal %s is missing or empty", s.j.path)
	if last != nil {
		what = fmt.Sprintf("the journal %s is %d bytes long", s.j.path, end)
		if r, err := decodeRow(last); err == nil {
			what = fmt.Sprintf("the journal ends at seq %d (%s, %d bytes)", r.Seq, s.j.path, end)
		}
	}
	dir := filepath.Dir(s.path)
	return fmt.Errorf("%w: %s, but the index %s holds rows up to seq %d, applied from %d journal bytes: refusing to write rows that would not continue that chain; %s",
		ErrNeedsRepair, what, s.path, seq, applied, repairHint(dir))
}

// checkAnchor refuses a chain (every row applied to the index) that ends
// before the anchor or does not hold its row.
func (s *Store) checkAnchor(ctx context.Context, lastSeq int64) error {
	dir := filepath.Dir(s.path)
	err := checkAnchor(dir, lastSeq, func(seq int64) (string, error) {
		var h string
		err := s.wconn.QueryRowContext(ctx, `SELECT row_hash FROM audit_rows WHERE seq = ?`, seq).Scan(&h)
		return h, err
	})
	if errors.Is(err, ErrNeedsRepair) {
		return fmt.Errorf("%w; %s", err, repairHint(dir))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", AnchorName, err)
	}
	return nil
}

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
func (s *Store) Emit(ctx context.Context, d Draft) (Row, error) {
	b, i, err := s.add(ctx, d, true)
	if err != nil {
		return Row{}, err
	}
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
func (s *Store) Enqueue(ctx context.Context, d Draft) (wait func() (Row, error), err error) {
	b, i, err := s.add(ctx, d, false)
	if err != nil {
		return nil, err
	}
	return func() (Row, error) { return b.result(i) }, nil
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
// it takes the next one (letEmittersRun).

// slot is an emitted row waiting in a batch: what Emit could prepare.
type slot struct {
	kind    Kind
	payload []byte
	prefix  [sha256StateLen]byte // SHA-256 state after appendHashPrefix
}

// sha256StateLen is the size of a marshalled crypto/sha256 state.
const sha256StateLen = 108

// batch is the rows of one append.
type batch struct {
	slots []slot
	rows  []Row         // the stored rows, set by commit before done closes
	taken chan struct{} // closed when the syncer takes the batch
	done  chan struct{} // closed when the append is durable, or failed (err)
	err   error         // the append's failure, set before done closes

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
func (b *batch) result(i int) (Row, error) {
	<-b.done
	if b.err != nil {
		return Row{}, b.err
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
func prepare(d Draft) (slot, error) {
	payload, err := d.canonical()
	if err != nil {
		return slot{}, err
	}
	sl := slot{kind: d.Kind, payload: payload}
	ph := prefixHashers.Get().(*prefixHasher)
	defer prefixHashers.Put(ph)
	ph.text = appendHashPrefix(ph.text[:0], d.Kind, payload)
	ph.h.Reset()
	ph.h.Write(ph.text)
	ph.state, err = ph.h.(encoding.BinaryAppender).AppendBinary(ph.state[:0])
	if n := copy(sl.prefix[:], ph.state); err != nil || n != sha256StateLen {
		return slot{}, fmt.Errorf("%w: sha256 state: %d bytes, %v", ErrUnavailable, n, err)
	}
	return sl, nil
}

// lazyHold bounds how long a batch of only enqueued rows waits for an
// emitted one (see Enqueue); Store.lazyHold is this unless a test set it.
const lazyHold = time.Millisecond

// add prepares d's slot and adds it to the batch being filled; it returns
// that batch and the slot's index in it. urgent: the caller waits for the
// row (Emit), so the batch goes as soon as the syncer is free.
func (s *Store) add(ctx context.Context, d Draft, urgent bool) (*batch, int, error) {
	sl, err := prepare(d)
	if err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
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
			return nil, 0, ctx.Err()
		}
		s.waitingRoom.Add(-1)
		s.pmu.Lock()
	}
	if s.shut {
		s.pmu.Unlock()
		return nil, 0, ErrClosed
	}
	b, i := s.cur, len(s.cur.slots)
	b.slots = append(b.slots, sl)
	wake := i == 0 || urgent && !b.urgent
	if i == 0 {
		b.since = time.Now()
	}
	b.urgent = b.urgent || urgent
	if urgent {
		b.waiters++
	}
	s.pmu.Unlock()
	if wake {
		select {
		case s.ready <- struct{}{}:
		default:
		}
	}
	return b, i, nil
}

// run is the syncer: it commits each batch and wakes its emitters. After
// Close it commits what was added before and exits.
func (s *Store) run() {
	defer close(s.done)
	for {
		b := s.take()
		if b == nil {
			return
		}
		if err := s.commit(b); err != nil {
			b.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		close(b.done)
		s.letEmittersRun(b)
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
// anything they do next; resumeWait bounds it. A Gosched would not do: on
// two Ps the other P runs the syncer at once, and at 100 emitters half of
// them always missed the next append (two alternating batches of about 50).
// With one it yields instead: there is nothing to gather, and waiting would
// cost the wakeup of another P (p95 +8% at 1 emitter).
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

// take returns the batch being filled once it has rows and starts the next
// one; nil once the store is shut and nothing is left.
func (s *Store) take() *batch {
	next := newBatch(s.lastSize) // allocated outside the lock emitters wait on
	s.pmu.Lock()
	for {
		n := len(s.cur.slots)
		if n == 0 && s.shut {
			s.pmu.Unlock()
			return nil
		}
		var hold *time.Timer
		if n > 0 {
			left := s.lazyHold - time.Since(s.cur.since)
			if s.cur.urgent || s.shut || n >= s.opts.maxBatch || left <= 0 {
				break
			}
			hold = time.NewTimer(left) // only enqueued rows: wait a little for an emitted one
		}
		s.pmu.Unlock()
		if hold == nil {
			select {
			case <-s.ready:
			case <-s.stop:
			}
		} else {
			select {
			case <-s.ready:
			case <-s.stop:
			case <-hold.C:
			}
			hold.Stop()
		}
		s.pmu.Lock()
	}
	b := s.cur
	s.cur = next
	s.pmu.Unlock()
	close(b.taken)
	s.lastSize = len(b.slots)
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
	if err := flock(s.j.w, lockExclusive); err != nil {
		return fmt.Errorf("lock journal: %w", err)
	}
	defer flock(s.j.w, lockNone)
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
	rows, buf, err := s.chain(b.slots, h, s.spare[:0])
	s.spare = buf
	if err != nil {
		return err
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
	b.rows = rows
	return nil
}

// chain makes the rows of slots, continuing h, and their journal lines
// (appended to buf). It is the only place rows get seq, row_id, ts,
// prev_hash and row_hash. The rows of one batch are committed together and
// share its ts; their row ids are monotonic. It runs between two
// fdatasyncs, so it allocates one string per row (row_id and row_hash
// share it) and nothing else per row.
func (s *Store) chain(slots []slot, h head, buf []byte) ([]Row, []byte, error) {
	rows := make([]Row, len(slots))
	var text [256]byte
	var sum [sha256.Size]byte
	var id ulid.ULID
	var idHash [ulid.EncodedSize + 2*sha256.Size]byte // row_id, then row_hash, as text
	now := time.Now().UTC()
	ms, ts := ulid.Timestamp(now), now.Format(TimeFormat)
	for i := range slots {
		sl := &slots[i]
		seq := h.seq + 1
		if seq > maxJSONInt {
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
		s.digest.Write(appendHashSuffix(text[:0], h.hash, idHash[:ulid.EncodedSize], seq, ts))
		hex.Encode(idHash[ulid.EncodedSize:], s.digest.Sum(sum[:0]))
		both := string(idHash[:])
		row := Row{Seq: seq, RowID: both[:ulid.EncodedSize], Kind: sl.kind, TS: ts, PrevHash: h.hash, RowHash: both[ulid.EncodedSize:], Payload: sl.payload}
		rows[i] = row
		buf = appendJournalLine(buf, row)
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
		r, err := decodeRow(last)
		if err != nil {
			return head{}, fmt.Errorf("journal's last line: %w", err)
		}
		return head{r.Seq, r.RowHash}, nil
	}
	h := head{0, GenesisHash}
	if err := s.db.QueryRowContext(context.Background(), headQuery).Scan(&h.seq, &h.hash); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return head{}, fmt.Errorf("read chain head: %w", err)
	}
	return h, nil
}

const headQuery = `SELECT seq, row_hash FROM audit_rows ORDER BY seq DESC LIMIT 1`

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
// and on two cores it competes with them for CPU (about 20 µs of SQLite per
// row here), so the applier runs when appends pause for applyIdle, and
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
			if advanceAnchor(filepath.Dir(s.path), h) == nil {
				s.anchorAt = time.Now()
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
	seq, prev := int64(0), GenesisHash
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
func (s *Store) journalRows(from, upTo int64) ([]Row, int64, error) {
	s.pendMu.Lock()
	pend := slices.Clone(s.pending)
	s.pendMu.Unlock()
	var rows []Row
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
			r, err := decodeRow(bytes.TrimSuffix(line, []byte("\n")))
			if err != nil {
				return nil, 0, fmt.Errorf("journal line at offset %d: %w", cur, err)
			}
			rows = append(rows, r)
			cur += int64(len(line))
		}
	}
	return rows, cur, nil
}

// checkpointPages is the index WAL's auto-checkpoint threshold (SQLite's
// default). The checkpoint runs inside an apply, off the emitters' path.
const checkpointPages = 1000

// Close stops taking rows, writes every row already queued, and closes the
// database. Emit after Close fails with ErrClosed.
func (s *Store) Close() error {
	s.pmu.Lock()
	if s.shut {
		s.pmu.Unlock()
		return nil
	}
	s.shut = true
	s.pmu.Unlock()
	close(s.stop)
	<-s.done
	close(s.applyStop)
	<-s.applyDone
	s.anchorHead()
	return s.closeDB()
}

// anchorHead records the journal's head as the anchor (best effort: a
// full disk must not fail Close; the next Close or apply tries again).
func (s *Store) anchorHead() {
	if err := flock(s.j.w, lockExclusive); err != nil {
		return
	}
	h, _, _, err := s.readHead()
	_ = flock(s.j.w, lockNone)
	if err == nil {
		_ = advanceAnchor(filepath.Dir(s.path), h)
	}
}

func (s *Store) closeDB() error {
	var errs []error
	for _, st := range s.insert {
		errs = append(errs, st.Close())
	}
	if s.head != nil {
		errs = append(errs, s.head.Close())
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	for _, db := range []*sql.DB{s.db, s.wdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if s.j != nil {
		errs = append(errs, s.j.close())
	}
	return errors.Join(errs...)
}

// Filter selects rows for Rows and Each. Zero fields select everything.
type Filter struct {
	InvocationID string
	Kind         Kind
	AfterSeq     int64 // rows with seq > AfterSeq
	Limit        int   // at most this many rows; 0 = no limit
}

// Rows returns the rows matching f in seq order. A filtered result is not a
// contiguous chain: Verify needs every row (the zero Filter).
func (s *Store) Rows(ctx context.Context, f Filter) ([]Row, error) {
	var out []Row
	err := s.Each(ctx, f, func(r Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// Each calls fn for every row matching f in seq order, reading from one
// snapshot, without holding all rows in memory. An error from fn stops the
// walk and is returned as is.
func (s *Store) Each(ctx context.Context, f Filter, fn func(Row) error) error {
	var where []string
	var args []any
	if f.InvocationID != "" {
		where = append(where, `invocation_id = ?`)
		args = append(args, f.InvocationID)
	}
	if f.Kind != "" {
		where = append(where, `kind = ?`)
		args = append(args, string(f.Kind))
	}
	if f.AfterSeq > 0 {
		where = append(where, `seq > ?`)
		args = append(args, f.AfterSeq)
	}
	q := `SELECT ` + rowColumns + ` FROM audit_rows`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	return s.each(ctx, s.db, q, args, fn)
}

// Unterminated returns every skill.invoked_started row that has no
// skill.invoked_completed for the same invocation_id, in seq order: the
// invocations running now, or lost by a supervisor that died (close those
// with outcome "lost").
func (s *Store) Unterminated(ctx context.Context) ([]Row, error) {
	q := `SELECT ` + rowColumns + ` FROM audit_rows s
		WHERE s.kind = ? AND NOT EXISTS (
			SELECT 1 FROM audit_rows c WHERE c.invocation_id = s.invocation_id AND c.kind = ?)
		ORDER BY s.seq`
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	var out []Row
	err := s.each(ctx, s.db, q, []any{string(KindInvokedStarted), string(KindInvokedCompleted)}, func(r Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// Verify checks the whole store (see the package function Verify), reading
// one snapshot of the index, and checks that the journal holds the same
// rows, byte for byte: a row altered in either file is named. (Index rows
// older than the journal's first row come from a store made before the
// journal existed and have no journal line to compare.) The error is for a
// store that cannot be read; what is wrong with the rows is in the Report.
func (s *Store) Verify(ctx context.Context) (Report, error) {
	if err := s.catchUp(ctx); err != nil {
		return Report{}, err
	}
	end, err := s.j.durableEnd()
	if err != nil {
		return Report{}, fmt.Errorf("%w: journal: %w", ErrUnavailable, err)
	}
	sc := bufio.NewScanner(io.NewSectionReader(s.j.r, 0, end))
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	line := 0
	next := func() (Row, error, bool) {
		if !sc.Scan() {
			return Row{}, nil, false
		}
		line++
		r, err := decodeRow(sc.Bytes())
		return r, err, true
	}
	first, firstErr, haveJournal := next()
	pending := haveJournal // first holds the journal line not yet compared
	v := NewVerifier()
	err = s.each(ctx, s.db, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq`, nil, func(r Row) error {
		v.Add(r)
		if !haveJournal || (pending && firstErr == nil && r.Seq < first.Seq) {
			return nil // older than the journal
		}
		var j Row
		var jerr error
		if pending {
			j, jerr, pending = first, firstErr, false
		} else {
			var ok bool
			if j, jerr, ok = next(); !ok {
				v.problem(r, "missing from the journal (it ends before this row)")
				return nil
			}
		}
		switch {
		case jerr != nil:
			v.problem(r, fmt.Sprintf("journal line %d: %v", line, jerr))
		default:
			if diff := rowDiff(r, j); diff != "" {
				v.problem(r, fmt.Sprintf("journal line %d differs from the index: %s", line, diff))
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	if err := sc.Err(); err != nil {
		return Report{}, fmt.Errorf("%w: read journal: %w", ErrUnavailable, err)
	}
	return v.Report(), nil
}

// rowDiff names the first field in which two copies of a row differ.
func rowDiff(a, b Row) string {
	switch {
	case a.Seq != b.Seq:
		return fmt.Sprintf("seq %d vs %d", a.Seq, b.Seq)
	case a.RowID != b.RowID:
		return "row_id"
	case a.Kind != b.Kind:
		return "kind"
	case a.TS != b.TS:
		return "ts"
	case a.PrevHash != b.PrevHash:
		return "prev_hash"
	case a.RowHash != b.RowHash:
		return "row_hash"
	case !bytes.Equal(a.Payload, b.Payload):
		return "payload"
	}
	return ""
}

// query reads rows through the writer's connection (used by Open).
func (s *Store) query(ctx context.Context, q string, args ...any) ([]Row, error) {
	var out []Row
	err := s.each(ctx, s.wconn, q, args, func(r Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) each(ctx context.Context, qr querier, q string, args []any, fn func(Row) error) error {
	rs, err := qr.QueryContext(ctx, q, args...)
	if err != nil {
		return readErr(ctx, err)
	}
	defer rs.Close()
	for rs.Next() {
		var r Row
		var kind string
		var payload []byte
		if err := rs.Scan(&r.Seq, &r.RowID, &kind, &r.TS, &r.PrevHash, &r.RowHash, &payload); err != nil {
			return readErr(ctx, err)
		}
		r.Kind, r.Payload = Kind(kind), payload
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return readErr(ctx, err)
	}
	return nil
}

// readErr wraps a read failure in ErrUnavailable unless it is the caller's
// own context ending.
func readErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: read: %w", ErrUnavailable, err)
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (5) or SQLITE_LOCKED (6).
func isBusy(err error) bool {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		c := coder.Code() & 0xff
		return c == 5 || c == 6
	}
	return false
}
