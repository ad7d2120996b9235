package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"cyberos.dev/cgroups"
)

// DefaultCgroupParent is the cgroup under which every invocation of the
// default run dir gets its own leaf, named by the invocation id. A runner
// with another run dir uses "/cyberos-<hash of the run dir>", so that
// leftover cleanup (which trusts the run dir's locks) never touches the
// sandboxes of another runner.
const DefaultCgroupParent = "/cyberos"

// CgroupParentFor is the cgroup parent a runner with runDir uses.
func CgroupParentFor(runDir string) string {
	if filepath.Clean(runDir) == DefaultRunDir {
		return DefaultCgroupParent
	}
	sum := sha256.Sum256([]byte(filepath.Clean(runDir)))
	return DefaultCgroupParent + "-" + hex.EncodeToString(sum[:6])
}

// placeCgroups resolves cfg.CgroupPlacement into the parent of the
// sandboxes' cgroups, and a sentence saying where that is and why. With
// enter, PlacementService (chosen or automatic) on cgroup v2 moves this
// process into its own cgroup's DaemonLeaf first.
func placeCgroups(cfg Options, h cgroups.Hierarchy, enter bool) (parent, where string, err error) {
	root := CgroupParentFor(cfg.RunDir)
	atRoot := func(why string) (string, string, error) {
		return root, fmt.Sprintf("at the hierarchy root, %s/<id>: %s", root, why), nil
	}
	switch cfg.CgroupPlacement {
	case "", PlacementRoot:
		return atRoot("cgroup_placement is root")
	case PlacementAuto, PlacementService:
	default:
		return "", "", fmt.Errorf("sandbox: cgroup placement %q: want auto, service or root", cfg.CgroupPlacement)
	}
	auto := cfg.CgroupPlacement == PlacementAuto
	self, err := os.ReadFile("/proc/self/cgroup")
	var own string
	if err == nil {
		own, err = h.Own(self)
	}
	switch {
	case err != nil && auto:
		return atRoot(err.Error())
	case err != nil:
		return "", "", fmt.Errorf("sandbox: cgroup_placement service: %w", err)
	}
	// A runner made earlier in this process has moved it into the leaf.
	if h.Mode == cgroups.Unified && path.Base(own) == DaemonLeaf {
		own = path.Dir(own)
	}
	switch {
	case own == "/" && auto:
		return atRoot("this process is in the root cgroup")
	case own == "/":
		return "", "", errors.New("sandbox: cgroup_placement service: this process is in the root cgroup, which is not delegated to it")
	case auto && !h.Delegated(own):
		return atRoot(fmt.Sprintf("this process's cgroup %s is not delegated to it (systemd marks a Delegate=yes unit's cgroup, from version 251; set cgroup_placement: service for another manager that delegates)", own))
	}
	if enter {
		if err := h.EnterLeaf(own, DaemonLeaf, os.Getpid()); err != nil {
			return "", "", fmt.Errorf("sandbox: cgroup placement under %s: %w", own, err)
		}
	}
	parent = path.Join(own, path.Base(root))
	where = fmt.Sprintf("under this process's own cgroup, %s/<id>", parent)
	if h.Mode == cgroups.Unified {
		where += fmt.Sprintf(" (the process itself in %s/%s)", own, DaemonLeaf)
	}
	if auto {
		where += ": systemd delegated " + own + " to it"
	}
	return parent, where, nil
}

// CgroupPlacement says where a runner with opts puts its sandboxes'
// cgroups, and why, without moving this process (doctor).
func CgroupPlacement(opts Options) (string, error) {
	if opts.RunDir == "" {
		opts.RunDir = DefaultRunDir
	}
	_, where, err := placeCgroups(opts, cgroups.System(), false)
	return where, err
}

// CgroupWhere says where this runner puts its sandboxes' cgroups.
func (r *LinuxRunner) CgroupWhere() string { return r.cgroupWhere }
