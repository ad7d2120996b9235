//go:build !linux

package seccomp

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
