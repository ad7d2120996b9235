//go:build !linux

package cli

// warmSeccomp does nothing where sandboxes have no seccomp filter.
func warmSeccomp(_, _ string) (wait func()) { return func() {} }
