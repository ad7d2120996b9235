package broker

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred reads LOCAL_PEERPID and LOCAL_PEERCRED, macOS's SO_PEERCRED.
func peerCred(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var pid int
	var cred *unix.Xucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		pid, serr = unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID)
		if serr == nil {
			cred, serr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		}
	}); err != nil {
		return peer{}, err
	}
	if serr != nil {
		return peer{}, fmt.Errorf("peer credentials: %w", serr)
	}
	return peer{pid: int32(pid), uid: cred.Uid}, nil
}
