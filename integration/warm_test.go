//go:build linux

package integration

// Warm sandboxes in the daemon: made ahead per skill shape, each serving
// exactly one invocation with the same containment as a cold start, never
// stale after a SKILL.md edit, discarded when poisoned, within budget, and
// gone when the daemon stops.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// warmEnvelope is the part of an envelope these tests compare.
type warmEnvelope struct {
	InvocationID string          `json:"invocation_id"`
	Outcome      string          `json:"outcome"`
	Result       json.RawMessage `json:"result"`
	LogTail      string          `json:"log_tail"`
	Containment  map[string]any  `json:"containment"`
}

func (d *daemonProc) invokeWarm(t *testing.T, body map[string]any) warmEnvelope {
	t.Helper()
	code, _, raw := d.invoke(body)
	var env warmEnvelope
	if code != 200 || json.Unmarshal([]byte(raw), &env) != nil {
		t.Fatalf("invoke %v: %d %s", body, code, raw)
	}
	return env
}

// warmDirs lists this env's warm sandboxes by their cgroup directories in
// one hierarchy (pids under v1, the unified one under v2): those with a
// process, so not one whose invocation ended and which is being destroyed
// after the answer.
func warmDirs(e *env) []string {
	var out []string
	for _, d := range envCgroups(e) {
		first, _, _ := strings.Cut(strings.TrimPrefix(d, "/sys/fs/cgroup/"), "/")
		if !strings.HasPrefix(filepath.Base(d), "warm-") || (first != "pids" && !strings.HasPrefix(first, "cyberos")) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// waitWarm waits until the env holds at least n warm sandboxes.
func waitWarm(t *testing.T, e *env, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool { return len(warmDirs(e)) >= n })
}

// warmProbe prints what a test compares between warm and cold starts: the
// invocation id the skill was given, its args (stdin), its capabilities,
// its seccomp mode, its uid, and whether its /tmp was used before.
const warmProbeScript = `#!/bin/sh
args=$(cat)
reused=no
[ -e /tmp/used ] && reused=yes
touch /tmp/used
caps=$(grep CapEff /proc/self/status | tr -d '\t' | cut -d: -f2)
sec=$(grep '^Seccomp:' /proc/self/status | tr -d '\t' | cut -d: -f2)
read_ok=no
/run/cyberos/bin/cyberos-tool call Read '{"path":"DATA"}' >/dev/null 2>&1 && read_ok=yes
printf '{"id":"%s","args":%s,"reused":"%s","caps":"%s","seccomp":"%s","uid":%d,"read":"%s"}\n' "$CYBEROS_INVOCATION_ID" "$args" "$reused" "$caps" "$sec" "$(id -u)" "$read_ok"
`

type probeResult struct {
	ID      string          `json:"id"`
	Args    json.RawMessage `json:"args"`
	Reused  string          `json:"reused"`
	Caps    string          `json:"caps"`
	Seccomp string          `json:"seccomp"`
	UID     int             `json:"uid"`
	Read    string          `json:"read"`
}

func probeOf(t *testing.T, env warmEnvelope) probeResult {
	t.Helper()
	var p probeResult
	if env.Outcome != "success" || json.Unmarshal(env.Result, &p) != nil {
		t.Fatalf("probe: outcome %s result %s log %s", env.Outcome, env.Result, env.LogTail)
	}
	return p
}

// warmSkill makes the probe skill name, allowed to Read one data file.
func warmSkill(t *testing.T, e *env, name, extra string) string {
	t.Helper()
	data := filepath.Join(e.base, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, "note.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fm := fmt.Sprintf("allowed_tools: [Read]\nx-allowed-files: [\"%s/**\"]\n", data) + extra
	return e.skill(name, fm, strings.Replace(warmProbeScript, "DATA", file, 1))
}

// TestWarmSandboxServesLikeCold: the first invocation of a skill starts
// cold, the next gets a warm sandbox; both are contained alike (same
// containment record but for start and host uid, no capabilities, seccomp
// filter on, the broker reachable), the warm one gets its own invocation
// id and args, and its /tmp was never used.
func TestWarmSandboxServesLikeCold(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	warmSkill(t, e, "probe", "")
	d := startDaemon(t, e)
	cold := d.invokeWarm(t, map[string]any{"skill_id": "probe", "args": map[string]any{"n": 1}})
	if cold.Containment["start"] != "cold" {
		t.Fatalf("first invocation: start %v, want cold", cold.Containment["start"])
	}
	waitWarm(t, e, 1)
	warm := d.invokeWarm(t, map[string]any{"skill_id": "probe", "args": map[string]any{"n": 2}})
	if warm.Containment["start"] != "warm" {
		t.Fatalf("second invocation: start %v, want warm", warm.Containment["start"])
	}
	pc, pw := probeOf(t, cold), probeOf(t, warm)
	if pw.ID != warm.InvocationID || pc.ID != cold.InvocationID || pw.ID == pc.ID {
		t.Errorf("invocation ids seen by the skill: cold %s (envelope %s), warm %s (envelope %s)", pc.ID, cold.InvocationID, pw.ID, warm.InvocationID)
	}
	if string(pw.Args) != `{"n":2}` || pw.Reused != "no" {
		t.Errorf("warm skill: args %s reused %s, want {\"n\":2} and a fresh /tmp", pw.Args, pw.Reused)
	}
	for _, p := range []probeResult{pc, pw} {
		if p.Caps != "0000000000000000" || p.Seccomp != "2" || p.Read != "yes" || p.UID != 1000 {
			t.Errorf("contained skill: %+v, want no capabilities, seccomp filter mode 2, uid 1000, Read through the broker", p)
		}
	}
	// Each sandbox has its own host id range.
	for _, k := range []string{"start", "host_uid", "user_namespace", "userns_owner"} {
		delete(cold.Containment, k)
		delete(warm.Containment, k)
	}
	cb, _ := json.Marshal(cold.Containment)
	wb, _ := json.Marshal(warm.Containment)
	if string(cb) != string(wb) {
		t.Errorf("containment differs:\ncold %s\nwarm %s", cb, wb)
	}
	// The started row records the warm start too.
	var started int
	for _, r := range e.auditRows("--invocation", warm.InvocationID) {
		if r.Kind == "skill.invoked_started" && strings.Contains(string(r.Payload), `"start":"warm"`) {
			started++
		}
	}
	if started != 1 {
		t.Errorf("started rows of the warm invocation recording start warm: %d, want 1", started)
	}
}

// TestWarmNeverHandedTwice: rounds of concurrent invocations of one skill;
// every sandbox serves one invocation (its /tmp is always fresh, every
// invocation id distinct), and the pool does hand out warm sandboxes.
func TestWarmNeverHandedTwice(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	warmSkill(t, e, "probe", "")
	d := startDaemon(t, e, "warm: {max_sandboxes: 8, max_per_skill: 4}")
	seen := map[string]bool{}
	var mu sync.Mutex
	warmStarts := 0
	for round := range 4 {
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				env := d.invokeWarm(t, map[string]any{"skill_id": "probe", "args": map[string]any{"r": round, "i": i}})
				p := probeOf(t, env)
				mu.Lock()
				defer mu.Unlock()
				if p.Reused != "no" || seen[p.ID] || p.ID != env.InvocationID {
					t.Errorf("round %d: %+v (envelope %s): a sandbox served twice", round, p, env.InvocationID)
				}
				seen[p.ID] = true
				if env.Containment["start"] == "warm" {
					warmStarts++
				}
			}()
		}
		wg.Wait()
		waitWarm(t, e, 1)
	}
	if warmStarts == 0 {
		t.Errorf("16 invocations, none warm")
	}
}

// TestWarmSkillEditIsHonoured: after SKILL.md changes, the next invocation
// runs under the new frontmatter (no stale warm sandbox), and the old
// shape's warm sandboxes are destroyed.
func TestWarmSkillEditIsHonoured(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	dir := warmSkill(t, e, "probe", "x-memory-mb: 64\n")
	d := startDaemon(t, e)
	d.invokeWarm(t, map[string]any{"skill_id": "probe"})
	waitWarm(t, e, 1)
	old := warmDirs(e)
	md := filepath.Join(dir, "SKILL.md")
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(md, []byte(strings.Replace(string(b), "x-memory-mb: 64", "x-memory-mb: 96", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := d.invokeWarm(t, map[string]any{"skill_id": "probe"})
	if got := env.Containment["memory_max_bytes"]; got != float64(96<<20) || env.Containment["start"] != "cold" {
		t.Fatalf("after the edit: memory_max_bytes %v start %v, want %d from a cold start", got, env.Containment["start"], 96<<20)
	}
	waitFor(t, 20*time.Second, func() bool {
		for _, o := range old {
			if _, err := os.Stat(o); err == nil {
				return false
			}
		}
		return true
	})
}

// TestWarmPoisonedIsDiscarded: a warm sandbox whose init was killed is
// never handed out: the invocation starts cold and succeeds.
func TestWarmPoisonedIsDiscarded(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	warmSkill(t, e, "probe", "")
	d := startDaemon(t, e, "warm: {max_sandboxes: 1, max_per_skill: 1}")
	d.invokeWarm(t, map[string]any{"skill_id": "probe"})
	waitWarm(t, e, 1)
	dirs := warmDirs(e)
	if len(dirs) != 1 {
		t.Fatalf("warm sandboxes %v, want 1", dirs)
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
	if err != nil || len(strings.Fields(string(b))) == 0 {
		t.Fatalf("warm sandbox's processes: %q %v", b, err)
	}
	for _, f := range strings.Fields(string(b)) {
		var pid int
		fmt.Sscan(f, &pid)
		_ = syscall.Kill(pid, syscall.SIGKILL) // the sandbox's init, started by our daemon
	}
	// SIGKILL is delivered asynchronously: wait until the init is gone.
	waitFor(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
		return err != nil || len(strings.Fields(string(b))) == 0
	})
	env := d.invokeWarm(t, map[string]any{"skill_id": "probe"})
	if env.Containment["start"] != "cold" {
		t.Fatalf("after its warm sandbox was poisoned: start %v, want cold", env.Containment["start"])
	}
	probeOf(t, env)
}

// TestWarmPoolBudgetAndShutdown: the pool never holds more than
// warm.max_sandboxes, and a stopped daemon leaves no warm sandbox, cgroup,
// container state or socket behind.
func TestWarmPoolBudgetAndShutdown(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	warmSkill(t, e, "a", "")
	warmSkill(t, e, "b", "")
	d := startDaemon(t, e, "warm: {max_sandboxes: 2, max_per_skill: 4}")
	most := 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				most = max(most, len(warmDirs(e)))
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probeOf(t, d.invokeWarm(t, map[string]any{"skill_id": string(rune('a' + i%2))}))
		}()
	}
	wg.Wait()
	waitWarm(t, e, 2)
	time.Sleep(slow(300 * time.Millisecond)) // the subject: a window in which a refill past the budget would show
	close(stop)
	<-sampled
	if most > 2 {
		t.Errorf("up to %d warm sandboxes at once, want at most warm.max_sandboxes 2", most)
	}
	d.stop(slow(30 * time.Second))
	if left := envCgroups(e); len(left) > 0 {
		t.Errorf("cgroups left after the daemon stopped: %v", left)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.runDir, "containers")); len(ents) > 0 {
		t.Errorf("container state left: %d entries", len(ents))
	}
	if socks, _ := filepath.Glob(filepath.Join(d.socketDir, "*.sock")); len(socks) > 0 {
		t.Errorf("broker sockets left: %v", socks)
	}
}

// TestWarmSandboxesEndWithADeadDaemon: a daemon killed with warm sandboxes
// ready leaves nothing running (each init sees its control pipe close and
// exits), and the next start removes what is left of them.
func TestWarmSandboxesEndWithADeadDaemon(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	warmSkill(t, e, "probe", "")
	d := startDaemon(t, e)
	d.invokeWarm(t, map[string]any{"skill_id": "probe"})
	waitWarm(t, e, 1)
	if err := killPid(d.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if !testutil.Eventually(slow(10*time.Second), func() bool { return len(envProcs(e)) == 0 }) {
		t.Fatalf("processes of the dead daemon's sandboxes still alive after 10s: %s", describeProcs(envProcs(e)))
	}
	startDaemon(t, e)
	if left := envCgroups(e); len(left) > 0 {
		t.Errorf("cgroups of the dead daemon's warm sandboxes left after a restart: %v", left)
	}
	if socks, _ := filepath.Glob(filepath.Join(d.socketDir, "*.sock")); len(socks) > 0 {
		t.Errorf("broker sockets left after a restart: %v", socks)
	}
}
