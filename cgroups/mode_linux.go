package cgroups

import (
	cgroupsv3 "github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// DetectMode reports the cgroup layout mounted at DefaultRoot, as
// containerd/cgroups sees it (statfs of /sys/fs/cgroup and
// /sys/fs/cgroup/unified; cached for the life of the process).
func DetectMode() Mode {
	switch cgroupsv3.Mode() {
	case cgroupsv3.Legacy:
		return Legacy
	case cgroupsv3.Hybrid:
		return Hybrid
	case cgroupsv3.Unified:
		return Unified
	}
	return Unavailable
}

func getxattr(path, name string, buf []byte) (int, error) { return unix.Getxattr(path, name, buf) }
