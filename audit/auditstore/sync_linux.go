package auditstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's written data durable (fdatasync: an append changes the
// size, so the inode is flushed too; other metadata such as mtime is not).
func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
