package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/supervisor/spawn"
)

// linuxProcess is one running container.
type linuxProcess struct {
	runner *LinuxRunner
	id     string
	// created: the helper made the container, which cleanup destroys.
	created bool
	proc    *spawn.Process // the init
	// reaped: Wait got the init's wait status from the helper, so the
	// pid namespace and every process in it are gone.
	reaped bool
	// reap gets the result of the reap that Wait started and did not
	// wait for (init reported); collectReap takes it.
	reap chan error
	// orphaned: the helper was gone before it answered the create.
	orphaned bool
	lock     *os.File
	lease    *idLease // the sandbox's host id range, held until cleanup
	// initRlimits are cyberos-init's --rlimit arguments (moveRlimitsToInit).
	initRlimits []string
	status      *os.File // read end of cyberos-init's status pipe
	// control is the write end of init's control pipe until activation;
	// stdin, stdout and stderr are our ends of the skill's stdio.
	control, stdin, stdout, stderr *os.File
	// lifeline is the control pipe's write end after activation, held until
	// cleanup: this process holds the only one, so when it dies cyberos-init
	// reads EOF and kills the sandbox (TestSandboxEndsWithItsSupervisor).
	lifeline *os.File
	// copies gets one value as each of stdout and stderr reaches EOF;
	// ncopies is how many of them there are (stderr alone with Pipes).
	copies  chan struct{}
	ncopies int
	notify  *notifyListener
	cont    Containment
	// landlock is what cyberos-init applies, to Exec'd processes too.
	landlock landlockPlan
	// filter is the seccomp program cyberos-init loads, in Exec'd
	// processes too (nil when libcontainer loads the filter: the
	// recorder's, or one seccomp.Compile does not handle).
	filter  *seccomp.Program
	started time.Time
	latency time.Duration
	once    sync.Once
	// spec is what a warm sandbox was made from, to make it again when
	// its init died before activation.
	spec Spec
}

// ID is the sandbox's container id (the leaf of its cgroup path).
func (p *linuxProcess) ID() string { return p.id }

func (p *linuxProcess) Containment() Containment    { return p.cont }
func (p *linuxProcess) StartLatency() time.Duration { return p.latency }

func (p *linuxProcess) cgroupPath() string { return p.runner.cgroupParent + "/" + p.id }

// initFilterFD is where cyberos-init finds its seccomp program (its
// ExtraFiles[2]); an Exec'd process finds it at execFilterFD.
const (
	initFilterFD = 5
	execFilterFD = 3
)

// withSeccomp makes cyberos-init load prog from fd first thing; args are
// unchanged without one (libcontainer loads the filter then).
func withSeccomp(args []string, fd int, prog *seccomp.Program) []string {
	if prog == nil {
		return args
	}
	return append([]string{args[0], "--seccomp", fmt.Sprintf("%d:%d", fd, prog.Flags)}, args[1:]...)
}

// filterFile is p's seccomp program in a sealed memfd for one process of
// the sandbox, or nil when cyberos-init loads none.
func (p *linuxProcess) filterFile() (*os.File, error) {
	if p.filter == nil {
		return nil, nil
	}
	return p.filter.File()
}

// childEnds are the sandbox init's ends of its stdio and control pipes,
// closed in the supervisor once the init has them.
type childEnds struct{ stdin, stdout, stderr, control *os.File }

func (c childEnds) close() {
	for _, f := range []*os.File{c.stdin, c.stdout, c.stderr, c.control} {
		if f != nil {
			f.Close()
		}
	}
}

// openPipes makes the stdio and control pipes; p keeps its own ends.
func (p *linuxProcess) openPipes() (childEnds, error) {
	var c childEnds
	var err error
	pipe := func(r, w **os.File) {
		if err == nil {
			*r, *w, err = os.Pipe()
		}
	}
	pipe(&c.stdin, &p.stdin)
	pipe(&p.stdout, &c.stdout)
	pipe(&p.stderr, &c.stderr)
	pipe(&c.control, &p.control)
	if err != nil {
		c.close()
	}
	return c, err
}

// maxControl is cyberos-init's bound on the control message (MAX_CONTROL).
const maxControl = 64 << 10

// controlMessage is cyberos-init's --control message: NUL-terminated
// fields, the deadline backstop in ms, then the environment, and an empty
// field that ends it (the pipe stays open after it: the lifeline).
func controlMessage(a Activation) ([]byte, error) {
	var ms int64
	if a.Deadline > 0 {
		ms = (a.Deadline + DeadlineBackstop).Milliseconds()
	}
	b := append(strconv.AppendInt(nil, ms, 10), 0)
	for _, kv := range a.Env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("sandbox: environment entry %q is not NAME=value", kv)
		}
		b = append(append(b, kv...), 0)
	}
	b = append(b, 0)
	if len(b) > maxControl {
		return nil, fmt.Errorf("sandbox: the invocation's environment is %d bytes, more than %d", len(b), maxControl)
	}
	return b, nil
}

// Alive reports whether the sandbox's init is still waiting for its
// invocation: a warm sandbox whose init died is never activated. The init
// holds the control pipe's only read end until it reads its invocation, so
// once it died the pipe has no reader, which poll reports as POLLERR on our
// write end: no call to the helper, on the warm path of every invocation.
func (p *linuxProcess) Alive() bool {
	if p.control == nil || !p.created {
		return false
	}
	rc, err := p.control.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		alive = err == nil && n == 1 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) == 0
	})
	return err == nil && alive
}

// activate sends the control message and connects stdio; since is when
// the start began, for StartLatency.
func (p *linuxProcess) activate(a Activation, since time.Time) error {
	msg, err := controlMessage(a)
	if err != nil {
		return err
	}
	if p.control == nil {
		return errors.New("sandbox: already activated")
	}
	if !p.Alive() {
		return errInitGone
	}
	ctl := p.control
	p.control = nil
	if _, err = ctl.Write(msg); err != nil {
		ctl.Close()
		return fmt.Errorf("sandbox: hand the invocation to its init: %w", err)
	}
	p.lifeline = ctl
	p.copies = make(chan struct{}, 2)
	copyOut := func(dst io.Writer, src *os.File) {
		if dst == nil {
			dst = io.Discard
		}
		_, _ = io.Copy(dst, src)
		p.copies <- struct{}{}
	}
	p.ncopies = 1
	go copyOut(a.Stderr, p.stderr)
	in := p.stdin
	p.stdin = nil
	if a.Pipes != nil {
		// The caller's from now on: Wait and Close leave them alone.
		a.Pipes.Stdin, a.Pipes.Stdout = in, p.stdout
		p.stdout = nil
	} else {
		p.ncopies = 2
		go copyOut(a.Stdout, p.stdout)
		go func() {
			if a.Stdin != nil {
				_, _ = io.Copy(in, a.Stdin) // EPIPE once the sandbox is gone
			}
			in.Close()
		}()
	}
	p.latency = time.Since(since)
	return nil
}

func (p *linuxProcess) Terminate() error {
	if p.proc == nil {
		return errors.New("sandbox: not started")
	}
	return p.proc.Signal(unix.SIGTERM)
}

// KillAll kills every process in the sandbox's cgroup, init included, so
// nothing that forked, re-parented or ignores signals survives. That needs
// no helper; signalling init through the helper comes after, as a second
// means, so a helper that does not answer delays only KillAll's return
// (by spawn.CallBound at most), never the kill.
func (p *linuxProcess) KillAll() error {
	err := cgroups.KillAll(p.cgroupPath())
	if c, cerr := p.container(); cerr == nil {
		_ = c.Signal(unix.SIGKILL)
	}
	return err
}

// container is the sandbox's container through the runner's live helper: a
// helper started after the one that made it died loads it from its state.
func (p *linuxProcess) container() (*spawn.Container, error) {
	h, err := p.runner.spawner()
	if err != nil {
		return nil, err
	}
	return h.Container(p.runner.stateRoot(), p.id), nil
}

// Wait waits for the sandbox's init and reports how the skill ended, as
// cyberos-init saw it. When init itself was killed (the deadline, the OOM
// killer) there is no report and init's own status is returned.
//
// It first reads init's status pipe to EOF, which comes when init closes
// it after its report, every other process of the sandbox killed and
// reaped, or when init exits: a pipe read parks the goroutine on the
// runtime's poller, where wait4 would hold an OS thread per waiting
// sandbox. When init reported, Wait returns without waiting for its reap
// (a helper round trip, and init's exit tearing down the namespaces):
// Close collects it.
func (p *linuxProcess) Wait() (Exit, error) {
	report, reported := readInitStatus(p.status)
	reap := make(chan error, 1)
	var ws unix.WaitStatus
	go func() {
		var err error
		ws, err = p.proc.Reap()
		reap <- err
	}()
	p.drainOutput()
	if reported {
		p.reap = reap
		return report, nil
	}
	err := <-reap
	p.reaped = err == nil
	if err != nil {
		return Exit{}, fmt.Errorf("sandbox wait: %w", err)
	}
	if ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}, nil
	}
	return Exit{Code: ws.ExitStatus()}, nil
}

// reapGrace is how long Close waits for the reap of an init that reported
// (its status pipe is at EOF, so it is exiting) before it kills the
// sandbox, in case that init is still alive after all.
const reapGrace = time.Second

// collectReap waits for the reap that Wait left running, if any.
func (p *linuxProcess) collectReap() {
	if p.reap == nil {
		return
	}
	var err error
	select {
	case err = <-p.reap:
	case <-time.After(reapGrace):
		_ = p.KillAll()
		err = <-p.reap
	}
	p.reap = nil
	p.reaped = err == nil
}

// outputDrain bounds how long Wait reads the skill's output after the
// sandbox's init reported or ended. Init (or the kernel, when init itself
// was killed) has killed every other process of the pid namespace by
// then, so the pipes are at EOF unless a process outside the sandbox
// holds one.
const outputDrain = 5 * time.Second

// drainOutput waits for the stdout and stderr copies to reach EOF.
func (p *linuxProcess) drainOutput() {
	if p.copies == nil {
		return
	}
	drain := time.After(outputDrain)
	for range p.ncopies {
		select {
		case <-p.copies:
		case <-drain:
			for _, f := range []*os.File{p.stdout, p.stderr} {
				if f != nil {
					_ = f.SetReadDeadline(time.Now())
				}
			}
			drain = nil
			<-p.copies
		}
	}
	p.copies = nil
}

// readInitStatus parses cyberos-init's one line: "exit N", "signal N",
// "exec ERRNO" or "landlock ERRNO".
func readInitStatus(f *os.File) (Exit, bool) {
	if f == nil {
		return Exit{}, false
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64))
	var n int
	switch {
	case scan(b, "exit %d", &n):
		return Exit{Code: n}, true
	case scan(b, "signal %d", &n):
		return Exit{Code: -1, Signal: syscall.Signal(n)}, true
	case scan(b, "exec %d", &n):
		return Exit{Code: 127, ExecError: syscall.Errno(n).Error()}, true
	case scan(b, "rlimit %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not set its resource limits: " + syscall.Errno(n).Error()}, true
	case scan(b, "control %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not read its invocation: " + syscall.Errno(n).Error()}, true
	case scan(b, "seccomp %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not load its seccomp filter: " + syscall.Errno(n).Error()}, true
	case scan(b, "landlock %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not apply Landlock: " + syscall.Errno(n).Error()}, true
	}
	return Exit{}, false
}

func scan(b []byte, format string, n *int) bool {
	c, err := fmt.Sscanf(string(b), format, n)
	return err == nil && c == 1
}

func (p *linuxProcess) Stats() (cgroups.Stats, error) { return cgroups.ReadStats(p.cgroupPath()) }
func (p *linuxProcess) OOMKills() (uint64, error)     { return cgroups.ReadOOMKills(p.cgroupPath()) }

// network calls hook with the network namespace of p's init, which waits
// for its activation: nothing of the sandbox's entrypoint runs yet.
func (p *linuxProcess) network(hook func(*os.File) ([]string, error)) ([]string, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.proc.Pid()))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if !p.Alive() {
		return nil, errInitGone // the pid may name another process now
	}
	return hook(ns)
}
