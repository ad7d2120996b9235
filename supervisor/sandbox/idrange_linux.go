package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// idLease is one held id range: its lock file stays flocked while a
// sandbox uses the range, so a crashed supervisor's ranges free themselves
// (the kernel drops the lock with the process).
type idLease struct {
	index int
	start uint32 // first host id of the range (the container's root)
	lock  *os.File
}

func (l *idLease) release() {
	if l != nil && l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// identity is what the skill runs as with this lease; owner is the host
// uid owning its user namespace.
func (l *idLease) identity(owner int) Identity {
	id := int(l.start) + SkillUID
	return Identity{UID: id, GID: id, RangeStart: int(l.start), Owner: owner}
}

func (r *LinuxRunner) idRangeDir() string { return filepath.Join(r.cfg.RunDir, "idranges") }

// acquireRange takes the lowest free range.
func (r *LinuxRunner) acquireRange() (*idLease, error) {
	for i := 0; i < r.cfg.IDRanges; i++ {
		lock, ok := tryLock(filepath.Join(r.idRangeDir(), fmt.Sprintf("%d.lock", i)))
		if ok {
			return &idLease{index: i, start: r.cfg.HostIDBase + uint32(i)*IDRangeSize, lock: lock}, nil
		}
	}
	return nil, fmt.Errorf("%w (%d ranges from host id %d; raise userns.ranges)", ErrNoIDRange, r.cfg.IDRanges, r.cfg.HostIDBase)
}

// Reserve takes a range for sandbox id (once; a second call returns the
// same identity).
func (r *LinuxRunner) Reserve(id string) (Identity, error) {
	if !r.userNS {
		return Identity{UID: nobodyUID, GID: nobodyUID, RangeStart: -1, Owner: -1}, nil
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	if l, ok := r.leases[id]; ok {
		return l.identity(r.nsOwner(l)), nil
	}
	l, err := r.acquireRange()
	if err != nil {
		return Identity{}, err
	}
	r.leases[id] = l
	return l.identity(r.nsOwner(l)), nil
}

// Release frees id's reservation unless Start took it over.
func (r *LinuxRunner) Release(id string) {
	r.leaseMu.Lock()
	l := r.leases[id]
	delete(r.leases, id)
	r.leaseMu.Unlock()
	l.release()
}

// takeLease hands id's reservation to Start, or takes a fresh range when
// nothing was reserved.
func (r *LinuxRunner) takeLease(id string) (*idLease, error) {
	r.leaseMu.Lock()
	l, ok := r.leases[id]
	delete(r.leases, id)
	r.leaseMu.Unlock()
	if ok {
		return l, nil
	}
	return r.acquireRange()
}

// nsOwner is the host uid the kernel charges a sandbox's per-user counters
// to: the range's first id when user namespaces are made by a holder
// process of that uid, else root.
func (r *LinuxRunner) nsOwner(l *idLease) int {
	if r.ownedNS {
		return int(l.start)
	}
	return 0
}

// nsHolder is a process of cyberos-init running as the range's first host
// uid, without capabilities, which has made a user namespace and keeps it
// alive until libcontainer has joined it. The kernel makes that uid the
// namespace's owner, so every per-user counter the sandbox uses (inotify
// instances, keys, user namespaces, …) is charged to it in the host's
// namespace, not to root.
type nsHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startNSHolder starts the holder as host uid start and writes its id maps
// (container 0..65535 → start..start+65535); root may write them because
// it has CAP_SETUID and CAP_SETGID in the namespace's parent.
func startNSHolder(initBinary string, start uint32) (*nsHolder, error) {
	cmd := exec.Command(initBinary, "--userns-hold")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: start, Gid: start, Groups: []uint32{}},
		Setsid:     true,
	}
	cmd.Env = []string{}
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace holder: %w", err)
	}
	h := &nsHolder{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		h.stop()
		return nil, fmt.Errorf("user namespace holder (uid %d) failed: %q %s", start, line, strings.TrimSpace(stderr.String()))
	}
	m := fmt.Sprintf("0 %d %d\n", start, IDRangeSize)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f), []byte(m), 0); err != nil {
			h.stop()
			return nil, fmt.Errorf("user namespace holder: %s: %w", f, err)
		}
	}
	return h, nil
}

// path is the holder's user namespace, for libcontainer to join.
func (h *nsHolder) path() string { return fmt.Sprintf("/proc/%d/ns/user", h.cmd.Process.Pid) }

// stop tells the holder to exit (it does when its stdin closes) and reaps
// it in the background, off the start's path; the namespace lives on as
// long as the sandbox's processes are in it.
func (h *nsHolder) stop() {
	if h == nil {
		return
	}
	h.stdin.Close()
	go func() {
		t := time.AfterFunc(holderStopWait, func() { _ = h.cmd.Process.Signal(unix.SIGKILL) })
		_ = h.cmd.Wait()
		t.Stop()
	}()
}

// holderStopWait bounds how long a holder may take to exit once told.
const holderStopWait = 2 * time.Second

// probeOwnedNS reports whether a holder can make a user namespace as an
// unprivileged uid here (some hosts forbid unprivileged user namespaces).
func probeOwnedNS(initBinary string, uid uint32) (bool, string) {
	h, err := startNSHolder(initBinary, uid)
	if err != nil {
		return false, err.Error()
	}
	h.stop()
	return true, ""
}

// moveRlimitsToInit takes cfg's rlimits out of libcontainer's hands and
// returns them as cyberos-init arguments. libcontainer sets them from the
// host with prlimit, which on a namespace owned by the sandbox's uid needs
// CAP_SYS_RESOURCE (a root without it, as in some containers and systemd
// units, is refused); cyberos-init lowering its own limits needs nothing,
// and the skill and the Bash tool's processes inherit them from it.
func moveRlimitsToInit(cfg *configs.Config) []string {
	var args []string
	for _, l := range cfg.Rlimits {
		args = append(args, "--rlimit", fmt.Sprintf("%d:%d:%d", l.Type, l.Soft, l.Hard))
	}
	cfg.Rlimits = nil
	return args
}

// withInitRlimits puts rlimit arguments right after cyberos-init's path.
func withInitRlimits(initArgs, rlimits []string) []string {
	if len(rlimits) == 0 {
		return initArgs
	}
	out := append([]string{initArgs[0]}, rlimits...)
	return append(out, initArgs[1:]...)
}
