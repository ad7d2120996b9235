//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	return outputs(t, cmd)
}

// asNobody is cli run as uid and gid 65534.
func asNobody(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := cyberos(args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return outputs(t, cmd)
}

// outputs runs cmd and returns its stdout, stderr and exit code.
func outputs(t *testing.T, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && !errors.As(err, new(*exec.ExitError)) {
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
	badYAML := filepath.Join(e.base, "bad-yaml")
	if err := os.MkdirAll(badYAML, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(badYAML, "SKILL.md"), []byte("---\nname: bad\ndescription: x\ntools: [Read\nfiles:\n  read: [\"/tmp\"]\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string // the whole stderr
	}{
		{"serve --check needs a config", []string{"supervisor", "serve", "--check"}, 2,
			"cyberos: --check needs --config FILE: it checks a config file (serve without --config runs on the built-in defaults)\n"},
		{"serve --cgroup-placement", []string{"supervisor", "serve", "--cgroup-placement", "systemd", "--run-dir", e.runDir}, 2,
			`cyberos: --cgroup-placement: "systemd": want auto, service or root` + "\n"},
		{"frontmatter YAML error names the line", []string{"skill", "validate", badYAML}, 2,
			"cyberos: invalid skill " + badYAML + ": frontmatter: invalid YAML at SKILL.md line 5, column 1: ',' or ']' must be specified\n" +
				"   2 | name: bad\n   3 | description: x\n   4 | tools: [Read\n>  5 | files:\n       ^\n   6 |   read: [\"/tmp\"]\n"},
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

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"skill run needs root", run(), "cyberos: skill run must run as root (uid 65534 here): the sandbox needs namespaces, cgroups and mounts; `cyberos doctor` says what this host can enforce\n"},
		{"serve needs root", []string{"supervisor", "serve", "--run-dir", e.runDir}, "cyberos: supervisor serve must run as root (uid 65534 here): it creates namespaces, cgroups and mounts for every sandbox; `cyberos doctor` says what this host can enforce\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := asNobody(t, c.args...)
			if code != 3 || stderr != c.want {
				t.Errorf("as uid 65534: exit %d, stderr %q\nstdout %s", code, stderr, out)
			}
		})
	}

	t.Run("doctor", func(t *testing.T) {
		// As root, with a daemon answering: where that daemon makes its
		// sandboxes' cgroups, as it logged at start.
		d := startDaemon(t, e)
		out, _, code := cli(t, nil, "doctor", "--socket", d.adminSocket)
		where := regexp.MustCompile(`msg="sandbox cgroups" where="((?:[^"\\]|\\.)*)"`).FindStringSubmatch(d.logs.String())
		if where == nil {
			t.Fatalf("the daemon did not log where its sandbox cgroups go:\n%s", d.logs.String())
		}
		where[1] = strings.ReplaceAll(where[1], `\"`, `"`)
		want := []string{
			"ok   user                     root, as skill run and supervisor serve need (namespaces, cgroups, mounts)",
			"ok   daemon cgroups           the daemon on " + d.adminSocket + " makes sandboxes " + where[1],
		}
		for _, w := range want {
			if code != 0 || !slices.Contains(strings.Split(out, "\n"), w) {
				t.Errorf("doctor: exit %d, no line %q in\n%s", code, w, out)
			}
		}
		d.stop(slow(20 * time.Second))
		out, _, _ = cli(t, nil, "doctor", "--socket", d.adminSocket)
		if w := "ok   daemon cgroups           no daemon answers on " + d.adminSocket + ": the cgroup placement above is this process's own"; !slices.Contains(strings.Split(out, "\n"), w) {
			t.Errorf("doctor with no daemon: no line %q in\n%s", w, out)
		}
		b, _, _ := asNobody(t, "doctor")
		w := "NO   user                     uid 65534, not root: skill run and supervisor serve refuse to start (they need namespaces, cgroups, mounts); the findings below are what root would get"
		if !slices.Contains(strings.Split(b, "\n"), w) {
			t.Errorf("doctor as uid 65534: no line %q in\n%s", w, b)
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

// TestBrokerTailSkillAndAll: `skill broker tail --all` follows every
// invocation from now on (start, tool calls, end), `--skill NAME` only
// that skill's, so an operator need not fish an invocation id out of
// status first.
func TestBrokerTailSkillAndAll(t *testing.T) {
	e := newEnv(t)
	callsSkill(e, "calls")
	e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	d := startDaemon(t, e)
	// follow starts a tail with args (JSON lines unless human) and waits
	// for its first line, which starts with watching.
	follow := func(human bool, args ...string) <-chan string {
		argv := []string{"skill", "broker", "tail", "--socket", d.adminSocket}
		if !human {
			argv = append(argv, "--json")
		}
		cmd := cyberos(append(argv, args...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		select {
		case l := <-lines:
			if !strings.Contains(l, `"type":"watching"`) && !strings.HasPrefix(l, "watching ") {
				t.Fatalf("tail %v: first line %s", args, l)
			}
		case <-time.After(slow(10 * time.Second)):
			t.Fatalf("tail %v: no watching line", args)
		}
		return lines
	}
	all := follow(false, "--all")
	one := follow(false, "--skill", "calls")
	human := follow(true, "--skill", "quick")
	for _, s := range []string{"calls", "quick"} {
		if code, env, raw := d.invoke(map[string]any{"skill_id": s}); code != 200 || env.Outcome != "success" {
			t.Fatalf("%s: %d %s", s, code, raw)
		}
	}
	read := func(ch <-chan string, until string) []string {
		var got []string
		deadline := time.After(slow(10 * time.Second))
		for {
			select {
			case l := <-ch:
				var ev struct {
					Type    string `json:"type"`
					SkillID string `json:"skill_id"`
				}
				_ = json.Unmarshal([]byte(l), &ev)
				got = append(got, ev.Type+":"+ev.SkillID)
				if ev.Type+":"+ev.SkillID == until {
					return got
				}
			case <-deadline:
				t.Fatalf("no %s within the deadline; got %v", until, got)
				return nil
			}
		}
	}
	gotAll := read(all, "invocation_ended:quick")
	gotOne := read(one, "invocation_ended:calls")
	if len(gotAll) < 6 || gotAll[0] != "invocation_started:calls" || !slices.Contains(gotAll, "tool_call:calls") || !slices.Contains(gotAll, "invocation_started:quick") {
		t.Errorf("tail --all: %v", gotAll)
	}
	for _, g := range gotOne {
		if !strings.HasSuffix(g, ":calls") {
			t.Errorf("tail --skill calls got %s: %v", g, gotOne)
		}
	}
	// The human form, line by line (the id and time vary).
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^quick  \d{4}-\d\d-\d\dT\S+Z  started   [0-9A-Z]{26} \(tenant [0-9a-f-]{36}\)$`),
		regexp.MustCompile(`^quick  \d{4}-\d\d-\d\dT\S+Z  ended     [0-9A-Z]{26} success$`),
	} {
		select {
		case l := <-human:
			if !want.MatchString(l) {
				t.Errorf("tail --skill quick: %q, want %s", l, want)
			}
		case <-time.After(slow(10 * time.Second)):
			t.Fatalf("tail --skill quick: no line like %s", want)
		}
	}
	_, stderr, code := cli(t, nil, "skill", "broker", "tail", "--all", "--skill", "calls", "--socket", d.adminSocket)
	if code != 2 || stderr != "cyberos: give one of --invocation ID, --skill NAME or --all\n" {
		t.Errorf("tail --all --skill: exit %d %q", code, stderr)
	}
}

// TestSkillList: `skill list` shows each installed skill with its version
// and what its policy allows, and names the folders that are not usable.
func TestSkillList(t *testing.T) {
	e := newEnv(t)
	callsSkill(e, "calls")
	e.skill("quick", "version: 2.1.0\neffort_minutes: 3\n", "#!/bin/sh\necho '{}'\n")
	bad := filepath.Join(e.base, "skills", "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "SKILL.md"), []byte("---\nname: other\ndescription: x\n---\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "main"), []byte("#!/bin/sh\n"), 0o755)
	d := startDaemon(t, e)
	out, stderr, code := cli(t, nil, "skill", "list", "--socket", d.adminSocket)
	if code != 0 {
		t.Fatalf("skill list: exit %d %s", code, stderr)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	want := [][]string{
		{"SKILL", "VERSION", "KIND", "TOOLS", "MEMORY", "FILES", "DOMAINS", "EFFORT"},
		{"calls", "0.0.0", "tool", "Read", "-", filepath.Join(e.base, "data-calls") + "/**", "-", "5m"},
		{"quick", "2.1.0", "tool", "-", "-", "-", "-", "3m"},
		{"not", "usable:", "bad:", "the", "frontmatter", "name", `"other"`, "is", "not", "the", "folder", "name"},
	}
	if len(rows) != len(want) {
		t.Fatalf("skill list:\n%s", out)
	}
	for i := range want {
		if !slices.Equal(rows[i], want[i]) {
			t.Errorf("line %d: %v, want %v\n%s", i, rows[i], want[i], out)
		}
	}
	jsonOut, _, code := cli(t, nil, "skill", "list", "--json", "--socket", d.adminSocket)
	var list struct {
		Skills []struct {
			Name         string `json:"name"`
			AllowedTools []struct {
				Tool string `json:"tool"`
			} `json:"allowed_tools"`
		} `json:"skills"`
	}
	if code != 0 || json.Unmarshal([]byte(jsonOut), &list) != nil || len(list.Skills) != 2 || list.Skills[0].AllowedTools[0].Tool != "Read" {
		t.Errorf("skill list --json: exit %d\n%s", code, jsonOut)
	}
}
