//go:build linux

package integration

// Issue 41.6: any config change needed a restart. SIGHUP (systemctl
// reload) applies the defaults to new invocations, logs what it applied at
// INFO and names at WARN the changed keys that need a restart; a config
// that does not load changes nothing.

import (
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
