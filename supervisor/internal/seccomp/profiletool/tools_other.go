//go:build !linux

package profiletool

import (
	"fmt"
	"strconv"
)

// The seccomp operator tools need libseccomp (Linux).

func LintProfile(path string) LintReport {
	return LintReport{File: path, Error: ErrUnsupported.Error()}
}

func ExplainProfile(path, syscall string, args []uint64) (Explanation, error) {
	return Explanation{}, ErrUnsupported
}

func DiffProfiles(a, b string) (ProfileDiff, error) { return ProfileDiff{}, ErrUnsupported }

func ImportDockerProfile(data []byte) (ImportResult, error) { return ImportResult{}, ErrUnsupported }

func RecordProfile(base string, used []string) ([]byte, error) { return nil, ErrUnsupported }

// ArgValue reads a number; symbolic names are Linux's.
func ArgValue(syscall string, index int, s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("argument %d of %s: %q is not a number", index, syscall, s)
	}
	return v, nil
}
