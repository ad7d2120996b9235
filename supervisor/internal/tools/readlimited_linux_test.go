package tools

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/policy"
)

// TestReadLimited: the whole file, however its size at the open compares
// with what is there when it is read, and never more than the limit.
func TestReadLimited(t *testing.T) {
	dir := t.TempDir()
	read := func(content []byte, size, limit int64) ([]byte, error) {
		t.Helper()
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		st := unix.Stat_t{Size: size} // what the open's fstat said
		return readLimited(policy.ToolRead, fd, &st, limit, nil)
	}
	ten := []byte("0123456789")
	for _, tc := range []struct {
		name        string
		size, limit int64
		want        []byte
		tooLarge    bool
	}{
		{"as stated", 10, 100, ten, false},
		{"exactly the limit", 10, 10, ten, false},
		{"grew since the fstat", 5, 100, ten, false},
		{"grew past the limit", 5, 7, nil, true},
		{"shrank since the fstat", 20, 100, ten, false},
		{"no size (as in /proc)", 0, 100, ten, false},
		{"stated over the limit", 11, 10, nil, true},
	} {
		got, err := read(ten, tc.size, tc.limit)
		switch {
		case tc.tooLarge && !errors.Is(err, ErrTooLarge):
			t.Errorf("%s: %q, %v; want ErrTooLarge", tc.name, got, err)
		case !tc.tooLarge && (err != nil || !bytes.Equal(got, tc.want)):
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	// A /proc file states no size and is read to its end: /proc/self/maps
	// ends with the stack and the kernel's own mappings.
	fd, err := unix.Open("/proc/self/maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	got, err := readLimited(policy.ToolRead, fd, &st, 1<<20, nil)
	if err != nil || !bytes.Contains(got, []byte("[stack]")) || !bytes.HasSuffix(got, []byte("\n")) {
		t.Errorf("/proc/self/maps (size %d): %d bytes, %v; want all of it, [stack] included:\n%s", st.Size, len(got), err, got)
	}
}

// BenchmarkReadHostFile is what the Read tool does on the host once the
// path is judged: open the directory, examine, open and read the file
// (5 bytes), close.
// go test -run '^$' -bench ReadHostFile ./supervisor/tools/
func BenchmarkReadHostFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "x.txt")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		got, err := readHostFile(policy.ToolRead, p, 1<<20, nil)
		if err != nil || string(got) != "hello" {
			b.Fatalf("readHostFile: %q, %v", got, err)
		}
	}
}
