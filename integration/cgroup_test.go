//go:build linux

package integration

// The cgroup side of the sandbox as the kernel shows it: which layout the
// product detects, the limits written into the skill's cgroup files, and the
// deadline's kill reaching every process of the cgroup. On a cgroup v2 host
// (the VM of scripts/vm, where CYBEROS_EXPECT_CGROUP_MODE=unified makes any
// other layout a failure) the assertions read the v2 files.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/sandbox"
)

// expectModeEnv, when set (the VM sets "unified"), is the cgroup layout the
// tests must find; any other layout fails them.
const expectModeEnv = "CYBEROS_EXPECT_CGROUP_MODE"

// kernelCgroupMode names the layout mounted at /sys/fs/cgroup by the
// filesystem types the kernel reports, independently of the product's
// detection: "unified", "hybrid", "legacy" or "unavailable".
func kernelCgroupMode(t *testing.T) string {
	t.Helper()
	isCgroup2 := func(p string) bool {
		var st unix.Statfs_t
		return unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
	}
	var st unix.Statfs_t
	switch {
	case isCgroup2("/sys/fs/cgroup"):
		return "unified"
	case isCgroup2("/sys/fs/cgroup/unified"):
		return "hybrid"
	case unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.TMPFS_MAGIC:
		return "legacy"
	}
	return "unavailable"
}

// TestCgroupModeDetected: `cyberos doctor` and a run's containment report
// the layout the kernel has mounted, with memory, pids and cpu usable; where
// CYBEROS_EXPECT_CGROUP_MODE is set, that layout must be the expected one.
func TestCgroupModeDetected(t *testing.T) {
	e := newEnv(t)
	kernel := kernelCgroupMode(t)
	if want := os.Getenv(expectModeEnv); want != "" && kernel != want {
		t.Fatalf("the kernel mounts a %s cgroup layout; %s=%s", kernel, expectModeEnv, want)
	}
	got := doctor(t)
	if f := got["cgroup mode"]; !f.OK || f.Detail != kernel {
		t.Errorf("doctor says cgroup mode %+v; the kernel mounts %s", f, kernel)
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		f := got["cgroup "+c]
		if !f.OK {
			t.Errorf("doctor: controller %s not usable: %s", c, f.Detail)
		}
		if kernel == "unified" && !strings.HasPrefix(f.Detail, "v2 controller") {
			t.Errorf("doctor: controller %s is %q on a cgroup v2 host", c, f.Detail)
		}
	}
	r := e.run(e.skill("mode", "", "#!/bin/sh\necho '{}'\n"))
	r.mustOutcome(t, "success")
	if r.env.Containment.CgroupMode != kernel {
		t.Errorf("containment.cgroup_mode %q; the kernel mounts %s", r.env.Containment.CgroupMode, kernel)
	}
}

// skillCgroupDirs maps each hierarchy's directory of pid's cgroup, from
// /proc/PID/cgroup: "" for the v2 tree, else the v1 hierarchy's directory
// name under /sys/fs/cgroup (e.g. "memory", "cpu,cpuacct").
func skillCgroupDirs(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			root := "/sys/fs/cgroup"
			if fileExists("/sys/fs/cgroup/unified/cgroup.controllers") {
				root = "/sys/fs/cgroup/unified"
			}
			dirs[""] = filepath.Join(root, parts[2])
		default:
			name := strings.TrimPrefix(parts[1], "name=")
			dirs[parts[1]] = filepath.Join("/sys/fs/cgroup", name, parts[2])
		}
	}
	return dirs
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sleeperCgroups runs a skill that sleeps (found by its argument, secs)
// under frontmatter and returns its cgroup dirs (skillCgroupDirs) while it
// runs; the test's cleanup ends it.
func sleeperCgroups(t *testing.T, e *env, name, frontmatter, secs string) map[string]string {
	t.Helper()
	dir := e.skill(name, frontmatter, "#!/bin/sh\nexec /bin/sleep "+secs+"\n")
	done := make(chan result, 1)
	go func() { done <- e.run(dir, "--deadline", "30s") }()
	var pids []int
	waitFor(t, 20*time.Second, func() bool { pids = procsMatching("sleep " + secs); return len(pids) > 0 })
	t.Cleanup(func() {
		for _, p := range pids {
			_ = killPid(p)
		}
		<-done
	})
	return skillCgroupDirs(t, pids[0])
}

// TestCgroupLimitsApplied: x-cpu 0.5, x-pids-max 32 and x-memory-mb 128
// are in the skill's cgroup files, read from the host while it runs: on v2
// cpu.max "50000 100000", pids.max 32, memory.max 128 MiB and
// memory.swap.max 0; on v1 cpu.cfs_quota_us 50000, pids.max 32 and
// memory.limit_in_bytes 128 MiB.
func TestCgroupLimitsApplied(t *testing.T) {
	e := newEnv(t)
	dirs := sleeperCgroups(t, e, "capped", "x-cpu: 0.5\nx-pids-max: 32\nx-memory-mb: 128\n", "27182")
	want := map[string]string{}
	switch kernelCgroupMode(t) {
	case "unified":
		v2 := dirs[""]
		want[filepath.Join(v2, "cpu.max")] = "50000 100000"
		want[filepath.Join(v2, "pids.max")] = "32"
		want[filepath.Join(v2, "memory.max")] = strconv.Itoa(128 << 20)
		want[filepath.Join(v2, "memory.swap.max")] = "0"
	default:
		cpu := dirs["cpu,cpuacct"]
		if cpu == "" {
			cpu = dirs["cpu"]
		}
		want[filepath.Join(cpu, "cpu.cfs_quota_us")] = "50000"
		want[filepath.Join(cpu, "cpu.cfs_period_us")] = "100000"
		want[filepath.Join(dirs["pids"], "pids.max")] = "32"
		want[filepath.Join(dirs["memory"], "memory.limit_in_bytes")] = strconv.Itoa(128 << 20)
	}
	for f, w := range want {
		if !strings.Contains(f, e.runDirCgroupParent()) {
			t.Errorf("%s is not under this runner's cgroup parent %s (cgroups %v)", f, e.runDirCgroupParent(), dirs)
			continue
		}
		if got := readTrim(t, f); got != w {
			t.Errorf("%s = %q, want %q", f, got, w)
		}
	}
}

func (e *env) runDirCgroupParent() string { return sandbox.CgroupParentFor(e.runDir) }

// TestDeadlineKillsThroughCgroup: a host process (outside the sandbox's pid
// namespace, so killing the sandbox's init cannot reach it) moved into a
// running skill's cgroup dies by SIGKILL when the deadline ends the skill:
// the kill went through the cgroup (on v2 a cgroup.kill write, which the
// invocation's cgroup must offer).
func TestDeadlineKillsThroughCgroup(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("stubborn2", "effort_minutes: 1\n", "#!/bin/sh\ntrap '' TERM\nexec /bin/sleep 61616\n")
	done := make(chan result, 1)
	// Long enough for a slow sandbox start (the deadline covers it) and the
	// moves below.
	go func() { done <- e.run(dir, "--deadline", "15s") }()
	var pids []int
	waitFor(t, 20*time.Second, func() bool {
		select {
		case r := <-done:
			t.Fatalf("the skill ended before the test saw it: outcome %s, %s\n%s", r.env.Outcome, r.env.ErrorMessage, r.stderr)
		default:
		}
		pids = procsMatching("sleep 61616")
		return len(pids) > 0
	})

	outsider := exec.Command("/bin/sleep", "71717")
	if err := outsider.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- outsider.Wait() }()
	t.Cleanup(func() { _ = outsider.Process.Kill() })

	dirs := skillCgroupDirs(t, pids[0])
	if kernelCgroupMode(t) == "unified" && !fileExists(filepath.Join(dirs[""], "cgroup.kill")) {
		t.Errorf("%s has no cgroup.kill on a cgroup v2 host", dirs[""])
	}
	moved := 0
	for ctl, d := range dirs {
		if !strings.Contains(d, e.runDirCgroupParent()) {
			continue
		}
		err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(outsider.Process.Pid)), 0)
		if err != nil {
			t.Fatalf("move pid %d into %s (%q): %v", outsider.Process.Pid, d, ctl, err)
		}
		moved++
	}
	if moved == 0 {
		t.Fatalf("no cgroup of the skill under %s: %v", e.runDirCgroupParent(), dirs)
	}

	r := <-done
	r.mustOutcome(t, "timeout")
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("the outsider ended with %v, want SIGKILL", err)
		}
		ws := ee.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the outsider ended %v, want killed by SIGKILL", ws)
		}
	case <-time.After(slow(5 * time.Second)):
		t.Fatal("the host process in the skill's cgroup survived the deadline: the kill did not go through the cgroup")
	}
	if hasCgroup(t, r.env.InvocationID) {
		t.Errorf("cgroup of %s left behind", r.env.InvocationID)
	}
}

// parentMemoryEvent reads key from the v2 memory.events of the runner's
// cgroup parent (hierarchical: it counts its children's events); 0 while
// the parent does not exist yet.
func parentMemoryEvent(t *testing.T, e *env, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", e.runDirCgroupParent(), "memory.events"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("memory.events %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("memory.events has no %s: %s", key, b)
	return 0
}
