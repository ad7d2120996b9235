package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/spawn"
)

// Exec starts r.Argv in the container with libcontainer (Init false): it
// joins the container's namespaces and cgroup, and libcontainer applies
// empty capability sets and no_new_privs to it; cyberos-init --exec then
// loads the sandbox's seccomp filter, applies the skill's Landlock rules
// and execs it.
// Its stdio are pipes we own, so a background child holding them open
// cannot block the call past its end: after the process exits, output is
// drained for at most execDrain.
func (p *linuxProcess) Exec(ctx context.Context, r ExecSpec) (ExecExit, error) {
	uid := p.runner.skillUID()
	filter, err := p.filterFile()
	if err != nil {
		return ExecExit{}, err
	}
	defer filter.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return ExecExit{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return ExecExit{}, err
	}
	stdin, err := stdinFile(r.Stdin)
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return ExecExit{}, err
	}
	defer stdin.Close()
	// Through cyberos-init --exec, which loads the seccomp filter, applies
	// the skill's Landlock rules and execs r.Argv in place.
	spec := &spawn.Proc{
		Args: append(withSeccomp(withInitRlimits(p.landlock.initArgs(true), p.initRlimits), execFilterFD, p.filter), r.Argv...), Env: r.Env, UID: uid, GID: uid, Cwd: "/tmp",
		Stdin: stdin, Stdout: outW, Stderr: errW,
	}
	if filter != nil {
		spec.ExtraFiles = []*os.File{filter} // execFilterFD
	}
	copyDone := make(chan struct{}, 2)
	copyOut := func(dst io.Writer, src *os.File) {
		if dst == nil {
			dst = io.Discard
		}
		_, _ = io.Copy(dst, src)
		copyDone <- struct{}{}
	}
	c, err := p.container()
	var proc *spawn.Process
	if err == nil {
		proc, err = c.Run(spec)
	}
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return ExecExit{}, fmt.Errorf("sandbox exec: %w", err)
	}
	outW.Close()
	errW.Close()
	go copyOut(r.Stdout, outR)
	go copyOut(r.Stderr, errR)

	var timedOut bool
	waited := make(chan struct{})
	go func() {
		select {
		case <-waited:
		case <-ctx.Done():
			_ = proc.Signal(unix.SIGKILL)
		case <-time.After(r.Timeout):
			timedOut = true
			_ = proc.Signal(unix.SIGKILL)
		}
	}()
	ws, werr := proc.Wait()
	close(waited)
	// Drain what the process wrote; a background child that keeps the
	// pipes open is cut off.
	drain := time.After(execDrain)
	for range 2 {
		select {
		case <-copyDone:
		case <-drain:
			// os.Pipe's ends are pollable on Linux: deadlines cannot fail.
			_ = outR.SetReadDeadline(time.Now())
			_ = errR.SetReadDeadline(time.Now())
		}
	}
	outR.Close()
	errR.Close()
	ex := ExecExit{TimedOut: timedOut}
	if werr != nil {
		return ex, fmt.Errorf("sandbox exec wait: %w", werr)
	}
	if ws.Signaled() {
		ex.Code, ex.Signal = -1, ws.Signal()
	} else {
		ex.Code = ws.ExitStatus()
	}
	return ex, nil
}

// stdinFile is in as a file for the helper to pass on: a file as it is
// (duplicated, so the caller keeps its own), anything else through a pipe
// fed from here, and nil as an empty one.
func stdinFile(in io.Reader) (*os.File, error) {
	if f, ok := in.(*os.File); ok {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), f.Name()), nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		if in != nil {
			_, _ = io.Copy(pw, in) // EPIPE once the process is gone
		}
		pw.Close()
	}()
	return pr, nil
}

// execDrain bounds how long Exec reads output after the process exited.
const execDrain = 200 * time.Millisecond
