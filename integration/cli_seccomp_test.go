//go:build linux

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
)

// TestCLISeccompGolden: what `cyberos seccomp` prints for an operator, word
// for word where it does not depend on the host's libseccomp: explain's
// one-line summary of the default profile's masked ioctl rules and the
// rules behind it, its verdicts, its refusal of a name at the wrong
// argument, import's notes on Docker's profile, and lint's count lines.
func TestCLISeccompGolden(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the golden outputs are amd64's (syscall numbers, names of other architectures), not %s's", runtime.GOARCH)
	}
	def := filepath.Join(repoRoot, "seccomp-profiles", "default.json")
	const summary = "  syscalls[9] to syscalls[41] (33 rules; --rules lists them): ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412), TIOCLINUX (0x541c)\n" +
		"decided by those rules: the values they except get the default action SCMP_ACT_ERRNO(EPERM)\n"
	head := "ioctl (number 16) in " + def + "\n"

	for _, c := range []struct {
		name           string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"explain ioctl", []string{"ioctl"}, 0, head + summary, ""},
		{"explain ioctl TIOCSTI", []string{"ioctl", "0", "TIOCSTI"}, 0, head + summary + "ioctl(0x0, 0x5412) → ERRNO(EPERM)\n", ""},
		{"explain ioctl TCGETS", []string{"ioctl", "0", "TCGETS"}, 0, head + summary + "ioctl(0x0, 0x5401) → ALLOW\n", ""},
		{"explain ioctl --rules", []string{"ioctl", "--rules"}, 0, head + ioctlRules +
			"in short: ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412), TIOCLINUX (0x541c); those: default action SCMP_ACT_ERRNO(EPERM)\n" +
			"decided by the conditional rules above (any one whose conditions all hold applies); when none matches: default action SCMP_ACT_ERRNO(EPERM)\n", ""},
		{"explain clone keeps its rule", []string{"clone", "CLONE_NEWUSER|SIGCHLD"}, 0, "clone (number 56) in " + def + "\n" +
			"  syscalls[1]: SCMP_ACT_ALLOW when arg0 & 0x7e020000 == 0x0\n" +
			"decided by the conditional rules above (any one whose conditions all hold applies); when none matches: default action SCMP_ACT_ERRNO(EPERM)\n" +
			"clone(0x10000011) → ERRNO(EPERM)\n", ""},
		// Read as ioctl(fd 0x5412), it would be allowed: refused instead.
		{"explain ioctl TIOCSTI at the fd", []string{"ioctl", "TIOCSTI"}, 2, "",
			"cyberos: argument 0 of ioctl: TIOCSTI is an ioctl request, which is argument 1 (try: ioctl 0 TIOCSTI)\n"},
		{"explain a clone flag to write", []string{"write", "CLONE_NEWUSER"}, 2, "",
			"cyberos: argument 0 of write: CLONE_NEWUSER is a namespace flag, which write does not take (it is argument 0 of clone, argument 1 of setns, argument 0 of unshare)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := cli(t, nil, append([]string{"seccomp", "explain", def}, c.args...)...)
			if code != c.code || out != c.stdout || stderr != c.stderr {
				t.Errorf("explain %v: exit %d, stdout\n%s\nstderr\n%s\nwant exit %d, stdout\n%s\nstderr\n%s", c.args, code, out, stderr, c.code, c.stdout, c.stderr)
			}
		})
	}

	// Docker's default profile as the moby/profiles package ships it. The
	// names libseccomp does not know, and so the names of other
	// architectures it does, depend on its version: word for word on
	// Debian 12's 2.5.4, the rest checked for their form.
	t.Run("import Docker's default", func(t *testing.T) {
		raw, err := json.Marshal(mobyseccomp.DefaultProfile())
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		docker := filepath.Join(dir, "docker-default.json")
		if err := os.WriteFile(docker, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := cli(t, nil, "seccomp", "import", docker, "-o", filepath.Join(dir, "docker.json"))
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 0 || out != "" || len(lines) != 4 {
			t.Fatalf("import: exit %d, stdout %q, stderr\n%s\nwant exit 0, nothing on stdout, 4 notes", code, out, stderr)
		}
		for i, want := range []string{
			"note: architectures [SCMP_ARCH_X86_64 SCMP_ARCH_X86 SCMP_ARCH_X32] dropped: the filter is built for the native architecture only, other ABIs are killed",
			`note: "flags": [] written: without it runc adds SECCOMP_FILTER_FLAG_SPEC_ALLOW`,
		} {
			if lines[i] != want {
				t.Errorf("note %d:\n%s\nwant\n%s", i, lines[i], want)
			}
		}
		unknown := regexp.MustCompile(`^note: \d+ names unknown to libseccomp (\S+) dropped: [a-z0-9_]+(, [a-z0-9_]+)*$`).FindStringSubmatch(lines[2])
		if unknown == nil {
			t.Fatalf("note 2 is not about names unknown to libseccomp: %s", lines[2])
		}
		if unknown[1] == "2.5.4" {
			if lines[2] != libseccomp254Unknown || lines[3] != libseccomp254Foreign {
				t.Errorf("notes on names (libseccomp 2.5.4):\n%s\n%s\nwant\n%s\n%s", lines[2], lines[3], libseccomp254Unknown, libseccomp254Foreign)
			}
			return
		}
		t.Logf("libseccomp %s: the notes on names are checked for their form only", unknown[1])
		if !regexp.MustCompile(`^note: \d+ names that are not amd64 syscalls \(another architecture's\) dropped: .*\b_llseek\b`).MatchString(lines[3]) {
			t.Errorf("note 3 does not drop i386's _llseek as another architecture's: %s", lines[3])
		}
	})

	// The BPF instruction count is libseccomp's code generation: any number.
	t.Run("lint", func(t *testing.T) {
		strict := filepath.Join(repoRoot, "seccomp-profiles", "strict.json")
		out, stderr, code := cli(t, nil, "seccomp", "lint", def, strict)
		want := regexp.MustCompile("^" + regexp.QuoteMeta(def+": ok: 269 syscalls allowed, ") + `\d+` + regexp.QuoteMeta(" BPF instructions (native architecture), 0 warnings\n") +
			regexp.QuoteMeta(strict+": ok: 199 syscalls allowed, ") + `\d+` + regexp.QuoteMeta(" BPF instructions (native architecture), 0 warnings\n") + "$")
		if code != 0 || stderr != "" || !want.MatchString(out) {
			t.Errorf("lint: exit %d, stdout\n%s\nstderr\n%s\nwant exit 0, stdout matching\n%s", code, out, stderr, want)
		}
	})
}

// ioctlRules are the default profile's ioctl rules as explain --rules lists
// them: every request but TIOCSTI and TIOCLINUX, in bit tests.
const ioctlRules = `  syscalls[9]: SCMP_ACT_ALLOW when arg1 & 0x1 == 0x1
  syscalls[10]: SCMP_ACT_ALLOW when arg1 & 0x10 == 0x0
  syscalls[11]: SCMP_ACT_ALLOW when arg1 & 0x20 == 0x20
  syscalls[12]: SCMP_ACT_ALLOW when arg1 & 0x40 == 0x40
  syscalls[13]: SCMP_ACT_ALLOW when arg1 & 0x80 == 0x80
  syscalls[14]: SCMP_ACT_ALLOW when arg1 & 0x100 == 0x100
  syscalls[15]: SCMP_ACT_ALLOW when arg1 & 0x200 == 0x200
  syscalls[16]: SCMP_ACT_ALLOW when arg1 & 0x400 == 0x0
  syscalls[17]: SCMP_ACT_ALLOW when arg1 & 0x800 == 0x800
  syscalls[18]: SCMP_ACT_ALLOW when arg1 & 0x1000 == 0x0
  syscalls[19]: SCMP_ACT_ALLOW when arg1 & 0x2000 == 0x2000
  syscalls[20]: SCMP_ACT_ALLOW when arg1 & 0x4000 == 0x0
  syscalls[21]: SCMP_ACT_ALLOW when arg1 & 0x8000 == 0x8000
  syscalls[22]: SCMP_ACT_ALLOW when arg1 & 0x10000 == 0x10000
  syscalls[23]: SCMP_ACT_ALLOW when arg1 & 0x20000 == 0x20000
  syscalls[24]: SCMP_ACT_ALLOW when arg1 & 0x40000 == 0x40000
  syscalls[25]: SCMP_ACT_ALLOW when arg1 & 0x80000 == 0x80000
  syscalls[26]: SCMP_ACT_ALLOW when arg1 & 0x100000 == 0x100000
  syscalls[27]: SCMP_ACT_ALLOW when arg1 & 0x200000 == 0x200000
  syscalls[28]: SCMP_ACT_ALLOW when arg1 & 0x400000 == 0x400000
  syscalls[29]: SCMP_ACT_ALLOW when arg1 & 0x800000 == 0x800000
  syscalls[30]: SCMP_ACT_ALLOW when arg1 & 0x1000000 == 0x1000000
  syscalls[31]: SCMP_ACT_ALLOW when arg1 & 0x2000000 == 0x2000000
  syscalls[32]: SCMP_ACT_ALLOW when arg1 & 0x4000000 == 0x4000000
  syscalls[33]: SCMP_ACT_ALLOW when arg1 & 0x8000000 == 0x8000000
  syscalls[34]: SCMP_ACT_ALLOW when arg1 & 0x10000000 == 0x10000000
  syscalls[35]: SCMP_ACT_ALLOW when arg1 & 0x20000000 == 0x20000000
  syscalls[36]: SCMP_ACT_ALLOW when arg1 & 0x40000000 == 0x40000000
  syscalls[37]: SCMP_ACT_ALLOW when arg1 & 0x80000000 == 0x80000000
  syscalls[38]: SCMP_ACT_ALLOW when arg1 & 0xfffffff7 == 0x5410
  syscalls[39]: SCMP_ACT_ALLOW when arg1 & 0xfffffff7 == 0x5416
  syscalls[40]: SCMP_ACT_ALLOW when arg1 & 0xffffffff == 0x5414
  syscalls[41]: SCMP_ACT_ALLOW when arg1 & 0xffffffff == 0x541a
`

// The notes import writes on Docker's default profile about names, with
// libseccomp 2.5.4.
const (
	libseccomp254Unknown = "note: 9 names unknown to libseccomp 2.5.4 dropped: getxattrat, listmount, listxattrat, mseal, removexattrat, riscv_hwprobe, setxattrat, statmount, uretprobe"
	libseccomp254Foreign = "note: 60 names that are not amd64 syscalls (another architecture's) dropped: chown32, clock_adjtime64, clock_getres_time64, clock_gettime64, clock_nanosleep_time64, fadvise64_64, fchown32, fcntl64, fstat64, fstatat64, fstatfs64, ftruncate64, futex_time64, getegid32, geteuid32, getgid32, getgroups32, getresgid32, getresuid32, getuid32, io_pgetevents_time64, ipc, lchown32, _llseek, lstat64, mmap2, mq_timedreceive_time64, mq_timedsend_time64, _newselect, ppoll_time64, pselect6_time64, recv, recvmmsg_time64, rt_sigtimedwait_time64, sched_rr_get_interval_time64, semtimedop_time64, send, sendfile64, setfsgid32, setfsuid32, setgid32, setgroups32, setregid32, setresgid32, setresuid32, setreuid32, setuid32, sigprocmask, sigreturn, socketcall, stat64, statfs64, timer_gettime64, timer_settime64, timerfd_gettime64, timerfd_settime64, truncate64, ugetrlimit, utimensat_time64, waitpid"
)
