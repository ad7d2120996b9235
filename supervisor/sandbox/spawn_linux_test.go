package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/spawn"
)

// The creation helper's socket to the runner is root's control of every
// sandbox: no sandbox process may hold it. The helper marks its end
// close-on-exec before anything else, so libcontainer's init, which the
// helper forks and execs, never inherits it.
func TestHelperSocketStaysOutOfTheSandbox(t *testing.T) {
	w := newWorld(t)
	warm := w.prewarm(t, "sockleak")
	p := warm.(*linuxProcess)
	defer p.Close()
	helper := w.helperPid(t)
	// The helper's sockets: the runner's, and any libcontainer has open.
	socks := map[string]bool{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", helper))
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		socks[l] = true
		info, err := os.ReadFile(strings.Replace(fd, "/fd/", "/fdinfo/", 1))
		if err != nil {
			continue // closed meanwhile
		}
		var flags int
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				_, _ = fmt.Sscanf(strings.TrimSpace(v), "%o", &flags)
			}
		}
		if flags&unix.O_CLOEXEC == 0 {
			t.Errorf("the helper's socket %s (%s) is not close-on-exec (flags %o)", fd, l, flags)
		}
	}
	if len(socks) == 0 {
		t.Fatal("the helper has no socket open")
	}
	// Every process of the sandbox: its cgroup's members.
	procs, err := os.ReadFile(filepath.Join(cgroupDir(t, p), "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(procs))
	if len(pids) == 0 {
		t.Fatal("no process in the sandbox's cgroup")
	}
	for _, pid := range pids {
		fds, _ := filepath.Glob("/proc/" + pid + "/fd/*")
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); socks[l] {
				t.Errorf("sandbox process %s holds the helper's socket as %s", pid, fd)
			}
		}
	}
}

// cgroupDir is the sandbox's pids cgroup (v1) or its one cgroup (v2).
func cgroupDir(tb testing.TB, p *linuxProcess) string {
	tb.Helper()
	for _, d := range []string{"/sys/fs/cgroup/pids" + p.cgroupPath(), "/sys/fs/cgroup" + p.cgroupPath()} {
		if isDir(d) {
			return d
		}
	}
	tb.Fatalf("no cgroup directory for %s", p.cgroupPath())
	return ""
}

// waitGone waits up to 10 s for process pid to be gone (reaped).
func waitGone(tb testing.TB, pid int) {
	tb.Helper()
	testutil.WaitFor(tb, 10*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err != nil
	})
}

// shortCallBound sets spawn.CallBound to 2 s for the test, so that a
// stopped helper is killed within it.
func shortCallBound(t *testing.T) {
	bound := spawn.CallBound
	spawn.CallBound = 2 * time.Second
	t.Cleanup(func() { spawn.CallBound = bound })
}

// A helper that dies (killed, a crash) costs its sandboxes' waits, not the
// runner: the next call starts a new helper, which ends the old helper's
// sandboxes from their state, so Close leaves nothing behind.
func TestHelperDeathIsSurvived(t *testing.T) {
	w := newWorld(t)
	warm := w.prewarm(t, "orphan")
	p := warm.(*linuxProcess)
	initPid := p.proc.Pid()
	old := w.helperPid(t)
	if err := unix.Kill(old, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return !w.runner.helper.Alive() })
	if err := warm.Close(); err != nil {
		t.Fatalf("Close of a sandbox whose helper died: %v", err)
	}
	if left := cgroupDirs(p); len(left) > 0 {
		t.Errorf("cgroups of %s left after Close: %v", p.id, left)
	}
	waitGone(t, initPid)
	if now := w.helperPid(t); now == old {
		t.Fatalf("the helper %d was not replaced", old)
	}
	w.runOnce(t, "after-helper-death")
	// A sandbox running when its helper dies reports how its skill ended.
	q, err := w.runner.Start(w.spec("running", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(w.helperPid(t), unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitClose(t, q)
}

// A wedged helper (here stopped; in the wild, stuck inside libcontainer)
// must not hang the runner: a call it does not answer within
// spawn.CallBound kills it, the deadline's KillAll still ends the sandbox
// through its cgroup, and the next call starts a new helper, which destroys
// the sandbox from its state.
func TestWedgedHelperIsReplaced(t *testing.T) {
	w := newWorld(t)
	shortCallBound(t)
	warm := w.prewarm(t, "wedged")
	p := warm.(*linuxProcess)
	initPid := p.proc.Pid()
	old := w.helperPid(t)
	if err := unix.Kill(old, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.KillAll() }()
	// The cgroup kill needs no helper: the sandbox is dead long before the
	// call bound ends the stopped helper.
	emptied := testutil.Eventually(time.Until(t0.Add(spawn.CallBound/2)), func() bool {
		pids, err := cgroups.Procs(p.cgroupPath())
		return err == nil && len(pids) == 0
	})
	if !emptied {
		t.Errorf("the sandbox's processes still live %v after KillAll began, with its helper stopped", time.Since(t0))
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("KillAll with a wedged helper: %v", err)
		}
	case <-time.After(spawn.CallBound + 20*time.Second):
		_ = unix.Kill(old, unix.SIGKILL)
		t.Fatalf("KillAll still waits on the stopped helper after %v", time.Since(t0))
	}
	waitGone(t, initPid)
	waitGone(t, old)
	if err := warm.Close(); err != nil {
		t.Fatalf("Close after the wedged helper was killed: %v", err)
	}
	if left := cgroupDirs(p); len(left) > 0 {
		t.Errorf("cgroups of %s left after Close: %v", p.id, left)
	}
	if now := w.helperPid(t); now == old {
		t.Fatalf("the wedged helper %d was not replaced", old)
	}
	w.runOnce(t, "after-wedged-helper")
}

// A helper killed in the middle of a create (here: stopped once the
// sandbox's cgroup exists, then killed by the call bound) never answers
// it, so the runner cannot destroy the container through it: Start fails,
// and the cgroup and whatever the half-made init left are removed anyway.
func TestHelperKilledMidCreateLeavesNothing(t *testing.T) {
	w := newWorld(t)
	shortCallBound(t)
	const id = "midcreate"
	spec := w.spec(id, io.Discard)
	defer w.reserve(t, spec)()
	helper := w.helperPid(t)
	probe := &linuxProcess{runner: w.runner, id: id}
	caught := make(chan bool, 1)
	go func() {
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Microsecond) {
			if len(cgroupDirs(probe)) > 0 {
				caught <- unix.Kill(helper, unix.SIGSTOP) == nil
				return
			}
		}
		caught <- false
	}()
	p, err := w.runner.Start(spec)
	if !<-caught {
		t.Fatal("the sandbox's cgroup never appeared during the create: nothing was stopped mid-way")
	}
	if err == nil {
		_ = p.Close()
		t.Fatal("Start succeeded although its helper was stopped in the middle of the create")
	}
	if !errors.Is(err, spawn.ErrHelperGone) {
		t.Errorf("Start: %v, want ErrHelperGone", err)
	}
	if left := cgroupDirs(probe); len(left) > 0 {
		t.Errorf("cgroups of the half-made %s left: %v", id, left)
	}
	if _, err := os.Stat(filepath.Join(w.runner.stateRoot(), id)); err == nil {
		t.Errorf("state of the half-made %s left", id)
	}
	waitGone(t, helper)
	w.runOnce(t, "after-midcreate")
}

// Close after Wait skips the status call (the init reported and is
// reaped), so what ends a process the pid namespace did not hold must be
// Destroy's failure: a host process moved into the sandbox's cgroup is
// killed, and the cgroup removed, all the same.
func TestCloseAfterWaitKillsWhatIsLeftInTheCgroup(t *testing.T) {
	w := newWorld(t)
	warm := w.prewarm(t, "leftover")
	p := warm.(*linuxProcess)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- sleeper.Wait() }()
	t.Cleanup(func() { _ = sleeper.Process.Kill() })
	procs := filepath.Join(cgroupDir(t, p), "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := warm.Activate(Activation{Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := q.Wait(); err != nil || ex.Code != 0 {
		t.Fatalf("skill ended %+v, %v", ex, err)
	}
	if q.(*linuxProcess).reap == nil {
		t.Fatal("Wait left no reap to Close: this test needs Close's path after a reported exit")
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close with a host process left in the cgroup: %v", err)
	}
	if !q.(*linuxProcess).reaped {
		t.Error("Close did not collect the init's reap")
	}
	if left := cgroupDirs(p); len(left) > 0 {
		t.Errorf("cgroups of %s left after Close: %v", p.id, left)
	}
	select {
	case err := <-ended:
		if ws, ok := sleeper.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the process left in the cgroup ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process left in the sandbox's cgroup survived Close")
	}
}

// Wait returns on init's report and leaves the reap to Close. An init
// that reported but still lives (here: a report forged on a pipe of the
// test's own, while the real init waits for its invocation) is killed by
// Close once reapGrace has passed, and nothing of the sandbox is left.
func TestCloseKillsAnInitThatReportedButLives(t *testing.T) {
	w := newWorld(t)
	warm := w.prewarm(t, "reported-alive")
	p := warm.(*linuxProcess)
	initPid := p.proc.Pid()
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	status := p.status
	t.Cleanup(func() { status.Close() })
	p.status = r
	if _, err := wr.WriteString("exit 0\n"); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	if ex, err := p.Wait(); err != nil || ex.Code != 0 {
		t.Fatalf("Wait on the forged report: %+v, %v", ex, err)
	}
	if err := unix.Kill(initPid, 0); err != nil {
		t.Fatalf("the init is gone before Close (%v): the test needs it alive", err)
	}
	t0 := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Close took %v: it waited on the living init's reap", d)
	}
	waitGone(t, initPid)
	if left := cgroupDirs(p); len(left) > 0 {
		t.Errorf("cgroups of %s left after Close: %v", p.id, left)
	}
}

// BenchmarkExec: one more process in a running sandbox, as the Bash tool
// starts each command (libcontainer joins the sandbox's namespaces and
// cgroup, applies its seccomp filter, and re-executes the creation helper
// to do so; cyberos-init --exec applies Landlock and execs /bin/true).
// Reports the median and p95 of Exec's whole call.
// go test -tags seccomp -run '^$' -bench 'BenchmarkExec$' -benchtime 50x ./supervisor/sandbox/
func BenchmarkExec(b *testing.B) {
	w := newWorld(b)
	warm := w.prewarm(b, "exec-bench")
	defer warm.Close()
	p := warm.(*linuxProcess)
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		ex, err := p.Exec(context.Background(), ExecSpec{Argv: []string{"/bin/true"}, Stdout: io.Discard, Stderr: io.Discard, Timeout: 10 * time.Second})
		lat = append(lat, time.Since(t0))
		if err != nil || ex.Code != 0 {
			b.Fatalf("exec /bin/true: %+v %v", ex, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(median(lat)), "exec-median-ms")
	b.ReportMetric(ms(p95(lat)), "exec-p95-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkAlive: the warm pool's check that a claimed sandbox's init
// still waits (a poll of the control pipe), against asking the helper for
// the container's status (what it did before), in the same run. Each
// warm invocation makes the check twice (claim, Activate).
// go test -tags seccomp -run '^$' -bench 'BenchmarkAlive$' -benchtime 2000x ./supervisor/sandbox/
func BenchmarkAlive(b *testing.B) {
	w := newWorld(b)
	warm := w.prewarm(b, "alive-bench")
	defer warm.Close()
	p := warm.(*linuxProcess)
	c, err := p.container()
	if err != nil {
		b.Fatal(err)
	}
	var poll, status []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		alive := p.Alive()
		t1 := time.Now()
		_, err := c.Status()
		t2 := time.Now()
		if !alive || err != nil {
			b.Fatalf("alive %v, status %v", alive, err)
		}
		poll, status = append(poll, t1.Sub(t0)), append(status, t2.Sub(t1))
	}
	b.StopTimer()
	b.ReportMetric(float64(median(poll).Nanoseconds())/1000, "alive-poll-median-us")
	b.ReportMetric(float64(median(status).Nanoseconds())/1000, "helper-status-median-us")
	b.ReportMetric(0, "ns/op")
}
