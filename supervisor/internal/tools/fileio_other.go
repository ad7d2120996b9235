//go:build !linux

package tools

import (
	"context"
	"errors"
	"fmt"

	"cyberos.dev/policy"
)

// errNoSafeOpen: without openat2 there is no race-free way to refuse
// symlinks anywhere in a path, so the host file tools refuse to work rather
// than fall back to a check-then-open (fileio.go).
var errNoSafeOpen = fmt.Errorf("%w: host file tools need Linux openat2: %w", ErrFailed, errors.ErrUnsupported)

func readHostFile(policy.Tool, string, int64, func(int64) error) ([]byte, error) {
	return nil, errNoSafeOpen
}

func writeHostFile(policy.Tool, string, []byte) error { return errNoSafeOpen }

func editHostFile(policy.Tool, string, int64, func(int64) error, func([]byte) ([]byte, error)) ([]byte, error) {
	return nil, errNoSafeOpen
}

func walkHost(context.Context, policy.Tool, string, int, func(hostEntry) error) error {
	return errNoSafeOpen
}

func inSkillFolder(string) (bool, error) { return false, errNoSafeOpen }

// fsErr passes the refusal on: no errno is mapped where nothing is opened.
func fsErr(_ policy.Tool, err error) error { return err }
