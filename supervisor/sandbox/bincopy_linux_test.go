package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
