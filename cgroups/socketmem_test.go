package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLimitSocketMemory: on v1 the limit is written to the memory
// hierarchy's memory.kmem.tcp.limit_in_bytes; a kernel without that file
// is ErrNoSocketLimit (never a silent success); v2 needs nothing; a
// missing cgroup is an error.
func TestLimitSocketMemory(t *testing.T) {
	for _, mode := range []Mode{Legacy, Hybrid} {
		root := fakeTree(t, map[string]string{"memory" + inv + "/memory.kmem.tcp.limit_in_bytes": "9223372036854771712\n"})
		h := Hierarchy{Root: root, Mode: mode}
		if err := h.LimitSocketMemory(inv, 64<<20); err != nil {
			t.Fatalf("%v: %v", mode, err)
		}
		b, _ := os.ReadFile(filepath.Join(root, "memory", inv, "memory.kmem.tcp.limit_in_bytes"))
		if string(b) != "67108864" {
			t.Errorf("%v: memory.kmem.tcp.limit_in_bytes = %q, want 67108864", mode, b)
		}
		noFile := Hierarchy{Root: fakeTree(t, map[string]string{"memory" + inv + "/": ""}), Mode: mode}
		if err := noFile.LimitSocketMemory(inv, 64<<20); !errors.Is(err, ErrNoSocketLimit) {
			t.Errorf("%v without the file: %v, want ErrNoSocketLimit", mode, err)
		}
		if err := h.LimitSocketMemory("/cyberos/nosuch", 64<<20); err == nil || errors.Is(err, ErrNoSocketLimit) {
			t.Errorf("%v, missing cgroup: %v, want an error", mode, err)
		}
	}
	if err := (Hierarchy{Root: t.TempDir(), Mode: Unified}).LimitSocketMemory(inv, 64<<20); err != nil {
		t.Errorf("v2: %v", err)
	}
}
