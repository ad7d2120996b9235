package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLogBudgetRemovesOldest: kept logs never exceed the budget; the
// oldest go first, logs found at start included.
func TestLogBudgetRemovesOldest(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "OLD.stderr")
	if err := os.WriteFile(old, bytes.Repeat([]byte("o"), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	_ = os.Chtimes(old, past, past)
	l := newLogStore(dir, 3000)
	for _, id := range []string{"A", "B", "C", "D"} {
		if err := l.keep(id, bytes.Repeat([]byte(id), 1000)); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
		names = append(names, e.Name())
	}
	if total > 3000 || len(names) != 3 || names[0] != "B.stderr" || names[2] != "D.stderr" {
		t.Fatalf("kept %v (%d bytes), want B, C, D within 3000 bytes", names, total)
	}
	// A log larger than the budget keeps its tail.
	if err := l.keep("E", append(bytes.Repeat([]byte("x"), 5000), "END"...)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "E.stderr"))
	if len(b) != 3000 || !bytes.HasSuffix(b, []byte("END")) {
		t.Fatalf("oversized log kept %d bytes", len(b))
	}
}
