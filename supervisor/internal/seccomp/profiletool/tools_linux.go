package profiletool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	mobyseccomp "github.com/moby/profiles/seccomp"

	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"cyberos.dev/supervisor/internal/seccomp"
)

// dangerous are system calls whose allowance weakens the sandbox enough
// that `seccomp lint` warns about it, with the reason it gives. clone,
// clone3, unshare, ioctl and personality are judged by their arguments
// (lintProbes) instead.
var dangerous = map[string]string{
	"mount":             "mounts can hide or expose files, and reach kernel filesystem code",
	"umount":            "unmounting can expose what a mount hid",
	"umount2":           "unmounting can expose what a mount hid",
	"pivot_root":        "changes the root filesystem",
	"chroot":            "chroot games are a classic escape",
	"setns":             "joins other namespaces",
	"bpf":               "loads eBPF programs: a large kernel attack surface",
	"ptrace":            "reads and writes other processes' memory and registers",
	"process_vm_readv":  "reads another process's memory",
	"process_vm_writev": "writes another process's memory",
	"pidfd_getfd":       "steals file descriptors from another process",
	"kcmp":              "compares kernel objects of other processes (ASLR leak)",
	"kexec_load":        "loads a new kernel",
	"kexec_file_load":   "loads a new kernel",
	"init_module":       "loads kernel modules",
	"finit_module":      "loads kernel modules",
	"delete_module":     "unloads kernel modules",
	"keyctl":            "the kernel keyring is not namespaced",
	"add_key":           "the kernel keyring is not namespaced",
	"request_key":       "the kernel keyring is not namespaced",
	"perf_event_open":   "performance counters leak kernel and other processes' data",
	"userfaultfd":       "stalls kernel page faults: a tool for winning kernel races",
	"open_by_handle_at": "opens files by handle, bypassing the mount namespace (the 'shocker' escape)",
	"name_to_handle_at": "the other half of open_by_handle_at",
	"fsopen":            "the new mount API",
	"fsconfig":          "the new mount API",
	"fsmount":           "the new mount API",
	"fspick":            "the new mount API",
	"move_mount":        "the new mount API",
	"open_tree":         "the new mount API",
	"mount_setattr":     "the new mount API",
	"io_uring_setup":    "io_uring bypasses seccomp for the operations it performs",
	"io_uring_enter":    "io_uring bypasses seccomp for the operations it performs",
	"io_uring_register": "io_uring bypasses seccomp for the operations it performs",
	"io_setup":          "AIO contexts count against fs.aio-max-nr, one limit for the whole host",
	"reboot":            "reboots the host (or its pid namespace)",
	"swapon":            "changes host swap",
	"swapoff":           "changes host swap",
	"acct":              "process accounting is host-wide",
	"quotactl":          "filesystem quotas are host-wide",
	"settimeofday":      "the clock is not namespaced",
	"clock_settime":     "the clock is not namespaced",
	"clock_adjtime":     "the clock is not namespaced",
	"adjtimex":          "the clock is not namespaced",
	"syslog":            "reads the kernel log (addresses, other tenants' messages)",
	"lookup_dcookie":    "kernel profiling interface",
	"vhangup":           "hangs up the terminal",
	"iopl":              "raw port I/O",
	"ioperm":            "raw port I/O",
	"nfsservctl":        "kernel NFS server control",
	"uselib":            "legacy loader, a history of bugs",
	"fanotify_init":     "watches filesystem events host-wide",
}

// namespaceFlags are the CLONE_NEW* flags lint tries on clone and unshare.
var namespaceFlags = []struct {
	name string
	flag uint64
}{
	{"CLONE_NEWNS", unix.CLONE_NEWNS}, {"CLONE_NEWUTS", unix.CLONE_NEWUTS}, {"CLONE_NEWIPC", unix.CLONE_NEWIPC},
	{"CLONE_NEWUSER", unix.CLONE_NEWUSER}, {"CLONE_NEWPID", unix.CLONE_NEWPID}, {"CLONE_NEWNET", unix.CLONE_NEWNET},
	{"CLONE_NEWCGROUP", unix.CLONE_NEWCGROUP}, {"CLONE_NEWTIME", unix.CLONE_NEWTIME},
}

// argKind is what a symbolic argument value is, and the argument that takes
// it: a syscall name to that argument's index. explain refuses a name at any
// other argument, so `ioctl TIOCSTI` is not read as ioctl(fd 0x5412).
type argKind struct {
	what string
	at   map[string]int
}

var (
	ioctlRequest    = &argKind{"an ioctl request", map[string]int{"ioctl": 1}}
	personalityFlag = &argKind{"a personality", map[string]int{"personality": 0}}
	cloneOnlyFlag   = &argKind{"a clone flag", map[string]int{"clone": 0}}
	cloneFlag       = &argKind{"a clone flag", map[string]int{"clone": 0, "unshare": 0}}
	nsFlag          = &argKind{"a namespace flag", map[string]int{"clone": 0, "unshare": 0, "setns": 1}}
	// CLONE_NEWTIME (0x80) lies in clone's exit-signal byte, so clone cannot
	// take it (clone3 can, in memory seccomp does not see).
	nsTimeFlag = &argKind{"a namespace flag", map[string]int{"unshare": 0, "setns": 1}}
	// clone takes the exit signal in the low byte of its flags.
	signalNumber = &argKind{"a signal", map[string]int{"clone": 0, "kill": 1, "tkill": 1, "tgkill": 2, "rt_sigaction": 0,
		"rt_sigqueueinfo": 1, "rt_tgsigqueueinfo": 2, "pidfd_send_signal": 1}}
)

// argSym is one symbolic value explain takes.
type argSym struct {
	value uint64
	kind  *argKind
}

// argNames are the symbolic argument values explain takes (and prints
// beside the number): namespace flags, the clone flags libc uses, and the
// ioctl requests and personalities lint cares about.
var argNames = func() map[string]argSym {
	m := map[string]argSym{
		"TIOCSTI": {unix.TIOCSTI, ioctlRequest}, "TIOCLINUX": {unix.TIOCLINUX, ioctlRequest},
		"TIOCGWINSZ": {unix.TIOCGWINSZ, ioctlRequest}, "FIONREAD": {unix.TIOCINQ, ioctlRequest}, "TCGETS": {unix.TCGETS, ioctlRequest},
		"SIGCHLD":  {uint64(unix.SIGCHLD), signalNumber},
		"CLONE_VM": {unix.CLONE_VM, cloneFlag}, "CLONE_FS": {unix.CLONE_FS, cloneFlag}, "CLONE_FILES": {unix.CLONE_FILES, cloneFlag},
		"CLONE_SIGHAND": {unix.CLONE_SIGHAND, cloneFlag}, "CLONE_THREAD": {unix.CLONE_THREAD, cloneFlag},
		"CLONE_SYSVSEM": {unix.CLONE_SYSVSEM, cloneFlag}, "CLONE_VFORK": {unix.CLONE_VFORK, cloneOnlyFlag},
		"CLONE_SETTLS": {unix.CLONE_SETTLS, cloneOnlyFlag}, "CLONE_PARENT_SETTID": {unix.CLONE_PARENT_SETTID, cloneOnlyFlag},
		"CLONE_CHILD_CLEARTID": {unix.CLONE_CHILD_CLEARTID, cloneOnlyFlag}, "CLONE_CHILD_SETTID": {unix.CLONE_CHILD_SETTID, cloneOnlyFlag},
		"ADDR_NO_RANDOMIZE": {perAddrNoRandomize, personalityFlag}, "READ_IMPLIES_EXEC": {perReadImpliesExec, personalityFlag},
	}
	for _, f := range namespaceFlags {
		kind := nsFlag
		if f.flag == unix.CLONE_NEWTIME {
			kind = nsTimeFlag
		}
		m[f.name] = argSym{f.flag, kind}
	}
	return m
}()

// argName is a name argNames gives v at argument index of syscall ("" when
// none), the first in name order when several do.
func argName(syscall string, index uint, v uint64) string {
	var names []string
	for n, s := range argNames {
		if i, ok := s.kind.at[syscall]; ok && uint(i) == index && s.value == v {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// ArgValue reads argument index of syscall as explain takes it: a number
// (decimal, 0x hex, 0 octal) or symbolic names joined by "|", e.g. TIOCSTI
// or CLONE_NEWUSER|SIGCHLD. A name is refused at an argument that does not
// take it, with where it belongs.
func ArgValue(syscall string, index int, s string) (uint64, error) {
	if v, err := strconv.ParseUint(s, 0, 64); err == nil {
		return v, nil
	}
	var v uint64
	for _, part := range strings.Split(s, "|") {
		name := strings.TrimSpace(part)
		sym, ok := argNames[name]
		if !ok {
			names := make([]string, 0, len(argNames))
			for k := range argNames {
				names = append(names, k)
			}
			sort.Strings(names)
			if name == s {
				return 0, fmt.Errorf("argument %d of %s: %q is neither a number nor a name explain knows (%s)", index, syscall, s, strings.Join(names, ", "))
			}
			return 0, fmt.Errorf("argument %d of %s: %q: %q is not a name explain knows (%s)", index, syscall, s, name, strings.Join(names, ", "))
		}
		want, ok := sym.kind.at[syscall]
		switch {
		case !ok:
			return 0, fmt.Errorf("argument %d of %s: %s is %s, which %s does not take (it is %s)", index, syscall, name, sym.kind.what, syscall, sym.kind.places())
		case want != index:
			try := syscall + strings.Repeat(" 0", want) + " " + name
			return 0, fmt.Errorf("argument %d of %s: %s is %s, which is argument %d (try: %s)", index, syscall, name, sym.kind.what, want, try)
		}
		v |= sym.value
	}
	return v, nil
}

// places lists where k is taken: "argument 1 of ioctl".
func (k *argKind) places() string {
	calls := make([]string, 0, len(k.at))
	for c := range k.at {
		calls = append(calls, c)
	}
	sort.Strings(calls)
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = fmt.Sprintf("argument %d of %s", k.at[c], c)
	}
	return strings.Join(out, ", ")
}

// Constants x/sys/unix lacks (linux/personality.h).
const (
	perAddrNoRandomize = 0x0040000
	perReadImpliesExec = 0x0400000
)

// LintProfile checks one profile file as the sandbox would load it (strict
// decode, every check of LoadProfile), compiles it with libseccomp for the
// native architecture, and lists dangerous allowances as warnings.
func LintProfile(path string) LintReport {
	rep := LintReport{File: path, Warnings: []LintWarning{}}
	spec, cfg, err := seccomp.LoadProfileFile(path)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	prog, err := seccomp.CompileFilter(cfg)
	if err != nil {
		rep.Error = fmt.Sprintf("%s: libseccomp cannot compile it: %v", path, err)
		return rep
	}
	rep.BPFInstructions = len(prog)
	vm, err := bpf.NewVM(prog)
	if err != nil {
		rep.Error = fmt.Sprintf("%s: compiled filter: %v", path, err)
		return rep
	}
	arch, err := seccomp.NativeAuditArch()
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	allowed := map[string]bool{}
	for _, r := range spec.Syscalls {
		for _, n := range r.Names {
			switch {
			case !seccomp.SyscallNative(n):
				if !slices.Contains(rep.NotNative, n) {
					rep.NotNative = append(rep.NotNative, n)
				}
			case actionPermits(r.Action):
				allowed[n] = true
			}
		}
	}
	rep.Allowed = len(allowed)
	warn := func(name, rule, format string, a ...any) {
		rep.Warnings = append(rep.Warnings, LintWarning{Syscall: name, Rule: rule, Message: fmt.Sprintf(format, a...)})
	}

	names := make([]string, 0, len(dangerous))
	for n := range dangerous {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		for i, r := range spec.Syscalls {
			if !actionPermits(r.Action) || !slices.Contains(r.Names, name) {
				continue
			}
			rule := fmt.Sprintf("syscalls[%d]", i)
			if len(r.Args) == 0 {
				warn(name, rule, "%s allowed unconditionally: %s", name, dangerous[name])
			} else {
				warn(name, rule, "%s allowed when %s: %s", name, strings.Join(conditionStrings(r.Args), " && "), dangerous[name])
			}
		}
	}

	probe := func(name string, args ...uint64) (bool, error) {
		nr, err := libseccomp.GetSyscallFromName(name)
		if err != nil || nr < 0 {
			return false, nil // not a call of this architecture
		}
		ret, err := seccomp.RunFilter(vm, arch, int32(nr), args...)
		return seccomp.RetPermits(ret), err
	}
	var firstErr error
	must := func(ok bool, err error) bool {
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return ok
	}
	for _, call := range []string{"clone", "unshare"} {
		var got []string
		for _, ns := range namespaceFlags {
			if call == "clone" && ns.flag == unix.CLONE_NEWTIME {
				continue // 0x80 is in clone's exit-signal byte: only clone3 and unshare take it
			}
			if must(probe(call, ns.flag|uint64(unix.SIGCHLD))) {
				got = append(got, ns.name)
			}
		}
		if len(got) > 0 {
			warn(call, rulesFor(spec, call), "%s with namespace flags allowed (%s): new namespaces expose kernel code that is otherwise unreachable (user namespaces above all)", call, strings.Join(got, ", "))
		}
	}
	if must(probe("clone3")) {
		warn("clone3", rulesFor(spec, "clone3"), "clone3 allowed: its flags are in memory where seccomp cannot see them, so namespace flags cannot be refused; answer it with SCMP_ACT_ERRNO and errnoRet 38 (ENOSYS) so libc falls back to clone")
	} else if must(probe("clone", uint64(unix.SIGCHLD))) {
		nr, _ := libseccomp.GetSyscallFromName("clone3")
		if ret, err := seccomp.RunFilter(vm, arch, int32(nr)); err == nil && ret != seccomp.RetErrno|uint32(unix.ENOSYS) {
			warn("clone3", rulesFor(spec, "clone3"), "clone3 refused with %s, not ERRNO(ENOSYS): glibc 2.34+ does not fall back to clone then, so creating threads and processes fails", seccomp.RetString(ret))
		}
	}
	if unconditionalPermit(spec, "ioctl") {
		warn("ioctl", rulesFor(spec, "ioctl"), "ioctl allowed without argument filters: TIOCSTI (typing into a terminal), TIOCLINUX and every device ioctl are reachable")
	} else {
		for _, c := range []struct {
			name string
			cmd  uint64
		}{{"TIOCSTI", unix.TIOCSTI}, {"TIOCLINUX", unix.TIOCLINUX}, {"TIOCSTI with high bits set", 1<<32 | unix.TIOCSTI}} {
			if must(probe("ioctl", 0, c.cmd)) {
				warn("ioctl", rulesFor(spec, "ioctl"), "ioctl(%s) allowed by the argument filters: it types into the terminal (the kernel uses the low 32 bits of the request)", c.name)
			}
		}
	}
	if unconditionalPermit(spec, "personality") {
		warn("personality", rulesFor(spec, "personality"), "personality unrestricted: ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC switch off ASLR and NX for what the skill executes; allow only 0 and 0xffffffff (query)")
	} else {
		for _, p := range []struct {
			name string
			v    uint64
		}{{"ADDR_NO_RANDOMIZE", perAddrNoRandomize}, {"READ_IMPLIES_EXEC", perReadImpliesExec}} {
			if must(probe("personality", p.v)) {
				warn("personality", rulesFor(spec, "personality"), "personality(%s) allowed: it weakens ASLR or NX for what the skill executes", p.name)
			}
		}
	}
	if len(spec.Architectures) > 0 {
		warn("", "architectures", "architectures %v: the filter admits those ABIs' system calls too (and takes longer to build); leave it empty for the native architecture only", spec.Architectures)
	}
	if firstErr != nil {
		rep.Error = fmt.Sprintf("%s: running the compiled filter: %v", path, firstErr)
	}
	return rep
}

func actionPermits(a specs.LinuxSeccompAction) bool {
	return a == specs.ActAllow || a == specs.ActLog || a == specs.ActTrace
}

func unconditionalPermit(p *specs.LinuxSeccomp, name string) bool {
	for _, r := range p.Syscalls {
		if actionPermits(r.Action) && len(r.Args) == 0 && slices.Contains(r.Names, name) {
			return true
		}
	}
	return false
}

// rulesFor names the rules that list name: the first, and how many more.
func rulesFor(p *specs.LinuxSeccomp, name string) string {
	var idx []string
	for i, r := range p.Syscalls {
		if slices.Contains(r.Names, name) {
			idx = append(idx, fmt.Sprintf("syscalls[%d]", i))
		}
	}
	switch len(idx) {
	case 0:
		return "defaultAction"
	case 1:
		return idx[0]
	}
	return fmt.Sprintf("%s (+%d more)", idx[0], len(idx)-1)
}

// conditionStrings renders argument conditions the way an operator reads
// them: "arg1 & 0xffffffff == 0x5410".
func conditionStrings(args []specs.LinuxSeccompArg) []string {
	var out []string
	for _, a := range args {
		var s string
		switch a.Op {
		case specs.OpMaskedEqual:
			s = fmt.Sprintf("arg%d & %#x == %#x", a.Index, a.Value, a.ValueTwo)
		case specs.OpEqualTo:
			s = fmt.Sprintf("arg%d == %#x", a.Index, a.Value)
		case specs.OpNotEqual:
			s = fmt.Sprintf("arg%d != %#x", a.Index, a.Value)
		case specs.OpLessThan:
			s = fmt.Sprintf("arg%d < %#x", a.Index, a.Value)
		case specs.OpLessEqual:
			s = fmt.Sprintf("arg%d <= %#x", a.Index, a.Value)
		case specs.OpGreaterThan:
			s = fmt.Sprintf("arg%d > %#x", a.Index, a.Value)
		case specs.OpGreaterEqual:
			s = fmt.Sprintf("arg%d >= %#x", a.Index, a.Value)
		default:
			s = fmt.Sprintf("arg%d %s %#x", a.Index, a.Op, a.Value)
		}
		out = append(out, s)
	}
	return out
}

// actionString is an action with its errno: SCMP_ACT_ERRNO(ENOSYS).
func actionString(a specs.LinuxSeccompAction, ret *uint) string {
	switch {
	case ret != nil:
		return fmt.Sprintf("%s(%s)", a, seccomp.ErrnoString(uint32(*ret)))
	case a == specs.ActErrno:
		return fmt.Sprintf("%s(EPERM)", a)
	}
	return string(a)
}

// ExplainProfile says which rule of the profile at path decides syscall,
// and how. With args, it also runs the compiled filter on that call.
func ExplainProfile(path, syscall string, args []uint64) (Explanation, error) {
	spec, cfg, err := seccomp.LoadProfileFile(path)
	if err != nil {
		return Explanation{}, err
	}
	nr, err := libseccomp.GetSyscallFromName(syscall)
	if err != nil {
		return Explanation{}, fmt.Errorf("unknown syscall %q: libseccomp %s does not know it", syscall, libseccompVersion())
	}
	ex := Explanation{File: path, Syscall: syscall, Number: int(nr), Rules: []ExplainRule{},
		Default: actionString(spec.DefaultAction, spec.DefaultErrnoRet)}
	def := ex.Default
	hasUncond, hasCond := false, false
	for i, r := range spec.Syscalls {
		if !slices.Contains(r.Names, syscall) {
			continue
		}
		er := ExplainRule{Rule: fmt.Sprintf("syscalls[%d]", i), Action: actionString(r.Action, r.ErrnoRet), Conditions: conditionStrings(r.Args)}
		switch {
		case er.Action == def && len(r.Args) == 0:
			er.Ignored = "same as the default action (libcontainer skips it)"
		case er.Action == def:
			er.Ignored = "same as the default action"
		case len(r.Args) == 0:
			hasUncond = true
		default:
			hasCond = true
		}
		ex.Rules = append(ex.Rules, er)
	}
	switch {
	case hasUncond:
		ex.Decision = "unconditional"
	case hasCond:
		ex.Decision = "conditional"
		ex.Summary = summarizeRules(spec.Syscalls, syscall, def)
	case nr >= 0 && nr > maxNamedSyscall(spec):
		ex.Decision = "enosys"
	default:
		ex.Decision = "default"
	}
	if len(args) > 0 {
		if len(args) > 6 {
			return Explanation{}, fmt.Errorf("%d arguments: system calls have at most 6", len(args))
		}
		ex.Args = args
		switch {
		case nr < 0:
			ex.Verdict = "not a system call of this architecture"
		case ex.Decision == "enosys":
			ex.Verdict = "ERRNO(ENOSYS)"
		default:
			prog, err := seccomp.CompileFilter(cfg)
			if err != nil {
				return Explanation{}, fmt.Errorf("%s: compile: %w", path, err)
			}
			vm, err := bpf.NewVM(prog)
			if err != nil {
				return Explanation{}, err
			}
			arch, err := seccomp.NativeAuditArch()
			if err != nil {
				return Explanation{}, err
			}
			ret, err := seccomp.RunFilter(vm, arch, int32(nr), args...)
			if err != nil {
				return Explanation{}, err
			}
			ex.Verdict = seccomp.RetString(ret)
		}
	}
	return ex, nil
}

// maxNamedSyscall is the largest native number of a syscall the profile
// names: runc's stub answers ENOSYS above it.
func maxNamedSyscall(p *specs.LinuxSeccomp) libseccomp.ScmpSyscall {
	var max libseccomp.ScmpSyscall = -1
	for _, r := range p.Syscalls {
		for _, n := range r.Names {
			if nr, err := libseccomp.GetSyscallFromName(n); err == nil && nr > max {
				max = nr
			}
		}
	}
	return max
}

func libseccompVersion() string {
	maj, min, mic := libseccomp.GetLibraryVersion()
	return fmt.Sprintf("%d.%d.%d", maj, min, mic)
}

// effectiveRules lists, per syscall name, how the profile treats it apart
// from the default action: "ALLOW", "ALLOW if arg0 == 0x1", "ERRNO(ENOSYS)".
// Rules that repeat the default action are left out: they change nothing.
func effectiveRules(p *specs.LinuxSeccomp) map[string][]string {
	def := actionString(p.DefaultAction, p.DefaultErrnoRet)
	out := map[string][]string{}
	summarized := map[string]bool{}
	for _, r := range p.Syscalls {
		act := actionString(r.Action, r.ErrnoRet)
		if act == def {
			continue
		}
		s := strings.TrimPrefix(act, "SCMP_ACT_")
		if len(r.Args) > 0 {
			s += " if " + strings.Join(conditionStrings(r.Args), " && ")
		}
		for _, n := range r.Names {
			if summarized[n] {
				continue
			}
			if len(r.Args) > 0 {
				if sum := summarizeRules(p.Syscalls, n, def); sum != "" {
					out[n], summarized[n] = []string{sum}, true
					continue
				}
			}
			if !slices.Contains(out[n], s) {
				out[n] = append(out[n], s)
			}
		}
	}
	for n := range out {
		sort.Strings(out[n])
	}
	return out
}

// summarizeRules is the one-line summary of the rules naming syscall that
// decide other than the default, when they are all conditional, with one
// action, and masked tests of one argument (summarizeMasked); "" otherwise.
func summarizeRules(rules []specs.LinuxSyscall, syscall, def string) string {
	var conds []specs.LinuxSyscall
	action := ""
	for _, r := range rules {
		if !slices.Contains(r.Names, syscall) {
			continue
		}
		act := actionString(r.Action, r.ErrnoRet)
		if act == def {
			continue
		}
		if len(r.Args) == 0 || (action != "" && act != action) {
			return ""
		}
		action = act
		conds = append(conds, r)
	}
	index, except, ok := summarizeMasked(conds)
	if !ok {
		return ""
	}
	return maskedSummary(strings.TrimPrefix(action, "SCMP_ACT_"), syscall, index, except)
}

// DiffProfiles compares two profiles by what they decide: syscalls added
// (a rule in B, none in A), removed, or treated differently, and changes to
// the default action, architectures and flags.
func DiffProfiles(a, b string) (ProfileDiff, error) {
	pa, _, err := seccomp.LoadProfileFile(a)
	if err != nil {
		return ProfileDiff{}, err
	}
	pb, _, err := seccomp.LoadProfileFile(b)
	if err != nil {
		return ProfileDiff{}, err
	}
	d := ProfileDiff{A: a, B: b, Syscalls: []DiffEntry{}}
	if da, db := actionString(pa.DefaultAction, pa.DefaultErrnoRet), actionString(pb.DefaultAction, pb.DefaultErrnoRet); da != db {
		d.Settings = append(d.Settings, fmt.Sprintf("defaultAction: %s → %s", da, db))
	}
	if !slices.Equal(pa.Architectures, pb.Architectures) {
		d.Settings = append(d.Settings, fmt.Sprintf("architectures: %v → %v", pa.Architectures, pb.Architectures))
	}
	fa, fb := pa.Flags, pb.Flags
	if !slices.Equal(fa, fb) || (fa == nil) != (fb == nil) {
		d.Settings = append(d.Settings, fmt.Sprintf("flags: %s → %s", flagsString(fa), flagsString(fb)))
	}
	ra, rb := effectiveRules(pa), effectiveRules(pb)
	names := map[string]bool{}
	for n := range ra {
		names[n] = true
	}
	for n := range rb {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		if !seccomp.SyscallNative(n) {
			d.Ignored = append(d.Ignored, n)
			continue
		}
		oa, ob := ra[n], rb[n]
		switch {
		case oa == nil:
			d.Syscalls = append(d.Syscalls, DiffEntry{Syscall: n, Change: "added", New: ob})
		case ob == nil:
			d.Syscalls = append(d.Syscalls, DiffEntry{Syscall: n, Change: "removed", Old: oa})
		case !slices.Equal(oa, ob):
			d.Syscalls = append(d.Syscalls, DiffEntry{Syscall: n, Change: "changed", Old: oa, New: ob})
		}
	}
	return d, nil
}

func flagsString(f []specs.LinuxSeccompFlag) string {
	if f == nil {
		return "absent (runc adds SECCOMP_FILTER_FLAG_SPEC_ALLOW)"
	}
	return fmt.Sprint(f)
}

// maxDockerProfile bounds what import reads (Docker's default is ~20 KiB).
const maxDockerProfile = 4 << 20

// ImportDockerProfile converts a Docker-format profile (archMap, includes,
// excludes) into our OCI format with moby's own converter, resolved for
// this host: the native architecture only, a process with no capabilities
// (so CAP_SYS_ADMIN-gated rules like mount are left out, as our sandbox
// has none), and this kernel's version for minKernel rules. Names the local
// libseccomp cannot resolve are dropped and listed. The result passes
// LoadProfile's checks or an error says why not.
func ImportDockerProfile(data []byte) (ImportResult, error) {
	if len(data) > maxDockerProfile {
		return ImportResult{}, fmt.Errorf("%w: %d bytes, more than the %d allowed", seccomp.ErrProfile, len(data), maxDockerProfile)
	}
	// moby's LoadProfile panics on nil capabilities (DESIGN.md).
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{},
	}}}
	p, err := mobyseccomp.LoadProfile(string(data), rs)
	if err != nil {
		return ImportResult{}, fmt.Errorf("%w: %w", seccomp.ErrProfile, err)
	}
	if p == nil {
		return ImportResult{}, fmt.Errorf("%w: no defaultAction and no syscalls: the profile turns seccomp off", seccomp.ErrProfile)
	}
	res := ImportResult{Dropped: []string{}, Notes: []string{}}
	if len(p.Architectures) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("architectures %v dropped: the filter is built for the native architecture only, other ABIs are killed", p.Architectures))
		p.Architectures = nil
	}
	if p.Flags == nil {
		p.Flags = []specs.LinuxSeccompFlag{}
		res.Notes = append(res.Notes, `"flags": [] written: without it runc adds SECCOMP_FILTER_FLAG_SPEC_ALLOW`)
	}
	var rules []specs.LinuxSyscall
	var foreign []string
	for _, r := range p.Syscalls {
		var keep []string
		for _, n := range r.Names {
			switch {
			case seccomp.SyscallNative(n):
				keep = append(keep, n)
			case seccomp.SyscallKnown(n):
				if !slices.Contains(foreign, n) {
					foreign = append(foreign, n)
				}
			case !slices.Contains(res.Dropped, n):
				res.Dropped = append(res.Dropped, n)
			}
		}
		if len(keep) == 0 {
			continue
		}
		r.Names = keep
		rules = append(rules, r)
	}
	p.Syscalls = rules
	if len(res.Dropped) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d names unknown to libseccomp %s dropped: %s", len(res.Dropped), libseccompVersion(), strings.Join(res.Dropped, ", ")))
	}
	if len(foreign) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d names that are not %s syscalls (another architecture's) dropped: %s", len(foreign), seccomp.NativeArchName(), strings.Join(foreign, ", ")))
		res.Dropped = append(res.Dropped, foreign...)
	}
	out, err := FormatProfile(p)
	if err != nil {
		return ImportResult{}, err
	}
	if _, _, err := seccomp.CheckProfileBytes("imported profile", out); err != nil {
		return ImportResult{}, err
	}
	res.Profile = out
	return res, nil
}

// FormatProfile writes a profile as readable JSON in our format: one rule
// per line, long name lists wrapped, "flags" always present.
func FormatProfile(p *specs.LinuxSeccomp) ([]byte, error) {
	var b bytes.Buffer
	enc := func(v any) string {
		j, err := json.Marshal(v)
		if err != nil {
			panic(err) // plain data; cannot fail
		}
		return string(j)
	}
	b.WriteString("{\n")
	fmt.Fprintf(&b, "  \"defaultAction\": %s,\n", enc(p.DefaultAction))
	if p.DefaultErrnoRet != nil {
		fmt.Fprintf(&b, "  \"defaultErrnoRet\": %d,\n", *p.DefaultErrnoRet)
	}
	if len(p.Architectures) > 0 {
		fmt.Fprintf(&b, "  \"architectures\": %s,\n", enc(p.Architectures))
	}
	flags := p.Flags
	if flags == nil {
		flags = []specs.LinuxSeccompFlag{}
	}
	fmt.Fprintf(&b, "  \"flags\": %s,\n", enc(flags))
	if p.ListenerPath != "" || p.ListenerMetadata != "" {
		return nil, errors.New("seccomp agents (listenerPath) are not supported")
	}
	b.WriteString("  \"syscalls\": [")
	for i, r := range p.Syscalls {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n    ")
		rest := struct {
			Action   specs.LinuxSeccompAction `json:"action"`
			ErrnoRet *uint                    `json:"errnoRet,omitempty"`
			Args     []specs.LinuxSeccompArg  `json:"args,omitempty"`
		}{r.Action, r.ErrnoRet, r.Args}
		// Actions, errnos and numbers hold no '":' or ',"' of their own.
		tail := strings.TrimPrefix(enc(rest), "{")
		tail = strings.ReplaceAll(strings.ReplaceAll(tail, `":`, `": `), `,"`, `, "`)
		if len(r.Names) <= 6 {
			fmt.Fprintf(&b, "{\"names\": %s, %s", enc(r.Names), tail)
			continue
		}
		b.WriteString("{\n      \"names\": [\n        ")
		col := 8
		for j, n := range r.Names {
			item := enc(n)
			if j < len(r.Names)-1 {
				item += ","
			}
			if col+len(item)+1 > 100 && col > 8 {
				b.WriteString("\n        ")
				col = 8
			} else if j > 0 {
				b.WriteString(" ")
				col++
			}
			b.WriteString(item)
			col += len(item)
		}
		fmt.Fprintf(&b, "\n      ],\n      %s", strings.TrimSuffix(tail, "}"))
		b.WriteString("\n    }")
	}
	b.WriteString("\n  ]\n}\n")
	return b.Bytes(), nil
}

// RecordProfile writes the minimal profile for a skill that used the
// syscalls in used under the base profile at basePath: the base's allow
// rules cut down to the names used (conditional rules kept whole, so clone
// still refuses namespace flags and ioctl still refuses TIOCSTI), every
// refusal rule of the base kept (clone3 → ENOSYS), the base's default
// action, architectures and flags, plus recordBaseline and
// recordUnnotified (as far as the base allows them).
func RecordProfile(basePath string, used []string) ([]byte, error) {
	base, _, err := seccomp.LoadProfileFile(basePath)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range used {
		want[n] = true
	}
	for _, n := range seccomp.NotNotified() {
		want[n] = true
	}
	out := &specs.LinuxSeccomp{DefaultAction: base.DefaultAction, DefaultErrnoRet: base.DefaultErrnoRet,
		Architectures: base.Architectures, Flags: base.Flags}
	var uncond []string
	var rest []specs.LinuxSyscall
	for _, r := range base.Syscalls {
		if r.Action != specs.ActAllow {
			rest = append(rest, r)
			continue
		}
		var keep []string
		for _, n := range r.Names {
			if want[n] && !slices.Contains(keep, n) {
				keep = append(keep, n)
			}
		}
		if len(keep) == 0 {
			continue
		}
		if len(r.Args) == 0 {
			for _, n := range keep {
				if !slices.Contains(uncond, n) {
					uncond = append(uncond, n)
				}
			}
			continue
		}
		r.Names = keep
		rest = append(rest, r)
	}
	sort.Strings(uncond)
	if len(uncond) > 0 {
		out.Syscalls = append(out.Syscalls, specs.LinuxSyscall{Names: uncond, Action: specs.ActAllow})
	}
	out.Syscalls = append(out.Syscalls, rest...)
	b, err := FormatProfile(out)
	if err != nil {
		return nil, err
	}
	if _, _, err := seccomp.CheckProfileBytes("recorded profile", b); err != nil {
		return nil, err
	}
	return b, nil
}
