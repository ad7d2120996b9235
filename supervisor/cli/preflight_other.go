//go:build !linux

package cli

import "cyberos.dev/supervisor/sandbox"

// checkProfile has nothing to load: no seccomp filter applies here.
func checkProfile(string, string) error { return nil }

// checkPlacement has no cgroups to place here.
func checkPlacement(sandbox.Options) error { return nil }
