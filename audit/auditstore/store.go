// Package auditstore keeps the audit rows of package audit in a state dir:
// the Store appends each row to a journal and fdatasyncs it before Emit
// returns (concurrent emitters sharing one append), chains it there, and
// keeps a SQLite index every read uses, an anchor and signed checkpoints;
// Repair and RestoreTail mend a state dir. Reading and checking one without
// a Store (Reader, VerifyDir, Verify and the Verifier, the signing key
// files) is its internal package statedir, re-exported in statedir.go.
// This file holds the Store type: its options, Open and Close, and the
// index's schema.
package auditstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
	"cyberos.dev/internal/sqliteerr"
)

// schemaVersion is PRAGMA user_version of a store this code can write.
const schemaVersion = 3

// schema: one table of rows keyed by seq. payload is the canonical JSON text
// that was hashed, byte for byte. invocation_id is derived from it (never
// stored separately, so it cannot disagree with the hashed payload) and
// indexed for per-invocation reads; the json_valid guard keeps reads working
// on a store whose payload was damaged, so Verify can name the row. The
// triggers make the table append-only for anyone using SQL; they are not a
// security boundary (whoever can write the file can drop them), the hash
// chain is what detects tampering. open_invocations holds the seq of every
// started row without a completed row of its invocation, kept by triggers
// as rows are applied, so that Unterminated (every skill run and daemon
// start) reads the invocations open now, not every invocation's rows; like
// the rest of the index it is derived from the journal (Repair remakes it).
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
CREATE TABLE IF NOT EXISTS open_invocations (
	seq           INTEGER PRIMARY KEY,
	invocation_id ANY
) STRICT;
CREATE INDEX IF NOT EXISTS open_invocations_id ON open_invocations (invocation_id);
CREATE TRIGGER IF NOT EXISTS audit_rows_opened AFTER INSERT ON audit_rows
WHEN NEW.kind = 'skill.invoked_started'
BEGIN
	INSERT INTO open_invocations (seq, invocation_id) SELECT NEW.seq, NEW.invocation_id
	WHERE NOT EXISTS (SELECT 1 FROM audit_rows c WHERE c.invocation_id = NEW.invocation_id AND c.kind = 'skill.invoked_completed');
END;
CREATE TRIGGER IF NOT EXISTS audit_rows_closed AFTER INSERT ON audit_rows
WHEN NEW.kind = 'skill.invoked_completed'
BEGIN
	DELETE FROM open_invocations WHERE invocation_id = NEW.invocation_id;
END;
`

// openInvocationsFill fills open_invocations on a store made before it
// (schema version 2): the started rows without a completed row of the same
// invocation, found once by reading every invocation's rows.
const openInvocationsFill = `INSERT OR IGNORE INTO open_invocations (seq, invocation_id)
	SELECT s.seq, s.invocation_id FROM audit_rows s
	WHERE s.kind = 'skill.invoked_started' AND NOT EXISTS (
		SELECT 1 FROM audit_rows c WHERE c.invocation_id = s.invocation_id AND c.kind = 'skill.invoked_completed')`

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
	signer      *audit.Signer
	sink        Sink
}

// Sink records a signed head somewhere the state dir's owner cannot rewrite
// (syslog, journald, a fleet store). It must not block for long: the
// applier calls it.
type Sink func(audit.Checkpoint)

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

// WithSigner makes the store sign the chain head (audit/checkpoint.go): a
// checkpoint row and a signed anchor every anchorEvery while rows flow, and
// at Close.
func WithSigner(s *audit.Signer) Option { return func(o *options) { o.signer = s } }

// WithSink sends every signed head to sink as well (it needs WithSigner).
func WithSink(sink Sink) Option { return func(o *options) { o.sink = sink } }

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
	resv *reservations // space held for running invocations' terminal rows (reserve.go)

	db     *sql.DB           // readers
	wdb    *sql.DB           // the writer's single connection
	wconn  *sql.Conn         // pinned, so BEGIN/COMMIT and the statements share it
	insert map[int]*sql.Stmt // rows per INSERT statement (insertChunks) → statement
	head   *sql.Stmt

	// damage is why the store takes no new invocation (startcheck.go).
	damage atomic.Pointer[error]
	// started is what the start-up check verified.
	started StartCheck

	writerState  // the journal writer's (writer.go)
	applierState // the index applier's (applier.go)
}

// Open opens (creating if needed) the store in stateDir: the directory is
// created 0700, the files 0600. Rows the journal holds beyond the index are
// applied, and the chain's tail is verified, so a store whose last rows were
// altered, whose index and journal disagree, or that is not a database at
// all is refused. Then every row after the last checkpoint's head is
// verified in both copies, with that checkpoint (checkSinceCheckpoint): a
// store found damaged opens, but refuses new invocations (Damage). Every error wraps ErrUnavailable: the caller must not
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
		if !sqliteerr.IsBusy(err) || time.Now().After(deadline) {
			if errors.Is(err, ErrNeedsRepair) {
				return nil, err
			}
			if statedir.IsCorrupt(err) {
				dir, _ := filepath.Abs(stateDir)
				return nil, fmt.Errorf("%w: %w; %s", ErrNeedsRepair, err, statedir.RepairHint(dir))
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
		path: path,
		opts: o,
		writerState: writerState{
			stop:        make(chan struct{}),
			done:        make(chan struct{}),
			ready:       make(chan struct{}, 1),
			lazyHold:    lazyHold,
			resumeWait:  resumeWait,
			resumeTimer: stoppedTimer(),
			hold:        stoppedTimer(),
			entropy:     ulid.Monotonic(rand.Reader, 0),
			digest:      sha256.New(),
		},
		applierState: applierState{
			kick:      make(chan struct{}, 1),
			applyStop: make(chan struct{}),
			applyDone: make(chan struct{}),
		},
	}
	defer func() {
		if err != nil {
			_ = s.closeDB() // the error that stopped Open is the one to report
		}
	}()
	jpath := filepath.Join(dir, JournalName)
	if _, lerr := os.Lstat(jpath); errors.Is(lerr, os.ErrNotExist) {
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
			return nil, fmt.Errorf("%w: %s is damaged (quick_check: %s); %s", ErrNeedsRepair, s.path, check, statedir.RepairHint(dir))
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
			`INSERT INTO audit_rows (`+statedir.RowColumns+`) VALUES `+values); err != nil {
			return nil, fmt.Errorf("prepare insert: %w", err)
		}
	}
	if s.head, err = s.wconn.PrepareContext(ctx, statedir.HeadQuery); err != nil {
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
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncMode); err != nil {
		return fmt.Errorf("%s: synchronous: %w, want NORMAL (1)", s.path, err)
	} else if syncMode != 1 {
		return fmt.Errorf("%s: synchronous is %d, want NORMAL (1)", s.path, syncMode)
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
	if version < 3 {
		if _, err := tx.ExecContext(ctx, openInvocationsFill); err != nil {
			return fmt.Errorf("%s: fill open_invocations: %w", s.path, err)
		}
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
	rows, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows ORDER BY seq DESC LIMIT 2`)
	if err != nil {
		return fmt.Errorf("%s: read tail: %w", s.path, err)
	}
	if len(rows) == 0 {
		return nil
	}
	last := rows[0]
	var prev *audit.Row
	if len(rows) == 2 {
		prev = &rows[1]
	} else if last.Seq != 1 {
		return fmt.Errorf("%s: corrupt: only row has seq %d", s.path, last.Seq)
	}
	if reasons, _ := audit.RowProblems(prev, last); len(reasons) > 0 {
		return fmt.Errorf("%s: corrupt chain tail at seq %d (row %s): %s", s.path, last.Seq, last.RowID, strings.Join(reasons, "; "))
	}
	return nil
}

// openJournalTail, with the journal locked (no process appends meanwhile):
// cuts a torn tail, zeroes what a crash left past the end (reading all of
// it only at the first Open after a boot), applies every row the index
// lacks, and checks that the journal's last row is the index's last row;
// otherwise new rows would chain from a different head than the index's.
// An empty journal continues the index (a store from before the journal).
func (s *Store) openJournalTail(ctx context.Context) error {
	if err := statedir.Flock(s.j.w, statedir.LockExclusive); err != nil {
		return fmt.Errorf("%s: lock journal: %w", s.j.path, err)
	}
	defer statedir.Unlock(s.j.w)
	end, size, last, err := s.j.tail()
	// The whole tail is read once per boot and journal file (tailmark.go).
	dir := filepath.Dir(s.j.path)
	mark := tailMark(s.j.w)
	full := !tailChecked(dir, mark)
	if err == nil {
		err = s.j.clearAfter(end, size, full)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.j.path, err)
	}
	if err := s.checkJournalLength(ctx, end, last); err != nil {
		return err
	}
	if s.resv, err = openReservations(dir); err != nil {
		return err
	}
	if full {
		markTailChecked(dir, mark)
	}
	if _, err := s.resv.recount(); err != nil {
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
		if err := s.checkAtStart(ctx, end); err != nil {
			return err
		}
		s.startAt(h, end)
		return nil
	}
	j, err := audit.DecodeRow(last)
	if err != nil {
		return fmt.Errorf("%s: corrupt last line: %w", s.j.path, err)
	}
	heads, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows ORDER BY seq DESC LIMIT 1`)
	if err != nil {
		return fmt.Errorf("%s: read tail: %w", s.path, err)
	}
	if len(heads) == 0 {
		return fmt.Errorf("%s: the journal ends at seq %d, the index is empty", s.j.path, j.Seq)
	}
	if diff := RowDiff(heads[0], j); diff != "" {
		return fmt.Errorf("%s: the journal ends at seq %d, the index at seq %d (row %s): they disagree (%s)", s.j.path, j.Seq, heads[0].Seq, heads[0].RowID, diff)
	}
	if err := s.checkAnchor(ctx, j.Seq); err != nil {
		return err
	}
	if err := s.checkAtStart(ctx, end); err != nil {
		return err
	}
	s.startAt(head{j.Seq, j.RowHash}, end)
	return nil
}

// checkAtStart runs the start-up check (checkSinceCheckpoint): damage it
// finds makes the store refuse new invocations (Damage); a failure to read
// fails Open.
func (s *Store) checkAtStart(ctx context.Context, end int64) error {
	sc, err := s.checkSinceCheckpoint(ctx, end)
	if err != nil {
		return fmt.Errorf("start-up check: %w", err)
	}
	s.started = sc
	if len(sc.Problems) > 0 {
		s.setDamage(damageError(filepath.Dir(s.path), "the start-up check", sc.Problems))
		return nil
	}
	if sc.Rows > 0 {
		markVerified(filepath.Dir(s.path), sc.Head)
	}
	return nil
}

// StartCheck is what Open's start-up check verified and found.
func (s *Store) StartCheck() StartCheck { return s.started }

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
	if err := s.wconn.QueryRowContext(ctx, statedir.HeadQuery).Scan(&seq, new(string)); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: read chain head: %w", s.path, err)
	}
	what := fmt.Sprintf("the journal %s is missing or empty", s.j.path)
	if last != nil {
		what = fmt.Sprintf("the journal %s is %d bytes long", s.j.path, end)
		if r, err := audit.DecodeRow(last); err == nil {
			what = fmt.Sprintf("the journal ends at seq %d (%s, %d bytes)", r.Seq, s.j.path, end)
		}
	}
	dir := filepath.Dir(s.path)
	return fmt.Errorf("%w: %s, but the index %s holds rows up to seq %d, applied from %d journal bytes: refusing to write rows that would not continue that chain; %s",
		ErrNeedsRepair, what, s.path, seq, applied, statedir.RepairHint(dir))
}

// checkAnchor refuses a chain (every row applied to the index) that ends
// before the anchor or does not hold its row.
func (s *Store) checkAnchor(ctx context.Context, lastSeq int64) error {
	dir := filepath.Dir(s.path)
	err := statedir.CheckAnchor(dir, lastSeq, func(seq int64) (string, error) {
		var h string
		err := s.wconn.QueryRowContext(ctx, `SELECT row_hash FROM audit_rows WHERE seq = ?`, seq).Scan(&h)
		return h, err
	})
	if errors.Is(err, ErrNeedsRepair) {
		return fmt.Errorf("%w; %s", err, statedir.RepairHint(dir))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", AnchorName, err)
	}
	return nil
}

// checkpointPages is the index WAL's auto-checkpoint threshold (SQLite's
// default). The checkpoint runs inside an apply, off the emitters' path.
const checkpointPages = 1000

// Close stops taking rows, writes every row already queued, and closes the
// database. Emit after Close fails with ErrClosed.
func (s *Store) Close() error {
	s.pmu.Lock()
	if s.shut || s.closing {
		s.pmu.Unlock()
		return nil
	}
	s.closing = true
	s.pmu.Unlock()
	s.checkpointAtClose()
	s.pmu.Lock()
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
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if err := statedir.Flock(s.j.w, statedir.LockExclusive); err != nil {
		return
	}
	h, _, _, err := s.readHead()
	statedir.Unlock(s.j.w)
	if err == nil && statedir.AdvanceAnchor(filepath.Dir(s.path), h.seq, h.hash, s.opts.signer) == nil {
		s.toSink(h)
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
	errs = append(errs, s.resv.close())
	return errors.Join(errs...)
}
