package auditstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit"
	"cyberos.dev/internal/testutil"
)

// mountTmpfs mounts a tmpfs of the given size on a fresh temp dir, removed
// again when the test ends.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size="+size); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

func remount(t *testing.T, dir string, flags uintptr, data string) {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|flags, data); err != nil {
		t.Fatalf("remount %s (%s): %v", dir, data, err)
	}
}

// TestStateDirOnReadOnlyMount: a read-only state dir (as root, so
// permissions are no obstacle) → Open fails with ErrUnavailable, for a new
// store and for an existing one, and the existing rows are untouched.
func TestStateDirOnReadOnlyMount(t *testing.T) {
	dir := mountTmpfs(t, "8m")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := emitAll(t, s, invocation("inv")...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	remount(t, dir, unix.MS_RDONLY, "")
	if s, err := Open(dir); !errors.Is(err, ErrUnavailable) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open on a read-only mount = %v, want ErrUnavailable", err)
	} else {
		t.Log(err)
	}
	if s, err := Open(dir + "/new"); !errors.Is(err, ErrUnavailable) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open of a new store on a read-only mount = %v, want ErrUnavailable", err)
	}
	remount(t, dir, 0, "")
	s = openStore(t, dir)
	if got := allRows(t, s); !slices.EqualFunc(got, rows, rowsEqual) {
		t.Fatal("rows changed")
	}
}

// TestStateDirFull: a state dir that fills up → Emit fails with
// ErrUnavailable (or Open does, once it is full); every row Emit
// acknowledged is there, intact, once space is back.
func TestStateDirFull(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var acked []audit.Row
	var emitErr error
	msg := strings.Repeat("x", 2000)
	for i := range 10000 {
		r, err := s.Emit(context.Background(), audit.ToolDenied(common(fmt.Sprint(i)), "Bash", msg, zeroHash(i)))
		if err != nil {
			emitErr = err
			break
		}
		acked = append(acked, r)
	}
	if !errors.Is(emitErr, ErrUnavailable) {
		t.Fatalf("after %d rows: Emit = %v, want ErrUnavailable", len(acked), emitErr)
	}
	t.Logf("full after %d rows: %v", len(acked), emitErr)
	// Still full: a further row of that size fails the same way, and none
	// is half-written (a smaller row may still fit).
	if _, err := s.Emit(context.Background(), audit.ToolDenied(common("more"), "Bash", msg, zeroHash(1))); !errors.Is(err, ErrUnavailable) {
		s.Close()
		t.Fatalf("Emit on a full disk = %v", err)
	}
	s.Close()
	if s2, err := Open(dir); err == nil {
		s2.Close() // Open may still succeed on a full tmpfs; either is fine
	} else if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open on a full disk = %v, want ErrUnavailable", err)
	}

	remount(t, dir, 0, "size=16m")
	s = openStore(t, dir)
	got := allRows(t, s)
	if len(got) < len(acked) || !slices.EqualFunc(got[:len(acked)], acked, rowsEqual) {
		t.Fatalf("after the disk filled: %d rows stored, %d acknowledged, or rows differ", len(got), len(acked))
	}
	rep, err := s.Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("%+v %v", rep.Problems, err)
	}
	// And the store works again.
	emitAll(t, s, audit.NoConnect(common("after"), 1))
}

// TestPreallocationLeavesANearlyFullDiskAlone: on a filesystem with less
// than a chunk and its headroom free, the journal grows by what its rows and
// reservations need, never by a chunk of zeros that would fill the disk
// (the supervisor's free-space check, run beside a Reserve, saw such a
// chunk as a full state dir); with room to spare it still preallocates.
func TestPreallocationLeavesANearlyFullDiskAlone(t *testing.T) {
	for _, tc := range []struct {
		size  string
		chunk bool // a chunk preallocated
	}{
		{"1m", false},
		{"10m", false},
		{"64m", true},
	} {
		t.Run(tc.size, func(t *testing.T) {
			dir := mountTmpfs(t, tc.size)
			s := openStore(t, dir)
			emitAll(t, s, invocation("inv")...)
			release, err := s.Reserve("inv-2")
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			fi, err := os.Stat(filepath.Join(dir, JournalName))
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			free := int64(st.Bfree) * st.Bsize
			t.Logf("journal %d bytes, %d KiB free", fi.Size(), free>>10)
			if tc.chunk {
				if fi.Size() < journalChunk {
					t.Errorf("journal %d bytes with %d KiB free, want a preallocated chunk (%d)", fi.Size(), free>>10, journalChunk)
				}
				return
			}
			if fi.Size() >= 256<<10 {
				t.Errorf("journal %d bytes on a %s disk: preallocated a chunk it has no room for", fi.Size(), tc.size)
			}
		})
	}
}
