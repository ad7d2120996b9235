package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/sandbox"
)

func TestExampleConfigIsValid(t *testing.T) {
	c, err := LoadConfig("../../packaging/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c != DefaultConfig() {
		t.Errorf("the example config differs from the defaults:\n%+v\n%+v", c, DefaultConfig())
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"version: 1\nskils_dir: /x\n", "skils_dir"},
		{"version: 1\ndefaults: {memory_mb: 512, pid_max: 3}\n", "pid_max"},
		{"version: 2\n", "version"},
		{"version: 1\nskills_dir: relative\n", "skills_dir"},
		{"version: 1\nmax_concurrent: 0\n", "max_concurrent"},
		{"version: 1\ndefaults: {memory_mb: 1}\n", "defaults.memory_mb"},
		{"version: 1\ndefaults: {seccomp_profile: ../x}\n", "defaults.seccomp_profile"},
		{"version: 1\ndefaults: {cpu: -1}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {cpu: 65}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {cpu: .nan}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {file_size_mb: 0}\n", "defaults.file_size_mb"},
		{"version: 1\ndefaults: {nofile: 16}\n", "defaults.nofile"},
		{"version: 1\ndefaults: {rate_limit_per_minute: 0}\n", "defaults.rate_limit_per_minute"},
		{"version: 1\ndefaults: {max_broker_connections: 2000}\n", "defaults.max_broker_connections"},
		{"version: 1\ndefaults: {max_audit_rows: 10}\n", "defaults.max_audit_rows"},
		{"version: 1\nshutdown_grace: forever\n", "shutdown_grace"},
		{"version: 1\nmetrics_listen: nocolon\n", "metrics_listen"},
		{"version: 1\nadmin_group: no-such-group-cyberos\n", "admin_group"},
		{"version: 1\nmax_concurrent: many\n", "max_concurrent"},
		{"version: 1\nmax_concurrent_starts: -1\n", "max_concurrent_starts"},
		{"version: 1\nuserns: {ranges: 8}\n", "userns.ranges"},
		{"version: 1\nuserns: {ranges: 260}\n", "warm.max_sandboxes"},
		{"version: 1\nwarm: {max_sandboxes: -1}\n", "warm.max_sandboxes"},
		{"version: 1\nwarm: {max_per_skill: 0}\n", "warm.max_per_skill"},
		{"version: 1\nwarm: {max_memory_mb: -5}\n", "warm.max_memory_mb"},
		{"version: 1\nwarm: {idle: 10ms}\n", "warm.idle"},
		{"version: 1\nwarm: {idle: soon}\n", "idle"},
		{"version: 1\nwarm: {max_sandbox: 3}\n", "max_sandbox"},
		{"version: 1\nuserns: {host_id_base: 0}\n", "userns.host_id_base"},
		{"version: 1\nuserns: {host_id_base: 4294000000}\n", "userns.host_id_base"},
		{"version: 1\nuserns: {host_id_base: 1000000, ranges: 70000, extra: 1}\n", "extra"},
		{"version: 1\nfleet: {postgres_dsn: 'postgres://a@b/c', postgres_dsn_file: /etc/dsn}\n", "fleet"},
		{"version: 1\nfleet: {postgres_dsn_file: dsn.txt}\n", "fleet.postgres_dsn_file"},
		{"version: 1\nfleet: {host_id: 'a b'}\n", "fleet.host_id"},
		{"version: 1\nfleet: {host_id: ../x}\n", "fleet.host_id"},
		{"version: 1\nfleet: {dsn: x}\n", "dsn"},
		{"version: 1\naudit: {scrub_interval: 10s}\n", "audit.scrub_interval"},
		{"version: 1\naudit: {scrub_interval: 1000h}\n", "audit.scrub_interval"},
		{"version: 1\naudit: {scrub_interval: often}\n", "audit.scrub_interval"},
		{"version: 1\nlimits: {max_memory_mb: 256}\n", "limits.max_memory_mb: 256 is below defaults.memory_mb (512)"},
		{"version: 1\nlimits: {max_memory_mb: 70000}\n", "limits.max_memory_mb"},
		{"version: 1\nlimits: {max_pids: 32}\n", "limits.max_pids: 32 is below defaults.pids_max (64)"},
		{"version: 1\nlimits: {max_pids: 5000}\n", "limits.max_pids"},
		{"version: 1\nlimits: {max_cpu: 0.5}\n", "limits.max_cpu: 0.5 is below defaults.cpu (1)"},
		{"version: 1\nlimits: {max_cpu: 0}\n", "limits.max_cpu"},
		{"version: 1\nlimits: {max_cpu: .nan}\n", "limits.max_cpu"},
		{"version: 1\ndefaults: {cpu: 0}\nlimits: {max_cpu: 0.25}\n", "limits.max_cpu: 0.25 is below defaults.cpu 0"},
		{"version: 1\nlimits: {max_memory: 1024}\n", "max_memory"},
		{"version: 1\nmemory: {tenant_concurrency: 0}\n", "memory.tenant_concurrency"},
		{"version: 1\nmemory: {statement_timeout: 1ms}\n", "memory.statement_timeout"},
		{"version: 1\nmemory: {statement_timeout: later}\n", "memory.statement_timeout"},
		{"version: 1\nmemory: {tenant_writes_per_second: 0}\n", "memory.tenant_writes_per_second"},
		{"version: 1\nmemory: {tenant_writes_per_second: .nan}\n", "memory.tenant_writes_per_second"},
		{"version: 1\nmemory: {tenant_write_burst: 0}\n", "memory.tenant_write_burst"},
		{"version: 1\nmemory: {tenant_burst: 5}\n", "tenant_burst"},
	} {
		p := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(p, []byte(tc.yaml), 0o644)
		_, err := LoadConfig(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: err %v, want ErrConfig naming %s", tc.yaml, err, tc.key)
		}
	}
}

// TestConfigScrubInterval: audit.scrub_interval defaults to an hour, and
// 0 turns the scrub off.
func TestConfigScrubInterval(t *testing.T) {
	if got := time.Duration(DefaultConfig().Audit.ScrubInterval); got != time.Hour {
		t.Errorf("default scrub_interval %v, want 1h", got)
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("version: 1\naudit: {scrub_interval: 0s}\n"), 0o644)
	c, err := LoadConfig(p)
	if err != nil || c.Audit.ScrubInterval != 0 {
		t.Errorf("scrub_interval 0s: %v, %v", c.Audit.ScrubInterval, err)
	}
}

// fleet.host_id defaults to $CYBEROS_HOST_ID, then to the hostname; the
// DSN may come from a file (a mounted secret), whose emptiness is an error.
func TestFleetHostIDAndDSN(t *testing.T) {
	t.Setenv(HostIDEnv, "node-7")
	if id, err := (Fleet{}).ResolvedHostID(); err != nil || id != "node-7" {
		t.Errorf("host id from $%s: %q %v", HostIDEnv, id, err)
	}
	if id, err := (Fleet{HostID: "host-a"}).ResolvedHostID(); err != nil || id != "host-a" {
		t.Errorf("configured host id: %q %v", id, err)
	}
	t.Setenv(HostIDEnv, "")
	h, _ := os.Hostname()
	if id, err := (Fleet{}).ResolvedHostID(); err != nil || id != h {
		t.Errorf("host id from the hostname %q: %q %v", h, id, err)
	}
	t.Setenv(HostIDEnv, "bad id")
	if _, err := (Fleet{}).ResolvedHostID(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "$"+HostIDEnv) {
		t.Errorf("a bad $%s: %v", HostIDEnv, err)
	}
	f := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(f, []byte("postgres://u@db:5432/c\n"), 0o400)
	if dsn, err := (Fleet{PostgresDSNFile: f}).DSN(); err != nil || dsn != "postgres://u@db:5432/c" {
		t.Errorf("DSN from a file: %q %v", dsn, err)
	}
	os.WriteFile(f, []byte("\n"), 0o400)
	if _, err := (Fleet{PostgresDSNFile: f}).DSN(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty DSN file: %v", err)
	}
	if (Fleet{}).Enabled() || !(Fleet{PostgresDSNFile: f}).Enabled() {
		t.Errorf("Enabled: only with a DSN or a DSN file")
	}
}

// The sandboxes' id ranges may not overlap the host's users, groups or
// subordinate ids; the error names the setting and the file.
func TestConfigUsernsOverlapsHostIDs(t *testing.T) {
	dir := t.TempDir()
	subuid := filepath.Join(dir, "subuid")
	os.WriteFile(subuid, []byte("alice:1100000:65536\n"), 0o644)
	old := sandbox.HostIDFiles
	sandbox.HostIDFiles = []string{subuid}
	defer func() { sandbox.HostIDFiles = old }()
	c := DefaultConfig()
	err := c.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "userns.host_id_base") || !strings.Contains(err.Error(), subuid) {
		t.Fatalf("default ranges over a subuid range: err %v, want ErrConfig naming userns.host_id_base and %s", err, subuid)
	}
	c.Userns.HostIDBase = 1100000 + 65536
	if err := c.Validate(); err != nil {
		t.Fatalf("ranges after the subuid range: %v", err)
	}
	if c.IDRanges() != c.MaxConcurrent+c.Warm.MaxSandboxes+DefaultTeardowns || c.Teardowns() != DefaultTeardowns {
		t.Fatalf("ranges %d, teardowns %d; want max_concurrent %d + warm.max_sandboxes %d + %d teardowns by default", c.IDRanges(), c.Teardowns(), c.MaxConcurrent, c.Warm.MaxSandboxes, DefaultTeardowns)
	}
	c.Userns.Ranges = c.MaxConcurrent + c.Warm.MaxSandboxes
	if c.Teardowns() != 0 {
		t.Fatalf("teardowns %d with no spare range, want 0", c.Teardowns())
	}
}

// A subscriber that never reads is cut off once its buffer is full; the
// publisher never blocks, and a reading subscriber gets every event in order.
func TestHubSlowSubscriberNeverBlocks(t *testing.T) {
	h := newHub(nil)
	h.started(supervisor.Started{InvocationID: "inv1", SkillID: "s", StartedAt: time.Now()})
	_, _, slow, ok := h.subscribe("inv1")
	if !ok {
		t.Fatal("not live")
	}
	_, _, fast, _ := h.subscribe("inv1")
	got := make(chan []string)
	go func() {
		var tools []string
		for ev := range fast.ch {
			tools = append(tools, ev.Tool)
		}
		got <- tools
	}()
	done := make(chan struct{})
	n := subscriberBuffer + 50
	go func() {
		for i := 0; i < n; i++ {
			h.decided(broker.Decided{InvocationID: "inv1", Tool: "T" + string(rune('a'+i%26)), Outcome: "success"})
			if i < 5 {
				time.Sleep(time.Millisecond)
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("decided blocked on a slow subscriber")
	}
	if !h.overflowed(slow) {
		t.Error("the slow subscriber was not cut off")
	}
	h.ended("inv1", "success")
	tools := <-got
	if len(tools) < subscriberBuffer { // the reader may also fall behind under load, never silently
		if !h.overflowed(fast) {
			t.Errorf("reader got %d of %d events without an overflow", len(tools), n)
		}
	}
	st := h.status()
	if st.ToolCallsToday != int64(n) || st.ActiveInvocations != 0 {
		t.Errorf("status %+v", st)
	}
}

func TestHubCountsAndDayRoll(t *testing.T) {
	now := time.Date(2026, 1, 2, 23, 59, 0, 0, time.UTC)
	h := newHub(func() time.Time { return now })
	h.seed("2026-01-02", 10, 3, 2)
	h.started(supervisor.Started{InvocationID: "a", SkillID: "s", StartedAt: now})
	h.decided(broker.Decided{InvocationID: "a", Tool: "Read", Outcome: "denied"})
	h.protocolAbuse("a", "not_json_rpc")
	st := h.status()
	if st.ToolCallsToday != 11 || st.DeniedToday != 4 || st.ActiveInvocations != 1 || st.Invocations[0].ToolCalls != 1 ||
		st.ProtocolAbuseToday != 3 || fmt.Sprint(st.Invocations[0].ProtocolAbuse) != "[not_json_rpc]" {
		t.Errorf("%+v", st)
	}
	now = now.Add(2 * time.Minute)
	if st := h.status(); st.ToolCallsToday != 0 || st.DeniedToday != 0 || st.ProtocolAbuseToday != 0 || st.Day != "2026-01-03" {
		t.Errorf("after midnight UTC %+v", st)
	}
}

// rows is an in-memory RowSource.
type rows []audit.Row

func (rs rows) Each(_ context.Context, f auditstore.Filter, fn func(audit.Row) error) error {
	for _, r := range rs {
		if f.Kind != "" && r.Kind != f.Kind {
			continue
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func row(ts string, k audit.Kind, payload string) audit.Row {
	return audit.Row{TS: ts, Kind: k, Payload: []byte(payload)}
}

var h1, h2, h3 = strings.Repeat("1", 64), strings.Repeat("2", 64), strings.Repeat("3", 64)

// Replay merges an in-tool denial (completed "denied: …" + tool_denied)
// into one call, takes args hashes from the started rows, keeps seq order.
func TestReplayAndCountDay(t *testing.T) {
	const day = "2026-01-02"
	rs := rows{
		row(day+"T00:00:00.000000000Z", audit.KindInvokedStarted, `{"invocation_id":"i"}`),
		row(day+"T00:00:01.000000000Z", audit.KindToolCallStarted, `{"invocation_id":"i","call_id":"c1","tool":"Read","args_hash":"`+h1+`"}`),
		row(day+"T00:00:02.000000000Z", audit.KindToolCallCompleted, `{"invocation_id":"i","call_id":"c1","tool":"Read","outcome":"success","duration_ms":5,"error_message":null}`),
		row(day+"T00:00:03.000000000Z", audit.KindToolDenied, `{"invocation_id":"i","tool":"Bash","reason":"tool_not_in_allowed_tools","attempted_args_hash":"`+h2+`"}`),
		row(day+"T00:00:04.000000000Z", audit.KindToolCallStarted, `{"invocation_id":"i","call_id":"c2","tool":"Write","args_hash":"`+h3+`"}`),
		row(day+"T00:00:05.000000000Z", audit.KindToolCallCompleted, `{"invocation_id":"i","call_id":"c2","tool":"Write","outcome":"error","duration_ms":7,"error_message":"denied: file_violation"}`),
		row(day+"T00:00:06.000000000Z", audit.KindToolDenied, `{"invocation_id":"i","tool":"Write","reason":"file_violation","attempted_args_hash":"`+h3+`"}`),
		row("2026-01-01T23:00:00.000000000Z", audit.KindToolDenied, `{"invocation_id":"old","tool":"Bash","reason":"tool_denied","attempted_args_hash":"`+h2+`"}`),
	}
	calls, found, err := Replay(context.Background(), rs[:7], "i")
	if err != nil || !found {
		t.Fatal(err, found)
	}
	want := []broker.Decided{
		{TS: rs[2].TS, InvocationID: "i", Tool: "Read", Outcome: "success", DurationMS: 5, ArgsHash: h1},
		{TS: rs[3].TS, InvocationID: "i", Tool: "Bash", Outcome: "denied", ArgsHash: h2, Reason: "tool_not_in_allowed_tools"},
		{TS: rs[6].TS, InvocationID: "i", Tool: "Write", Outcome: "denied", DurationMS: 7, ArgsHash: h3, Reason: "file_violation"},
	}
	if len(calls) != len(want) {
		t.Fatalf("%+v", calls)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
	c, d, err := CountDay(context.Background(), rs, day)
	if err != nil || c != 3 || d != 2 {
		t.Errorf("CountDay %d %d %v, want 3 2", c, d, err)
	}
}

// Rejudge marks exactly the calls whose tool the new policy refuses; an
// argument-level verdict is never guessed.
func TestRejudge(t *testing.T) {
	pol, err := policy.Parse([]byte("---\nname: s\ndescription: d\nallowed_tools: [Bash, Read]\ndisallowed_tools: [Write]\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	calls := []broker.Decided{{Tool: "Bash"}, {Tool: "Read"}, {Tool: "Write"}, {Tool: "HttpFetch"}, {Tool: "Nope"}}
	got := Rejudge(calls, pol)
	want := []struct{ verdict, why string }{
		{VerdictAllowed, ""},
		{VerdictUndecidable, "args not recorded"},
		{VerdictDenied, "tool_denied"},
		{VerdictDenied, "tool_not_in_allowed_tools"},
		{VerdictDenied, "unknown_tool"},
	}
	for i, w := range want {
		if got[i].Verdict != w.verdict || !strings.Contains(got[i].Why, w.why) {
			t.Errorf("%s: %s (%s), want %s (%s)", calls[i].Tool, got[i].Verdict, got[i].Why, w.verdict, w.why)
		}
	}
}

// Replay reads spec §8's tool_name (rows before it say tool, above) and
// names the policy_hash of the invocation's started row on every call.
func TestReplayToolNameAndPolicyHash(t *testing.T) {
	const day = "2026-01-03"
	rs := rows{
		row(day+"T00:00:00.000000000Z", audit.KindInvokedStarted, `{"invocation_id":"i","policy_hash":"`+h3+`"}`),
		row(day+"T00:00:01.000000000Z", audit.KindToolCallStarted, `{"invocation_id":"i","call_id":"c1","tool_name":"Read","args_hash":"`+h1+`"}`),
		row(day+"T00:00:02.000000000Z", audit.KindToolCallCompleted, `{"invocation_id":"i","call_id":"c1","tool_name":"Read","outcome":"success","duration_ms":5,"error_message":null}`),
		row(day+"T00:00:03.000000000Z", audit.KindToolDenied, `{"invocation_id":"i","tool_name":"Write","reason":"file_violation","attempted_args_hash":"`+h2+`"}`),
	}
	calls, found, err := Replay(context.Background(), rs, "i")
	if err != nil || !found {
		t.Fatal(err, found)
	}
	want := []broker.Decided{
		{TS: rs[2].TS, InvocationID: "i", Tool: "Read", Outcome: "success", DurationMS: 5, ArgsHash: h1, PolicyHash: h3},
		{TS: rs[3].TS, InvocationID: "i", Tool: "Write", Outcome: "denied", ArgsHash: h2, Reason: "file_violation", PolicyHash: h3},
	}
	if len(calls) != len(want) {
		t.Fatalf("%+v", calls)
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], want[i])
		}
	}
}

// TestConfigSigningKey: a relative audit.signing_key is taken from the
// config file's directory (/etc/cyberos without one), one inside state_dir
// is refused naming the key, and the key is reserved from the file tools.
func TestConfigSigningKey(t *testing.T) {
	c := DefaultConfig()
	if got := c.SigningKeyPath(""); got != "/etc/cyberos/audit-signing.key" {
		t.Errorf("without a config file: %s", got)
	}
	if got := c.SigningKeyPath("/srv/conf/supervisor.yaml"); got != "/srv/conf/audit-signing.key" {
		t.Errorf("beside the config: %s", got)
	}
	if r := c.ReservedPaths("/srv/conf/supervisor.yaml"); !slices.Contains(r, "/srv/conf/audit-signing.key") || !slices.Contains(r, "/srv/conf/audit-signing.key.pub") {
		t.Errorf("reserved paths %v lack the key", r)
	}
	if r := c.ReservedPaths("/srv/conf/supervisor.yaml"); slices.Contains(r, "/srv/conf") || !slices.Contains(r, "/srv/conf/supervisor.yaml") || !slices.Contains(r, DefaultConfigDir) {
		t.Errorf("reserved paths %v: want the config file and %s, not the config's directory", r, DefaultConfigDir)
	}
	c.Audit.SigningKey = "/var/lib/cyberos/keys/k"
	if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "audit.signing_key") || !strings.Contains(err.Error(), "inside state_dir") {
		t.Errorf("a key in state_dir: %v", err)
	}
	c.Audit.SigningKey = "../lib/cyberos/k"
	if err := c.CheckSigningKeyPath("/var/etc/supervisor.yaml"); err == nil {
		t.Error("a relative key resolving into state_dir was accepted")
	}
	c.Audit.SigningKey = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "audit.signing_key") {
		t.Errorf("an empty key: %v", err)
	}
	c = DefaultConfig()
	c.Audit.Syslog = "dev/log"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "audit.syslog") {
		t.Errorf("a relative syslog socket: %v", err)
	}
}

// TestHubEventsPerSkill: an events watcher of one skill sees that skill's
// start, calls and end and nothing of another's; a watcher of all sees
// both; a watcher that does not read is cut off without blocking.
func TestHubEventsPerSkill(t *testing.T) {
	h := newHub(nil)
	one, all, stuck := h.watch("a"), h.watch(""), h.watch("")
	// Fill stuck's buffer so the next event overflows it.
	for range subscriberBuffer {
		stuck.ch <- Event{}
	}
	h.started(supervisor.Started{InvocationID: "i-a", SkillID: "a", TenantID: "t", StartedAt: time.Now()})
	h.started(supervisor.Started{InvocationID: "i-b", SkillID: "b", TenantID: "t", StartedAt: time.Now()})
	h.decided(broker.Decided{InvocationID: "i-a", Tool: "Read", Outcome: "success"})
	h.decided(broker.Decided{InvocationID: "i-b", Tool: "Bash", Outcome: "denied"})
	h.ended("i-a", "success")
	h.ended("i-b", "error")
	h.unwatch(one)
	h.unwatch(all)
	var gotOne, gotAll []string
	for ev := range one.ch {
		gotOne = append(gotOne, ev.Type+":"+ev.SkillID)
	}
	for ev := range all.ch {
		gotAll = append(gotAll, ev.Type+":"+ev.SkillID)
	}
	if w := "invocation_started:a tool_call:a invocation_ended:a"; strings.Join(gotOne, " ") != w {
		t.Errorf("watcher of a: %v, want %s", gotOne, w)
	}
	if len(gotAll) != 6 {
		t.Errorf("watcher of all: %v, want 6 events", gotAll)
	}
	if !h.watcherOverflowed(stuck) {
		t.Error("the watcher that did not read was not cut off")
	}
}
