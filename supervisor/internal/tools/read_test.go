package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/policy"
)

// readResult is Read's result decoded.
type readResult struct {
	Body        string `json:"body"`
	ContentHash string `json:"content_hash"`
}

// readOut decodes a Read result (Canonical JSON).
func readOut(t *testing.T, res any) readResult {
	t.Helper()
	var r readResult
	b, ok := res.(Canonical)
	if !ok {
		t.Fatalf("Read returned %T, want Canonical", res)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("Read result %.200s: %v", b, err)
	}
	return r
}

func TestReadAllowed(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("notes.txt"), "héllo\nworld\n")
	res, err := w.call(t, NewRead(), map[string]any{"path": w.in("notes.txt")})
	if err != nil {
		t.Fatal(err)
	}
	r := readOut(t, res)
	if r.Body != "héllo\nworld\n" || r.ContentHash != contentHash([]byte("héllo\nworld\n")) {
		t.Errorf("result = %+v", r)
	}
	// A path that cleans to the same file is the same file.
	if _, err := w.call(t, NewRead(), map[string]any{"path": w.allowed + "/./sub/../notes.txt"}); err != nil {
		t.Errorf("uncleaned path: %v", err)
	}
	empty := w.in("empty")
	ftWrite(t, empty, "")
	if res, err := w.call(t, NewRead(), map[string]any{"path": empty}); err != nil || readOut(t, res).Body != "" {
		t.Errorf("empty file: %v %v", res, err)
	}
}

func TestReadOutsideDenied(t *testing.T) {
	w := ftNew(t)
	for _, p := range []string{w.secret, "/etc/passwd", w.allowed + "/../outside/secret", w.allowed, "relative/x", w.allowed + "x"} {
		_, err := w.call(t, NewRead(), map[string]any{"path": p})
		ftDenied(t, err, policy.ReasonFile, "")
	}
}

func TestReadSymlinkRefused(t *testing.T) {
	w := ftNew(t)
	ftSymlink(t, "/etc/passwd", w.in("passwd"))
	ftSymlink(t, w.secret, w.in("secret"))
	ftSymlink(t, "notes.txt", w.in("relative-link")) // even one staying inside
	ftWrite(t, w.in("notes.txt"), "x")
	for _, name := range []string{"passwd", "secret", "relative-link"} {
		_, err := w.call(t, NewRead(), map[string]any{"path": w.in(name)})
		ftDenied(t, err, policy.ReasonFile, "symlink")
	}
}

func TestReadSymlinkedParentRefused(t *testing.T) {
	w := ftNew(t)
	ftSymlink(t, w.outside, w.in("out"))
	ftSymlink(t, "/etc", w.in("etc"))
	// Nothing behind the symlink is looked up: a FIFO there, or no file at
	// all, is refused as the symlink it is reached through (no hang, and
	// no oracle of what exists outside).
	if err := unix.Mkfifo(filepath.Join(w.outside, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{w.in("out/secret"), w.in("etc/passwd"), w.in("out/fifo"), w.in("out/missing")} {
		_, err := w.call(t, NewRead(), map[string]any{"path": p})
		ftDenied(t, err, policy.ReasonFile, "symlink")
	}
}

func TestReadHardLinkRefused(t *testing.T) {
	w := ftNew(t)
	if err := os.Link(w.secret, w.in("hl")); err != nil {
		t.Fatal(err)
	}
	_, err := w.call(t, NewRead(), map[string]any{"path": w.in("hl")})
	ftDenied(t, err, policy.ReasonFile, "hard link")
}

func TestReadNonRegularRefused(t *testing.T) {
	w := ftNew(t)
	fifo := w.in("fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(w.in("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, w.in("dir")} { // a FIFO must not hang the tool
		_, err := w.call(t, NewRead(), map[string]any{"path": p})
		ftDenied(t, err, policy.ReasonFile, "not a regular file")
	}
}

func TestReadErrors(t *testing.T) {
	w := ftNew(t)
	_, err := w.call(t, NewRead(), map[string]any{"path": w.in("missing")})
	ftIs(t, err, ErrNotFound)
	_, err = w.call(t, NewRead(), map[string]any{"path": w.in("missing/x")})
	ftIs(t, err, ErrNotFound)

	ftWrite(t, w.in("bin"), "ok\xff\xfe")
	_, err = w.call(t, NewRead(), map[string]any{"path": w.in("bin")})
	ftIs(t, err, ErrFailed)

	big := w.in("big")
	ftWrite(t, big, "")
	if err := os.Truncate(big, MaxFileReadBytes+1); err != nil {
		t.Fatal(err)
	}
	_, err = w.call(t, NewRead(), map[string]any{"path": big})
	ftIs(t, err, ErrTooLarge)
	// A file at the cap is read, but its result (NULs, six bytes each in
	// JSON) is over the response cap: too large, not cut by the broker.
	if err := os.Truncate(big, MaxFileReadBytes); err != nil {
		t.Fatal(err)
	}
	_, err = w.call(t, NewRead(), map[string]any{"path": big})
	ftIs(t, err, ErrTooLarge)
	// The largest text whose result fits is read.
	ftWrite(t, big, strings.Repeat("<", MaxResultBytes-readResultLen(2)))
	if res, err := w.call(t, NewRead(), map[string]any{"path": big}); err != nil || len(res.(Canonical)) != MaxResultBytes {
		t.Errorf("a file whose result is exactly MaxResultBytes: %v", err)
	}
	ftWrite(t, big, strings.Repeat("<", MaxResultBytes-readResultLen(2)+1))
	_, err = w.call(t, NewRead(), map[string]any{"path": big})
	ftIs(t, err, ErrTooLarge)
}

func TestReadThroughSymlinkedGlobRefused(t *testing.T) {
	// The operator's glob names a path through a symlink: the file tools
	// refuse it rather than follow it (a glob must name the real path).
	w := ftNew(t, `x-allowed-files: ["{root}/alias/**"]`)
	ftWrite(t, w.in("notes.txt"), "x")
	ftSymlink(t, w.allowed, filepath.Join(w.root, "alias"))
	_, err := w.call(t, NewRead(), map[string]any{"path": filepath.Join(w.root, "alias", "notes.txt")})
	ftDenied(t, err, policy.ReasonFile, "symlink")
}
