package mcpclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Approvals records, per server and tool, the definition hash an operator
// accepted (or that was first seen: trust on first use), and the hash of a
// changed definition waiting for approval. It is a 0600 JSON file under
// the state dir, rewritten atomically on each change.
type Approvals struct {
	path string

	mu sync.Mutex
	f  approvalsFile
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
	b, err := os.ReadFile(a.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("mcp approvals: %w", err)
	default:
		if err := json.Unmarshal(b, &a.f); err != nil {
			return nil, fmt.Errorf("mcp approvals: %s: %w", a.path, err)
		}
	}
	if a.f.Approved == nil {
		a.f.Approved = map[string]map[string]string{}
	}
	if a.f.Pending == nil {
		a.f.Pending = map[string]map[string]string{}
	}
	return a, nil
}

// Judge compares a tool's definition hash with the approved one, recording
// a first sight, or (auto) a change; a change without auto is recorded as
// pending and refused.
func (a *Approvals) Judge(server, tool, hash string, auto bool) (Judged, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
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
func (a *Approvals) Approve(server string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var tools []string
	for tool, hash := range a.f.Pending[server] {
		set(a.f.Approved, server, tool, hash)
		tools = append(tools, tool)
	}
	slices.Sort(tools)
	delete(a.f.Pending, server)
	return tools, a.save()
}

// Approved returns the approved hash of a tool ("" if none).
func (a *Approvals) Approved(server, tool string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f.Approved[server][tool]
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
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
