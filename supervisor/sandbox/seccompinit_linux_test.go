package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/internal/seccomp"
)

// hostInit builds cyberos-init into a new directory with mode dirMode
// (unprivileged users run it from there) and returns both paths.
func hostInit(t *testing.T, dirMode os.FileMode) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cyberos-init-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, dirMode); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "cyberos-init")
	if out, err := testutil.BuildInit(bin, filepath.Join("..", "..", "sandbox-init", "cyberos-init.c")).CombinedOutput(); err != nil {
		t.Fatalf("build cyberos-init: %v\n%s", err, out)
	}
	return dir, bin
}

// runHostInit runs cyberos-init on the host with args; files lays out its
// ExtraFiles (fd 3 on) given the write end of a status pipe. It returns the
// exit code, what init wrote to the status pipe, and its stderr.
func runHostInit(t *testing.T, initBin string, args []string, files func(status *os.File) []*os.File, attr *syscall.SysProcAttr) (code int, status, stderr string) {
	t.Helper()
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	cmd := exec.Command(initBin, args...)
	cmd.ExtraFiles = files(sw)
	cmd.SysProcAttr = attr
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	_ = cmd.Run()
	sw.Close()
	b, _ := io.ReadAll(sr)
	return cmd.ProcessState.ExitCode(), string(b), errBuf.String()
}

// TestInitLoadsSeccompOrStartsNothing runs the real cyberos-init outside a
// sandbox with --seccomp: as root it loads default.json's program and the
// program it starts runs filtered (Seccomp: 2, and a call default.json
// refuses gets EPERM); with a program the kernel refuses (an unprivileged
// user without no_new_privs, a malformed program) it reports "seccomp
// ERRNO" on fd 3 (stderr with --exec), exits 127 and starts nothing.
func TestInitLoadsSeccompOrStartsNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, initBin := hostInit(t, 0o777) // the unprivileged user writes the marker there
	cfg, hash, err := seccomp.LoadProfileHashed(filepath.Join("..", "..", "seccomp-profiles"), "default")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccomp.ProgramFor(hash, cfg)
	if err != nil {
		t.Fatal(err)
	}
	malformed := &seccomp.Program{Insns: prog.Insns[:12]}
	marker := filepath.Join(dir, "ran")
	// The started program records its Seccomp mode, then tries unshare(0),
	// which default.json refuses.
	script := "grep '^Seccomp:' /proc/self/status > " + marker + "; unshare true 2>>" + marker + "; echo unshare=$? >> " + marker

	run := func(p *seccomp.Program, unprivileged, execMode bool) (code int, status, stderr string) {
		t.Helper()
		os.Remove(marker)
		f, err := p.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		args := []string{"--seccomp", fmt.Sprintf("%d:%d", initFilterFD, p.Flags), "--", "/bin/sh", "-c", script}
		files := func(status *os.File) []*os.File { return []*os.File{status, nil, f} } // fds 3, 4 (closed) and initFilterFD
		if execMode {
			args = []string{"--seccomp", fmt.Sprintf("%d:%d", execFilterFD, p.Flags), "--exec", "--", "/bin/sh", "-c", script}
			files = func(*os.File) []*os.File { return []*os.File{f} }
		}
		var attr *syscall.SysProcAttr
		if unprivileged {
			attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		return runHostInit(t, initBin, args, files, attr)
	}

	code, status, stderr := run(prog, false, false)
	got, _ := os.ReadFile(marker)
	if code != 0 || status != "exit 0\n" || !strings.Contains(string(got), "Seccomp:\t2") || !strings.Contains(string(got), "unshare=1") {
		t.Errorf("root, default.json: exit %d, status %q, stderr %q, the program saw %q; want it run under the filter", code, status, stderr, got)
	}
	for _, c := range []struct {
		name               string
		prog               *seccomp.Program
		unprivileged, exec bool
		errno              syscall.Errno
	}{
		{"unprivileged without no_new_privs", prog, true, false, syscall.EACCES},
		{"malformed program", malformed, false, false, syscall.EINVAL},
		{"--exec, unprivileged without no_new_privs", prog, true, true, syscall.EACCES},
	} {
		code, status, stderr := run(c.prog, c.unprivileged, c.exec)
		wantStatus := fmt.Sprintf("seccomp %d\n", int(c.errno))
		if c.exec {
			wantStatus = ""
		}
		if code != 127 || status != wantStatus || !strings.Contains(strings.ToLower(stderr), "seccomp: "+c.errno.Error()) {
			t.Errorf("%s: exit %d, status %q, stderr %q; want 127, %q and the errno on stderr", c.name, code, status, stderr, wantStatus)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("%s: the program ran although its filter was not loaded", c.name)
		}
	}
}

// TestInitIsNotTraceableByTheSkillsUID: cyberos-init runs before its
// seccomp filter is loaded, and in a running sandbox (a Bash command's
// cyberos-init --exec) a skill of the same uid lives beside it; if the
// skill could ptrace it (a profile allowing ptrace, no Landlock) it could
// run code there unfiltered. The runner's execute-only copy and init's own
// prctl keep it non-dumpable: a ptrace attach from its uid gets EPERM, while
// the same attach on another process of that uid succeeds.
func TestInitIsNotTraceableByTheSkillsUID(t *testing.T) {
	testutil.RequiresRoot(t)
	dir, built := hostInit(t, 0o711)
	initBin, err := copyBinary(built, dir, "cyberos-init", initMode)
	if err != nil {
		t.Fatal(err)
	}
	tracerSrc := filepath.Join(dir, "tracer.c")
	if err := os.WriteFile(tracerSrc, []byte(`#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
int main(int argc, char **argv) {
	if (argc != 2) return 2;
	if (ptrace(PTRACE_ATTACH, atoi(argv[1]), 0, 0) == 0) { puts("attached"); return 0; }
	printf("errno %d\n", errno);
	return 1;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tracer := filepath.Join(dir, "tracer")
	if out, err := exec.Command("gcc", "-O2", "-o", tracer, tracerSrc).CombinedOutput(); err != nil {
		t.Fatalf("build tracer: %v\n%s", err, out)
	}
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	attach := func(pid int) string {
		t.Helper()
		cmd := exec.Command(tracer, fmt.Sprint(pid))
		cmd.SysProcAttr = nobody
		out, _ := cmd.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	// started runs cmd as nobody and waits until it runs path (its exec done).
	started := func(cmd *exec.Cmd, path string) {
		t.Helper()
		cmd.SysProcAttr = nobody
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 5*time.Second, func() bool {
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
			return exe == path
		})
	}

	// The control: a plain process of that uid can be attached.
	sleeper := exec.Command("/bin/sleep", "60")
	started(sleeper, "/usr/bin/sleep")
	got := attach(sleeper.Process.Pid)
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	if got != "attached" {
		t.Fatalf("the tracer cannot attach to a sleep of its own uid (%q): the test proves nothing here", got)
	}

	// cyberos-init waiting for its invocation (a warm sandbox's state).
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	controlR, controlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	initCmd := exec.Command(initBin, "--control", "--", "/bin/true")
	initCmd.ExtraFiles = []*os.File{statusW, controlR}
	started(initCmd, initBin)
	statusW.Close()
	controlR.Close()
	got = attach(initCmd.Process.Pid)
	traced := got == "attached"
	if traced {
		_ = initCmd.Process.Kill() // left stopped by its tracer's exit
	}
	controlW.Close() // discarded unused: init exits 0
	waitErr := initCmd.Wait()
	statusR.Close()
	if got != fmt.Sprintf("errno %d", int(syscall.EPERM)) {
		t.Errorf("ptrace attach to cyberos-init from its uid: %q, want errno %d (EPERM)", got, int(syscall.EPERM))
	}
	if waitErr != nil && !traced {
		t.Errorf("cyberos-init: %v, want exit 0 after its control pipe closed unused", waitErr)
	}
}

// TestProfileBeyondTheCompilerIsStillLoaded: a profile that also lists an
// architecture seccomp.Compile does not know (riscv64) is loaded by
// libcontainer's init as before, not dropped: the skill runs filtered and
// a call the profile refuses gets EPERM.
func TestProfileBeyondTheCompilerIsStillLoaded(t *testing.T) {
	w := newWorld(t)
	data, err := os.ReadFile(filepath.Join(w.profiles, "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"flags": [],`, `"flags": [], "architectures": ["SCMP_ARCH_RISCV64"],`, 1))
	profiles := filepath.Join(w.base, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "riscv.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, hash, err := seccomp.LoadProfileHashed(profiles, "riscv")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seccomp.ProgramFor(hash, cfg); !errors.Is(err, seccomp.ErrUnsupportedProgram) {
		t.Fatalf("ProgramFor(riscv64 in architectures) = %v, want ErrUnsupportedProgram", err)
	}
	skill := filepath.Join(w.base, "skill-status")
	if err := os.MkdirAll(skill, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ngrep '^Seccomp:' /proc/self/status\nunshare true 2>/dev/null; echo unshare=$?\n"
	if err := os.WriteFile(filepath.Join(skill, "main"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	spec := w.spec(fmt.Sprintf("riscv-%d", os.Getpid()), &out)
	spec.SkillDir, spec.ProfilesDir, spec.SeccompProfile = skill, profiles, "riscv"
	defer w.reserve(t, spec)()
	p, err := w.runner.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	_ = p.Close()
	if err != nil || ex.Code != 0 || !strings.Contains(out.String(), "Seccomp:\t2") || !strings.Contains(out.String(), "unshare=1") {
		t.Errorf("exit %+v %v, output %q; want the skill run under the profile (Seccomp 2, unshare refused)", ex, err, out.String())
	}
}
