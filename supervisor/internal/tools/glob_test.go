package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

// ftTree makes allowed/{a.txt, sub/b.txt, sub/c.go, sub/deep/d.txt} plus a
// symlink to /etc/passwd, a symlinked directory to the outside folder and a
// hard link to the secret.
func ftTree(t *testing.T, w *ftWorld) {
	t.Helper()
	if err := os.MkdirAll(w.in("sub/deep"), 0o755); err != nil {
		t.Fatal(err)
	}
	ftWrite(t, w.in("a.txt"), "alpha root\n")
	ftWrite(t, w.in("sub/b.txt"), "beta\r\nroot beta\n")
	ftWrite(t, w.in("sub/c.go"), "package root\n")
	ftWrite(t, w.in("sub/deep/d.txt"), "delta\n")
	ftSymlink(t, "/etc/passwd", w.in("passwd.txt"))
	ftSymlink(t, w.outside, w.in("out"))
	if err := os.Link(w.secret, w.in("secret.txt")); err != nil {
		t.Fatal(err)
	}
}

func globPaths(t *testing.T, w *ftWorld, pattern string) globResult {
	t.Helper()
	res, err := w.call(t, NewGlob(), map[string]any{"pattern": pattern})
	if err != nil {
		t.Fatalf("Glob %s: %v", pattern, err)
	}
	return decodeAs[globResult](t, res)
}

func TestGlobMatches(t *testing.T) {
	w := ftNew(t)
	ftTree(t, w)
	rel := func(r globResult) string {
		var out []string
		for _, p := range r.Paths {
			out = append(out, strings.TrimPrefix(p, w.allowed))
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct{ pattern, want string }{
		// Symlinks are neither listed nor followed (out/secret, passwd.txt);
		// the hard link is a name only and is listed (reading it is refused).
		{w.allowed + "/**/*.txt", "/a.txt /secret.txt /sub/b.txt /sub/deep/d.txt"},
		{w.allowed + "/*", "/a.txt /secret.txt /sub"},
		{w.allowed + "/sub/*.{go,txt}", "/sub/b.txt /sub/c.go"},
		{w.allowed + "/**", " /a.txt /secret.txt /sub /sub/b.txt /sub/c.go /sub/deep /sub/deep/d.txt"},
		{w.allowed + "/nothing/**", ""},
		// A pattern wider than the policy is walked only where the policy allows.
		{"/**/*.txt", "/a.txt /secret.txt /sub/b.txt /sub/deep/d.txt"},
		{w.root + "/*/a.txt", "/a.txt"},
	} {
		r := globPaths(t, w, c.pattern)
		if got := rel(r); got != c.want || r.Truncated {
			t.Errorf("Glob %s = %q (truncated %v), want %q", c.pattern, got, r.Truncated, c.want)
		}
		for _, p := range r.Paths {
			if !within(p, w.allowed) {
				t.Errorf("Glob %s returned %s", c.pattern, p)
			}
		}
	}
}

func TestGlobRefusals(t *testing.T) {
	w := ftNew(t)
	ftTree(t, w)
	for _, p := range []string{w.outside + "/*", "/etc/*", w.allowed + "x/*"} {
		_, err := w.call(t, NewGlob(), map[string]any{"pattern": p})
		ftDenied(t, err, policy.ReasonFile, "")
	}
	// Asking to walk through the symlinked directory is refused.
	_, err := w.call(t, NewGlob(), map[string]any{"pattern": w.in("out/*")})
	ftDenied(t, err, policy.ReasonFile, "symlink")
}

func TestGlobDisallowedRule(t *testing.T) {
	w := ftNew(t, `disallowed_tools: ["Glob({root}/allowed/sub/**)"]`)
	ftTree(t, w)
	r := globPaths(t, w, w.allowed+"/**/*.txt")
	if len(r.Paths) != 2 || r.Paths[0] != w.in("a.txt") || r.Paths[1] != w.in("secret.txt") {
		t.Errorf("Glob = %q, want a.txt and secret.txt only", r.Paths)
	}
}

func TestGlobCap(t *testing.T) {
	w := ftNew(t)
	for i := 0; i <= MaxGlobResults; i++ {
		f, err := os.OpenFile(filepath.Join(w.allowed, fmt.Sprintf("f%05d", i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r := globPaths(t, w, w.allowed+"/f*")
	if len(r.Paths) != MaxGlobResults || !r.Truncated {
		t.Errorf("%d paths, truncated %v; want %d, true", len(r.Paths), r.Truncated, MaxGlobResults)
	}
	if err := os.Remove(filepath.Join(w.allowed, "f00000")); err != nil {
		t.Fatal(err)
	}
	r = globPaths(t, w, w.allowed+"/f*")
	if len(r.Paths) != MaxGlobResults || r.Truncated {
		t.Errorf("exactly the cap: %d paths, truncated %v", len(r.Paths), r.Truncated)
	}
}

// An allowed folder the policy names through a symlink is left out of a
// wider walk, and refused when asked for directly.
func TestGlobSymlinkedAllowedRoot(t *testing.T) {
	w := ftNew(t, `x-allowed-files: ["{root}/allowed/**", "{root}/alias/**"]`)
	ftWrite(t, w.in("a.txt"), "root\n")
	ftSymlink(t, w.outside, filepath.Join(w.root, "alias"))
	r := globPaths(t, w, w.root+"/**/*.txt")
	if strings.Join(r.Paths, " ") != w.in("a.txt") {
		t.Errorf("Glob = %q, want only a.txt", r.Paths)
	}
	_, err := w.call(t, NewGlob(), map[string]any{"pattern": w.root + "/alias/*"})
	ftDenied(t, err, policy.ReasonFile, "symlink")

	g := grep(t, w, map[string]any{"pattern": "root", "path": w.root})
	if got := grepLines(w, g); got != "/a.txt:1:root" {
		t.Errorf("Grep = %q", got)
	}
	_, err = w.call(t, NewGrep(), map[string]any{"pattern": "root", "path": w.root + "/alias"})
	ftDenied(t, err, policy.ReasonFile, "symlink")
}
