//go:build linux

package integration

// Issue 41.6: `serve --check` stopped at the config file's first problem;
// it now names every one: unknown keys, bad values, failed validation and
// the host checks, all in one run.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServeCheckListsEveryProblem(t *testing.T) {
	e := newEnv(t)
	config := filepath.Join(e.base, "supervisor.yaml")
	missing := filepath.Join(e.base, "no-skills")
	must(t, os.WriteFile(config, []byte(e.daemonConfig(freePort(t),
		"max_concurent: 4", "max_concurrent: many", "defaults:\n  memory_mbb: 5", "skills_dir: "+missing)), 0o644))
	out, code := runFor(t, 20*time.Second, "supervisor", "serve", "--config", config, "--run-dir", e.runDir, "--check")
	for _, want := range []string{
		config + `: line 7: unknown key "max_concurent"`,
		config + ": max_concurrent: [8:17] cannot unmarshal string into Go value of type int",
		config + `: defaults: [10:3] unknown field "memory_mbb"`,
		"skills_dir: " + missing + " does not exist",
		"invalid config, 4 problems:",
	} {
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("serve --check: exit %d, want 2 and %q in\n%s", code, want, out)
		}
	}
}
