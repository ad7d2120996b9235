package integration

// Issue 36 finding 6: supervisors sharing one run dir, and sandboxes whose
// supervisor died. A sandbox belongs to the supervisor that made it: no
// `skill run`, second daemon or restart beside it touches it or what it
// uses (its broker socket), and when its supervisor dies it ends within
// moments (its pid 1 watches the supervisor), not at its deadline.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cyberos/supervisor/cgroups"
	"github.com/cyberos/supervisor/supervisor/sandbox"
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

// running waits until d runs n invocations, each with processes in its
// sandbox besides its init, and returns their ids.
func (d *daemonProc) running(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	waitFor(t, 30*time.Second, func() bool {
		ids = ids[:0]
		for _, inv := range d.status().Invocations {
			if len(sandboxProcs(d.e.runDir, inv.InvocationID)) >= 2 {
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
