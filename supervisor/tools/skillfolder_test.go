package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cyberos/supervisor/policy"
)

// skillTree makes allowed/skills/{a,b} as skill folders (SKILL.md, main,
// sub/data.txt) and allowed/data/free.txt beside them.
func skillTree(t *testing.T, w *ftWorld) {
	t.Helper()
	for _, s := range []string{"a", "b"} {
		if err := os.MkdirAll(w.in("skills/"+s+"/sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		ftWrite(t, w.in("skills/"+s+"/SKILL.md"), "---\nname: "+s+"\ndescription: d\n---\n")
		ftWrite(t, w.in("skills/"+s+"/main"), "#!/bin/sh\necho policy-input\n")
		ftWrite(t, w.in("skills/"+s+"/sub/data.txt"), "policy-input\n")
	}
	if err := os.MkdirAll(w.in("data"), 0o755); err != nil {
		t.Fatal(err)
	}
	ftWrite(t, w.in("data/free.txt"), "free policy-input\n")
}

// TestFileToolsRefuseSkillFolders: whatever the globs say, no file tool
// reads, writes or edits a skill folder (found on disk by its SKILL.md) or
// anything below it, nor a stray SKILL.md; nothing changes on disk. The
// folder next to them stays usable.
func TestFileToolsRefuseSkillFolders(t *testing.T) {
	w := ftNew(t)
	skillTree(t, w)
	before := map[string]string{}
	for _, s := range []string{"a", "b"} {
		for _, f := range []string{"SKILL.md", "main", "sub/data.txt"} {
			p := w.in("skills/" + s + "/" + f)
			before[p] = ftRead(t, p)
		}
	}
	paths := []string{
		w.in("skills/a/SKILL.md"), w.in("skills/a/main"), w.in("skills/a/sub/data.txt"), w.in("skills/a/new.txt"),
		w.in("skills/a/../b/SKILL.md"), w.in("skills/a/../b/main"), w.in("skills/b/sub/../main"),
		w.in("data/SKILL.md"),
	}
	for _, p := range paths {
		_, err := w.call(t, NewRead(), map[string]any{"path": p})
		ftDenied(t, err, policy.ReasonFile, "")
		_, err = w.call(t, NewWrite(), map[string]any{"path": p, "content": "x-allowed-files: [\"/**\"]"})
		ftDenied(t, err, policy.ReasonFile, "")
		_, err = w.call(t, NewEdit(), map[string]any{"path": p, "old_string": "policy-input", "new_string": "pwned"})
		ftDenied(t, err, policy.ReasonFile, "")
	}
	for _, p := range []string{w.in("skills/a"), w.in("skills/a/sub"), w.in("skills/a/main")} {
		_, err := w.call(t, NewGrep(), map[string]any{"pattern": "policy", "path": p})
		ftDenied(t, err, policy.ReasonFile, "")
		_, err = w.call(t, NewGlob(), map[string]any{"pattern": p + "/*"})
		ftDenied(t, err, policy.ReasonFile, "")
	}
	for p, b := range before {
		if got := ftRead(t, p); got != b {
			t.Errorf("%s changed to %q", p, got)
		}
	}
	if _, err := os.Stat(w.in("skills/a/new.txt")); err == nil {
		t.Error("a file was created in a skill folder")
	}
	if _, err := os.Stat(w.in("data/SKILL.md")); err == nil {
		t.Error("a SKILL.md was created")
	}
	if _, err := w.call(t, NewWrite(), map[string]any{"path": w.in("data/ok.txt"), "content": "ok"}); err != nil {
		t.Errorf("Write beside the skill folders: %v", err)
	}
	if _, err := w.call(t, NewRead(), map[string]any{"path": w.in("data/free.txt")}); err != nil {
		t.Errorf("Read beside the skill folders: %v", err)
	}
}

// TestWalksSkipSkillFolders: Glob neither lists a skill folder nor anything
// in it, Grep searches nothing in it, and both see the files beside it.
func TestWalksSkipSkillFolders(t *testing.T) {
	w := ftNew(t)
	skillTree(t, w)
	for _, pat := range []string{w.allowed + "/**", w.in("skills") + "/**", w.in("skills") + "/*", "/**/SKILL.md", w.allowed + "/**/main"} {
		r := globPaths(t, w, pat)
		for _, p := range r.Paths {
			if strings.HasPrefix(p, w.in("skills")+"/") || filepath.Base(p) == "SKILL.md" {
				t.Errorf("Glob %s listed %s, inside a skill folder", pat, p)
			}
		}
	}
	if r := globPaths(t, w, w.allowed+"/**"); !strings.Contains(strings.Join(r.Paths, " "), w.in("data/free.txt")) {
		t.Errorf("Glob does not list the file beside the skill folders: %v", r.Paths)
	}
	res, err := w.call(t, NewGrep(), map[string]any{"pattern": "policy-input|name:", "path": w.allowed})
	if err != nil {
		t.Fatal(err)
	}
	m := res.(grepResult).Matches
	if len(m) != 1 || m[0].Path != w.in("data/free.txt") {
		t.Errorf("Grep matches %+v, want only data/free.txt", m)
	}
}

// TestInSkillFolder: the on-disk check itself, through ancestors, for a
// path that does not exist yet, and not through a symlink.
func TestInSkillFolder(t *testing.T) {
	w := ftNew(t)
	skillTree(t, w)
	ftSymlink(t, w.in("skills/a"), w.in("link"))
	for p, want := range map[string]bool{
		w.in("skills/a"):              true,
		w.in("skills/a/SKILL.md"):     true,
		w.in("skills/a/sub/data.txt"): true,
		w.in("skills/a/nope/deeper"):  true,
		w.in("skills"):                false,
		w.in("data/free.txt"):         false,
		w.in("nope/x"):                false,
		w.in("link/main"):             false, // the symlink is refused when opened
		"/":                           false,
	} {
		got, err := inSkillFolder(p)
		if err != nil || got != want {
			t.Errorf("inSkillFolder(%q) = %v, %v; want %v", p, got, err, want)
		}
	}
	_, err := w.call(t, NewRead(), map[string]any{"path": w.in("link/main")})
	ftDenied(t, err, policy.ReasonFile, "symlink")
}
