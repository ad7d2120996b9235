package supervisor

import (
	"errors"
	"testing"

	"cyberos.dev/memory"
)

// TestMemoryOpenRetriedAfterFailure: a failed first open of the memory
// store (a full disk) is not kept: the next invocation that needs it opens
// it again, and once open the store is kept.
func TestMemoryOpenRetriedAfterFailure(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	s := &Supervisor{OpenMemory: func() (*memory.Store, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("no space left on device")
		}
		return memory.Open(dir)
	}}
	if err := s.openMemory(); err == nil {
		t.Fatal("first open: want the error")
	}
	if err := s.openMemory(); err != nil {
		t.Fatalf("second open, after the condition cleared: %v", err)
	}
	if err := s.openMemory(); err != nil || calls != 2 || s.memory() == nil {
		t.Fatalf("third open: %v, %d calls (want the open store kept after 2)", err, calls)
	}
	s.memory().Close()
}
