//go:build linux

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFrontmatterCeilings: the operator's limits (daemon config `limits`)
// bound what a frontmatter may ask for. A skill asking for more memory,
// pids or CPU than the ceiling is refused before anything runs, under
// serve (400) and under `skill run --config` (exit 2), with a message
// naming the frontmatter key, the value asked and the ceiling; no audit
// row is written for it. A skill within the ceilings runs. Without
// --config, `skill run` applies the built-in ceilings.
func TestFrontmatterCeilings(t *testing.T) {
	e := newEnv(t)
	const ok = "#!/bin/sh\necho '{\"ran\":true}'\n"
	cases := []struct {
		skill, fm string
		want      []string
	}{
		{"greedy-memory", "x-memory-mb: 65536\n", []string{"x-memory-mb", "65536", "limits.max_memory_mb", "1024"}},
		{"greedy-pids", "x-pids-max: 4096\n", []string{"x-pids-max", "4096", "limits.max_pids", "128"}},
		{"greedy-cpu", "x-cpu: 2\n", []string{"x-cpu", "2", "limits.max_cpu", "1"}},
	}
	for _, c := range cases {
		e.skill(c.skill, c.fm, ok)
	}
	e.skill("modest", "x-memory-mb: 1024\nx-pids-max: 128\nx-cpu: 1\n", ok)
	limits := []string{"limits:", "  max_memory_mb: 1024", "  max_pids: 128", "  max_cpu: 1"}
	d := startDaemon(t, e, limits...)
	for _, c := range cases {
		code, _, body := d.invoke(map[string]any{"skill_id": c.skill, "tenant_id": "00000000-0000-0000-0000-000000000001", "args": map[string]any{}})
		if code != 400 {
			t.Errorf("serve: %s: status %d, want 400: %s", c.skill, code, body)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("serve: %s: the refusal does not say %q: %s", c.skill, w, body)
			}
		}
	}
	code, env, body := d.invoke(map[string]any{"skill_id": "modest", "tenant_id": "00000000-0000-0000-0000-000000000001", "args": map[string]any{}})
	if code != 200 || env.Outcome != "success" {
		t.Errorf("serve: a skill within the ceilings: status %d: %s", code, body)
	}
	d.stop(30 * time.Second)

	for _, c := range cases {
		r := e.run(filepath.Join(e.base, "skills", c.skill), "--config", d.cfgPath)
		if r.code != 2 {
			t.Errorf("skill run --config: %s: exit %d, want 2\n%s%s", c.skill, r.code, r.stdout, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("skill run --config: %s: the refusal does not say %q: %s", c.skill, w, r.stderr)
			}
		}
	}
	if r := e.run(filepath.Join(e.base, "skills", "modest"), "--config", d.cfgPath); r.code != 0 {
		t.Errorf("skill run --config: a skill within the ceilings: exit %d\n%s", r.code, r.stderr)
	}
	// The built-in ceilings, with no config.
	r := e.run(filepath.Join(e.base, "skills", "greedy-memory"))
	if r.code != 2 || !strings.Contains(r.stderr, "limits.max_memory_mb") {
		t.Errorf("skill run without --config: x-memory-mb 65536: exit %d, want 2 naming limits.max_memory_mb\n%s", r.code, r.stderr)
	}

	for _, row := range e.auditRows() {
		if strings.Contains(string(row.Payload), `"skill_id":"greedy-`) {
			t.Errorf("a refused invocation wrote a row: %s %s", row.Kind, row.Payload)
		}
	}
}

// TestServeCheckRefusesBadCeilings: `serve --check` names a ceiling below
// the defaults it must allow, and an unknown key under limits.
func TestServeCheckRefusesBadCeilings(t *testing.T) {
	e := newEnv(t)
	os.MkdirAll(filepath.Join(e.base, "skills"), 0o755)
	os.MkdirAll(filepath.Join(e.base, "etc"), 0o755)
	for _, c := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"memory", []string{"limits:", "  max_memory_mb: 256"}, "limits.max_memory_mb: 256 is below defaults.memory_mb (512)"},
		{"pids", []string{"limits:", "  max_pids: 32"}, "limits.max_pids: 32 is below defaults.pids_max (64)"},
		{"cpu", []string{"limits:", "  max_cpu: 0.5"}, "limits.max_cpu: 0.5 is below defaults.cpu (1)"},
		{"unknown key", []string{"limits:", "  max_memory: 1024"}, "max_memory"},
	} {
		cfg := filepath.Join(e.base, "etc", "limits-"+strings.ReplaceAll(c.name, " ", "-")+".yaml")
		if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t), c.extra...)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := runFor(t, 20*time.Second, "supervisor", "serve", "--config", cfg, "--run-dir", e.runDir, "--check")
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%s: serve --check: exit %d, want 2 saying %q\n%s", c.name, code, c.want, out)
		}
	}
}
