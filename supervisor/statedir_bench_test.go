package supervisor

import (
	"os"
	"testing"
)

// BenchmarkCheckStateDir: the state dir check every invocation makes
// before its started row, on a state dir under os.TempDir() (put it on the
// production state dir's filesystem with TMPDIR to measure that one).
func BenchmarkCheckStateDir(b *testing.B) {
	dir, err := os.MkdirTemp("", "cyberos-statedir-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s := &Supervisor{StateDir: dir}
	for range b.N {
		if err := s.checkStateDir(); err != nil {
			b.Fatal(err)
		}
	}
}
