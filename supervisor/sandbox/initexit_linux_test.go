package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/cgroups"
	"cyberos.dev/internal/testutil"
)

// TestWaitReturnsWithTheSandboxEmpty: a skill that leaves a process behind,
// detached from its output pipes so that nothing else holds Wait back, has
// no process left in its sandbox but the exiting init when Wait returns,
// started cold and warm: cyberos-init kills and reaps what is left before
// it reports and closes its ends of the pipes Wait reads.
func TestWaitReturnsWithTheSandboxEmpty(t *testing.T) {
	w := newWorld(t)
	script := "#!/bin/sh\n/bin/sleep 1000 </dev/null >/dev/null 2>&1 &\n"
	if err := os.WriteFile(filepath.Join(w.skillDir, "main"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(name string, p Process) {
		t.Helper()
		ex, err := p.Wait()
		lp := p.(*linuxProcess)
		procs, perr := cgroups.Procs(lp.cgroupPath())
		left := slices.DeleteFunc(procs, func(pid int) bool { return pid == lp.proc.Pid() })
		if err != nil || ex.Code != 0 || ex.Signal != nil {
			t.Errorf("%s: skill ended %+v, %v; want exit 0", name, ex, err)
		}
		if perr != nil || len(left) > 0 {
			t.Errorf("%s: processes left in the sandbox when Wait returned: %v (%v)", name, left, perr)
		}
		if err := p.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}

	spec := w.spec("orphan-cold", io.Discard)
	release := w.reserve(t, spec)
	p, err := w.runner.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	check("cold", p)
	release()

	warm := w.prewarm(t, "orphan-warm")
	if p, err = warm.Activate(Activation{Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check("warm", p)
}

// TestInitReportsWhenAProcessWillNotDie: cyberos-init, as a pid
// namespace's init, waits a bounded time (REAP_GRACE_MS) for what it killed
// when its skill ended, then reports anyway: a process the kernel keeps
// must not keep Wait from returning. The kept process is one a cgroup v1
// freezer holds (a frozen task there does not die of SIGKILL until thawed).
func TestInitReportsWhenAProcessWillNotDie(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/freezer/cgroup.procs"); err != nil {
		t.Skip("no cgroup v1 freezer on this host: nothing here keeps a SIGKILLed process alive")
	}
	_, initBin := hostInit(t, 0o755)
	cg := filepath.Join("/sys/fs/cgroup/freezer", fmt.Sprintf("cyberos-test-freeze-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	thaw := func() { _ = os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644) }
	t.Cleanup(func() {
		thaw()
		testutil.WaitFor(t, 10*time.Second, func() bool { return os.Remove(cg) == nil })
	})
	// The skill leaves a sleep frozen in cg and ends.
	script := `sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > ` + cg + `/cgroup.procs && echo FROZEN > ` + cg + `/freezer.state &&
while [ "$(cat ` + cg + `/freezer.state)" != FROZEN ]; do sleep 0.01; done`
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	cmd := exec.Command(initBin, "--", "/bin/sh", "-c", script)
	cmd.ExtraFiles = []*os.File{sw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sw.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t0 := time.Now()
	_ = sr.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(sr)
	took := time.Since(t0)
	if err != nil || string(b) != "exit 0\n" {
		t.Fatalf("status %q, %v after %v; want \"exit 0\" while the frozen process lives", b, err, took)
	}
	select {
	case err := <-waited:
		t.Fatalf("init exited (%v) with a process of its namespace still frozen", err)
	default:
	}
	thaw()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("init did not exit once the frozen process was thawed and died")
	}
}

// TestInitOutsideAPidNamespaceKillsNothing: cyberos-init kills what its
// skill left only as pid 1 of a pid namespace. Run on the host (as tests
// do), kill(-1) would reach every process of its uid, and as root every
// process of the host: a process of the same uid, not its child, outlives
// its skill's end. An otherwise unused uid keeps a failure to that process.
func TestInitOutsideAPidNamespaceKillsNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	_, initBin := hostInit(t, 0o755)
	cred := &syscall.Credential{Uid: 54321, Gid: 54321}
	bystander := exec.Command("/bin/sleep", "60")
	bystander.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	gone := make(chan error, 1)
	go func() { gone <- bystander.Wait() }()
	t.Cleanup(func() { _ = bystander.Process.Kill(); <-gone })
	code, status, stderr := runHostInit(t, initBin, []string{"--", "/bin/true"},
		func(status *os.File) []*os.File { return []*os.File{status} }, &syscall.SysProcAttr{Credential: cred})
	if code != 0 || status != "exit 0\n" {
		t.Fatalf("init: exit %d, status %q, stderr %q; want 0, \"exit 0\"", code, status, stderr)
	}
	select {
	case err := <-gone:
		gone <- err
		t.Fatalf("a process of init's uid outside its sandbox was killed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}
