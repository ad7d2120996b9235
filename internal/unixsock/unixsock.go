// Package unixsock binds Unix sockets whose file, on Linux, never has a
// wider mode than the one asked for, not even between bind(2) and chmod(2).
package unixsock

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
)

// Listen binds a Unix stream socket at path (bind(2) refuses to replace an
// existing file) and returns its listener, with the file's mode exactly
// perm. On Linux the file is created with perm (less the umask) already:
// bind takes the new file's mode from the socket's own inode, which is set
// to perm before the bind. A chmod after the bind then restores any bit the
// umask took away (0660 under umask 022 would be 0640). Elsewhere only that
// chmod applies, so between bind and chmod the file has the umask's mode.
func Listen(path string, perm os.FileMode) (*net.UnixListener, error) {
	ln, err := bind(path, perm)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, perm); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	return ln, nil
}

// bind is Listen without the final chmod.
func bind(path string, perm os.FileMode) (*net.UnixListener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = setModeBeforeBind(fd, perm) }); cerr != nil {
			return cerr
		}
		return err
	}}
	ln, err := lc.Listen(context.Background(), "unix", path)
	if err != nil {
		return nil, err
	}
	return ln.(*net.UnixListener), nil
}
