package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
)

// macOS has no namespaces, cgroups or seccomp: the runner can only lower
// rlimits in a re-exec shim before exec'ing the skill. It refuses to run
// unless degraded mode is allowed, and always says what it did not enforce.

const shimArg = "rlimit-init"

// notEnforcedDarwin is what this platform cannot do, stated in every
// Containment and in the refusal.
var notEnforcedDarwin = []string{
	"namespaces (pid, mount, network, ipc, uts, user): the skill sees the host",
	"seccomp: every syscall is allowed",
	"landlock: Linux only",
	"cgroups: memory is capped by RLIMIT_AS only, processes by the per-user RLIMIT_NPROC",
	"cpu quota: only total CPU seconds (RLIMIT_CPU)",
	"read-only root and /skill: the skill can write wherever its uid can",
	"capabilities / no_new_privs: not applicable; setuid binaries keep working",
	"kill of the whole tree: only the process group; a setsid child survives",
}

type darwinRunner struct {
	mu     sync.Mutex
	groups map[string]int // invocation id → process group of its skill
}

// New returns the rlimit-only runner.
func New(Options) (Runner, error) { return &darwinRunner{groups: map[string]int{}}, nil }

// Preflight has nothing to check: the rlimit-only runner needs no helper
// binary and no kernel feature.
func Preflight(Options) error { return nil }

// Owns: the skill's processes are its process group.
func (r *darwinRunner) Owns(id string, pid int32) bool {
	r.mu.Lock()
	pg, ok := r.groups[id]
	r.mu.Unlock()
	got, err := unix.Getpgid(int(pid))
	return ok && err == nil && got == pg
}

// Reserve: the skill runs as the supervisor's own user on macOS.
func (*darwinRunner) Reserve(string) (Identity, error) {
	return Identity{UID: os.Getuid(), GID: os.Getgid(), RangeStart: -1, Owner: -1}, nil
}

func (*darwinRunner) Release(string) {}

func (*darwinRunner) Check(spec Spec) (Containment, error) {
	if spec.Recorder != nil {
		return Containment{}, fmt.Errorf("%w: recording system calls needs seccomp (Linux)", ErrUnsupported)
	}
	if !spec.AllowDegraded {
		return Containment{}, fmt.Errorf("%w: macOS can only apply rlimits; not enforceable: %s (rerun with --allow-degraded to accept)", ErrDegraded, strings.Join(notEnforcedDarwin, "; "))
	}
	return darwinContainment(spec), nil
}

func darwinContainment(spec Spec) Containment {
	return Containment{
		Platform:       "darwin",
		UserNamespace:  "none",
		Seccomp:        "none",
		Landlock:       "unavailable: Linux only",
		MemoryMaxBytes: spec.MemoryMB << 20,
		PidsMax:        spec.PidsMax,
		Capabilities:   "not applicable",
		Rlimits:        shimLimits(spec).describe(),
		NotEnforced:    notEnforcedDarwin,
	}
}

func (r *darwinRunner) Start(spec Spec) (Process, error) {
	if spec.Network != nil {
		return nil, fmt.Errorf("%w: a network hook (an MCP server's egress proxy) needs Linux network namespaces", ErrUnsupported)
	}
	cont, err := r.Check(spec)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lim := shimLimits(spec)
	argv := append([]string{shimArg}, lim.args()...)
	argv = append(argv, "--", filepath.Join(spec.SkillDir, spec.Entrypoint))
	cmd := exec.Command(self, argv...)
	cmd.Env = spec.Env
	cmd.Dir = os.TempDir()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var inR, outW *os.File
	if spec.Pipes != nil {
		// The child's ends are files, which exec passes as they are.
		var inW, outR *os.File
		if inR, inW, err = os.Pipe(); err != nil {
			return nil, err
		}
		if outR, outW, err = os.Pipe(); err != nil {
			inR.Close()
			inW.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout = inR, outW
		spec.Pipes.Stdin, spec.Pipes.Stdout = inW, outR
	}
	err = cmd.Start()
	if inR != nil {
		inR.Close()
		outW.Close()
		if err != nil {
			spec.Pipes.Stdin.Close()
			spec.Pipes.Stdout.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox start: %w", err)
	}
	r.mu.Lock()
	r.groups[spec.ID] = cmd.Process.Pid
	r.mu.Unlock()
	return &darwinProcess{runner: r, id: spec.ID, cmd: cmd, cont: cont, latency: time.Since(start)}, nil
}

type rlimits struct{ cpuSec, asBytes, nproc, nofile uint64 }

func shimLimits(spec Spec) rlimits {
	return rlimits{
		cpuSec:  0, // the deadline ends it; RLIMIT_CPU would only count CPU time
		asBytes: uint64(spec.MemoryMB) << 20,
		nproc:   uint64(spec.PidsMax),
		nofile:  1024,
	}
}

func (l rlimits) args() []string {
	return []string{strconv.FormatUint(l.cpuSec, 10), strconv.FormatUint(l.asBytes, 10), strconv.FormatUint(l.nproc, 10), strconv.FormatUint(l.nofile, 10)}
}

func (l rlimits) describe() []string {
	return []string{fmt.Sprintf("as=%d", l.asBytes), fmt.Sprintf("nproc=%d (per user)", l.nproc), fmt.Sprintf("nofile=%d", l.nofile), "core=0"}
}

type darwinProcess struct {
	runner  *darwinRunner
	id      string
	cmd     *exec.Cmd
	cont    Containment
	latency time.Duration
}

func (p *darwinProcess) Terminate() error { return p.cmd.Process.Signal(syscall.SIGTERM) }

// KillAll kills the skill's process group.
func (p *darwinProcess) KillAll() error {
	return unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
}

func (p *darwinProcess) Wait() (Exit, error) {
	err := p.cmd.Wait()
	ps := p.cmd.ProcessState
	if ps == nil {
		return Exit{}, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}, nil
	}
	return Exit{Code: ps.ExitCode()}, nil
}

func (p *darwinProcess) Stats() (cgroups.Stats, error) {
	return cgroups.Stats{}, errors.New("no cgroup accounting on macOS")
}

// OOMKills is 0: no kernel OOM accounting to read here (Stats says so).
func (p *darwinProcess) OOMKills() (uint64, error) { return 0, nil }

func (p *darwinProcess) Close() error {
	p.runner.mu.Lock()
	delete(p.runner.groups, p.id)
	p.runner.mu.Unlock()
	_ = unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	return nil
}

// Exec is refused: without namespaces there is no "inside" to run Bash in,
// and running it on the host would be a silent downgrade.
func (p *darwinProcess) Exec(context.Context, ExecSpec) (ExecExit, error) {
	return ExecExit{}, fmt.Errorf("%w: Bash needs a sandbox to run in", ErrUnsupported)
}

func (p *darwinProcess) Containment() Containment    { return p.cont }
func (p *darwinProcess) StartLatency() time.Duration { return p.latency }

// Reexec runs the rlimit shim when this binary was re-executed as
// "<self> rlimit-init CPU AS NPROC NOFILE -- PROGRAM": it lowers the limits
// and execs PROGRAM with the environment it was given. It never returns then.
func Reexec() {
	if len(os.Args) < 2 || os.Args[1] != shimArg {
		return
	}
	if err := rlimitShim(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "cyberos rlimit shim:", err)
		os.Exit(127)
	}
}
