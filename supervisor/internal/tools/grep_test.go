package tools

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

func grep(t *testing.T, w *ftWorld, args map[string]any) grepResult {
	t.Helper()
	res, err := w.call(t, NewGrep(), args)
	if err != nil {
		t.Fatalf("Grep %v: %v", args, err)
	}
	return decodeAs[grepResult](t, res)
}

func grepLines(w *ftWorld, r grepResult) string {
	var out []string
	for _, m := range r.Matches {
		out = append(out, fmt.Sprintf("%s:%d:%s", strings.TrimPrefix(m.Path, w.allowed), m.Line, m.Text))
	}
	return strings.Join(out, "|")
}

func TestGrepDirectory(t *testing.T) {
	w := ftNew(t)
	ftTree(t, w)
	// "root" is in /etc/passwd (behind passwd.txt), in the secret (behind
	// the hard link and out/), and in three allowed files.
	const want = "/a.txt:1:alpha root|/sub/b.txt:2:root beta|/sub/c.go:1:package root"
	for _, p := range []string{w.allowed, w.root, "/"} {
		r := grep(t, w, map[string]any{"pattern": "root", "path": p})
		if got := grepLines(w, r); got != want || r.Truncated {
			t.Errorf("Grep in %s = %q (truncated %v), want %q", p, got, r.Truncated, want)
		}
	}
	r := grep(t, w, map[string]any{"pattern": `^(beta|delta)$`, "path": w.allowed, "glob": "*.txt"})
	if got := grepLines(w, r); got != "/sub/b.txt:1:beta|/sub/deep/d.txt:1:delta" {
		t.Errorf("CRLF and glob: %q", got)
	}
	r = grep(t, w, map[string]any{"pattern": "root", "path": w.allowed, "glob": w.allowed + "/sub/*"})
	if got := grepLines(w, r); got != "/sub/b.txt:2:root beta|/sub/c.go:1:package root" {
		t.Errorf("path glob: %q", got)
	}
}

func TestGrepFile(t *testing.T) {
	w := ftNew(t)
	ftTree(t, w)
	r := grep(t, w, map[string]any{"pattern": "beta", "path": w.in("sub/b.txt")})
	if got := grepLines(w, r); got != "/sub/b.txt:1:beta|/sub/b.txt:2:root beta" {
		t.Errorf("file: %q", got)
	}
	for _, c := range []struct {
		path, detail string
	}{
		{w.in("passwd.txt"), "symlink"},
		{w.in("out/secret"), "symlink"},
		{w.in("out"), "symlink"},
		{w.in("secret.txt"), "hard link"},
		{w.secret, ""},
		{w.outside, ""},
		{"/etc/passwd", ""},
		{"relative", ""},
		{w.allowed + "/a\x00b", "malformed path"},
	} {
		_, err := w.call(t, NewGrep(), map[string]any{"pattern": "root", "path": c.path})
		ftDenied(t, err, policy.ReasonFile, c.detail)
	}
	_, err := w.call(t, NewGrep(), map[string]any{"pattern": "root", "path": w.in("missing")})
	ftIs(t, err, ErrNotFound)
}

func TestGrepSkipsBinaryAndLarge(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("bin"), "needle\xff\n")
	ftWrite(t, w.in("text"), "needle\n")
	big := w.in("big")
	ftWrite(t, big, "needle\n")
	if err := os.Truncate(big, MaxFileReadBytes+1); err != nil {
		t.Fatal(err)
	}
	r := grep(t, w, map[string]any{"pattern": "needle", "path": w.allowed})
	if got := grepLines(w, r); got != "/text:1:needle" {
		t.Errorf("Grep = %q", got)
	}
	r = grep(t, w, map[string]any{"pattern": "needle", "path": w.in("bin")})
	if len(r.Matches) != 0 {
		t.Errorf("binary file named: %q", grepLines(w, r))
	}
	_, err := w.call(t, NewGrep(), map[string]any{"pattern": "needle", "path": big})
	ftIs(t, err, ErrTooLarge)
}

func TestGrepMaxMatches(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("f"), strings.Repeat("hit\n", 5))
	for _, c := range []struct {
		max, n    int
		truncated bool
	}{{3, 3, true}, {5, 5, false}, {6, 5, false}} {
		r := grep(t, w, map[string]any{"pattern": "hit", "path": w.allowed, "max_matches": c.max})
		if len(r.Matches) != c.n || r.Truncated != c.truncated {
			t.Errorf("max %d: %d matches, truncated %v", c.max, len(r.Matches), r.Truncated)
		}
	}
	ftWrite(t, w.in("many"), strings.Repeat("x\n", DefaultGrepMatches+1))
	r := grep(t, w, map[string]any{"pattern": "x", "path": w.in("many")})
	if len(r.Matches) != DefaultGrepMatches || !r.Truncated {
		t.Errorf("default: %d matches, truncated %v", len(r.Matches), r.Truncated)
	}
}

func TestGrepClipsText(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("long"), strings.Repeat("é", maxGrepText)+"\n")
	r := grep(t, w, map[string]any{"pattern": "é", "path": w.in("long")})
	if len(r.Matches) != 1 || len(r.Matches[0].Text) != maxGrepText || !strings.HasSuffix(r.Matches[0].Text, "é") {
		t.Errorf("clipped text: %d bytes", len(r.Matches[0].Text))
	}
}
