//go:build !linux && !darwin

package sandbox

// New reports that this platform has no sandbox.
func New(Options) (Runner, error) { return nil, ErrUnsupported }

// Reexec has nothing to do here.
func Reexec() {}

// Preflight reports that this platform has no sandbox.
func Preflight(Options) error { return ErrUnsupported }
