package auditstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// journal is the append-only JSON-lines file. Writers of every process
// sharing the state dir take an exclusive statedir.Flock on it for one append (read
// the chain head from its last line, write a batch, fdatasync), so the chain
// cannot fork however many `skill run` processes write at once. A reader
// that must not see a batch before its fdatasync returned takes a shared
// statedir.Flock to learn the durable end.
//
// The file is preallocated with written zeros, journalChunk at a time: an
// fdatasync after overwriting blocks that already exist flushes only data,
// while one after an append that grows the file also commits the
// filesystem's metadata journal, which can cost several times as much
// (BenchmarkFdatasync, overwrite vs grow, measures it on a given disk).
// So the journal's end is not its size but its first NUL byte (a JSON line
// never holds one: control characters are escaped).
type journal struct {
	path string
	w    *os.File // the writer's descriptor (statedir.Flock LOCK_EX around an append)
	r    *os.File // a second open file description for LOCK_SH and reads
	rmu  sync.Mutex

	whint, rhint int64  // an end seen before (a lower bound to search from)
	wsize        int64  // the file's size as the writer last knew it (0: unknown)
	wstats       int    // the writer's stats in appendPoint (tests count them)
	wbuf, rbuf   []byte // scratch for statedir.FindEnd
}

// journalChunk is how far the journal is extended at a time.
const journalChunk = 4 << 20

func openJournal(path string) (_ *journal, err error) {
	j := &journal{path: path, wbuf: make([]byte, 64<<10), rbuf: make([]byte, 64<<10)}
	if j.w, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, err
	}
	if fi, err := j.w.Stat(); err != nil || !fi.Mode().IsRegular() {
		j.w.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if j.r, err = os.Open(path); err != nil {
		j.w.Close()
		return nil, err
	}
	return j, nil
}

func (j *journal) close() error {
	return errors.Join(j.w.Close(), j.r.Close())
}

// appendPoint is statedir.FindEnd for the writer, which must hold the exclusive
// lock. It stats the file only when it must: on ext4 a stat between two
// appends can make the second one update the file's timestamps, and then
// its fdatasync writes the inode too, one more block write per commit,
// which shows where every commit is one append (see BenchmarkFdatasync,
// overwrite vs overwrite+stat, and BenchmarkEmit/emitters=1). The end is
// the first NUL byte, so a NUL within the size this writer last knew is the
// end whatever another process did since; only when there is none (another
// process filled the journal past that size, having grown it) is the size
// read back and the search carried on. The size returned may still be
// smaller than the file's (another process reserved more); write checks it
// before growing the file.
func (j *journal) appendPoint() (end, size int64, err error) {
	size = j.wsize
	if size > 0 { // known
		end, err = statedir.FindEndIn(j.w, j.whint, size, j.wbuf)
	}
	if err == nil && end == size {
		j.wstats++
		end, size, err = statedir.FindEnd(j.w, j.whint, j.wbuf)
	}
	if err == nil {
		j.wsize = max(size, end)
	}
	return end, size, err
}

// tail returns the journal's end, its size and its last line (nil when
// empty). It must be called with the exclusive lock held. A batch torn by
// a crash (bytes after the last newline: never acknowledged, since an
// append is acknowledged only after its fdatasync) is zeroed first.
func (j *journal) tail() (end, size int64, last []byte, err error) {
	if end, size, err = statedir.FindEnd(j.w, j.whint, j.wbuf); err != nil {
		return 0, 0, nil, err
	}
	for chunk := int64(4096); end > 0; {
		off := max(end-chunk, 0)
		buf := make([]byte, end-off)
		if _, err := j.w.ReadAt(buf, off); err != nil && err != io.EOF {
			return 0, 0, nil, err
		}
		if buf[len(buf)-1] != '\n' {
			cut := bytes.LastIndexByte(buf, '\n')
			if cut < 0 && off > 0 {
				chunk *= 4
				continue
			}
			// Torn tail: zero it. The next fdatasync makes that durable.
			newEnd := off + int64(cut+1)
			if err := j.zero(newEnd, end); err != nil {
				return 0, 0, nil, fmt.Errorf("cut torn journal tail: %w", err)
			}
			end = newEnd
			continue
		}
		start := bytes.LastIndexByte(buf[:len(buf)-1], '\n')
		if start < 0 && off > 0 {
			if chunk >= audit.MaxLineBytes {
				return 0, 0, nil, fmt.Errorf("journal's last line is longer than %d bytes", audit.MaxLineBytes)
			}
			chunk *= 4
			continue
		}
		last = buf[start+1 : len(buf)-1]
		break
	}
	j.whint, j.wsize = end, size
	return end, size, last, nil
}

// zero overwrites [from, to) with NUL bytes.
func (j *journal) zero(from, to int64) error {
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; {
		n, err := j.w.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off)
		if err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

// write puts data at start (the end tail returned), first extending the
// file with written zeros when data would not fit in it, and fdatasyncs.
// If that fails, the bytes are zeroed again (best effort: lines that stay
// were never acknowledged, and a torn one is zeroed by the next tail).
func (j *journal) write(data []byte, start, size int64) (err error) {
	end := start + int64(len(data))
	if end > size {
		// size may be stale (see appendPoint): another process may have
		// grown the file already.
		if fi, err := j.w.Stat(); err == nil {
			size = max(size, fi.Size())
		}
	}
	newSize := size
	if end > size {
		// Preallocate a chunk; on a nearly full disk, grow by just this
		// batch (a plain append).
		newSize = (end/journalChunk + 1) * journalChunk
		if !j.preallocate(size, newSize) {
			newSize = end
		}
	}
	_, err = j.w.WriteAt(data, start)
	if err == nil {
		err = statedir.Datasync(j.w)
	}
	if err != nil {
		if end > size {
			_ = j.w.Truncate(max(size, start))
		}
		_ = j.zero(start, min(end, max(size, start)))
		_ = statedir.Datasync(j.w)
		j.wsize = 0 // unknown: the next append stats
		return err
	}
	j.whint, j.wsize = end, max(newSize, end)
	return nil
}

// reserve extends the journal with written zeros when less than half a
// chunk is left after end, so appends find their space allocated (must hold
// the exclusive lock). On a nearly full disk (see preallocate) it leaves
// the appends to grow the file themselves.
func (j *journal) reserve(end, size int64) {
	if size-end >= journalChunk/2 {
		return
	}
	grown := (end/journalChunk + 2) * journalChunk
	if j.preallocate(size, grown) {
		if statedir.Datasync(j.w) == nil {
			j.wsize = grown
			return
		}
		_ = j.w.Truncate(size)
	}
	j.wsize = size
}

// chunkHeadroom is the free space preallocation leaves on the journal's
// filesystem. On a fuller disk the journal grows by what it needs: a chunk
// of zeros would fill the disk, if only until given back, and every other
// writer there (another process's rows, the supervisor's free-space check
// before an invocation) would find it full.
const chunkHeadroom = 2 * journalChunk

// preallocate extends the file from size to target with written zeros
// when its filesystem has room for them and chunkHeadroom (or does not
// say), and reports whether it did; on failure the file is cut back to
// size. It does not fdatasync.
func (j *journal) preallocate(size, target int64) bool {
	if free, ok := statedir.FileFreeSpace(j.w); ok && free < target-size+chunkHeadroom {
		return false
	}
	if j.zero(size, target) != nil {
		_ = j.w.Truncate(size)
		return false
	}
	return true
}

// clearAfter zeros whatever a crash left beyond the end (must hold the
// exclusive lock), so a later append cannot end up followed by stale bytes.
// Only a machine crash leaves any (pages of the batch being written reach
// the disk out of order, or, on a filesystem that does not order data
// before metadata, the chunk being preallocated shows stale blocks): every
// append in a running system is contiguous, and a torn one is cut by tail.
// So it reads all of [end, size) only when full (the first open after a
// boot, see tailmark.go), else the tailWindow bytes after end, where a
// batch torn by a filesystem shut down without a reboot would be.
func (j *journal) clearAfter(end, size int64, full bool) error {
	limit := size
	if !full {
		limit = min(size, end+tailWindow)
	}
	dirty := false
	for off := end; off < limit && !dirty; {
		n, err := j.w.ReadAt(j.wbuf[:min(int64(len(j.wbuf)), limit-off)], off)
		dirty = !allZero(j.wbuf[:n])
		off += int64(n)
		if err != nil {
			break
		}
	}
	if !dirty {
		return nil
	}
	if err := j.zero(end, size); err != nil {
		return err
	}
	return statedir.Datasync(j.w)
}

// tailWindow is what clearAfter reads past the end when the whole tail was
// checked earlier in this boot: more than one batch of ordinary rows.
const tailWindow = 1 << 20

// zeroBlock is what allZero compares with.
var zeroBlock [64 << 10]byte

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// durableEnd returns the journal's end while no writer is inside an
// append, so every byte below it was fdatasynced (or written by a writer
// that died mid-append: only whole lines are ever applied, and a line is
// only whole once its batch was written out).
func (j *journal) durableEnd() (int64, error) {
	j.rmu.Lock()
	defer j.rmu.Unlock()
	if err := statedir.Flock(j.r, statedir.LockShared); err != nil {
		return 0, err
	}
	defer statedir.Unlock(j.r)
	end, _, err := statedir.FindEnd(j.r, j.rhint, j.rbuf)
	if err != nil {
		return 0, err
	}
	j.rhint = end
	return end, nil
}

// readRange reads [from, to) and returns the whole lines in it and the
// offset just past the last one.
func (j *journal) readRange(from, to int64) ([]byte, int64, error) {
	if to <= from {
		return nil, from, nil
	}
	buf := make([]byte, to-from)
	n, err := j.r.ReadAt(buf, from)
	if err != nil && err != io.EOF {
		return nil, from, err
	}
	buf = buf[:n]
	cut := bytes.LastIndexByte(buf, '\n')
	if cut < 0 {
		return nil, from, nil
	}
	return buf[:cut+1], from + int64(cut+1), nil
}
