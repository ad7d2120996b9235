package cli

import (
	"errors"
	"strings"

	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/supervisor/sandbox"
)

// checkProfile loads the profile as every sandbox start does.
func checkProfile(dir, name string) error {
	_, err := seccomp.LoadProfile(dir, name)
	return err
}

// checkPlacement resolves the sandboxes' cgroup placement for this process,
// as serve does before its first sandbox.
func checkPlacement(sb sandbox.Options) error {
	_, err := sandbox.CgroupPlacement(sb)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "sandbox: cgroup_placement "))
	}
	return nil
}
