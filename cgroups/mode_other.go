//go:build !linux

package cgroups

// DetectMode reports Unavailable: cgroups exist only on Linux, so every
// operation of System() fails with errors.ErrUnsupported.
func DetectMode() Mode { return Unavailable }
