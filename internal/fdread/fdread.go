// Package fdread reads a whole file on its raw descriptor: read(2) alone,
// without the *os.File around it, which asks the runtime's poller to watch
// any file that can be polled (cgroup files can) and costs system calls a
// small read does not need.
package fdread

import (
	"errors"
	"slices"

	"golang.org/x/sys/unix"
)

// ErrTooLarge: the file held more than the limit.
var ErrTooLarge = errors.New("fdread: more than the limit")

// All reads the file open at fd to its end, at most limit bytes
// (ErrTooLarge past that, having read one byte more). size is what fstat
// said of the file, or negative when it says nothing useful: the buffer
// starts one byte longer, so a file that holds exactly size bytes is read
// with one read(2), a short read of size bytes being its end. Otherwise
// (the file grew or shrank, or its size is unknown) it reads on to a read
// that returns nothing. EINTR is retried; any other error is returned as
// the errno.
func All(fd int, size, limit int64) ([]byte, error) {
	most := int(limit) + 1
	first := 512
	if size >= 0 {
		first = int(min(size, limit)) + 1
	}
	b := make([]byte, 0, min(first, most))
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, cap(b))
		}
		room := min(cap(b), most) - len(b)
		n, err := unix.Read(fd, b[len(b):len(b)+room])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
		if len(b) > int(limit) {
			return nil, ErrTooLarge
		}
		if size >= 0 && n < room && int64(len(b)) == size {
			return b, nil
		}
	}
}
