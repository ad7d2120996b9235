//go:build !linux

package cgroups

import "errors"

// DetectMode reports Unavailable: cgroups exist only on Linux, so every
// operation of System() fails with errors.ErrUnsupported.
func DetectMode() Mode { return Unavailable }

func getxattr(string, string, []byte) (int, error) { return 0, errors.ErrUnsupported }
