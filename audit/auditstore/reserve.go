// Journal space reserved for the terminal rows of running invocations.

package auditstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// ReserveDirName is the directory in the state dir holding one file per
// reservation (see Store.Reserve), shared by every process on the dir.
const ReserveDirName = "audit.reserve"

// reserveCountName is the file in ReserveDirName caching how many
// reservations stand (an upper bound: a release does not lower it, a
// recount does), so a commit learns it with one pread.
const reserveCountName = ".count"

// TerminalReserve is the journal space one reservation holds: a
// skill.timeout row and a skill.invoked_completed row, with margin for a
// long error message. A larger terminal row is still written; it may use
// space reserved for others.
const TerminalReserve = 8 << 10

// ErrNoSpace: the journal cannot keep the space reserved for terminal rows
// (Reserve refused, or a plain row that would use that space). It wraps
// ErrUnavailable, so a caller about to dispatch refuses.
var ErrNoSpace = fmt.Errorf("no space for audit rows: %w", ErrUnavailable)

// reservations is a Store's view of the reservation dir.
type reservations struct {
	dir   string
	count *os.File // reserveCountName, kept open for pread/pwrite
	buf   [20]byte // count's scratch; every use holds Store.jmu
}

// openReservations creates the reservation dir and count file. Called with
// the journal locked: it drops reservations whose holder died (see recount).
func openReservations(stateDir string) (*reservations, error) {
	r := &reservations{dir: filepath.Join(stateDir, ReserveDirName)}
	if err := os.Mkdir(r.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("reservations: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(r.dir, reserveCountName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reservations: %w", err)
	}
	r.count = f
	return r, nil
}

func (r *reservations) close() error {
	if r == nil || r.count == nil {
		return nil
	}
	return r.count.Close()
}

// cached returns the count file's value (journal locked).
func (r *reservations) cached() (int64, error) {
	n, err := r.count.ReadAt(r.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("reservation count: %w", err)
	}
	if n == 0 {
		return 0, nil // none yet
	}
	v, perr := strconv.ParseInt(strings.TrimSpace(string(r.buf[:n])), 10, 64)
	if perr != nil || v < 0 {
		return 0, fmt.Errorf("reservation count %q: unreadable", r.buf[:n])
	}
	return v, nil
}

// store writes n to the count file (journal locked). No fsync: after a
// machine crash Open recounts.
func (r *reservations) store(n int64) error {
	s := fmt.Sprintf("%-20d", n)
	_, err := r.count.WriteAt([]byte(s), 0)
	return err
}

// recount counts the reservation files, removing those whose holder died
// (their statedir.Flock can be taken: a reservation's holder keeps its file locked
// until release, and the kernel drops the lock with the process), and
// stores the count (journal locked, so no Reserve creates a file meanwhile).
func (r *reservations) recount() (int64, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return 0, fmt.Errorf("reservations: %w", err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(r.dir, e.Name())
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				n++ // cannot tell: keep counting it
			}
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.Remove(p) // its holder died
		} else {
			n++
		}
		f.Close()
	}
	// Best effort: a count file that keeps a higher value only reserves
	// more than needed until the next recount.
	_ = r.store(n)
	return n, nil
}

// Reserve sets aside TerminalReserve bytes of the journal's preallocated
// space for invocation id's terminal rows (skill.timeout and
// skill.invoked_completed): from then on, until release, rows of other
// kinds are refused with ErrNoSpace rather than use that space, while
// terminal rows are always written. It grows the journal (written zeros)
// as needed; when it cannot, it fails with ErrNoSpace and the caller must
// not dispatch. The reservation is a file <state>/audit.reserve/<id>, held
// with an statedir.Flock, so every process on the state dir counts it; a file whose
// holder died is removed by the next recount (Open, or a Reserve or commit
// that finds the space short). release removes it; calling it again does
// nothing.
func (s *Store) Reserve(id string) (release func(), err error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || strings.HasPrefix(id, ".") || len(id) > 200 {
		return nil, fmt.Errorf("%w: reservation id %q is not a valid file name", audit.ErrInvalidRow, id)
	}
	s.pmu.Lock()
	shut := s.shut
	s.pmu.Unlock()
	if shut {
		return nil, ErrClosed
	}
	s.jmu.Lock()
	defer s.jmu.Unlock()
	if err := statedir.Flock(s.j.w, statedir.LockExclusive); err != nil {
		return nil, fmt.Errorf("%w: lock journal: %w", ErrUnavailable, err)
	}
	defer statedir.Unlock(s.j.w)
	end, size, err := s.j.appendPoint()
	if err != nil {
		return nil, fmt.Errorf("%w: read journal end: %w", ErrUnavailable, err)
	}
	n, err := s.resv.cached()
	if err == nil {
		if size, err = s.ensureTail(end, size, n+1, true); err != nil && errors.Is(err, ErrNoSpace) {
			// The count may include released reservations: count again.
			if n, err = s.resv.recount(); err == nil {
				_, err = s.ensureTail(end, size, n+1, false)
			}
		}
	}
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p := filepath.Join(s.resv.dir, id)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: reservation %s: %w", ErrUnavailable, id, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(p)
		return nil, fmt.Errorf("%w: lock reservation %s: %w", ErrUnavailable, id, err)
	}
	if err := s.resv.store(n + 1); err != nil {
		f.Close()
		_ = os.Remove(p)
		return nil, fmt.Errorf("%w: reservation count: %w", ErrUnavailable, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = os.Remove(p)
			f.Close()
		})
	}, nil
}

// ensureTail makes the journal's preallocated space after end hold at
// least n reservations, growing it with written zeros (journal locked). It
// returns the size; ErrNoSpace when the file cannot grow. quick: report
// ErrNoSpace without trying to grow when only growing would help (the
// caller recounts first).
func (s *Store) ensureTail(end, size, n int64, quick bool) (int64, error) {
	need := end + n*TerminalReserve
	if need <= size {
		return size, nil
	}
	if fi, err := s.j.w.Stat(); err == nil { // another process may have grown it
		size = max(size, fi.Size())
		s.j.wsize = max(s.j.wsize, size)
	}
	if need <= size {
		return size, nil
	}
	if quick {
		return size, fmt.Errorf("%w: journal tail short", ErrNoSpace)
	}
	if err := s.j.grow(size, need); err != nil {
		return size, fmt.Errorf("%w: %d reservations of %d bytes need %d journal bytes after offset %d, the file cannot grow past %d: %w",
			ErrNoSpace, n, TerminalReserve, n*TerminalReserve, end, size, err)
	}
	return s.j.wsize, nil
}

// isTerminal reports whether rows of kind k may use reserved space.
func isTerminal(k audit.Kind) bool {
	return k == audit.KindTimeout || k == audit.KindInvokedCompleted
}

// makeRoom checks, before a batch holding rows other than terminal ones is
// appended at [start, end), that the space after it still holds every
// standing reservation, growing the journal if needed (journal locked). It
// returns the size, or an error wrapping ErrNoSpace. One pread on the path
// every such commit takes; the reservation dir is read only when the
// space is short.
func (s *Store) makeRoom(end, size int64) (int64, error) {
	n, err := s.resv.cached()
	if err != nil {
		return size, err
	}
	if n == 0 || end+n*TerminalReserve <= size {
		return size, nil
	}
	if size, err = s.ensureTail(end, size, n, true); err == nil || !errors.Is(err, ErrNoSpace) {
		return size, err
	}
	if n, err = s.resv.recount(); err != nil {
		return size, err
	}
	return s.ensureTail(end, size, n, false)
}

// grow extends the file from size to past need with written zeros, a
// chunk boundary when the disk has room for it, else just need, and fdatasyncs
// (exclusive lock held). On failure the file is cut back to size.
func (j *journal) grow(size, need int64) error {
	target := (need/journalChunk + 1) * journalChunk
	var err error
	if !j.preallocate(size, target) {
		target = need
		err = j.zero(size, target)
	}
	if err == nil {
		err = statedir.Datasync(j.w)
	}
	if err != nil {
		_ = j.w.Truncate(size)
		j.wsize = size
		return err
	}
	j.wsize = target
	return nil
}
