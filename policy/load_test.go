package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const skillMD = "---\nname: demo\ndescription: A demo skill.\n---\n# Demo\n"

// writeFile creates dir/rel (and its parents) with the given content and mode.
func writeFile(t *testing.T, dir, rel, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	// WriteFile's mode is filtered by the umask; set it exactly.
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// validSkill makes a skill folder with SKILL.md and an executable main.
func validSkill(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "SKILL.md", skillMD, 0o644)
	writeFile(t, dir, "main", "#!/bin/sh\necho '{}'\n", 0o755)
	return dir
}

func TestLoadDirOK(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T) string
		entrypoint string
	}{
		{"default main", validSkill, "main"},
		{"nested entrypoint", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nentrypoint: ./bin/run\n---\n", 0o644)
			writeFile(t, dir, "bin/run", "#!/bin/sh\n", 0o700)
			return dir
		}, "bin/run"},
		{"owner-executable only", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			writeFile(t, dir, "main", "", 0o100)
			return dir
		}, "main"},
		{"dir reached through a symlink", func(t *testing.T) string {
			target := validSkill(t)
			link := filepath.Join(t.TempDir(), "skill")
			symlink(t, target, link)
			return link
		}, "main"},
		{"SKILL.md with CRLF and BOM", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "\uFEFF---\r\nname: demo\r\ndescription: d\r\n---\r\n", 0o644)
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "main"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LoadDir(tc.setup(t))
			if err != nil {
				t.Fatalf("LoadDir: %v", err)
			}
			if p.Name != "demo" || p.Entrypoint != tc.entrypoint {
				t.Errorf("got name %q entrypoint %q", p.Name, p.Entrypoint)
			}
		})
	}
}

func TestLoadDirRejects(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T) string // returns the dir to load
		field  string
		reason string
	}{
		{"SKILL.md missing", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "SKILL.md", "does not exist"},
		{"SKILL.md is a symlink inside the folder", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "real.md", skillMD, 0o644)
			symlink(t, "real.md", filepath.Join(dir, "SKILL.md"))
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "SKILL.md", "is a symlink"},
		{"SKILL.md is a symlink out of the folder", func(t *testing.T) string {
			dir := t.TempDir()
			outside := writeFile(t, t.TempDir(), "SKILL.md", skillMD, 0o644)
			symlink(t, outside, filepath.Join(dir, "SKILL.md"))
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "SKILL.md", "is a symlink"},
		{"SKILL.md is a directory", func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "SKILL.md"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "SKILL.md", "not a regular file"},
		{"SKILL.md over 1 MiB", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD+strings.Repeat("x", MaxSkillFileBytes), 0o644)
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "SKILL.md", "larger than 1 MiB"},
		{"invalid frontmatter", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nx-memory-mb: lots\n---\n", 0o644)
			writeFile(t, dir, "main", "", 0o755)
			return dir
		}, "x-memory-mb", "must be an integer"},
		{"main missing", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			return dir
		}, "entrypoint", `"main" does not exist`},
		{"main not executable", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			writeFile(t, dir, "main", "#!/bin/sh\n", 0o644)
			return dir
		}, "entrypoint", "not executable"},
		{"main executable by group and others only", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			writeFile(t, dir, "main", "#!/bin/sh\n", 0o655)
			return dir
		}, "entrypoint", "not executable"},
		{"main is setuid", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			writeFile(t, dir, "main", "#!/bin/sh\n", 0o755|os.ModeSetuid)
			return dir
		}, "entrypoint", "setuid"},
		{"main is a symlink inside the folder", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			writeFile(t, dir, "real", "", 0o755)
			symlink(t, "real", filepath.Join(dir, "main"))
			return dir
		}, "entrypoint", `"main" is a symlink`},
		{"main points outside the folder", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			outside := writeFile(t, t.TempDir(), "evil", "#!/bin/sh\n", 0o755)
			symlink(t, outside, filepath.Join(dir, "main"))
			return dir
		}, "entrypoint", `"main" is a symlink`},
		{"main is a dangling symlink", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			symlink(t, "/nonexistent/main", filepath.Join(dir, "main"))
			return dir
		}, "entrypoint", `"main" is a symlink`},
		{"directory on the entrypoint path is a symlink", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nentrypoint: bin/run\n---\n", 0o644)
			outside := t.TempDir()
			writeFile(t, outside, "run", "#!/bin/sh\n", 0o755)
			symlink(t, outside, filepath.Join(dir, "bin"))
			return dir
		}, "entrypoint", `"bin" is a symlink`},
		{"file on the entrypoint path", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nentrypoint: bin/run\n---\n", 0o644)
			writeFile(t, dir, "bin", "", 0o755)
			return dir
		}, "entrypoint", `"bin" is not a directory`},
		{"main is a directory", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", skillMD, 0o644)
			if err := os.Mkdir(filepath.Join(dir, "main"), 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "entrypoint", "not a regular file"},
		{"entrypoint with ..", func(t *testing.T) string {
			parent := t.TempDir()
			writeFile(t, parent, "evil", "#!/bin/sh\n", 0o755)
			dir := filepath.Join(parent, "skill")
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nentrypoint: ../evil\n---\n", 0o644)
			return dir
		}, "entrypoint", `".." segment`},
		{"entrypoint absolute", func(t *testing.T) string {
			dir := t.TempDir()
			writeFile(t, dir, "SKILL.md", "---\nname: demo\ndescription: d\nentrypoint: /bin/sh\n---\n", 0o644)
			return dir
		}, "entrypoint", "not absolute"},
		{"dir is a file", func(t *testing.T) string {
			return writeFile(t, t.TempDir(), "skill", "", 0o644)
		}, "dir", "not a directory"},
		{"dir missing", func(t *testing.T) string {
			return filepath.Join(t.TempDir(), "nope")
		}, "dir", "does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := LoadDir(tc.setup(t))
			if err == nil {
				t.Fatalf("LoadDir succeeded: %+v", p)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) {
				t.Errorf("got %q / %q, want %q / …%s…", fe.Field, fe.Reason, tc.field, tc.reason)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(ErrInvalid) = false for %v", err)
			}
		})
	}
}

func TestLoadDirNoFrontmatter(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "SKILL.md", "# Just markdown\n", 0o644)
	writeFile(t, dir, "main", "", 0o755)
	if _, err := LoadDir(dir); !errors.Is(err, ErrNoFrontmatter) {
		t.Errorf("err = %v, want ErrNoFrontmatter", err)
	}
}
