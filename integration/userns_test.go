//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/sandbox"
)

// nsGetOwnerUID is NS_GET_OWNER_UID (linux/nsfs.h): the owner of a user
// namespace, as a uid of the caller's namespace.
const nsGetOwnerUID = 0xb704

// inotifyProfiles writes a profiles dir whose "inotify" profile is the
// shipped default plus the inotify calls, for a skill that asks for them.
func inotifyProfiles(t *testing.T, e *env) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "seccomp-profiles", "default.json"))
	must(t, err)
	var p map[string]any
	must(t, json.Unmarshal(b, &p))
	p["syscalls"] = append(p["syscalls"].([]any), map[string]any{
		"names":  []string{"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch"},
		"action": "SCMP_ACT_ALLOW",
	})
	dir := filepath.Join(e.base, "profiles")
	must(t, os.MkdirAll(dir, 0o755))
	out, err := json.Marshal(p)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "inotify.json"), out, 0o644))
	return dir
}

// heldPids are the host pids of this env's inotifyhold skills that are
// holding (their comm says so), by invocation id (the leaf of their
// cgroup).
func heldPids(e *env) map[string]int {
	out := map[string]int{}
	parent := sandbox.CgroupParentFor(e.runDir) + "/"
	for _, pid := range procsMatching("/skill/main") {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) != "inotify-held" {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		for _, line := range strings.Split(string(b), "\n") {
			if _, path, ok := strings.Cut(line, parent); ok {
				out[strings.SplitN(path, "/", 2)[0]] = pid
				break
			}
		}
	}
	return out
}

// statusUID is the real uid in /proc/PID/status (a host uid: we read it
// from the host's namespace).
func statusUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			n, err := strconv.Atoi(f[1])
			must(t, err)
			return n
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}

// usernsOwner is the host uid owning pid's user namespace.
func usernsOwner(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	must(t, err)
	defer f.Close()
	uid, err := unix.IoctlGetUint32(int(f.Fd()), nsGetOwnerUID)
	must(t, err)
	return int(uid)
}

func inotifyFds(pid int) int {
	n := 0
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range ents {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// TestInotifyExhaustionIsContained: a skill whose profile allows inotify
// takes every instance it can (up to 200); meanwhile host root can still
// create 50. The kernel charges inotify instances to the uid that owns the
// user namespace (and each ancestor's owner): a namespace made by root
// charged the skill's instances to root, whose 128 (max_user_instances)
// the skill exhausted; each sandbox's namespace is now owned by its own
// unprivileged host uid.
func TestInotifyExhaustionIsContained(t *testing.T) {
	e := newEnv(t)
	profiles := inotifyProfiles(t, e)
	dir := e.skill("inotify-hog", "x-seccomp-profile: inotify\n", "probe:inotifyhold")
	done := make(chan result, 1)
	go func() {
		done <- e.run(dir, "--deadline", slow(60*time.Second).String(), "--seccomp-profiles", profiles)
	}()
	var pid int
	waitFor(t, 30*time.Second, func() bool {
		for _, p := range heldPids(e) {
			pid = p
			return true
		}
		select {
		case r := <-done:
			t.Fatalf("the skill ended before holding its instances: %s\n%s", r.stdout, r.stderr)
		default:
		}
		return false
	})
	skillHeld := inotifyFds(pid)
	var fds []int
	for range 50 {
		if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err == nil {
			fds = append(fds, fd)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	must(t, unix.Kill(pid, unix.SIGTERM))
	r := <-done
	r.mustOutcome(t, "success")
	var got struct {
		Held  int    `json:"held"`
		Errno string `json:"errno"`
	}
	must(t, json.Unmarshal(r.env.Result, &got))
	t.Logf("the skill held %d inotify instances (stopped by: %q); host root then created %d of 50", got.Held, got.Errno, len(fds))
	if got.Held < 100 || skillHeld != got.Held {
		t.Fatalf("the skill held %d instances (%d seen from the host), want at least 100: the test proves nothing", got.Held, skillHeld)
	}
	if len(fds) != 50 {
		t.Fatalf("host root created %d of 50 inotify instances while a skill held %d: one sandbox exhausted a host-wide resource", len(fds), got.Held)
	}
}

// TestDefaultProfileRefusesInotify: the shipped default profile refuses
// inotify (a skill that needs it names a profile that allows it).
func TestDefaultProfileRefusesInotify(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("inotify-default", "", "probe:inotifyhold")
	done := make(chan result, 1)
	go func() { done <- e.run(dir, "--deadline", slow(60*time.Second).String()) }()
	var pid int
	waitFor(t, 30*time.Second, func() bool {
		for _, p := range heldPids(e) {
			pid = p
			return true
		}
		return false
	})
	must(t, unix.Kill(pid, unix.SIGTERM))
	r := <-done
	r.mustOutcome(t, "success")
	var got struct {
		Held  int    `json:"held"`
		Errno string `json:"errno"`
	}
	must(t, json.Unmarshal(r.env.Result, &got))
	if got.Held != 0 || got.Errno != unix.EPERM.Error() {
		t.Fatalf("under the default profile the skill made %d inotify instances (%q), want 0 (EPERM)", got.Held, got.Errno)
	}
}

// hostIdentity is the part of the envelope's containment naming the
// sandbox's host identity.
type hostIdentity struct {
	Containment struct {
		HostUID     int    `json:"host_uid"`
		UsernsOwner string `json:"userns_owner"`
	} `json:"containment"`
}

// TestConcurrentSandboxesHaveDistinctHostUIDs: two sandboxes running at
// once run as different host uids, in different 65536-id ranges, each in a
// user namespace owned by its range's own host uid (not root); the
// containment says so; and a range is free again once its sandbox closed.
func TestConcurrentSandboxesHaveDistinctHostUIDs(t *testing.T) {
	e := newEnv(t)
	// inotifyhold waits for SIGTERM without forking (under the default
	// profile it holds no instance).
	dir := e.skill("idle", "", "probe:inotifyhold")
	done := make(chan result, 2)
	for range 2 {
		go func() { done <- e.run(dir, "--deadline", slow(60*time.Second).String()) }()
	}
	var pids map[string]int
	waitFor(t, 30*time.Second, func() bool {
		pids = heldPids(e)
		return len(pids) == 2
	})
	base := int(sandbox.DefaultHostIDBase)
	uids := map[int]bool{}
	ranges := map[int]bool{}
	for id, pid := range pids {
		uid := statusUID(t, pid)
		owner := usernsOwner(t, pid)
		t.Logf("invocation %s: skill pid %d runs as host uid %d, user namespace owned by host uid %d", id, pid, uid, owner)
		if uid < base+sandbox.SkillUID {
			t.Fatalf("host uid %d is below the id ranges (base %d)", uid, base)
		}
		start := uid - sandbox.SkillUID
		if (start-base)%sandbox.IDRangeSize != 0 {
			t.Fatalf("host uid %d is not uid %d of a range", uid, sandbox.SkillUID)
		}
		if owner != start {
			t.Fatalf("the user namespace is owned by host uid %d, want the range's first id %d", owner, start)
		}
		uids[uid] = true
		ranges[(start-base)/sandbox.IDRangeSize] = true
		// The rlimits hold though the host can no longer prlimit a process
		// in a namespace it does not own (cyberos-init sets them).
		limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
		must(t, err)
		for _, want := range [][]string{{"Max open files", "1024", "1024"}, {"Max core file size", "0", "0"}} {
			found := false
			for _, line := range strings.Split(string(limits), "\n") {
				if rest, ok := strings.CutPrefix(line, want[0]); ok {
					f := strings.Fields(rest)
					found = len(f) >= 2 && f[0] == want[1] && f[1] == want[2]
				}
			}
			if !found {
				t.Fatalf("the skill's %s is not %s/%s:\n%s", want[0], want[1], want[2], limits)
			}
		}
	}
	if len(uids) != 2 || len(ranges) != 2 {
		t.Fatalf("two concurrent sandboxes share a host uid or range: uids %v ranges %v", uids, ranges)
	}
	for _, pid := range pids {
		must(t, unix.Kill(pid, unix.SIGTERM))
	}
	lowest := -1
	for range 2 {
		r := <-done
		r.mustOutcome(t, "success")
		var id hostIdentity
		must(t, json.Unmarshal([]byte(r.stdout), &id))
		if !uids[id.Containment.HostUID] {
			t.Fatalf("containment says host uid %d, the host saw %v", id.Containment.HostUID, uids)
		}
		if want := fmt.Sprintf("host uid %d", id.Containment.HostUID-sandbox.SkillUID); id.Containment.UsernsOwner != want {
			t.Fatalf("containment userns_owner %q, want %q", id.Containment.UsernsOwner, want)
		}
		if lowest < 0 || id.Containment.HostUID < lowest {
			lowest = id.Containment.HostUID
		}
	}
	// The started rows, written before the skill ran, name the host uid.
	_, rows := e.export("--kind", "skill.invoked_started")
	seen := map[int]bool{}
	for _, r := range rows {
		c, _ := r.field("containment").(map[string]any)
		if uid, ok := c["host_uid"].(float64); ok {
			seen[int(uid)] = true
		}
	}
	for uid := range uids {
		if !seen[uid] {
			t.Fatalf("no skill.invoked_started row names host uid %d (rows name %v)", uid, seen)
		}
	}
	// Both closed: a third run takes the lowest range again.
	quick := e.skill("quick", "", "#!/bin/sh\necho {}\n")
	r := e.run(quick)
	r.mustOutcome(t, "success")
	var id hostIdentity
	must(t, json.Unmarshal([]byte(r.stdout), &id))
	if id.Containment.HostUID != lowest {
		t.Fatalf("after both sandboxes closed, a new one runs as host uid %d, want the freed %d", id.Containment.HostUID, lowest)
	}
}
