package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
)

// A subscriber that never reads is cut off once its buffer is full; the
// publisher never blocks, and a reading subscriber gets every event in order.
// The test runs in a synctest bubble: a decided that blocked would leave
// every goroutine blocked, which fails the test, and synctest.Wait after each
// event lets the reader drain, so it must not be cut off.
func TestHubSlowSubscriberNeverBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		n := subscriberBuffer + 50
		var want []string
		for i := range n {
			tool := "T" + string(rune('a'+i%26))
			want = append(want, tool)
			h.decided(broker.Decided{InvocationID: "inv1", Tool: tool, Outcome: "success"})
			synctest.Wait()
		}
		if !h.overflowed(slow) {
			t.Error("the slow subscriber was not cut off")
		}
		if h.overflowed(fast) {
			t.Error("the reading subscriber was cut off")
		}
		h.ended("inv1", "success")
		if tools := <-got; !slices.Equal(tools, want) {
			t.Errorf("reader got %d events %v, want the %d in order", len(tools), tools, n)
		}
		st := h.status()
		if st.ToolCallsToday != int64(n) || st.ActiveInvocations != 0 {
			t.Errorf("status %+v", st)
		}
	})
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
