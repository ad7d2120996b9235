//go:build linux

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInsideTheSandbox checks, from inside, everything DESIGN.md promises a
// skill sees: only the allowed env vars, fds 0-2, a pid namespace holding
// only our init (pid 1, the skill's parent) and the skill, no host pids,
// only lo, no capabilities, no_new_privs, seccomp filter mode, read-only /
// and /usr and /skill, writable /tmp, masked /proc/kcore, fixed hostname.
func TestInsideTheSandbox(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("inside", "", "probe:inside")
	r := e.run(dir, "--tenant", "11111111-2222-3333-4444-555555555555")
	r.mustOutcome(t, "success")
	var in struct {
		Env           []string `json:"env"`
		FDs           []int    `json:"fds"`
		PID           int      `json:"pid"`
		PPID          int      `json:"ppid"`
		InitComm      string   `json:"init_comm"`
		PIDs          []int    `json:"pids"`
		Ifaces        []string `json:"ifaces"`
		Hostname      string   `json:"hostname"`
		UID           int      `json:"uid"`
		UIDMap        string   `json:"uid_map"`
		CapEff        string   `json:"cap_eff"`
		CapPrm        string   `json:"cap_prm"`
		CapInh        string   `json:"cap_inh"`
		CapBnd        string   `json:"cap_bnd"`
		CapAmb        string   `json:"cap_amb"`
		NoNewPrivs    string   `json:"no_new_privs"`
		Seccomp       string   `json:"seccomp"`
		RootWritable  bool     `json:"root_writable"`
		UsrWritable   bool     `json:"usr_writable"`
		SkillWritable bool     `json:"skill_writable"`
		TmpWritable   bool     `json:"tmp_writable"`
		KcoreReadable bool     `json:"kcore_readable"`
		KcoreState    string   `json:"kcore_state"`
	}
	if err := json.Unmarshal(r.env.Result, &in); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, kv := range in.Env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{"CYBEROS_BROKER_SOCKET", "CYBEROS_INVOCATION_ID", "CYBEROS_SKILL_ID", "CYBEROS_TENANT_ID", "HOME", "LANG", "PATH"}
	if !slices.Equal(names, want) {
		t.Errorf("env vars %v, want exactly %v", names, want)
	}
	if !slices.Contains(in.Env, "CYBEROS_TENANT_ID=11111111-2222-3333-4444-555555555555") || !slices.Contains(in.Env, "CYBEROS_INVOCATION_ID="+r.env.InvocationID) {
		t.Errorf("env %v lacks the tenant or invocation id", in.Env)
	}
	if !slices.Equal(in.FDs, []int{0, 1, 2}) {
		t.Errorf("open fds %v, want [0 1 2]", in.FDs)
	}
	if !slices.Equal(in.PIDs, []int{1, in.PID}) || in.PPID != 1 || in.InitComm != "cyberos-init" {
		t.Errorf("visible pids %v, skill pid %d ppid %d, pid 1 is %q; want only cyberos-init as pid 1 and the skill, its child", in.PIDs, in.PID, in.PPID, in.InitComm)
	}
	if !slices.Equal(in.Ifaces, []string{"lo"}) {
		t.Errorf("interfaces %v, want only lo", in.Ifaces)
	}
	for name, v := range map[string]string{"CapEff": in.CapEff, "CapPrm": in.CapPrm, "CapInh": in.CapInh, "CapBnd": in.CapBnd, "CapAmb": in.CapAmb} {
		if v != "0000000000000000" {
			t.Errorf("%s = %s, want 0", name, v)
		}
	}
	if in.NoNewPrivs != "1" || in.Seccomp != "2" {
		t.Errorf("NoNewPrivs %s Seccomp %s, want 1 and 2", in.NoNewPrivs, in.Seccomp)
	}
	if in.RootWritable || in.UsrWritable || in.SkillWritable || !in.TmpWritable {
		t.Errorf("writable: / %v, /usr %v, /skill %v, /tmp %v; want only /tmp", in.RootWritable, in.UsrWritable, in.SkillWritable, in.TmpWritable)
	}
	if in.KcoreReadable || (in.KcoreState != "masked" && in.KcoreState != "absent") {
		t.Errorf("/proc/kcore is %s (readable: %v); it must be masked where the kernel has it", in.KcoreState, in.KcoreReadable)
	}
	if in.Hostname != "skill" {
		t.Errorf("hostname %q, want skill", in.Hostname)
	}
	if in.UID == 0 {
		t.Error("skill runs as uid 0 inside")
	}
	if !strings.Contains(strings.Join(r.env.Containment.Namespaces, ","), "user") {
		t.Logf("no user namespace: %s", r.env.Containment.UserNamespace)
	}
}

// TestHostSeesUnprivilegedUID looks at a running skill from the host: its
// processes must run as a non-root host uid.
func TestHostSeesUnprivilegedUID(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("sleeper", "", "#!/bin/sh\nexec /bin/sleep 31337\n")
	done := make(chan result, 1)
	go func() { done <- e.run(dir, "--deadline", "20s") }()
	var pids []int
	waitFor(t, 10*time.Second, func() bool { pids = procsMatching("sleep 31337"); return len(pids) > 0 })
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no Uid line in %s", b)
	}
	uid, _ := strconv.Atoi(string(m[1]))
	euid, _ := strconv.Atoi(string(m[2]))
	if uid < 1000 || euid < 1000 {
		t.Errorf("host sees uid %d euid %d; want an unprivileged uid (>= 1000)", uid, euid)
	}
	for _, p := range pids {
		_ = killPid(p)
	}
	<-done
}

// TestOOMIsKilled: a skill allocating 1 GiB under x-memory-mb 128 ends
// "killed" (on v2 the parent's memory.events oom_kill grows too), and the
// host (this supervisor, a following run) is unaffected.
func TestOOMIsKilled(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("hog", "x-memory-mb: 128\n", "#!/usr/bin/python3\nb = b'x' * (1 << 30)\nprint('{}')\n")
	unified := kernelCgroupMode(t) == "unified"
	var before uint64
	if unified {
		before = parentMemoryEvent(t, e, "oom_kill")
	}
	r := e.run(dir, "--deadline", "60s")
	r.mustOutcome(t, "killed")
	if r.env.Stats.OOMKills == 0 {
		t.Errorf("stats report no OOM kill: %+v", r.env.Stats)
	}
	// v2: the kernel's own count, in the parent's hierarchical memory.events.
	if unified {
		if n := parentMemoryEvent(t, e, "oom_kill"); n <= before {
			t.Errorf("memory.events oom_kill of %s went %d -> %d: the kernel saw no OOM kill", e.runDirCgroupParent(), before, n)
		}
	}
	if r.env.Stats.MemoryPeakBytes > 129<<20 {
		t.Errorf("memory peak %d is above the 128 MiB limit", r.env.Stats.MemoryPeakBytes)
	}
	after := e.run(e.skill("ok", "", "#!/bin/sh\necho '{\"ok\":true}'\n"))
	after.mustOutcome(t, "success")
}

// TestPidsMax: 200 children under x-pids-max 32 → fewer than 32 start.
func TestPidsMax(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("forker", "x-pids-max: 32\n", "probe:forkmany")
	r := e.run(dir, "--deadline", "60s")
	r.mustOutcome(t, "success")
	var got struct{ Started int }
	if err := json.Unmarshal(r.env.Result, &got); err != nil {
		t.Fatal(err)
	}
	if got.Started >= 32 || got.Started == 0 {
		t.Errorf("%d children started under pids.max 32; want 0 < n < 32", got.Started)
	}
	if r.env.Stats.PidsLimitHits == 0 || r.env.Stats.PidsPeak > 32 {
		t.Errorf("pids stats %+v: want limit hits > 0 and peak <= 32", r.env.Stats)
	}
}

// TestDeadlineKillsEverything: a SIGTERM-ignoring skill with a setsid,
// double-forked grandchild and --deadline 4s gets SIGTERM at about 3.6 s,
// ends "timeout" at about 4 s, and leaves no process or cgroup behind.
func TestDeadlineKillsEverything(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("stubborn", "effort_minutes: 1\n", "probe:deadline")
	// The deadline scales with the machine: the probe must have installed
	// its SIGTERM handler before 90 % of it, and a slow guest takes seconds
	// to start a Go binary in a new sandbox.
	deadline := slow(4 * time.Second)
	start := time.Now()
	r := e.run(dir, "--deadline", deadline.String())
	took := time.Since(start)
	r.mustOutcome(t, "timeout")
	m := regexp.MustCompile(`SIGTERM after (\d+) ms`).FindStringSubmatch(r.env.LogTail)
	if m == nil {
		t.Fatalf("the skill never saw SIGTERM; log tail: %q", r.env.LogTail)
	}
	// The deadline's timers start when the sandbox is running, so the
	// skill's own clock sees SIGTERM at about 90 % of the deadline.
	// Bounds: nominal plus or minus slack, the slack stretched on slow
	// machines. The skill's clock starts once it runs, after the timers, so
	// a slow exec makes it see SIGTERM early.
	termMS, _ := strconv.Atoi(m[1])
	term := time.Duration(termMS) * time.Millisecond
	nominal := deadline * 9 / 10
	if term < nominal-slow(200*time.Millisecond) || term > nominal+slow(350*time.Millisecond) {
		t.Errorf("SIGTERM seen after %d ms, want about %d", termMS, nominal.Milliseconds())
	}
	if dur := time.Duration(r.env.DurationMS) * time.Millisecond; dur < deadline-50*time.Millisecond || dur > deadline+slow(2*time.Second) {
		t.Errorf("duration %d ms, want about %d", r.env.DurationMS, deadline.Milliseconds())
	}
	if took > deadline+slow(4*time.Second) {
		t.Errorf("skill run took %v", took)
	}
	if left := procsMatching("sleep 98765"); len(left) > 0 {
		t.Errorf("processes of the skill survived the deadline: %v", left)
	}
	if hasCgroup(t, r.env.InvocationID) {
		t.Errorf("cgroup of %s left behind", r.env.InvocationID)
	}
}

// TestOutcomes: SIGABRT → panic; exit 3 → error carrying the stderr tail;
// one JSON value on stdout → success with the RFC 8785 hash.
func TestOutcomes(t *testing.T) {
	e := newEnv(t)
	t.Run("abort is panic", func(t *testing.T) {
		r := e.run(e.skill("aborts", "", "#!/usr/bin/python3\nimport os\nos.abort()\n"))
		r.mustOutcome(t, "panic")
		if !strings.Contains(r.env.ErrorMessage, "SIGABRT") || r.env.ResultHash != "" || r.code != 1 {
			t.Errorf("panic envelope: %+v exit %d", r.env, r.code)
		}
	})
	t.Run("exit 3 is error with stderr tail", func(t *testing.T) {
		r := e.run(e.skill("fails", "", "#!/bin/sh\necho 'disk on fire' >&2\nexit 3\n"))
		r.mustOutcome(t, "error")
		if !strings.Contains(r.env.ErrorMessage, "exit status 3") || !strings.Contains(r.env.ErrorMessage, "disk on fire") {
			t.Errorf("error_message %q lacks the status or the stderr tail", r.env.ErrorMessage)
		}
		if r.env.ResultHash != "" || r.code != 1 {
			t.Errorf("error envelope has result_hash %q, exit %d", r.env.ResultHash, r.code)
		}
	})
	t.Run("not json is error", func(t *testing.T) {
		r := e.run(e.skill("chatty", "", "#!/bin/sh\necho hello\n"))
		r.mustOutcome(t, "error")
	})
	t.Run("json is success with canonical hash", func(t *testing.T) {
		// RFC 8785 §3.2.2 input; its canonical form is fixed by the RFC.
		out := `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`
		canon := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
		if err := os.WriteFile(filepath.Join(e.base, "out.json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := e.skill("emits", "", "#!/bin/sh\ncat <<'EOF'\n"+out+"\nEOF\n")
		r := e.run(dir)
		r.mustOutcome(t, "success")
		sum := sha256.Sum256([]byte(canon))
		if want := hex.EncodeToString(sum[:]); r.env.ResultHash != want {
			t.Errorf("result_hash %s, want %s (sha256 of the RFC 8785 form)", r.env.ResultHash, want)
		}
		if r.code != 0 {
			t.Errorf("exit %d on success", r.code)
		}
	})
	t.Run("args reach stdin", func(t *testing.T) {
		r := e.run(e.skill("echoes", "", "#!/bin/sh\ncat\n"), "--args", `{"a": [1, 2]}`)
		r.mustOutcome(t, "success")
		if string(r.env.Result) != `{"a":[1,2]}` {
			t.Errorf("result %s, want the args back", r.env.Result)
		}
	})
}

// TestConcurrentInvocationsLeaveNothing: 100 invocations at once all
// succeed, and no cgroup, container state, lock or mount is left.
func TestConcurrentInvocationsLeaveNothing(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("quick", "", "#!/bin/sh\nprintf '{\"n\":%s}' \"$(cat)\"\n")
	const n = 100
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.run(dir, "--args", strconv.Itoa(i))
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.env.Outcome != "success" || string(r.env.Result) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("invocation %d: outcome %s result %s err %s stderr %s", i, r.env.Outcome, r.env.Result, r.env.ErrorMessage, r.stderr)
		}
		if hasCgroup(t, r.env.InvocationID) {
			t.Errorf("cgroup of %s left behind", r.env.InvocationID)
		}
	}
	assertNothingLeft(t, e)
}

func assertNothingLeft(t *testing.T, e *env) {
	t.Helper()
	for _, sub := range []string{"containers", "locks"} {
		ents, _ := os.ReadDir(filepath.Join(e.runDir, sub))
		if len(ents) > 0 {
			t.Errorf("%s/%s not empty: %d entries", e.runDir, sub, len(ents))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), e.base) {
		t.Errorf("mounts under %s left in the host namespace", e.base)
	}
	if ents, _ := os.ReadDir(e.runDir); len(ents) > 0 {
		for _, d := range ents {
			if strings.HasPrefix(d.Name(), "rootfs.") {
				t.Errorf("scratch %s left", d.Name())
			}
		}
	}
}

// TestBadInputIsRefused: every kind of bad skill exits 2 naming the
// problem, and nothing runs.
func TestBadInputIsRefused(t *testing.T) {
	e := newEnv(t)
	ok := "#!/bin/sh\necho '{}'\n"
	cases := []struct {
		name, fm, main, want string
		mutate               func(dir string)
		flags                []string
	}{
		{name: "malformed yaml", fm: "allowed_tools: [Read\n", main: ok, want: "invalid YAML"},
		{name: "wrong type", fm: "x-memory-mb: lots\n", main: ok, want: "x-memory-mb"},
		{name: "negative limit", fm: "x-pids-max: -5\n", main: ok, want: "x-pids-max"},
		{name: "absurd limit", fm: "x-memory-mb: 99999999\n", main: ok, want: "x-memory-mb"},
		{name: "unknown tool", fm: "allowed_tools: [Reed]\n", main: ok, want: "Reed"},
		{name: "near miss key", fm: "disalowed_tools: [Bash]\n", main: ok, want: "disallowed_tools"},
		{name: "unknown profile", fm: "x-seccomp-profile: nosuchprofile\n", main: ok, want: "nosuchprofile"},
		{name: "missing main", fm: "", main: ok, want: "entrypoint", mutate: func(d string) { os.Remove(filepath.Join(d, "main")) }},
		{name: "main not executable", fm: "", main: ok, want: "executable", mutate: func(d string) { os.Chmod(filepath.Join(d, "main"), 0o644) }},
		{name: "main symlinked out", fm: "", main: ok, want: "symlink", mutate: func(d string) {
			os.Remove(filepath.Join(d, "main"))
			os.Symlink("/bin/true", filepath.Join(d, "main"))
		}},
		{name: "SKILL.md symlinked out", fm: "", main: ok, want: "symlink", mutate: func(d string) {
			other := filepath.Join(e.base, "elsewhere.md")
			os.Rename(filepath.Join(d, "SKILL.md"), other)
			os.Symlink(other, filepath.Join(d, "SKILL.md"))
		}},
		{name: "unknown start", fm: "", main: ok, want: `--start: want cold or warm, got "tepid"`, flags: []string{"--start", "tepid"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := e.skill(fmt.Sprintf("bad%d", i), c.fm, c.main)
			if c.mutate != nil {
				c.mutate(dir)
			}
			r := e.run(dir, c.flags...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("message %q does not name %q", r.stderr, c.want)
			}
			if r.stdout != "" {
				t.Errorf("something was printed on stdout: %s", r.stdout)
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(e.stateDir, "logs")); len(ents) > 0 {
		t.Errorf("a refused skill left %d logs: something ran", len(ents))
	}
	if cg := cgroupLeaves(t); len(cg) > 0 {
		for _, l := range cg {
			if strings.Contains(l, "bad") {
				t.Errorf("cgroup %s exists", l)
			}
		}
	}
}

// TestUnusableStateDirRefuses: a state dir that cannot be written → exit 3
// and the skill never starts.
func TestUnusableStateDirRefuses(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(e.base, "ran")
	dir := e.skill("touches", "", "#!/bin/sh\necho '{}'\n")
	blocker := filepath.Join(e.base, "file-not-dir")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := cyberos("skill", "run", dir, "--json", "--state-dir", filepath.Join(blocker, "state"), "--run-dir", e.runDir,
		"--seccomp-profiles", filepath.Join(repoRoot, "seccomp-profiles"))
	out, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 3 {
		t.Fatalf("exit %d, want 3: %s", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the skill ran")
	}
	if ents, _ := os.ReadDir(filepath.Join(e.runDir, "containers")); len(ents) > 0 {
		t.Error("a container was created")
	}
}

// TestCrashLeftoversAreCleaned: the supervisor is SIGKILLed mid-run; the
// sandbox's pid 1 ends its processes (the supervisor's end of its control
// pipe closed), its container state and cgroup survive it, and the next
// start removes them.
func TestCrashLeftoversAreCleaned(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("orphan", "", "#!/bin/sh\nexec /bin/sleep 42424\n")
	cmd := e.command(dir, "--deadline", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(procsMatching("sleep 42424")) > 0 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	ents, _ := os.ReadDir(filepath.Join(e.runDir, "containers"))
	if len(ents) != 1 {
		t.Fatalf("expected the crashed run's container state, found %d entries", len(ents))
	}
	id := ents[0].Name()
	if !hasCgroup(t, id) {
		t.Fatal("the crash left nothing to clean; the test proves nothing")
	}
	waitFor(t, 2*time.Second, func() bool { return len(procsMatching("sleep 42424")) == 0 })
	r := e.run(e.skill("next", "", "#!/bin/sh\necho '{}'\n"))
	r.mustOutcome(t, "success")
	if left := procsMatching("sleep 42424"); len(left) > 0 {
		t.Errorf("orphaned skill still running: %v", left)
	}
	if hasCgroup(t, id) {
		t.Errorf("cgroup of crashed %s left", id)
	}
	assertNothingLeft(t, e)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
