package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfigFileNamesEveryProblem: an unknown key, a value of the
// wrong type, a bad nested key and a failed validation are all named, not
// only the first; a syntax error is named; a good file has no problem and
// decodes as Load does.
func TestCheckConfigFileNamesEveryProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("version: 1\nmax_concurent: 4\nmax_concurrent: many\ndefaults:\n  memory_mbb: 5\nstate_dir: relative\n")
	_, problems := CheckFile(p)
	var all []string
	for _, e := range problems {
		if !errors.Is(e, ErrConfig) {
			t.Errorf("not ErrConfig: %v", e)
		}
		all = append(all, e.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{`unknown key "max_concurent"`, "max_concurrent: ", "memory_mbb", "state_dir: must be an absolute path"} {
		if !strings.Contains(text, want) {
			t.Errorf("no problem naming %q in\n%s", want, text)
		}
	}
	if len(problems) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(problems), text)
	}
	if _, problems := CheckFile(write("version: 1\nskills_dir: [\n")); len(problems) != 1 || !errors.Is(problems[0], ErrConfig) {
		t.Errorf("syntax error: %v", problems)
	}
	good := write("version: 1\nmax_concurrent: 7\nshutdown_grace: 5s\ndefaults:\n  memory_mb: 256\n")
	cfg, problems := CheckFile(good)
	want, err := Load(good)
	if len(problems) != 0 || err != nil || cfg.MaxConcurrent != 7 || cfg.Defaults.MemoryMB != 256 || cfg.ShutdownGrace != want.ShutdownGrace || cfg.Defaults != want.Defaults {
		t.Errorf("good file: %v %v %+v", problems, err, cfg)
	}
}
