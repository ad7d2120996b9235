package tools

import (
	"os"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

func TestEditUniqueReplacement(t *testing.T) {
	w := ftNew(t)
	p := w.in("f.go")
	ftWrite(t, p, "package x\n\nfunc A() {}\nfunc B() {}\n")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := w.call(t, NewEdit(), map[string]any{"path": p, "old_string": "func A() {}", "new_string": "func A() int { return 1 }"})
	if err != nil {
		t.Fatal(err)
	}
	want := "package x\n\nfunc A() int { return 1 }\nfunc B() {}\n"
	if got := ftRead(t, p); got != want {
		t.Errorf("content = %q", got)
	}
	r := res.(editResult)
	if r != (editResult{Path: p, Replacements: 1, ContentHash: contentHash([]byte(want))}) {
		t.Errorf("result = %+v", r)
	}
	if fi, _ := os.Stat(p); fi.Mode() != 0o600 {
		t.Errorf("mode = %v, want 0600 kept", fi.Mode())
	}
	// Deleting text: an empty new_string.
	if _, err := w.call(t, NewEdit(), map[string]any{"path": p, "old_string": "func B() {}\n", "new_string": ""}); err != nil {
		t.Fatal(err)
	}
	if got := ftRead(t, p); got != "package x\n\nfunc A() int { return 1 }\n" {
		t.Errorf("content = %q", got)
	}
	ftNoTemps(t, w.allowed)
}

func TestEditUniqueness(t *testing.T) {
	w := ftNew(t)
	p := w.in("f.txt")
	const content = "x = 1\nx = 1\nx = 1\nabcabca\n"
	ftWrite(t, p, content)
	for _, c := range []struct {
		old, detail string
	}{
		{"y = 2", "old_string not found"},
		{"x = 1", "old_string is not unique (3 matches)"},
		{"abca", "old_string is not unique (overlapping matches)"},
	} {
		_, err := w.call(t, NewEdit(), map[string]any{"path": p, "old_string": c.old, "new_string": "z"})
		ftIs(t, err, ErrFailed)
		if !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%q: err = %v, want %q", c.old, err, c.detail)
		}
	}
	if got := ftRead(t, p); got != content {
		t.Errorf("file changed by refused edits: %q", got)
	}
}

func TestEditRefusals(t *testing.T) {
	w := ftNew(t)
	ftSymlink(t, w.secret, w.in("link"))
	ftSymlink(t, w.outside, w.in("out"))
	if err := os.Link(w.secret, w.in("hl")); err != nil {
		t.Fatal(err)
	}
	edit := func(p string) error {
		_, err := w.call(t, NewEdit(), map[string]any{"path": p, "old_string": "secret", "new_string": "pwned"})
		return err
	}
	ftDenied(t, edit(w.secret), policy.ReasonFile, "")
	ftDenied(t, edit("/etc/passwd"), policy.ReasonFile, "")
	ftDenied(t, edit(w.in("link")), policy.ReasonFile, "symlink")
	ftDenied(t, edit(w.in("out/secret")), policy.ReasonFile, "symlink")
	ftDenied(t, edit(w.in("hl")), policy.ReasonFile, "hard link")
	if got := ftRead(t, w.secret); got != ftSecret {
		t.Errorf("secret = %q", got)
	}
	ftIs(t, edit(w.in("missing")), ErrNotFound)

	ftWrite(t, w.in("bin"), "secret\xff")
	ftIs(t, edit(w.in("bin")), ErrFailed)

	big := strings.Repeat("y", MaxFileWriteBytes+1)
	ftWrite(t, w.in("f"), "secret")
	_, err := w.call(t, NewEdit(), map[string]any{"path": w.in("f"), "old_string": "secret", "new_string": big})
	ftIs(t, err, ErrTooLarge)
	if got := ftRead(t, w.in("f")); got != "secret" {
		t.Errorf("f = %q", got)
	}
	ftNoTemps(t, w.allowed)
}
