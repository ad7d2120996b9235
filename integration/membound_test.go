//go:build linux

package integration

// Issue 36, finding 1: a skill must not make the root supervisor allocate
// without bound. A tool result whose JSON encoding is six times its size
// (NUL; '<' before HTML escaping was turned off), read sixteen times at
// once (the per-invocation connection cap), once put the daemon at 5.5 GB.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// memBoundLimit is what the daemon's peak RSS may grow above its idle RSS
// while a skill attacks it.
const memBoundLimit = 256 << 20

// memBoundParallel is how many calls the skills make at once: the broker's
// connection cap per invocation.
const memBoundParallel = 16

// procStatusBytes reads a "kB" field (VmRSS, VmHWM) of /proc/pid/status.
func procStatusBytes(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, l, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// resetPeakRSS makes the process's VmHWM its current RSS (clear_refs 5).
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// parallelScript makes a shell skill that runs each call memBoundParallel
// times at once (one cyberos-tool, so one connection, each), and prints
// {"calls":[{"rc","bytes","err"}]}: each call's exit status, the size of
// its result and its error object (null on success).
func parallelScript(tool, args string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nt=/run/cyberos/bin/cyberos-tool\n")
	fmt.Fprintf(&b, "for i in $(seq %d); do ( $t call %s '%s' 2>/tmp/e.$i | wc -c >/tmp/n.$i; echo $? >/tmp/r.$i ) & done\nwait\n", memBoundParallel, tool, args)
	b.WriteString(`sep=''; printf '{"calls":['
for i in $(seq ` + strconv.Itoa(memBoundParallel) + `); do
  e=$(cat /tmp/e.$i); [ -n "$e" ] || e=null
  printf '%s{"bytes":%s,"err":%s}' "$sep" "$(cat /tmp/n.$i)" "$e"; sep=,
done
printf ']}\n'
`)
	return b.String()
}

// parallelCalls is a parallelScript's output.
type parallelCalls struct {
	Calls []struct {
		Bytes int64 `json:"bytes"`
		Err   *struct {
			Code int `json:"code"`
			Data struct {
				Reason string `json:"reason"`
				Detail string `json:"detail"`
			} `json:"data"`
		} `json:"err"`
	} `json:"calls"`
}

// memBoundCase is one attack: a tool, its args, and which answers are
// acceptable for each call.
type memBoundCase struct {
	name, tool, args string
	// check judges one call: its result size or its error reason.
	check func(bytes int64, reason string) error
}

// wantResult accepts a result of at least min bytes, or a refusal for the
// memory budget (the call waited its turn too long).
func wantResult(min int64) func(int64, string) error {
	return func(n int64, reason string) error {
		switch {
		case reason == "memory_budget":
			return nil
		case reason != "":
			return fmt.Errorf("error %q, want a result", reason)
		case n < min:
			return fmt.Errorf("result of %d bytes, want at least %d", n, min)
		}
		return nil
	}
}

// wantTooLarge accepts the tool's too-large error (whose JSON would be
// over the response cap) or a refusal for the memory budget.
func wantTooLarge(n int64, reason string) error {
	switch reason {
	case "tool_error", "memory_budget":
		return nil
	case "":
		return fmt.Errorf("a result of %d bytes, want an error", n)
	}
	return fmt.Errorf("error %q, want tool_error (too large)", reason)
}

// checkParallel decodes a parallelScript's result and judges each call.
func checkParallel(t *testing.T, name string, raw json.RawMessage, check func(int64, string) error) {
	t.Helper()
	var out parallelCalls
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: skill output %.300s: %v", name, raw, err)
	}
	if len(out.Calls) != memBoundParallel {
		t.Fatalf("%s: %d calls reported, want %d", name, len(out.Calls), memBoundParallel)
	}
	answers := map[string]int{}
	for i, c := range out.Calls {
		reason := ""
		if c.Err != nil {
			reason = c.Err.Data.Reason
		}
		if reason == "" {
			answers["result"]++
		} else {
			answers[reason]++
		}
		if err := check(c.Bytes, reason); err != nil {
			t.Errorf("%s: call %d: %v", name, i, err)
		}
	}
	t.Logf("%s: answers %v", name, answers)
	if answers["memory_budget"] == len(out.Calls) {
		t.Errorf("%s: every call was refused for the memory budget: the budget serves nobody", name)
	}
}

// writeFilled writes n copies of byte c to path.
func writeFilled(t *testing.T, path string, c byte, n int) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Repeat([]byte{c}, n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMemoryBoundedFileTools: sixteen parallel Reads of a 15 MB file of '<'
// and of one of NUL, a Grep over them and 10,000 lines of NULs, and a Glob over ten
// thousand names of control characters leave the daemon's peak RSS under
// memBoundLimit above its idle RSS; each call gets its result, a too-large
// error or a memory_budget refusal, never a dead daemon.
func TestMemoryBoundedFileTools(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.base, "data")
	names := filepath.Join(data, "names")
	if err := os.MkdirAll(names, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 15_000_000
	writeFilled(t, filepath.Join(data, "lt.txt"), '<', size)
	writeFilled(t, filepath.Join(data, "nul.txt"), 0, size)
	writeFilled(t, filepath.Join(data, "small.txt"), '<', 100)
	// 10,000 lines of 1,000 NULs: as many matches of 6 KB each in JSON.
	if err := os.WriteFile(filepath.Join(data, "lines.txt"), bytes.Repeat(append(make([]byte, 1000), '\n'), 10_000), 0o644); err != nil {
		t.Fatal(err)
	}
	// Names of 200 control characters: six bytes each in JSON.
	for i := range 10_000 {
		name := strings.Repeat("\x01", 190) + fmt.Sprintf("%010d", i)
		if err := os.WriteFile(filepath.Join(names, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fm := fmt.Sprintf("allowed_tools: [Read, Grep, Glob]\nx-allowed-files: [\"%s/**\"]\nx-memory-mb: 1024\nx-pids-max: 1024\n", data)
	cases := []memBoundCase{
		{"read-lt", "Read", fmt.Sprintf(`{"path":"%s/lt.txt"}`, data), wantResult(size)},
		{"read-nul", "Read", fmt.Sprintf(`{"path":"%s/nul.txt"}`, data), wantTooLarge},
		{"grep", "Grep", fmt.Sprintf(`{"pattern":"^","path":"%s","glob":"*.txt","max_matches":10000}`, data), wantResult(1 << 20)},
		{"glob", "Glob", fmt.Sprintf(`{"pattern":"%s/names/*"}`, data), wantResult(1 << 20)},
	}
	e.skill("mem-idle", fm, callScript(
		[3]string{"read", "Read", fmt.Sprintf(`{"path":"%s/small.txt"}`, data)},
		[3]string{"grep", "Grep", fmt.Sprintf(`{"pattern":"<","path":"%s/small.txt"}`, data)},
		[3]string{"glob", "Glob", fmt.Sprintf(`{"pattern":"%s/*.txt"}`, data)},
	))
	runMemBound(t, e, fm, cases)
}

// runMemBound runs each case's skill through a daemon of its own (Go
// keeps freed memory a while, so one attack's peak would hide the next
// one's) after the mem-idle skill, and checks the daemon's peak RSS above
// its idle RSS and each call's answer.
func runMemBound(t *testing.T, e *env, fm string, cases []memBoundCase) {
	t.Helper()
	for _, c := range cases {
		e.skill("mem-"+c.name, fm, parallelScript(c.tool, c.args))
		d := startDaemon(t, e)
		pid := d.cmd.Process.Pid
		// Idle: after one small call of each tool, so the figure is the
		// attack's, not the first use's.
		if code, env, raw := d.invoke(map[string]any{"skill_id": "mem-idle", "args": map[string]any{}}); code != 200 || env.Outcome != "success" {
			t.Fatalf("idle invocation: HTTP %d %s", code, raw)
		}
		idle := procStatusBytes(t, pid, "VmRSS")
		resetPeakRSS(t, pid)
		code, env, raw := d.invoke(map[string]any{"skill_id": "mem-" + c.name, "args": map[string]any{}})
		if code != 200 || env.Outcome != "success" {
			t.Fatalf("%s: HTTP %d outcome %q: %.2000s", c.name, code, env.Outcome, raw)
		}
		peak := procStatusBytes(t, pid, "VmHWM")
		t.Logf("%s: 16 parallel %s: daemon peak RSS %d MiB above idle (idle %d MiB)", c.name, c.tool, (peak-idle)>>20, idle>>20)
		if peak-idle > memBoundLimit {
			t.Errorf("%s: daemon peak RSS %d MiB above idle, want under %d MiB", c.name, (peak-idle)>>20, memBoundLimit>>20)
		}
		checkParallel(t, c.name, env.Result, c.check)
		d.stop(30 * time.Second)
	}
}

// TestMemoryBoundedBash: sixteen parallel Bash commands each writing a
// megabyte of NUL to stdout and to stderr (12 MiB of JSON a result) leave
// the daemon's peak RSS under memBoundLimit above its idle RSS.
func TestMemoryBoundedBash(t *testing.T) {
	e := newEnv(t)
	fm := "allowed_tools: [Bash]\nx-memory-mb: 1024\nx-pids-max: 1024\n"
	e.skill("mem-idle", fm, callScript([3]string{"bash", "Bash", `{"command":"true"}`}))
	runMemBound(t, e, fm, []memBoundCase{
		{"bash", "Bash", `{"command":"head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2"}`, wantResult(12 << 20)},
	})
}

// TestMemoryBoundedHttpFetch: sixteen parallel HttpFetches of a 64 MiB body
// of '<' (with a Content-Length) and of NUL (chunked, no length) from a
// server on 127.0.0.1 leave the supervisor's peak RSS under memBoundLimit
// above that of the same skill fetching a small body. The daemon never
// reaches loopback, so the supervisor here is `skill run
// --allow-loopback-http`, and its peak is its rusage's.
func TestMemoryBoundedHttpFetch(t *testing.T) {
	e := newEnv(t)
	const big = 64 << 20
	chunk := bytes.Repeat([]byte{'<'}, 1<<20)
	nul := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := chunk
		switch r.URL.Path {
		case "/small":
			fmt.Fprint(w, "small <body>")
			return
		case "/lt":
			w.Header().Set("Content-Length", strconv.Itoa(big))
		case "/nul":
			body = nul
		}
		for i := 0; i < big/len(body); i++ {
			if _, err := w.Write(body); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	fm := "allowed_tools: [HttpFetch]\nx-allowed-domains: [\"127.0.0.1\"]\nx-memory-mb: 1024\nx-pids-max: 1024\n"

	// run runs the skill fetching path and returns its result and the
	// supervisor's peak RSS.
	run := func(name, path string) (json.RawMessage, int64) {
		t.Helper()
		dir := e.skill(name, fm, parallelScript("HttpFetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%s%s"}`, port, path)))
		cmd := e.command(dir, "--allow-loopback-http")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v: %s", name, err, errb.String())
		}
		var env envelope
		if err := json.Unmarshal(out.Bytes(), &env); err != nil || env.Outcome != "success" {
			t.Fatalf("%s: envelope %.2000s: %v", name, out.String(), err)
		}
		return env.Result, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	}
	_, idle := run("fetch-small", "/small")
	t.Logf("skill run peak RSS with small bodies: %d MiB", idle>>20)
	for _, path := range []string{"/lt", "/nul"} {
		raw, peak := run("fetch"+strings.TrimPrefix(path, "/"), path)
		t.Logf("%s: 16 parallel HttpFetch: supervisor peak RSS %d MiB above the small run's (%d MiB)", path, (peak-idle)>>20, peak>>20)
		if peak-idle > memBoundLimit {
			t.Errorf("%s: supervisor peak RSS %d MiB above the small run's, want under %d MiB", path, (peak-idle)>>20, memBoundLimit>>20)
		}
		checkParallel(t, path, raw, wantResult(4<<20))
	}
}
