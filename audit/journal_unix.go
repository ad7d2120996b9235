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
