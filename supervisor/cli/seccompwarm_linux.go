package cli

import (
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/seccomp"
)

// warmSeccomp loads, checks and compiles the seccomp profile the skill in
// dir names, in the background, while the runner and the audit store are
// made; the returned function waits for it. It only fills the caches the
// invocation's own check and start consult, each keyed by the SHA-256 of
// the profile's bytes they read again themselves: an edit in between is
// loaded anew, and an error here is theirs to report.
func warmSeccomp(dir, profilesDir string) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pol, err := policy.LoadSkill(dir)
		if err != nil || pol.SeccompProfile == "" {
			return
		}
		cfg, hash, err := seccomp.LoadProfileShared(profilesDir, pol.SeccompProfile)
		if err != nil {
			return
		}
		_, _ = seccomp.ProgramFor(hash, cfg)
	}()
	return func() { <-done }
}
