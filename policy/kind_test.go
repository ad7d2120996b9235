package policy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLoadSkillInstructionsOnly: a SKILL.md with no executable is a valid
// instructions skill for LoadSkill, and still refused by LoadDir (the run
// path); a named entrypoint that is missing, or a main that is not
// acceptable, stays an error.
func TestLoadSkillInstructionsOnly(t *testing.T) {
	write := func(fm string, main *os.FileMode) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: guide\ndescription: how to\n"+fm+"---\n\n# Guide\nDo this.\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if main != nil {
			if err := os.WriteFile(filepath.Join(dir, "main"), []byte("#!/bin/sh\n"), *main); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dir := write("", nil)
	p, err := LoadSkill(dir)
	if err != nil || p.Kind != KindInstructions || p.Entrypoint != "" {
		t.Fatalf("instructions only: %+v %v", p, err)
	}
	var fe *FieldError
	if _, err := LoadDir(dir); !errors.As(err, &fe) || fe.Field != "entrypoint" {
		t.Errorf("LoadDir of an instructions skill: %v, want the entrypoint error", err)
	}
	exe := os.FileMode(0o755)
	if p, err := LoadSkill(write("", &exe)); err != nil || p.Kind != KindTool || p.Entrypoint != "main" {
		t.Errorf("tool: %+v %v", p, err)
	}
	if _, err := LoadSkill(write("entrypoint: bin/run\n", nil)); !errors.As(err, &fe) || fe.Field != "entrypoint" {
		t.Errorf("named entrypoint missing: %v, want an entrypoint error", err)
	}
	noexec := os.FileMode(0o644)
	if _, err := LoadSkill(write("", &noexec)); !errors.As(err, &fe) || fe.Field != "entrypoint" {
		t.Errorf("main not executable: %v, want an entrypoint error", err)
	}
	if got := Body([]byte("---\nname: a\n---\n\n# Guide\nDo this.\n")); got != "# Guide\nDo this.\n" {
		t.Errorf("Body: %q", got)
	}
}
