//go:build linux

package integration

// Issue 41.6: any config change needed a restart. SIGHUP (systemctl
// reload) applies the defaults to new invocations, logs what it applied at
// INFO and names at WARN the changed keys that need a restart; a config
// that does not load changes nothing.

import (
	"cyberos.dev/internal/testutil"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDaemonReloadsOnSIGHUP(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(repoRoot, "packaging", "cyberos-supervisor.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecReload=/bin/kill -HUP $MAINPID\n") {
		t.Errorf("the unit has no ExecReload sending SIGHUP (%v)", err)
	}
	e := newEnv(t)
	e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	d := startDaemon(t, e)
	deadline := func() int64 {
		t.Helper()
		code, env, raw := d.invoke(map[string]any{"skill_id": "quick"})
		if code != 200 || env.Outcome != "success" {
			t.Fatalf("invoke: %d %s", code, raw)
		}
		return env.DeadlineMS
	}
	if got := deadline(); got != 5*60*1000 {
		t.Fatalf("deadline before the reload: %d ms, want the default effort_minutes 5", got)
	}
	hupAndWait := func(logLine string) {
		t.Helper()
		n := strings.Count(d.logs.String(), logLine)
		must(t, d.cmd.Process.Signal(syscall.SIGHUP))
		// Wait for logLine once more (the cleanup logs the daemon's output
		// if it never comes).
		waitFor(t, 10*time.Second, func() bool { return strings.Count(d.logs.String(), logLine) > n })
	}

	// A config that does not load: nothing changes.
	must(t, os.WriteFile(d.cfgPath, []byte(e.daemonConfig(d.metricsAddr, "defaults:\n  effort_minutes: 1", "max_concurent: 3")), 0o644))
	hupAndWait("SIGHUP: the config does not load; nothing changed")
	if got := deadline(); got != 5*60*1000 {
		t.Errorf("deadline after a refused reload: %d ms", got)
	}

	// defaults apply; max_concurrent needs a restart.
	must(t, os.WriteFile(d.cfgPath, []byte(e.daemonConfig(d.metricsAddr, "defaults:\n  effort_minutes: 1", "max_concurrent: 3")), 0o644))
	hupAndWait("SIGHUP: changed keys need a restart to take effect")
	logs := d.logs.String()
	if !strings.Contains(logs, `level=INFO msg="SIGHUP: config reloaded"`) || !strings.Contains(logs, "applied=defaults") ||
		!strings.Contains(logs, `level=WARN msg="SIGHUP: changed keys need a restart to take effect" keys=max_concurrent`) {
		t.Errorf("reload log lines:\n%s", logs)
	}
	if got := deadline(); got != 60*1000 {
		t.Errorf("deadline after the reload: %d ms, want effort_minutes 1", got)
	}
	if d.cmd.ProcessState != nil {
		t.Fatal("the daemon exited on SIGHUP")
	}
}

// Issue 41.6 for mcp_servers: SIGHUP adds, changes and removes MCP
// servers in a running daemon. A changed server's next call goes to a new
// instance started with its new config, an added one is served, a removed
// one's tools are gone; a new secret file needs a restart.
func TestDaemonReloadsMCPServers(t *testing.T) {
	e := newEnv(t)
	srv := filepath.Join(probeDir, "mcphostile")
	e.skill("mcp", "allowed_tools: [mcp__hostile__pid, mcp__added__echo]\n", callScript(
		[3]string{"pid", "mcp__hostile__pid", `{}`}, [3]string{"added", "mcp__added__echo", `{"text":"new server"}`}))
	server := func(name string, extra ...string) []string {
		return append([]string{"  " + name + ":", "    command: " + srv, "    files: [{path: " + probeDir + "}]", "    share: global"}, extra...)
	}
	d := startDaemon(t, e, append([]string{"mcp_servers:"}, server("hostile")...)...)
	invoke := func() map[string]callResult {
		t.Helper()
		code, env, raw := d.invoke(map[string]any{"skill_id": "mcp"})
		if code != 200 {
			t.Fatalf("invoke: %d %s", code, raw)
		}
		return calls(t, result{env: env})
	}
	hupAndWait := func(logLine string, cfg ...string) {
		t.Helper()
		must(t, os.WriteFile(d.cfgPath, []byte(e.daemonConfig(d.metricsAddr, cfg...)), 0o644))
		n := strings.Count(d.logs.String(), logLine)
		must(t, d.cmd.Process.Signal(syscall.SIGHUP))
		if !testutil.Eventually(10*time.Second, func() bool { return strings.Count(d.logs.String(), logLine) > n }) {
			t.Fatalf("no %q logged after SIGHUP:\n%s", logLine, d.logs.String())
		}
	}
	m := invoke()
	pid1 := string(mustOK(t, m, "pid"))
	if m["added"].Err == nil {
		t.Fatalf("a server not yet configured answered: %s", m["added"].OK)
	}
	// hostile changed (an env var), added added.
	hupAndWait("SIGHUP: MCP servers reloaded", append(append([]string{"mcp_servers:"}, server("hostile", "    env: {RELOADED: \"1\"}")...), server("added")...)...)
	if logs := d.logs.String(); !strings.Contains(logs, "added=added removed=\"\" changed=hostile") || !strings.Contains(logs, "applied=mcp_servers") {
		t.Errorf("reload log:\n%s", logs)
	}
	m = invoke()
	if pid2 := string(mustOK(t, m, "pid")); pid2 == pid1 {
		t.Error("the changed server still answers from its old instance")
	}
	if ok := mustOK(t, m, "added"); !strings.Contains(string(ok), "new server") {
		t.Errorf("added server: %s", ok)
	}
	// added removed.
	hupAndWait("SIGHUP: MCP servers reloaded", append([]string{"mcp_servers:"}, server("hostile", "    env: {RELOADED: \"1\"}")...)...)
	if m = invoke(); m["added"].Err == nil {
		t.Errorf("a removed server answered: %s", m["added"].OK)
	}
	// A new secret file: not applied, named as needing a restart.
	secret := filepath.Join(e.base, "tok")
	must(t, os.WriteFile(secret, []byte("x\n"), 0o600))
	hupAndWait("SIGHUP: changed keys need a restart to take effect", append([]string{"mcp_servers:"}, server("hostile", "    secrets: {TOKEN: "+secret+"}")...)...)
	if logs := d.logs.String(); !strings.Contains(logs, "mcp_servers: a new secret or header file ("+secret+")") {
		t.Errorf("restart log:\n%s", logs)
	}
}
