package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DelegateXattr is the extended attribute systemd (251 and later) sets to
// "1" on the cgroup of a unit with Delegate=yes: the subtree is the
// unit's to manage.
const DelegateXattr = "trusted.delegate"

// Own is the cgroup path of the process whose /proc/<pid>/cgroup is
// procCgroup, in h's layout: the "0::" entry on Unified; on Legacy and
// Hybrid the memory controller's, which must equal the pids and cpu
// controllers' (a unit systemd delegates to has the same path in each).
func (h Hierarchy) Own(procCgroup []byte) (string, error) {
	if err := h.checkMode(); err != nil {
		return "", err
	}
	paths := map[string]string{}
	s := bufio.NewScanner(bytes.NewReader(procCgroup))
	for s.Scan() {
		// "hierarchy-id:controller,controller:path"
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	if h.Mode == Unified {
		p, ok := paths[""]
		if !ok {
			return "", errors.New("cgroups: no cgroup v2 entry (0::) in /proc/self/cgroup")
		}
		return cleanPath(p), nil
	}
	mem, ok := paths["memory"]
	if !ok {
		return "", errors.New("cgroups: no memory controller entry in /proc/self/cgroup")
	}
	for _, c := range []string{"pids", "cpu"} {
		if p, ok := paths[c]; ok && p != mem {
			return "", fmt.Errorf("cgroups: this process is in %s for memory but %s for %s: not one delegated subtree", mem, p, c)
		}
	}
	return cleanPath(mem), nil
}

// Delegated reports whether cgroup path of h carries systemd's delegation
// mark (DelegateXattr), read where systemd keeps its own tree: the v2
// tree (Unified, or Hybrid's unified) or, on Legacy, the name=systemd
// hierarchy.
func (h Hierarchy) Delegated(path string) bool {
	dir := filepath.Join(h.root(), cleanPath(path))
	switch h.Mode {
	case Hybrid:
		dir = filepath.Join(h.root(), "unified", cleanPath(path))
	case Legacy:
		dir = filepath.Join(h.root(), "systemd", cleanPath(path))
	case Unified:
	default:
		return false
	}
	buf := make([]byte, 8)
	n, err := getxattr(dir, DelegateXattr, buf)
	return err == nil && string(buf[:n]) == "1"
}

// EnterLeaf moves process pid (all its threads) into the child leaf of
// cgroup path on the v2 tree, creating it: cgroup v2 lets a cgroup with
// child cgroups that use controllers hold no process itself, so a daemon
// that makes children under its own cgroup must first leave it. On v1
// there is no such rule and it does nothing.
func (h Hierarchy) EnterLeaf(path, leaf string, pid int) error {
	if h.Mode != Unified {
		return nil
	}
	if cleanPath(path) == "/" {
		return errRootCgroup
	}
	dir := filepath.Join(h.root(), cleanPath(path), leaf)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroups: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("cgroups: move pid %d into %s: %w", pid, dir, err)
	}
	return nil
}
