//go:build unix

package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

const (
	lockShared    = unix.LOCK_SH
	lockExclusive = unix.LOCK_EX
	lockNone      = unix.LOCK_UN
)

// flock takes (or with lockNone releases) an advisory lock on f's open file
// description, waiting for it; interrupted waits are retried.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// unlock releases f's lock. LOCK_UN never waits and cannot fail on an open
// f; closing f would release the lock in any case.
func unlock(f *os.File) { _ = flock(f, lockNone) }
