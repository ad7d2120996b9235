//go:build linux

package integration

// Issue 41.1: with the config in a shared directory (the quickstart keeps
// it in /tmp), that whole directory was reserved to the supervisor, so a
// skill allowed "/**" could read nothing else in it. The config file and
// every path it names stay reserved; the directory around them is not.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDaemonConfigInSharedDir(t *testing.T) {
	e := newEnv(t)
	// The config sits directly in e.base, a directory under /tmp that also
	// holds data a skill may read.
	config := filepath.Join(e.base, "supervisor.yaml")
	data := filepath.Join(e.base, "notes.txt")
	must(t, os.WriteFile(data, []byte("fine"), 0o644))
	d := startDaemonWith(t, e, daemonStart{configPath: config})
	key := filepath.Join(e.base, "audit-signing.key")
	list := [][3]string{
		{"read_config", "Read", fmt.Sprintf(`{"path":"%s"}`, config)},
		{"edit_config", "Edit", fmt.Sprintf(`{"path":"%s","old_string":"version: 1","new_string":"version: 1\nmax_concurrent: 1"}`, config)},
		{"read_key", "Read", fmt.Sprintf(`{"path":"%s"}`, key)},
		{"read_admin_socket", "Read", fmt.Sprintf(`{"path":"%s"}`, d.adminSocket)},
		{"read_state", "Read", fmt.Sprintf(`{"path":"%s"}`, filepath.Join(e.stateDir, "audit.db"))},
		{"ctl_read_beside", "Read", fmt.Sprintf(`{"path":"%s"}`, data)},
	}
	e.skill("shared-reader", "allowed_tools: [Read, Edit]\nx-allowed-files: [\"/**\"]\n", callScript(list...))
	code, env, body := d.invoke(map[string]any{"skill_id": "shared-reader"})
	if code != 200 || env.Outcome != "success" {
		t.Fatalf("invoke: %d %s", code, body)
	}
	var m map[string]callResult
	if err := json.Unmarshal(env.Result, &m); err != nil {
		t.Fatalf("skill output %s: %v", env.Result, err)
	}
	mustOK(t, m, "ctl_read_beside")
	for _, c := range list[:len(list)-1] {
		mustRefuse(t, m, c[0], "file_violation")
	}
}

// TestReservedOverlapWarnings: `serve --check` and `skill validate` warn
// when a skill's x-allowed-files reaches a reserved path, naming the glob
// and the path; a glob clear of them gets no warning.
func TestReservedOverlapWarnings(t *testing.T) {
	e := newEnv(t)
	config := filepath.Join(e.base, "supervisor.yaml")
	must(t, os.WriteFile(config, []byte(e.daemonConfig(freePort(t))), 0o644))
	wide := e.skill("wide", "allowed_tools: [Read]\nx-allowed-files: [\""+e.base+"/*.yaml\"]\n", "#!/bin/sh\necho '{}'\n")
	narrow := e.skill("narrow", "allowed_tools: [Read]\nx-allowed-files: [\""+e.base+"/data/**\"]\n", "#!/bin/sh\necho '{}'\n")
	want := fmt.Sprintf("skill wide: x-allowed-files %q overlaps %s, reserved to the supervisor", e.base+"/*.yaml", config)

	out, code := runFor(t, 20*time.Second, "supervisor", "serve", "--config", config, "--run-dir", e.runDir, "--check")
	if code != 0 || !strings.Contains(out, "warning: "+want) || strings.Contains(out, "skill narrow:") {
		t.Errorf("serve --check: exit %d, want 0 warning %q and nothing on skill narrow\n%s", code, want, out)
	}
	out, code = runFor(t, 20*time.Second, "skill", "validate", "--config", config, wide)
	if code != 0 || !strings.Contains(out, "warning: "+want) {
		t.Errorf("skill validate wide: exit %d, want 0 warning %q\n%s", code, want, out)
	}
	out, code = runFor(t, 20*time.Second, "skill", "validate", "--config", config, narrow)
	if code != 0 || strings.Contains(out, "warning") {
		t.Errorf("skill validate narrow: exit %d, want 0 without warning\n%s", code, out)
	}
}
