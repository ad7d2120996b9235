package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cli runs cyberos with args (and env added) and returns stdout, stderr and
// the exit code.
func cli(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := cyberos(args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errb.String(), exitCode(err)
}

// TestCLIGolden: each new command's output and each message fixed for an
// operator's first day, word for word where it is deterministic.
func TestCLIGolden(t *testing.T) {
	e := newEnv(t)
	hello := filepath.Join(repoRoot, "examples", "hello-shell")
	run := func(extra ...string) []string {
		return append([]string{"skill", "run", hello, "--state-dir", e.stateDir, "--run-dir", e.runDir, "--seccomp-profiles", filepath.Join(repoRoot, "seccomp-profiles")}, extra...)
	}

	t.Run("version", func(t *testing.T) {
		out, _, code := cli(t, nil, "version")
		re := regexp.MustCompile(`^cyberos \S+\ncommit  \S+.*\ngo      go1\.\S+ linux/amd64\n$`)
		if code != 0 || !re.MatchString(out) {
			t.Errorf("version: exit %d\n%s", code, out)
		}
		flag, _, code := cli(t, nil, "--version")
		if code != 0 || flag != out {
			t.Errorf("--version: exit %d, %q; want what version prints, %q", code, flag, out)
		}
	})
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string // the whole stderr
	}{
		{"traceparent is a request error", run("--traceparent", "bogus"), 2,
			`cyberos: invalid request: traceparent "bogus": invalid traceparent: too short (want 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)` + "\n"},
		{"tenant must be a UUID", run("--tenant", "t1"), 2,
			`cyberos: invalid request: tenant "t1": must be a UUID (8-4-4-4-12 hex digits)` + "\n"},
		{"state dir parent missing", run("--state-dir", filepath.Join(e.base, "typo", "state")), 3,
			"cyberos: --state-dir " + filepath.Join(e.base, "typo", "state") + " does not exist, and " + filepath.Join(e.base, "typo") + " does not exist\n"},
		{"log format", []string{"supervisor", "serve", "--log-format", "xml", "--run-dir", e.runDir}, 2,
			`cyberos: --log-format: "xml": want text or json` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := cli(t, nil, c.args...)
			if code != c.code || stderr != c.stderr {
				t.Errorf("%v: exit %d, stderr\n%q\nwant exit %d, stderr\n%q\nstdout %s", c.args, code, stderr, c.code, c.stderr, out)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(e.base, "typo")); err == nil {
		t.Errorf("skill run made %s for a state dir whose parent is missing", filepath.Join(e.base, "typo"))
	}

	t.Run("skill run needs root", func(t *testing.T) {
		cmd := cyberos(run()...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		want := "cyberos: skill run must run as root (uid 65534 here): the sandbox needs namespaces, cgroups and mounts; `cyberos doctor` says what this host can enforce\n"
		if exitCode(err) != 3 || errb.String() != want {
			t.Errorf("as uid 65534: exit %d, stderr %q", exitCode(err), errb.String())
		}
	})

	t.Run("CYBEROS_SOCKET", func(t *testing.T) {
		d := startDaemon(t, e)
		out, stderr, code := cli(t, []string{"CYBEROS_SOCKET=" + d.adminSocket}, "skill", "broker", "status")
		var st map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Errorf("status with CYBEROS_SOCKET: exit %d\n%s%s", code, out, stderr)
		}
		missing := filepath.Join(e.base, "nosuch.sock")
		_, stderr, code = cli(t, []string{"CYBEROS_SOCKET=" + missing}, "skill", "broker", "status")
		if code == 0 || !strings.Contains(stderr, missing) {
			t.Errorf("status with CYBEROS_SOCKET at nothing: exit %d, stderr %q (want it named)", code, stderr)
		}
	})

	t.Run("log format json", func(t *testing.T) {
		d := startDaemonWith(t, e, daemonStart{args: []string{"--log-format", "json"}})
		d.stop(slow(20 * time.Second))
		lines := strings.Split(strings.TrimSpace(d.logs.String()), "\n")
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil || m["level"] == nil {
				t.Errorf("not a JSON log line: %q", l)
			}
		}
		if len(lines) < 3 {
			t.Errorf("%d log lines", len(lines))
		}
	})
}
