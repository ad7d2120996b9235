//go:build linux

package integration

// Spec 001 (capability broker) acceptance criteria and the abuse
// cases: a real sandboxed skill calling the real broker through the static
// cyberos-tool client or a raw-protocol probe.

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// callScript makes a shell skill that runs each `cyberos-tool call` line and
// prints {"<name>": {"ok": result} | {"err": error-object}} as one JSON object.
func callScript(calls ...[3]string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nt=/run/cyberos/bin/cyberos-tool\nsep=''\nprintf '{'\n")
	for _, c := range calls {
		name, tool, args := c[0], c[1], c[2]
		fmt.Fprintf(&b, "if out=$($t call %s '%s' 2>/tmp/err); then printf '%%s\"%s\":{\"ok\":%%s}' \"$sep\" \"$out\"; else printf '%%s\"%s\":{\"err\":%%s}' \"$sep\" \"$(cat /tmp/err)\"; fi; sep=,\n", tool, args, name, name)
	}
	b.WriteString("printf '}\\n'\n")
	return b.String()
}

type callResult struct {
	OK  json.RawMessage `json:"ok"`
	Err *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Reason  string          `json:"reason"`
			Detail  string          `json:"detail"`
			Partial json.RawMessage `json:"partial"`
		} `json:"data"`
	} `json:"err"`
}

func calls(t *testing.T, r result) map[string]callResult {
	t.Helper()
	r.mustOutcome(t, "success")
	var m map[string]callResult
	if err := json.Unmarshal(r.env.Result, &m); err != nil {
		t.Fatalf("skill output %s: %v", r.env.Result, err)
	}
	return m
}

func mustOK(t *testing.T, m map[string]callResult, name string) json.RawMessage {
	t.Helper()
	c, ok := m[name]
	if !ok || c.Err != nil || c.OK == nil {
		t.Errorf("%s: want success, got %+v", name, c.Err)
	}
	return c.OK
}

func mustRefuse(t *testing.T, m map[string]callResult, name, reason string) {
	t.Helper()
	c, ok := m[name]
	if !ok || c.Err == nil {
		t.Errorf("%s: want refusal %s, got success %s", name, reason, c.OK)
		return
	}
	if c.Err.Code != -32603 || c.Err.Data.Reason != reason {
		t.Errorf("%s: error code %d reason %q, want -32603 %q", name, c.Err.Code, c.Err.Data.Reason, reason)
	}
}

// seedMemory writes a doc through a skill allowed to emit it.
func (e *env) seedMemory(t *testing.T, path, body string) {
	t.Helper()
	dir := e.skill("seeder", "allowed_tools: [MemoryEmit]\nallowed_memory_scopes: [\"**\"]\n",
		callScript([3]string{"emit", "MemoryEmit", fmt.Sprintf(`{"path":"%s","body":"%s"}`, path, body)}))
	mustOK(t, calls(t, e.run(dir)), "emit")
}

// TestBrokerMemoryScopes: AC 1, 4, 5 (and AC 17: refusals are -32603).
func TestBrokerMemoryScopes(t *testing.T) {
	e := newEnv(t)
	e.seedMemory(t, "memories/projects/cyberos/notes/x.md", "design notes")
	e.seedMemory(t, "memories/people/y.md", "private")
	dir := e.skill("reader", "allowed_tools: [MemoryRead]\nallowed_memory_scopes: [\"memories/projects/cyberos/**\"]\n", callScript(
		[3]string{"in_scope", "MemoryRead", `{"path":"memories/projects/cyberos/notes/x.md"}`},
		[3]string{"out_of_scope", "MemoryRead", `{"path":"memories/people/y.md"}`},
		[3]string{"dotdot", "MemoryRead", `{"path":"memories/projects/cyberos/../people/y.md"}`},
	))
	m := calls(t, e.run(dir))
	var doc struct {
		Body        string `json:"body"`
		ContentHash string `json:"content_hash"`
	}
	json.Unmarshal(mustOK(t, m, "in_scope"), &doc)
	if doc.Body != "design notes" || len(doc.ContentHash) != 64 {
		t.Errorf("read %+v", doc)
	}
	mustRefuse(t, m, "out_of_scope", "scope_violation")
	mustRefuse(t, m, "dotdot", "scope_violation")
}

// TestBrokerToolLists: AC 2 (not allowed → tool_not_in_allowed_tools and a
// skill.tool_denied row with reason, attempted_args_hash, trace_id: AC 15),
// AC 3 (disallowed beats allowed).
func TestBrokerToolLists(t *testing.T) {
	e := newEnv(t)
	r := e.run(e.skill("nobash", "allowed_tools: [MemoryRead]\n", callScript([3]string{"bash", "Bash", `{"command":"id"}`})),
		"--traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	mustRefuse(t, calls(t, r), "bash", "tool_not_in_allowed_tools")
	_, rows := e.export("--invocation", r.env.InvocationID, "--kind", "skill.tool_denied")
	if len(rows) != 1 {
		t.Fatalf("%d tool_denied rows, want 1", len(rows))
	}
	if rows[0].field("reason") != "tool_not_in_allowed_tools" || rows[0].field("trace_id") != "0af7651916cd43dd8448eb211c80319c" ||
		len(fmt.Sprint(rows[0].field("attempted_args_hash"))) != 64 {
		t.Errorf("tool_denied payload %s", rows[0].Payload)
	}
	r = e.run(e.skill("denybash", "allowed_tools: [Bash]\ndisallowed_tools: [Bash]\n", callScript([3]string{"bash", "Bash", `{"command":"id"}`})))
	mustRefuse(t, calls(t, r), "bash", "tool_denied")
}

// TestBrokerFiles: AC 6, and a symlink inside the allowed folder pointing
// at /etc/passwd is refused.
func TestBrokerFiles(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.base, "data")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "x.txt"), []byte("hello file"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(data, "passwd"))
	dir := e.skill("files", fmt.Sprintf("allowed_tools: [Read, Write]\nx-allowed-files: [\"%s/**\"]\n", data), callScript(
		[3]string{"read_ok", "Read", fmt.Sprintf(`{"path":"%s/x.txt"}`, data)},
		[3]string{"etc_passwd", "Read", `{"path":"/etc/passwd"}`},
		[3]string{"symlink", "Read", fmt.Sprintf(`{"path":"%s/passwd"}`, data)},
		[3]string{"write_ok", "Write", fmt.Sprintf(`{"path":"%s/new.txt","content":"written"}`, data)},
	))
	m := calls(t, e.run(dir))
	if ok := mustOK(t, m, "read_ok"); !strings.Contains(string(ok), "hello file") {
		t.Errorf("read %s", ok)
	}
	mustRefuse(t, m, "etc_passwd", "file_violation")
	mustRefuse(t, m, "symlink", "file_violation")
	mustOK(t, m, "write_ok")
	if b, _ := os.ReadFile(filepath.Join(data, "new.txt")); string(b) != "written" {
		t.Errorf("Write left %q", b)
	}
}

// TestBrokerHTTP: AC 7, AC 18 (traceparent reaches the backend), a
// redirect to a disallowed host, userinfo tricks, and a name resolving to
// 127.0.0.1 when loopback is not allowed.
func TestBrokerHTTP(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var gotTrace []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotTrace = append(gotTrace, r.Header.Get("traceparent"))
		mu.Unlock()
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://evil.test/x", http.StatusFound)
			return
		}
		fmt.Fprint(w, "backend says hi")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dir := e.skill("fetcher", "allowed_tools: [HttpFetch]\nx-allowed-domains: [\"127.0.0.1\"]\n", callScript(
		[3]string{"allowed", "HttpFetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%s/x"}`, port)},
		[3]string{"evil", "HttpFetch", `{"url":"https://evil.com/y"}`},
		[3]string{"redirect", "HttpFetch", fmt.Sprintf(`{"url":"http://127.0.0.1:%s/redirect"}`, port)},
		[3]string{"userinfo", "HttpFetch", `{"url":"http://127.0.0.1@evil.test/"}`},
	))
	r := e.run(dir, "--allow-loopback-http", "--traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m := calls(t, r)
	if ok := mustOK(t, m, "allowed"); !strings.Contains(string(ok), "backend says hi") {
		t.Errorf("fetch %s", ok)
	}
	mustRefuse(t, m, "evil", "domain_violation")
	mustRefuse(t, m, "redirect", "domain_violation")
	mustRefuse(t, m, "userinfo", "domain_violation")
	mu.Lock()
	if len(gotTrace) == 0 || !strings.HasPrefix(gotTrace[0], "00-0af7651916cd43dd8448eb211c80319c-") {
		t.Errorf("backend saw traceparent %q, want the caller's trace id", gotTrace)
	}
	mu.Unlock()

	// localhost resolves to 127.0.0.1: refused without the runner's loopback permission.
	dir = e.skill("localhost", "allowed_tools: [HttpFetch]\nx-allowed-domains: [\"localhost\"]\n", callScript(
		[3]string{"local", "HttpFetch", fmt.Sprintf(`{"url":"http://localhost:%s/x"}`, port)}))
	mustRefuse(t, calls(t, e.run(dir)), "local", "domain_violation")
}

// TestBrokerAuditPairsAndMemoryTrace: AC 14 (every successful call has one
// started and one completed row with the invocation's id and trace id) and
// AC 19 (MemoryEmit's stored doc carries the call's trace id).
func TestBrokerAuditPairsAndMemoryTrace(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("pairs", "allowed_tools: [MemoryEmit, MemoryRead]\nallowed_memory_scopes: [\"notes/**\"]\n", callScript(
		[3]string{"emit", "MemoryEmit", `{"path":"notes/a","body":"alpha"}`},
		[3]string{"read", "MemoryRead", `{"path":"notes/a"}`},
	))
	r := e.run(dir, "--traceparent", "00-1af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m := calls(t, r)
	mustOK(t, m, "emit")
	mustOK(t, m, "read")
	_, rows := e.export("--invocation", r.env.InvocationID)
	started, completed := map[string]int{}, map[string]int{}
	for _, row := range rows {
		if row.field("trace_id") != "1af7651916cd43dd8448eb211c80319c" {
			t.Errorf("%s row trace_id %v", row.Kind, row.field("trace_id"))
		}
		id, _ := row.field("call_id").(string)
		switch row.Kind {
		case "skill.tool_call_started":
			started[id]++
		case "skill.tool_call_completed":
			completed[id]++
			if row.field("outcome") != "success" {
				t.Errorf("completed %s", row.Payload)
			}
		}
	}
	if len(started) != 2 || len(completed) != 2 {
		t.Errorf("started %v completed %v, want two calls each paired once", started, completed)
	}
	for id, n := range started {
		if n != 1 || completed[id] != 1 {
			t.Errorf("call %s: %d started, %d completed", id, n, completed[id])
		}
	}
	db, err := sql.Open("sqlite", filepath.Join(e.stateDir, "memory.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var trace string
	if err := db.QueryRow(`SELECT trace_id FROM docs WHERE path = 'notes/a'`).Scan(&trace); err != nil {
		t.Fatal(err)
	}
	if trace != "1af7651916cd43dd8448eb211c80319c" {
		t.Errorf("memory doc trace_id %q", trace)
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("verify: %s", out)
	}
}

// TestBrokerBashRunsInsideSandbox: Bash runs in the invocation's own
// sandbox (same namespaces, seccomp, uid), not on the host.
func TestBrokerBashRunsInsideSandbox(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("basher", "allowed_tools: [Bash]\n", callScript(
		[3]string{"inside", "Bash", `{"command":"echo $(hostname) $(id -u) $(sed -n s/^Seccomp:.//p /proc/self/status) $(cat /proc/self/uid_map | wc -l)"}`},
		[3]string{"slow", "Bash", `{"command":"echo started; sleep 5","timeout_ms":700}`}))
	m := calls(t, e.run(dir))
	// A timed-out command: error reason timeout, its output so far beside it.
	slow := m["slow"]
	var partial struct {
		Stdout   string `json:"stdout"`
		TimedOut bool   `json:"timed_out"`
	}
	if slow.Err == nil || slow.Err.Data.Reason != "timeout" || json.Unmarshal(slow.Err.Data.Partial, &partial) != nil ||
		!strings.Contains(partial.Stdout, "started") || !partial.TimedOut {
		t.Errorf("timed-out Bash: %+v", slow.Err)
	}
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	json.Unmarshal(mustOK(t, m, "inside"), &res)
	f := strings.Fields(res.Stdout)
	if res.ExitCode != 0 || len(f) != 4 || f[0] != "skill" || f[1] != "1000" || f[2] != "2" {
		t.Errorf("Bash ran as %q (exit %d); want hostname skill, uid 1000, seccomp 2", res.Stdout, res.ExitCode)
	}
}

// TestBrokerSurvivesAbuse: from inside the sandbox, a 2 MiB frame (AC 16:
// request_too_large, the same connection keeps working), a 0xFFFFFFFF
// prefix, invalid JSON, a half-sent frame, a batch of 1000 and JSON nested
// 100 000 deep; the broker keeps serving after each.
func TestBrokerSurvivesAbuse(t *testing.T) {
	e := newEnv(t)
	r := e.run(e.skill("abuser", "allowed_tools: [MemoryRead]\n", "probe:rawbroker"), "--deadline", "60s")
	r.mustOutcome(t, "success")
	var out map[string]any
	json.Unmarshal(r.env.Result, &out)
	if !strings.Contains(fmt.Sprint(out["big_response"]), "request_too_large") {
		t.Errorf("2 MiB frame answered %v", out["big_response"])
	}
	if !strings.Contains(fmt.Sprint(out["invalid_json_response"]), "-32700") {
		t.Errorf("invalid JSON answered %v", out["invalid_json_response"])
	}
	for _, k := range []string{"big_same_conn_ok", "after_huge_prefix_ok", "invalid_json_same_conn_ok", "during_half_frame_ok", "batch_same_conn_ok", "deep_same_conn_ok", "final_ok"} {
		if out[k] != true {
			t.Errorf("%s = %v; the broker stopped serving (%v)", k, out[k], out)
		}
	}
}

// TestBrokerSocketsAreIsolated: AC 24. Two invocations at once get
// different sockets; neither socket accepts a process that is not its
// invocation's (here: this test process on the host, as root).
func TestBrokerSocketsAreIsolated(t *testing.T) {
	e := newEnv(t)
	sockDir := filepath.Join(e.runDir, "sockets")
	dir := e.skill("waiter", "allowed_tools: [MemoryRead]\n", "#!/bin/sh\nexec /bin/sleep 27000\n")
	var wg sync.WaitGroup
	done := make(chan string, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := e.command(dir, "--deadline", "40s")
			out, err := cmd.CombinedOutput()
			done <- fmt.Sprintf("exit %d: %s", exitCode(err), out)
		}()
	}
	var socks []string
	deadline := time.Now().Add(60 * time.Second)
	for len(socks) < 2 {
		select {
		case r := <-done:
			t.Fatalf("an invocation ended before both sockets were seen: %s", r)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sockets seen: %v", socks)
		}
		socks, _ = filepath.Glob(filepath.Join(sockDir, "cyberos-skill-broker.*.sock"))
	}
	if socks[0] == socks[1] {
		t.Fatal("two invocations share a socket")
	}
	for _, s := range socks {
		fi, err := os.Stat(s)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s mode %v", s, fi.Mode())
		}
		c, err := net.Dial("unix", s)
		if err != nil {
			continue // refused outright: fine
		}
		c.SetDeadline(time.Now().Add(3 * time.Second))
		c.Write([]byte{0, 0, 0, 45})
		c.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tool.list"}`))
		buf := make([]byte, 16)
		if n, _ := c.Read(buf); n > 0 {
			t.Errorf("%s answered a process outside its sandbox", s)
		}
		c.Close()
	}
	// The sockets exist before the skills do: wait for both, then end them.
	waitFor(t, 30*time.Second, func() bool { return len(procsMatching("sleep 27000")) == 2 })
	for _, p := range procsMatching("sleep 27000") {
		killPid(p)
	}
	wg.Wait()
	if left, _ := filepath.Glob(filepath.Join(sockDir, "*.sock")); len(left) > 0 {
		t.Errorf("sockets left: %v", left)
	}
}
