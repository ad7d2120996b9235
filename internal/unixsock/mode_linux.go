package unixsock

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// setModeBeforeBind gives the unbound socket's inode mode perm, which
// bind(2) copies (less the umask) to the file it creates (unix_bind_bsd in
// net/unix/af_unix.c).
func setModeBeforeBind(fd uintptr, perm os.FileMode) error {
	if err := unix.Fchmod(int(fd), uint32(perm.Perm())); err != nil {
		return fmt.Errorf("socket mode before bind: %w", err)
	}
	return nil
}
