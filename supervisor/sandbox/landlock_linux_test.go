package sandbox

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// TestPlanLandlock: the ABI is the kernel's capped at what cyberos-init
// knows, and Landlock is recorded as not enforced (never silently skipped)
// when the kernel lacks it or the profile does not allow its syscalls.
func TestPlanLandlock(t *testing.T) {
	allow := func(names ...string) *configs.Seccomp {
		sc := &configs.Seccomp{DefaultAction: configs.Errno}
		for _, n := range names {
			sc.Syscalls = append(sc.Syscalls, &configs.Syscall{Name: n, Action: configs.Allow})
		}
		return sc
	}
	full := allow(landlockSyscalls...)
	cases := []struct {
		name    string
		abi     int
		err     error
		sc      *configs.Seccomp
		wantABI int
		why     string
	}{
		{"newer kernel capped", 9, nil, full, landlockMaxABI, ""},
		{"older kernel", 3, nil, full, 3, ""},
		{"no landlock", 0, syscall.EOPNOTSUPP, full, 0, "kernel has no Landlock"},
		{"profile lacks restrict_self", 7, nil, allow("landlock_create_ruleset", "landlock_add_rule"), 0, `does not allow landlock_restrict_self`},
		{"conditional rule is not enough", 7, nil, &configs.Seccomp{Syscalls: append(allow("landlock_create_ruleset", "landlock_add_rule").Syscalls,
			&configs.Syscall{Name: "landlock_restrict_self", Action: configs.Allow, Args: []*configs.Arg{{Index: 1, Value: 0, Op: configs.EqualTo}}})}, 0, "landlock_restrict_self"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planLandlock(c.abi, c.err, c.sc, "prof")
			if p.ABI != c.wantABI || !strings.Contains(p.Why, c.why) {
				t.Fatalf("plan %+v, want ABI %d and a reason containing %q", p, c.wantABI, c.why)
			}
			var cont Containment
			p.apply(&cont)
			notEnforced := slices.ContainsFunc(cont.NotEnforced, func(s string) bool { return strings.HasPrefix(s, "landlock: ") })
			if (p.ABI == 0) != notEnforced || (p.ABI == 0) != strings.HasPrefix(cont.Landlock, "unavailable: ") {
				t.Errorf("containment %q / %v for plan %+v", cont.Landlock, cont.NotEnforced, p)
			}
			args := p.initArgs(true)
			if args[0] != InitBinPath || args[len(args)-1] != "--" || !slices.Contains(args, "--exec") ||
				slices.Contains(args, "--landlock") != (p.ABI > 0) {
				t.Errorf("init args %v for plan %+v", args, p)
			}
		})
	}
}
