package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// killTimeout bounds KillAll.
	killTimeout = 5 * time.Second
	// killRetry is how long a kill round gets to empty the cgroup before
	// the next one.
	killRetry = 100 * time.Millisecond
	// freezeTimeout bounds waiting for a freezer; on timeout the round
	// signals anyway (a task in uninterruptible sleep can keep a v1
	// freezer in FREEZING for ever).
	freezeTimeout = time.Second
	pollInterval  = 10 * time.Millisecond
)

// procDirs lists the directories of cgroup p whose cgroup.procs (with
// their descendants') name its processes: the v2 directory, or the v1
// freezer, pids and memory directories, plus the v2 one in Hybrid (where
// libcontainer joins the unified tree too). Only existing ones.
func (h Hierarchy) procDirs(p string) []string {
	var dirs []string
	switch h.Mode {
	case Unified:
		dirs = []string{filepath.Join(h.root(), p)}
	case Legacy, Hybrid:
		for _, c := range []string{"freezer", "pids", "memory"} {
			dirs = append(dirs, filepath.Join(h.root(), c, p))
		}
		if h.Mode == Hybrid {
			dirs = append(dirs, filepath.Join(h.root(), "unified", p))
		}
	}
	return slices.DeleteFunc(dirs, func(d string) bool { return !dirExists(d) })
}

// Procs lists the processes (thread-group ids) in cgroup path and its
// descendants, sorted: on v2 from <path>/cgroup.procs; on v1 the union of
// freezer/, pids/ and memory/<path>/cgroup.procs (and unified/ in Hybrid).
// A cgroup missing from all of them is an error wrapping ErrNotExist.
func (h Hierarchy) Procs(path string) ([]int, error) {
	if err := h.checkMode(); err != nil {
		return nil, err
	}
	p := cleanPath(path)
	dirs := h.procDirs(p)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("cgroups: procs of %s (%v): %w", p, h.Mode, ErrNotExist)
	}
	seen := make(map[int]struct{})
	for _, d := range dirs {
		if err := collectProcs(d, seen); err != nil {
			return nil, fmt.Errorf("cgroups: procs of %s: %w", p, err)
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// collectProcs adds the pids in cgroup.procs of dir and every descendant.
// Cgroups that vanish while being read are skipped.
func collectProcs(dir string, seen map[int]struct{}) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("parse %s: %w", filepath.Join(p, "cgroup.procs"), err)
			}
			seen[pid] = struct{}{}
		}
		return nil
	})
}

// KillAll kills every process in cgroup path and its descendants, wherever
// they forked to (double forks, setsid, SIGTERM ignored), and returns once
// Procs(path) is empty. It repeats kill rounds until then, for at most 5 s,
// and then fails with an error wrapping ErrProcsRemain. A round:
//
//   - v2 (Unified): write "1" to <path>/cgroup.kill — the kernel SIGKILLs
//     the whole subtree, forks in flight included (Linux 5.14+). Without
//     cgroup.kill, the freeze round below with cgroup.freeze.
//   - Hybrid: write unified/<path>/cgroup.kill when it exists, then the
//     freeze round, for processes not in the unified tree.
//   - v1 (Legacy, Hybrid): freeze freezer/<path> (freezer.state FROZEN),
//     SIGKILL every pid Procs lists, thaw. Frozen tasks cannot fork or exit
//     (so no pid is reused) between the listing and the signal, and die
//     once thawed.
//
// A cgroup missing from every hierarchy is an error wrapping ErrNotExist.
// Zombies are not listed in cgroup.procs, so KillAll does not wait for
// parents to reap. The root cgroup is refused.
func (h Hierarchy) KillAll(path string) error {
	if err := h.checkMode(); err != nil {
		return err
	}
	p := cleanPath(path)
	if p == "/" {
		return errRootCgroup
	}
	deadline := time.Now().Add(killTimeout)
	var lastRound time.Time
	var roundErr error
	for first := true; ; first = false {
		pids, err := h.Procs(p)
		if errors.Is(err, ErrNotExist) && !first {
			return nil // removed under us: nothing left in it
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			err := fmt.Errorf("cgroups: kill %s: %d processes %v remain after %v: %w", p, len(pids), pids, killTimeout, ErrProcsRemain)
			if roundErr != nil {
				err = fmt.Errorf("%w (last round: %w)", err, roundErr)
			}
			return err
		}
		if now.Sub(lastRound) >= killRetry {
			roundErr = h.killRound(p, deadline)
			lastRound = time.Now()
		}
		time.Sleep(pollInterval)
	}
}

// killRound makes one attempt at killing everything in cgroup p; see KillAll.
func (h Hierarchy) killRound(p string, deadline time.Time) error {
	switch h.Mode {
	case Unified:
		if writeControl(filepath.Join(h.root(), p, "cgroup.kill"), "1") == nil {
			return nil
		}
	case Hybrid:
		// Best effort: the unified tree exists only if libcontainer
		// joined it, and only holds the processes that did.
		_ = writeControl(filepath.Join(h.root(), "unified", p, "cgroup.kill"), "1")
	}
	return h.freezeKill(p, deadline)
}

// freezeKill freezes cgroup p, SIGKILLs every process Procs lists, and
// thaws: frozen tasks cannot fork or exit (so no pid is reused) between
// the listing and the signal, and die once thawed. Without a freezer it
// signals anyway.
func (h Hierarchy) freezeKill(p string, deadline time.Time) error {
	thaw, freezeErr := h.freeze(p, deadline)
	pids, err := h.Procs(p)
	errs := []error{freezeErr, err}
	for _, pid := range pids {
		errs = append(errs, sigkill(pid))
	}
	errs = append(errs, thaw())
	return errors.Join(errs...)
}

// freeze freezes cgroup p, waiting until the kernel reports it frozen or
// freezeTimeout (or deadline) passes, and returns the thaw to call in any
// case. Without a freezer it returns a no-op thaw and no error.
func (h Hierarchy) freeze(p string, deadline time.Time) (thaw func() error, err error) {
	var file, frozen, thawed string
	var isFrozen func() bool
	if h.Mode == Unified {
		dir := filepath.Join(h.root(), p)
		file, frozen, thawed = filepath.Join(dir, "cgroup.freeze"), "1", "0"
		isFrozen = func() bool {
			v, err := readStatFile(filepath.Join(dir, "cgroup.events"), "frozen")
			return err == nil && v == 1
		}
	} else {
		file, frozen, thawed = filepath.Join(h.root(), "freezer", p, "freezer.state"), "FROZEN", "THAWED"
		isFrozen = func() bool {
			b, err := os.ReadFile(file)
			return err == nil && strings.TrimSpace(string(b)) == frozen
		}
	}
	noop := func() error { return nil }
	if _, err := os.Stat(file); err != nil {
		return noop, nil // no freezer for this cgroup: signal unfrozen
	}
	thaw = func() error {
		if err := writeControl(file, thawed); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("thaw: %w", err)
		}
		return nil
	}
	limit := earlier(deadline, time.Now().Add(freezeTimeout))
	for {
		// Rewritten each time, as runc does: a v1 freezer can drop back
		// from FREEZING when tasks join meanwhile.
		if err := writeControl(file, frozen); err != nil {
			return thaw, fmt.Errorf("freeze: %w", err)
		}
		if isFrozen() {
			return thaw, nil
		}
		if time.Now().After(limit) {
			return thaw, fmt.Errorf("freeze %s: not frozen after %v", file, freezeTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// writeControl writes value to an existing cgroup control file; it never
// creates one.
func writeControl(name, value string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	return errors.Join(err, f.Close())
}

// sigkill sends SIGKILL to pid; a process already gone is not an error.
func sigkill(pid int) error {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	defer proc.Release()
	if err := proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return nil
}

// trees lists the hierarchy roots a cgroup path may exist under: Root
// itself on v2; on v1 every directory in Root (each controller's mount,
// including name=systemd and, in Hybrid, unified), one per mount when
// co-mounted controllers are symlinked (cpu -> cpu,cpuacct).
func (h Hierarchy) trees() ([]string, error) {
	if h.Mode == Unified {
		return []string{h.root()}, nil
	}
	entries, err := os.ReadDir(h.root())
	if err != nil {
		return nil, fmt.Errorf("cgroups: list hierarchies: %w", err)
	}
	var trees []string
	seen := make(map[string]bool)
	for _, e := range entries {
		dir := filepath.Join(h.root(), e.Name())
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() || seen[real] {
			continue
		}
		seen[real] = true
		trees = append(trees, dir)
	}
	return trees, nil
}

// RemoveLeftovers removes the child cgroups of parent (e.g. "/cyberos")
// that keep does not claim, as a crashed run leaves them: it collects the
// child directory names under parent in every hierarchy (v2: the one tree;
// v1: every controller), and for each id not kept runs KillAll on
// parent/id and then removes its directories, deepest first, with rmdir
// (which cgroupfs allows; nothing else is ever deleted). It returns the
// ids it removed, sorted, and the errors of the others joined. keep may be
// nil. For use at startup, before any invocation runs.
func (h Hierarchy) RemoveLeftovers(parent string, keep func(id string) bool) ([]string, error) {
	if err := h.checkMode(); err != nil {
		return nil, err
	}
	pp := cleanPath(parent)
	if pp == "/" {
		return nil, errRootCgroup
	}
	trees, err := h.trees()
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool)
	for _, t := range trees {
		entries, err := os.ReadDir(filepath.Join(t, pp))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroups: list leftovers: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				ids[e.Name()] = true
			}
		}
	}
	var removed []string
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if keep != nil && keep(id) {
			continue
		}
		if err := h.remove(path.Join(pp, id), trees); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// Remove runs KillAll on cgroup cg and then removes its directories in
// every hierarchy, deepest first; a cgroup that does not exist is no error.
// The runner uses it for a sandbox whose creation helper died mid-create,
// so no container state says the cgroup exists.
func (h Hierarchy) Remove(cg string) error {
	if err := h.checkMode(); err != nil {
		return err
	}
	if cleanPath(cg) == "/" {
		return errRootCgroup
	}
	trees, err := h.trees()
	if err != nil {
		return err
	}
	return h.remove(cleanPath(cg), trees)
}

func (h Hierarchy) remove(cg string, trees []string) error {
	if err := h.KillAll(cg); err != nil && !errors.Is(err, ErrNotExist) {
		return err
	}
	var rmErrs []error
	for _, t := range trees {
		rmErrs = append(rmErrs, rmdirTree(filepath.Join(t, cg)))
	}
	if err := errors.Join(rmErrs...); err != nil {
		return fmt.Errorf("cgroups: remove %s: %w", cg, err)
	}
	return nil
}

// rmdirTree removes dir and its subdirectories, deepest first, with rmdir
// only: on cgroupfs that removes a cgroup with its control files; on any
// other filesystem it fails on the first regular file.
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return rmdir(dir)
}

// rmdir retries EBUSY, which a cgroup reports for a moment after its last
// process died.
func rmdir(dir string) error {
	delay := 10 * time.Millisecond
	for i := 0; ; i++ {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || i == 4 {
			return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
		}
		time.Sleep(delay)
		delay *= 2
	}
}
