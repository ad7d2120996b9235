package tools

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/policy"
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
		w.in("skills/a"), w.in("skills/a/sub"), // the folder itself, a directory in it
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
	m := decodeAs[grepResult](t, res).Matches
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
	// A skill folder whose SKILL.md is a symlink (dangling, even) is one.
	if err := os.MkdirAll(w.in("skills/c/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ftSymlink(t, w.in("nowhere/SKILL.md"), w.in("skills/c/SKILL.md"))
	for p, want := range map[string]bool{
		w.in("skills/c"):              true,
		w.in("skills/c/sub/x"):        true,
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

// TestInSkillFolderNearPathMax: a directory whose SKILL.md is named by a
// path longer than PATH_MAX (the directory's own path is not) is still
// found, as is everything below it; without a SKILL.md nothing is.
func TestInSkillFolderNearPathMax(t *testing.T) {
	w := ftNew(t)
	// dir ends up 4090 bytes long: dir/SKILL.md (4099) is past PATH_MAX
	// (4096 with the NUL), dir/x (4092) is not.
	dir := w.in("deep")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for len(dir) < 4090 {
		n := min(200, 4090-len(dir)-1)
		dir = filepath.Join(dir, strings.Repeat("d", n))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if len(dir) != 4090 {
		t.Fatalf("built a %d-byte path, want 4090", len(dir))
	}
	for _, p := range []string{dir, dir + "/x"} {
		if got, err := inSkillFolder(p); err != nil || got {
			t.Errorf("no SKILL.md: inSkillFolder(%d-byte path) = %v, %v; want false", len(p), got, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, err := unix.Openat(fd, policy.SkillFile, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(f)
	for _, p := range []string{dir, dir + "/x"} {
		if got, err := inSkillFolder(p); err != nil || !got {
			t.Errorf("SKILL.md in the deepest directory: inSkillFolder(%d-byte path) = %v, %v; want true", len(p), got, err)
		}
	}
}

// TestInSkillFolderRefusesUncleanPaths: only a clean absolute path is
// asked about; anything else is an error, which refuses the call.
func TestInSkillFolderRefusesUncleanPaths(t *testing.T) {
	for _, p := range []string{"", "rel/x", "/a/", "/a//b", "/a/./b", "/a/../b"} {
		if _, err := inSkillFolder(p); err == nil {
			t.Errorf("inSkillFolder(%q): no error", p)
		}
	}
}

// BenchmarkInSkillFolder is the skill-folder check every file tool call
// makes, for a file six directories below / with no SKILL.md above it.
// go test -run '^$' -bench InSkillFolder ./supervisor/tools/
func BenchmarkInSkillFolder(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("the host file tools need openat2 (Linux); elsewhere they refuse by design")
	}
	dir := filepath.Join(b.TempDir(), "allowed", "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(dir, "free.txt")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if in, err := inSkillFolder(p); err != nil || in {
			b.Fatalf("inSkillFolder(%s) = %v, %v", p, in, err)
		}
	}
	b.ReportMetric(float64(strings.Count(p, "/")), "levels")
}
