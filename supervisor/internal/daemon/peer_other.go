//go:build !linux

package daemon

import "net"

// peer is who is on the other end of an admin connection. Outside Linux
// there is no SO_PEERCRED here: no peer is recognised, so only the socket
// file's mode protects it, and every request is refused (fail closed).
type peer struct {
	pid, uid, gid int
	ok            bool
}

func peerOf(net.Conn) peer { return peer{} }

func (peer) inGroup(int) bool { return false }
