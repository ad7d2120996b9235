package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultLogBudget caps the bytes of kept skill logs when
// Supervisor.LogBudget is 0: 64 MiB, or an eighth of the state
// filesystem when that is smaller.
const DefaultLogBudget = 64 << 20

// logStore keeps each invocation's stderr in <state>/logs/<id>.stderr
// within a byte budget: a new log first makes room by removing the oldest
// ones, so skill logs can never fill the disk the audit journal needs.
type logStore struct {
	dir      string
	budget   int64
	maxFiles int // maxKeptLogs unless a test sets it

	mu      sync.Mutex
	scanned bool
	total   int64
	files   []keptLog // oldest first
}

type keptLog struct {
	name string
	size int64
}

func newLogStore(dir string, budget int64) *logStore {
	if budget <= 0 {
		budget = DefaultLogBudget
		var st unix.Statfs_t
		if unix.Statfs(filepath.Dir(dir), &st) == nil {
			if eighth := int64(st.Blocks) * int64(st.Bsize) / 8; eighth > 0 && eighth < budget { //nolint:unconvert // Bsize's type differs by platform
				budget = eighth
			}
		}
	}
	return &logStore{dir: dir, budget: budget, maxFiles: maxKeptLogs}
}

// scan learns the logs already kept (by modification time), once.
func (l *logStore) scan() {
	if l.scanned {
		return
	}
	l.scanned = true
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return
	}
	type aged struct {
		keptLog
		mod int64
	}
	var all []aged
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".stderr") {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		all = append(all, aged{keptLog{e.Name(), fi.Size()}, fi.ModTime().UnixNano()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod < all[j].mod })
	for _, a := range all {
		l.files = append(l.files, a.keptLog)
		l.total += a.size
	}
}

// maxKeptLogs bounds how many logs are kept, whatever their size: each is
// an inode and an entry in files.
const maxKeptLogs = 1 << 16

// keep writes one log, removing the oldest logs first as needed. A log
// larger than the whole budget is cut to it. An empty one is not written:
// a skill that wrote nothing to stderr has no log. A failed write leaves
// no partial file.
func (l *logStore) keep(id string, b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	l.scan()
	if int64(len(b)) > l.budget {
		b = b[int64(len(b))-l.budget:]
	}
	for len(l.files) > 0 && (l.total+int64(len(b)) > l.budget || len(l.files) >= l.maxFiles) {
		old := l.files[0]
		if err := os.Remove(filepath.Join(l.dir, old.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			break
		}
		l.files, l.total = l.files[1:], l.total-old.size
	}
	name := id + ".stderr"
	path := filepath.Join(l.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		_ = os.Remove(path)
		return err
	}
	l.files = append(l.files, keptLog{name, int64(len(b))})
	l.total += int64(len(b))
	return nil
}
