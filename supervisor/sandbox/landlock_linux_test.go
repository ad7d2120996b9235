package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"

	"cyberos.dev/internal/testutil"
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
			args := withControl(p.initArgs(true))
			if args[0] != InitBinPath || args[len(args)-1] != "--" || !slices.Contains(args, "--exec") || !slices.Contains(args, "--control") ||
				slices.Contains(args, "--landlock") != (p.ABI > 0) {
				t.Errorf("init args %v for plan %+v", args, p)
			}
		})
	}
}

// BenchmarkLandlockStart: cold start (create, start, wait, destroy) of
// /bin/true under the default profile, with Landlock applied by
// cyberos-init and without (the same profile minus the landlock_*
// syscalls), interleaved in one run; medians and the ratio.
func BenchmarkLandlockStart(b *testing.B) {
	w := newWorld(b)
	dir := filepath.Join(w.base, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(w.profiles, "default.json"))
	if err != nil {
		b.Fatal(err)
	}
	var prof map[string]any
	if err := json.Unmarshal(src, &prof); err != nil {
		b.Fatal(err)
	}
	for _, s := range prof["syscalls"].([]any) {
		rule := s.(map[string]any)
		rule["names"] = slices.DeleteFunc(rule["names"].([]any), func(n any) bool { return slices.Contains(landlockSyscalls, n.(string)) })
	}
	stripped, _ := json.Marshal(prof)
	for name, body := range map[string][]byte{"default.json": src, "nolandlock.json": stripped} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	run := func(profile, id string) time.Duration {
		spec := w.spec(id, io.Discard)
		spec.ProfilesDir, spec.SeccompProfile = dir, profile
		t0 := time.Now()
		p, err := w.runner.Start(spec)
		if err != nil {
			b.Fatal(err)
		}
		if ex, err := p.Wait(); err != nil || ex.Code != 0 {
			b.Fatalf("%s: %+v %v", profile, ex, err)
		}
		if (profile == "default") != strings.HasPrefix(p.Containment().Landlock, "ABI ") {
			b.Fatalf("%s: landlock %q", profile, p.Containment().Landlock)
		}
		p.Close()
		return time.Since(t0)
	}
	run("default", fmt.Sprintf("ll-warm-%d", os.Getpid()))
	samples := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, prof := range []string{"default", "nolandlock"} {
			samples[prof] = append(samples[prof], run(prof, fmt.Sprintf("ll-%s-%d-%d", prof, os.Getpid(), i)))
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(median(samples["default"])), "landlock-median-ms")
	b.ReportMetric(ms(median(samples["nolandlock"])), "no-landlock-median-ms")
	b.ReportMetric(float64(median(samples["default"]))/float64(median(samples["nolandlock"])), "landlock/no-landlock")
	b.ReportMetric(0, "ns/op")
}

// TestInitReportsFailures: cyberos-init's "landlock ERRNO" and "seccomp
// ERRNO" lines (it could not apply what it was asked for, and did not start
// the skill) become an ExecError naming what failed, so the outcome is an
// error, never a success without the recorded containment.
func TestInitReportsFailures(t *testing.T) {
	for _, c := range []struct {
		line, names string
		errno       syscall.Errno
	}{{"landlock", "Landlock", syscall.EPERM}, {"seccomp", "seccomp", syscall.EACCES}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "%s %d\n", c.line, int(c.errno))
		w.Close()
		ex, ok := readInitStatus(r)
		r.Close()
		if !ok || ex.Code != 127 || !strings.Contains(ex.ExecError, c.names) || !strings.Contains(ex.ExecError, c.errno.Error()) {
			t.Errorf("%s: readInitStatus = %+v, %v; want an ExecError naming %s and the errno", c.line, ex, ok, c.names)
		}
	}
}

// TestInitFailsClosedWithoutLandlock runs the real cyberos-init outside a
// sandbox as an unprivileged user without no_new_privs, where the kernel
// refuses landlock_restrict_self (EPERM): init reports "landlock 1" on fd 3,
// exits 127, and the program it was to start never runs.
func TestInitFailsClosedWithoutLandlock(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := kernelLandlockABI(); err != nil {
		t.Fatalf("this kernel has no Landlock (%v); the test needs it", err)
	}
	// t.TempDir's parent is private; the unprivileged user must reach init.
	dir, initBin := hostInit(t, 0o777)
	marker := filepath.Join(dir, "ran")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(initBin, "--landlock", "1", "--", "/bin/sh", "-c", "touch "+marker)
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	runErr := cmd.Run()
	w.Close()
	status, _ := io.ReadAll(r)
	r.Close()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 127 || string(status) != fmt.Sprintf("landlock %d\n", int(syscall.EPERM)) {
		t.Errorf("init: %v, status %q; want exit 127 and \"landlock 1\"", runErr, status)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran although Landlock could not be applied")
	}
}

// TestControlMessage: the deadline backstop (deadline plus
// DeadlineBackstop) then the environment, each NUL-terminated, then an
// empty field; an entry
// cyberos-init could not pass on, or a message over its bound, is refused.
func TestControlMessage(t *testing.T) {
	b, err := controlMessage(Activation{Deadline: 2 * time.Second, Env: []string{"A=1", "B=x=y"}})
	if err != nil || string(b) != "3000\x00A=1\x00B=x=y\x00\x00" {
		t.Fatalf("message %q %v", b, err)
	}
	if b, err := controlMessage(Activation{}); err != nil || string(b) != "0\x00\x00" {
		t.Fatalf("no deadline, no env: %q %v", b, err)
	}
	for _, env := range [][]string{{"NOEQUALS"}, {"A=1\x00B=2"}, {"A=" + strings.Repeat("x", maxControl)}} {
		if _, err := controlMessage(Activation{Env: env}); err == nil {
			t.Errorf("env %.40q: accepted", env)
		}
	}
}
