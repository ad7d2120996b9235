package auditstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cyberos.dev/audit"
)

// simulateBoot makes the store believe it runs in boot id until the test ends.
func simulateBoot(t *testing.T, id string) {
	t.Helper()
	old := bootID
	bootID = func() string { return id }
	t.Cleanup(func() { bootID = old })
}

// journalTail returns the journal's bytes, its end (first NUL) and size.
func journalTail(t *testing.T, dir string) (data []byte, end int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	return data, int64(bytes.IndexByte(data, 0))
}

// plant writes stale bytes at off, as a crash can leave them: past the
// journal's end, after a gap of zeros.
func plant(t *testing.T, dir string, off int64) []byte {
	t.Helper()
	stale := []byte(`{"seq":77,"row_id":"stale block from before the crash"}` + "\n")
	f, err := os.OpenFile(filepath.Join(dir, JournalName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Size() < off+int64(len(stale)) {
		t.Fatalf("journal of %d bytes has no room at %d", fi.Size(), off)
	}
	if _, err := f.WriteAt(stale, off); err != nil {
		t.Fatal(err)
	}
	return stale
}

// TestCrashLeftoversPastEndCleared: bytes a crash left past the journal's
// end are zeroed by the first Open of a boot wherever they are in the
// preallocated tail, the chain goes on and verifies; later Opens in the
// same boot read only tailWindow bytes past the end, unless the journal is
// another file than the one checked; a mark that is a symlink is neither
// believed nor written through.
func TestCrashLeftoversPastEndCleared(t *testing.T) {
	dir := t.TempDir()
	simulateBoot(t, "boot-1")
	s := openStore(t, dir)
	emitAll(t, s, invocation("a")...)
	s.Close()
	markPath := filepath.Join(dir, ReserveDirName, tailCheckedName)
	if m, err := os.ReadFile(markPath); err != nil || !bytes.HasPrefix(m, []byte("boot=boot-1 ")) {
		t.Fatalf("mark after the first Open: %q %v", m, err)
	}

	// reopen opens, checks every byte past the end is zero, emits a row
	// chained to the last one and verifies; it returns whether stale bytes
	// planted at off are still there.
	reopen := func(what string, off int64, stale []byte) (left bool) {
		t.Helper()
		s := openStore(t, dir)
		data, end := journalTail(t, dir)
		left = bytes.Equal(data[off:off+int64(len(stale))], stale)
		if !left && !allZero(data[end:]) {
			t.Fatalf("%s: bytes past the end at %d", what, end+int64(bytes.IndexFunc(data[end:], func(r rune) bool { return r != 0 })))
		}
		if !left {
			emitAll(t, s, audit.NoConnect(common(what), 1))
			if rep, err := s.Verify(context.Background()); err != nil || !rep.OK {
				t.Fatalf("%s: %+v %v", what, rep, err)
			}
		}
		s.Close()
		return left
	}

	_, end := journalTail(t, dir)
	far := end + 2<<20 // past tailWindow, inside the preallocated chunk
	stale := plant(t, dir, far)
	if !reopen("same boot, far", far, stale) {
		t.Log("the whole tail was read again in the same boot")
		t.Fail()
	}
	simulateBoot(t, "boot-2") // a crash and a reboot
	if reopen("new boot, far", far, stale) {
		t.Fatal("the first Open of a boot left stale bytes past the end")
	}
	if m, _ := os.ReadFile(markPath); !bytes.HasPrefix(m, []byte("boot=boot-2 ")) {
		t.Errorf("mark after the new boot's Open: %q", m)
	}

	_, end = journalTail(t, dir)
	near := end + 4096
	stale = plant(t, dir, near)
	if reopen("same boot, near", near, stale) {
		t.Error("stale bytes within tailWindow of the end were left")
	}

	// The journal replaced by a copy (another inode): checked in full.
	jp := filepath.Join(dir, JournalName)
	data, _ := os.ReadFile(jp)
	if err := os.WriteFile(jp+".copy", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(jp+".copy", jp); err != nil {
		t.Fatal(err)
	}
	_, end = journalTail(t, dir)
	far = end + 2<<20
	stale = plant(t, dir, far)
	if reopen("another journal file", far, stale) {
		t.Error("a journal replaced by another file was believed checked")
	}

	// A symlink at the mark, to the very mark this boot would write: not
	// believed, not written through.
	simulateBoot(t, "boot-3")
	f, err := os.Open(jp)
	if err != nil {
		t.Fatal(err)
	}
	want := tailMark(f)
	f.Close()
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(target, past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(markPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, markPath); err != nil {
		t.Fatal(err)
	}
	_, end = journalTail(t, dir)
	far = end + 2<<20
	stale = plant(t, dir, far)
	if reopen("symlinked mark", far, stale) {
		t.Error("a symlinked mark was believed")
	}
	if fi, err := os.Stat(target); err != nil || !fi.ModTime().Equal(past) {
		t.Errorf("the mark was written through a symlink (%v)", err)
	}
}
