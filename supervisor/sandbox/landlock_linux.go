package sandbox

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// Landlock is applied inside the sandbox by cyberos-init (sandbox-init/
// cyberos-init.c), not by this process: the rules name paths of the
// sandbox's root, which exists only after libcontainer's pivot_root in its
// own Go init, and the one program that runs between that and the skill's
// execve is cyberos-init, kept in C for its single pid (a Go init cost nine
// of pids.max). It restricts itself before forking the skill; the Bash
// tool's processes, started by libcontainer beside it, go through
// cyberos-init --exec so they get the same rules (a Landlock domain only
// covers its creator's descendants).
//
// This side decides the ABI and records it: the kernel's ABI capped at the
// newest cyberos-init knows, provided the seccomp profile lets the
// landlock_* syscalls through (best-effort Landlock under a profile without
// them "succeeds" while applying nothing; DESIGN.md). Otherwise Landlock is
// recorded as unavailable, with the reason, in Containment.Landlock and
// NotEnforced. When the ABI is decided, cyberos-init applies exactly it or
// refuses to start the skill, so the record never claims more than ran.
// Proven by TestLandlockConfinesSkill (integration/).

// landlockMaxABI is the newest Landlock ABI cyberos-init knows the access
// rights of (LL_MAX_ABI there).
const landlockMaxABI = 7

// landlockSyscalls must all be allowed, unconditionally, by the profile.
var landlockSyscalls = []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}

// kernelLandlockABI asks the kernel for its Landlock ABI version.
func kernelLandlockABI() (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(abi), nil
}

// landlockPlan is what the runner will ask cyberos-init to apply.
type landlockPlan struct {
	ABI int    // 0: not applied
	Why string // why not, when ABI is 0
	// Binds are granted beside the fixed rules: read+exec, or read-write
	// when Writable (cyberos-init --landlock-path).
	Binds []Bind
}

// planLandlock decides the ABI for a sandbox under profile sc (named name).
func planLandlock(kernelABI int, kernelErr error, sc *configs.Seccomp, name string) landlockPlan {
	if kernelErr != nil {
		return landlockPlan{Why: fmt.Sprintf("the kernel has no Landlock (%v)", kernelErr)}
	}
	if kernelABI < 1 {
		return landlockPlan{Why: fmt.Sprintf("the kernel reports Landlock ABI %d", kernelABI)}
	}
	if missing := profileLacks(sc, landlockSyscalls); missing != "" {
		return landlockPlan{Why: fmt.Sprintf("seccomp profile %q does not allow %s", name, missing)}
	}
	return landlockPlan{ABI: min(kernelABI, landlockMaxABI)}
}

// profileLacks returns the first of names that sc does not allow
// unconditionally, or "".
func profileLacks(sc *configs.Seccomp, names []string) string {
	if sc == nil {
		return names[0]
	}
	// A scan per name: names holds a few, and building a map of the whole
	// profile on every Check cost more than the scans.
	for _, n := range names {
		if !slices.ContainsFunc(sc.Syscalls, func(s *configs.Syscall) bool {
			return s != nil && s.Name == n && s.Action == configs.Allow && len(s.Args) == 0
		}) {
			return n
		}
	}
	return ""
}

// describe is the containment record of the plan.
func (p landlockPlan) describe() string {
	if p.ABI == 0 {
		return "unavailable: " + p.Why
	}
	s := fmt.Sprintf("ABI %d enforced: read+exec /usr /bin /lib* /skill /run/cyberos/bin, read /etc /proc, "+
		"read-write /tmp (and exec) /dev/shm and the /dev nodes, nothing else", p.ABI)
	if len(p.Binds) > 0 {
		s += fmt.Sprintf("; and %d bound host path(s)", len(p.Binds))
	}
	if p.ABI >= 6 {
		s += "; signals and abstract unix sockets scoped to the sandbox"
	}
	return s
}

// initArgs is cyberos-init's argv before "--" for the plan; exec adds the
// mode of processes started beside the skill.
func (p landlockPlan) initArgs(exec bool) []string {
	args := []string{InitBinPath}
	if p.ABI > 0 {
		args = append(args, "--landlock", strconv.Itoa(p.ABI))
		for _, b := range p.Binds {
			mode := "ro:"
			if b.Writable {
				mode = "rw:"
			}
			args = append(args, "--landlock-path", mode+b.Path)
		}
	}
	if exec {
		args = append(args, "--exec")
	}
	return append(args, "--")
}

// withControl makes cyberos-init wait for its invocation on fd 4; args end
// with "--".
func withControl(args []string) []string {
	return append(args[:len(args)-1:len(args)-1], "--control", "--")
}

// apply records the plan in cont.
func (p landlockPlan) apply(cont *Containment) {
	cont.Landlock = p.describe()
	if p.ABI == 0 {
		cont.NotEnforced = append(cont.NotEnforced, "landlock: "+p.Why)
	}
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
