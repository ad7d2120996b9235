//go:build linux

package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/sandbox"
)

// gatedSkill writes a skill that waits at a FIFO in its folder until the
// test opens it (openGate), then prints {}: a sleeping sandbox that ends in
// success when the test says so, however long the others took to start.
func (e *env) gatedSkill(name, frontmatter string) string {
	e.t.Helper()
	dir := e.skill(name, frontmatter, "#!/bin/sh\nread x < /skill/gate\necho '{}'\n")
	if err := unix.Mkfifo(filepath.Join(dir, "gate"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// openGate lets every skill waiting at dir's gate go on: opening the FIFO
// wakes the readers blocked in their open, and closing it gives them EOF.
func openGate(t testing.TB, dir string) {
	t.Helper()
	fd, err := unix.Open(filepath.Join(dir, "gate"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Errorf("open the gate: %v", err)
		return
	}
	unix.Close(fd)
}

// atGate lists the host pids of this env's skills waiting at their gate:
// the skill's shell (comm "main", in one of the env's cgroups) asleep in
// the open of the FIFO.
func atGate(e *env) []int {
	var pids []int
	for _, pid := range envProcs(e) {
		if waitingAtGate(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitingAtGate reports whether pid is a gated skill's shell (comm "main")
// asleep in the open of its FIFO: opening the gate before then would not
// release it.
func waitingAtGate(pid int) bool {
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) != "main" {
		return false
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	nr, _, _ := strings.Cut(string(b), " ")
	return nr == strconv.Itoa(unix.SYS_OPENAT) || nr == strconv.Itoa(unix.SYS_OPEN)
}

// keyUsers reads /proc/key-users: how many keys each host uid holds.
func keyUsers(t *testing.T) map[int]int {
	t.Helper()
	f, err := os.Open("/proc/key-users")
	if err != nil {
		t.Fatalf("this kernel has no key accounting to check: %v", err)
	}
	defer f.Close()
	out := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "  uid:  usage nkeys/nikeys qnkeys/maxkeys qnbytes/maxbytes"
		fl := strings.Fields(sc.Text())
		if len(fl) < 3 {
			continue
		}
		uid, err1 := strconv.Atoi(strings.TrimSuffix(fl[0], ":"))
		nkeys, _, _ := strings.Cut(fl[2], "/")
		n, err2 := strconv.Atoi(nkeys)
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/key-users: unexpected line %q", sc.Text())
		}
		out[uid] = n
	}
	return out
}

// TestKeyringNoneMadePerSandbox: a running sandbox holds no kernel key of
// its own. libcontainer made a session keyring in every container,
// charged to the sandbox's host uid, so the kernel's per-uid key quota
// (kernel.keys.maxkeys, 200 by default) capped the sandboxes sharing a uid:
// at 500 sleeping skills on one uid, 300 failed with "unable to join
// session keyring: disk quota exceeded". Skills cannot use keyrings (no
// profile allows keyctl, add_key or request_key), so none is made.
func TestKeyringNoneMadePerSandbox(t *testing.T) {
	e := newEnv(t)
	dir := e.gatedSkill("keyring", "effort_minutes: 10\n")
	before := keyUsers(t)
	done, ended := make(chan result, 1), make(chan struct{})
	go func() {
		defer close(ended)
		done <- e.run(dir, "--deadline", slow(90*time.Second).String())
	}()
	t.Cleanup(func() { // a failed test still ends the run before its env goes
		openGate(t, dir)
		select {
		case <-ended:
		case <-time.After(slow(90 * time.Second)):
		}
	})
	var pids []int
	waitFor(t, 60*time.Second, func() bool { pids = atGate(e); return len(pids) == 1 })
	start := statusUID(t, pids[0]) - sandbox.SkillUID
	for uid, n := range keyUsers(t) {
		if uid >= start && uid < start+sandbox.IDRangeSize && n > before[uid] {
			t.Errorf("host uid %d (in the sandbox's range %d-%d) holds %d keys, %d before the sandbox started: a keyring was made for the sandbox",
				uid, start, start+sandbox.IDRangeSize-1, n, before[uid])
		}
	}
	openGate(t, dir)
	select {
	case r := <-done:
		r.mustOutcome(t, "success")
	case <-time.After(slow(60 * time.Second)):
		t.Fatal("the skill did not end after its gate opened")
	}
}

// envProcs lists the host pids in any of this env's cgroups.
func envProcs(e *env) []int {
	parent := ":" + sandbox.CgroupParentFor(e.runDir) + "/"
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); strings.Contains(string(b), parent) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// describeProcs names each pid with its command line, state and kernel
// wait channel, for a failure message.
func describeProcs(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		state := ""
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2 : i+3])
		}
		fmt.Fprintf(&b, "\n  pid %d state %s wchan %s: %q", pid, state, wchan, strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return b.String()
}

// envCgroups lists the invocation cgroups left under this env's parent,
// in every mounted hierarchy.
func envCgroups(e *env) []string {
	name := strings.TrimPrefix(sandbox.CgroupParentFor(e.runDir), "/")
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	v2, _ := filepath.Glob("/sys/fs/cgroup/" + name)
	var left []string
	for _, r := range append(roots, v2...) {
		ents, _ := os.ReadDir(r)
		for _, ent := range ents {
			if ent.IsDir() {
				left = append(left, filepath.Join(r, ent.Name()))
			}
		}
	}
	return left
}

// scaleNEnv sets how many sleeping sandboxes TestScaleManySleepingSandboxes
// holds at once (default defaultScaleN).
const scaleNEnv = "CYBEROS_SCALE_N"

// defaultScaleN is above the 200 sandboxes one daemon could run at once
// while every sandbox charged a key to one host uid.
const defaultScaleN = 300

// TestScaleManySleepingSandboxes: one daemon holds N sleeping sandboxes at
// once (all started, all waiting), every one of them then ends in success,
// and nothing is left: no cgroup, process, container state, lock, mount or
// broker socket. Meanwhile the daemon's RSS grows by less than 1 MiB per
// running invocation, and after the burst it hands the memory back.
func TestScaleManySleepingSandboxes(t *testing.T) {
	n := defaultScaleN
	if s := os.Getenv(scaleNEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", scaleNEnv, s)
		}
	}
	e := newEnv(t)
	e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	dir := e.gatedSkill("sleeper", "effort_minutes: 30\n")
	// Cold starts only: the sandboxes counted, and the "nothing left" at the
	// end, are the invocations' (warm ones are TestWarm*'s).
	d := startDaemon(t, e, fmt.Sprintf("max_concurrent: %d", n), "shutdown_grace: 0s", "warm: {max_sandboxes: 0}")
	t.Cleanup(func() { openGate(t, dir) }) // before the daemon stops
	pid := d.cmd.Process.Pid
	for range 3 { // warm up: the rootfs skeleton, the store
		if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
			t.Fatalf("warm-up: %d %s", code, raw)
		}
	}
	// Idle: the warm-up's sandboxes torn down.
	waitFor(t, 30*time.Second, func() bool { return len(envProcs(e)) == 0 && len(envCgroups(e)) == 0 })
	idle := vmRSS(t, pid)

	codes := make([]int, n)
	envs := make([]envelope, n)
	raws := make([]string, n)
	var wg sync.WaitGroup
	var answered atomic.Int64 // before the gate opens: failures
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], envs[i], raws[i] = d.invoke(map[string]any{"skill_id": "sleeper"})
			answered.Add(1)
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	// Scanning /proc costs CPU the starts need: look twice a second.
	held, deadline, lastLog := 0, time.Now().Add(slow(2*time.Minute+time.Duration(n)*200*time.Millisecond)), time.Now()
	for held < n && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		held = len(atGate(e))
		if held+int(answered.Load()) >= n { // the rest failed
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("%v: %d sandboxes held, daemon RSS %d KiB", time.Since(t0).Round(time.Second), held, vmRSS(t, pid))
		}
	}
	heldAfter := time.Since(t0)
	busy := vmRSS(t, pid)
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	t.Logf("%d of %d sandboxes held at once after %v; daemon RSS %d KiB idle, %d KiB with them (%d KiB per invocation), %d fds, %s",
		held, n, heldAfter.Round(time.Millisecond), idle, busy, (busy-idle)/int64(n), len(fds), threads(t, pid))
	openGate(t, dir)
	select {
	case <-all:
	case <-time.After(slow(2*time.Minute + time.Duration(n)*100*time.Millisecond)):
		t.Fatalf("the invocations did not all end after their gate opened")
	}
	failed := 0
	for i := range n {
		if codes[i] != 200 || envs[i].Outcome != "success" {
			if failed++; failed <= 5 {
				t.Errorf("invocation %d: HTTP %d outcome %q: %s %s", i, codes[i], envs[i].Outcome, envs[i].ErrorMessage, raws[i])
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d invocations failed", failed, n)
	}
	if held != n {
		t.Fatalf("only %d of %d sandboxes were running at once", held, n)
	}
	if perInv := (busy - idle) / int64(n); perInv >= 1024 {
		t.Errorf("daemon RSS grew by %d KiB per running invocation (%d KiB idle, %d KiB with %d), want < 1024", perInv, idle, busy, n)
	}

	// Nothing left behind.
	if st := d.status(); st.ActiveInvocations != 0 {
		t.Errorf("after every answer: %d active invocations", st.ActiveInvocations)
	}
	waitFor(t, 30*time.Second, func() bool { return len(envProcs(e)) == 0 && len(envCgroups(e)) == 0 })
	if p, c := envProcs(e), envCgroups(e); len(p) > 0 || len(c) > 0 {
		t.Errorf("left behind: processes %v, cgroups %v", p, c)
	}
	if socks, _ := os.ReadDir(d.socketDir); len(socks) > 0 {
		t.Errorf("%d broker sockets left in %s", len(socks), d.socketDir)
	}
	assertNothingLeft(t, e)

	// The burst's memory goes back to the OS once it is over.
	var after int64
	waitFor(t, 30*time.Second, func() bool {
		after = vmRSS(t, pid)
		return after-idle <= (busy-idle)/2
	})
	t.Logf("daemon RSS after the burst: %d KiB (%s)", after, threads(t, pid))
	if after-idle > (busy-idle)/2 {
		t.Errorf("daemon RSS %d KiB after the burst, %d KiB at its peak and %d KiB before: less than half of the growth was returned", after, busy, idle)
	}
}

// threads reads the Threads line of pid's status.
func threads(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strings.TrimSpace(v) + " threads"
		}
	}
	return "threads unknown"
}
