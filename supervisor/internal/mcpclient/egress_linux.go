package mcpclient

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// listenInNetNS listens on addr inside the network namespace ns: the
// socket is made by a thread that joined ns for the moment, so it belongs
// to ns while this process serves it. Nothing runs in the sandbox for it.
func listenInNetNS(ns *os.File, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("join the server's network namespace: %w", err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine rather
		// than serve others in the wrong namespace.
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("leave the server's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ln, lerr
}
