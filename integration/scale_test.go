package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cyberos/supervisor/supervisor/sandbox"
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
	parent := ":" + sandbox.CgroupParentFor(e.runDir) + "/"
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) != "main" {
			continue
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(string(b), parent) {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if nr, _, _ := strings.Cut(string(b), " "); nr == strconv.Itoa(unix.SYS_OPENAT) || nr == strconv.Itoa(unix.SYS_OPEN) {
			pids = append(pids, pid)
		}
	}
	return pids
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
