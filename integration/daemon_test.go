//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"cyberos.dev/audit"
)

// callsSkill installs a skill that makes one allowed Read and one denied
// Bash call, then succeeds.
func callsSkill(e *env, name string) { //nolint:unparam // the call site names the skill it then invokes
	// A skill folder is never readable through the file tools: the data
	// lives beside it.
	dir := filepath.Join(e.base, "data-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("data\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.skill(name, "allowed_tools: [Read]\nx-allowed-files: ['"+dir+"/**']\n", `#!/bin/sh
T=/run/cyberos/bin/cyberos-tool
$T call Read '{"path":"`+dir+`/data.txt"}' >/dev/null || exit 3
$T call Bash '{"command":"true"}' >/dev/null 2>&1
echo '{"ok":true}'
`)
}

// Must show: 50 concurrent invocations through the admin socket; every one
// succeeds with its rows, and `status` counters match the audit rows.
func TestDaemonConcurrentInvocationsStatusMatchesRows(t *testing.T) {
	e := newEnv(t)
	callsSkill(e, "calls")
	d := startDaemon(t, e)
	const n = 50
	var wg sync.WaitGroup
	codes := make([]int, n)
	envs := make([]envelope, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var raw string
			codes[i], envs[i], raw = d.invoke(map[string]any{"skill_id": "calls", "tenant_id": "11111111-1111-1111-1111-111111111111"})
			if codes[i] != 200 || envs[i].Outcome != "success" {
				t.Errorf("invocation %d: HTTP %d %s %s", i, codes[i], envs[i].Outcome, raw)
			}
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st := d.status()
	rows := e.auditRows()
	perInv, calls, denied := rowCalls(rows)
	if st.ActiveInvocations != 0 || len(st.Invocations) != 0 {
		t.Errorf("after all finished: %+v", st)
	}
	if st.ToolCallsToday != int64(calls) || st.DeniedToday != int64(denied) {
		t.Errorf("status tool_calls_today %d denied_today %d; audit rows: %d calls, %d denied", st.ToolCallsToday, st.DeniedToday, calls, denied)
	}
	if calls != 2*n || denied != n {
		t.Errorf("audit rows hold %d calls, %d denied; want %d, %d", calls, denied, 2*n, n)
	}
	started, completed := 0, 0
	for _, r := range rows {
		switch r.Kind {
		case audit.KindInvokedStarted:
			started++
		case audit.KindInvokedCompleted:
			completed++
		}
	}
	if started != n || completed != n || len(perInv) != n {
		t.Errorf("rows: %d started, %d completed, %d invocations with calls", started, completed, len(perInv))
	}
	// A restarted daemon counts today from the rows, not from zero.
	d.stop(30 * time.Second)
	d2 := startDaemon(t, e)
	if st2 := d2.status(); st2.ToolCallsToday != int64(calls) || st2.DeniedToday != int64(denied) {
		t.Errorf("after restart: %+v, rows say %d/%d", st2, calls, denied)
	}
}

// Must show: tail sees each tool call of a running invocation live, in
// order; replay prints the same sequence as the rows; replay --policy marks
// exactly the calls a narrower policy denies.
func TestDaemonTailReplayAndPolicy(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.base, "skills", "seq")
	// The skill reads data beside its folder: a skill folder is never
	// readable through the file tools.
	data := filepath.Join(e.base, "seqdata")
	os.MkdirAll(data, 0o755)
	os.WriteFile(filepath.Join(data, "a.txt"), []byte("a\n"), 0o644)
	os.WriteFile(filepath.Join(data, "b.txt"), []byte("b\n"), 0o644)
	e.skill("seq", "allowed_tools: [Read, Glob]\nx-allowed-files: ['"+data+"/**']\neffort_minutes: 1\n", `#!/bin/sh
T=/run/cyberos/bin/cyberos-tool
sleep 1
$T call Read '{"path":"`+data+`/a.txt"}' >/dev/null; sleep 0.3
$T call Bash '{"command":"id"}' >/dev/null 2>&1; sleep 0.3
$T call Glob '{"pattern":"`+data+`/*"}' >/dev/null; sleep 0.3
$T call Read '{"path":"`+data+`/b.txt"}' >/dev/null; sleep 1
echo '{"done":true}'
`)
	d := startDaemon(t, e)
	type done struct {
		env envelope
		at  time.Time
	}
	fin := make(chan done, 1)
	go func() {
		_, env, _ := d.invoke(map[string]any{"skill_id": "seq"})
		fin <- done{env, time.Now()}
	}()
	id := d.onlyInvocation(t)
	tail := cyberos("skill", "broker", "tail", "--invocation", id, "--json", "--socket", d.adminSocket)
	out, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []callLine
	var arrived []time.Time
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var c callLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("tail line %q: %v", sc.Text(), err)
		}
		lines = append(lines, c)
		arrived = append(arrived, time.Now())
	}
	if err := tail.Wait(); err != nil {
		t.Fatalf("tail: %v", err)
	}
	f := <-fin
	if f.env.Outcome != "success" || f.env.InvocationID != id {
		t.Fatalf("invocation %+v", f.env)
	}
	wantTools := []string{"Read", "Bash", "Glob", "Read"}
	var got []string
	for _, l := range lines {
		got = append(got, l.Tool+"/"+l.Outcome)
	}
	if strings.Join(got, " ") != "Read/success Bash/denied Glob/success Read/success" {
		t.Fatalf("tail saw %v, want %v with Bash denied", got, wantTools)
	}
	// Live: every line came while the invocation was still running (it
	// sleeps 1 s after its last call), the calls ~0.3 s apart.
	for i, at := range arrived {
		if !at.Before(f.at) {
			t.Errorf("tail line %d arrived at %v, after the invocation ended at %v", i, at, f.at)
		}
	}
	if gap := arrived[3].Sub(arrived[0]); gap < 500*time.Millisecond {
		t.Errorf("lines 0..3 arrived within %v: not live", gap)
	}

	// replay == rows == tail.
	perInv, _, _ := rowCalls(e.auditRows("--invocation", id))
	repOut, err := cyberos("skill", "broker", "replay", "--invocation", id, "--json", "--socket", d.adminSocket).Output()
	if err != nil {
		t.Fatal(err)
	}
	replay := parseLines(t, repOut)
	if err := sameCalls(replay, perInv[id]); err != nil {
		t.Errorf("replay vs rows: %v", err)
	}
	if err := sameCalls(replay, lines); err != nil {
		t.Errorf("replay vs tail: %v", err)
	}
	human, err := cyberos("skill", "broker", "replay", "--invocation", id, "--socket", d.adminSocket).Output()
	if err != nil || strings.Count(string(human), "\n") != 4 || !strings.Contains(string(human), "tool_not_in_allowed_tools") {
		t.Errorf("human replay: %v\n%s", err, human)
	}

	// A narrower policy: only Glob. Both Reads and the Bash call would be
	// denied by tool; Glob's verdict needs its args (not recorded).
	narrow := filepath.Join(e.base, "narrow.md")
	os.WriteFile(narrow, []byte("---\nname: seq\ndescription: narrower\nallowed_tools: [Glob]\nx-allowed-files: ['/nowhere/**']\n---\n"), 0o644)
	polOut, err := cyberos("skill", "broker", "replay", "--invocation", id, "--json", "--policy", narrow, "--socket", d.adminSocket).Output()
	if exitCode(err) != 1 { // calls would now be denied: CI can gate on it
		t.Fatalf("replay --policy with denials: exit %d (%v), want 1", exitCode(err), err)
	}
	var verdicts []string
	for _, j := range parseLines(t, polOut) {
		verdicts = append(verdicts, j.Tool+"="+j.Verdict)
	}
	if strings.Join(verdicts, " ") != "Read=denied Bash=denied Glob=undecidable Read=denied" {
		t.Errorf("verdicts %v", verdicts)
	}
	// The same policy as recorded: nothing is denied that was allowed.
	same := filepath.Join(dir, "SKILL.md")
	polOut, _ = cyberos("skill", "broker", "replay", "--invocation", id, "--json", "--policy", same, "--socket", d.adminSocket).Output()
	for _, j := range parseLines(t, polOut) {
		if (j.Verdict == "denied") != (j.Tool == "Bash") {
			t.Errorf("under its own policy: %s %s", j.Tool, j.Verdict)
		}
	}
	// A wider one that denies none of the calls: exit 0.
	wide := filepath.Join(e.base, "wide.md")
	os.WriteFile(wide, []byte("---\nname: seq\ndescription: wider\nallowed_tools: [Read, Bash, Glob]\nx-allowed-files: ['/**']\n---\n"), 0o644)
	if out, err := cyberos("skill", "broker", "replay", "--invocation", id, "--policy", wide, "--socket", d.adminSocket).Output(); err != nil || !strings.Contains(string(out), "0 of 4 calls would now be denied") {
		t.Errorf("replay --policy with no denial: %v\n%s", err, out)
	}
}

// Must show (AC 23, AC 22): /metrics holds every family with the right
// counts after a fixture run; spans reach an OTLP exporter carrying the
// caller's trace id.
func TestDaemonMetricsAndSpans(t *testing.T) {
	e := newEnv(t)
	callsSkill(e, "calls")
	e.skill("slowtool", "allowed_tools: [Bash]\n", `#!/bin/sh
/run/cyberos/bin/cyberos-tool call Bash '{"command":"sleep 5","timeout_ms":200}' >/dev/null 2>&1
echo '{}'
`)
	e.skill("fails", "", "#!/bin/sh\nexit 7\n")
	col := newOTLPCollector(t)
	d := startDaemon(t, e, "otlp_endpoint: "+col.url)

	// Before any invocation: the labelled series exist at 0.
	fams := scrape(t, d.metricsAddr)
	for _, s := range []string{`cyberos_audit_emit_failures_total{stage="start"}`, `cyberos_audit_emit_failures_total{stage="completed"}`,
		`cyberos_skill_invocations_total{outcome="success",skill_id="calls"}`, `cyberos_tool_calls_total{outcome="denied",skill_id="calls",tool="Read"}`} {
		if v, ok := fams[s]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v) at start, want 0", s, v, ok)
		}
	}

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	tp := "00-" + traceID + "-b7ad6b7169203331-01"
	for i := 0; i < 3; i++ {
		if code, env, raw := d.invoke(map[string]any{"skill_id": "calls", "traceparent": tp}); code != 200 || env.Outcome != "success" || env.TraceID != traceID {
			t.Fatalf("calls: %d %s", code, raw)
		}
	}
	if code, env, raw := d.invoke(map[string]any{"skill_id": "slowtool"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("slowtool: %d %s", code, raw)
	}
	if code, env, _ := d.invoke(map[string]any{"skill_id": "fails"}); code != 200 || env.Outcome != "error" {
		t.Fatalf("fails: %d %+v", code, env)
	}
	fams = scrape(t, d.metricsAddr)
	want := map[string]float64{
		`cyberos_skill_invocations_total{outcome="success",skill_id="calls"}`:         3,
		`cyberos_skill_invocations_total{outcome="success",skill_id="slowtool"}`:      1,
		`cyberos_skill_invocations_total{outcome="error",skill_id="fails"}`:           1,
		`cyberos_skill_invocation_duration_seconds_count{skill_id="calls"}`:           3,
		`cyberos_audit_emit_failures_total{stage="start"}`:                            0,
		`cyberos_audit_emit_failures_total{stage="completed"}`:                        0,
		`cyberos_tool_calls_total{outcome="success",skill_id="calls",tool="Read"}`:    3,
		`cyberos_tool_calls_total{outcome="denied",skill_id="calls",tool="Bash"}`:     3,
		`cyberos_tool_calls_total{outcome="timeout",skill_id="slowtool",tool="Bash"}`: 1,
		`cyberos_broker_responses_truncated_total`:                                    0,
		`cyberos_sandbox_start_duration_seconds_count`:                                5,
		`cyberos_skill_invocations_running`:                                           0,
	}
	for k, v := range want {
		if got, ok := fams[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// Each invocation's two rows were timed; the Go runtime's, the
	// process's and the build's series are there too.
	for _, k := range []string{`cyberos_audit_emit_duration_seconds_count{stage="start"}`, `cyberos_audit_emit_duration_seconds_count{stage="completed"}`} {
		if fams[k] != 5 {
			t.Errorf("%s = %v, want 5", k, fams[k])
		}
	}
	var build, goSeries, process bool
	for k, v := range fams {
		build = build || strings.HasPrefix(k, "cyberos_build_info{") && strings.Contains(k, `goversion="go`) && v == 1
		goSeries = goSeries || strings.HasPrefix(k, "go_goroutines")
		process = process || strings.HasPrefix(k, "process_open_fds")
	}
	if !build || !goSeries || !process {
		t.Errorf("cyberos_build_info %v, go_goroutines %v, process_open_fds %v: want all", build, goSeries, process)
	}
	for k := range fams {
		if strings.Contains(k, "skill_id=") && !strings.Contains(k, `skill_id="calls"`) && !strings.Contains(k, `skill_id="slowtool"`) && !strings.Contains(k, `skill_id="fails"`) {
			t.Errorf("a skill_id label outside the registry: %s", k)
		}
	}

	// Spans are flushed at shutdown at the latest.
	d.stop(30 * time.Second)
	spans := col.spans()
	var invokes, toolCalls, reads int
	for _, s := range spans {
		if s.traceID != traceID {
			continue
		}
		switch s.name {
		case "skill.invoke":
			invokes++
			if s.parent != "b7ad6b7169203331" {
				t.Errorf("skill.invoke parent %s, want the caller's span", s.parent)
			}
		case "skill.broker.tool_call":
			toolCalls++
			for _, k := range []string{"skill_id", "tool_name", "outcome", "duration_ms", "args_size_bytes", "result_size_bytes"} {
				if _, ok := s.attrs[k]; !ok {
					t.Errorf("tool_call span without %s: %v", k, s.attrs)
				}
			}
		case "skill.tool.read.exec":
			reads++
		}
	}
	if invokes != 3 || toolCalls != 6 || reads != 3 {
		t.Errorf("spans with the caller's trace id: %d skill.invoke, %d tool_call, %d read.exec; want 3, 6, 3 (of %d spans)", invokes, toolCalls, reads, len(spans))
	}
}

// scrape reads /metrics over HTTP into "name{labels}" → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				ck := name + "_count"
				if len(labels) > 0 {
					ck += "{" + strings.Join(labels, ",") + "}"
				}
				out[ck] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// Must show: SIGTERM during a long invocation ends it through the timeout
// path (skill.timeout and completed rows), leaving no cgroup and no socket;
// past max_concurrent the daemon answers 429.
func TestDaemonSIGTERMDuringLongInvocation(t *testing.T) {
	e := newEnv(t)
	e.skill("slow", "effort_minutes: 1\n", "#!/bin/sh\ntrap '' TERM\nsleep 27301\n")
	d := startDaemon(t, e, "shutdown_grace: 1s", "max_concurrent: 1")
	inv := cyberos("skill", "invoke", "slow", "--json", "--socket", d.adminSocket)
	var out bytes.Buffer
	inv.Stdout = &out
	if err := inv.Start(); err != nil {
		t.Fatal(err)
	}
	id := d.onlyInvocation(t)
	if code, _, raw := d.invoke(map[string]any{"skill_id": "slow"}); code != http.StatusTooManyRequests {
		t.Errorf("second invocation past max_concurrent 1: HTTP %d %s", code, raw)
	}
	// The refusal is counted by reason, the request by route and code.
	fams := scrape(t, d.metricsAddr)
	if n := fams[`cyberos_admission_refusals_total{reason="max_concurrent"}`]; n != 1 {
		t.Errorf("cyberos_admission_refusals_total{reason=max_concurrent} = %v, want 1", n)
	}
	if n := fams[`cyberos_admin_requests_total{code="429",route="POST /v1/invocations"}`]; n != 1 {
		t.Errorf("cyberos_admin_requests_total{code=429,route=POST /v1/invocations} = %v, want 1", n)
	}
	// Status lists it once its started row is durable; the sandbox follows.
	// The sleep runs once the skill's trap is set: SIGTERM must find it
	// ignoring TERM, or the skill ends by SIGTERM, not the kill.
	waitFor(t, 20*time.Second, func() bool { return hasCgroup(t, id) && len(procsMatching("sleep 27301")) > 0 })
	t0 := time.Now()
	d.stop(30 * time.Second)
	took := time.Since(t0)
	err := inv.Wait()
	var env envelope
	if jerr := json.Unmarshal(out.Bytes(), &env); jerr != nil {
		t.Fatalf("invoke output: %v %v\n%s", err, jerr, out.String())
	}
	if exitCode(err) != 1 || env.Outcome != "timeout" || env.SignalSent != "SIGKILL" || env.InvocationID != id {
		t.Errorf("invoke: exit %d, %+v", exitCode(err), env)
	}
	if took < time.Second || took > 20*time.Second {
		t.Errorf("daemon stopped %v after SIGTERM; want the 1 s grace plus the kill grace", took)
	}
	var kinds []string
	for _, r := range e.auditRows("--invocation", id) {
		kinds = append(kinds, string(r.Kind))
	}
	if strings.Join(kinds, " ") != "skill.invoked_started skill.timeout skill.invoked_completed" {
		t.Errorf("rows %v", kinds)
	}
	if hasCgroup(t, id) {
		t.Errorf("cgroup of %s left behind", id)
	}
	if ents, _ := os.ReadDir(d.socketDir); len(ents) != 0 {
		t.Errorf("socket dir not empty: %v", ents)
	}
	if _, err := os.Lstat(d.adminSocket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin socket left: %v", err)
	}
	if ps := procsMatching(id); len(ps) != 0 {
		t.Errorf("processes of %s left: %v", id, ps)
	}
}

// Must show: a non-root user outside admin_group is refused by the admin
// socket (by the file mode, and by the SO_PEERCRED check when the mode lets
// it connect); a member of admin_group is let in.
func TestAdminSocketRefusesOthers(t *testing.T) {
	e := newEnv(t)
	d := startDaemon(t, e, "admin_group: \"65534\"")
	fi, err := os.Stat(d.adminSocket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 65534 {
		t.Errorf("admin socket %v uid %d gid %d, want 0660 root:65534", fi.Mode(), st.Uid, st.Gid)
	}
	as := func(uid, gid uint32) (string, int) {
		c := cyberos("skill", "broker", "status", "--socket", d.adminSocket)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		var errb bytes.Buffer
		c.Stderr = &errb
		out, err := c.Output()
		return string(out) + errb.String(), exitCode(err)
	}
	if out, code := as(65534, 65534); code != 0 || !strings.Contains(out, "active_invocations") {
		t.Errorf("a member of admin_group: exit %d %s", code, out)
	}
	if out, code := as(65534, 65533); code != 3 || !strings.Contains(out, "permission denied") {
		t.Errorf("an outsider through the 0660 mode: exit %d %s", code, out)
	}
	// Open the file mode: the peer-credential check alone must refuse.
	if err := os.Chmod(d.adminSocket, 0o666); err != nil {
		t.Fatal(err)
	}
	if out, code := as(65534, 65533); code != 3 || !strings.Contains(out, "HTTP 403") {
		t.Errorf("an outsider past the file mode: exit %d %s", code, out)
	}
	// Raw HTTP (what curl sends) gets 403 and the connection is closed.
	c := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", d.adminSocket, "http://x/v1/status")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65533, Groups: []uint32{}}}
	if out, err := c.Output(); err != nil || string(out) != "403" {
		t.Errorf("curl as an outsider: %v %s, want 403", err, out)
	}
}

// The admin API's refusals: 400 for a bad request or an invalid skill, 404
// for an unknown skill or version, 503 when the state dir (the start row)
// cannot be written — and then the skill never runs.
func TestDaemonInvokeRefusals(t *testing.T) {
	e := newEnv(t)
	mnt := e.tinyStateDir(t)
	e.skill("ok", "version: 1.2.3\n", "#!/bin/sh\necho '{}'\n")
	e.skill("sleepy", "", "#!/bin/sh\nexec /bin/sleep 16181\n")
	// A folder whose frontmatter names another skill.
	e.skill("impostor", "", "#!/bin/sh\necho '{}'\n")
	os.WriteFile(filepath.Join(e.base, "skills", "impostor", "SKILL.md"), []byte("---\nname: ok\ndescription: d\n---\n"), 0o644)
	d := startDaemon(t, e)
	for _, tc := range []struct {
		body map[string]any
		code int
	}{
		{map[string]any{"skill_id": "nope"}, 404},
		{map[string]any{"skill_id": "ok", "version": "9.9.9"}, 404},
		{map[string]any{"skill_id": "../ok"}, 400},
		{map[string]any{"skill_id": "OK"}, 400},
		{map[string]any{"skill_id": "impostor"}, 400},
		{map[string]any{"skill_id": "ok", "traceparent": "nonsense"}, 400},
		{map[string]any{"skill_id": "ok", "surprise": 1}, 400},
		{map[string]any{"skill_id": "ok", "version": "1.2.3"}, 200},
	} {
		if code, _, raw := d.invoke(tc.body); code != tc.code {
			t.Errorf("%v: HTTP %d %s, want %d", tc.body, code, raw, tc.code)
		}
	}
	// Fill the state dir's filesystem to the last byte.
	filler, _ := os.OpenFile(filepath.Join(mnt, "filler"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	buf := make([]byte, 64<<10)
	for _, n := range []int{len(buf), 512, 1} {
		for {
			if _, err := filler.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	filler.Close()
	code, _, raw := d.invoke(map[string]any{"skill_id": "sleepy"})
	if code != http.StatusServiceUnavailable {
		t.Errorf("full state dir: HTTP %d %s, want 503", code, raw)
	}
	out, err := cyberos("skill", "invoke", "sleepy", "--socket", d.adminSocket).CombinedOutput()
	if exitCode(err) != 3 {
		t.Errorf("skill invoke on a full state dir: exit %d %s, want 3", exitCode(err), out)
	}
	if len(procsMatching("sleep 16181")) > 0 {
		t.Error("the skill ran")
	}
	os.Remove(filepath.Join(mnt, "filler"))
}

// onlyInvocation waits until the daemon runs exactly one invocation and
// returns its id.
func (d *daemonProc) onlyInvocation(t *testing.T) string {
	t.Helper()
	var id string
	waitFor(t, 20*time.Second, func() bool {
		if st := d.status(); len(st.Invocations) == 1 {
			id = st.Invocations[0].InvocationID
			return true
		}
		return false
	})
	return id
}
