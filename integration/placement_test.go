//go:build linux

package integration

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/sandbox"
)

// fakeService makes a cgroup named like a systemd service's in every
// hierarchy the daemon's sandboxes use (not cpuset, whose new cgroups hold
// no CPU until configured), marks it delegated as systemd 251+ does when
// marked, and returns its path and the directories a process joins to be
// in it. The cleanup removes what is left under it, deepest first.
func fakeService(t *testing.T, marked bool) (string, []string) {
	t.Helper()
	h := cgroups.System()
	name := fmt.Sprintf("/cyberos-it-svc-%d.service", os.Getpid())
	var dirs []string
	var mark string
	switch h.Mode {
	case cgroups.Unified:
		dirs = []string{cgroups.DefaultRoot + name}
		mark = dirs[0]
	case cgroups.Hybrid, cgroups.Legacy:
		ents, _ := os.ReadDir(cgroups.DefaultRoot)
		for _, e := range ents {
			d := filepath.Join(cgroups.DefaultRoot, e.Name())
			if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil || e.Name() == "cpuset" {
				continue
			}
			dirs = append(dirs, d+name)
		}
		mark = filepath.Join(cgroups.DefaultRoot, map[bool]string{true: "unified", false: "systemd"}[h.Mode == cgroups.Hybrid]) + name
	default:
		t.Fatalf("no cgroup hierarchy: %v", h.Mode)
	}
	t.Cleanup(func() {
		// Every hierarchy: libcontainer also makes the sandboxes' parent
		// in those the daemon did not join (cpuset ...).
		roots, _ := filepath.Glob(cgroups.DefaultRoot + "/*" + name)
		if _, err := os.Stat(cgroups.DefaultRoot + name); err == nil {
			roots = append(roots, cgroups.DefaultRoot+name)
		}
		for _, d := range roots {
			var all []string
			_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
				if err == nil && de.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			slices.Reverse(all)
			for _, p := range all {
				_ = os.Remove(p)
			}
		}
	})
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if !marked {
		return name, dirs
	}
	if err := unix.Setxattr(mark, cgroups.DelegateXattr, []byte("1"), 0); err != nil {
		t.Fatalf("mark %s delegated: %v", mark, err)
	}
	return name, dirs
}

// procCgroup is pid's cgroup path for controller ("" for the v2 entry).
func procCgroup(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (parts[1] == controller || slices.Contains(strings.Split(parts[1], ","), controller) && controller != "") {
			return parts[2]
		}
	}
	t.Fatalf("pid %d has no %q entry in:\n%s", pid, controller, b)
	return ""
}

// TestSandboxCgroupsUnderTheDelegatedService: run by a service manager that
// delegated its cgroup (here a stand-in for systemd's Delegate=yes: the
// cgroup, its mark, the daemon started inside), the daemon makes every
// sandbox's cgroup under its own, where the unit's KillMode and `systemctl
// status` reach it: <service>/cyberos-<hash>/<id>, with the daemon itself in
// <service>/supervisor on cgroup v2. The test reads /proc/<skill pid>/cgroup.
// After the daemon stops, nothing is left under the service's cgroup.
// Runs on the host (cgroup v1 hybrid) and in the VM (v2).
func TestSandboxCgroupsUnderTheDelegatedService(t *testing.T) {
	placedUnderService(t, true, nil)
}

// TestUnitPlacesSandboxesWithoutTheDelegationMark: systemd before 251
// delegates a Delegate=yes unit's cgroup without marking it, where
// cgroup_placement: auto would fall back to the root; the shipped unit's
// --cgroup-placement service still puts every sandbox under the unit.
func TestUnitPlacesSandboxesWithoutTheDelegationMark(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot, "packaging", "cyberos-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "--cgroup-placement service\n") {
		t.Errorf("the unit's ExecStart does not say --cgroup-placement service:\n%s", unit)
	}
	placedUnderService(t, false, []string{"--cgroup-placement", "service"})
}

// placedUnderService runs a daemon (with args) inside a fake service's
// cgroup, marked as delegated or not, and checks where its sandboxes'
// cgroups are made and that none is left after it stops.
func placedUnderService(t *testing.T, marked bool, args []string) {
	e := newEnv(t)
	service, dirs := fakeService(t, marked)
	dir := e.gatedSkill("sleeper", "")
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot, "examples", "notes-shell"), filepath.Join(e.base, "skills")).CombinedOutput(); err != nil {
		t.Fatalf("cp notes-shell: %v %s", err, out)
	}
	d := startDaemonWith(t, e, daemonStart{cgroups: dirs, args: args}, "warm: {max_sandboxes: 0}")
	t.Cleanup(func() { openGate(t, dir) })
	mode := cgroups.DetectMode()
	want := service + "/" + path.Base(sandbox.CgroupParentFor(e.runDir)) + "/"

	controllers := []string{"memory", "pids", "cpu"}
	if mode == cgroups.Unified {
		controllers = []string{""}
		if got := procCgroup(t, d.cmd.Process.Pid, ""); got != service+"/"+sandbox.DaemonLeaf {
			t.Errorf("the daemon is in %s, want the leaf %s", got, service+"/"+sandbox.DaemonLeaf)
		}
	}
	done := make(chan int, 1)
	go func() {
		code, env, raw := d.invoke(map[string]any{"skill_id": "sleeper"})
		if code != 200 || env.Outcome != "success" {
			t.Errorf("sleeper: %d %s", code, raw)
		}
		done <- code
	}()
	skill := 0
	if !testutil.Eventually(slow(20*time.Second), func() bool { skill = skillIn(service); return skill != 0 }) {
		t.Fatalf("no skill process under %s", service)
	}
	for _, c := range controllers {
		if got := procCgroup(t, skill, c); !strings.HasPrefix(got, want) {
			t.Errorf("the skill's %q cgroup is %s, want under %s", c, got, want)
		}
	}
	openGate(t, dir)
	<-done
	// The broker admits only the sandbox's own processes, found by their
	// cgroup: a tool call from a sandbox placed here must pass.
	if code, env, raw := d.invoke(map[string]any{"skill_id": "notes-shell", "args": map[string]string{"title": "t", "text": "placed"}}); code != 200 || env.Outcome != "success" {
		t.Errorf("notes-shell (MemoryEmit, MemoryRead through the broker): %d %s", code, raw)
	}
	d.stop(slow(30 * time.Second))
	for _, dd := range dirs {
		sub := filepath.Join(dd, path.Base(sandbox.CgroupParentFor(e.runDir)))
		ents, _ := os.ReadDir(sub)
		for _, ent := range ents {
			if ent.IsDir() {
				t.Errorf("left after the daemon stopped: %s", filepath.Join(sub, ent.Name()))
			}
		}
	}
}

// skillIn finds the gated skill's shell waiting at its gate in a cgroup
// under service, or 0.
func skillIn(service string) int {
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || !waitingAtGate(pid) {
			continue
		}
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); strings.Contains(string(b), ":"+service+"/") {
			return pid
		}
	}
	return 0
}

// TestServicePlacementNeedsAnOwnCgroup: cgroup_placement: service (or serve's
// --cgroup-placement service) in a process no manager delegated a cgroup to
// (the test's own: the root cgroup, or different cgroups per controller) is
// refused before anything starts, by --check too, with the key or flag
// named, instead of making cgroups in someone else's subtree.
func TestServicePlacementNeedsAnOwnCgroup(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(e.base, "etc", "service.yaml")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	os.MkdirAll(filepath.Join(e.base, "skills"), 0o755)
	if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t), "cgroup_placement: service")), 0o644); err != nil {
		t.Fatal(err)
	}
	rootCfg := filepath.Join(e.base, "etc", "root.yaml")
	if err := os.WriteFile(rootCfg, []byte(e.daemonConfig(freePort(t), "cgroup_placement: root")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--check"}, nil, {"--cgroup-placement", "service"}} {
		cfgArgs := []string{"--config", cfg}
		key := "cgroup_placement: "
		if len(args) == 2 { // the flag overrides a config that says root
			cfgArgs = []string{"--config", rootCfg}
			key = "--cgroup-placement: "
		}
		argv := append(append([]string{"supervisor", "serve", "--run-dir", e.runDir}, cfgArgs...), args...)
		out, code := runFor(t, 30*time.Second, argv...)
		if code != 2 || !strings.Contains(out, key+"service: ") {
			t.Errorf("%v outside a delegated cgroup: exit %d, want 2 and %q named\n%s", argv, code, key, out)
		}
	}
}
