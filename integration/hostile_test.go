//go:build linux

package integration

// The hostile-skill suite (issue 6): skills that attack their sandbox and
// the broker, each test asserting one containment property by name.
//
//	attack                                          test
//	symlinks/hard links to host files, every tool   TestHostileFileToolLinks (TestBrokerFiles: Read of a symlink)
//	/proc/1/root, /proc/1/cwd (inside and tools)    TestHostileProcOneRoot
//	setuid binaries in /skill and /tmp (nosuid)     TestHostileSetuid
//	broker socket path, audit store, profiles,
//	  run dir skeleton (inside and through tools)   TestHostileSupervisorState
//	another invocation's socket, processes, memory  TestHostileNeighbours (TestBrokerSocketsAreIsolated: from the host)
//	TIOCSTI                                         TestHostileTIOCSTI (seccomp: TestDefaultProfileRefusesSyscalls)
//	memory bomb                                     TestOOMIsKilled
//	fork bomb                                       TestHostileForkBomb, TestPidsMax
//	tmpfs fill                                      TestHostileTmpfsFill
//	fd exhaustion                                   TestHostileFDExhaustion
//	host-wide AIO events (fs.aio-max-nr)            TestHostileAIOExhaustion
//	host-wide open files kept by mappings           TestHostileMappedFiles
//	host-wide TCP buffer memory (tcp_mem)           TestHostileTCPBuffers
//	CPU spin under x-cpu                            TestHostileCPUSpin (TestCPUQuotaApplied: the quota's value)
//	Landlock: only the sandbox's own view           TestLandlockConfinesSkill
//	protocol abuse (frames, JSON, batches, depth)   TestBrokerSurvivesAbuse
//	SSRF (redirects, userinfo, loopback names)      TestBrokerHTTP
//	SSRF (metadata, private, loopback spellings)    TestHostileSSRF
//	refused syscalls                                TestDefaultProfileRefusesSyscalls
//	deadline escape (setsid, double fork)           TestDeadlineKillsEverything

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/sandbox"
)

// hostile runs the hostile probe as skill name with args, and returns its
// report; the run must succeed.
func (e *env) hostile(t *testing.T, name, frontmatter string, args any, extra ...string) (map[string]any, result) {
	t.Helper()
	b, _ := json.Marshal(args)
	r := e.run(e.skill(name, frontmatter, "probe:hostile"), append([]string{"--args", string(b)}, extra...)...)
	r.mustOutcome(t, "success")
	var out map[string]any
	if err := json.Unmarshal(r.env.Result, &out); err != nil {
		t.Fatalf("probe output %s: %v", r.env.Result, err)
	}
	return out, r
}

// want fails unless out[key] == v, naming the property.
func want(t *testing.T, property string, out map[string]any, key string, v any) {
	t.Helper()
	if got := out[key]; fmt.Sprint(got) != fmt.Sprint(v) {
		t.Errorf("%s: %s = %v, want %v", property, key, got, v)
	}
}

// profilesWithout copies the shipped profiles to a private dir and adds
// profile name: the default profile without the given syscalls.
func (e *env) profilesWithout(t *testing.T, name string, drop ...string) string {
	t.Helper()
	dir := filepath.Join(e.base, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(repoRoot, "seccomp-profiles"))
	for _, en := range ents {
		b, err := os.ReadFile(filepath.Join(repoRoot, "seccomp-profiles", en.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, en.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if name == "" {
		return dir
	}
	b, err := os.ReadFile(filepath.Join(dir, "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	var prof map[string]any
	if err := json.Unmarshal(b, &prof); err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for _, s := range prof["syscalls"].([]any) {
		rule := s.(map[string]any)
		var keep []any
		for _, n := range rule["names"].([]any) {
			if slices.Contains(drop, n.(string)) {
				dropped++
				continue
			}
			keep = append(keep, n)
		}
		rule["names"] = keep
	}
	if dropped != len(drop) {
		t.Fatalf("dropped %d of %v from the default profile", dropped, drop)
	}
	b, _ = json.MarshalIndent(prof, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLandlockConfinesSkill: under Landlock the skill and its Bash commands
// cannot read a file that is mounted and readable by its mode (the rootfs
// skeleton's stamp in /, mode 0644) but outside the rules, nor list /, nor
// write /proc; the controls (/etc, /proc, /tmp) work. The same probe under a
// profile without the landlock_* syscalls reads the file: only Landlock
// refused it, and that run's containment says Landlock was not enforced.
func TestLandlockConfinesSkill(t *testing.T) {
	e := newEnv(t)
	out, r := e.hostile(t, "landlocked", "", map[string]string{"op": "landlock"})
	if !strings.HasPrefix(r.env.Containment.Landlock, "ABI ") || !strings.Contains(r.env.Containment.Landlock, "enforced") {
		t.Errorf("containment.landlock = %q, want an enforced ABI", r.env.Containment.Landlock)
	}
	const p = "landlock confines the skill to its own view"
	want(t, p, out, "skeleton_stat", "ok")
	want(t, p, out, "skeleton_mode", "644")
	want(t, p, out, "skeleton_read", "EACCES")
	want(t, p, out, "root_list", "EACCES")
	want(t, p, out, "run_list", "EACCES")
	want(t, p, out, "proc_write", "EACCES")
	want(t, p+" (control)", out, "etc_read", "ok")
	want(t, p+" (control)", out, "proc_read", "ok")
	want(t, p+" (control)", out, "tmp_write", "ok")

	// Bash commands run beside the skill, through cyberos-init --exec.
	m := calls(t, e.run(e.skill("landlockbash", "allowed_tools: [Bash]\n", callScript(
		[3]string{"cat", "Bash", `{"command":"cat /.cyberos-skeleton; echo rc=$?; cat /etc/hostname"}`}))))
	var bash struct{ Stdout, Stderr string }
	json.Unmarshal(mustOK(t, m, "cat"), &bash)
	if !strings.Contains(bash.Stdout, "rc=1") || !strings.Contains(bash.Stderr, "Permission denied") || !strings.Contains(bash.Stdout, "skill") {
		t.Errorf("landlock confines Bash commands: stdout %q stderr %q", bash.Stdout, bash.Stderr)
	}

	// Control: the seccomp profile refuses landlock_*, so no Landlock.
	profiles := e.profilesWithout(t, "nolandlock", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self")
	out, r = e.hostile(t, "unlandlocked", "x-seccomp-profile: nolandlock\n", map[string]string{"op": "landlock"}, "--seccomp-profiles", profiles)
	if !strings.HasPrefix(r.env.Containment.Landlock, "unavailable: ") || !strings.Contains(strings.Join(r.env.Containment.NotEnforced, ";"), "landlock") {
		t.Errorf("without the syscalls: containment.landlock %q, not_enforced %v", r.env.Containment.Landlock, r.env.Containment.NotEnforced)
	}
	want(t, "without landlock the skeleton file is readable (the test discriminates)", out, "skeleton_read", "ok")
}

// TestHostileFileToolLinks: symlinks (to a file, to a directory, as the
// allowed directory itself) and hard links to a host file, placed in the
// allowed folder, never let Read, Write, Edit, Glob or Grep reach the host
// file: refusals are file_violation, the file is unchanged and its content
// never comes back.
func TestHostileFileToolLinks(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.base, "outside")
	allowed := filepath.Join(e.base, "allowed")
	for _, d := range []string{outside, allowed} {
		os.MkdirAll(d, 0o755)
	}
	secret := filepath.Join(outside, "secret.txt")
	const content = "TOPSECRET host file\n"
	os.WriteFile(secret, []byte(content), 0o644)
	os.WriteFile(filepath.Join(allowed, "ok.txt"), []byte("fine\n"), 0o644)
	must(t, os.Symlink(secret, filepath.Join(allowed, "sym")))
	must(t, os.Symlink(outside, filepath.Join(allowed, "symdir")))
	must(t, os.Link(secret, filepath.Join(allowed, "hard")))
	linkroot := filepath.Join(e.base, "linkroot")
	must(t, os.Symlink(outside, linkroot))

	fm := fmt.Sprintf("allowed_tools: [Read, Write, Edit, Glob, Grep]\nx-allowed-files: [\"%s/**\", \"%s/**\"]\n", allowed, linkroot)
	a := allowed
	m := calls(t, e.run(e.skill("linker", fm, callScript(
		[3]string{"read_ok", "Read", fmt.Sprintf(`{"path":"%s/ok.txt"}`, a)},
		[3]string{"read_sym", "Read", fmt.Sprintf(`{"path":"%s/sym"}`, a)},
		[3]string{"read_hard", "Read", fmt.Sprintf(`{"path":"%s/hard"}`, a)},
		[3]string{"read_symdir", "Read", fmt.Sprintf(`{"path":"%s/symdir/secret.txt"}`, a)},
		[3]string{"read_linkroot", "Read", fmt.Sprintf(`{"path":"%s/secret.txt"}`, linkroot)},
		[3]string{"write_sym", "Write", fmt.Sprintf(`{"path":"%s/sym","content":"PWNED"}`, a)},
		[3]string{"write_hard", "Write", fmt.Sprintf(`{"path":"%s/hard","content":"PWNED"}`, a)},
		[3]string{"write_symdir", "Write", fmt.Sprintf(`{"path":"%s/symdir/new.txt","content":"PWNED"}`, a)},
		[3]string{"write_linkroot", "Write", fmt.Sprintf(`{"path":"%s/secret.txt","content":"PWNED"}`, linkroot)},
		[3]string{"edit_sym", "Edit", fmt.Sprintf(`{"path":"%s/sym","old_string":"TOPSECRET","new_string":"PWNED"}`, a)},
		[3]string{"edit_hard", "Edit", fmt.Sprintf(`{"path":"%s/hard","old_string":"TOPSECRET","new_string":"PWNED"}`, a)},
		[3]string{"edit_symdir", "Edit", fmt.Sprintf(`{"path":"%s/symdir/secret.txt","old_string":"TOPSECRET","new_string":"PWNED"}`, a)},
		[3]string{"glob", "Glob", fmt.Sprintf(`{"pattern":"%s/**"}`, a)},
		[3]string{"glob_linkroot", "Glob", fmt.Sprintf(`{"pattern":"%s/**"}`, linkroot)},
		[3]string{"grep", "Grep", fmt.Sprintf(`{"pattern":"TOPSECRET","path":"%s"}`, a)},
		[3]string{"grep_linkroot", "Grep", fmt.Sprintf(`{"pattern":"TOPSECRET","path":"%s"}`, linkroot)},
	))))
	mustOK(t, m, "read_ok")
	for _, name := range []string{"read_sym", "read_hard", "read_symdir", "read_linkroot", "write_sym", "write_hard",
		"write_symdir", "write_linkroot", "edit_sym", "edit_hard", "edit_symdir"} {
		mustRefuse(t, m, name, "file_violation")
	}
	for name, c := range m {
		if strings.Contains(string(c.OK), "TOPSECRET") || (c.Err != nil && strings.Contains(c.Err.Message+c.Err.Data.Reason, "TOPSECRET")) {
			t.Errorf("no file tool reaches a linked host file: %s returned the host file's content", name)
		}
		if strings.HasPrefix(name, "glob") && strings.Contains(string(c.OK), "secret.txt") {
			t.Errorf("Glob does not follow a symlinked directory: %s listed %s", name, c.OK)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != content {
		t.Errorf("no file tool writes through a link: the host file now holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Error("no file tool writes through a symlinked directory: outside/new.txt was created")
	}
}

// TestHostileProcOneRoot: inside, /proc/1 of the sandbox's init is closed
// to the skill (cyberos-init is not dumpable: its root, cwd and memory are
// not its to open, EACCES) and no route through /proc reaches a host file;
// on the host side, file tools allowed /proc/** refuse the magic links
// /proc/1/root and /proc/self/root (which there would be the host's root).
func TestHostileProcOneRoot(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(e.base, "host-marker")
	os.WriteFile(marker, []byte("HOSTMARKER\n"), 0o644)
	out, _ := e.hostile(t, "proc1", "", map[string]string{"op": "proc1root", "marker": marker})
	const p = "/proc/1 is closed to the skill and no /proc route reaches the host"
	want(t, p, out, "root_link", "|EACCES")
	want(t, p, out, "hostname_via_proc1", "|EACCES")
	markers := 0
	for k, v := range out {
		if !strings.HasPrefix(k, "marker ") {
			continue
		}
		markers++
		w := "ENOENT" // the host path itself, and through the skill's own /proc/self/root
		if strings.Contains(k, "/proc/1/") {
			w = "EACCES"
		}
		if v != w {
			t.Errorf("%s: %s = %v, want %s", p, k, v, w)
		}
	}
	if markers != 6 {
		t.Errorf("%s: the probe tried %d routes to the marker, want 6: %v", p, markers, out)
	}
	if pids, _ := out["pids"].([]any); len(pids) != 2 {
		t.Errorf("%s: the sandbox sees pids %v, want only its init and itself", p, pids)
	}

	fm := "allowed_tools: [Read, Glob, Grep]\nx-allowed-files: [\"/proc/**\"]\n"
	m := calls(t, e.run(e.skill("proc1tools", fm, callScript(
		[3]string{"read_root", "Read", fmt.Sprintf(`{"path":"/proc/1/root%s"}`, marker)},
		[3]string{"read_self_root", "Read", fmt.Sprintf(`{"path":"/proc/self/root%s"}`, marker)},
		[3]string{"read_cwd", "Read", `{"path":"/proc/1/cwd/etc/hostname"}`},
		[3]string{"glob", "Glob", fmt.Sprintf(`{"pattern":"/proc/1/root%s"}`, marker)},
		[3]string{"grep", "Grep", fmt.Sprintf(`{"pattern":"HOSTMARKER","path":"/proc/1/root%s"}`, filepath.Dir(marker))},
	))))
	for _, name := range []string{"read_root", "read_self_root", "read_cwd"} {
		mustRefuse(t, m, name, "file_violation")
	}
	for name, c := range m {
		if strings.Contains(string(c.OK), "HOSTMARKER") || strings.Contains(string(c.OK), "host-marker") {
			t.Errorf("file tools do not follow /proc magic links: %s returned %s", name, c.OK)
		}
	}
}

// TestHostileSetuid: a setuid/setgid copy of the probe owned by the
// sandbox's root (host uid = the map's base) or by host root, in /skill or
// put into the running sandbox's /tmp, runs with the skill's own ids and no
// capabilities (nosuid mounts, no_new_privs).
func TestHostileSetuid(t *testing.T) {
	e := newEnv(t)
	probe, err := os.ReadFile(filepath.Join(probeDir, "hostile"))
	if err != nil {
		t.Fatal(err)
	}
	const waiter = "#!/bin/sh\nwhile [ ! -e /tmp/go ]; do sleep 0.05; done\n" +
		"printf '{\"op\":\"exec\",\"path\":\"%s\"}' \"$(cat /tmp/go)\" | /skill/probe\n"
	dir := e.skill("setuid", "entrypoint: hostile-setuid-waiter\n", waiter)
	os.Rename(filepath.Join(dir, "main"), filepath.Join(dir, "hostile-setuid-waiter"))
	os.WriteFile(filepath.Join(dir, "probe"), probe, 0o755)
	nsRoot := sandbox.DefaultHostIDBase
	for _, f := range []struct {
		name string
		uid  int
	}{{"suid-nsroot", nsRoot}, {"suid-hostroot", 0}} {
		p := filepath.Join(dir, f.name)
		must(t, os.WriteFile(p, probe, 0o755))
		must(t, os.Chown(p, f.uid, f.uid))
		must(t, unix.Chmod(p, 0o6755))
	}
	targets := []string{"/skill/suid-nsroot", "/skill/suid-hostroot", "/tmp/suid-nsroot"}
	for _, target := range targets {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			done := make(chan result, 1)
			go func() { done <- e.run(dir, "--deadline", "30s") }()
			var pid int
			waitFor(t, 15*time.Second, func() bool {
				for _, p := range procsMatching("/skill/hostile-setuid-waiter") {
					if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p)); strings.Contains(string(b), sandbox.CgroupParentFor(e.runDir)) {
						pid = p
						return true
					}
				}
				return false
			})
			root := fmt.Sprintf("/proc/%d/root", pid)
			// The sandbox's tmpfs takes only files of uids mapped into its
			// user namespace: write as its root (fsuid = the map's base).
			must(t, asFSUID(nsRoot, func() error {
				if strings.HasPrefix(target, "/tmp/") {
					// A setuid file owned by the sandbox's root, in its /tmp.
					p := root + target
					if err := os.WriteFile(p, probe, 0o755); err != nil {
						return err
					}
					if err := unix.Chmod(p, 0o6755); err != nil {
						return err
					}
				}
				return os.WriteFile(root+"/tmp/go", []byte(target), 0o644)
			}))
			r := <-done
			r.mustOutcome(t, "success")
			var out struct {
				Exec     string         `json:"exec"`
				Child    map[string]any `json:"child"`
				Self     map[string]any `json:"self"`
				FileMode string         `json:"file_mode"`
			}
			json.Unmarshal(r.env.Result, &out)
			if out.Exec != "ok" || out.FileMode != "6755" {
				t.Fatalf("the setuid file did not run as set up: %+v", out)
			}
			const p = "a setuid binary does not raise privilege"
			if fmt.Sprint(out.Self["euid"]) == "0" {
				t.Fatalf("the skill itself runs as root: %v", out.Self)
			}
			for _, k := range []string{"ruid", "euid", "suid", "rgid", "egid", "sgid"} {
				want(t, p, out.Child, k, out.Self[k])
			}
			want(t, p, out.Child, "CapEff", "0000000000000000")
			want(t, p, out.Child, "CapPrm", "0000000000000000")
		})
	}
}

// asFSUID runs fn on a thread whose filesystem uid and gid are id (root's
// other privileges kept); the thread is discarded afterwards.
func asFSUID(id int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		unix.Setfsgid(id)
		unix.Setfsuid(id)
		errc <- fn()
	}()
	return <-errc
}

// TestHostileSupervisorState: the supervisor's own files — audit store,
// memory store, seccomp profiles, broker sockets, the shared rootfs
// skeleton — are out of the sandbox's view, the mounted broker socket
// cannot be removed, replaced or re-permissioned from inside, and file tools
// refuse them even when x-allowed-files covers them.
func TestHostileSupervisorState(t *testing.T) {
	e := newEnv(t)
	profiles := e.profilesWithout(t, "")
	// A first run creates the stores and the skeleton.
	e.run(e.skill("first", "", "#!/bin/sh\necho '{}'\n"), "--seccomp-profiles", profiles).mustOutcome(t, "success")
	state := []string{
		filepath.Join(e.stateDir, "audit.db"), e.stateDir, filepath.Join(e.runDir, "sockets"),
		filepath.Join(profiles, "default.json"), filepath.Join(e.runDir, "rootfs", "etc", "passwd"), cyberosBin,
	}
	out, _ := e.hostile(t, "stateinside", "", map[string]any{"op": "paths", "paths": state}, "--seccomp-profiles", profiles)
	for k, v := range out {
		if v != "ENOENT" {
			t.Errorf("the supervisor's files are out of the sandbox's view: %s = %v", k, v)
		}
	}
	out, r := e.hostile(t, "sockinside", "", map[string]string{"op": "socket"}, "--seccomp-profiles", profiles)
	for _, k := range []string{"unlink", "rename", "rename_over", "chmod", "chown", "open_write", "mknod_beside"} {
		if out[k] == "ok" {
			t.Errorf("the broker socket is immutable from inside: %s succeeded", k)
		}
	}
	if out["status_err"] != "ok" || !strings.Contains(fmt.Sprint(out["status"]), r.env.InvocationID) {
		t.Errorf("the broker still serves its own invocation after the attempts: %v %v", out["status_err"], out["status"])
	}

	// (The audit store grows with every run; the refused Write shows it was
	// not replaced, and verify below that its chain is whole.)
	before := map[string][]byte{}
	for _, p := range []string{filepath.Join(profiles, "default.json"), filepath.Join(e.runDir, "rootfs", "etc", "passwd")} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = b
	}
	fm := fmt.Sprintf("allowed_tools: [Read, Write, Edit, Glob, Grep]\nx-allowed-files: [\"%s/**\"]\n", e.base)
	m := calls(t, e.run(e.skill("statetools", fm, callScript(
		[3]string{"read_memory", "Read", fmt.Sprintf(`{"path":"%s/memory.db"}`, e.stateDir)},
		[3]string{"write_audit", "Write", fmt.Sprintf(`{"path":"%s/audit.db","content":"gone"}`, e.stateDir)},
		[3]string{"write_profile", "Write", fmt.Sprintf(`{"path":"%s/default.json","content":"{}"}`, profiles)},
		[3]string{"edit_profile", "Edit", fmt.Sprintf(`{"path":"%s/default.json","old_string":"SCMP_ACT_ERRNO","new_string":"SCMP_ACT_ALLOW"}`, profiles)},
		[3]string{"write_socket_dir", "Write", fmt.Sprintf(`{"path":"%s/sockets/cyberos-skill-broker.next.sock","content":"x"}`, e.runDir)},
		[3]string{"write_skeleton", "Write", fmt.Sprintf(`{"path":"%s/rootfs/etc/passwd","content":"root::0:0::/:/bin/sh"}`, e.runDir)},
		[3]string{"grep_state", "Grep", fmt.Sprintf(`{"pattern":"SCMP_ACT","path":"%s"}`, profiles)},
		[3]string{"glob_state", "Glob", fmt.Sprintf(`{"pattern":"%s/**"}`, e.stateDir)},
		[3]string{"write_elsewhere", "Write", fmt.Sprintf(`{"path":"%s/skills/fine.txt","content":"ok"}`, e.base)},
	)), "--seccomp-profiles", profiles))
	for _, name := range []string{"read_memory", "write_audit", "write_profile", "edit_profile", "write_socket_dir", "write_skeleton"} {
		mustRefuse(t, m, name, "file_violation")
	}
	mustOK(t, m, "write_elsewhere")
	for _, name := range []string{"grep_state", "glob_state"} {
		if c := m[name]; strings.Contains(string(c.OK), "SCMP_ACT") || strings.Contains(string(c.OK), ".db") {
			t.Errorf("file tools do not walk the supervisor's state: %s returned %s", name, c.OK)
		}
	}
	for p, b := range before {
		if now, _ := os.ReadFile(p); string(now) != string(b) {
			t.Errorf("file tools never change the supervisor's files: %s changed", p)
		}
	}
	if _, err := os.Stat(filepath.Join(e.runDir, "sockets", "cyberos-skill-broker.next.sock")); err == nil {
		t.Error("a file was planted in the socket directory")
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("audit chain after the attacks: %s", out)
	}
}

// TestHostileNeighbours: while invocation A runs (tenant 1, it wrote a
// memory doc), invocation B (tenant 2) cannot reach A's broker socket by its
// host path, cannot see, signal or read A's processes, and cannot read A's
// tenant's memory; its own broker answers with its own invocation.
func TestHostileNeighbours(t *testing.T) {
	e := newEnv(t)
	sockDir := filepath.Join(e.runDir, "sockets")
	const t1, t2 = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	aDir := e.skill("neighbour-a", "allowed_tools: [MemoryEmit]\nallowed_memory_scopes: [\"notes/**\"]\n",
		"#!/bin/sh\n/run/cyberos/bin/cyberos-tool call MemoryEmit '{\"path\":\"notes/private\",\"body\":\"tenant one secret\"}' >/dev/null\nexec /bin/sleep 24680\n")
	aDone := make(chan result, 1)
	go func() { aDone <- e.run(aDir, "--tenant", t1, "--deadline", "60s") }()
	var aPids []int
	waitFor(t, 20*time.Second, func() bool { aPids = procsMatching("sleep 24680"); return len(aPids) > 0 })
	aSocks, _ := filepath.Glob(filepath.Join(sockDir, "*.sock"))
	if len(aSocks) != 1 {
		t.Fatalf("A's socket: %v", aSocks)
	}
	args := map[string]any{"op": "neighbour", "sockets": aSocks, "pids": aPids}
	out, r := e.hostile(t, "neighbour-b", "", args, "--tenant", t2)
	const p = "one invocation cannot reach another"
	for k, v := range out {
		switch {
		case strings.HasPrefix(k, "connect "), strings.HasPrefix(k, "mem "), strings.HasPrefix(k, "environ "):
			if v != "ENOENT" {
				t.Errorf("%s: %s = %v, want ENOENT", p, k, v)
			}
		case strings.HasPrefix(k, "kill "):
			if v != "ESRCH" {
				t.Errorf("%s: %s = %v, want ESRCH", p, k, v)
			}
		}
	}
	if pids, _ := out["pids"].([]any); len(pids) != 2 {
		t.Errorf("%s: B sees pids %v", p, pids)
	}
	if !strings.Contains(fmt.Sprint(out["own_status"]), r.env.InvocationID) {
		t.Errorf("%s: B's broker answered %v, want B's invocation", p, out["own_status"])
	}
	m := calls(t, e.run(e.skill("neighbour-c", "allowed_tools: [MemoryRead, MemorySearch]\nallowed_memory_scopes: [\"notes/**\"]\n", callScript(
		[3]string{"read", "MemoryRead", `{"path":"notes/private"}`},
		[3]string{"search", "MemorySearch", `{"query":"secret"}`},
	)), "--tenant", t2))
	for name, c := range m {
		if strings.Contains(string(c.OK), "tenant one secret") {
			t.Errorf("%s: tenant 2's %s returned tenant 1's memory: %s", p, name, c.OK)
		}
	}
	for _, pid := range aPids {
		killPid(pid)
	}
	<-aDone
}

// TestHostileTIOCSTI: the skill has no terminal to push input into: TIOCSTI
// on its stdio is refused (seccomp: EPERM), and no tty or pty can be opened.
func TestHostileTIOCSTI(t *testing.T) {
	e := newEnv(t)
	out, _ := e.hostile(t, "tiocsti", "", map[string]string{"op": "tiocsti"})
	for k, v := range out {
		if v == "ok" {
			t.Errorf("TIOCSTI injects nothing: %s succeeded", k)
		}
	}
	for _, fd := range []string{"fd0", "fd1", "fd2"} {
		want(t, "TIOCSTI is refused by the seccomp profile", out, fd, "EPERM")
	}
}

// TestHostileFDExhaustion: opening files without end stops at the 1024
// RLIMIT_NOFILE with EMFILE, the limit cannot be raised, and the broker
// serves the skill afterwards.
func TestHostileFDExhaustion(t *testing.T) {
	e := newEnv(t)
	out, _ := e.hostile(t, "fds", "", map[string]string{"op": "fds"})
	const p = "fd exhaustion is bounded by RLIMIT_NOFILE"
	want(t, p, out, "error", "EMFILE")
	want(t, p, out, "rlimit_max", 1024)
	want(t, p, out, "raise", "EPERM")
	if n, _ := out["opened"].(float64); n < 1000 || n > 1024 {
		t.Errorf("%s: %v files opened", p, out["opened"])
	}
	want(t, "the broker serves after fd exhaustion", out, "after_status", true)
}

// TestHostileAIOExhaustion: AIO contexts are counted host-wide (fs.aio-nr
// against fs.aio-max-nr, in no namespace, cgroup or per-user limit), so the
// default profile refuses io_setup: a skill asking for 16 contexts of 4096
// events gets none, and the host's fs.aio-nr, read by the skill while it
// would hold them and by the test after, does not grow by what it asked.
func TestHostileAIOExhaustion(t *testing.T) {
	e := newEnv(t)
	out, _ := e.hostile(t, "aio", "", map[string]string{"op": "aio"})
	const p = "the default profile takes no host-wide AIO events"
	if got := fmt.Sprint(out["io_setup"]); got != "EPERM" && got != "ENOSYS" {
		t.Errorf("%s: io_setup → %s, want EPERM or ENOSYS", p, got)
	}
	want(t, p, out, "contexts", 0)
	before, _ := out["aio_nr_before"].(float64)
	held, _ := out["aio_nr_held"].(float64)
	if before < 0 || held < 0 {
		t.Fatalf("the probe could not read /proc/sys/fs/aio-nr: %v", out)
	}
	// Other programs on the host may use AIO meanwhile; the probe asked for
	// 16 × 4096 events, the kernel charges at least that.
	if held-before >= 4096 {
		t.Errorf("%s: fs.aio-nr grew from %v to %v while the skill held its contexts", p, before, held)
	}
	if after := readIntFile(t, "/proc/sys/fs/aio-nr"); after-int(before) >= 4096 {
		t.Errorf("%s: the host's fs.aio-nr is %d after the run, %v before", p, after, before)
	}
}

// TestHostileMappedFiles: open files are counted for the whole host
// (fs.file-nr against fs.file-max), and a file kept by a mapping after its
// descriptor is closed escapes RLIMIT_NOFILE. What bounds it: one process
// keeps at most vm.max_map_count mappings (the skill's open stops with
// ENOMEM there), and the kernel memory of each is charged to the sandbox's
// memory cgroup (at 16 MiB the skill is OOM-killed first); the files go
// with the sandbox.
func TestHostileMappedFiles(t *testing.T) {
	e := newEnv(t)
	maxMap := readIntFile(t, "/proc/sys/vm/max_map_count")
	out, _ := e.hostile(t, "mapper", "x-memory-mb: 64\n", map[string]string{"op": "mapfiles"})
	const p = "open files kept by mappings are bounded per process"
	want(t, p, out, "error", "ENOMEM")
	pinned, _ := out["pinned"].(float64)
	if pinned < 1000 || int(pinned) > maxMap {
		t.Errorf("%s: %v pinned, want at most vm.max_map_count %d", p, out["pinned"], maxMap)
	}
	before, _ := out["file_nr_before"].(float64)
	held, _ := out["file_nr_held"].(float64)
	if held-before < pinned/2 {
		t.Errorf("the probe's files did not show in fs.file-nr (%v → %v): it measures nothing", before, held)
	}
	if after := readIntFile(t, "/proc/sys/fs/file-nr"); float64(after) > before+pinned/2 {
		t.Errorf("the pinned files outlived the sandbox: fs.file-nr %d after, %v before", after, before)
	}

	r := e.run(e.skill("mapper-small", "x-memory-mb: 16\n", "probe:hostile"), "--args", `{"op":"mapfiles"}`)
	r.mustOutcome(t, "killed")
	if r.env.Stats.OOMKills == 0 {
		t.Errorf("open files kept by mappings are bounded by the memory cgroup: killed without an OOM kill")
	}
}

// TestHostileTCPBuffers: TCP buffers count in the host-wide
// net.ipv4.tcp_mem whatever the network namespace, and on cgroup v1 the
// memory cgroup is charged for them only once memory.kmem.tcp is limited.
// A skill under 64 MiB filling loopback connections it never reads must
// not buffer more than its memory limit (it held 256 MiB, all it asked
// for, with 2.8 MB of memory charged, before the sandbox set that limit).
func TestHostileTCPBuffers(t *testing.T) {
	e := newEnv(t)
	b, _ := json.Marshal(map[string]any{"op": "tcpfill", "mib": 256})
	r := e.run(e.skill("tcpfill", "x-memory-mb: 64\n", "probe:hostile"), "--args", string(b))
	const p = "TCP buffers are bounded by the sandbox's memory limit"
	if r.env.Outcome == "killed" {
		// cgroup v2 charges socket buffers to memory.max, so the skill
		// that fills them meets the OOM killer at its limit (on v1 the
		// kmem.tcp limit makes its sends fail instead). Socket memory is
		// charged even past memory.max until the OOM killer acts, so the
		// peak may pass the limit by a charge batch or so: 1 MiB of slack,
		// against the 256 MiB the skill asks for.
		if r.env.Stats.OOMKills == 0 || r.env.Stats.MemoryPeakBytes > 65<<20 {
			t.Errorf("%s: killed with %d OOM kills at a peak of %d bytes", p, r.env.Stats.OOMKills, r.env.Stats.MemoryPeakBytes)
		}
		return
	}
	r.mustOutcome(t, "success")
	var out map[string]any
	if err := json.Unmarshal(r.env.Result, &out); err != nil {
		t.Fatalf("probe output %s: %v", r.env.Result, err)
	}
	t.Logf("tcpfill: %v; memory peak %d", out, r.env.Stats.MemoryPeakBytes)
	buffered, _ := out["buffered"].(float64)
	if buffered < 1<<20 {
		t.Fatalf("the probe buffered %v bytes: it measures nothing (%v)", buffered, out)
	}
	if buffered > 64<<20 {
		t.Errorf("%s: the skill buffered %.0f MiB in TCP under x-memory-mb 64", p, buffered/(1<<20))
	}
}

// readIntFile reads the first integer of a /proc file.
func readIntFile(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}

// TestHostileTmpfsFill: filling /tmp stops with ENOSPC at its 64 MiB cap
// (and /dev/shm at 16 MiB); the run still succeeds and leaves nothing.
func TestHostileTmpfsFill(t *testing.T) {
	e := newEnv(t)
	out, r := e.hostile(t, "filler", "", map[string]string{"op": "tmpfill"})
	const p = "tmpfs fill is capped"
	want(t, p, out, "tmp_error", "ENOSPC")
	want(t, p, out, "shm_error", "ENOSPC")
	if n, _ := out["tmp_bytes"].(float64); n > 64<<20 || n < 60<<20 {
		t.Errorf("%s: /tmp took %v bytes, want about 64 MiB", p, out["tmp_bytes"])
	}
	if n, _ := out["shm_bytes"].(float64); n > 16<<20 {
		t.Errorf("%s: /dev/shm took %v bytes, want at most 16 MiB", p, out["shm_bytes"])
	}
	if hasCgroup(t, r.env.InvocationID) {
		t.Errorf("cgroup of %s left", r.env.InvocationID)
	}
	assertNothingLeft(t, e)
}

// TestHostileForkBomb: a shell fork bomb under x-pids-max 32 never has more
// than 32 processes, ends at its deadline, and leaves no process or cgroup.
func TestHostileForkBomb(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("forkbomb", "x-pids-max: 32\neffort_minutes: 1\n", "#!/bin/bash\nbomb() { bomb | bomb & }; bomb\nsleep 86420\n")
	start := time.Now()
	r := e.run(dir, "--deadline", "5s")
	r.mustOutcome(t, "timeout")
	const p = "a fork bomb is bounded by pids.max"
	if r.env.Stats.PidsPeak > 32 || r.env.Stats.PidsLimitHits == 0 {
		t.Errorf("%s: pids peak %d, limit hits %d", p, r.env.Stats.PidsPeak, r.env.Stats.PidsLimitHits)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("%s: the run took %v", p, took)
	}
	if left := procsMatching("sleep 86420"); len(left) > 0 {
		t.Errorf("%s: processes left %v", p, left)
	}
	if hasCgroup(t, r.env.InvocationID) {
		t.Errorf("%s: cgroup of %s left", p, r.env.InvocationID)
	}
}

// TestHostileCPUSpin: two threads spinning for 3 s under x-cpu 0.5 get at
// most about half a CPU: the cgroup's own CPU accounting, sampled from the
// host while the skill runs, grows at most ~0.5 s per second (unbounded it
// would be ~2 on two idle cores), and so does the probe's own CPU time.
func TestHostileCPUSpin(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("spinner", "x-cpu: 0.5\n", "probe:hostile")
	done := make(chan result, 1)
	go func() { done <- e.run(dir, "--args", `{"op":"spin","threads":2,"seconds":3}`, "--deadline", "30s") }()
	parent := sandbox.CgroupParentFor(e.runDir)
	var leaf string
	waitFor(t, 15*time.Second, func() bool { leaf = cpuLeaf(parent); return leaf != "" })
	// Skip the start: sample from the skill's first spinning moment on.
	waitFor(t, 15*time.Second, func() bool { u, _, _ := cpuUsage(parent, leaf); return u > 10*time.Millisecond })
	type sample struct {
		at    time.Time
		usage time.Duration
	}
	var samples []sample
	var throttled int64
	for {
		u, th, ok := cpuUsage(parent, leaf)
		if !ok {
			break
		}
		samples = append(samples, sample{time.Now(), u})
		throttled = max(throttled, th)
		time.Sleep(100 * time.Millisecond)
	}
	r := <-done
	r.mustOutcome(t, "success")
	if len(samples) < 10 {
		t.Fatalf("only %d samples of %s", len(samples), leaf)
	}
	first, last := samples[0], samples[len(samples)-1]
	rate := float64(last.usage-first.usage) / float64(last.at.Sub(first.at))
	t.Logf("cgroup CPU rate %.2f CPUs over %v, throttled %d periods; probe: %v", rate, last.at.Sub(first.at), throttled, string(r.env.Result))
	const p = "x-cpu bounds a CPU spin"
	// CFS bandwidth lets each spinning thread overrun a period's quota by up
	// to a runtime slice (sched_cfs_bandwidth_slice_us, 5 ms) plus a tick
	// (4 ms at HZ=250) before it is throttled: 0.5 + 2 × 9/100 CPUs at most.
	// Unbounded, two threads would use about 2.
	const bound = 0.5 + 2*(5.0+4.0)/100
	if rate > bound {
		t.Errorf("%s: the cgroup used %.2f CPUs, quota 0.5, bound %.2f", p, rate, bound)
	}
	// Throttling is logged, not asserted: on a machine busy with other
	// work the spin may get less than its quota and never be throttled.
	var out struct {
		CPU  float64 `json:"cpu_s"`
		Wall float64 `json:"wall_s"`
	}
	json.Unmarshal(r.env.Result, &out)
	if out.Wall < 2.9 || out.CPU > bound*out.Wall+0.3 {
		t.Errorf("%s: the probe got %.2f s of CPU in %.2f s", p, out.CPU, out.Wall)
	}
}

// cpuLeaf finds the one invocation cgroup under parent (v1 cpuacct
// hierarchy, or v2) and returns its name.
func cpuLeaf(parent string) string {
	for _, root := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"} {
		ents, _ := os.ReadDir(root + parent)
		for _, en := range ents {
			if en.IsDir() {
				return en.Name()
			}
		}
	}
	return ""
}

// cpuUsage reads the cgroup's CPU time and throttled periods: v1
// cpuacct.usage and cpu/cpu.stat nr_throttled; v2 cpu.stat usage_usec and
// nr_throttled. ok is false once the cgroup is gone.
func cpuUsage(parent, leaf string) (time.Duration, int64, bool) {
	readStat := func(p string) (map[string]int64, bool) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, false
		}
		stat := map[string]int64{}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(v, 10, 64)
			stat[k] = n
		}
		return stat, true
	}
	for _, acct := range []string{"/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"} {
		b, err := os.ReadFile(filepath.Join(acct, parent, leaf, "cpuacct.usage"))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		stat, ok := readStat(filepath.Join("/sys/fs/cgroup/cpu", parent, leaf, "cpu.stat"))
		return time.Duration(n), stat["nr_throttled"], err == nil && ok
	}
	stat, ok := readStat(filepath.Join("/sys/fs/cgroup", parent, leaf, "cpu.stat"))
	us, has := stat["usage_usec"]
	return time.Duration(us) * time.Microsecond, stat["nr_throttled"], ok && has
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostileSSRF: even with the addresses listed in x-allowed-domains, the
// Http tools never reach link-local (cloud metadata), unspecified, private
// or loopback addresses, in any spelling (IPv4-mapped IPv6, decimal, hex),
// and a listener on this host sees no request. (Decimal and hex spellings
// cannot even be listed: the frontmatter refuses them. Redirects, userinfo and
// names resolving to loopback: TestBrokerHTTP.)
func TestHostileSSRF(t *testing.T) {
	e := newEnv(t)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	fm := "allowed_tools: [HttpFetch, HttpPost]\nx-allowed-domains: [\"169.254.169.254\", \"0.0.0.0\", \"127.0.0.1\", \"10.0.0.1\", \"::1\", \"::ffff:127.0.0.1\", \"localhost\"]\n"
	var cs [][3]string
	for i, u := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://0.0.0.0:" + port + "/",
		"http://127.0.0.1:" + port + "/",
		"http://10.0.0.1:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://2130706433:" + port + "/",
		"http://0x7f.1:" + port + "/",
		"http://localhost:" + port + "/",
	} {
		cs = append(cs, [3]string{fmt.Sprintf("fetch%d", i), "HttpFetch", fmt.Sprintf(`{"url":"%s"}`, u)})
		cs = append(cs, [3]string{fmt.Sprintf("post%d", i), "HttpPost", fmt.Sprintf(`{"url":"%s","body":"x"}`, u)})
	}
	r := e.run(e.skill("ssrf", fm, callScript(cs...)))
	if r.env.Outcome != "success" && strings.Contains(r.stderr, "x-allowed-domains") {
		t.Fatalf("the policy was refused: %s", r.stderr)
	}
	m := calls(t, r)
	for _, c := range cs {
		mustRefuse(t, m, c[0], "domain_violation")
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the Http tools never reach this host: the listener saw %d requests", n)
	}
}
