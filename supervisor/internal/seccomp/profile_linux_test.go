package seccomp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// profilesDir is the repository's seccomp-profiles/ directory.
const profilesDir = "../../../seccomp-profiles"

// Environment of the re-executed test binary (TestSeccompHelperProcess).
const (
	envChild    = "CYBEROS_SECCOMP_CHILD"    // "try" or "exec"
	envProfiles = "CYBEROS_SECCOMP_PROFILES" // profiles directory
	envArgv     = "CYBEROS_SECCOMP_ARGV"     // JSON argv for "exec"
)

// sandboxEnv is the environment programs get inside the sandbox (DESIGN.md
// "Skill process"), minus the broker variables.
var sandboxEnv = []string{"PATH=" + sandboxPath, "HOME=/tmp", "LANG=C.UTF-8"}

const sandboxPath = "/usr/local/bin:/usr/bin:/bin"

// lookSandboxPath finds prog the way a shell in the sandbox would, not with
// the test's own PATH (which may hold version-manager shims).
func lookSandboxPath(prog string) (string, error) {
	if strings.Contains(prog, "/") {
		return prog, nil
	}
	for _, dir := range filepath.SplitList(sandboxPath) {
		path := filepath.Join(dir, prog)
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s: not found in %s", prog, sandboxPath)
}

func TestSeccompCompiledIn(t *testing.T) {
	if !CompiledIn() {
		t.Fatalf("seccomp is not compiled in: %v", ErrNotCompiled)
	}
	if maj, minor, _ := runcseccomp.Version(); maj < 2 || maj == 2 && minor < 5 {
		t.Errorf("libseccomp %d.%d: want 2.5 or newer", maj, minor)
	}
}

// ---- LoadProfile: refusals ----

const okProfile = `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1, "flags": [],
 "syscalls": [{"names": ["read", "write", "arch_prctl"], "action": "SCMP_ACT_ALLOW"},
  {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}]}`

func writeProfile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name+".json")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadProfileAccepts(t *testing.T) {
	dir := t.TempDir()
	writeProfile(t, dir, "ok", okProfile)
	cfg, err := LoadProfile(dir, "ok")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultAction != configs.Errno || cfg.DefaultErrnoRet == nil || *cfg.DefaultErrnoRet != 1 {
		t.Errorf("default action %v errno %v, want Errno 1", cfg.DefaultAction, cfg.DefaultErrnoRet)
	}
	if len(cfg.Architectures) != 0 || len(cfg.Flags) != 0 {
		t.Errorf("architectures %v flags %v, want none", cfg.Architectures, cfg.Flags)
	}
	if len(cfg.Syscalls) != 4 || cfg.Syscalls[3].Name != "clone" || len(cfg.Syscalls[3].Args) != 1 ||
		cfg.Syscalls[3].Args[0].Op != configs.MaskEqualTo || cfg.Syscalls[3].Args[0].Value != 0x7E020000 {
		t.Errorf("rules not converted as written: %+v", cfg.Syscalls)
	}
}

// An unconditional rule that repeats the default action does not shadow
// conditional rules: libcontainer skips it.
func TestLoadProfileAcceptsDefaultPlusConditional(t *testing.T) {
	dir := t.TempDir()
	writeProfile(t, dir, "p", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
		{"names": ["personality"], "action": "SCMP_ACT_ERRNO"},
		{"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]}]}`)
	if _, err := LoadProfile(dir, "p"); err != nil {
		t.Fatal(err)
	}
}

func TestLoadProfileRefuses(t *testing.T) {
	big := `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}` +
		strings.Repeat(" ", maxProfileSize)
	for _, tc := range []struct {
		name, body string
		want       []string // substrings of the error
	}{
		{"unknown-field", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "x"}]}`,
			[]string{"syscalls[0].comment", "unknown field"}},
		{"wrong-case", `{"DefaultAction": "SCMP_ACT_ALLOW"}`,
			[]string{"DefaultAction", "unknown field", `did you mean "defaultAction"`}},
		{"duplicate-key", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO", "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"syscalls[0].action", "duplicate key"}},
		{"docker-format", `{"defaultAction": "SCMP_ACT_ERRNO", "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
			"syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}`,
			[]string{"Docker-format", "archMap", "cyberos seccomp import"}},
		{"docker-includes", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}}]}`,
			[]string{"syscalls[0].includes", "Docker-format", "cyberos seccomp import"}},
		{"allow-default", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]}`,
			[]string{"defaultAction", "SCMP_ACT_ALLOW", "deny by default"}},
		{"log-default", `{"defaultAction": "SCMP_ACT_LOG"}`,
			[]string{"defaultAction", "SCMP_ACT_LOG", "deny by default"}},
		{"no-default", `{"syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"defaultAction", "missing"}},
		{"unknown-syscall", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "mout"], "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"syscalls[0].names[1]", `unknown syscall "mout"`}},
		{"unknown-action", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOWED"}]}`,
			[]string{"syscalls[0].action", "unknown action"}},
		{"notify", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_NOTIFY"}]}`,
			[]string{"syscalls[0].action", "agent"}},
		{"listener", `{"defaultAction": "SCMP_ACT_ERRNO", "listenerPath": "/run/agent.sock"}`,
			[]string{"listenerPath", "agents are not supported"}},
		{"same-arg-twice", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW",
			"args": [{"index": 1, "value": 21522, "op": "SCMP_CMP_NE"}, {"index": 1, "value": 21532, "op": "SCMP_CMP_NE"}]}]}`,
			[]string{"syscalls[0].args[1].index", "ORs them"}},
		{"shadowed-conditional", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW"},
			{"names": ["ioctl"], "action": "SCMP_ACT_KILL", "args": [{"index": 1, "value": 21522, "op": "SCMP_CMP_EQ"}]}]}`,
			[]string{"syscalls[1]", `conditional rule for "ioctl" is ignored`, "syscalls[0]"}},
		{"listed-twice", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "mount"], "action": "SCMP_ACT_KILL"},
			{"names": ["mount"], "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"syscalls[1]", `"mount" is also listed in syscalls[0]`}},
		{"errno-on-allow", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "errnoRet": 1}]}`,
			[]string{"syscalls[0].errnoRet", "only meaningful"}},
		{"bad-arg-index", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 6, "value": 0, "op": "SCMP_CMP_EQ"}]}]}`,
			[]string{"syscalls[0].args[0].index", "0..5"}},
		{"bad-arch", `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_VAX"]}`,
			[]string{"architectures[0]", "SCMP_ARCH_VAX"}},
		{"wrong-type", `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": "1"}`,
			[]string{"defaultErrnoRet"}},
		{"object-for-array", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": {"names": ["read"], "action": "SCMP_ACT_ALLOW"}}`,
			[]string{"syscalls", "cannot unmarshal object"}},
		{"trailing-data", okProfile + `{"defaultAction": "SCMP_ACT_ALLOW"}`,
			[]string{"trailing data"}},
		{"not-json", `defaultAction: SCMP_ACT_ERRNO`,
			[]string{"invalid character"}},
		{"too-large", big,
			[]string{"more than the 1048576"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeProfile(t, dir, tc.name, tc.body)
			_, err := LoadProfile(dir, tc.name)
			assertProfileErr(t, err, append(tc.want, path)...)
		})
	}
}

func TestLoadProfileRefusesFiles(t *testing.T) {
	t.Run("bad-name", func(t *testing.T) {
		dir := t.TempDir()
		writeProfile(t, dir, "x", okProfile)
		for _, name := range []string{"../x", "", "X", "x.json", "/etc/passwd", "-x", strings.Repeat("a", 65)} {
			_, err := LoadProfile(filepath.Join(dir, "sub"), name)
			assertProfileErr(t, err, "profile name", fmt.Sprintf("%q", name))
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := writeProfile(t, dir, "real", okProfile)
		if err := os.Symlink(target, filepath.Join(dir, "link.json")); err != nil {
			t.Fatal(err)
		}
		_, err := LoadProfile(dir, "link")
		assertProfileErr(t, err, "link.json", "symlink")
	})
	t.Run("missing", func(t *testing.T) {
		dir := t.TempDir()
		_, err := LoadProfile(dir, "absent")
		assertProfileErr(t, err, filepath.Join(dir, "absent.json"), "no such file")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("errors.Is(%v, fs.ErrNotExist) = false", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "d.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := LoadProfile(dir, "d")
		assertProfileErr(t, err, "d.json", "not a regular file")
	})
	t.Run("fifo", func(t *testing.T) {
		dir := t.TempDir()
		if err := unix.Mkfifo(filepath.Join(dir, "f.json"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadProfile(dir, "f") // must not block
		assertProfileErr(t, err, "f.json", "not a regular file")
	})
	t.Run("world-writable", func(t *testing.T) {
		dir := t.TempDir()
		path := writeProfile(t, dir, "ww", okProfile)
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := LoadProfile(dir, "ww")
		assertProfileErr(t, err, "ww.json", "world-writable")
	})
}

func assertProfileErr(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("LoadProfile succeeded, want an error containing %q", want)
	}
	if !errors.Is(err, ErrProfile) {
		t.Errorf("errors.Is(%v, ErrProfile) = false", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

// ---- every profile in seccomp-profiles/ ----

// mustDeny may never be allowed unconditionally by any profile we ship.
var mustDeny = []string{
	"mount", "umount2", "pivot_root", "chroot", "ptrace", "bpf", "keyctl", "add_key", "request_key",
	"unshare", "setns", "kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "process_vm_readv", "process_vm_writev", "open_by_handle_at", "perf_event_open",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "fsopen", "fsmount", "move_mount", "open_tree", "fspick",
	"mount_setattr", "reboot", "swapon", "swapoff",
	// AIO contexts count against fs.aio-max-nr, one counter for the whole
	// host (docs/kernel-counters.md).
	"io_setup", "io_submit", "io_getevents", "io_pgetevents", "io_cancel", "io_destroy",
}

func TestProfileInvariants(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(profilesDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no profiles in %s", profilesDir)
	}
	names := map[string]bool{}
	for _, f := range files {
		names[strings.TrimSuffix(filepath.Base(f), ".json")] = true
	}
	if !names["default"] {
		t.Errorf("%s has no default.json (the daemon's default profile)", profilesDir)
	}
	for name := range names {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadProfile(profilesDir, name)
			if err != nil {
				t.Fatal(err)
			}
			switch cfg.DefaultAction {
			case configs.Allow, configs.Log, configs.Trace, configs.Notify:
				t.Fatalf("default action %s lets unknown syscalls through", actionName(cfg.DefaultAction))
			}
			for _, call := range cfg.Syscalls {
				if contains(mustDeny, call.Name) && len(call.Args) == 0 && permits(call.Action) {
					t.Errorf("%s is allowed unconditionally (%s)", call.Name, actionName(call.Action))
				}
			}
			// The same, on the compiled filter: neither zero nor all-ones
			// arguments get any of them through.
			prog := compileFilter(t, cfg)
			for _, name := range mustDeny {
				nr, err := libseccomp.GetSyscallFromName(name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, arg := range []uint64{0, ^uint64(0)} {
					if ret := evalFilter(t, prog, testAuditArch(t), int32(nr), arg, arg, arg, arg, arg, arg); !denies(ret) {
						t.Errorf("%s(%#x, …) → %s", name, arg, retString(ret))
					}
				}
			}
		})
	}
}

func permits(a configs.Action) bool {
	return a == configs.Allow || a == configs.Log || a == configs.Trace || a == configs.Notify
}

func actionName(a configs.Action) string {
	for _, name := range runcseccomp.KnownActions() {
		if act, _ := runcseccomp.ConvertStringToAction(name); act == a {
			return name
		}
	}
	return fmt.Sprintf("action %d", a)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- default.json, compiled and run in a BPF interpreter ----

func TestSeccompDefaultProfileIoctl(t *testing.T) {
	prog := compileFilter(t, loadDefault(t))
	ioctl := sysno(t, "ioctl")
	arch := testAuditArch(t)
	// The kernel truncates the request to 32 bits, so the filter must look
	// at the low 32 bits only: 0x1_00005412 is TIOCSTI too.
	for _, high := range []uint64{0, 1, 0xFFFFFFFF} {
		for low := uint64(0); low <= 0xFFFF; low++ {
			cmd := high<<32 | low
			want := low != unix.TIOCSTI && low != unix.TIOCLINUX
			if got := evalFilter(t, prog, arch, ioctl, 0, cmd) == retAllow; got != want {
				t.Fatalf("ioctl(0, %#x): allowed=%v, want %v", cmd, got, want)
			}
		}
	}
	for _, cmd := range []uint64{0xC0045401, 0xFFFFFFFFC0045401, 0x80045430, 0x40045431} {
		if ret := evalFilter(t, prog, arch, ioctl, 0, cmd); ret != retAllow {
			t.Errorf("ioctl(0, %#x) → %s, want allowed", cmd, retString(ret))
		}
	}
	for _, cmd := range []uint64{unix.TIOCSTI, unix.TIOCLINUX, 1<<32 | unix.TIOCSTI, 0xFFFFFFFF<<32 | unix.TIOCLINUX} {
		if ret := evalFilter(t, prog, arch, ioctl, 0, cmd); ret != retErrno|uint32(unix.EPERM) {
			t.Errorf("ioctl(0, %#x) → %s, want EPERM", cmd, retString(ret))
		}
	}
}

func TestSeccompDefaultProfileArgFilters(t *testing.T) {
	prog := compileFilter(t, loadDefault(t))
	arch := testAuditArch(t)
	clone, clone3 := sysno(t, "clone"), sysno(t, "clone3")
	eperm := retErrno | uint32(unix.EPERM)

	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
		unix.CLONE_SYSVSEM | unix.CLONE_THREAD | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	for _, flags := range []uint64{
		uint64(unix.SIGCHLD), // fork
		threadFlags,          // pthread_create, Go's newosproc
		unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | uint64(unix.SIGCHLD), // Go's os/exec
	} {
		if ret := evalFilter(t, prog, arch, clone, flags); ret != retAllow {
			t.Errorf("clone(%#x) → %s, want allowed", flags, retString(ret))
		}
	}
	for _, ns := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
		unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP} {
		for _, flags := range []uint64{ns | uint64(unix.SIGCHLD), ns | threadFlags} {
			if ret := evalFilter(t, prog, arch, clone, flags); ret != eperm {
				t.Errorf("clone(%#x) → %s, want EPERM", flags, retString(ret))
			}
		}
	}
	if ret := evalFilter(t, prog, arch, clone3); ret != retErrno|uint32(unix.ENOSYS) {
		t.Errorf("clone3 → %s, want ENOSYS so libc falls back to clone", retString(ret))
	}

	personality := sysno(t, "personality")
	for arg, want := range map[uint64]uint32{0: retAllow, 0xFFFFFFFF: retAllow, addrNoRandomize: eperm,
		0x0008 /* UNAME26 */ : eperm, 0x0800000 /* PER_LINUX32 */ : eperm, 1 << 32: eperm} {
		if ret := evalFilter(t, prog, arch, personality, arg); ret != want {
			t.Errorf("personality(%#x) → %s, want %s", arg, retString(ret), retString(want))
		}
	}

	socket := sysno(t, "socket")
	for family, want := range map[uint64]uint32{unix.AF_UNIX: retAllow, unix.AF_INET: retAllow, unix.AF_INET6: retAllow,
		unix.AF_NETLINK: retAllow, unix.AF_VSOCK: eperm, 1<<32 | unix.AF_VSOCK: eperm, 1<<32 | unix.AF_INET: eperm,
		unix.AF_PACKET: eperm, unix.AF_ALG: eperm, unix.AF_BLUETOOTH: eperm} {
		if ret := evalFilter(t, prog, arch, socket, family, unix.SOCK_STREAM); ret != want {
			t.Errorf("socket(%#x) → %s, want %s", family, retString(ret), retString(want))
		}
	}
}

// TestSeccompForeignArch: with no "architectures" the filter knows only the
// native ABI; everything else is killed. The real-kernel half runs an x32
// system call (x86_64 only); i386 (int 0x80) is checked in the interpreter
// because kernels without IA32 emulation fault before seccomp sees it.
func TestSeccompForeignArch(t *testing.T) {
	cfg := loadDefault(t)
	if len(cfg.Architectures) != 0 {
		t.Fatalf("default.json lists architectures %v; it must compile for the native one only", cfg.Architectures)
	}
	prog := compileFilter(t, cfg)
	native := testAuditArch(t)
	getpid := sysno(t, "getpid")
	if ret := evalFilter(t, prog, native, getpid); ret != retAllow {
		t.Fatalf("native getpid → %s", retString(ret))
	}
	for _, arch := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM} {
		if arch == native {
			continue
		}
		for _, nr := range []int32{0, 1, 20, 39, 172} { // getpid on i386 (20), arm (20), arm64 (172)
			if ret := evalFilter(t, prog, arch, nr); ret != retKillThread {
				t.Errorf("arch %#x syscall %d → %s, want kill", arch, nr, retString(ret))
			}
		}
	}
	if runtime.GOARCH != "amd64" {
		return
	}
	const x32Getpid = 0x40000000 | 39
	if ret := evalFilter(t, prog, native, x32Getpid); ret != retKillThread {
		t.Errorf("x32 getpid → %s, want kill", retString(ret))
	}
	script := fmt.Sprintf("import ctypes; ctypes.CDLL(None).syscall(%d); print('survived')", x32Getpid)
	argv := []string{"/usr/bin/python3", "-c", script}
	if _, err := os.Stat(argv[0]); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("real-kernel x32 check needs %s (scripts/install-deps.sh installs it): %v", argv[0], err)
		}
		t.Skipf("real-kernel x32 check needs %s: %v", argv[0], err)
	}
	out, err := runFiltered(t, argv)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSYS {
		t.Fatalf("x32 system call under the filter: %v, want death by SIGSYS; output:\n%s", err, out)
	}
	// Unfiltered, the same program survives (ENOSYS or a pid).
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil || !bytes.Contains(out, []byte("survived")) {
		t.Errorf("control run without the filter: %v\n%s", err, out)
	}
}

// ---- real kernel: the filter installed by libcontainer ----

// tryCall is one system call the child tries before and after installing
// default.json. Arguments are harmless: each call fails early (EFAULT,
// EINVAL, EBADF…) or is a no-op when the filter lets it through, even as root.
type tryCall struct {
	label string
	name  string  // for libseccomp's name → number
	nr    uintptr // when name is empty
	args  [6]uintptr
	want  string // errno name after the filter; "allowed" = same result as before
}

func tryCalls(devNull uintptr) []tryCall {
	const sigHand = unix.CLONE_SIGHAND // without CLONE_VM: EINVAL, so nothing is ever cloned
	calls := []tryCall{
		{label: "mount", name: "mount", want: "EPERM"},
		{label: "umount2", name: "umount2", want: "EPERM"},
		{label: "pivot_root", name: "pivot_root", want: "EPERM"},
		{label: "chroot", name: "chroot", want: "EPERM"},
		{label: "unshare(0)", name: "unshare", want: "EPERM"},
		{label: "setns", name: "setns", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "ptrace(PTRACE_CONT, 0)", name: "ptrace", args: [6]uintptr{unix.PTRACE_CONT}, want: "EPERM"},
		{label: "process_vm_readv", name: "process_vm_readv", args: [6]uintptr{uintptr(os.Getpid()), 0, 0, 0, 0, 1}, want: "EPERM"},
		{label: "process_vm_writev", name: "process_vm_writev", args: [6]uintptr{uintptr(os.Getpid()), 0, 0, 0, 0, 1}, want: "EPERM"},
		{label: "keyctl", name: "keyctl", args: [6]uintptr{9999}, want: "EPERM"},
		{label: "add_key", name: "add_key", want: "EPERM"},
		{label: "request_key", name: "request_key", want: "EPERM"},
		{label: "bpf", name: "bpf", args: [6]uintptr{9999}, want: "EPERM"},
		{label: "perf_event_open", name: "perf_event_open", args: [6]uintptr{0, 0, ^uintptr(0), ^uintptr(0)}, want: "EPERM"},
		{label: "io_uring_setup", name: "io_uring_setup", want: "EPERM"},
		{label: "io_uring_enter", name: "io_uring_enter", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "io_uring_register", name: "io_uring_register", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "userfaultfd", name: "userfaultfd", args: [6]uintptr{0xFFFF}, want: "EPERM"},
		{label: "kexec_load", name: "kexec_load", args: [6]uintptr{0, 0, 0, 0xFFFF0000}, want: "EPERM"},
		{label: "kexec_file_load", name: "kexec_file_load", args: [6]uintptr{^uintptr(0), ^uintptr(0), 0, 0, 0x80000000}, want: "EPERM"},
		{label: "init_module", name: "init_module", want: "EPERM"},
		{label: "finit_module", name: "finit_module", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "delete_module", name: "delete_module", want: "EPERM"},
		{label: "open_by_handle_at", name: "open_by_handle_at", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "name_to_handle_at", name: "name_to_handle_at", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "swapon", name: "swapon", want: "EPERM"},
		{label: "swapoff", name: "swapoff", want: "EPERM"},
		{label: "reboot", name: "reboot", want: "EPERM"},
		{label: "acct", name: "acct", args: [6]uintptr{1}, want: "EPERM"},
		{label: "quotactl", name: "quotactl", want: "EPERM"},
		{label: "settimeofday(NULL, NULL)", name: "settimeofday", want: "EPERM"},
		{label: "clock_settime", name: "clock_settime", want: "EPERM"},
		{label: "clock_adjtime", name: "clock_adjtime", want: "EPERM"},
		{label: "adjtimex", name: "adjtimex", want: "EPERM"},
		{label: "fsopen", name: "fsopen", want: "EPERM"},
		{label: "fsmount", name: "fsmount", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "move_mount", name: "move_mount", args: [6]uintptr{^uintptr(0), 0, ^uintptr(0)}, want: "EPERM"},
		{label: "open_tree", name: "open_tree", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "fsconfig", name: "fsconfig", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "fspick", name: "fspick", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "mount_setattr", name: "mount_setattr", args: [6]uintptr{^uintptr(0)}, want: "EPERM"},
		{label: "personality(ADDR_NO_RANDOMIZE)", name: "personality", args: [6]uintptr{addrNoRandomize}, want: "EPERM"},
		{label: "clone3", name: "clone3", want: "ENOSYS"},
		{label: "ioctl(TIOCSTI)", name: "ioctl", args: [6]uintptr{devNull, unix.TIOCSTI}, want: "EPERM"},
		{label: "ioctl(TIOCLINUX)", name: "ioctl", args: [6]uintptr{devNull, unix.TIOCLINUX}, want: "EPERM"},
		{label: "socket(AF_VSOCK)", name: "socket", args: [6]uintptr{unix.AF_VSOCK, unix.SOCK_STREAM}, want: "EPERM"},

		// Newer than anything default.json names (map_shadow_stack, 453), so
		// runc's stub answers ENOSYS; the same number on x86_64 and arm64.
		{label: "futex_wake (454)", nr: 454, want: "ENOSYS"},

		{label: "getpid", name: "getpid", want: "allowed"},
		{label: "ioctl(TCGETS)", name: "ioctl", args: [6]uintptr{devNull, unix.TCGETS}, want: "allowed"},
		{label: "ioctl(FIOCLEX)", name: "ioctl", args: [6]uintptr{devNull, fioclex}, want: "allowed"},
		{label: "personality(query)", name: "personality", args: [6]uintptr{0xFFFFFFFF}, want: "allowed"},
		{label: "landlock_create_ruleset(VERSION)", name: "landlock_create_ruleset", args: [6]uintptr{0, 0, 1}, want: "allowed"},
		{label: "socket(AF_UNIX)", name: "socket", args: [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, want: "allowed"},
		{label: "pidfd_open(self)", name: "pidfd_open", args: [6]uintptr{uintptr(os.Getpid())}, want: "allowed"},
	}
	if runtime.GOARCH == "amd64" {
		// 64-bit truncation: the kernel sees TIOCSTI.
		calls = append(calls, tryCall{label: "ioctl(1<<32|TIOCSTI)", name: "ioctl", args: [6]uintptr{devNull, 1<<32 | unix.TIOCSTI}, want: "EPERM"})
	}
	for _, ns := range []struct {
		name string
		flag uintptr
	}{{"NEWNS", unix.CLONE_NEWNS}, {"NEWUTS", unix.CLONE_NEWUTS}, {"NEWIPC", unix.CLONE_NEWIPC},
		{"NEWUSER", unix.CLONE_NEWUSER}, {"NEWPID", unix.CLONE_NEWPID}, {"NEWNET", unix.CLONE_NEWNET},
		{"NEWCGROUP", unix.CLONE_NEWCGROUP}} {
		calls = append(calls, tryCall{label: "clone(CLONE_" + ns.name + ")", name: "clone", args: [6]uintptr{ns.flag | sigHand}, want: "EPERM"})
	}
	return calls
}

// tryResult is one line the "try" child prints.
type tryResult struct {
	Label  string `json:"label"`
	Want   string `json:"want"`
	Before string `json:"before"`
	After  string `json:"after"`
}

const tryPrefix = "SECCOMP-TRY "

func TestSeccompTrySyscalls(t *testing.T) {
	out, err := runChild(t, "try", nil)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var results []tryResult
	var installTime, otherThread string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "SECCOMP-INSTALL "); ok {
			installTime = s
		}
		if s, ok := strings.CutPrefix(line, "SECCOMP-OTHER-THREAD "); ok {
			otherThread = s
		}
		s, ok := strings.CutPrefix(line, tryPrefix)
		if !ok {
			continue
		}
		var r tryResult
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		t.Fatalf("no results from the child:\n%s", out)
	}
	t.Logf("seccomp.InitSeccomp(default.json) took %s", installTime)
	// libcontainer loads the filter without TSYNC (profile_linux.go says so
	// and relies on it); if this changes, update that comment.
	if otherThread != "OK" {
		t.Errorf("unshare(0) on another thread of the filtered process: %q, want OK (no TSYNC)", otherThread)
	}
	t.Logf("%-34s %-9s %-12s %s", "call", "want", "unfiltered", "filtered")
	for _, r := range results {
		note := ""
		if r.Want != "allowed" && r.Before == r.After {
			note = "  (unfiltered result is the same: this row proves little here)"
		}
		t.Logf("%-34s %-9s %-12s %s%s", r.Label, r.Want, r.Before, r.After, note)
		switch r.Want {
		case "allowed":
			if r.After != r.Before {
				t.Errorf("%s: filtered %s, unfiltered %s; want the same", r.Label, r.After, r.Before)
			}
		default:
			if r.After != r.Want {
				t.Errorf("%s: filtered %s, want %s", r.Label, r.After, r.Want)
			}
		}
	}
	if want := len(tryCalls(0)) + 1; len(results) != want {
		t.Errorf("%d results, want %d", len(results), want)
	}
}

// TestSeccompRunsPrograms runs ordinary programs under default.json.
func TestSeccompRunsPrograms(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want string // in the output
	}{
		{"sh", []string{"/bin/sh", "-c", `ls / >/dev/null && cat /etc/hostname >/dev/null; python3 -c "import json,subprocess; subprocess.run([\"true\"], check=True)" && echo sh-ok`}, "sh-ok"},
		{"dash", []string{"/bin/dash", "-c", `set -e; x=$(echo a | tr a b); [ "$x" = b ]; sleep 0.01 & wait; echo dash-ok`}, "dash-ok"},
		{"bash", []string{"/bin/bash", "-c", `set -euo pipefail
			trap 'echo trapped' USR1; kill -USR1 $$
			for i in 1 2 3; do sleep 0.01 & done; wait
			d=$(mktemp -d); cd "$d"; echo hello >a; cp a b; mv b c; ln -s c d; chmod 600 c; touch -d @0 a
			[ "$(cat d)" = hello ]; stat c >/dev/null; find . -type f | sort | wc -l | grep -q 2
			sha256sum a >/dev/null; head -c 100 /dev/urandom | od >/dev/null; date >/dev/null; id >/dev/null
			tar -cf x.tar a c; mkdir e; tar -xf x.tar -C e; diff -r e/a a; rm -rf "$d"
			ps -e >/dev/null; echo bash-ok`}, "trapped\nbash-ok"},
		{"python3", []string{"python3", "-c", `
import json, os, subprocess, threading, socket, tempfile, time, select, hashlib, signal
print(subprocess.run(["ls"], stdout=subprocess.DEVNULL).returncode)
res = []
ts = [threading.Thread(target=lambda i=i: res.append(hashlib.sha256(bytes(i)).hexdigest())) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert len(res) == 8
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM); srv.bind(("127.0.0.1", 0)); srv.listen(1)
c = socket.create_connection(srv.getsockname()); s, _ = srv.accept(); c.sendall(b"ping")
select.select([s], [], [], 5); assert s.recv(4) == b"ping"
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "f"), "w").write(json.dumps({"a": 1}))
    assert json.load(open(os.path.join(d, "f"))) == {"a": 1}
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1)); os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.01)
assert got
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == errno.EPERM, "unshare(CLONE_NEWUSER) allowed"
print("python-ok")
`}, "0\npython-ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := lookSandboxPath(tc.argv[0]); err != nil {
				t.Skipf("%s not installed: %v", tc.argv[0], err)
			}
			out, err := runFiltered(t, tc.argv)
			if err != nil {
				t.Fatalf("%v under default.json: %v\n%s", tc.argv[0], err, out)
			}
			if !bytes.Contains(out, []byte(tc.want)) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// goProgram exercises the Go runtime's kernel interface: threads, timers,
// signals, the netpoller, fork+exec with pidfds, and a refused namespace.
const goProgram = `package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

func main() {
	var wg sync.WaitGroup
	sums := make([]int, 16)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100000; j++ {
				sums[i] += j
			}
			time.Sleep(time.Millisecond)
		}()
	}
	wg.Wait()
	runtime.GC()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case <-sig:
	case <-time.After(5 * time.Second):
		fail("no SIGUSR1")
	}
	tick := time.NewTicker(time.Millisecond)
	for i := 0; i < 3; i++ {
		<-tick.C
	}
	tick.Stop()
	fired := make(chan bool)
	time.AfterFunc(time.Millisecond, func() { fired <- true })
	<-fired

	if err := exec.Command("/bin/true").Run(); err != nil {
		fail("exec /bin/true: %v", err)
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Run(); !errors.Is(err, syscall.EPERM) {
		fail("clone(CLONE_NEWUSER) = %v, want EPERM", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("pong"))
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fail("dial: %v", err)
	}
	buf := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err != nil || string(buf) != "pong" {
		fail("read: %q %v", buf, err)
	}
	if _, err := os.ReadFile("/etc/hostname"); err != nil {
		fail("read /etc/hostname: %v", err)
	}
	if err := syscall.Unshare(0); err != syscall.EPERM {
		fail("unshare = %v, want EPERM", err)
	}
	fmt.Println("go-ok")
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
	os.Exit(1)
}
`

func TestSeccompRunsGoProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go program; skipped in -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building the probe needs the go tool on PATH: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(goProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	build := exec.Command(goTool, "build", "-o", bin, src)
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOTOOLCHAIN=local", "GO111MODULE=on")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := runFiltered(t, []string{bin})
	if err != nil || !bytes.Contains(out, []byte("go-ok")) {
		t.Fatalf("static Go program under default.json: %v\n%s", err, out)
	}
}

// runFiltered runs argv in a child that installs default.json first.
func runFiltered(t *testing.T, argv []string) ([]byte, error) {
	t.Helper()
	js, err := json.Marshal(argv)
	if err != nil {
		t.Fatal(err)
	}
	return runChild(t, "exec", []string{envArgv + "=" + string(js)})
}

// runChild re-runs this test binary as a seccomp child (the os/exec
// helper-process pattern).
func runChild(t *testing.T, mode string, env []string) ([]byte, error) {
	t.Helper()
	dir, err := filepath.Abs(profilesDir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envProfiles+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.Bytes(), err
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("child %q timed out:\n%s", mode, buf.Bytes())
		return nil, nil
	}
}

// TestSeccompHelperProcess is not a test: it is the child side of runChild.
func TestSeccompHelperProcess(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		return
	}
	err := seccompChild(mode, os.Getenv(envProfiles))
	fmt.Fprintf(os.Stderr, "seccomp child: %v\n", err)
	os.Exit(126)
}

// seccompChild installs default.json on the current thread the way the
// container init does (no_new_privs, then libcontainer's InitSeccomp) and
// either tries system calls or execs a program. It returns only on failure.
//
// InitSeccomp loads the filter without TSYNC, so it covers this thread only:
// everything after it (the attempts, fork, exec) must stay on this thread.
func seccompChild(mode, dir string) error {
	runtime.LockOSThread() // never unlocked: the thread dies with the process
	cfg, err := LoadProfile(dir, "default")
	if err != nil {
		return err
	}
	var (
		argv    []string
		calls   []tryCall
		nrs     []uintptr
		devNull *os.File
	)
	defer runtime.KeepAlive(devNull) // its fd number is used by the attempts
	switch mode {
	case "exec":
		if err := json.Unmarshal([]byte(os.Getenv(envArgv)), &argv); err != nil || len(argv) == 0 {
			return fmt.Errorf("bad %s: %v", envArgv, err)
		}
		if argv[0], err = lookSandboxPath(argv[0]); err != nil {
			return err
		}
	case "try":
		if devNull, err = os.Open(os.DevNull); err != nil {
			return err
		}
		calls = tryCalls(devNull.Fd())
		for _, c := range calls {
			if c.name == "" {
				nrs = append(nrs, c.nr)
				continue
			}
			nr, err := libseccomp.GetSyscallFromName(c.name)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			nrs = append(nrs, uintptr(nr))
		}
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}

	var before []string
	if mode == "try" {
		personality, err := libseccomp.GetSyscallFromName("personality")
		if err != nil {
			return err
		}
		persona, _, _ := unix.RawSyscall(uintptr(personality), 0xFFFFFFFF, 0, 0)
		before = append(attempt(calls, nrs), forkTrue())
		unix.RawSyscall(uintptr(personality), persona, 0, 0) // undo ADDR_NO_RANDOMIZE
	}

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	start := time.Now()
	if _, err := runcseccomp.InitSeccomp(cfg); err != nil {
		return fmt.Errorf("InitSeccomp: %w", err)
	}
	took := time.Since(start)

	if mode == "exec" {
		err := syscall.Exec(argv[0], argv, sandboxEnv)
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	after := append(attempt(calls, nrs), forkTrue())
	// Another goroutine cannot run on this locked thread; the runtime's other
	// threads were not created from it, so without TSYNC they are unfiltered.
	other := make(chan string)
	go func() {
		_, _, errno := unix.RawSyscall(unix.SYS_UNSHARE, 0, 0, 0)
		other <- errnoName(errno)
	}()
	fmt.Printf("SECCOMP-OTHER-THREAD %s\n", <-other)
	fmt.Printf("SECCOMP-INSTALL %s\n", took)
	calls = append(calls, tryCall{label: "fork+exec /bin/true", want: "allowed"})
	for i, c := range calls {
		line, _ := json.Marshal(tryResult{Label: c.label, Want: c.want, Before: before[i], After: after[i]})
		fmt.Printf("%s%s\n", tryPrefix, line)
	}
	os.Exit(0)
	return nil
}

// attempt makes each call on this thread and names the errno it got.
func attempt(calls []tryCall, nrs []uintptr) []string {
	res := make([]string, len(calls))
	for i, c := range calls {
		a := c.args
		r, _, errno := unix.RawSyscall6(nrs[i], a[0], a[1], a[2], a[3], a[4], a[5])
		res[i] = errnoName(errno)
		if errno == 0 && (c.name == "socket" || c.name == "pidfd_open") {
			unix.Close(int(r))
		}
	}
	return res
}

// forkTrue runs /bin/true with os/exec (clone without namespace flags, then
// execve) from this thread.
func forkTrue() string {
	cmd := exec.Command("/bin/true")
	cmd.Env = sandboxEnv
	if err := cmd.Run(); err != nil {
		return "error: " + err.Error()
	}
	return "OK"
}

func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "OK"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// ---- compiling and interpreting the filter ----

// Constants x/sys/unix lacks (linux/personality.h, asm-generic/ioctls.h).
const (
	addrNoRandomize = 0x0040000
	fioclex         = 0x5451
)

// Seccomp return values (linux/seccomp.h).
const (
	retKillThread = 0x00000000
	retErrno      = 0x00050000
	retAllow      = 0x7fff0000
	retActionMask = 0xffff0000
)

func denies(ret uint32) bool {
	switch ret & retActionMask {
	case retKillThread, 0x80000000 /* KILL_PROCESS */, 0x00030000 /* TRAP */, retErrno:
		return true
	}
	return false
}

func loadDefault(t testing.TB) *configs.Seccomp {
	t.Helper()
	cfg, err := LoadProfile(profilesDir, "default")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func sysno(t testing.TB, name string) int32 {
	t.Helper()
	nr, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return int32(nr)
}

func testAuditArch(t testing.TB) uint32 {
	t.Helper()
	arch, err := nativeAuditArch()
	if err != nil {
		t.Skip(err)
	}
	return arch
}

// compileFilter builds the libseccomp filter for cfg the way libcontainer's
// InitSeccomp does (runc v1.5.3 libcontainer/seccomp/seccomp_linux.go: same
// default action, architectures, optimisation, rule skipping and
// conditions) and exports its BPF. It leaves out runc's ENOSYS stub, which
// only changes what syscalls newer than the profile's newest one return.
// The real-kernel tests check the filter libcontainer itself loads.
func compileFilter(t testing.TB, cfg *configs.Seccomp) *bpf.VM {
	t.Helper()
	prog, err := CompileFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// evalFilter runs the filter in x/net/bpf's interpreter (runFilter).
func evalFilter(t testing.TB, vm *bpf.VM, arch uint32, nr int32, args ...uint64) uint32 {
	t.Helper()
	ret, err := runFilter(vm, arch, nr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

// BenchmarkCompileDefaultProfile is the per-start cost on the host side:
// read and check default.json, convert it, build the libseccomp filter and
// export its BPF.
func BenchmarkCompileDefaultProfile(b *testing.B) {
	b.Run("load+compile", func(b *testing.B) {
		for b.Loop() {
			cfg, err := LoadProfile(profilesDir, "default")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := CompileFilter(cfg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		for b.Loop() {
			if _, err := LoadProfile(profilesDir, "default"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("compile", func(b *testing.B) {
		cfg := loadDefault(b)
		var n int
		for b.Loop() {
			prog, err := CompileFilter(cfg)
			if err != nil {
				b.Fatal(err)
			}
			n = len(prog)
		}
		b.ReportMetric(float64(n), "bpf-insns")
	})
}
