package auditstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/internal/testutil"
)

func TestEmitRowsRoundTrip(t *testing.T) {
	s := openStore(t, t.TempDir())
	drafts := append(invocation("inv-a"), invocation("inv-b")...)
	before := time.Now().UTC()
	emitted := emitAll(t, s, drafts...)
	got := allRows(t, s)
	if !slices.EqualFunc(got, emitted, rowsEqual) {
		t.Fatalf("Rows differ from what Emit returned:\n%v\n%v", got, emitted)
	}
	prev := audit.GenesisHash
	for i, r := range got {
		if r.Seq != int64(i+1) || r.Kind != drafts[i].Kind || string(r.Payload) != string(drafts[i].Payload) {
			t.Fatalf("row %d: %+v", i, r)
		}
		if r.PrevHash != prev {
			t.Fatalf("row %d prev_hash %s, want %s", i, r.PrevHash, prev)
		}
		if h, _ := r.ComputeHash(); h != r.RowHash {
			t.Fatalf("row %d hash does not recompute", i)
		}
		if _, err := ulid.ParseStrict(r.RowID); err != nil {
			t.Fatalf("row_id %q: %v", r.RowID, err)
		}
		ts, err := time.Parse(audit.TimeFormat, r.TS)
		if err != nil || ts.Before(before.Add(-time.Second)) || len(r.TS) != len(audit.TimeFormat) {
			t.Fatalf("ts %q: %v", r.TS, err)
		}
		if i > 0 && (r.RowID <= got[i-1].RowID || r.TS < got[i-1].TS) {
			t.Fatalf("row_id/ts not increasing with seq at %d", i)
		}
		prev = r.RowHash
	}

	ctx := context.Background()
	for _, tc := range []struct {
		f    Filter
		seqs []int64
	}{
		{Filter{InvocationID: "inv-b"}, []int64{7, 8, 9, 10, 11, 12}},
		{Filter{Kind: audit.KindToolDenied}, []int64{4, 10}},
		{Filter{InvocationID: "inv-a", Kind: audit.KindInvokedCompleted}, []int64{6}},
		{Filter{AfterSeq: 9}, []int64{10, 11, 12}},
		{Filter{AfterSeq: 2, Limit: 3}, []int64{3, 4, 5}},
		{Filter{InvocationID: "nope"}, nil},
	} {
		rows, err := s.Rows(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, r := range rows {
			seqs = append(seqs, r.Seq)
		}
		if !slices.Equal(seqs, tc.seqs) {
			t.Errorf("Rows(%+v) seqs %v, want %v", tc.f, seqs, tc.seqs)
		}
	}
}

func rowsEqual(a, b audit.Row) bool {
	return a.Seq == b.Seq && a.RowID == b.RowID && a.Kind == b.Kind && a.TS == b.TS &&
		a.PrevHash == b.PrevHash && a.RowHash == b.RowHash && string(a.Payload) == string(b.Payload)
}

func TestChainVerifies(t *testing.T) {
	s := openStore(t, t.TempDir())
	emitAll(t, s, invocation("inv-a")...)
	emitAll(t, s, audit.InvokedStarted(common("inv-b"), "1", "p", "", map[string]any{}))
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Rows != 7 || len(rep.Problems) != 0 || !slices.Equal(rep.InFlight, []string{"inv-b"}) || rep.LastSeq != 7 {
		t.Fatalf("report %+v", rep)
	}
}

func TestOpenCreatesPrivateWALStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	s := openStore(t, dir)
	emitAll(t, s, invocation("inv")...)
	db := filepath.Join(dir, FileName)
	jn := filepath.Join(dir, JournalName)
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, db: 0o600, db + "-wal": 0o600, db + "-shm": 0o600, jn: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode %v, want %v", path, fi.Mode(), want)
		}
	}
	ctx := context.Background()
	var mode string
	var sync int
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v)", mode, err)
	}
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 1 {
		t.Errorf("synchronous %d (%v), want 1 (NORMAL: the journal is what is fsynced)", sync, err)
	}
	// The invocation index is used for per-invocation reads.
	var plan string
	rows, err := s.db.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT seq FROM audit_rows WHERE invocation_id = ? ORDER BY seq`, "inv")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, parent, notused int
		var detail string
		rows.Scan(&id, &parent, &notused, &detail)
		plan += detail + ";"
	}
	rows.Close()
	if !strings.Contains(plan, "audit_rows_invocation") {
		t.Errorf("query plan %q does not use the invocation index", plan)
	}
}

func TestStateDirWithURIMetacharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?x=1#frag%20&mode=ro")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	emitAll(t, s, invocation("inv")...)
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	if rows := allRows(t, s); len(rows) != 6 {
		t.Fatalf("%d rows after reopen", len(rows))
	}
}

// TestConcurrentEmitGroupCommit: 100 emitters × 10 rows → 1000 rows with
// seq 1..1000, one chain, and fewer commits than rows: concurrent emitters
// share commits instead of each waiting for its own fsync.
func TestConcurrentEmitGroupCommit(t *testing.T) {
	s := openStore(t, t.TempDir())
	const emitters, each = 100, 10
	seqs := make(chan int64, emitters*each)
	var wg sync.WaitGroup
	for e := range emitters {
		wg.Go(func() {
			c := common(fmt.Sprintf("inv-%03d", e))
			for i := range each {
				r, err := s.Emit(context.Background(), audit.ToolCallStarted(c, fmt.Sprint(i), "Read", zeroHash(i)))
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- r.Seq
			}
		})
	}
	wg.Wait()
	close(seqs)
	var got []int64
	for q := range seqs {
		got = append(got, q)
	}
	slices.Sort(got)
	for i, q := range got {
		if q != int64(i+1) {
			t.Fatalf("returned seqs not 1..%d: %v…", emitters*each, got[:min(len(got), i+3)])
		}
	}
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Rows != emitters*each {
		t.Fatalf("report: rows %d ok %v problems %v", rep.Rows, rep.OK, rep.Problems[:min(3, len(rep.Problems))])
	}
	commits := s.commits.Load()
	t.Logf("%d rows in %d commits", rep.Rows, commits)
	if commits >= emitters*each {
		t.Fatalf("%d commits for %d rows: no group commit", commits, emitters*each)
	}
}

// TestBatchesAreBounded: with the writer held, queued rows are taken at
// most maxBatch per transaction.
func TestBatchesAreBounded(t *testing.T) {
	s := openStore(t, t.TempDir(), WithMaxBatch(4))
	emitBehindHeldBatch(t, s, 20, func(release func()) { release() })
	if c := s.commits.Load(); c != 6 {
		t.Fatalf("%d commits, want 1 + 20/4 = 6", c)
	}
}

// emitBehindHeldBatch emits one row and holds the writer inside that
// row's batch; emits n more (all queued behind it), calls then with a
// release func for the writer, and returns once every emit succeeded.
func emitBehindHeldBatch(t *testing.T, s *Store, n int, then func(release func())) {
	t.Helper()
	hold, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.beforeCommit = func() error { once.Do(func() { close(entered); <-hold }); return nil }
	var wg sync.WaitGroup
	emit := func(i int) {
		wg.Go(func() {
			if _, err := s.Emit(context.Background(), audit.NoConnect(common(fmt.Sprint(i)), 1)); err != nil {
				t.Error(err)
			}
		})
	}
	emit(0)
	<-entered // the writer holds a one-row batch
	for i := range n {
		emit(i + 1)
	}
	waitQueued(t, s, n)
	then(func() { close(hold) })
	wg.Wait()
}

// waitQueued waits until n rows wait for the writer: in the batch being
// filled, or waiting for room in it.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	waiting := func() int {
		s.pmu.Lock()
		defer s.pmu.Unlock()
		return len(s.cur.slots) + int(s.waitingRoom.Load())
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return waiting() >= n })
}

func TestDurableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	emitted := emitAll(t, s, append(invocation("inv-a"), invocation("inv-b")...)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir)
	if got := allRows(t, s); !slices.EqualFunc(got, emitted, rowsEqual) {
		t.Fatalf("after reopen: %d rows, want %d", len(got), len(emitted))
	}
	// The chain continues from the stored head.
	next := emitAll(t, s, audit.NoConnect(common("inv-c"), 60000))[0]
	if next.Seq != 13 || next.PrevHash != emitted[11].RowHash {
		t.Fatalf("next row %+v does not continue the chain", next)
	}
	if rep, err := s.Verify(context.Background()); err != nil || !rep.OK {
		t.Fatalf("%+v %v", rep, err)
	}
}

func TestInvalidDraftRejected(t *testing.T) {
	s := openStore(t, t.TempDir())
	for _, d := range []audit.Draft{
		audit.InvokedCompleted(common("i"), "exploded", 1, "", ""),
		{Kind: audit.KindNoConnect, Payload: json.RawMessage(`{"waited_ms":1}`)},
		{Kind: "skill.other", Payload: audit.NoConnect(common("i"), 1).Payload},
	} {
		if _, err := s.Emit(context.Background(), d); !errors.Is(err, audit.ErrInvalidRow) || errors.Is(err, ErrUnavailable) {
			t.Errorf("Emit(%s) = %v, want ErrInvalidRow", d.Kind, err)
		}
	}
	if rows := allRows(t, s); len(rows) != 0 {
		t.Fatalf("%d rows written", len(rows))
	}
}

func TestEmitContextCanceled(t *testing.T) {
	// maxBatch 1: one row in the commit, one in the batch being filled,
	// the rest stay queued.
	s := openStore(t, t.TempDir(), WithMaxBatch(1))
	// Already canceled: nothing queued.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Emit(ctx, audit.NoConnect(common("early"), 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Emit = %v, want context.Canceled", err)
	}

	// Canceled while queued behind a commit in progress and a full batch:
	// returns ctx.Err() and the row is never written.
	hold, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.beforeCommit = func() error {
		once.Do(func() { close(entered); <-hold })
		return nil
	}
	emitted := make(chan error, 2)
	emit := func(inv string) {
		go func() {
			_, err := s.Emit(context.Background(), audit.NoConnect(common(inv), 1))
			emitted <- err
		}()
	}
	emit("first")
	<-entered
	emit("second")
	waitQueued(t, s, 1)
	ctx, cancel = context.WithCancel(context.Background())
	queuedErr := make(chan error, 1)
	go func() {
		_, err := s.Emit(ctx, audit.NoConnect(common("canceled"), 1))
		queuedErr <- err
	}()
	waitQueued(t, s, 2)
	cancel()
	if err := <-queuedErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Emit = %v, want context.Canceled", err)
	}
	close(hold)
	for range 2 {
		if err := <-emitted; err != nil {
			t.Fatal(err)
		}
	}
	after := emitAll(t, s, audit.NoConnect(common("after"), 1))[0]
	rows := allRows(t, s)
	if len(rows) != 3 || after.Seq != 3 {
		t.Fatalf("rows %v: the canceled row was written", rows)
	}
	for _, r := range rows {
		if strings.Contains(string(r.Payload), `"canceled"`) {
			t.Fatal("canceled row written")
		}
	}
}

// TestEmitContextCanceledAfterTaken: once the writer has the row, Emit waits
// for the commit whatever ctx does, so success always means durable.
func TestEmitContextCanceledAfterTaken(t *testing.T) {
	s := openStore(t, t.TempDir())
	hold, entered := make(chan struct{}), make(chan struct{})
	s.beforeCommit = func() error { close(entered); <-hold; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Emit(ctx, audit.NoConnect(common("taken"), 1))
		done <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Emit returned %v before its commit finished", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatalf("Emit = %v, want the commit's result (nil)", err)
	}
	if rows := allRows(t, s); len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
}

// TestFailedCommitDoesNotAdvanceChain: every emitter of a failed batch gets
// ErrUnavailable, nothing of the batch is stored, and the next batch chains
// from the last durable row.
func TestFailedCommitDoesNotAdvanceChain(t *testing.T) {
	s := openStore(t, t.TempDir())
	good := emitAll(t, s, invocation("inv-a")[:2]...)
	fail := true
	s.beforeCommit = func() error {
		if fail {
			fail = false
			return errors.New("injected: disk on fire")
		}
		return nil
	}
	if _, err := s.Emit(context.Background(), audit.NoConnect(common("lost"), 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Emit = %v, want ErrUnavailable", err)
	}
	next := emitAll(t, s, audit.NoConnect(common("next"), 1))[0]
	if next.Seq != 3 || next.PrevHash != good[1].RowHash {
		t.Fatalf("next row seq %d prev %s: chain advanced past a failed commit", next.Seq, next.PrevHash)
	}
	if rep, _ := s.Verify(context.Background()); !rep.OK || rep.Rows != 3 {
		t.Fatalf("%+v", rep)
	}
}

func TestCloseDrainsQueueAndRefusesAfter(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	emitBehindHeldBatch(t, s, 9, func(release func()) {
		go func() { closed <- s.Close() }()
		// Release the batch once Close has begun to shut the writer down.
		testutil.WaitFor(t, 10*time.Second, func() bool {
			s.pmu.Lock()
			defer s.pmu.Unlock()
			return s.shut
		})
		release()
	})
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if c := s.commits.Load(); c != 2 {
		t.Fatalf("%d commits, want 2 (the held one, then the queue)", c)
	}
	if _, err := s.Emit(context.Background(), audit.NoConnect(common("late"), 1)); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Emit after Close = %v, want ErrClosed (an ErrUnavailable)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestUnterminated(t *testing.T) {
	s := openStore(t, t.TempDir())
	start := func(inv string) audit.Draft {
		return audit.InvokedStarted(common(inv), "1", "p", zeroHash(1), map[string]any{})
	}
	emitAll(t, s, start("a"), start("b"), start("c"),
		audit.InvokedCompleted(common("b"), audit.OutcomeSuccess, 1, zeroHash(2), ""),
		audit.ToolCallStarted(common("c"), "1", "Read", ""), start("d"),
		audit.InvokedCompleted(common("d"), audit.OutcomeLost, 0, "", "supervisor restarted"))
	rows, err := s.Unterminated(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows {
		var p audit.Common
		json.Unmarshal(r.Payload, &p)
		ids = append(ids, p.InvocationID)
		if r.Kind != audit.KindInvokedStarted {
			t.Errorf("row %d is %s", r.Seq, r.Kind)
		}
	}
	if !slices.Equal(ids, []string{"a", "c"}) {
		t.Fatalf("unterminated %v, want [a c]", ids)
	}
	if rep, _ := s.Verify(context.Background()); !slices.Equal(rep.InFlight, ids) {
		t.Fatalf("Verify in-flight %v, want %v", rep.InFlight, ids)
	}
}

// TestTamperedPayloadInDatabase: one byte of a stored payload changed with
// SQL (the triggers dropped, as anyone with the file can) → Verify names
// that row and only that row.
func TestTamperedPayloadInDatabase(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := emitAll(t, s, append(invocation("inv-a"), invocation("inv-b")...)...)
	s.Close()

	// The triggers refuse edits through SQL.
	db0 := rawDB(t, dir, false)
	if _, err := db0.Exec(`UPDATE audit_rows SET ts = ts WHERE seq = 1`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("UPDATE through the triggers: %v", err)
	}
	if _, err := db0.Exec(`DELETE FROM audit_rows WHERE seq = 1`); err == nil {
		t.Fatal("DELETE through the triggers succeeded")
	}
	db0.Close()

	const victim = 5 // skill.timeout of inv-a: "SIGTERM" → "SIGTERN"
	db := rawDB(t, dir, true)
	res, err := db.Exec(`UPDATE audit_rows SET payload = replace(payload, 'SIGTERM', 'SIGTERN') WHERE seq = ?`, victim)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("tamper: %v (%d rows)", err, n)
	}
	db.Close()

	s = openStore(t, dir) // the tail is intact, so Open succeeds
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(rep.Problems) == 0 {
		t.Fatal("tampered payload not detected")
	}
	for _, p := range rep.Problems {
		if p.Seq != victim || p.RowID != rows[victim-1].RowID {
			t.Errorf("problem names seq %d (%s): %s; want only seq %d", p.Seq, p.RowID, p.Reason, victim)
		}
	}
	t.Logf("%+v", rep.Problems)
}

// TestDeletedMiddleRowDetected: removing a row leaves a gap and a broken
// link at the next row.
func TestDeletedMiddleRowDetected(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := emitAll(t, s, invocation("inv-a")...)
	s.Close()
	db := rawDB(t, dir, true)
	if _, err := db.Exec(`DELETE FROM audit_rows WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s = openStore(t, dir)
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reasons := problemsFor(rep, 4, rows[3].RowID)
	if rep.OK || len(reasons) < 2 || !strings.Contains(strings.Join(reasons, ";"), "seq 4 follows seq 2") {
		t.Fatalf("deletion not reported at seq 4: %+v", rep.Problems)
	}
}

// TestTamperedTailRefusedAtOpen: Open checks the last row, so a store whose
// newest row was altered is refused (ErrUnavailable) before anything is
// appended to it.
func TestTamperedTailRefusedAtOpen(t *testing.T) {
	for name, q := range map[string]string{
		"payload":   `UPDATE audit_rows SET payload = replace(payload, '60000', '60001') WHERE seq = (SELECT max(seq) FROM audit_rows)`,
		"prev_hash": `UPDATE audit_rows SET prev_hash = (CASE WHEN substr(prev_hash, 1, 1) = '0' THEN '1' ELSE '0' END) || substr(prev_hash, 2) WHERE seq = (SELECT max(seq) FROM audit_rows)`,
		"delete":    `DELETE FROM audit_rows WHERE seq = (SELECT max(seq) - 1 FROM audit_rows)`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			emitAll(t, s, invocation("inv-a")...)
			s.Close()
			db := rawDB(t, dir, true)
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
			db.Close()
			if s, err := Open(dir); !errors.Is(err, ErrUnavailable) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open = %v, want ErrUnavailable", err)
			} else {
				t.Log(err)
			}
		})
	}
}

func TestStateDirUnusable(t *testing.T) {
	t.Run("state dir is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o600)
		if _, err := Open(f); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
	})
	t.Run("audit.db is a directory", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, FileName), 0o700)
		if _, err := Open(dir); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
	})
	t.Run("not a database", func(t *testing.T) {
		dir := t.TempDir()
		garbage := []byte(strings.Repeat("this is not an sqlite file ", 400))
		os.WriteFile(filepath.Join(dir, FileName), garbage, 0o600)
		if _, err := Open(dir); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, FileName)); string(b) != string(garbage) {
			t.Fatal("Open modified the file it refused")
		}
	})
	t.Run("corrupt pages", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		emitAll(t, s, invocation("inv")...)
		s.Close()
		path := filepath.Join(dir, FileName)
		b, _ := os.ReadFile(path)
		for i := 100; i < len(b); i++ { // keep the header, wreck every page
			b[i] ^= 0x5a
		}
		os.WriteFile(path, b, 0o600)
		if s, err := Open(dir); !errors.Is(err, ErrUnavailable) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
	})
	t.Run("read-only dir (non-root)", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores directory permissions; TestStateDirOnReadOnlyMount covers root")
		}
		dir := t.TempDir()
		os.Chmod(dir, 0o500)
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
		if _, err := Open(dir); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
	})
	t.Run("existing store made read-only (non-root)", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores file permissions; TestStateDirOnReadOnlyMount covers root")
		}
		dir := t.TempDir()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		rows := emitAll(t, s, invocation("inv")...)
		s.Close()
		os.Chmod(filepath.Join(dir, FileName), 0o400)
		os.Chmod(dir, 0o500)
		if s, err := Open(dir); !errors.Is(err, ErrUnavailable) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("Open = %v, want ErrUnavailable", err)
		}
		os.Chmod(dir, 0o700)
		os.Chmod(filepath.Join(dir, FileName), 0o600)
		s = openStore(t, dir)
		if got := allRows(t, s); !slices.EqualFunc(got, rows, rowsEqual) {
			t.Fatal("rows changed")
		}
	})
}

// TestAcknowledgedRowsSurviveKill: a process killed with SIGKILL while
// emitting (no Close, no deferred anything) leaves every row whose Emit had
// returned, and a chain that verifies. Re-runs this test binary as the
// emitting process.
func TestAcknowledgedRowsSurviveKill(t *testing.T) {
	if dir := os.Getenv("AUDIT_TEST_EMITTER_DIR"); dir != "" {
		s, err := Open(dir)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(1)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for e := range 8 {
			wg.Go(func() {
				for i := 0; ; i++ {
					r, err := s.Emit(context.Background(), audit.ToolCallStarted(common(fmt.Sprint(e)), fmt.Sprint(i), "Read", ""))
					if err != nil {
						fmt.Println("emit:", err)
						os.Exit(1)
					}
					mu.Lock()
					fmt.Printf("%d %s\n", r.Seq, r.RowHash)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcknowledgedRowsSurviveKill$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AUDIT_TEST_EMITTER_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]string{}
	sc := bufio.NewScanner(out)
	for len(acked) < 500 && sc.Scan() {
		var seq int64
		var hash string
		if _, err := fmt.Sscanf(sc.Text(), "%d %s", &seq, &hash); err != nil {
			cmd.Process.Kill()
			t.Fatalf("emitter said %q", sc.Text())
		}
		acked[seq] = hash
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(acked) < 500 {
		t.Fatalf("emitter stopped after %d rows", len(acked))
	}
	s := openStore(t, dir)
	stored := map[int64]string{}
	for _, r := range allRows(t, s) {
		stored[r.Seq] = r.RowHash
	}
	for seq, hash := range acked {
		if stored[seq] != hash {
			t.Fatalf("acknowledged row %d missing or different after the kill", seq)
		}
	}
	rep, err := s.Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("%+v %v", rep.Problems, err)
	}
	t.Logf("%d rows acknowledged before the kill, %d stored", len(acked), rep.Rows)
}

// TestWALIsCheckpointed: the index is checkpointed as rows are applied, so the WAL
// stays bounded and rows reach the database file while the store is open.
func TestWALIsCheckpointed(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	const n, emitters = 12000, 20
	var wg sync.WaitGroup
	for w := range emitters {
		wg.Go(func() {
			for i := w; i < n; i += emitters {
				if _, err := s.Emit(context.Background(), audit.ToolCallStarted(common("inv"), fmt.Sprint(i), "Read", zeroHash(i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A read applies whatever the applier has not yet.
	if rows := allRows(t, s); len(rows) != n {
		t.Fatalf("%d rows", len(rows))
	}
	db, _ := os.Stat(filepath.Join(dir, FileName))
	wal, _ := os.Stat(filepath.Join(dir, FileName+"-wal"))
	t.Logf("db %d bytes, wal %d bytes", db.Size(), wal.Size())
	if db.Size() < 100<<10 {
		t.Errorf("database file is %d bytes after %d rows: never checkpointed", db.Size(), n)
	}
	if max := int64(2*checkpointPages) * (4096 + 24); wal.Size() > max {
		t.Errorf("WAL is %d bytes, want at most %d", wal.Size(), max)
	}
}

// TestEnqueueKeepsQueueOrder: a row queued with Enqueue is written before
// any row emitted after Enqueue returned, so when the later row is durable
// the earlier one is too (the broker's one-fsync-per-call pipelining).
func TestEnqueueKeepsQueueOrder(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	for i := range 50 {
		c := common(fmt.Sprintf("inv-%d", i))
		wait, err := s.Enqueue(ctx, audit.ToolCallCompleted(c, "call", "Read", audit.OutcomeSuccess, 1, "", ""))
		if err != nil {
			t.Fatal(err)
		}
		next, err := s.Emit(ctx, audit.ToolCallStarted(c, "call2", "Read", ""))
		if err != nil {
			t.Fatal(err)
		}
		first, err := wait()
		if err != nil {
			t.Fatal(err)
		}
		if first.Seq >= next.Seq {
			t.Fatalf("queued row seq %d is not before the later row's %d", first.Seq, next.Seq)
		}
	}
}

// TestEnqueuedRowSharesTheNextEmit: a batch holding only enqueued rows
// waits for an emitted row, and both go out in one append (one fdatasync).
func TestEnqueuedRowSharesTheNextEmit(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.lazyHold = time.Minute // only the Emit may release the batch
	ctx := context.Background()
	wait, err := s.Enqueue(ctx, audit.NoConnect(common("enqueued"), 1))
	if err != nil {
		t.Fatal(err)
	}
	emitted, err := s.Emit(ctx, audit.NoConnect(common("emitted"), 1))
	if err != nil {
		t.Fatal(err)
	}
	enqueued, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if enqueued.Seq != 1 || emitted.Seq != 2 {
		t.Fatalf("seqs %d, %d: want the enqueued row first", enqueued.Seq, emitted.Seq)
	}
	if c := s.commits.Load(); c != 1 {
		t.Fatalf("%d appends for the two rows, want 1", c)
	}
}

// TestEnqueueNotifyReportsTheOutcome: EnqueueNotify's callback is called
// once per row, with nil only after the row is durable (a later Emit's
// row follows it), and with the append's failure when it failed; an
// enqueue refused at once never calls it.
func TestEnqueueNotifyReportsTheOutcome(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.lazyHold = time.Minute // only the Emit may release the batch
	ctx := context.Background()
	var fail atomic.Bool
	s.beforeCommit = func() error {
		if fail.Load() {
			return errors.New("injected: input/output error")
		}
		return nil
	}
	outcomes := make(chan error, 4)
	notify := func(err error) { outcomes <- err }
	if err := s.EnqueueNotify(ctx, audit.NoConnect(common("notified"), 1), notify); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-outcomes:
		t.Fatalf("told %v before the row's append", err)
	default:
	}
	emitted, err := s.Emit(ctx, audit.NoConnect(common("emitted"), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-outcomes; err != nil {
		t.Fatalf("durable row reported %v", err)
	}
	if emitted.Seq != 2 {
		t.Fatalf("emitted row seq %d: the notified row was not written before it", emitted.Seq)
	}
	rows, err := s.Rows(ctx, Filter{InvocationID: "notified"})
	if err != nil || len(rows) != 1 || rows[0].Seq != 1 {
		t.Fatalf("notified row: %+v %v", rows, err)
	}

	fail.Store(true)
	if err := s.EnqueueNotify(ctx, audit.NoConnect(common("lost"), 1), notify); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Emit(ctx, audit.NoConnect(common("lost-too"), 1)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("emit into a failing append: %v", err)
	}
	if err := <-outcomes; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("failed append reported %v, want ErrUnavailable", err)
	}

	if err := s.EnqueueNotify(ctx, audit.Draft{Kind: "not.a.kind"}, notify); !errors.Is(err, audit.ErrInvalidRow) {
		t.Fatalf("invalid row: %v, want ErrInvalidRow", err)
	}
	fail.Store(false)
	if _, err := s.Emit(ctx, audit.NoConnect(common("after"), 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-outcomes:
		t.Fatalf("a refused enqueue was told %v", err)
	default:
	}
}

// TestEnqueuedRowAloneIsWritten: with no Emit after it, an enqueued row is
// still made durable once the hold passes, and Close writes a held batch
// at once.
func TestEnqueuedRowAloneIsWritten(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.lazyHold = 50 * time.Millisecond
	wait, err := s.Enqueue(context.Background(), audit.NoConnect(common("alone"), 1))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("an enqueued row alone took %v to be written", d)
	}

	s.lazyHold = time.Hour
	wait, err = s.Enqueue(context.Background(), audit.NoConnect(common("at-close"), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := wait(); err != nil || r.Seq != 2 {
		t.Fatalf("row held at Close: %+v %v", r, err)
	}
}

// TestSyncerLetsWokenEmittersRun: after an append with two or more Emit
// callers, the syncer takes the next batch only once every one of them has
// run again (so that those that emit again at once share it), and no later
// than resumeWait if one of them does not get to run.
func TestSyncerLetsWokenEmittersRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resumeWait time.Duration
		released   bool // whether the next batch may go before the late emitter runs
	}{
		{"waits for every emitter", time.Hour, false},
		{"bounded by resumeWait", 20 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			s.resumeWait = tc.resumeWait
			ctx := context.Background()

			// Batch 0 (one enqueued row) holds the writer while the two
			// emitters of batch A queue behind it; batch A, once taken,
			// holds it while a third emitter, X, queues behind A.
			hold, entered := make(chan struct{}), make(chan struct{})
			inA, goA := make(chan struct{}), make(chan struct{})
			var commitsSeen atomic.Int32
			s.beforeCommit = func() error {
				switch commitsSeen.Add(1) {
				case 1:
					close(entered)
					<-hold
				case 2:
					close(inA)
					<-goA
				}
				return nil
			}
			// The first emitter of A to run again stops before counting
			// itself, until late is closed.
			late := make(chan struct{})
			var first atomic.Bool
			s.beforeResume = func() {
				if first.CompareAndSwap(false, true) {
					<-late
				}
			}
			lateOnce := sync.OnceFunc(func() { close(late) })
			defer lateOnce()

			wait0, err := s.Enqueue(ctx, audit.NoConnect(common("batch-0"), 1))
			if err != nil {
				t.Fatal(err)
			}
			<-entered
			var wg sync.WaitGroup
			for _, inv := range []string{"a-1", "a-2"} {
				wg.Go(func() {
					if _, err := s.Emit(ctx, audit.NoConnect(common(inv), 1)); err != nil {
						t.Error(err)
					}
				})
			}
			waitQueued(t, s, 2)
			close(hold)
			<-inA // batch A (both emitters) is being appended
			xDone := make(chan error, 1)
			go func() {
				_, err := s.Emit(ctx, audit.NoConnect(common("x"), 1))
				xDone <- err
			}()
			waitQueued(t, s, 1)
			close(goA)
			if _, err := wait0(); err != nil {
				t.Fatal(err)
			}

			if tc.released {
				// The late emitter is still stopped: resumeWait lets X go.
				select {
				case err := <-xDone:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("X's row not appended 10s after the batch before it, resumeWait %v", tc.resumeWait)
				}
			} else {
				select {
				case err := <-xDone:
					t.Fatalf("X's row was appended (err %v) while an emitter of the batch before had not run again", err)
				case <-time.After(200 * time.Millisecond):
				}
				if c := s.commits.Load(); c != 2 {
					t.Fatalf("%d appends while the syncer waits, want 2", c)
				}
				lateOnce()
				if err := <-xDone; err != nil {
					t.Fatal(err)
				}
			}
			lateOnce()
			wg.Wait()
			if c := s.commits.Load(); c != 3 {
				t.Fatalf("%d appends, want 3 (batch 0, A, X)", c)
			}
		})
	}
}

// TestFollowedRowNeverOutlivesItsLeader: a row emitted with
// EnqueueFollowed's then is written only if the row it follows was. Its
// leader's append fails; the follower, in the next append beside an
// unrelated row, fails with ErrUnavailable and is not written, while the
// unrelated row is; the chain verifies. When the leader is written, so is
// the follower.
func TestFollowedRowNeverOutlivesItsLeader(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	var fail atomic.Bool
	hold, entered := make(chan struct{}), make(chan struct{})
	var holdNext atomic.Bool
	s.beforeCommit = func() error {
		if fail.CompareAndSwap(true, false) {
			return errors.New("injected: no space left on device")
		}
		if holdNext.CompareAndSwap(true, false) {
			close(entered)
			<-hold
		}
		return nil
	}
	started := audit.ToolCallStarted(common("inv-f"), "call-1", "Read", zeroHash(1))
	completed := audit.ToolCallCompleted(common("inv-f"), "call-1", "Read", audit.OutcomeSuccess, 1, "", "")

	fail.Store(true)
	wait, then, err := s.EnqueueFollowed(ctx, started)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wait(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("leader: %v, want its append to fail", err)
	}
	// Hold the writer on a blocker's commit so that the follower and an
	// unrelated row share the next append.
	holdNext.Store(true)
	blocked := make(chan error, 1)
	go func() { _, err := s.Emit(ctx, audit.NoConnect(common("blocker"), 1)); blocked <- err }()
	<-entered
	followed, unrelated := make(chan error, 1), make(chan error, 1)
	go func() { _, err := then(ctx, completed); followed <- err }()
	go func() { _, err := s.Emit(ctx, audit.NoConnect(common("unrelated"), 1)); unrelated <- err }()
	waitQueued(t, s, 2)
	close(hold)
	if err := <-blocked; err != nil {
		t.Fatalf("blocker: %v", err)
	}
	if err := <-followed; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("follower of a failed row: %v, want ErrUnavailable", err)
	}
	if err := <-unrelated; err != nil {
		t.Fatalf("unrelated row in the follower's append: %v", err)
	}
	rows, err := s.Rows(ctx, Filter{InvocationID: "inv-f"})
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows of the failed call: %d (%v), want none", len(rows), err)
	}
	if rows, err := s.Rows(ctx, Filter{InvocationID: "unrelated"}); err != nil || len(rows) != 1 {
		t.Fatalf("unrelated rows: %d (%v), want 1", len(rows), err)
	}

	// A leader that is written takes its follower with it.
	wait, then, err = s.EnqueueFollowed(ctx, audit.ToolCallStarted(common("inv-g"), "call-2", "Read", zeroHash(2)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := then(ctx, audit.ToolCallCompleted(common("inv-g"), "call-2", "Read", audit.OutcomeSuccess, 1, "", "")); err != nil {
		t.Fatalf("follower of a written row: %v", err)
	}
	if _, err := wait(); err != nil {
		t.Fatalf("leader: %v", err)
	}
	if rows, err := s.Rows(ctx, Filter{InvocationID: "inv-g"}); err != nil || len(rows) != 2 || rows[0].Kind != audit.KindToolCallStarted {
		t.Fatalf("rows of the written call: %+v (%v)", rows, err)
	}
	if rep, err := s.Verify(ctx); err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// committer records, for each append, whether it ran on an emitter's own
// goroutine (commitInline) or on the syncer's.
func committer(s *Store) (inline, syncer *atomic.Int32) {
	inline, syncer = new(atomic.Int32), new(atomic.Int32)
	s.beforeCommit = func() error {
		buf := make([]byte, 16<<10)
		if bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("commitInline")) {
			inline.Add(1)
		} else {
			syncer.Add(1)
		}
		return nil
	}
	return inline, syncer
}

// TestLoneEmitCommitsInline: an Emit with nobody else committing appends
// its batch itself (no hand-off to the syncer and back), and a tool call's
// started row, enqueued, shares that append with the completed row.
func TestLoneEmitCommitsInline(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.lazyHold = time.Minute // only the Emit may release the enqueued row
	inline, syncer := committer(s)
	ctx := context.Background()
	c := common("lone")
	for i := range 20 {
		wait, then, err := s.EnqueueFollowed(ctx, audit.ToolCallStarted(c, fmt.Sprint(i), "Read", ""))
		if err != nil {
			t.Fatal(err)
		}
		done, err := then(ctx, audit.ToolCallCompleted(c, fmt.Sprint(i), "Read", audit.OutcomeSuccess, 1, "", ""))
		if err != nil {
			t.Fatal(err)
		}
		started, err := wait()
		if err != nil || started.Seq+1 != done.Seq {
			t.Fatalf("call %d: started %+v (%v), completed seq %d", i, started, err, done.Seq)
		}
	}
	if in, sy := inline.Load(), syncer.Load(); in != 20 || sy != 0 {
		t.Fatalf("20 lone calls: %d appends inline, %d by the syncer; want 20 and 0", in, sy)
	}
}

// TestInlineAndSyncerCommitsKeepOrder: emitters committing inline and the
// syncer committing batches of several, side by side (run with -race):
// every row once, in a verified chain, and each enqueued row before the
// row its caller emitted next. Which path an append takes is the
// scheduler's choice (under -race sixteen callers can keep the syncer busy
// for a whole round), so rounds run until both have, at most ten.
func TestInlineAndSyncerCommitsKeepOrder(t *testing.T) {
	s := openStore(t, t.TempDir())
	inline, syncer := committer(s)
	ctx := context.Background()
	const callers, each = 16, 40
	rounds := 0
	for ; rounds < 10 && (rounds == 0 || inline.Load() == 0 || syncer.Load() == 0); rounds++ {
		var wg sync.WaitGroup
		for k := range callers {
			wg.Go(func() {
				c := common(fmt.Sprintf("round-%d-caller-%02d", rounds, k))
				if _, err := s.Emit(ctx, audit.ToolCallStarted(c, "0", "Read", "")); err != nil {
					t.Error(err)
					return
				}
				for i := range each {
					wait, err := s.Enqueue(ctx, audit.ToolCallCompleted(c, fmt.Sprint(i), "Read", audit.OutcomeSuccess, 1, "", ""))
					if err != nil {
						t.Error(err)
						return
					}
					next, err := s.Emit(ctx, audit.ToolCallStarted(c, fmt.Sprint(i+1), "Read", ""))
					if err != nil {
						t.Error(err)
						return
					}
					if first, err := wait(); err != nil || first.Seq >= next.Seq {
						t.Errorf("%s call %d: enqueued row %d (%v) not before the next emitted %d", c.InvocationID, i, first.Seq, err, next.Seq)
						return
					}
				}
				if _, err := s.Emit(ctx, audit.ToolCallCompleted(c, fmt.Sprint(each), "Read", audit.OutcomeSuccess, 1, "", "")); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	rep, err := s.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := rounds * 2 * callers * (each + 1); !rep.OK || rep.Rows != want {
		t.Fatalf("report: rows %d (want %d) ok %v problems %v", rep.Rows, want, rep.OK, rep.Problems[:min(3, len(rep.Problems))])
	}
	t.Logf("%d rounds: %d appends inline, %d by the syncer", rounds, inline.Load(), syncer.Load())
	if inline.Load() == 0 || syncer.Load() == 0 {
		t.Fatalf("%d appends inline, %d by the syncer in %d rounds: both paths must have run", inline.Load(), syncer.Load(), rounds)
	}
}

// TestCloseWaitsForAnInlineCommit: Close, called while an emitter commits
// its own batch, returns only after that append, and the index it leaves
// holds the row.
func TestCloseWaitsForAnInlineCommit(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	entered, release := make(chan struct{}), make(chan struct{})
	s.beforeCommit = func() error {
		close(entered)
		<-release
		return nil
	}
	emitted := make(chan error, 1)
	go func() {
		_, err := s.Emit(context.Background(), audit.NoConnect(common("last"), 1))
		emitted <- err
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an append was in progress", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-emitted; err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, dir, false).QueryRow(`SELECT count(*) FROM audit_rows`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("index after Close: %d rows (%v), want 1", n, err)
	}
}

// TestUnterminatedReadsOnlyOpenInvocations: Unterminated (every skill run
// and daemon start) reads the rows open_invocations names, looked up by
// seq, and scans nothing of audit_rows: its cost follows the invocations
// open now, not every invocation the store holds.
func TestUnterminatedReadsOnlyOpenInvocations(t *testing.T) {
	dir := t.TempDir()
	openStore(t, dir).Close()
	rows, err := rawDB(t, dir, false).Query(`EXPLAIN QUERY PLAN ` + unterminatedQuery)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "\n")
	if strings.Contains(joined, "SCAN audit_rows") || !strings.Contains(joined, "SEARCH audit_rows USING INTEGER PRIMARY KEY") {
		t.Fatalf("plan of Unterminated:\n%s\nwant audit_rows searched by seq, never scanned", joined)
	}
}

// TestOpenInvocationsFollowTheRows: open_invocations holds exactly the
// started rows without a completed row of their invocation, whatever the
// order: a completed row written before its started row (a caller reusing
// an invocation id) leaves the invocation closed, as the query over all
// rows said.
func TestOpenInvocationsFollowTheRows(t *testing.T) {
	s := openStore(t, t.TempDir())
	start := func(inv string) audit.Draft {
		return audit.InvokedStarted(common(inv), "1", "p", zeroHash(1), map[string]any{})
	}
	done := func(inv string) audit.Draft {
		return audit.InvokedCompleted(common(inv), audit.OutcomeSuccess, 1, zeroHash(2), "")
	}
	emitAll(t, s, start("a"), done("early"), start("b"), done("a"), start("early"), start("c"))
	rows, err := s.Unterminated(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, r := range rows {
		seqs = append(seqs, r.Seq)
	}
	if !slices.Equal(seqs, []int64{3, 6}) {
		t.Fatalf("unterminated seqs %v, want [3 6] (b and c)", seqs)
	}
}

// TestOpenFillsOpenInvocations: a store of schema version 2 (no
// open_invocations) gets the table filled at Open from its rows, and
// version 3.
func TestOpenFillsOpenInvocations(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	start := func(inv string) audit.Draft {
		return audit.InvokedStarted(common(inv), "1", "p", zeroHash(1), map[string]any{})
	}
	emitAll(t, s, start("a"), start("b"), audit.InvokedCompleted(common("b"), audit.OutcomeSuccess, 1, zeroHash(2), ""), start("c"))
	s.Close()
	db := rawDB(t, dir, false)
	for _, q := range []string{`DROP TRIGGER audit_rows_opened`, `DROP TRIGGER audit_rows_closed`, `DROP TABLE open_invocations`, `PRAGMA user_version = 2`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s = openStore(t, dir)
	rows, err := s.Unterminated(context.Background())
	if err != nil || len(rows) != 2 || rows[0].Seq != 1 || rows[1].Seq != 4 {
		t.Fatalf("unterminated after the upgrade: %+v %v; want seqs 1 and 4", rows, err)
	}
	var version int
	if err := rawDB(t, dir, false).QueryRow(`PRAGMA user_version`).Scan(&version); err != nil || version != 3 {
		t.Fatalf("user_version %d (%v), want 3", version, err)
	}
}

// TestStoredRowHashIsComputeHash: the writer hashes in two halves (Emit the
// prefix, the syncer the suffix from the saved SHA-256 state); every row
// it stores must carry ComputeHash's hash, escapes and non-ASCII included.
func TestStoredRowHashIsComputeHash(t *testing.T) {
	s := openStore(t, t.TempDir())
	drafts := append(invocation("inv-α"), invocation(`inv "quoted" \ `)...)
	for _, r := range emitAll(t, s, drafts...) {
		want, err := r.ComputeHash()
		if err != nil || r.RowHash != want {
			t.Fatalf("row %d: stored hash %s, ComputeHash %s (%v)", r.Seq, r.RowHash, want, err)
		}
	}
}
