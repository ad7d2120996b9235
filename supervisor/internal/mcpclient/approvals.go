package mcpclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Approvals records, per server and tool, the definition hash an operator
// accepted (or that was first seen: trust on first use), and the hash of a
// changed definition waiting for approval. It is a 0600 JSON file under
// the state dir, rewritten atomically on each change under an flock of
// its .lock file, and read again whenever it changed on disk: the daemon
// and `cyberos mcp approve` share it.
type Approvals struct {
	path string

	mu   sync.Mutex
	f    approvalsFile
	seen fileStamp // of the file f was read from
}

// fileStamp tells whether the file changed since it was read.
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

type approvalsFile struct {
	// Approved: server → tool → definition hash.
	Approved map[string]map[string]string `json:"approved"`
	// Pending: server → tool → the changed definition's hash.
	Pending map[string]map[string]string `json:"pending,omitempty"`
}

// Judged is what Judge decided.
type Judged int

const (
	JudgedSame         Judged = iota // the approved definition
	JudgedFirstSeen                  // recorded as approved
	JudgedChanged                    // differs from the approved one: refused
	JudgedAutoApproved               // differed, and was recorded (auto)
)

// ApprovalsFile is the file's name under the state dir.
const ApprovalsFile = "mcp-approvals.json"

// OpenApprovals reads the store at dir/ApprovalsFile (absent: empty).
func OpenApprovals(dir string) (*Approvals, error) {
	a := &Approvals{path: filepath.Join(dir, ApprovalsFile)}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// reload reads the file again when it changed since last read.
func (a *Approvals) reload() error {
	st := stampOf(a.path)
	if st == a.seen && a.f.Approved != nil {
		return nil
	}
	var f approvalsFile
	b, err := os.ReadFile(a.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("mcp approvals: %w", err)
	default:
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("mcp approvals: %s: %w", a.path, err)
		}
	}
	if f.Approved == nil {
		f.Approved = map[string]map[string]string{}
	}
	if f.Pending == nil {
		f.Pending = map[string]map[string]string{}
	}
	a.f, a.seen = f, st
	return nil
}

// locked runs fn with the file locked against other processes and read
// afresh.
func (a *Approvals) locked(fn func() error) error {
	lf, err := os.OpenFile(a.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("mcp approvals: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("mcp approvals: lock: %w", err)
	}
	if err := a.reload(); err != nil {
		return err
	}
	return fn()
}

// Judge compares a tool's definition hash with the approved one, recording
// a first sight, or (auto) a change; a change without auto is recorded as
// pending and refused.
func (a *Approvals) Judge(server, tool, hash string, auto bool) (j Judged, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	err = a.locked(func() (err error) {
		j, err = a.judge(server, tool, hash, auto)
		return err
	})
	return j, err
}

func (a *Approvals) judge(server, tool, hash string, auto bool) (Judged, error) {
	old, seen := a.f.Approved[server][tool]
	switch {
	case seen && old == hash:
		if _, p := a.f.Pending[server][tool]; p { // changed back
			delete(a.f.Pending[server], tool)
			return JudgedSame, a.save()
		}
		return JudgedSame, nil
	case seen && !auto:
		if a.f.Pending[server][tool] == hash {
			return JudgedChanged, nil
		}
		set(a.f.Pending, server, tool, hash)
		return JudgedChanged, a.save()
	}
	set(a.f.Approved, server, tool, hash)
	delete(a.f.Pending[server], tool)
	if seen {
		return JudgedAutoApproved, a.save()
	}
	return JudgedFirstSeen, a.save()
}

// Approve accepts every pending definition of server and returns the
// tools approved. Sessions already running keep refusing until their tool
// list is read again (a reconnect or list_changed).
func (a *Approvals) Approve(server string) (tools []string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	err = a.locked(func() error {
		for tool, hash := range a.f.Pending[server] {
			set(a.f.Approved, server, tool, hash)
			tools = append(tools, tool)
		}
		slices.Sort(tools)
		delete(a.f.Pending, server)
		return a.save()
	})
	return tools, err
}

// Approved returns the approved hash of a tool ("" if none), as the file
// says now.
func (a *Approvals) Approved(server, tool string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.reload() // a failed read keeps the last state
	return a.f.Approved[server][tool]
}

// Snapshot returns the approved and pending hashes: server → tool → hash.
func (a *Approvals) Snapshot() (approved, pending map[string]map[string]string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reload(); err != nil {
		return nil, nil, err
	}
	clone := func(m map[string]map[string]string) map[string]map[string]string {
		out := make(map[string]map[string]string, len(m))
		for s, t := range m {
			out[s] = maps.Clone(t)
		}
		return out
	}
	return clone(a.f.Approved), clone(a.f.Pending), nil
}

func set(m map[string]map[string]string, server, tool, hash string) {
	if m[server] == nil {
		m[server] = map[string]string{}
	}
	m[server][tool] = hash
}

// save writes the file atomically: a temp file, fsync, rename, fsync of
// the directory.
func (a *Approvals) save() error {
	b, err := json.MarshalIndent(a.f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(a.path)
	tmp, err := os.CreateTemp(dir, ".mcp-approvals-*")
	if err != nil {
		return fmt.Errorf("mcp approvals: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), a.path)
	}
	if err != nil {
		return fmt.Errorf("mcp approvals: %w", err)
	}
	a.seen = stampOf(a.path)
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
