package fdread

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAllUnknownSize: with no size, a file past the first buffer is read
// whole, and one past the limit is refused.
func TestAllUnknownSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	content := bytes.Repeat([]byte("0123456789"), 200) // 2000 bytes
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit int64
		want  error
	}{{4096, nil}, {2000, nil}, {1999, ErrTooLarge}} {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := All(fd, -1, tc.limit)
		unix.Close(fd)
		switch {
		case !errors.Is(err, tc.want):
			t.Errorf("limit %d: %v, want %v", tc.limit, err, tc.want)
		case err == nil && !bytes.Equal(got, content):
			t.Errorf("limit %d: %d bytes, want all %d", tc.limit, len(got), len(content))
		}
	}
}
