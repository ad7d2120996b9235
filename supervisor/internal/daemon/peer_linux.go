package daemon

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// peer is who is on the other end of an admin connection, from SO_PEERCRED.
type peer struct {
	pid, uid, gid int
	ok            bool
}

// peerOf reads the connection's SO_PEERCRED (taken by the kernel at
// connect time, so the peer cannot fake it).
func peerOf(c net.Conn) peer {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return peer{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return peer{}
	}
	return peer{pid: int(cred.Pid), uid: int(cred.Uid), gid: int(cred.Gid), ok: true}
}

// inGroup reports whether the peer holds gid: as its gid at connect time,
// or among the supplementary groups of its process (/proc/<pid>/status).
func (p peer) inGroup(gid int) bool {
	if p.gid == gid {
		return true
	}
	groups, err := procGroups(p.pid)
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

func procGroups(pid int) ([]int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Groups:"); ok {
			var out []int
			for _, s := range strings.Fields(rest) {
				if n, err := strconv.Atoi(s); err == nil {
					out = append(out, n)
				}
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("no Groups: line for pid %d", pid)
}
