package cgroups

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// Tests against the real kernel. They create cgroups named
// /cyberos-test-<random> directly in DefaultRoot (v1: memory, pids,
// freezer, and more where a test says so; v2: the unified tree) and
// remove them in t.Cleanup. Children run in them are this test binary
// re-executed in a helper mode (see TestMain) that blocks on a pipe until
// the test has written its pid to cgroup.procs, so even its first fork
// happens inside the cgroup.
//
// The cgroups are made with mkdir and file writes, not containerd's
// cgroup1/cgroup2 packages: those need modules missing from go.sum
// (google.golang.org/protobuf, github.com/containerd/log).

const helperEnv = "CYBEROS_CGROUPS_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "oom":
		waitGate()
		hogMemory()
	case "exec":
		waitGate()
		bin, err := exec.LookPath(os.Args[1])
		if err == nil {
			err = syscall.Exec(bin, os.Args[1:], os.Environ())
		}
		fmt.Fprintln(os.Stderr, "helper exec:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode")
		os.Exit(2)
	}
}

// waitGate blocks until the test writes to (or closes) fd 3, which it does
// once this process is in the test cgroup.
func waitGate() {
	gate := os.NewFile(3, "gate")
	_, _ = gate.Read(make([]byte, 1))
	gate.Close()
}

// hogMemory touches memory until the OOM killer ends the process; exit 3
// means 1 GiB fit, so the limit did not hold.
func hogMemory() {
	var hog [][]byte
	for range 1024 {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hog = append(hog, b)
	}
	fmt.Fprintln(os.Stderr, "allocated", len(hog), "MiB without being killed")
	os.Exit(3)
}

// testCgroup is a cgroup this test created.
type testCgroup struct {
	h    Hierarchy
	path string   // e.g. /cyberos-test-1a2b3c4d
	dirs []string // its directory in each hierarchy it was made in
}

type cgOpts struct {
	memory, pids int64    // limits; 0 = none
	v1Extra      []string // v1 controllers beyond memory, pids, freezer
	unified      bool     // in Hybrid, also join the unified tree (as libcontainer does)
}

// testHierarchies are the real hierarchies of this host to run tests in:
// System(), and on a Hybrid host also its cgroup2 mount as a Unified
// hierarchy (no memory or pids controllers there, but real cgroup.kill,
// cgroup.freeze and cgroup.procs), so the v2 code runs on a real kernel.
func testHierarchies(t *testing.T) map[string]Hierarchy {
	testutil.RequiresRoot(t)
	hs := map[string]Hierarchy{"system": System()}
	if hs["system"].Mode == Hybrid {
		hs["v2 at unified"] = Hierarchy{Root: filepath.Join(DefaultRoot, "unified"), Mode: Unified}
	}
	return hs
}

// newTestCgroup creates /cyberos-test-<random> in h, with the limits of o,
// and removes it (after KillAll) in t.Cleanup.
func newTestCgroup(t testing.TB, h Hierarchy, o cgOpts) *testCgroup {
	t.Helper()
	testutil.RequiresRoot(t)
	if h.Mode == Unavailable {
		t.Fatalf("no cgroup hierarchy at %s", h.root())
	}
	c := &testCgroup{h: h, path: "/cyberos-test-" + randomID(t)}
	t.Cleanup(func() { c.remove(t) })

	if h.Mode == Unified {
		if o.memory > 0 || o.pids > 0 {
			// The root cgroup may delegate memory and pids to children.
			writeFile(t, filepath.Join(h.root(), "cgroup.subtree_control"), "+memory +pids")
		}
		c.mkdir(t, h.root())
		d := c.dirs[0]
		if o.memory > 0 {
			writeFile(t, filepath.Join(d, "memory.max"), strconv.FormatInt(o.memory, 10))
			if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
				writeFile(t, filepath.Join(d, "memory.swap.max"), "0")
			}
		}
		if o.pids > 0 {
			writeFile(t, filepath.Join(d, "pids.max"), strconv.FormatInt(o.pids, 10))
		}
		return c
	}

	for _, ctrl := range append([]string{"memory", "pids", "freezer"}, o.v1Extra...) {
		c.mkdir(t, filepath.Join(h.root(), ctrl))
	}
	if o.unified && h.Mode == Hybrid {
		c.mkdir(t, filepath.Join(h.root(), "unified"))
	}
	mem := filepath.Join(h.root(), "memory", c.path)
	if o.memory > 0 {
		writeFile(t, filepath.Join(mem, "memory.limit_in_bytes"), strconv.FormatInt(o.memory, 10))
		// No swap: memsw may only be set once the memory limit is.
		if _, err := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes")); err == nil {
			writeFile(t, filepath.Join(mem, "memory.memsw.limit_in_bytes"), strconv.FormatInt(o.memory, 10))
		}
	}
	if o.pids > 0 {
		writeFile(t, filepath.Join(h.root(), "pids", c.path, "pids.max"), strconv.FormatInt(o.pids, 10))
	}
	return c
}

func (c *testCgroup) mkdir(t testing.TB, tree string) {
	t.Helper()
	d := filepath.Join(tree, c.path)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	c.dirs = append(c.dirs, d)
}

// sub creates child cgroup name in every hierarchy c is in.
func (c *testCgroup) sub(t *testing.T, name string) *testCgroup {
	t.Helper()
	s := &testCgroup{h: c.h, path: c.path + "/" + name}
	for _, d := range c.dirs {
		if err := os.Mkdir(filepath.Join(d, name), 0o755); err != nil {
			t.Fatal(err)
		}
		s.dirs = append(s.dirs, filepath.Join(d, name))
	}
	return s
}

func (c *testCgroup) remove(t testing.TB) {
	if err := c.h.KillAll(c.path); err != nil && !errors.Is(err, ErrNotExist) {
		t.Errorf("cleanup: %v", err)
	}
	for _, d := range c.dirs {
		if err := rmdirTree(d); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// start runs this test binary in helper mode with args, puts it in c (every
// hierarchy) before letting it go on, and kills and reaps it in t.Cleanup
// unless the test waited for it.
func (c *testCgroup) start(t *testing.T, mode string, args ...string) *exec.Cmd {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command(os.Args[0], args...)
	// GOMAXPROCS=1 keeps the helper's runtime threads few: they count
	// towards pids.max.
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "GOMAXPROCS=1")
	cmd.ExtraFiles = []*os.File{r}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		r.Close()
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for _, d := range c.dirs {
		writeFile(t, filepath.Join(d, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))
	}
	if _, err := w.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func randomID(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func writeFile(t testing.TB, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits for cmd with a timeout and returns its wait status.
func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) syscall.WaitStatus {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("pid %d still running after %v", cmd.Process.Pid, timeout)
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func TestRootStatsOOM(t *testing.T) {
	c := newTestCgroup(t, System(), cgOpts{memory: 32 << 20, pids: 16})
	cmd := c.start(t, "oom")
	ws := waitExit(t, cmd, 60*time.Second)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("memory hog ended with %v, want SIGKILL by the OOM killer", cmd.ProcessState)
	}
	st, err := ReadStats(c.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v stats: %+v", c.h.Mode, st)
	if st.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want >= 1", st.OOMKills)
	}
	if n, err := ReadOOMKills(c.path); err != nil || n != st.OOMKills {
		t.Errorf("ReadOOMKills = %d, %v; want Stats' %d", n, err, st.OOMKills)
	}
	// The kernel charges a page or a few past the limit before reclaim and
	// the OOM killer act (seen: limit + 4 KiB), so allow 1 MiB of slack.
	if st.MemoryPeakBytes < 16<<20 || st.MemoryPeakBytes > 33<<20 {
		t.Errorf("MemoryPeakBytes = %d, want between 16 MiB and the 32 MiB limit (+1 MiB slack)", st.MemoryPeakBytes)
	}
	if st.MemoryLimitBytes != 32<<20 {
		t.Errorf("MemoryLimitBytes = %d, want %d", st.MemoryLimitBytes, 32<<20)
	}
	if st.PidsLimit != 16 {
		t.Errorf("PidsLimit = %d, want 16", st.PidsLimit)
	}
	if st.PidsPeak < 1 || st.PidsPeak > 16 {
		t.Errorf("PidsPeak = %d, want 1..16", st.PidsPeak)
	}
}

func TestRootStatsPidsLimit(t *testing.T) {
	c := newTestCgroup(t, System(), cgOpts{memory: 32 << 20, pids: 16})
	// Forks far more than pids.max allows; dash gives up at the first
	// refused fork.
	c.start(t, "exec", "/bin/sh", "-c", `i=0; while [ $i -lt 64 ]; do sleep 1000 & i=$((i+1)); done; wait`)
	var st Stats
	testutil.WaitFor(t, 10*time.Second, func() bool {
		var err error
		st, err = ReadStats(c.path)
		if err != nil {
			t.Fatal(err)
		}
		return st.PidsLimitHits >= 1
	})
	t.Logf("%v stats: %+v", c.h.Mode, st)
	if st.PidsPeak < 2 || st.PidsPeak > 16 {
		t.Errorf("PidsPeak = %d, want 2..16", st.PidsPeak)
	}
	if st.PidsLimit != 16 {
		t.Errorf("PidsLimit = %d, want 16", st.PidsLimit)
	}
	if st.OOMKills != 0 {
		t.Errorf("OOMKills = %d, want 0", st.OOMKills)
	}
	if n, err := ReadOOMKills(c.path); err != nil || n != 0 {
		t.Errorf("ReadOOMKills = %d, %v; want 0", n, err)
	}
	if st.MemoryPeakBytes == 0 {
		t.Errorf("MemoryPeakBytes = 0")
	}
}

func TestRootStatsNotExist(t *testing.T) {
	testutil.RequiresRoot(t)
	absent := "/cyberos-test-absent-" + randomID(t)
	if _, err := ReadStats(absent); !errors.Is(err, ErrNotExist) {
		t.Fatalf("ReadStats of a missing cgroup: %v, want ErrNotExist", err)
	}
	if _, err := ReadOOMKills(absent); !errors.Is(err, ErrNotExist) {
		t.Fatalf("ReadOOMKills of a missing cgroup: %v, want ErrNotExist", err)
	}
}

// procStat returns state and session of pid from /proc/<pid>/stat; ok is
// false when the process is gone.
func procStat(pid int) (state byte, session int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp session ...
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, 0, false
	}
	session, _ = strconv.Atoi(f[3])
	return f[0][0], session, true
}

func TestRootKillAll(t *testing.T) {
	type killCase struct {
		name    string
		h       Hierarchy
		unified bool // Hybrid: also in the unified tree, so cgroup.kill is used
	}
	var cases []killCase
	for name, h := range testHierarchies(t) {
		switch h.Mode {
		case Unified:
			cases = append(cases, killCase{name + " cgroup.kill", h, false})
		case Legacy:
			cases = append(cases, killCase{name + " v1 freezer", h, false})
		case Hybrid:
			cases = append(cases, killCase{name + " v1 freezer", h, false}, killCase{name + " hybrid cgroup.kill", h, true})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := cgOpts{memory: 64 << 20, pids: 64, unified: tc.unified}
			if tc.h.root() != DefaultRoot {
				o.memory, o.pids = 0, 0 // Hybrid's v2 mount has no memory or pids controller
			}
			c := newTestCgroup(t, tc.h, o)
			// Ignores SIGTERM; a grandchild in its own session (setsid)
			// ignoring it too; a subshell forking without pause, so the
			// pid list changes under KillAll.
			cmd := c.start(t, "exec", "/bin/sh", "-c",
				`trap "" TERM; (while :; do /bin/true; done) & setsid sh -c 'trap "" TERM; sleep 1000; :' & sleep 1000; :`)
			var pids []int
			testutil.WaitFor(t, 10*time.Second, func() bool {
				var err error
				if pids, err = c.h.Procs(c.path); err != nil {
					t.Fatal(err)
				}
				sessions := map[int]bool{}
				for _, p := range pids {
					if _, sid, ok := procStat(p); ok {
						sessions[sid] = true
					}
				}
				// sh, its loop subshell, sleep, setsid's sh, its sleep;
				// two sessions.
				return len(pids) >= 5 && len(sessions) >= 2
			})
			t.Logf("tree: %v", pids)
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGTERM) // ignored or not, KillAll must finish the job
			}

			start := time.Now()
			if err := c.h.KillAll(c.path); err != nil {
				t.Fatal(err)
			}
			t.Logf("KillAll took %v", time.Since(start))
			if left, err := c.h.Procs(c.path); err != nil || len(left) != 0 {
				t.Fatalf("after KillAll: Procs = %v, %v; want none", left, err)
			}
			if ws := waitExit(t, cmd, 5*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("outer sh ended with %v, want SIGKILL", cmd.ProcessState)
			}
			// Orphans are reaped by init (or a subreaper); until then they
			// are zombies, which are dead too.
			testutil.WaitFor(t, 5*time.Second, func() bool {
				for _, p := range pids {
					if state, _, ok := procStat(p); ok && state != 'Z' && state != 'X' {
						return false
					}
				}
				return true
			})
		})
	}
}

func TestRootFreeze(t *testing.T) {
	for name, h := range testHierarchies(t) {
		t.Run(name, func(t *testing.T) { testFreeze(t, h) })
	}
}

func testFreeze(t *testing.T, h Hierarchy) {
	c := newTestCgroup(t, h, cgOpts{})
	cmd := c.start(t, "exec", "sleep", "1000")
	// Freeze once the helper has become sleep: a task still in its execve
	// may sit in uninterruptible sleep past the freezer's timeout.
	testutil.WaitFor(t, 5*time.Second, func() bool {
		p, err := c.h.Procs(c.path)
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		return err == nil && len(p) == 1 && strings.TrimSpace(string(comm)) == "sleep"
	})
	file, frozen, thawed := filepath.Join(c.h.root(), "freezer", c.path, "freezer.state"), "FROZEN", "THAWED"
	if c.h.Mode == Unified {
		file, frozen, thawed = filepath.Join(c.h.root(), c.path, "cgroup.freeze"), "1", "0"
	}
	state := func() string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	thaw, err := c.h.freeze(c.path, time.Now().Add(5*time.Second))
	// Thawed before the helper's cleanup kills and waits for it: a frozen
	// v1 task cannot die, so that wait would hang the test binary.
	t.Cleanup(func() { _ = thaw() })
	if err != nil {
		t.Fatal(err)
	}
	if got := state(); got != frozen {
		t.Errorf("after freeze: %s = %q, want %q", file, got, frozen)
	}
	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != thawed {
		t.Errorf("after thaw: %s = %q, want %q", file, got, thawed)
	}
}

// TestRootFreezeKill runs one freeze-kill-thaw round, which is all of v1
// KillAll and v2's fallback for kernels without cgroup.kill (< 5.14).
func TestRootFreezeKill(t *testing.T) {
	for name, h := range testHierarchies(t) {
		t.Run(name, func(t *testing.T) {
			c := newTestCgroup(t, h, cgOpts{})
			cmd := c.start(t, "exec", "/bin/sh", "-c",
				`trap "" TERM; (while :; do /bin/true; done) & setsid sh -c 'trap "" TERM; sleep 1000; :' & sleep 1000; :`)
			testutil.WaitFor(t, 10*time.Second, func() bool {
				p, err := h.Procs(c.path)
				return err == nil && len(p) >= 5
			})
			if err := h.freezeKill(c.path, time.Now().Add(5*time.Second)); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, 2*time.Second, func() bool {
				p, err := h.Procs(c.path)
				return err == nil && len(p) == 0
			})
			if ws := waitExit(t, cmd, 5*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("outer sh ended with %v, want SIGKILL", cmd.ProcessState)
			}
		})
	}
}

func TestRootKillAllNotExist(t *testing.T) {
	testutil.RequiresRoot(t)
	if err := KillAll("/cyberos-test-absent-" + randomID(t)); !errors.Is(err, ErrNotExist) {
		t.Fatalf("KillAll of a missing cgroup: %v, want ErrNotExist", err)
	}
}

func TestRootRemoveLeftovers(t *testing.T) {
	for name, h := range testHierarchies(t) {
		t.Run(name, func(t *testing.T) { testRemoveLeftovers(t, h) })
	}
}

func testRemoveLeftovers(t *testing.T, h Hierarchy) {
	// The parent as the supervisor would own it, in every controller
	// libcontainer uses, here memory, pids, freezer and cpu.
	parent := newTestCgroup(t, h, cgOpts{v1Extra: []string{"cpu"}, unified: true})
	crashed := parent.sub(t, "crashed")
	running := parent.sub(t, "running")
	nested := crashed.sub(t, "nested")
	cmd := crashed.start(t, "exec", "/bin/sh", "-c", `trap "" TERM; setsid sleep 1000 & sleep 1000`)
	nestedCmd := nested.start(t, "exec", "sleep", "1000")
	testutil.WaitFor(t, 10*time.Second, func() bool {
		p, err := h.Procs(crashed.path)
		return err == nil && len(p) >= 4
	})

	removed, err := h.RemoveLeftovers(parent.path, func(id string) bool { return id == "running" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"crashed"}) {
		t.Errorf("removed %v, want [crashed]", removed)
	}
	for _, d := range crashed.dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", d, err)
		}
	}
	for _, d := range running.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("kept cgroup %s: %v", d, err)
		}
	}
	for _, c := range []*exec.Cmd{cmd, nestedCmd} {
		if ws := waitExit(t, c, 5*time.Second); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("pid %d ended with %v, want SIGKILL", c.Process.Pid, c.ProcessState)
		}
	}
}

// BenchmarkStats is the Stats of one sandbox's cgroup (memory and pids
// limits set), which the supervisor reads once per invocation, after the
// skill ended and before its answer.
// go test -run '^$' -bench BenchmarkStats ./cgroups/
func BenchmarkStats(b *testing.B) {
	c := newTestCgroup(b, System(), cgOpts{memory: 32 << 20, pids: 16})
	b.Run("Stats", func(b *testing.B) {
		for b.Loop() {
			st, err := ReadStats(c.path)
			if err != nil {
				b.Fatal(err)
			}
			if st.MemoryLimitBytes != 32<<20 || st.PidsLimit != 16 {
				b.Fatalf("stats %+v: want the 32 MiB and 16 pids limits", st)
			}
		}
	})
	// What an invocation reads before its completed row.
	b.Run("OOMKills", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadOOMKills(c.path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
