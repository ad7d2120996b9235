package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLockOnAnUnlinkedFileIsNoLock: a cleaner opens a sandbox's lock file
// just as the sandbox ends (its file unlinked, its lock released) and is
// made again under the same id (a new file, locked). The lock the cleaner
// then gets on the old file is no lock of the live sandbox, and its
// tryLock refuses while the new one is held.
func TestLockOnAnUnlinkedFileIsNoLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.lock")
	owner, ok := tryLock(path)
	if !ok {
		t.Fatal("first lock refused")
	}
	// The cleaner's open, before its flock.
	early, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	// The sandbox ends (cleanup: unlink, then close) and is made again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	owner.Close()
	again, ok := tryLock(path)
	if !ok {
		t.Fatal("the remade sandbox's lock refused")
	}
	defer again.Close()
	// The cleaner's flock: granted on the old file, which is not at path.
	if err := unix.Flock(int(early.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock of the unlinked file: %v", err)
	}
	if stillAt(early, path) {
		t.Error("a lock on the unlinked file passes for the live sandbox's")
	}
	if l, ok := tryLock(path); ok {
		l.Close()
		t.Error("tryLock took the live sandbox's lock")
	}
}
