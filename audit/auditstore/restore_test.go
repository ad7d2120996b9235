package auditstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"cyberos.dev/audit"
)

// journalBytes is the journal's lines (its end is its first NUL byte).
func journalBytes(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// A cut tail comes back byte for byte from rows that continue the chain;
// rows that do not (another chain, a gap, an altered row) are refused and
// nothing is written.
func TestRestoreTail(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	var rows []audit.Row
	for _, inv := range []string{"inv-1", "inv-2", "inv-3"} {
		rows = append(rows, emitAll(t, s, invocation(inv)...)...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	orig := journalBytes(t, dir)
	cut := bytes.Index(orig, []byte(`{"seq":11,`))
	if err := os.Truncate(filepath.Join(dir, JournalName), int64(cut)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{FileName, FileName + "-wal", FileName + "-shm", AnchorName} {
		os.Remove(filepath.Join(dir, f))
	}
	ctx := context.Background()

	altered := append([]audit.Row(nil), rows[10:]...)
	altered[3].Payload = bytes.Replace(altered[3].Payload, []byte("inv-3"), []byte("inv-9"), 1)
	other := t.TempDir()
	os2 := openStore(t, other)
	otherRows := emitAll(t, os2, append(invocation("x-1"), invocation("x-2")...)...)
	for name, bad := range map[string][]audit.Row{
		"a gap":          rows[11:],
		"another chain":  otherRows[10:],
		"an altered row": altered,
	} {
		if err := RestoreTail(ctx, dir, bad); !errors.Is(err, ErrNotATail) {
			t.Errorf("%s: %v, want ErrNotATail", name, err)
		}
		if got := journalBytes(t, dir); !bytes.Equal(got, orig[:cut]) {
			t.Fatalf("%s: the journal changed (%d bytes, was %d)", name, len(got), cut)
		}
	}

	if err := RestoreTail(ctx, dir, rows[10:]); err != nil {
		t.Fatal(err)
	}
	if got := journalBytes(t, dir); !bytes.Equal(got, orig) {
		t.Errorf("the restored journal is not the original byte for byte (%d bytes, want %d)", len(got), len(orig))
	}
	rep, err := VerifyDir(ctx, dir)
	if err != nil || !rep.OK || rep.Rows != len(rows) {
		t.Fatalf("after the restore: %+v %v", rep, err)
	}
	s = openStore(t, dir)
	if last, err := s.LastSeq(ctx); err != nil || last != int64(len(rows)) {
		t.Errorf("reopened store's head: %d %v, want %d", last, err, len(rows))
	}
}
