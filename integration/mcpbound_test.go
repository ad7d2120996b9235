//go:build linux

package integration

// An MCP server's sandbox is its own: the host paths bound into it leave
// nothing in any other sandbox's root, and it ends with its supervisor as
// a skill's sandbox does (its pid 1 watches the supervisor).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/sandbox"
)

func TestMCPServerSandboxIsItsOwn(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() { _ = cgroups.KillAll(sandbox.CgroupParentFor(e.runDir)) })
	// Outside /tmp, which every sandbox covers with its own tmpfs: a mount
	// point made in the shared skeleton would show here.
	bound, err := os.MkdirTemp("/var/tmp", "cyberos-it-bound-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bound) })
	must(t, os.Chmod(bound, 0o755))
	srv := filepath.Join(probeDir, "mcphostile")
	e.skill("echo", "allowed_tools: [mcp__hostile]\n", callScript([3]string{"echo", "mcp__hostile__echo", `{"text":"alive"}`}))
	e.skill("look", "", "#!/bin/sh\nv=false; [ -e /var ] && v=true\nb=false; [ -e "+bound+" ] && b=true\n"+
		`echo "{\"var\":$v,\"bound\":$b}"`+"\n")
	d := startDaemon(t, e, "cgroup_placement: root", "mcp_servers:", "  hostile:", "    command: "+srv,
		"    files: [{path: "+probeDir+"}, {path: "+bound+"}]", "    idle: 10m")
	code, env, raw := d.invoke(map[string]any{"skill_id": "echo"})
	if code != 200 {
		t.Fatalf("echo: %d %s", code, raw)
	}
	if ok := mustOK(t, calls(t, result{env: env}), "echo"); ok == nil {
		t.Fatal("echo: no answer")
	}
	// The server runs; a skill started now sees neither its bound path nor
	// the directories above it.
	code, env, raw = d.invoke(map[string]any{"skill_id": "look"})
	if code != 200 {
		t.Fatalf("look: %d %s", code, raw)
	}
	var seen struct{ Var, Bound bool }
	if err := json.Unmarshal(env.Result, &seen); err != nil {
		t.Fatalf("look: %v: %s", err, env.Result)
	}
	if seen.Var || seen.Bound {
		t.Errorf("a skill sandbox started after the MCP server's sees /var %v, %s %v", seen.Var, bound, seen.Bound)
	}
	if len(procsMatching(srv)) == 0 {
		t.Fatal("the MCP server is not running")
	}
	// The daemon dies: the server's sandbox ends within moments, and the
	// next start removes the root it had of its own.
	t0 := time.Now()
	must(t, killPid(d.cmd.Process.Pid))
	<-d.exited
	waitFor(t, 5*time.Second, func() bool { return noSandboxProcs(e.runDir) && len(procsMatching(srv)) == 0 })
	t.Logf("the MCP server's sandbox ended %v after its daemon was killed", time.Since(t0).Round(time.Millisecond))
	d2 := startDaemon(t, e, "cgroup_placement: root")
	if ents, _ := os.ReadDir(filepath.Join(e.runDir, "rootfs-bound")); len(ents) > 0 {
		t.Errorf("the next start left %d roots of dead servers' sandboxes", len(ents))
	}
	d2.stop(30 * time.Second)
}
