//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit"
)

// daemonProc is a running `cyberos supervisor serve` on this env's paths.
type daemonProc struct {
	t           testing.TB
	e           *env
	cmd         *exec.Cmd
	cfgPath     string
	adminSocket string
	socketDir   string
	skillsDir   string
	metricsAddr string
	logs        *bytes.Buffer
	exited      chan error
	client      *http.Client
}

// daemonConfig is the YAML of a daemon on e's temporary paths; extra lines
// are appended, and one naming a key of the base config replaces its line.
func (e *env) daemonConfig(metricsAddr string, extra ...string) string {
	base := []string{
		"version: 1",
		"skills_dir: " + filepath.Join(e.base, "skills"),
		"state_dir: " + e.stateDir,
		"socket_dir: " + filepath.Join(e.base, "sockets"),
		"admin_socket: " + filepath.Join(e.base, "admin.sock"),
		"metrics_listen: " + metricsAddr,
		"seccomp_profiles_dir: " + filepath.Join(repoRoot, "seccomp-profiles"),
	}
	lines := base[:0]
	for _, b := range base {
		key, _, _ := strings.Cut(b, ":")
		if !slices.ContainsFunc(extra, func(x string) bool { return strings.HasPrefix(x, key+":") }) {
			lines = append(lines, b)
		}
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDaemon starts the daemon and waits until /healthz answers; the
// cleanup stops it (SIGTERM, then SIGKILL).
func startDaemon(t testing.TB, e *env, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonWith(t, e, daemonStart{}, extra...)
}

// daemonStart is how startDaemonWith starts the daemon beyond its config.
type daemonStart struct {
	env  []string // added to the daemon's environment
	args []string // added to serve's command line
	// cgroups are cgroup directories the daemon's process joins before
	// the daemon runs (a shell writes its pid into each, then execs it).
	cgroups []string
	// configPath is where the config is written; default <base>/etc/supervisor.yaml.
	configPath string
}

// startDaemonWith is startDaemon started as s says.
func startDaemonWith(t testing.TB, e *env, s daemonStart, extra ...string) *daemonProc {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(e.base, "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{t: t, e: e, metricsAddr: freePort(t), logs: &bytes.Buffer{}, exited: make(chan error, 1),
		adminSocket: filepath.Join(e.base, "admin.sock"), socketDir: filepath.Join(e.base, "sockets"),
		skillsDir: filepath.Join(e.base, "skills"), cfgPath: filepath.Join(e.base, "etc", "supervisor.yaml")}
	if s.configPath != "" {
		d.cfgPath = s.configPath
	}
	if err := os.MkdirAll(filepath.Dir(d.cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.cfgPath, []byte(e.daemonConfig(d.metricsAddr, extra...)), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd = cyberos(append([]string{"supervisor", "serve", "--config", d.cfgPath, "--run-dir", e.runDir, "--log-level", "info"}, s.args...)...)
	if len(s.cgroups) > 0 {
		join := `for d in "$@"; do [ "$d" = -- ] && break; echo $$ > "$d/cgroup.procs" || exit 97; shift; done; shift; exec "$@"`
		args := append(append([]string{"-c", join, "sh"}, s.cgroups...), "--")
		d.cmd = exec.Command("/bin/sh", append(args, d.cmd.Args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if s.env != nil {
		d.cmd.Env = append(os.Environ(), s.env...)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	d.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.adminSocket)
	}}}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(30 * time.Second):
				_ = killPid(d.cmd.Process.Pid)
				<-d.exited
			}
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.logs.String())
		}
	})
	// Wait for /healthz to answer (the cleanup logs the daemon's output if
	// it never does).
	waitFor(t, 20*time.Second, func() bool {
		select {
		case err := <-d.exited:
			t.Fatalf("daemon exited at start: %v\n%s", err, d.logs.String())
		default:
		}
		resp, err := d.client.Get("http://cyberos/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return d
}

// stop sends SIGTERM and waits for the daemon to exit.
func (d *daemonProc) stop(within time.Duration) {
	d.t.Helper()
	helpers := childrenNamed(d.cmd.Process.Pid, "cyberos-spawn")
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			d.t.Errorf("daemon exit: %v\n%s", err, d.logs.String())
		}
	case <-time.After(within):
		d.t.Fatalf("daemon did not exit within %v after SIGTERM\n%s", within, d.logs.String())
	}
	// The daemon ends and reaps its creation helper before it exits: an
	// orphaned one would wait for init to reap it, in the daemon's cgroup.
	for _, pid := range helpers {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			d.t.Errorf("the daemon's creation helper outlived it: %s", st)
		}
	}
}

// childrenNamed lists the pids of ppid's children whose comm is comm.
func childrenNamed(ppid int, comm string) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		var pid, parent int
		var state string
		if _, err := fmt.Sscanf(string(b[:open]), "%d", &pid); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(string(b[end+1:]), " %s %d", &state, &parent); err != nil {
			continue
		}
		if parent == ppid && string(b[open+1:end]) == comm {
			pids = append(pids, pid)
		}
	}
	return pids
}

// invoke posts an invocation and decodes the envelope (or the error).
func (d *daemonProc) invoke(body map[string]any) (int, envelope, string) {
	d.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := d.client.Post("http://cyberos/v1/invocations", "application/json", bytes.NewReader(b))
	if err != nil {
		d.t.Errorf("invoke: %v", err)
		return 0, envelope{}, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env envelope
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &env); err != nil {
			d.t.Errorf("envelope: %v: %s", err, raw)
		}
	}
	return resp.StatusCode, env, string(raw)
}

type statusJSON struct {
	ActiveInvocations int   `json:"active_invocations"`
	ToolCallsToday    int64 `json:"tool_calls_today"`
	DeniedToday       int64 `json:"denied_today"`
	Invocations       []struct {
		InvocationID string `json:"invocation_id"`
		SkillID      string `json:"skill_id"`
		ToolCalls    int64  `json:"tool_calls"`
	} `json:"invocations"`
}

// status runs `cyberos skill broker status --socket` (the CLI, as operators do).
func (d *daemonProc) status() statusJSON {
	d.t.Helper()
	out, err := cyberos("skill", "broker", "status", "--socket", d.adminSocket).Output()
	if err != nil {
		d.t.Fatalf("broker status: %v", err)
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		d.t.Fatalf("status JSON: %v\n%s", err, out)
	}
	return st
}

// callLine is a tail/replay object.
type callLine struct {
	TS           string `json:"ts"`
	InvocationID string `json:"invocation_id"`
	Tool         string `json:"tool"`
	Outcome      string `json:"outcome"`
	DurationMS   int64  `json:"duration_ms"`
	ArgsHash     string `json:"args_hash"`
	Reason       string `json:"reason"`
	Verdict      string `json:"verdict"`
	Why          string `json:"why"`
}

func parseLines(t *testing.T, b []byte) []callLine {
	t.Helper()
	var out []callLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var c callLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, c)
	}
	return out
}

// auditRows reads the rows with `cyberos audit export` (read-only, beside
// the running daemon).
func (e *env) auditRows(filter ...string) []audit.Row {
	e.t.Helper()
	out, err := cyberos(append([]string{"audit", "export", "--state-dir", e.stateDir}, filter...)...).Output()
	if err != nil {
		e.t.Fatalf("audit export: %v", err)
	}
	var rows []audit.Row
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r audit.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// rowCalls is what the rows say about tool calls: the decided sequence of
// each invocation (tool, outcome, reason; an in-tool denial's completed row
// stands with its tool_denied row for one call), computed independently of
// the daemon's replay code.
func rowCalls(rows []audit.Row) (perInv map[string][]callLine, calls, denied int) {
	perInv = map[string][]callLine{}
	argsHash := map[string]string{}
	for _, r := range rows {
		var p map[string]any
		_ = json.Unmarshal(r.Payload, &p)
		s := func(k string) string { v, _ := p[k].(string); return v }
		inv := s("invocation_id")
		tool := s("tool_name")
		if tool == "" {
			tool = s("tool") // rows written before spec §8's key
		}
		switch r.Kind {
		case audit.KindToolCallStarted:
			argsHash[s("call_id")] = s("args_hash")
		case audit.KindToolCallCompleted:
			if strings.HasPrefix(s("error_message"), "denied: ") {
				continue
			}
			calls++
			perInv[inv] = append(perInv[inv], callLine{Tool: tool, Outcome: s("outcome"), ArgsHash: argsHash[s("call_id")]})
		case audit.KindToolDenied:
			calls++
			denied++
			perInv[inv] = append(perInv[inv], callLine{Tool: tool, Outcome: "denied", Reason: s("reason"), ArgsHash: s("attempted_args_hash")})
		}
	}
	return perInv, calls, denied
}

func sameCalls(a, b []callLine) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d calls vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Tool != b[i].Tool || a[i].Outcome != b[i].Outcome || a[i].Reason != b[i].Reason || a[i].ArgsHash != b[i].ArgsHash {
			return fmt.Errorf("call %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	return nil
}
