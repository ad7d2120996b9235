package auditstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// journalStore makes a closed store with two whole invocations (12 rows)
// and returns its dir and the journal's lines.
func journalStore(t *testing.T) (string, [][]byte) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	emitAll(t, s, append(invocation("inv-a"), invocation("inv-b")...)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, journalLines(t, dir)
}

func journalLines(t *testing.T, dir string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 {
		raw = raw[:i]
	}
	return bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
}

// writeJournal replaces the journal with lines.
func writeJournal(t *testing.T, dir string, lines [][]byte) {
	t.Helper()
	data := append(bytes.Join(lines, []byte("\n")), '\n')
	if len(lines) == 0 {
		data = nil
	}
	if err := os.WriteFile(filepath.Join(dir, JournalName), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func rowIDOf(line []byte) string {
	i := bytes.Index(line, []byte(`"row_id":"`)) + len(`"row_id":"`)
	return string(line[i : i+26])
}

func verifyDir(t *testing.T, dir string) Report {
	t.Helper()
	rep, err := VerifyDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// firstBad returns the first problem, failing when there is none.
func firstBad(t *testing.T, rep Report) Problem {
	t.Helper()
	if rep.OK || len(rep.Problems) == 0 {
		t.Fatalf("verify found nothing: %+v", rep)
	}
	return rep.Problems[0]
}

func TestVerifyDirIntact(t *testing.T) {
	dir, _ := journalStore(t)
	rep := verifyDir(t, dir)
	if !rep.OK || rep.Rows != 12 || rep.LastSeq != 12 {
		t.Fatalf("intact store: %+v", rep)
	}
}

// TestVerifyDirJournalPayloadByte: one byte of an old row's payload in the
// journal, the index intact: the row, the file, the line and the field.
func TestVerifyDirJournalPayloadByte(t *testing.T) {
	dir, lines := journalStore(t)
	l := lines[2] // seq 3: skill.tool_call_completed
	i := bytes.Index(l, []byte(`"duration_ms":`)) + len(`"duration_ms":`)
	l[i]++
	writeJournal(t, dir, lines)
	p := firstBad(t, verifyDir(t, dir))
	if p.Seq != 3 || p.RowID != rowIDOf(l) || p.File != JournalName || p.Line != 3 || p.Field != "payload" {
		t.Errorf("first problem %+v, want seq 3, %s, %s line 3, field payload", p, rowIDOf(l), JournalName)
	}
}

// TestVerifyDirJournalHashByte: one byte of a row_hash in the journal.
func TestVerifyDirJournalHashByte(t *testing.T) {
	dir, lines := journalStore(t)
	l := lines[4]
	i := bytes.Index(l, []byte(`"row_hash":"`)) + len(`"row_hash":"`) + 10
	if l[i] == 'f' {
		l[i] = 'e'
	} else {
		l[i] = 'f'
	}
	writeJournal(t, dir, lines)
	rep := verifyDir(t, dir)
	p := firstBad(t, rep)
	if p.Seq != 5 || p.File != JournalName || p.Line != 5 || p.Field != "row_hash" {
		t.Errorf("first problem %+v, want seq 5, %s line 5, field row_hash", p, JournalName)
	}
	// The next row links to the index's good copy: one row is named.
	for _, q := range rep.Problems {
		if q.Seq != 5 {
			t.Errorf("a second row named: %+v", q)
		}
	}
}

// TestVerifyDirJournalLineDeleted: a line deleted from the middle.
func TestVerifyDirJournalLineDeleted(t *testing.T) {
	dir, lines := journalStore(t)
	lines = append(lines[:6:6], lines[7:]...) // seq 7 gone
	writeJournal(t, dir, lines)
	rep := verifyDir(t, dir)
	p := firstBad(t, rep)
	if p.Seq != 7 || p.File != JournalName || p.Line != 7 {
		t.Errorf("first problem %+v, want seq 7 missing at %s line 7", p, JournalName)
	}
}

// TestVerifyDirJournalTruncated: the journal's tail is cut (and the index
// still has the rows): named, with the repair command.
func TestVerifyDirJournalTruncated(t *testing.T) {
	dir, lines := journalStore(t)
	writeJournal(t, dir, lines[:9])
	p := firstBad(t, verifyDir(t, dir))
	if p.Seq != 10 || p.File != JournalName || !strings.Contains(p.Reason, RepairCommand(dir)) {
		t.Errorf("first problem %+v, want seq 10 only in the index, naming %q", p, RepairCommand(dir))
	}
	// A line cut in the middle is not a valid row.
	lines = journalLines(t, dir)
	writeJournal(t, dir, append(lines[:8:8], lines[8][:40]))
	p = firstBad(t, verifyDir(t, dir))
	if p.Seq != 9 || p.File != JournalName || p.Line != 9 || !strings.Contains(p.Reason, "not a valid row") {
		t.Errorf("first problem %+v, want seq 9 not a valid row at line 9", p)
	}
}

// TestVerifyDirIndexByte: a row altered in the index only.
func TestVerifyDirIndexByte(t *testing.T) {
	dir, _ := journalStore(t)
	db := rawDB(t, dir, true)
	if _, err := db.Exec(`UPDATE audit_rows SET ts = replace(ts, '2', '3') WHERE seq = 4`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	p := firstBad(t, verifyDir(t, dir))
	if p.Seq != 4 || p.File != FileName || p.Field != "ts" {
		t.Errorf("first problem %+v, want seq 4 in %s, field ts", p, FileName)
	}
}

// TestOpenRefusesMissingJournal: the journal deleted, the index kept: Open
// refuses naming the index's last seq and the repair, creates nothing, and
// Repair rewrites the journal from the index.
func TestOpenRefusesMissingJournal(t *testing.T) {
	dir, _ := journalStore(t)
	jpath := filepath.Join(dir, JournalName)
	if err := os.Remove(jpath); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if !errors.Is(err, ErrNeedsRepair) || !errors.Is(err, ErrUnavailable) ||
		!strings.Contains(err.Error(), "seq 12") || !strings.Contains(err.Error(), RepairCommand(dir)) {
		t.Fatalf("Open without the journal: %v", err)
	}
	if _, err := os.Stat(jpath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open left a journal: %v", err)
	}
	res, err := Repair(context.Background(), dir, false)
	if err != nil || res.Rows != 12 {
		t.Fatalf("repair: %+v %v", res, err)
	}
	s := openStore(t, dir)
	emitAll(t, s, invocation("inv-c")...)
	s.Close()
	if rep := verifyDir(t, dir); !rep.OK || rep.Rows != 18 {
		t.Errorf("after repair and 6 more rows: %+v", rep)
	}
}

// TestRepairRebuildsIndex: the index is not a database any more; Repair
// keeps it aside and rebuilds it from the journal.
func TestRepairRebuildsIndex(t *testing.T) {
	dir, _ := journalStore(t)
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xa5}, 4096), 0)
	f.Close()
	if _, err := Open(dir); !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), RepairCommand(dir)) {
		t.Errorf("Open of a garbage index: %v", err)
	}
	if rep := verifyDir(t, dir); rep.OK {
		t.Errorf("verify of a garbage index: %+v", rep)
	}
	res, err := Repair(context.Background(), dir, false)
	if err != nil || res.Rows != 12 || len(res.Moved) == 0 {
		t.Fatalf("repair: %+v %v", res, err)
	}
	if rep := verifyDir(t, dir); !rep.OK || rep.Rows != 12 {
		t.Errorf("after repair: %+v", rep)
	}
}

// TestRepairRefusesWithoutGoodCopy: the journal altered and the index
// gone: nothing verifies, nothing is changed.
func TestRepairRefusesWithoutGoodCopy(t *testing.T) {
	dir, lines := journalStore(t)
	lines[3][len(lines[3])-3]++
	writeJournal(t, dir, lines)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, FileName+suffix))
	}
	if _, err := Repair(context.Background(), dir, false); err == nil || !strings.Contains(err.Error(), "not repaired") {
		t.Errorf("repair without a good copy: %v", err)
	}
}

// TestIndexCheckAtOpen: garbage in a page of the index that Open's own
// reads do not touch (the kind index) is found by WithIndexCheck (the
// daemon's start), which names the repair.
func TestIndexCheckAtOpen(t *testing.T) {
	dir, _ := journalStore(t)
	db := rawDB(t, dir, false)
	var page int64
	if err := db.QueryRow(`SELECT rootpage FROM sqlite_master WHERE name = 'audit_rows_kind'`).Scan(&page); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1024), (page-1)*4096)
	f.Close()
	_, err = Open(dir, WithIndexCheck())
	if !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), RepairCommand(dir)) {
		t.Fatalf("Open with the index check: %v", err)
	}
	if rep := verifyDir(t, dir); rep.OK {
		t.Errorf("verify of a damaged kind index: %+v", rep)
	}
	if _, err := Repair(context.Background(), dir, false); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir, WithIndexCheck())
	s.Close()
}

// TestReaderEachMatchesStore: export's read-only path returns what the
// store's reads return, filtered alike, with the index and without it (the
// rows then come from the journal).
func TestReaderEachMatchesStore(t *testing.T) {
	dir, _ := journalStore(t)
	s := openStore(t, dir)
	filters := []Filter{{}, {InvocationID: "inv-b"}, {Kind: audit.KindToolCallStarted}, {AfterSeq: 5, Limit: 3}}
	want := make([][]audit.Row, len(filters))
	for i, f := range filters {
		var err error
		if want[i], err = s.Rows(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	check := func(what string) {
		t.Helper()
		r, err := OpenReader(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		for i, f := range filters {
			var got []audit.Row
			if err := r.Each(context.Background(), f, func(row audit.Row) error { got = append(got, row); return nil }); err != nil {
				t.Fatalf("%s: %+v: %v", what, f, err)
			}
			if len(got) != len(want[i]) {
				t.Fatalf("%s: %+v: %d rows, want %d", what, f, len(got), len(want[i]))
			}
			for j := range got {
				if !rowsEqual(got[j], want[i][j]) {
					t.Errorf("%s: %+v: row %d = %+v, want %+v", what, f, j, got[j], want[i][j])
				}
			}
		}
	}
	check("with the index")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, FileName+suffix))
	}
	check("without the index")
}

// TestAnchorCatchesTailAndIndexLoss: the journal's tail cut and the index
// deleted leave a shorter chain that verifies on its own; the anchor
// written at Close shows the rows lost, Open refuses, and only repair
// --accept-loss goes on.
func TestAnchorCatchesTailAndIndexLoss(t *testing.T) {
	dir, lines := journalStore(t)
	a, ok, err := statedir.ReadAnchor(dir)
	if err != nil || !ok || a.Seq != 12 {
		t.Fatalf("anchor after Close: %+v %v %v", a, ok, err)
	}
	// It only moves forward.
	if err := statedir.AdvanceAnchor(dir, 3, zeroHash(3), nil); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := statedir.ReadAnchor(dir); b != a {
		t.Fatalf("anchor moved back: %+v → %+v", a, b)
	}
	writeJournal(t, dir, lines[:9])
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, FileName+suffix))
	}
	p := firstBad(t, verifyDir(t, dir))
	if p.Seq != 10 || p.File != JournalName || !strings.Contains(p.Reason, "rows 10..12 are missing") {
		t.Errorf("first problem %+v, want rows 10..12 missing", p)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNeedsRepair) || !strings.Contains(err.Error(), "rows 10..12 are missing") {
		t.Fatalf("Open of a chain short of its anchor: %v", err)
	}
	if _, err := Repair(context.Background(), dir, false); err == nil || !strings.Contains(err.Error(), "--accept-loss") {
		t.Fatalf("repair without --accept-loss: %v", err)
	}
	res, err := Repair(context.Background(), dir, true)
	if err != nil || res.Rows != 9 {
		t.Fatalf("repair --accept-loss: %+v %v", res, err)
	}
	s := openStore(t, dir)
	emitAll(t, s, invocation("inv-c")...)
	s.Close()
	if rep := verifyDir(t, dir); !rep.OK || rep.Rows != 15 {
		t.Errorf("after accepting the loss: %+v", rep)
	}
}

// TestVerifyDirIndexRowDeleted: a row deleted from the index only.
func TestVerifyDirIndexRowDeleted(t *testing.T) {
	dir, lines := journalStore(t)
	db := rawDB(t, dir, true)
	if _, err := db.Exec(`DELETE FROM audit_rows WHERE seq = 4`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	p := firstBad(t, verifyDir(t, dir))
	if p.Seq != 4 || p.RowID != rowIDOf(lines[3]) || p.File != FileName {
		t.Errorf("first problem %+v, want seq 4 missing from %s", p, FileName)
	}
}

// TestVerifyDirWhileOpen: a live store (index in WAL mode, -wal and -shm
// present, rows not yet applied): VerifyDir reads it as it stands.
func TestVerifyDirWhileOpen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	emitAll(t, s, invocation("inv-a")...)
	allRows(t, s) // applied
	emitAll(t, s, invocation("inv-b")...)
	rep := verifyDir(t, dir)
	if !rep.OK || rep.Rows != 12 {
		t.Fatalf("live store: %+v", rep)
	}
	r, err := OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	if err := r.Each(context.Background(), Filter{}, func(audit.Row) error { n++; return nil }); err != nil || n != 12 {
		t.Fatalf("export of a live store: %d rows, %v", n, err)
	}
}
