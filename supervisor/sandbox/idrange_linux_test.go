package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"cyberos.dev/internal/testutil"
)

func testAllocRunner(t *testing.T, ranges int) *LinuxRunner {
	t.Helper()
	r := &LinuxRunner{cfg: Options{RunDir: t.TempDir(), HostIDBase: 2_000_000, IDRanges: ranges}, userNS: true, leases: map[string]*idLease{}}
	if err := os.MkdirAll(r.idRangeDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return r
}

// Each reservation gets a range of its own; when all are held the next is
// refused; a released range is reused; a second Reserve of the same id
// returns the same identity.
func TestIDRangeAllocator(t *testing.T) {
	r := testAllocRunner(t, 2)
	a, err := r.Reserve("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Reserve("b")
	if err != nil {
		t.Fatal(err)
	}
	if a.RangeStart != 2_000_000 || b.RangeStart != 2_000_000+IDRangeSize || a.UID != a.RangeStart+SkillUID {
		t.Fatalf("ranges a %+v b %+v", a, b)
	}
	if again, _ := r.Reserve("a"); again != a {
		t.Fatalf("second Reserve of a: %+v, want %+v", again, a)
	}
	if _, err := r.Reserve("c"); !errors.Is(err, ErrNoIDRange) {
		t.Fatalf("third range: err %v, want ErrNoIDRange", err)
	}
	r.Release("a")
	c, err := r.Reserve("c")
	if err != nil || c.RangeStart != a.RangeStart {
		t.Fatalf("after a's release: %+v %v, want a's range", c, err)
	}
	// Start takes a reservation over: Release is then a no-op and the
	// range stays held until the process lets it go.
	l, err := r.takeLease("c")
	if err != nil || int(l.start) != c.RangeStart {
		t.Fatalf("takeLease: %+v %v", l, err)
	}
	r.Release("c")
	if _, err := r.Reserve("d"); !errors.Is(err, ErrNoIDRange) {
		t.Fatalf("a taken-over range was freed by Release: %v", err)
	}
	l.release()
	if d, err := r.Reserve("d"); err != nil || d.RangeStart != c.RangeStart {
		t.Fatalf("after the lease's release: %+v %v", d, err)
	}
}

// A range held by another process (a running supervisor) is skipped, and
// freed when that process dies: the lock is the kernel's.
func TestIDRangeFreedWithItsHolder(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("flock(1) (util-linux) is not on PATH in CI: the holder test cannot run")
		}
		t.Skip("flock(1) not installed")
	}
	r := testAllocRunner(t, 2)
	// -o: only flock(1) itself holds the lock, not its sleep.
	cmd := exec.Command("flock", "-o", filepath.Join(r.idRangeDir(), "0.lock"), "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for flock(1) to take the lock.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		l, ok := tryLock(filepath.Join(r.idRangeDir(), "0.lock"))
		if ok {
			l.Close()
		}
		return !ok
	})
	id, err := r.Reserve("x")
	if err != nil || id.RangeStart != 2_000_000+IDRangeSize {
		t.Fatalf("with range 0 held elsewhere: %+v %v, want range 1", id, err)
	}
	_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	_ = cmd.Wait()
	// Until it closes its copy of the fd (-o), flock(1)'s child shares the
	// lock, and the SIGKILL may have caught it before: the lock is free once
	// that child has exited too, which Wait (flock(1) only) does not wait for.
	// Wait for range 0's lock to be free.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		l, ok := tryLock(filepath.Join(r.idRangeDir(), "0.lock"))
		if ok {
			l.Close()
		}
		return ok
	})
	y, err := r.Reserve("y")
	if err != nil || y.RangeStart != 2_000_000 {
		t.Fatalf("after the holder died: %+v %v, want range 0", y, err)
	}
}

func TestMoveRlimitsToInit(t *testing.T) {
	cfg := &configs.Config{Rlimits: []configs.Rlimit{
		{Type: unix.RLIMIT_NOFILE, Soft: 1024, Hard: 1024},
		{Type: unix.RLIMIT_CORE, Soft: 0, Hard: 0},
	}}
	args := withInitRlimits([]string{InitBinPath, "--landlock", "7", "--"}, moveRlimitsToInit(cfg))
	want := []string{InitBinPath, "--rlimit", "7:1024:1024", "--rlimit", "4:0:0", "--landlock", "7", "--"}
	if len(cfg.Rlimits) != 0 || len(args) != len(want) {
		t.Fatalf("args %q, rlimits left %v", args, cfg.Rlimits)
	}
	for i := range want {
		if args[i] != want[i] {
			t.Fatalf("args %q, want %q", args, want)
		}
	}
}

// BenchmarkNSHolder: what owning the user namespace adds to a start: the
// holder's fork+exec, its unshare, the two map writes and its exit.
// go test -tags seccomp -run '^$' -bench NSHolder ./supervisor/sandbox/
func BenchmarkNSHolder(b *testing.B) {
	w := newWorld(b)
	for i := 0; i < b.N; i++ {
		h, err := startNSHolder(w.runner.cfg.InitBinary, DefaultHostIDBase)
		if err != nil {
			b.Fatal(err)
		}
		h.stop()
	}
}

// TestProbeUserNS: on this kernel (which allows unprivileged user
// namespaces) the holder's probe answers both questions; when the holder
// cannot run, root's own probe still finds user namespaces available and
// the namespace is not owned, saying why; disabled by configuration, no
// probe runs.
func TestProbeUserNS(t *testing.T) {
	w := newWorld(t)
	userNS, why, owned, ownedWhy := probeUserNS(false, w.runner.cfg.InitBinary, DefaultHostIDBase)
	if !userNS || !owned || why != "" || ownedWhy != "" {
		t.Fatalf("working holder: userNS %v (%q), owned %v (%q); want both", userNS, why, owned, ownedWhy)
	}
	missing := filepath.Join(t.TempDir(), "no-such-init")
	userNS, why, owned, ownedWhy = probeUserNS(false, missing, DefaultHostIDBase)
	if !userNS || why != "" || owned || ownedWhy == "" {
		t.Fatalf("holder that cannot start: userNS %v (%q), owned %v (%q); want a user namespace, not owned, and why", userNS, why, owned, ownedWhy)
	}
	userNS, why, owned, _ = probeUserNS(true, missing, DefaultHostIDBase)
	if userNS || owned || why != "disabled by configuration" {
		t.Fatalf("disabled: userNS %v (%q), owned %v", userNS, why, owned)
	}
}
