package audit

import (
	"context"
	"testing"
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
	b.ResetTimer()
	for range b.N {
		s, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
