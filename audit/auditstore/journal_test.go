package auditstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// TestJournalIsTheDurableCopy: every acknowledged row is a line of the
// journal, in the export format, before any read touched the index.
func TestJournalIsTheDurableCopy(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	acked := emitAll(t, s, invocation("inv")...)
	data, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.IndexByte(data, 0)
	if end < 0 {
		end = len(data)
	}
	if len(data)%journalChunk != 0 {
		t.Errorf("journal is %d bytes, want whole %d-byte chunks (preallocated)", len(data), journalChunk)
	}
	got, err := audit.ReadJSONL(bytes.NewReader(data[:end]))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, acked, rowsEqual) {
		t.Fatalf("journal rows %v\nwant %v", got, acked)
	}
	if rest := bytes.Trim(data[end:], "\x00"); len(rest) != 0 {
		t.Fatalf("%d non-NUL bytes after the journal's end", len(rest))
	}
}

// TestVerifyNamesRowAlteredInJournal: one byte changed in a journal line
// (the index untouched) fails Verify naming that row.
func TestVerifyNamesRowAlteredInJournal(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	rows := emitAll(t, s, invocation("inv")...)
	if rep, err := s.Verify(context.Background()); err != nil || !rep.OK {
		t.Fatalf("before: %+v %v", rep, err)
	}
	victim := rows[1]
	path := filepath.Join(dir, JournalName)
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte(victim.RowID))
	if i < 0 {
		t.Fatal("row id not in the journal")
	}
	data[i+3] ^= 1
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || len(problemsFor(rep, victim.Seq, victim.RowID)) == 0 {
		t.Fatalf("tampered journal line of seq %d not named: %+v", victim.Seq, rep.Problems)
	}
	t.Log(rep.Problems)
}

// TestOpenRefusesJournalBehindIndex: a journal cut short (its last rows
// gone) while the index has them would make new rows chain from an old
// head; Open refuses that store.
func TestOpenRefusesJournalBehindIndex(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	emitAll(t, s, invocation("a")...)
	emitAll(t, s, invocation("b")...)
	allRows(t, s) // everything applied to the index
	s.Close()
	path := filepath.Join(dir, JournalName)
	data, _ := os.ReadFile(path)
	end := bytes.IndexByte(data, 0)
	cut := bytes.LastIndexByte(data[:end-1], '\n') + 1 // drop the last line
	clear(data[cut:end])
	os.WriteFile(path, data, 0o600)
	s2, err := Open(dir)
	if err == nil {
		s2.Close()
		t.Fatal("Open accepted a journal that ends before the index")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "journal ends at seq") {
		t.Fatalf("Open = %v", err)
	}
}

// TestTornJournalTailIsCut: bytes of a batch whose writer died before
// finishing its line are zeroed by the next writer, and the chain goes on
// from the last whole line.
func TestTornJournalTailIsCut(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	good := emitAll(t, s, invocation("a")...)
	s.Close()
	path := filepath.Join(dir, JournalName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	end := bytes.IndexByte(data, 0)
	f.WriteAt([]byte(`{"seq":99,"row_id":"01J`), int64(end))
	f.Close()
	s = openStore(t, dir)
	next := emitAll(t, s, audit.NoConnect(common("after"), 1))[0]
	last := good[len(good)-1]
	if next.Seq != last.Seq+1 || next.PrevHash != last.RowHash {
		t.Fatalf("next row seq %d prev %.12s: did not chain from the last whole line", next.Seq, next.PrevHash)
	}
	if rep, err := s.Verify(context.Background()); err != nil || !rep.OK || rep.Rows != len(good)+1 {
		t.Fatalf("%+v %v", rep, err)
	}
}

// TestTwoStoresShareOneStateDir: two stores on one state dir (as two
// `skill run` processes have: separate descriptors, so the journal's statedir.Flock
// is what orders them) emit concurrently; one chain holds every row and
// each store reads the other's rows.
func TestTwoStoresShareOneStateDir(t *testing.T) {
	dir := t.TempDir()
	a, b := openStore(t, dir), openStore(t, dir)
	var wg sync.WaitGroup
	const each = 300
	for _, s := range []*Store{a, b} {
		for w := range 5 {
			wg.Go(func() {
				for i := range each / 5 {
					if _, err := s.Emit(context.Background(), audit.NoConnect(common(fmt.Sprintf("%p-%d-%d", s, w, i)), 1)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for name, s := range map[string]*Store{"a": a, "b": b} {
		rep, err := s.Verify(context.Background())
		if err != nil || !rep.OK || rep.Rows != 2*each {
			t.Fatalf("store %s: %d rows, ok %v, %v %v", name, rep.Rows, rep.OK, rep.Problems[:min(3, len(rep.Problems))], err)
		}
	}
}

// TestJournalGrownByAnotherStore: while store a is idle, store b appends
// past the journal's preallocated size (so b extends the file beyond what
// a last knew of it); a's next rows still continue b's last row, and the
// journal's end and size are right for both.
func TestJournalGrownByAnotherStore(t *testing.T) {
	dir := t.TempDir()
	a, b := openStore(t, dir), openStore(t, dir)
	first := emitAll(t, a, audit.NoConnect(common("a-first"), 1))[0]
	fi, err := os.Stat(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	// Enough rows from b to cross the preallocated size.
	var wg sync.WaitGroup
	var written atomic.Int64
	for w := range 20 {
		wg.Go(func() {
			for i := 0; written.Load() < size+journalChunk/4; i++ {
				r, err := b.Emit(context.Background(), audit.NoConnect(common(fmt.Sprintf("b-%d-%d-%s", w, i, strings.Repeat("x", 4000))), 1))
				if err != nil {
					t.Error(err)
					return
				}
				written.Add(int64(len(audit.AppendJournalLine(nil, r))))
			}
		})
	}
	wg.Wait()
	if fi, err := os.Stat(filepath.Join(dir, JournalName)); err != nil || fi.Size() <= size {
		t.Fatalf("journal size %d (%v), want past %d", fi.Size(), err, size)
	}
	last := allRows(t, b)
	next := emitAll(t, a, audit.NoConnect(common("a-next"), 1))[0]
	if tail := last[len(last)-1]; next.Seq != tail.Seq+1 || next.PrevHash != tail.RowHash || first.Seq != 1 {
		t.Fatalf("a's row seq %d prev %.12s does not continue b's seq %d %.12s", next.Seq, next.PrevHash, tail.Seq, tail.RowHash)
	}
	for name, s := range map[string]*Store{"a": a, "b": b} {
		rep, err := s.Verify(context.Background())
		if err != nil || !rep.OK || rep.Rows != len(last)+1 {
			t.Fatalf("store %s: %d rows, ok %v, %v %v", name, rep.Rows, rep.OK, rep.Problems[:min(3, len(rep.Problems))], err)
		}
	}
}

// TestAppendPointStatsOnlyWhenItMust: the writer finds where to append
// without a stat (one makes the next append's fdatasync write the inode
// too, see appendPoint), also within half a chunk of the file's end, where
// it used to stat before every append; and when another writer has filled
// the journal past the size this one knew, it stats and finds the real end.
func TestAppendPointStatsOnlyWhenItMust(t *testing.T) {
	path := filepath.Join(t.TempDir(), JournalName)
	open := func() *journal {
		j, err := openJournal(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.close() })
		end, size, _, err := j.tail()
		if err != nil {
			t.Fatal(err)
		}
		j.reserve(end, size)
		return j
	}
	appendLine := func(j *journal, line []byte) int64 {
		t.Helper()
		start, size, err := j.appendPoint()
		if err != nil {
			t.Fatal(err)
		}
		if err := j.write(line, start, size); err != nil {
			t.Fatal(err)
		}
		return start + int64(len(line))
	}
	a := open()
	// Fill a to within half a chunk of its size.
	filler := []byte(strings.Repeat(strings.Repeat("f", 1023)+"\n", 1024))
	for a.wsize-a.whint >= journalChunk/2 {
		appendLine(a, filler)
	}
	size := a.wsize
	a.wstats = 0
	line := []byte(strings.Repeat("a", 99) + "\n")
	var end int64
	for range 100 {
		end = appendLine(a, line)
	}
	if a.wstats != 0 {
		t.Fatalf("%d stats for 100 appends within the known size", a.wstats)
	}
	// b, another writer, fills the journal past the size a knows and
	// grows it; a's next append must go after b's last line.
	b := open()
	for b.wsize <= size+journalChunk/4 || b.whint <= size {
		end = appendLine(b, filler)
	}
	if got := appendLine(a, line); got != end+int64(len(line)) || a.wstats != 1 {
		t.Fatalf("a appended up to %d after %d stats, want up to %d after 1", got, a.wstats, end+int64(len(line)))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(data, 0); int64(i) != end+int64(len(line)) || !bytes.HasSuffix(data[:i], append([]byte("f\n"), line...)) {
		t.Fatalf("journal ends at %d with %q, want %d", i, data[max(0, i-120):i], end+int64(len(line)))
	}
}

// TestFindEndIn: the end is the first NUL byte whatever the hint says. A
// hint that follows a newline is where the search starts, and the byte
// before it is read with what follows it; a hint that does not follow a
// newline (the journal was cut below it) or lies past the size is ignored.
func TestFindEndIn(t *testing.T) {
	lines := func(n int) string { return strings.Repeat("0123456789abcdef\n", n) }
	short, long := lines(3), lines(200) // long: 3400 bytes, past one small read
	cases := []struct {
		name    string
		content string
		hint    int64
		want    int64
	}{
		{"empty journal", "\x00\x00\x00", 0, 0},
		{"no hint", short + "\x00\x00", 0, int64(len(short))},
		{"hint at the end", short + "\x00\x00", int64(len(short)), int64(len(short))},
		{"hint a line behind", short + "\x00\x00", 17, int64(len(short))},
		{"end far past the hint", long + "\x00\x00", 17, int64(len(long))},
		{"hint inside a line", short + "\x00\x00", 5, int64(len(short))},
		{"hint past a cut end", short + "\x00" + strings.Repeat("\x00", 100), int64(len(short)) + 34, int64(len(short))},
		{"hint past the size", short, 1 << 20, int64(len(short))},
		{"full, hint at the size", short, int64(len(short)), int64(len(short))},
		{"full, hint a line behind", short, 17, int64(len(short))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "j")
			if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			end, err := statedir.FindEndIn(f, c.hint, int64(len(c.content)), make([]byte, 1024))
			if err != nil || end != c.want {
				t.Fatalf("statedir.FindEndIn(hint %d) = %d, %v; want %d", c.hint, end, err, c.want)
			}
		})
	}
}
