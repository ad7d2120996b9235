package statedir

import (
	"os"

	"golang.org/x/sys/unix"
)

// Datasync makes f's written data durable (fdatasync: an append changes the
// size, so the inode is flushed too; other metadata such as mtime is not).
func Datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
