package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/internal/seccomp"
)

// TestInitStartsTheSkillWithVfork runs the real cyberos-init under
// default.json with some process-creation calls taken out of the profile:
// without fork and clone the skill still starts (init uses vfork), without
// vfork it starts too (init falls back to fork), and a missing entrypoint
// is still reported as "exec ENOENT" through vfork. amd64 only: there vfork
// is its own system call, which a profile can refuse apart from clone.
func TestInitStartsTheSkillWithVfork(t *testing.T) {
	testutil.RequiresRoot(t)
	_, initBin := hostInit(t, 0o755)
	src, err := os.ReadFile(filepath.Join("..", "..", "seccomp-profiles", "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	profiles := t.TempDir()
	// without writes default.json less the named system calls as name.json.
	without := func(name string, calls ...string) {
		var p map[string]any
		if err := json.Unmarshal(src, &p); err != nil {
			t.Fatal(err)
		}
		var kept []any
		removed := 0
		for _, r := range p["syscalls"].([]any) {
			rule := r.(map[string]any)
			var names []any
			for _, n := range rule["names"].([]any) {
				if slices.Contains(calls, n.(string)) {
					removed++
					continue
				}
				names = append(names, n)
			}
			if len(names) > 0 {
				rule["names"] = names
				kept = append(kept, rule)
			}
		}
		if removed < len(calls) {
			t.Fatalf("default.json does not allow all of %v", calls)
		}
		p["syscalls"] = kept
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(profiles, name+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	without("nofork", "fork", "clone")
	without("novfork", "vfork")

	run := func(profile, program string) (code int, status, stderr string) {
		t.Helper()
		cfg, hash, err := seccomp.LoadProfileHashed(profiles, profile)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := seccomp.ProgramFor(hash, cfg)
		if err != nil {
			t.Fatal(err)
		}
		f, err := prog.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return runHostInit(t, initBin, []string{"--seccomp", fmt.Sprintf("%d:%d", initFilterFD, prog.Flags), "--", program},
			func(status *os.File) []*os.File { return []*os.File{status, nil, f} }, nil) // fds 3, 4 (closed) and initFilterFD
	}
	for _, c := range []struct {
		name, profile, program, status string
		code                           int
	}{
		{"fork and clone refused", "nofork", "/bin/true", "exit 0\n", 0},
		{"vfork refused", "novfork", "/bin/true", "exit 0\n", 0},
		{"fork and clone refused, no entrypoint", "nofork", "/nonexistent", "exec 2\n", 127},
		{"vfork refused, no entrypoint", "novfork", "/nonexistent", "exec 2\n", 127},
	} {
		code, status, stderr := run(c.profile, c.program)
		if code != c.code || status != c.status {
			t.Errorf("%s: exit %d, status %q, stderr %q; want %d, %q", c.name, code, status, stderr, c.code, c.status)
		}
	}
}
