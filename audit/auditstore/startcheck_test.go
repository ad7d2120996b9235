package auditstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// journalFileLines returns dir's journal as its lines (without newlines)
// and what follows the last one (preallocated zeros).
func journalFileLines(t testing.TB, dir string) (lines [][]byte, rest []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	for l := range bytes.SplitSeq(b[:end], []byte("\n")) {
		if len(l) > 0 {
			lines = append(lines, l)
		}
	}
	return lines, b[end:]
}

func writeJournalLines(t testing.TB, dir string, lines [][]byte, rest []byte) {
	t.Helper()
	out := append(bytes.Join(lines, []byte("\n")), '\n')
	if err := os.WriteFile(filepath.Join(dir, JournalName), append(out, rest...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// damages are the tamper table of issue 36, each applied to the row at
// journal line index v (0-based) of a closed store.
var damages = []struct {
	name string
	do   func(t *testing.T, dir string, v int)
}{
	{"journal byte flipped", func(t *testing.T, dir string, v int) {
		lines, rest := journalFileLines(t, dir)
		i := bytes.Index(lines[v], []byte(`"ts":"`)) + len(`"ts":"`) + 3
		lines[v][i] ^= 0x01
		writeJournalLines(t, dir, lines, rest)
	}},
	{"journal row_hash digit", func(t *testing.T, dir string, v int) {
		lines, rest := journalFileLines(t, dir)
		i := bytes.Index(lines[v], []byte(`"row_hash":"`)) + len(`"row_hash":"`)
		lines[v][i] = map[bool]byte{true: '1', false: '0'}[lines[v][i] == '0']
		writeJournalLines(t, dir, lines, rest)
	}},
	{"journal rows swapped", func(t *testing.T, dir string, v int) {
		lines, rest := journalFileLines(t, dir)
		lines[v], lines[v+1] = lines[v+1], lines[v]
		writeJournalLines(t, dir, lines, rest)
	}},
	{"journal row deleted", func(t *testing.T, dir string, v int) {
		lines, rest := journalFileLines(t, dir)
		n := len(lines[v]) + 1
		lines = append(lines[:v], lines[v+1:]...)
		// The same length as before, so the check of the journal's length
		// against the index's applied offset passes.
		writeJournalLines(t, dir, lines, append(make([]byte, n), rest...))
	}},
	{"index payload edited", func(t *testing.T, dir string, v int) {
		db := rawDB(t, dir, true)
		res, err := db.Exec(`UPDATE audit_rows SET payload = replace(payload, '"skill_id":"', '"skill_id":"x') WHERE seq = ?`, v+1)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("edited %d rows", n)
		}
		db.Close()
	}},
}

// closedStore makes a closed store in a new dir holding n invocations.
func closedStore(t *testing.T, n int, opts ...Option) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		emitAll(t, s, invocation(fmt.Sprintf("inv-%d", i))...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mustRefuseStarts checks that s found damage naming seq and the repair,
// refuses a new invocation with it, and still takes the rows of running
// ones.
func mustRefuseStarts(t *testing.T, s *Store, seq int64) {
	t.Helper()
	err := s.Damage()
	if !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), RepairCommand(filepath.Dir(s.path))) ||
		!strings.Contains(err.Error(), fmt.Sprintf("seq %d ", seq)) {
		t.Fatalf("Damage() = %v; want ErrNeedsRepair naming seq %d and %q", err, seq, RepairCommand(filepath.Dir(s.path)))
	}
	c := common("after-damage")
	if _, err := s.Emit(context.Background(), audit.InvokedStarted(c, "1", "p", zeroHash(1), map[string]any{})); !errors.Is(err, ErrNeedsRepair) {
		t.Errorf("a new invocation's started row on a damaged store: %v, want ErrNeedsRepair", err)
	}
	if _, err := s.Emit(context.Background(), audit.InvokedCompleted(common("running"), audit.OutcomeSuccess, 1, zeroHash(2), "")); err != nil {
		t.Errorf("a running invocation's completed row on a damaged store: %v", err)
	}
}

// TestStartCheckRefusesDamage: each damage of the table, in a row no
// checkpoint covers, is found by Open; the store opens and refuses new
// invocations, naming the row and the repair.
func TestStartCheckRefusesDamage(t *testing.T) {
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			dir := closedStore(t, 2)
			tc.do(t, dir, 2)
			s, err := Open(dir)
			if err != nil {
				// A journal made shorter than the index has applied is
				// refused by Open itself.
				if !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), RepairCommand(dir)) {
					t.Fatalf("Open: %v", err)
				}
				return
			}
			defer s.Close()
			mustRefuseStarts(t, s, 3)
			if rep, err := VerifyDir(context.Background(), dir); err != nil || rep.OK {
				t.Errorf("VerifyDir passes what the start-up check refused: %v %+v", err, rep)
			}
		})
	}
}

// TestStartCheckSound: a sound store opens taking invocations, verifying
// every row the first time and, with the mark of that check, none the
// next.
func TestStartCheckSound(t *testing.T) {
	dir := closedStore(t, 2)
	s := openStore(t, dir)
	if err := s.Damage(); err != nil {
		t.Fatal(err)
	}
	// The first Open (closedStore's) verified an empty store; this one
	// verified the rows closedStore wrote.
	if got := s.StartCheck(); got.Rows != 12 || got.Checkpoint != 0 {
		t.Errorf("start-up check: %+v, want 12 rows after no checkpoint", got)
	}
	s.Close()
	s = openStore(t, dir)
	if got := s.StartCheck(); got.Rows != 0 || got.Verified != 12 {
		t.Errorf("second start-up check: %+v, want 0 rows after the mark at seq 12", got)
	}
}

// TestStartCheckFromCheckpoint: with a signed checkpoint, the start-up
// check reads only the rows after its head, so damage before it is the
// scrub's to find; damage after it, or to the checkpoint row itself, is
// refused at start.
func TestStartCheckFromCheckpoint(t *testing.T) {
	sg := newTestSigner(t)
	t.Run("before the checkpoint: the scrub", func(t *testing.T) {
		dir := closedStore(t, 2, WithSigner(sg)) // Close signs the head
		damages[0].do(t, dir, 2)
		_ = os.Remove(filepath.Join(dir, ReserveDirName, verifiedName))
		s := openStore(t, dir, WithSigner(sg))
		if err := s.Damage(); err != nil {
			t.Fatalf("start-up check read rows a checkpoint covers: %v", err)
		}
		cp := lastCheckpoint(t, dir)
		if got := s.StartCheck(); got.Checkpoint != cp.Seq || got.Rows != got.Head.Seq-cp.Seq || got.Head.Seq-cp.Seq > 2 {
			t.Errorf("start-up check: %+v, want the rows after the last checkpoint's head, seq %d", got, cp.Seq)
		}
		rep, err := s.Scrub(context.Background())
		if err != nil || rep.OK {
			t.Fatalf("scrub: %v, ok %v", err, rep.OK)
		}
		mustRefuseStarts(t, s, 3)
	})
	t.Run("after the checkpoint", func(t *testing.T) {
		dir := closedStore(t, 2, WithSigner(sg))
		s := openStore(t, dir) // no signer: no checkpoint at its Close
		emitAll(t, s, invocation("later")...)
		s.Close()
		v := int(lastCheckpoint(t, dir).Seq) + 2
		damages[2].do(t, dir, v) // swap two rows after it
		_ = os.Remove(filepath.Join(dir, ReserveDirName, verifiedName))
		s = openStore(t, dir)
		mustRefuseStarts(t, s, int64(v+1))
	})
	t.Run("the checkpoint row", func(t *testing.T) {
		dir := closedStore(t, 2, WithSigner(sg))
		s := openStore(t, dir)
		emitAll(t, s, invocation("later")...)
		s.Close()
		var seq int64
		if err := rawDB(t, dir, false).QueryRow(`SELECT max(seq) FROM audit_rows WHERE kind = ?`, string(audit.KindCheckpoint)).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		db := rawDB(t, dir, true)
		// The signature changed: the row's hash no longer recomputes.
		if _, err := db.Exec(`UPDATE audit_rows SET payload = replace(payload, '"signature":"', '"signature":"00') WHERE seq = ?`, seq); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s = openStore(t, dir)
		mustRefuseStarts(t, s, seq)
	})
}

// TestStartCheckAnchorSignature: a signed anchor whose signature no
// longer verifies is refused at start.
func TestStartCheckAnchorSignature(t *testing.T) {
	dir := closedStore(t, 1, WithSigner(newTestSigner(t)))
	a, ok, err := statedir.ReadAnchor(dir)
	if err != nil || !ok || a.Signature == "" {
		t.Fatalf("anchor: %+v %v %v", a, ok, err)
	}
	a.Signature = strings.Repeat("0", len(a.Signature))
	b, _ := json.Marshal(a)
	if err := os.WriteFile(filepath.Join(dir, AnchorName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	if err := s.Damage(); !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), AnchorName) {
		t.Errorf("Damage() = %v, want ErrNeedsRepair naming %s", err, AnchorName)
	}
}

// lastCheckpoint is the signed head of dir's last checkpoint row.
func lastCheckpoint(t *testing.T, dir string) audit.Checkpoint {
	t.Helper()
	var payload string
	if err := rawDB(t, dir, false).QueryRow(`SELECT payload FROM audit_rows WHERE kind = ? ORDER BY seq DESC LIMIT 1`, string(audit.KindCheckpoint)).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var cp audit.Checkpoint
	if err := json.Unmarshal([]byte(payload), &cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestLineAfterSeq: the offset after the last line at or below a seq,
// found from the end, across block boundaries and undecodable lines.
func TestLineAfterSeq(t *testing.T) {
	dir := closedStore(t, 40)
	lines, _ := journalFileLines(t, dir)
	f, err := os.Open(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var end int64
	offs := []int64{0}
	for _, l := range lines {
		end += int64(len(l)) + 1
		offs = append(offs, end)
	}
	for _, seq := range []int64{0, 1, 2, 100, 239, 240, 500} {
		got, err := statedir.LineAfterSeq(f, end, seq)
		want := offs[min(seq, int64(len(lines)))]
		if err != nil || got != want {
			t.Errorf("statedir.LineAfterSeq(%d) = %d, %v; want %d", seq, got, err, want)
		}
	}
}

// Damage found outside the store (the fleet's witness) stops new
// invocations as the store's own check does, and does not replace damage
// already recorded.
func TestSetDamagedRefusesStarts(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Damage(); err != nil {
		t.Fatalf("a new store is damaged: %v", err)
	}
	first := errors.New("the fleet refused the journal")
	s.SetDamaged(first)
	s.SetDamaged(errors.New("a second report"))
	err = s.Damage()
	if !errors.Is(err, ErrNeedsRepair) || !errors.Is(err, first) {
		t.Fatalf("Damage() = %v, want ErrNeedsRepair wrapping the first cause", err)
	}
}
