//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procCPU is the user+system CPU time the process pid has used so far.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name (which may hold spaces) in ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	const hz = 100                           // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

// floodSkill installs the flood probe as a skill allowed only Read.
func floodSkill(e *env, name string) {
	e.skill(name, "allowed_tools: [Read]\n", "probe:flood")
}

// invocationLogLines counts the daemon's log lines naming the invocation.
func invocationLogLines(d *daemonProc, id string) (n int) {
	for _, l := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(l, id) {
			n++
		}
	}
	return n
}

// kinds counts rows by kind.
func kinds(rows []row) map[string]int {
	m := map[string]int{}
	for _, r := range rows {
		m[r.Kind]++
	}
	return m
}

// completedRow is the invocation's skill.invoked_completed payload.
func completedRow(t *testing.T, rows []row) map[string]any {
	t.Helper()
	for _, r := range rows {
		if r.Kind == "skill.invoked_completed" {
			var m map[string]any
			if err := json.Unmarshal(r.Payload, &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no skill.invoked_completed row among %v", kinds(rows))
	return nil
}

// baselineCPU is the daemon's CPU for one invocation of the flood skill
// that floods nothing (one connection, no call): what a flood's figure is
// compared with.
func baselineCPU(t *testing.T, d *daemonProc, skill string) time.Duration {
	t.Helper()
	pid := d.cmd.Process.Pid
	cpu0 := procCPU(t, pid)
	if code, env, raw := d.invoke(map[string]any{"skill_id": skill, "args": map[string]any{"mode": "denied", "calls": 0, "conns": 1}}); code != 200 || env.Outcome != "success" {
		t.Fatalf("baseline invocation: HTTP %d %s", code, raw)
	}
	return procCPU(t, pid) - cpu0
}

// floodFigures logs what a flood cost: rows and bytes for the invocation,
// the daemon's CPU and log lines, each also per 10 s of flood.
func floodFigures(t *testing.T, what string, rows []row, raw []byte, cpu, base, wall time.Duration, logLines int) {
	per10 := func(x float64) float64 { return x * float64(10*time.Second) / float64(max(wall, time.Millisecond)) }
	t.Logf("%s: %d rows, %d bytes exported, %d daemon log lines, supervisor CPU %v (an invocation without the flood: %v) in %v wall (per 10 s: %.0f rows, %.0f bytes, %.2f CPU-s, %.0f log lines)",
		what, len(rows), len(raw), logLines, cpu, base, wall.Round(time.Millisecond),
		per10(float64(len(rows))), per10(float64(len(raw))), per10(cpu.Seconds()), per10(float64(logLines)))
}

// TestFloodDeniedCallsBounded: issue 16 #5. 10 000 denied tool.calls over
// 8 connections leave at most max_audit_rows (1 000) rows for the
// invocation, every call up to the cap audited; the cap is recorded once as
// skill.audit_cap_reached and the invocation ends killed.
func TestFloodDeniedCallsBounded(t *testing.T) {
	e := newEnv(t)
	floodSkill(e, "flooder")
	d := startDaemon(t, e)
	base := baselineCPU(t, d, "flooder")
	pid := d.cmd.Process.Pid
	cpu0, t0 := procCPU(t, pid), time.Now()
	code, env, raw := d.invoke(map[string]any{"skill_id": "flooder", "args": map[string]any{"mode": "denied", "calls": 10000, "conns": 8}})
	wall, cpu := time.Since(t0), procCPU(t, pid)-cpu0
	if code != 200 {
		t.Fatalf("invoke: HTTP %d %s", code, raw)
	}
	exported, rows := e.export("--invocation", env.InvocationID)
	floodFigures(t, "denied flood", rows, exported, cpu, base, wall, invocationLogLines(d, env.InvocationID))
	k := kinds(rows)
	t.Logf("rows by kind: %v; outcome %s: %s", k, env.Outcome, env.ErrorMessage)

	if len(rows) > 1000 {
		t.Errorf("%d audit rows for one invocation; want at most 1000", len(rows))
	}
	if env.Outcome != "killed" {
		t.Errorf("outcome %q (%s); want killed", env.Outcome, env.ErrorMessage)
	}
	if k["skill.audit_cap_reached"] != 1 {
		t.Errorf("%d skill.audit_cap_reached rows; want exactly 1", k["skill.audit_cap_reached"])
	}
	if c := completedRow(t, rows); c["outcome"] != "killed" || !strings.Contains(fmt.Sprint(c["error_message"]), "audit") {
		t.Errorf("completed row %v; want outcome killed naming the audit cap", c)
	}
	// Every call up to the cap is audited: the denied rows fill the budget.
	if k["skill.tool_denied"] < 900 {
		t.Errorf("%d skill.tool_denied rows; every call up to the cap must be audited", k["skill.tool_denied"])
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("audit verify: exit %d\n%s", code, out)
	}
}

// TestFloodConnectLoopBounded: issue 16 #5. A skill that opens 40
// connections at once (over the cap of 16), then opens and drops 5 000
// more, half of them mid-frame, costs a bounded number of audit rows and log lines; the
// refusals are recorded as protocol abuse on the completed row.
func TestFloodConnectLoopBounded(t *testing.T) {
	e := newEnv(t)
	floodSkill(e, "connector")
	d := startDaemon(t, e)
	base := baselineCPU(t, d, "connector")
	pid := d.cmd.Process.Pid
	cpu0, t0 := procCPU(t, pid), time.Now()
	code, env, raw := d.invoke(map[string]any{"skill_id": "connector", "args": map[string]any{"mode": "connect", "calls": 5000, "conns": 40}})
	wall, cpu := time.Since(t0), procCPU(t, pid)-cpu0
	if code != 200 {
		t.Fatalf("invoke: HTTP %d %s", code, raw)
	}
	exported, rows := e.export("--invocation", env.InvocationID)
	lines := invocationLogLines(d, env.InvocationID)
	floodFigures(t, "connect loop", rows, exported, cpu, base, wall, lines)
	t.Logf("rows by kind: %v; outcome %s; result %s", kinds(rows), env.Outcome, env.Result)
	if env.Outcome != "success" {
		t.Errorf("outcome %q (%s); want success", env.Outcome, env.ErrorMessage)
	}
	if len(rows) > 20 {
		t.Errorf("%d audit rows for a connect loop; want a handful", len(rows))
	}
	if lines > 100 {
		t.Errorf("%d daemon log lines name the invocation; want them rate-limited (at most 100)", lines)
	}
	abuse, _ := completedRow(t, rows)["protocol_abuse"].(map[string]any)
	if abuse["too_many_connections"] == nil || abuse["truncated_frame"] == nil {
		t.Errorf("completed row protocol_abuse %v; want too_many_connections and truncated_frame counted", abuse)
	}
}

// TestGarbageFrameIsAudited: issue 16 #6. An HTTP request on the broker
// socket (amicontained's GET /info), twice, and a 2 MiB frame leave one
// skill.protocol_abuse row per kind, the counts on the completed row and in
// the envelope, and the daemon's status counts them.
func TestGarbageFrameIsAudited(t *testing.T) {
	e := newEnv(t)
	floodSkill(e, "garbler")
	d := startDaemon(t, e)
	code, env, raw := d.invoke(map[string]any{"skill_id": "garbler", "args": map[string]any{"mode": "garbage"}})
	if code != 200 {
		t.Fatalf("invoke: HTTP %d %s", code, raw)
	}
	if env.Outcome != "success" {
		t.Fatalf("outcome %q (%s)", env.Outcome, env.ErrorMessage)
	}
	var out map[string]any
	json.Unmarshal(env.Result, &out)
	if out["list_ok"] != true {
		t.Errorf("the broker stopped serving after the abuse: %v", out)
	}
	_, rows := e.export("--invocation", env.InvocationID)
	var abuseKinds []string
	for _, r := range rows {
		if r.Kind == "skill.protocol_abuse" {
			abuseKinds = append(abuseKinds, fmt.Sprint(r.field("abuse_kind")))
		}
	}
	if strings.Join(abuseKinds, ",") != "not_json_rpc,oversized_frame" {
		t.Errorf("skill.protocol_abuse rows %v; want exactly one not_json_rpc then one oversized_frame (rows: %v)", abuseKinds, kinds(rows))
	}
	abuse, _ := completedRow(t, rows)["protocol_abuse"].(map[string]any)
	if fmt.Sprint(abuse) != "map[not_json_rpc:2 oversized_frame:1]" {
		t.Errorf("completed row protocol_abuse %v; want not_json_rpc 2, oversized_frame 1", abuse)
	}
	if fmt.Sprint(env.ProtocolAbuse) != "map[not_json_rpc:2 oversized_frame:1]" {
		t.Errorf("envelope protocol_abuse %v; want not_json_rpc 2, outsized_frame 1", env.ProtocolAbuse)
	}
	st, err := cyberos("skill", "broker", "status", "--socket", d.adminSocket).Output()
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		ProtocolAbuseToday *int64 `json:"protocol_abuse_today"`
	}
	json.Unmarshal(st, &status)
	if status.ProtocolAbuseToday == nil || *status.ProtocolAbuseToday != 2 {
		t.Errorf("status %s; want protocol_abuse_today 2 (one per kind and invocation)", st)
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("audit verify: exit %d\n%s", code, out)
	}
}
