package tools

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"cyberos.dev/policy"
)

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestWriteCreatesNewFile(t *testing.T) {
	w := ftNew(t)
	p := w.in("new.txt")
	res, err := w.call(t, NewWrite(), map[string]any{"path": p, "content": "hello\n"})
	if err != nil {
		t.Fatal(err)
	}
	want := writeResult{Path: p, Bytes: 6, ContentHash: contentHash([]byte("hello\n"))}
	if res.(writeResult) != want {
		t.Errorf("result = %+v, want %+v", res, want)
	}
	if got := ftRead(t, p); got != "hello\n" {
		t.Errorf("content = %q", got)
	}
	fi, _ := os.Stat(p)
	if fi.Mode() != newFileMode {
		t.Errorf("mode = %v, want %v", fi.Mode(), os.FileMode(newFileMode))
	}
	ftNoTemps(t, w.allowed)

	// Empty content is a valid file.
	if _, err := w.call(t, NewWrite(), map[string]any{"path": w.in("empty"), "content": ""}); err != nil {
		t.Fatal(err)
	}
	if got := ftRead(t, w.in("empty")); got != "" {
		t.Errorf("empty = %q", got)
	}
}

func TestWriteReplacesAtomically(t *testing.T) {
	w := ftNew(t)
	p := w.in("f.txt")
	ftWrite(t, p, "old content\n")
	if err := os.Chmod(p, 0o4750); err != nil { // setuid must not survive
		t.Fatal(err)
	}
	before := inode(t, p)
	// A reader holding the old file keeps seeing the old bytes: the file
	// was replaced by a rename, not rewritten in place.
	held, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	if _, err := w.call(t, NewWrite(), map[string]any{"path": p, "content": "new\n"}); err != nil {
		t.Fatal(err)
	}
	if got := ftRead(t, p); got != "new\n" {
		t.Errorf("content = %q", got)
	}
	if inode(t, p) == before {
		t.Error("same inode: the file was written in place, not replaced")
	}
	old := make([]byte, 64)
	n, _ := held.Read(old)
	if string(old[:n]) != "old content\n" {
		t.Errorf("old file now holds %q", old[:n])
	}
	fi, _ := os.Stat(p)
	if fi.Mode() != 0o750 {
		t.Errorf("mode = %v, want 0750 (permissions kept, setuid dropped)", fi.Mode())
	}
	ftNoTemps(t, w.allowed)
}

func TestWriteOutsideDenied(t *testing.T) {
	w := ftNew(t)
	for _, p := range []string{w.outside + "/new", w.secret, w.allowed + "/../outside/new2", "/etc/cyberos-test-should-not-exist"} {
		_, err := w.call(t, NewWrite(), map[string]any{"path": p, "content": "x"})
		ftDenied(t, err, policy.ReasonFile, "")
	}
	ents, _ := os.ReadDir(w.outside)
	if len(ents) != 1 || ftRead(t, w.secret) != ftSecret {
		t.Errorf("outside folder changed: %v", ents)
	}
}

func TestWriteSymlinkRefused(t *testing.T) {
	w := ftNew(t)
	ftSymlink(t, w.secret, w.in("link"))
	ftSymlink(t, w.outside+"/dangling", w.in("dangling"))
	ftSymlink(t, w.outside, w.in("out"))
	for _, p := range []string{w.in("link"), w.in("dangling"), w.in("out/secret"), w.in("out/new")} {
		_, err := w.call(t, NewWrite(), map[string]any{"path": p, "content": "pwned"})
		ftDenied(t, err, policy.ReasonFile, "symlink")
	}
	if got := ftRead(t, w.secret); got != ftSecret {
		t.Errorf("secret = %q", got)
	}
	for _, p := range []string{w.outside + "/dangling", w.outside + "/new"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was created", p)
		}
	}
	if fi, err := os.Lstat(w.in("link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink itself was replaced")
	}
}

func TestWriteHardLinkRefused(t *testing.T) {
	w := ftNew(t)
	if err := os.Link(w.secret, w.in("hl")); err != nil {
		t.Fatal(err)
	}
	_, err := w.call(t, NewWrite(), map[string]any{"path": w.in("hl"), "content": "pwned"})
	ftDenied(t, err, policy.ReasonFile, "hard link")
	if got := ftRead(t, w.secret); got != ftSecret {
		t.Errorf("secret = %q", got)
	}
}

func TestWriteErrors(t *testing.T) {
	w := ftNew(t)
	_, err := w.call(t, NewWrite(), map[string]any{"path": w.in("no/such/dir/f"), "content": "x"})
	ftIs(t, err, ErrNotFound)

	if err := os.Mkdir(w.in("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = w.call(t, NewWrite(), map[string]any{"path": w.in("dir"), "content": "x"})
	ftDenied(t, err, policy.ReasonFile, "not a regular file")

	_, err = w.call(t, NewWrite(), map[string]any{"path": w.in("big"), "content": strings.Repeat("x", MaxFileWriteBytes+1)})
	ftIs(t, err, ErrTooLarge)
	if _, err := os.Lstat(w.in("big")); !errors.Is(err, os.ErrNotExist) {
		t.Error("an over-cap write created the file")
	}
	if _, err := w.call(t, NewWrite(), map[string]any{"path": w.in("cap"), "content": strings.Repeat("x", MaxFileWriteBytes)}); err != nil {
		t.Errorf("content of exactly the cap: %v", err)
	}
	ftNoTemps(t, w.allowed)
}

func TestWriteKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file another owner (the rest of the package runs without)")
	}
	w := ftNew(t)
	p := w.in("owned")
	ftWrite(t, p, "x")
	if err := os.Chown(p, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if _, err := w.call(t, NewWrite(), map[string]any{"path": p, "content": "y"}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 1234 || st.Gid != 5678 {
		t.Errorf("owner = %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
}
