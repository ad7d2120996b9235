package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ---- lint ----

func writeTemp(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func warningsOf(r LintReport) []string {
	var out []string
	for _, w := range r.Warnings {
		out = append(out, w.Message)
	}
	return out
}

func TestLintRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown-field", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "x"}]}`,
			[]string{"syscalls[0].comment", "unknown field"}},
		{"unknown-syscall", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "mout"], "action": "SCMP_ACT_ALLOW"}]}`,
			[]string{"syscalls[0].names[1]", `unknown syscall "mout"`}},
		{"allow-default", `{"defaultAction": "SCMP_ACT_ALLOW"}`, []string{"defaultAction", "deny by default"}},
		{"log-default", `{"defaultAction": "SCMP_ACT_LOG"}`, []string{"defaultAction", "SCMP_ACT_LOG"}},
		{"docker", `{"defaultAction": "SCMP_ACT_ERRNO", "archMap": []}`, []string{"Docker-format", "cyberos seccomp import"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTemp(t, tc.name+".json", tc.body)
			r := LintProfile(path)
			if r.Error == "" {
				t.Fatalf("lint accepted it: %+v", r)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(r.Error, w) {
					t.Errorf("error %q does not contain %q", r.Error, w)
				}
			}
		})
	}
}

func TestLintWarnsAboutDangerousAllowances(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		want        []string // substrings, one warning each
	}{
		{"mount-ptrace-bpf", `{"names": ["read", "mount", "ptrace", "bpf"], "action": "SCMP_ACT_ALLOW"}`,
			[]string{"mount allowed unconditionally", "ptrace allowed unconditionally", "bpf allowed unconditionally"}},
		{"conditional-setns", `{"names": ["setns"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 0, "op": "SCMP_CMP_EQ"}]}`,
			[]string{"setns allowed when arg1 == 0x0"}},
		{"clone-any-flags", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW"}, {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}`,
			[]string{"clone with namespace flags allowed (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP)"}},
		{"clone-user-only", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1845624832, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}, {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}`,
			[]string{"clone with namespace flags allowed (CLONE_NEWUSER)"}},
		{"unshare", `{"names": ["unshare"], "action": "SCMP_ACT_ALLOW"}`,
			[]string{"unshare with namespace flags allowed (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME)"}},
		{"clone3-allowed", `{"names": ["clone3"], "action": "SCMP_ACT_ALLOW"}`, []string{"clone3 allowed"}},
		{"clone3-eperm", `{"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`,
			[]string{"clone3 refused with ERRNO(EPERM), not ERRNO(ENOSYS)"}},
		{"ioctl-unfiltered", `{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW"}`, []string{"ioctl allowed without argument filters"}},
		{"ioctl-tiocsti-through-mask", `{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 4294967040, "valueTwo": 21504, "op": "SCMP_CMP_MASKED_EQ"}]}`,
			[]string{"ioctl(TIOCSTI) allowed", "ioctl(TIOCLINUX) allowed", "ioctl(TIOCSTI with high bits set) allowed"}},
		{"personality", `{"names": ["personality"], "action": "SCMP_ACT_ALLOW"}`, []string{"personality unrestricted"}},
		{"personality-aslr", `{"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 262144, "op": "SCMP_CMP_EQ"}]}`,
			[]string{"personality(ADDR_NO_RANDOMIZE) allowed"}},
		{"foreign-arch", "", // body below
			[]string{"architectures [SCMP_ARCH_X86_64 SCMP_ARCH_X86]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [` + tc.rules + `]}`
			if tc.name == "foreign-arch" {
				body = `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"], "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]}`
			}
			r := LintProfile(writeTemp(t, "p.json", body))
			if r.Error != "" {
				t.Fatalf("lint error: %s", r.Error)
			}
			got := warningsOf(r)
			if len(got) != len(tc.want) {
				t.Errorf("%d warnings, want %d: %q", len(got), len(tc.want), got)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
					t.Errorf("no warning contains %q; got %q", w, got)
				}
			}
		})
	}
}

func TestLintCleanProfile(t *testing.T) {
	clean := strings.Replace(okProfile, `"syscalls": [`, `"syscalls": [{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}, `, 1)
	r := LintProfile(writeTemp(t, "p.json", clean))
	if r.Error != "" || len(r.Warnings) != 0 {
		t.Fatalf("report %+v, want clean", r)
	}
	if r.BPFInstructions == 0 || r.Allowed != 4 {
		t.Errorf("compiled %d instructions, %d allowed names; want > 0 and 4", r.BPFInstructions, r.Allowed)
	}
}

// documentedExceptions are the dangerous allowances a shipped profile may
// make, each with its reason. Empty: none makes any.
var documentedExceptions = map[string]map[string]string{}

// TestShippedProfilesLint is the table test over every file in
// seccomp-profiles/ (TestProfileInvariants checks more on the same files):
// lint is clean except for documented exceptions, the filter compiles for
// the native architecture, clone3 answers ENOSYS, TIOCSTI is refused.
func TestShippedProfilesLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(profilesDir, "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least default.json and a stricter profile in %s, found %v (%v)", profilesDir, files, err)
	}
	arch := testAuditArch(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			r := LintProfile(f)
			if r.Error != "" {
				t.Fatal(r.Error)
			}
			if r.BPFInstructions == 0 {
				t.Error("no BPF compiled")
			}
			for _, w := range r.Warnings {
				if _, ok := documentedExceptions[name][w.Syscall]; !ok {
					t.Errorf("undocumented dangerous allowance: %s (%s)", w.Message, w.Rule)
				}
			}
			_, cfg, err := LoadProfileFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if permits(cfg.DefaultAction) {
				t.Errorf("default action %s", actionName(cfg.DefaultAction))
			}
			prog := compileFilter(t, cfg)
			if ret := evalFilter(t, prog, arch, sysno(t, "clone3")); ret != retErrno|uint32(unix.ENOSYS) {
				t.Errorf("clone3 → %s, want ERRNO(ENOSYS)", retString(ret))
			}
			for _, cmd := range []uint64{unix.TIOCSTI, unix.TIOCLINUX, 1<<32 | unix.TIOCSTI} {
				if ret := evalFilter(t, prog, arch, sysno(t, "ioctl"), 0, cmd); !denies(ret) {
					t.Errorf("ioctl(0, %#x) → %s, want refused", cmd, retString(ret))
				}
			}
			if ret := evalFilter(t, prog, arch, sysno(t, "getpid")); ret != retAllow {
				t.Errorf("getpid → %s: the profile cannot run anything", retString(ret))
			}
		})
	}
}

// TestStrictIsStricter: strict.json allows a subset of default.json and
// refuses what a broker-only skill never needs.
func TestStrictIsStricter(t *testing.T) {
	d, err := DiffProfiles(filepath.Join(profilesDir, "default.json"), filepath.Join(profilesDir, "strict.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Syscalls {
		if e.Change == "added" {
			t.Errorf("strict adds %s: %v", e.Syscall, e.New)
		}
	}
	if len(d.Settings) != 0 {
		t.Errorf("settings differ: %v", d.Settings)
	}
	cfg, err := LoadProfile(profilesDir, "strict")
	if err != nil {
		t.Fatal(err)
	}
	prog := compileFilter(t, cfg)
	arch := testAuditArch(t)
	eperm := retErrno | uint32(unix.EPERM)
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socket", []uint64{unix.AF_INET, unix.SOCK_STREAM}, eperm},
		{"socket", []uint64{unix.AF_INET6, unix.SOCK_STREAM}, eperm},
		{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, eperm},
		{"socket", []uint64{1<<32 | unix.AF_UNIX}, eperm},
		{"ioctl", []uint64{0, unix.TCGETS}, retAllow},
		{"ioctl", []uint64{0, unix.TIOCGWINSZ}, retAllow},
		{"ioctl", []uint64{0, fioclex}, retAllow},
		{"ioctl", []uint64{0, unix.TIOCSWINSZ}, eperm},
		{"ioctl", []uint64{0, unix.FICLONE}, eperm},
		{"personality", []uint64{0xFFFFFFFF}, eperm},
		{"bind", nil, eperm},
		{"listen", nil, eperm},
		{"setuid", []uint64{0}, eperm},
		{"setgroups", nil, eperm},
		{"memfd_create", nil, eperm},
		{"io_setup", nil, eperm},
		{"shmget", nil, eperm},
		{"vmsplice", nil, eperm},
		{"mknodat", nil, eperm},
		{"linkat", nil, eperm},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"execve", nil, retAllow},
		{"connect", nil, retAllow},
		{"landlock_create_ruleset", nil, retAllow},
	} {
		if ret := evalFilter(t, prog, arch, sysno(t, c.name), c.args...); ret != c.want {
			t.Errorf("strict: %s(%#x) → %s, want %s", c.name, c.args, retString(ret), retString(c.want))
		}
	}
}

// ---- explain ----

func TestExplain(t *testing.T) {
	def := filepath.Join(profilesDir, "default.json")
	for _, tc := range []struct {
		syscall  string
		args     []uint64
		decision string
		verdict  string
		rules    int
		defAct   string
	}{
		{"read", nil, "unconditional", "", 1, "SCMP_ACT_ERRNO(EPERM)"},
		{"clone3", []uint64{0}, "unconditional", "ERRNO(ENOSYS)", 1, ""},
		{"mount", []uint64{0}, "default", "ERRNO(EPERM)", 0, ""},
		{"socket", []uint64{unix.AF_INET}, "conditional", "ALLOW", 4, ""},
		{"socket", []uint64{unix.AF_PACKET}, "conditional", "ERRNO(EPERM)", 4, ""},
		{"ioctl", []uint64{0, unix.TIOCSTI}, "conditional", "ERRNO(EPERM)", 33, ""},
		{"ioctl", []uint64{0, unix.TCGETS}, "conditional", "ALLOW", 33, ""},
		{"futex_wake", []uint64{0}, "enosys", "ERRNO(ENOSYS)", 0, ""},
	} {
		ex, err := ExplainProfile(def, tc.syscall, tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.syscall, err)
		}
		if ex.Decision != tc.decision || ex.Verdict != tc.verdict || len(ex.Rules) != tc.rules {
			t.Errorf("%s%#x: decision %q verdict %q, %d rules; want %q %q %d", tc.syscall, tc.args, ex.Decision, ex.Verdict, len(ex.Rules), tc.decision, tc.verdict, tc.rules)
		}
		if tc.defAct != "" && ex.Default != tc.defAct {
			t.Errorf("default %q, want %q", ex.Default, tc.defAct)
		}
	}
	ex, err := ExplainProfile(def, "socket", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ex.Rules[0].Conditions, ""); got != "arg0 == 0x1" {
		t.Errorf("first socket rule condition %q, want arg0 == 0x1", got)
	}
	if _, err := ExplainProfile(def, "mout", nil); err == nil || !strings.Contains(err.Error(), `unknown syscall "mout"`) {
		t.Errorf("unknown syscall: %v", err)
	}
	// A rule that repeats the default action is shown, and said to do nothing.
	p := writeTemp(t, "p.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]}`)
	ex, err = ExplainProfile(p, "mount", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Decision != "default" || len(ex.Rules) != 1 || ex.Rules[0].Ignored == "" {
		t.Errorf("no-op rule: %+v", ex)
	}
}

// ---- diff ----

func TestDiff(t *testing.T) {
	a := writeTemp(t, "a.json", `{"defaultAction": "SCMP_ACT_ERRNO", "flags": [], "syscalls": [
		{"names": ["read", "write", "mount"], "action": "SCMP_ACT_ALLOW"},
		{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}]},
		{"names": ["getpid"], "action": "SCMP_ACT_ERRNO"}]}`)
	b := writeTemp(t, "b.json", `{"defaultAction": "SCMP_ACT_KILL_PROCESS", "syscalls": [
		{"names": ["write", "read", "close"], "action": "SCMP_ACT_ALLOW"},
		{"names": ["socket"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]},
		{"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]}`)
	d, err := DiffProfiles(a, b)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range d.Syscalls {
		got[e.Syscall] = e.Change + ": " + strings.Join(e.Old, ";") + " → " + strings.Join(e.New, ";")
	}
	want := map[string]string{
		"close":  "added:  → ALLOW",
		"mount":  "changed: ALLOW → ERRNO(ENOSYS)",
		"socket": "changed: ALLOW if arg0 == 0x1 → ALLOW if arg0 == 0x2",
		// getpid: ERRNO in A repeats A's default (no effect); in B no rule.
	}
	if len(got) != len(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(d.Settings) != 2 || !strings.Contains(d.Settings[0], "defaultAction: SCMP_ACT_ERRNO(EPERM) → SCMP_ACT_KILL_PROCESS") ||
		!strings.Contains(d.Settings[1], "flags: [] → absent") {
		t.Errorf("settings %q", d.Settings)
	}
	same, err := DiffProfiles(a, a)
	if err != nil || !same.Empty() {
		t.Errorf("a vs a: %+v %v", same, err)
	}
}

// TestFormatProfileRoundTrip: the formatter writes what the loader reads
// back with the same decisions.
func TestFormatProfileRoundTrip(t *testing.T) {
	for _, name := range []string{"default", "strict"} {
		spec, _, err := LoadProfileFile(filepath.Join(profilesDir, name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := FormatProfile(spec)
		if err != nil {
			t.Fatal(err)
		}
		out := writeTemp(t, name+".json", string(b))
		d, err := DiffProfiles(filepath.Join(profilesDir, name+".json"), out)
		if err != nil {
			t.Fatalf("formatted %s does not load: %v\n%s", name, err, b)
		}
		if !d.Empty() {
			t.Errorf("formatted %s decides differently: %+v", name, d)
		}
	}
}

// ---- import ----

// dockerDefaultJSON is Docker's default profile as the moby/profiles
// package itself ships it (not a copy in this repository).
func dockerDefaultJSON(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(mobyseccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportDockerDefault(t *testing.T) {
	docker := dockerDefaultJSON(t)
	raw := writeTemp(t, "docker-raw.json", string(docker))
	if r := LintProfile(raw); !strings.Contains(r.Error, "cyberos seccomp import") {
		t.Errorf("lint of the Docker-format file: %q, want a pointer to seccomp import", r.Error)
	}
	res, err := ImportDockerProfile(docker)
	if err != nil {
		t.Fatal(err)
	}
	path := writeTemp(t, "docker.json", string(res.Profile))
	r := LintProfile(path)
	if r.Error != "" {
		t.Fatalf("imported profile does not lint: %s\n%s", r.Error, res.Profile)
	}
	spec, cfg, err := LoadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Architectures) != 0 || spec.Flags == nil {
		t.Errorf("architectures %v flags %v; want native only and flags []", spec.Architectures, spec.Flags)
	}
	// Docker allows ptrace and unfiltered ioctl: lint says so.
	warned := map[string]bool{}
	for _, w := range r.Warnings {
		warned[w.Syscall] = true
	}
	for _, s := range []string{"ptrace", "ioctl"} {
		if !warned[s] {
			t.Errorf("no warning for Docker's %s allowance; warnings %q", s, warningsOf(r))
		}
	}
	// The CAP_SYS_ADMIN-gated rules are gone (no capabilities), so the
	// compiled filter refuses mount, unshare, setns, bpf and namespace clones.
	prog := compileFilter(t, cfg)
	arch := testAuditArch(t)
	for _, c := range []struct {
		name string
		args []uint64
	}{{"mount", nil}, {"umount2", nil}, {"unshare", []uint64{unix.CLONE_NEWUSER}}, {"setns", nil}, {"bpf", nil},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}}, {"keyctl", nil}, {"kexec_load", nil}} {
		if ret := evalFilter(t, prog, arch, sysno(t, c.name), c.args...); !denies(ret) {
			t.Errorf("imported Docker profile: %s → %s, want refused", c.name, retString(ret))
		}
	}
	if ret := evalFilter(t, prog, arch, sysno(t, "clone3")); ret != retErrno|uint32(unix.ENOSYS) {
		t.Errorf("clone3 → %s, want ENOSYS", retString(ret))
	}
}

func TestImportRefuses(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"not-json", `defaultAction: x`, "invalid character"},
		{"off", `{}`, "turns seccomp off"},
		{"allow-default", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]}`, "deny by default"},
		{"both-arch-keys", `{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"], "archMap": [{"architecture": "SCMP_ARCH_X86_64"}]}`, "both 'architectures' and 'archMap'"},
	} {
		_, err := ImportDockerProfile([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// ---- record ----

func TestRecordingConfig(t *testing.T) {
	base := loadDefault(t)
	rc := RecordingConfig(base, "/run/x.sock")
	if rc.ListenerPath != "/run/x.sock" || base.ListenerPath != "" {
		t.Errorf("listener path %q (base %q)", rc.ListenerPath, base.ListenerPath)
	}
	for i, s := range rc.Syscalls {
		b := base.Syscalls[i]
		switch {
		case b.Action != configs.Allow:
			if s.Action != b.Action {
				t.Errorf("%s: refusal %v changed to %v", s.Name, b.Action, s.Action)
			}
		case slices.Contains(recordBaseline, s.Name):
			if s.Action != configs.Allow {
				t.Errorf("%s: baseline call is %v, want allowed (a notified write would hang runc's init)", s.Name, s.Action)
			}
		case slices.Contains(recordUnnotified, s.Name):
			if s.Action != configs.Allow {
				t.Errorf("%s: %v, want allowed (a notified fork can fail with EINTR)", s.Name, s.Action)
			}
		case s.Action != configs.Notify:
			t.Errorf("%s: %v, want notify", s.Name, s.Action)
		}
		if !slices.Equal(s.Args, b.Args) {
			t.Errorf("%s: conditions changed", s.Name)
		}
	}
	if base.Syscalls[0].Action != configs.Allow {
		t.Error("RecordingConfig modified the base profile")
	}
}

func TestRecordProfile(t *testing.T) {
	base := filepath.Join(profilesDir, "default.json")
	b, err := RecordProfile(base, []string{"read", "openat", "ioctl", "execve"})
	if err != nil {
		t.Fatal(err)
	}
	path := writeTemp(t, "rec.json", string(b))
	r := LintProfile(path)
	if r.Error != "" || len(r.Warnings) != 0 {
		t.Fatalf("recorded profile lint: %+v\n%s", r, b)
	}
	spec, cfg, err := LoadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var uncond []string
	for _, s := range spec.Syscalls {
		if s.Action == specs.ActAllow && len(s.Args) == 0 {
			uncond = append(uncond, s.Names...)
		}
	}
	// fork and vfork: recordUnnotified, which the base allows without
	// conditions (clone, the third, keeps its conditions: below).
	want := append([]string{"read", "openat", "execve", "fork", "vfork"}, recordBaseline...)
	slices.Sort(want)
	if !slices.Equal(uncond, want) {
		t.Errorf("unconditional allows %v, want %v", uncond, want)
	}
	prog := compileFilter(t, cfg)
	arch := testAuditArch(t)
	eperm := retErrno | uint32(unix.EPERM)
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"read", nil, retAllow},
		{"getppid", nil, eperm}, // allowed by the base, not used
		{"socket", []uint64{unix.AF_UNIX}, eperm},
		{"ioctl", []uint64{0, unix.TCGETS}, retAllow}, // the base's ioctl rules, kept whole
		{"ioctl", []uint64{0, unix.TIOCSTI}, eperm},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone3", nil, retErrno | uint32(unix.ENOSYS)}, // the base's refusal, kept
		{"mount", nil, eperm},
	} {
		if ret := evalFilter(t, prog, arch, sysno(t, c.name), c.args...); ret != c.want {
			t.Errorf("recorded: %s(%#x) → %s, want %s", c.name, c.args, retString(ret), retString(c.want))
		}
	}
	// A name the base refuses never becomes allowed, even if reported.
	b, err = RecordProfile(base, []string{"mount", "read"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"mount"`) {
		t.Errorf("recorded profile allows mount, which the base refuses:\n%s", b)
	}
}

// BenchmarkCompileProfiles: the host-side part of the start cost per
// profile (check + convert + build the libseccomp filter + export BPF),
// without the noise of a container start.
// go test -tags seccomp -run '^$' -bench CompileProfiles ./supervisor/seccomp/
func BenchmarkCompileProfiles(b *testing.B) {
	imp, err := ImportDockerProfile(dockerDefaultJSON(b))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker.json"), imp.Profile, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{filepath.Join(profilesDir, "default.json"), filepath.Join(profilesDir, "strict.json"), filepath.Join(dir, "docker.json")} {
		b.Run(strings.TrimSuffix(filepath.Base(p), ".json"), func(b *testing.B) {
			var n int
			for b.Loop() {
				_, cfg, err := LoadProfileFile(p)
				if err != nil {
					b.Fatal(err)
				}
				prog, err := CompileFilter(cfg)
				if err != nil {
					b.Fatal(err)
				}
				n = len(prog)
			}
			b.ReportMetric(float64(n), "bpf-insns")
		})
	}
}

// TestOtherArchitecturesNames: names libseccomp knows only for another
// architecture (i386's _llseek) decide nothing on this one: import drops
// them and says so, lint does not count them as allowed, diff ignores
// them.
func TestOtherArchitecturesNames(t *testing.T) {
	if syscallNative("_llseek") || !syscallKnown("_llseek") || !syscallNative("read") {
		t.Fatalf("this test assumes an architecture without _llseek (amd64): native %v", syscallNative("_llseek"))
	}
	res, err := ImportDockerProfile(dockerDefaultJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Dropped, "_llseek") || bytes.Contains(res.Profile, []byte(`"_llseek"`)) {
		t.Errorf("import kept i386's _llseek: dropped %v", res.Dropped)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "not "+nativeArchName()+" syscalls") }) {
		t.Errorf("import notes %q do not name the names of another architecture", res.Notes)
	}
	const prof = `{"defaultAction":"SCMP_ACT_ERRNO","flags":[],"syscalls":[{"names":[%s],"action":"SCMP_ACT_ALLOW"}]}`
	a := writeTemp(t, "a.json", fmt.Sprintf(prof, `"read","exit_group"`))
	b := writeTemp(t, "b.json", fmt.Sprintf(prof, `"read","exit_group","_llseek"`))
	r := LintProfile(b)
	if r.Error != "" || r.Allowed != 2 || !slices.Equal(r.NotNative, []string{"_llseek"}) {
		t.Errorf("lint: error %q, allowed %d, not native %v; want 2 and [_llseek]", r.Error, r.Allowed, r.NotNative)
	}
	d, err := DiffProfiles(a, b)
	if err != nil || !d.Empty() || !slices.Equal(d.Ignored, []string{"_llseek"}) {
		t.Errorf("diff: %v, %+v; want the same decisions, _llseek ignored", err, d)
	}
}

// TestArgValue: explain's arguments are numbers or symbolic names, ORed
// with "|"; an unknown name is an error that lists the known ones.
func TestArgValue(t *testing.T) {
	for _, c := range []struct {
		syscall string
		index   int
		in      string
		want    uint64
	}{
		{"ioctl", 0, "0x5412", 0x5412}, {"read", 2, "21522", 21522},
		{"ioctl", 1, "TIOCSTI", unix.TIOCSTI}, {"ioctl", 1, "TIOCLINUX", unix.TIOCLINUX},
		{"clone", 0, "CLONE_NEWUSER|SIGCHLD", unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)},
		{"unshare", 0, "CLONE_NEWNS | CLONE_NEWPID", unix.CLONE_NEWNS | unix.CLONE_NEWPID},
		{"setns", 1, "CLONE_NEWNET", unix.CLONE_NEWNET}, {"unshare", 0, "CLONE_NEWTIME", unix.CLONE_NEWTIME},
		{"kill", 1, "SIGCHLD", uint64(unix.SIGCHLD)}, {"personality", 0, "ADDR_NO_RANDOMIZE", perAddrNoRandomize},
	} {
		if got, err := ArgValue(c.syscall, c.index, c.in); err != nil || got != c.want {
			t.Errorf("ArgValue(%s, %d, %q) = %#x, %v; want %#x", c.syscall, c.index, c.in, got, err, c.want)
		}
	}
	if _, err := ArgValue("ioctl", 1, "TIOCSTY"); err == nil || !strings.Contains(err.Error(), "TIOCSTI") {
		t.Errorf("ArgValue(TIOCSTY): %v, want an error listing the known names", err)
	}
}

// TestArgValueWrongPlace: a name at an argument that does not take it is
// refused, saying where it belongs, rather than read as a number there
// (ioctl TIOCSTI would otherwise be ioctl(fd 0x5412), which is allowed).
func TestArgValueWrongPlace(t *testing.T) {
	for _, c := range []struct {
		syscall string
		index   int
		in      string
		want    string // the whole error
	}{
		{"ioctl", 0, "TIOCSTI", "argument 0 of ioctl: TIOCSTI is an ioctl request, which is argument 1 (try: ioctl 0 TIOCSTI)"},
		{"clone", 1, "CLONE_NEWUSER|SIGCHLD", "argument 1 of clone: CLONE_NEWUSER is a namespace flag, which is argument 0 (try: clone CLONE_NEWUSER)"},
		{"setns", 0, "CLONE_NEWNET", "argument 0 of setns: CLONE_NEWNET is a namespace flag, which is argument 1 (try: setns 0 CLONE_NEWNET)"},
		{"write", 0, "TIOCSTI", "argument 0 of write: TIOCSTI is an ioctl request, which write does not take (it is argument 1 of ioctl)"},
		{"clone", 0, "CLONE_NEWTIME", "argument 0 of clone: CLONE_NEWTIME is a namespace flag, which clone does not take (it is argument 1 of setns, argument 0 of unshare)"},
		{"unshare", 0, "CLONE_SETTLS", "argument 0 of unshare: CLONE_SETTLS is a clone flag, which unshare does not take (it is argument 0 of clone)"},
		{"personality", 0, "TCGETS", "argument 0 of personality: TCGETS is an ioctl request, which personality does not take (it is argument 1 of ioctl)"},
	} {
		_, err := ArgValue(c.syscall, c.index, c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("ArgValue(%s, %d, %q): %v\nwant %s", c.syscall, c.index, c.in, err, c.want)
		}
	}
}

// TestMaskedIoctlSummary: the default profile's 33 masked ioctl rules read
// as one line, in explain and in diff, naming the two requests they
// refuse; shapes it cannot summarize get none.
func TestMaskedIoctlSummary(t *testing.T) {
	const want = "ALLOW for every value of arg1's low 32 bits except TIOCSTI (0x5412), TIOCLINUX (0x541c)"
	def := filepath.Join("..", "..", "..", "seccomp-profiles", "default.json")
	ex, err := ExplainProfile(def, "ioctl", nil)
	if err != nil || ex.Summary != want {
		t.Fatalf("explain ioctl: summary %q, %v; want %q", ex.Summary, err, want)
	}
	spec, _, err := LoadProfileFile(def)
	if err != nil {
		t.Fatal(err)
	}
	if got := effectiveRules(spec)["ioctl"]; !slices.Equal(got, []string{want}) {
		t.Errorf("diff's view of ioctl: %q", got)
	}
	// Not summarized: a rule on another argument, or an equality test.
	for _, rules := range [][]specs.LinuxSyscall{
		{{Args: []specs.LinuxSeccompArg{{Index: 1, Value: 1, ValueTwo: 1, Op: specs.OpMaskedEqual}}}, {Args: []specs.LinuxSeccompArg{{Index: 2, Value: 1, ValueTwo: 0, Op: specs.OpMaskedEqual}}}},
		{{Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0x5451, Op: specs.OpEqualTo}}}, {Args: []specs.LinuxSeccompArg{{Index: 1, Value: 1, ValueTwo: 1, Op: specs.OpMaskedEqual}}}},
	} {
		if _, _, ok := summarizeMasked(rules); ok {
			t.Errorf("summarized %+v", rules)
		}
	}
	// Bits 0 and 1 set or bit 0 clear: everything but 0b10 in the low bits,
	// which is 2^30 values: too many to list.
	if _, _, ok := summarizeMasked([]specs.LinuxSyscall{
		{Args: []specs.LinuxSeccompArg{{Index: 1, Value: 1, ValueTwo: 1, Op: specs.OpMaskedEqual}}},
		{Args: []specs.LinuxSeccompArg{{Index: 1, Value: 2, ValueTwo: 0, Op: specs.OpMaskedEqual}}},
	}); ok {
		t.Error("summarized a refused set of 2^30 values")
	}
}
