//go:build linux

package integration

// Issue 36 finding 6: supervisors sharing one run dir, and sandboxes whose
// supervisor died. A sandbox belongs to the supervisor that made it: no
// `skill run`, second daemon or restart beside it touches it or what it
// uses (its broker socket), and when its supervisor dies it ends within
// moments (its pid 1 watches the supervisor), not at its deadline.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/sandbox"
)

// sandboxProcs lists the processes of the sandbox id of run dir runDir
// (its cgroup at the hierarchy root, cgroup_placement root).
func sandboxProcs(runDir, id string) []int {
	pids, _ := cgroups.Procs(sandbox.CgroupParentFor(runDir) + "/" + id)
	return pids
}

// noSandboxProcs reports whether no sandbox of run dir runDir has a process
// left (its cgroups read without an error).
func noSandboxProcs(runDir string) bool {
	pids, err := cgroups.Procs(sandbox.CgroupParentFor(runDir))
	return err == nil && len(pids) == 0
}

// skillRuns reports whether sandbox id runs its skill: its init and
// another process, none of them still libcontainer's (runc:[...], the
// init before its exec of cyberos-init: with that one, two processes may
// be libcontainer's alone).
func skillRuns(runDir, id string) bool {
	pids := sandboxProcs(runDir, id)
	for _, pid := range pids {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.HasPrefix(string(comm), "runc:") {
			return false
		}
	}
	return len(pids) >= 2
}

// running waits until d runs n invocations, each with its skill running in
// its sandbox (skillRuns), and returns their ids.
func (d *daemonProc) running(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	waitFor(t, 30*time.Second, func() bool {
		ids = ids[:0]
		for _, inv := range d.status().Invocations {
			if skillRuns(d.e.runDir, inv.InvocationID) {
				ids = append(ids, inv.InvocationID)
			}
		}
		return len(ids) == n
	})
	return ids
}

// A daemon killed outright (kill -9) during a long invocation: the
// sandbox, and every warm one the daemon had made, is gone within ~1 s,
// long before the 60 s deadline.
func TestSandboxEndsWithItsSupervisor(t *testing.T) {
	e := newEnv(t)
	e.skill("long", "effort_minutes: 1\n", "#!/bin/sh\n/bin/sleep 161803 &\nexec /bin/sleep 141421\n")
	// Whatever this test leaves running ends with it.
	t.Cleanup(func() { _ = cgroups.KillAll(sandbox.CgroupParentFor(e.runDir)) })
	d := startDaemon(t, e, "cgroup_placement: root")
	go func() {
		// The daemon is killed during the call: no answer comes.
		resp, err := d.client.Post("http://cyberos/v1/invocations", "application/json", strings.NewReader(`{"skill_id":"long"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	id := d.running(t, 1)[0]
	waitFor(t, 10*time.Second, func() bool {
		return len(procsMatching("sleep 141421")) == 1 && len(procsMatching("sleep 161803")) == 1
	})
	// A warm sandbox of the skill's shape, made beside it.
	waitFor(t, 20*time.Second, func() bool {
		ents, _ := os.ReadDir(filepath.Join(e.runDir, "containers"))
		return len(ents) >= 2
	})
	t0 := time.Now()
	if err := killPid(d.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	waitFor(t, 2*time.Second, func() bool {
		return noSandboxProcs(e.runDir) && len(procsMatching("sleep 141421")) == 0 && len(procsMatching("sleep 161803")) == 0
	})
	t.Logf("sandbox %s and the warm ones ended %v after the daemon was killed (deadline 60 s)", id, time.Since(t0).Round(time.Millisecond))
	// The next start removes what is left (cgroups, state) and closes the
	// invocation as lost.
	d2 := startDaemon(t, e, "cgroup_placement: root")
	if hasCgroup(t, id) {
		t.Errorf("the next start left the killed daemon's sandbox cgroup %s", id)
	}
	d2.stop(30 * time.Second)
}

// Several supervisors on one run dir (and one broker socket dir, as the
// defaults give them) beside a daemon's long invocations: `skill run`s,
// cold and warm, and a second daemon started, stopped, killed and
// restarted. The long invocations run until the test stops them, with
// every tool call answered, their broker sockets stay, and every other run
// succeeds.
func TestSupervisorsShareARunDir(t *testing.T) {
	e := newEnv(t)
	sockets := filepath.Join(e.runDir, "sockets")
	data := filepath.Join(e.base, "data")
	must(t, os.MkdirAll(data, 0o755))
	must(t, os.WriteFile(filepath.Join(data, "x.txt"), []byte("x"), 0o644))
	// A tool call every 0.3 s until the test makes data/stop (at most 100
	// rounds, inside the 60 s deadline); any refused call ends it in error.
	e.skill("long", "effort_minutes: 1\nallowed_tools: [Read]\nx-allowed-files: ['"+data+"/**']\n", `#!/bin/sh
T=/run/cyberos/bin/cyberos-tool
i=0
while [ $i -lt 100 ]; do
  $T call Read '{"path":"`+data+`/x.txt"}' >/dev/null || exit 3
  i=$((i+1))
  if $T call Read '{"path":"`+data+`/stop"}' >/dev/null 2>&1; then echo "{\"calls\":$i}"; exit 0; fi
  /bin/sleep 0.3
done
exit 4
`)
	a := startDaemon(t, e, "cgroup_placement: root", "socket_dir: "+sockets)
	type answer struct {
		code int
		env  envelope
		raw  string
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			code, env, raw := a.invoke(map[string]any{"skill_id": "long"})
			answers <- answer{code, env, raw}
		}()
	}
	ids := a.running(t, 2)
	alive := func(when string) {
		t.Helper()
		for _, id := range ids {
			if len(sandboxProcs(e.runDir, id)) < 2 {
				t.Errorf("%s: the daemon's sandbox %s was ended", when, id)
			}
			if _, err := os.Lstat(filepath.Join(sockets, "cyberos-skill-broker."+id+".sock")); err != nil {
				t.Errorf("%s: the broker socket of the daemon's live invocation %s: %v", when, id, err)
			}
		}
	}

	// Others on the same run dir and socket dir, each with its own state dir.
	other := newEnv(t)
	other.runDir = e.runDir
	quick := other.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	skillRun := func(start string) *exec.Cmd {
		return cyberos("skill", "run", quick, "--json", "--start", start, "--state-dir", other.stateDir, "--run-dir", e.runDir,
			"--seccomp-profiles", filepath.Join(repoRoot, "seccomp-profiles"))
	}
	var wg sync.WaitGroup
	runs := func(n int) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := []string{"cold", "warm"}[i%2]
				var out, errb bytes.Buffer
				c := skillRun(start)
				c.Stdout, c.Stderr = &out, &errb
				err := c.Run()
				var env envelope
				_ = json.Unmarshal(out.Bytes(), &env)
				if err != nil || env.Outcome != "success" {
					t.Errorf("skill run --start %s beside the daemon: %v, outcome %q\n%s%s", start, err, env.Outcome, out.String(), errb.String())
				}
			}()
		}
	}
	bConfig := []string{"cgroup_placement: root", "socket_dir: " + sockets}
	runs(4)
	b := startDaemon(t, other, bConfig...)
	runs(4)
	alive("a second daemon started")
	if code, env, raw := b.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
		t.Errorf("the second daemon's invocation: %d %s", code, raw)
	}
	b.stop(30 * time.Second)
	alive("the second daemon stopped")
	b = startDaemon(t, other, bConfig...)
	if err := killPid(b.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	runs(2)
	b = startDaemon(t, other, bConfig...) // a restart after a crash
	alive("the second daemon restarted after kill -9")
	wg.Wait()
	b.stop(30 * time.Second)
	alive("the skill runs ended")

	must(t, os.WriteFile(filepath.Join(data, "stop"), nil, 0o644))
	for range 2 {
		ans := <-answers
		var res struct{ Calls int }
		_ = json.Unmarshal(ans.env.Result, &res)
		if ans.code != 200 || ans.env.Outcome != "success" || res.Calls < 3 {
			t.Errorf("the daemon's long invocation beside the others: %d %s", ans.code, ans.raw)
		}
	}
	t.Logf("long invocations %v ran to their end", ids)
}
