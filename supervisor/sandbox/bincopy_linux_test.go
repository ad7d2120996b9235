package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCopyBinary: a binary is copied once under a name of its content's
// hash (mode 0755), an intact copy is reused, a copy of the wrong size is
// replaced, and other content gets another name.
func TestCopyBinary(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	dir := t.TempDir()
	if err := os.WriteFile(src, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := copyBinary(src, dir, "cyberos-init", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(first) != dir || !strings.HasPrefix(filepath.Base(first), "cyberos-init-") || len(filepath.Base(first)) != len("cyberos-init-")+16 {
		t.Fatalf("copy %s", first)
	}
	fi, err := os.Stat(first)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("copy %v %v", fi, err)
	}
	before := fi.ModTime()
	again, err := copyBinary(src, dir, "cyberos-init", 0o755)
	if err != nil || again != first {
		t.Fatalf("second copy %s %v, want %s", again, err, first)
	}
	if fi, _ := os.Stat(first); !fi.ModTime().Equal(before) {
		t.Errorf("an intact copy was rewritten")
	}
	// A truncated copy (wrong size) is replaced.
	if err := os.WriteFile(first, []byte("trunc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := copyBinary(src, dir, "cyberos-init", 0o755); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(first); string(b) != "version one" {
		t.Errorf("the damaged copy holds %q", b)
	}
	if err := os.WriteFile(src, []byte("version two"), 0o755); err != nil {
		t.Fatal(err)
	}
	second, err := copyBinary(src, dir, "cyberos-init", 0o755)
	if err != nil || second == first {
		t.Fatalf("new content copied to %s (%v), the old copy is %s", second, err, first)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("%d entries in the bin dir, want the 2 copies (no temp files left)", len(ents))
	}
}

// TestCopyBinaryStamp: a source unchanged since its stamp is not read
// again (the stamped copy is returned), and any change to it (here a
// rewrite of the same size) makes it hashed and copied again.
func TestCopyBinaryStamp(t *testing.T) {
	defer func(d time.Duration) { stampRacy = d }(stampRacy)
	stampRacy = 0
	src := filepath.Join(t.TempDir(), "bin")
	dir := t.TempDir()
	if err := os.WriteFile(src, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := copyBinary(src, dir, "cyberos-init", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stampPath(dir, "cyberos-init")); err != nil {
		t.Fatalf("no stamp: %v", err)
	}
	// The stamp is what decides: point it at another intact copy.
	other := filepath.Join(dir, "cyberos-init-0000000000000000")
	if err := os.WriteFile(other, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(src)
	id := identityOf(fi)
	if err := os.WriteFile(stampPath(dir, "cyberos-init"), []byte(id.line(other)), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := copyBinary(src, dir, "cyberos-init", 0o755); err != nil || got != other {
		t.Fatalf("stamped source copied to %s (%v), want the stamped copy %s", got, err, other)
	}
	// A stamped copy that is not intact is not used.
	if err := os.WriteFile(other, []byte("trunc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := copyBinary(src, dir, "cyberos-init", 0o755); err != nil || got != first {
		t.Fatalf("damaged stamped copy: got %s (%v), want %s", got, err, first)
	}
	if err := os.WriteFile(src, []byte("version two"), 0o755); err != nil {
		t.Fatal(err)
	}
	second, err := copyBinary(src, dir, "cyberos-init", 0o755)
	if err != nil || second == first {
		t.Fatalf("changed source copied to %s (%v), the old copy is %s", second, err, first)
	}
	if b, _ := os.ReadFile(second); string(b) != "version two" {
		t.Errorf("the new copy holds %q", b)
	}
}
