package broker

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred reads SO_PEERCRED: the pid and uid of the process that
// connected, translated into the broker's namespaces (a sandboxed skill's
// mapped uid, its pid as the host sees it).
func peerCred(c *net.UnixConn) (peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return peer{}, err
	}
	if serr != nil {
		return peer{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return peer{pid: cred.Pid, uid: cred.Uid}, nil
}
