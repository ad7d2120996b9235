//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit/auditstore"
)

// TestServeCheckRefusesWhatServeRefuses: for each config that names a path
// serve cannot use, `serve --check` exits 2 naming the key, and `serve`
// itself exits 2 with the same message before it changes anything (no
// admin socket, no audit store). A config `--check` calls valid was once
// refused by serve: a systemd restart loop.
func TestServeCheckRefusesWhatServeRefuses(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(e.base, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbageKey := filepath.Join(e.base, "etc", "garbage.key")
	os.MkdirAll(filepath.Dir(garbageKey), 0o755)
	if err := os.WriteFile(garbageKey, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		extra []string
		want  []string // in the message, each
		env   []string
	}{
		{"metrics_listen port out of range", []string{"metrics_listen: 127.0.0.1:99999"}, []string{`metrics_listen: "127.0.0.1:99999": the port must be a number from 0 to 65535`}, nil},
		{"metrics_listen not a local address", []string{"metrics_listen: 192.0.2.1:9464"}, []string{"metrics_listen: 192.0.2.1:9464 cannot be listened on:", "cannot assign requested address"}, nil},
		{"OTLP protocol not built in", nil, []string{"otlp: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: only http/protobuf is built in"},
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}},
		{"skills_dir missing", []string{"skills_dir: " + filepath.Join(e.base, "nosuch")}, []string{"skills_dir: " + filepath.Join(e.base, "nosuch") + " does not exist"}, nil},
		{"skills_dir a file", []string{"skills_dir: " + file}, []string{"skills_dir: " + file + " is not a directory"}, nil},
		{"profiles dir missing", []string{"seccomp_profiles_dir: /nonexistent/profiles"}, []string{"seccomp_profiles_dir: /nonexistent/profiles does not exist"}, nil},
		{"default profile missing", []string{"defaults:", "  seccomp_profile: nosuch"}, []string{"defaults.seccomp_profile:", "nosuch.json"}, nil},
		{"state_dir parent missing", []string{"state_dir: " + filepath.Join(e.base, "typo", "state")}, []string{"state_dir: " + filepath.Join(e.base, "typo", "state") + " does not exist, and " + filepath.Join(e.base, "typo") + " does not exist"}, nil},
		{"socket_dir under a file", []string{"socket_dir: " + filepath.Join(file, "sockets")}, []string{"socket_dir: " + filepath.Join(file, "sockets") + " does not exist, and " + file + " is not a directory"}, nil},
		{"admin_socket a file", []string{"admin_socket: " + file}, []string{"admin_socket: " + file + " exists and is not a socket"}, nil},
		{"signing key not a key", []string{"audit:", "  signing_key: " + garbageKey}, []string{"audit.signing_key:"}, nil},
		{"two problems, both named", []string{"skills_dir: " + filepath.Join(e.base, "nosuch"), "seccomp_profiles_dir: /nonexistent/profiles"},
			[]string{"skills_dir: " + filepath.Join(e.base, "nosuch"), "seccomp_profiles_dir: /nonexistent/profiles"}, nil},
	}
	os.MkdirAll(filepath.Join(e.base, "skills"), 0o755)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(e.base, "etc", strings.ReplaceAll(c.name, " ", "-")+".yaml")
			// Each case its own state dir and admin socket unless it sets
			// them, so "nothing changed" is about this case only.
			state := filepath.Join(e.base, "state-"+string(rune('a'+i)))
			admin := filepath.Join(e.base, "admin-"+string(rune('a'+i))+".sock")
			extra := append([]string{"state_dir: " + state, "admin_socket: " + admin}, c.extra...)
			if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t), dedupKeys(extra)...)), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, check := range []bool{true, false} {
				args := []string{"supervisor", "serve", "--config", cfg, "--run-dir", e.runDir}
				if check {
					args = append(args, "--check")
				}
				out, code := runEnvFor(t, 20*time.Second, c.env, args...)
				if code != 2 {
					t.Fatalf("%v: exit %d, want 2 (refused)\n%s", args, code, out)
				}
				for _, w := range c.want {
					if !strings.Contains(out, w) {
						t.Errorf("%v: the message does not say %q:\n%s", args, w, out)
					}
				}
				if strings.Contains(out, "valid") && !strings.Contains(out, "invalid") {
					t.Errorf("%v: says valid:\n%s", args, out)
				}
			}
			if _, err := os.Lstat(admin); err == nil {
				t.Errorf("serve made the admin socket %s before refusing the config", admin)
			}
			if _, err := os.Stat(filepath.Join(state, auditstore.FileName)); err == nil {
				t.Errorf("serve opened an audit store in %s before refusing the config", state)
			}
		})
	}
}

// dedupKeys keeps the last line of each top-level key (a case overrides
// the defaults it was given).
func dedupKeys(lines []string) []string {
	last := map[string]int{}
	for i, l := range lines {
		if !strings.HasPrefix(l, " ") {
			k, _, _ := strings.Cut(l, ":")
			last[k] = i
		}
	}
	var out []string
	keep := true
	for i, l := range lines {
		if !strings.HasPrefix(l, " ") {
			k, _, _ := strings.Cut(l, ":")
			keep = last[k] == i
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

// runFor runs cyberos with args, bounded by d, and returns its combined
// output and exit code.
func runFor(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	return runEnvFor(t, d, nil, args...)
}

// runEnvFor is runFor with env added to the environment.
func runEnvFor(t *testing.T, d time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, cyberosBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v still running after %v:\n%s", args, d, out.String())
	}
	return out.String(), exitCode(err)
}

// TestServeCheckNeedsConfig: `--check` checks a file; without one it is a
// usage error, not ": valid".
func TestServeCheckNeedsConfig(t *testing.T) {
	newEnv(t)
	out, code := runFor(t, 20*time.Second, "supervisor", "serve", "--check")
	if code != 2 || !strings.Contains(out, "--check needs --config") || strings.Contains(out, "valid") {
		t.Fatalf("serve --check without --config: exit %d\n%s", code, out)
	}
}

// TestServeCheckValidWarnsOfUnusableSkills: a usable config is "valid"
// (exit 0) and the skills serve would skip are named on stderr.
func TestServeCheckValidWarnsOfUnusableSkills(t *testing.T) {
	e := newEnv(t)
	e.skill("good", "", "#!/bin/sh\necho '{}'\n")
	bad := filepath.Join(e.base, "skills", "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "SKILL.md"), []byte("---\nname: other\ndescription: x\n---\n"), 0o644)
	cfg := filepath.Join(e.base, "etc", "ok.yaml")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cyberosBin, "supervisor", "serve", "--config", cfg, "--run-dir", e.runDir, "--check")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("--check: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if stdout.String() != cfg+": valid\n" {
		t.Errorf("stdout %q, want %q", stdout.String(), cfg+": valid\n")
	}
	if !strings.Contains(stderr.String(), "warning: skill bad is not usable") || strings.Contains(stderr.String(), "skill good") {
		t.Errorf("stderr does not warn of exactly the bad skill:\n%s", stderr.String())
	}
}

// TestDaemonNotifiesSystemd: under Type=notify the daemon sends READY=1 to
// $NOTIFY_SOCKET once the admin socket accepts (an invocation works right
// after it, and a connection made the moment READY arrives is accepted),
// and STOPPING=1 when a stop begins.
func TestDaemonNotifiesSystemd(t *testing.T) {
	e := newEnv(t)
	e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	path := filepath.Join(e.base, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				close(msgs)
				return
			}
			m := string(buf[:n])
			if m == "READY=1" { // answered the moment READY came?
				c, err := net.DialTimeout("unix", filepath.Join(e.base, "admin.sock"), time.Second)
				if err != nil {
					m += " (the admin socket refused: " + err.Error() + ")"
				} else {
					c.Close()
				}
			}
			msgs <- m
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m := <-msgs:
			if m != want {
				t.Fatalf("sd_notify message %q, want %q", m, want)
			}
		case <-time.After(slow(20 * time.Second)):
			t.Fatalf("no %q from the daemon", want)
		}
	}
	d := startDaemonWith(t, e, daemonStart{env: []string{"NOTIFY_SOCKET=" + path}})
	next("READY=1")
	if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("invocation after READY: %d %s", code, raw)
	}
	d.stop(slow(30 * time.Second))
	next("STOPPING=1")
}

// TestSkillsRunUnderAStrictUmask: the supervisor run with umask 0077 (the
// unit's UMask=, a common hardening) still gives the sandbox's root what it
// must reach: a fresh run dir's rootfs skeleton, the broker socket, the
// memory tools. Under 0077 every sandbox failed to mount /proc ("reopen fd:
// permission denied"): the skeleton's directories were 0700.
func TestSkillsRunUnderAStrictUmask(t *testing.T) {
	e := newEnv(t)
	for _, ex := range []struct{ name, args string }{
		{"hello-shell", `{"name":"umask"}`},
		{"notes-shell", `{"title":"t","text":"hello"}`},
	} {
		cmd := e.command(filepath.Join(repoRoot, "examples", ex.name), "--args", ex.args)
		cmd = exec.Command("/bin/sh", append([]string{"-c", `umask 077; exec "$@"`, "sh"}, cmd.Args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil || !strings.Contains(out.String(), `"outcome":"success"`) {
			t.Errorf("%s under umask 0077: %v\n%s\n%s", ex.name, err, out.String(), errb.String())
		}
	}
}

// TestDaemonLogHasNoRepeatedKeys: no line of the daemon's log names a key
// twice (the broker's lines carried the invocation's ids twice), through
// an invocation that uses the broker.
func TestDaemonLogHasNoRepeatedKeys(t *testing.T) {
	e := newEnv(t)
	os.MkdirAll(filepath.Join(e.base, "skills"), 0o755)
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot, "examples", "notes-shell"), filepath.Join(e.base, "skills")).CombinedOutput(); err != nil {
		t.Fatalf("cp notes-shell: %v %s", err, out)
	}
	d := startDaemon(t, e)
	if code, env, raw := d.invoke(map[string]any{"skill_id": "notes-shell", "args": map[string]string{"title": "t", "text": "x"}}); code != 200 || env.Outcome != "success" {
		t.Fatalf("notes-shell: %d %s", code, raw)
	}
	d.stop(slow(30 * time.Second))
	lines := strings.Split(strings.TrimSpace(d.logs.String()), "\n")
	if len(lines) < 4 {
		t.Fatalf("only %d log lines:\n%s", len(lines), d.logs.String())
	}
	for _, l := range lines {
		seen := map[string]bool{}
		for _, k := range logfmtKeys(l) {
			if seen[k] {
				t.Errorf("key %q twice in: %s", k, l)
			}
			seen[k] = true
		}
	}
}

// logfmtKeys returns the keys of one slog text line (key=value pairs,
// values quoted with Go escapes when they hold spaces or quotes).
func logfmtKeys(line string) []string {
	var keys []string
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		eq := strings.IndexByte(line[i:], '=')
		if eq < 0 {
			break
		}
		keys = append(keys, line[i:i+eq])
		i += eq + 1
		if i < len(line) && line[i] == '"' {
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' {
					i++
				}
			}
			i++
		} else {
			for i < len(line) && line[i] != ' ' {
				i++
			}
		}
	}
	return keys
}

// TestAdminSocketBounded: 2 000 connections held open (a third never
// sending a request, a third idle after one, a third holding a body half
// sent) neither exhaust the daemon's fds nor stop /healthz (a held place
// goes to the newcomer at the cap; a connection waiting on its body is not
// serving), and an invocation body over the limit gets 413 instead of a
// JSON error about a truncated body.
func TestAdminSocketBounded(t *testing.T) {
	e := newEnv(t)
	const capN = 64
	d := startDaemon(t, e, "max_concurrent: 8", fmt.Sprintf("admin_max_connections: %d", capN))
	pid := d.cmd.Process.Pid
	fdsBefore, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	halfBody := "POST /v1/invocations HTTP/1.1\r\nHost: cyberos\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" + `{"skill_id":"`
	for i := range 2000 {
		c, err := net.Dial("unix", d.adminSocket)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		switch i % 3 {
		case 1: // idle after one request
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: cyberos\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("connection %d, its one request: %v", i, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("connection %d, its one request: %d", i, resp.StatusCode)
			}
		case 2: // a body begun, never finished
			io.WriteString(c, halfBody)
		}
		if i%200 == 199 {
			resp, err := d.client.Get("http://cyberos/healthz")
			if err != nil {
				t.Fatalf("/healthz after %d held connections: %v", i+1, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("/healthz after %d held connections: %d", i+1, resp.StatusCode)
			}
			fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if len(fds) > len(fdsBefore)+capN+8 {
				t.Fatalf("the daemon holds %d fds with %d connections held (%d before, cap %d)", len(fds), i+1, len(fdsBefore), capN)
			}
		}
	}
	big := bytes.Repeat([]byte(" "), 3<<20)
	copy(big, `{"skill_id":"x","args":"`)
	resp, err := d.client.Post("http://cyberos/v1/invocations", "application/json", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "over 2097152 bytes") {
		t.Errorf("3 MiB body: %d %s, want 413", resp.StatusCode, b)
	}
}
