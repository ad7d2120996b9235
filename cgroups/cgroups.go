// Package cgroups reads per-invocation resource accounting (memory peak, OOM
// kills, pids peak and limit hits) and kills whole cgroups, on cgroup v2 and
// on v1-hybrid hosts. containerd/cgroups detects the host's mode; the
// control files are read and written directly, relative to a root, so unit
// tests run against fake trees.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Stats is the accounting of one invocation's cgroup.
type Stats struct {
	MemoryPeakBytes  uint64 `json:"memory_peak_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes"`
	OOMKills         uint64 `json:"oom_kills"`
	PidsPeak         uint64 `json:"pids_peak"`
	PidsLimit        uint64 `json:"pids_limit"`
	PidsLimitHits    uint64 `json:"pids_limit_hits"` // forks refused at pids.max
}

// Errors returned by this package; test for them with errors.Is.
var (
	// ErrNotExist: the cgroup is in none of the hierarchies this package reads.
	ErrNotExist = errors.New("cgroups: cgroup does not exist")
	// ErrProcsRemain: KillAll gave up with processes still in the cgroup.
	ErrProcsRemain = errors.New("cgroups: processes remain in cgroup")
)

// errRootCgroup is returned for operations that would act on every process
// or every cgroup of the host.
var errRootCgroup = errors.New("cgroups: refusing to act on the root cgroup")

// DefaultRoot is where the host mounts its cgroup hierarchies: the v2 tree
// itself (Unified), or one directory per v1 controller plus, in Hybrid, the
// v2 tree at "unified".
const DefaultRoot = "/sys/fs/cgroup"

// Mode is the cgroup layout of a host.
type Mode int

const (
	// Unavailable: no cgroup hierarchy is mounted (or not Linux).
	Unavailable Mode = iota
	// Legacy: cgroup v1 only, one hierarchy per controller.
	Legacy
	// Hybrid: v1 controllers, plus a v2 tree at <root>/unified (usually
	// without controllers; libcontainer still joins it).
	Hybrid
	// Unified: cgroup v2 only.
	Unified
)

func (m Mode) String() string {
	switch m {
	case Unavailable:
		return "unavailable"
	case Legacy:
		return "legacy"
	case Hybrid:
		return "hybrid"
	case Unified:
		return "unified"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Hierarchy is a cgroup layout rooted at a directory. The zero Root means
// DefaultRoot. Unit tests point Root at a fake tree in a temp dir; the
// package functions use System().
//
// Paths given to its methods are cgroup paths as libcontainer uses them,
// relative to the hierarchy roots, e.g. "/cyberos/<invocation-id>". They
// are cleaned as absolute paths, so ".." cannot climb out of Root.
type Hierarchy struct {
	Root string
	Mode Mode
}

// System is this host's hierarchy: DefaultRoot in the DetectMode() layout.
func System() Hierarchy {
	return Hierarchy{Root: DefaultRoot, Mode: DetectMode()}
}

// ReadStats reads the accounting of cgroup path on this host; see
// Hierarchy.Stats.
func ReadStats(path string) (Stats, error) { return System().Stats(path) }

// ReadOOMKills reads the OOM kills of cgroup path on this host; see
// Hierarchy.OOMKills.
func ReadOOMKills(path string) (uint64, error) { return System().OOMKills(path) }

// KillAll kills every process of cgroup path on this host; see
// Hierarchy.KillAll.
func KillAll(path string) error { return System().KillAll(path) }

// Procs lists the processes of cgroup path on this host; see Hierarchy.Procs.
func Procs(path string) ([]int, error) { return System().Procs(path) }

// Remove kills every process of cgroup path on this host and removes it;
// see Hierarchy.Remove.
func Remove(path string) error { return System().Remove(path) }

// RemoveLeftovers removes the child cgroups of parent left by a crashed run
// on this host; see Hierarchy.RemoveLeftovers.
func RemoveLeftovers(parent string, keep func(id string) bool) ([]string, error) {
	return System().RemoveLeftovers(parent, keep)
}

func (h Hierarchy) root() string {
	if h.Root == "" {
		return DefaultRoot
	}
	return h.Root
}

// cleanPath makes p absolute and free of "..", so joining it to a root
// cannot leave that root.
func cleanPath(p string) string {
	return filepath.Clean("/" + p)
}

func (h Hierarchy) checkMode() error {
	switch h.Mode {
	case Legacy, Hybrid, Unified:
		return nil
	}
	return fmt.Errorf("cgroups: no cgroup hierarchy (mode %v): %w", h.Mode, errors.ErrUnsupported)
}

// HasController reports whether controller name (e.g. "memory", "pids",
// "cpu", "freezer") is usable on this host, and how; see
// Hierarchy.HasController.
func HasController(name string) (ok bool, detail string) { return System().HasController(name) }

// HasController reports whether controller name is usable in h, with a
// one-line detail for `cyberos doctor`: on v1 whether <root>/<name> is a
// mounted hierarchy; on v2 whether the root's cgroup.controllers lists it
// (in Hybrid, a controller not on v1 may be on the unified tree). The v2
// freezer is not a controller but cgroup.freeze in every non-root cgroup.
func (h Hierarchy) HasController(name string) (ok bool, detail string) {
	if err := h.checkMode(); err != nil {
		return false, err.Error()
	}
	if h.Mode != Unified {
		dir := filepath.Join(h.root(), name)
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			return true, "v1 hierarchy at " + dir
		}
		if h.Mode == Legacy {
			return false, "no v1 hierarchy at " + dir
		}
	}
	root := h.root()
	if h.Mode == Hybrid {
		root = filepath.Join(root, "unified")
	}
	if name == "freezer" && h.Mode == Unified {
		return true, "cgroup v2 core (cgroup.freeze)"
	}
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return false, fmt.Sprintf("not available: %v", err)
	}
	if slices.Contains(strings.Fields(string(b)), name) {
		return true, "v2 controller at " + root
	}
	if h.Mode == Hybrid {
		return false, "neither a v1 hierarchy nor in " + filepath.Join(root, "cgroup.controllers")
	}
	return false, "not in " + filepath.Join(root, "cgroup.controllers")
}
