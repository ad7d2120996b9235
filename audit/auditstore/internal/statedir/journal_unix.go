//go:build unix

package statedir

import (
	"os"

	"golang.org/x/sys/unix"
)

const (
	LockShared    = unix.LOCK_SH
	LockExclusive = unix.LOCK_EX
	LockNone      = unix.LOCK_UN
)

// Flock takes (or with LockNone releases) an advisory lock on f's open file
// description, waiting for it; interrupted waits are retried.
func Flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Unlock releases f's lock. LOCK_UN never waits and cannot fail on an open
// f; closing f would release the lock in any case.
func Unlock(f *os.File) { _ = Flock(f, LockNone) }

// FreeSpace returns what this process may still write on the filesystem
// holding path (root may use the blocks reserved for it) and the
// filesystem's size; ok is false when the filesystem does not say (ramfs
// counts nothing).
func FreeSpace(path string) (free, size int64, ok bool) {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return 0, 0, false
	}
	return space(&st)
}

// FileFreeSpace is FreeSpace's free bytes for the filesystem holding open
// file f.
func FileFreeSpace(f *os.File) (free int64, ok bool) {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil {
		return 0, false
	}
	free, _, ok = space(&st)
	return free, ok
}

func space(st *unix.Statfs_t) (free, size int64, ok bool) {
	if st.Blocks == 0 {
		return 0, 0, false
	}
	blocks := int64(st.Bavail) // uint64 on Linux, int64 on some systems
	if os.Geteuid() == 0 {
		blocks = int64(st.Bfree)
	}
	// Bsize is int64 on Linux but uint32 or uint64 elsewhere.
	return blocks * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), true //nolint:unconvert // not int64 on every OS
}
