//go:build linux

package integration

// Issue 41.2: the first-hour commands at top level (ps, status, events,
// replay, serve), a dial error that says what is wrong and how to start the
// daemon, and a failed run's human output ending with its stderr.

import (
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCLIDialErrors(t *testing.T) {
	e := newEnv(t)
	hint := "start it with `systemctl start cyberos` or `cyberos serve --config FILE`, or name another socket with --socket or $CYBEROS_SOCKET\n"
	missing := filepath.Join(e.base, "missing.sock")
	for _, args := range [][]string{{"ps"}, {"status"}, {"skill", "broker", "status"}, {"skill", "list"}} {
		_, stderr, code := cli(t, nil, append(args, "--socket", missing)...)
		if want := "cyberos: no daemon: the admin socket " + missing + " does not exist; " + hint; code != 3 || stderr != want {
			t.Errorf("%v, no socket: exit %d, stderr\n%q\nwant exit 3,\n%q", args, code, stderr, want)
		}
	}
	// A socket file nobody listens on: what a crashed daemon leaves.
	stale := filepath.Join(e.base, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	_, stderr, code := cli(t, nil, "ps", "--socket", stale)
	if want := "cyberos: no daemon: the admin socket " + stale + " refuses connections (the daemon stopped or crashed?); " + hint; code != 3 || stderr != want {
		t.Errorf("ps, stale socket: exit %d, stderr\n%q\nwant exit 3,\n%q", code, stderr, want)
	}
}

func TestCLITopLevelCommands(t *testing.T) {
	e := newEnv(t)
	callsSkill(e, "calls")
	e.skill("sleeper", "", "#!/bin/sh\necho 'sleeper: waiting for the deadline' >&2\nsleep 60\n")
	d := startDaemon(t, e)
	sock := []string{"--socket", d.adminSocket}

	// serve is the daemon's name; supervisor serve its alias.
	_, stderr, code := cli(t, nil, "serve", "--check")
	if want := "cyberos: --check needs --config FILE: it checks a config file (serve without --config runs on the built-in defaults)\n"; code != 2 || stderr != want {
		t.Errorf("serve --check: exit %d, stderr %q", code, stderr)
	}

	// ps while one invocation runs.
	done := make(chan envelope, 1)
	go func() {
		_, env, _ := d.invoke(map[string]any{"skill_id": "sleeper", "deadline_ms": 6000})
		done <- env
	}()
	// Wait for ps -q to list the invocation.
	var id string
	waitFor(t, 15*time.Second, func() bool {
		out, _, _ := cli(t, nil, append([]string{"ps", "-q"}, sock...)...)
		id = strings.TrimSpace(out)
		return id != ""
	})
	if strings.Contains(id, "\n") {
		t.Fatalf("ps -q: %q, want the running invocation's id", id)
	}
	out, _, code := cli(t, nil, append([]string{"ps"}, sock...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[0])[:3], []string{"INVOCATION", "SKILL", "TENANT"}) || !slices.Equal(strings.Fields(lines[1])[:2], []string{id, "sleeper"}) {
		t.Errorf("ps: exit %d\n%s", code, out)
	}
	out, _, code = cli(t, nil, append([]string{"ps", "-o", "json"}, sock...)...)
	var ps []struct {
		InvocationID string `json:"invocation_id"`
		SkillID      string `json:"skill_id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ps) != nil || len(ps) != 1 || ps[0].InvocationID != id || ps[0].SkillID != "sleeper" {
		t.Errorf("ps -o json: exit %d\n%s", code, out)
	}
	out, _, code = cli(t, nil, append([]string{"status"}, sock...)...)
	if code != 0 || !strings.HasPrefix(out, "running      1 invocations\n") || !strings.Contains(out, id+"  sleeper") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	out, _, code = cli(t, nil, append([]string{"status", "-o", "json"}, sock...)...)
	var st statusJSON
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.ActiveInvocations != 1 {
		t.Errorf("status -o json: exit %d\n%s", code, out)
	}
	_, stderr, code = cli(t, nil, append([]string{"ps", "-o", "yaml"}, sock...)...)
	if code != 2 || stderr != "cyberos: --output: \"yaml\": want table or json\n" {
		t.Errorf("ps -o yaml: exit %d, stderr %q", code, stderr)
	}
	// logs -f waits for the running invocation's end, then prints its stderr.
	logs := make(chan string, 1)
	go func() {
		out, stderr, code := cli(t, nil, append([]string{"logs", "-f", id}, sock...)...)
		logs <- out + stderr + "exit " + strconv.Itoa(code)
	}()
	if env := <-done; env.Outcome != "timeout" {
		t.Errorf("sleeper: outcome %q, want timeout", env.Outcome)
	}
	if got := <-logs; got != "sleeper: waiting for the deadline\nexit 0" {
		t.Errorf("logs -f: %q", got)
	}
	out, _, code = cli(t, nil, append([]string{"logs", id}, sock...)...)
	if code != 0 || out != "sleeper: waiting for the deadline\n" {
		t.Errorf("logs: exit %d %q", code, out)
	}
	// inspect: the invocation's record from the audit.
	out, _, code = cli(t, nil, append([]string{"inspect", id}, sock...)...)
	var rec map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec["invocation_id"] != id || rec["skill_id"] != "sleeper" || rec["outcome"] != "timeout" || rec["running"] != false || rec["containment"] == nil {
		t.Errorf("inspect: exit %d\n%s", code, out)
	}
	// ps -a: the ended one, with its outcome.
	out, _, code = cli(t, nil, append([]string{"ps", "-a"}, sock...)...)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[1])[:4], []string{id, "sleeper", "00000000-0000-0000-0000-000000000000", "timeout"}) {
		t.Errorf("ps -a: exit %d\n%s", code, out)
	}
	// An invocation nobody ran.
	const none = "01M00000000000000000000000"
	for _, args := range [][]string{{"inspect", none}, {"logs", none}} {
		_, stderr, code := cli(t, nil, append(args, sock...)...)
		if code != 2 || !strings.Contains(stderr, none) || !strings.Contains(stderr, "HTTP 404") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming it, HTTP 404", args, code, stderr)
		}
	}

	// replay ID prints what skill broker replay --invocation ID does.
	code, env, raw := d.invoke(map[string]any{"skill_id": "calls"})
	if code != 200 || env.Outcome != "success" {
		t.Fatalf("calls: %d %s", code, raw)
	}
	top, _, code := cli(t, nil, append([]string{"replay", env.InvocationID}, sock...)...)
	old, _, code2 := cli(t, nil, append([]string{"skill", "broker", "replay", "--invocation", env.InvocationID}, sock...)...)
	if code != 0 || code2 != 0 || top != old || !strings.Contains(top, "Read") {
		t.Errorf("replay ID: exit %d\n%s\nskill broker replay: exit %d\n%s", code, top, code2, old)
	}
}

// TestFailedRunShowsStderr: a failed run's human output ends with the last
// ten lines of the skill's stderr, which say why.
func TestFailedRunShowsStderr(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("crash", "", "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo \"line $i\" >&2; done\nexit 7\n")
	out, _, code := cli(t, nil, "skill", "run", dir, "--state-dir", e.stateDir, "--run-dir", e.runDir, "--seccomp-profiles", filepath.Join(repoRoot, "seccomp-profiles"))
	want := []string{"stderr (last 10 lines):"}
	for i := 3; i <= 12; i++ {
		want = append(want, "  line "+strconv.Itoa(i))
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 1 || len(lines) < len(want) || !slices.Equal(lines[len(lines)-len(want):], want) {
		t.Errorf("skill run of a failing skill: exit %d, want 1 and output ending\n%s\ngot\n%s", code, strings.Join(want, "\n"), out)
	}
}
