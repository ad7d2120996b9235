package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit/auditstore"
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

// TestEmptyLogIsNotKept: an invocation that wrote nothing to stderr leaves
// no file (empty files cost no budget bytes, so they were never removed).
func TestEmptyLogIsNotKept(t *testing.T) {
	dir := t.TempDir()
	l := newLogStore(dir, 3000)
	for _, id := range []string{"A", "B"} {
		if err := l.keep(id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 || len(l.files) != 0 {
		t.Fatalf("empty logs kept: %d files, %d tracked", len(ents), len(l.files))
	}
}

// TestLogCountBound: however small the logs, at most maxFiles are kept,
// the oldest removed first.
func TestLogCountBound(t *testing.T) {
	dir := t.TempDir()
	l := newLogStore(dir, 1<<20)
	l.maxFiles = 3
	for _, id := range []string{"A", "B", "C", "D", "E"} {
		if err := l.keep(id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "C.stderr D.stderr E.stderr" || len(l.files) != 3 {
		t.Fatalf("kept %v (%d tracked), want C, D, E", names, len(l.files))
	}
}

// TestLowDiskRefusesBeforeDispatch: with less free space on the state
// filesystem than MinFreeBytes, nothing runs and no row is written.
func TestLowDiskRefusesBeforeDispatch(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	s.MinFreeBytes = 1 << 60
	_, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "KiB free") {
		t.Fatalf("err %v, want ErrRefused naming the free space", err)
	}
	if f.lastSpec.ID != "" {
		t.Error("the skill was dispatched")
	}
	rows, _ := s.store(t).Rows(context.Background(), auditstore.Filter{})
	if len(rows) != 0 {
		t.Errorf("%d rows written", len(rows))
	}
	s.MinFreeBytes = 0
	if _, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")}); err != nil {
		t.Fatalf("with the default threshold: %v", err)
	}
}
