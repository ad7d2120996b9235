package daemon

import (
	"context"
	"strings"
	"testing"

	"cyberos.dev/audit"
)

// TestRecentEndedAndInspect: the recent list is the last N ended
// invocations newest first; inspect merges an invocation's started and
// completed rows and counts its calls and denials; a running one says so.
func TestRecentEndedAndInspect(t *testing.T) {
	rs := rows{
		row("T1", audit.KindInvokedStarted, `{"invocation_id":"a","skill_id":"s","version":"1.0.0"}`),
		row("T2", audit.KindToolDenied, `{"invocation_id":"a","tool":"Bash","reason":"tool_not_in_allowed_tools","attempted_args_hash":"`+h2+`"}`),
		row("T3", audit.KindInvokedCompleted, `{"invocation_id":"a","skill_id":"s","tenant_id":"t","outcome":"error","duration_ms":12,"error_message":"exit 3"}`),
		row("T4", audit.KindInvokedCompleted, `{"invocation_id":"b","skill_id":"s","outcome":"success","duration_ms":5}`),
		row("T5", audit.KindInvokedCompleted, `{"invocation_id":"c","skill_id":"u","outcome":"timeout","duration_ms":9}`),
		row("T6", audit.KindInvokedStarted, `{"invocation_id":"d","skill_id":"u"}`),
	}
	got, err := RecentEnded(context.Background(), rs, 2)
	if err != nil || len(got) != 2 || got[0] != (Recent{InvocationID: "c", SkillID: "u", EndedAt: "T5", Outcome: "timeout", DurationMS: 9}) || got[1].InvocationID != "b" {
		t.Errorf("RecentEnded(2): %+v %v", got, err)
	}
	rec, found, err := Inspect(context.Background(), byInvocation(rs, "a"), "a")
	if err != nil || !found {
		t.Fatal(err, found)
	}
	for k, want := range map[string]any{"version": "1.0.0", "outcome": "error", "error_message": "exit 3", "started_at": "T1", "ended_at": "T3", "running": false, "tool_calls": 1, "denied": 1} {
		if rec[k] != want {
			t.Errorf("inspect a: %s = %v, want %v", k, rec[k], want)
		}
	}
	if rec, _, _ := Inspect(context.Background(), byInvocation(rs, "d"), "d"); rec["running"] != true {
		t.Errorf("inspect d (no completed row): running %v", rec["running"])
	}
	if _, found, _ := Inspect(context.Background(), byInvocation(rs, "zz"), "zz"); found {
		t.Error("inspect of an unknown invocation found rows")
	}
}

// byInvocation is rs filtered as auditstore.Filter{InvocationID: id} would.
func byInvocation(rs rows, id string) rows {
	var out rows
	for _, r := range rs {
		if strings.Contains(string(r.Payload), `"invocation_id":"`+id+`"`) {
			out = append(out, r)
		}
	}
	return out
}
