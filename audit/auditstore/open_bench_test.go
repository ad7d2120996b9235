package auditstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"cyberos.dev/audit"
)

// BenchmarkOpen: Open and Close of a store with a few rows, the journal's
// tail checked earlier in this boot (every `skill run` but the first).
func BenchmarkOpen(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range invocation("bench") {
		if _, err := s.Emit(context.Background(), d); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	openLoop(b, dir, nil)
}

// openLoop times b.N rounds of Open of dir, then each (when set), then
// Close.
func openLoop(b *testing.B, dir string, each func(*Store)) {
	b.ResetTimer()
	for range b.N {
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if each != nil {
			each(s)
		}
		s.Close()
	}
}

// BenchmarkOpenReconcile: what every `skill run` pays its store before the
// invocation: Open, Unterminated (Supervisor.Reconcile's query) and Close,
// on a store of 2 000 finished invocations (started row with a 1.5 KiB
// containment, a tool call, completed row) and one left unterminated.
func BenchmarkOpenReconcile(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	containment := map[string]any{"detail": strings.Repeat("x", 1500)}
	var waits []func() (audit.Row, error)
	for i := range 2000 {
		c := common(fmt.Sprintf("inv-%05d", i))
		for _, d := range []audit.Draft{
			audit.InvokedStarted(c, "1", "p", zeroHash(1), containment),
			audit.ToolCallStarted(c, "1", "Read", ""),
			audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeSuccess, 1, "", ""),
			audit.InvokedCompleted(c, audit.OutcomeSuccess, 1, zeroHash(2), ""),
		} {
			w, err := s.Enqueue(ctx, d)
			if err != nil {
				b.Fatal(err)
			}
			waits = append(waits, w)
		}
	}
	if _, err := s.Emit(ctx, audit.InvokedStarted(common("left"), "1", "p", zeroHash(1), containment)); err != nil {
		b.Fatal(err)
	}
	for _, w := range waits {
		if _, err := w(); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	openLoop(b, dir, func(s *Store) {
		if rows, err := s.Unterminated(ctx); err != nil || len(rows) != 1 {
			b.Fatalf("unterminated: %d rows, %v", len(rows), err)
		}
	})
}
