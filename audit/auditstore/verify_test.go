package auditstore

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"cyberos.dev/audit"
)

// chain returns a verified chain of the given drafts, made by a real store.
func chain(t *testing.T, drafts ...audit.Draft) []audit.Row {
	t.Helper()
	s := openStore(t, t.TempDir())
	emitAll(t, s, drafts...)
	rows := allRows(t, s)
	if rep := Verify(rows); !rep.OK {
		t.Fatalf("fresh chain does not verify: %+v", rep.Problems)
	}
	return rows
}

func TestVerifyEmptyAndGood(t *testing.T) {
	if rep := Verify(nil); !rep.OK || rep.Rows != 0 || rep.LastSeq != 0 || rep.Problems == nil || rep.InFlight == nil {
		t.Fatalf("empty: %+v", rep)
	}
	rows := chain(t, append(invocation("a"), audit.InvokedStarted(common("b"), "1", "p", "", map[string]any{}))...)
	rep := Verify(rows)
	if !rep.OK || rep.Rows != 7 || !slices.Equal(rep.InFlight, []string{"b"}) || rep.LastSeq != 7 || rep.LastHash != rows[6].RowHash {
		t.Fatalf("%+v", rep)
	}
	// The report is also what `audit verify --json` would print.
	if b, err := json.Marshal(rep); err != nil || !strings.Contains(string(b), `"in_flight":["b"]`) {
		t.Fatalf("%s %v", b, err)
	}
}

// TestVerifyNamesAlteredRow: one changed byte in any field of a row names
// that row (seq and row_id); the neighbours are not blamed except the next
// row when its link is what broke.
func TestVerifyNamesAlteredRow(t *testing.T) {
	rows := chain(t, invocation("inv")...)
	const k = 3 // 0-based: seq 4
	flip := func(s string, i int) string {
		b := []byte(s)
		switch c := b[i]; {
		case c >= '0' && c <= '8', c >= 'a' && c <= 'y', c >= 'A' && c <= 'Y':
			b[i] = c + 1
		default:
			b[i] = '0'
		}
		return string(b)
	}
	fields := map[string]func(r *audit.Row, i int) int{ // mutate byte i of the field; return its length
		"kind": func(r *audit.Row, i int) int {
			r.Kind = audit.Kind(flip(string(r.Kind), i%len(r.Kind)))
			return len(r.Kind)
		},
		"ts":        func(r *audit.Row, i int) int { r.TS = flip(r.TS, i%len(r.TS)); return len(r.TS) },
		"row_id":    func(r *audit.Row, i int) int { r.RowID = flip(r.RowID, i%len(r.RowID)); return len(r.RowID) },
		"prev_hash": func(r *audit.Row, i int) int { r.PrevHash = flip(r.PrevHash, i%64); return 64 },
		"row_hash":  func(r *audit.Row, i int) int { r.RowHash = flip(r.RowHash, i%64); return 64 },
		"payload": func(r *audit.Row, i int) int {
			r.Payload = json.RawMessage(flip(string(r.Payload), i%len(r.Payload)))
			return len(r.Payload)
		},
	}
	for name, mut := range fields {
		for i := 0; ; i++ {
			tampered := slices.Clone(rows)
			n := mut(&tampered[k], i)
			rep := Verify(tampered)
			if rep.OK || len(problemsFor(rep, rows[k].Seq, rows[k].RowID)) == 0 {
				t.Fatalf("%s byte %d changed (%+v): row not named; problems %+v", name, i, tampered[k], rep.Problems)
			}
			for _, p := range rep.Problems {
				if p.Seq != rows[k].Seq && p.RowID != rows[k].RowID && !(name == "row_hash" && p.Seq == rows[k+1].Seq) {
					t.Fatalf("%s byte %d: unrelated row blamed: %+v", name, i, p)
				}
			}
			if i == n-1 {
				break
			}
		}
	}
}

func TestVerifyStructuralProblems(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation("b")...)...)
	cases := map[string]struct {
		rows []audit.Row
		seq  int64
		want string
	}{
		"filtered export":  {rows[6:], 7, "chain starts at seq 7, not 1"},
		"deleted row":      {slices.Delete(slices.Clone(rows), 4, 5), 6, "seq 6 follows seq 4"},
		"swapped rows":     {swap(rows, 2, 3), 4, "seq 4 follows seq 2"},
		"duplicated row":   {slices.Insert(slices.Clone(rows), 3, rows[2]), 3, "seq 3 follows seq 3"},
		"genesis replaced": {withPrev(rows, 0, zeroHash(1)), 1, "not the genesis hash"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rep := Verify(tc.rows)
			if rep.OK {
				t.Fatal("verified")
			}
			found := false
			for _, p := range rep.Problems {
				found = found || (p.Seq == tc.seq && strings.Contains(p.Reason, tc.want))
			}
			if !found {
				t.Fatalf("want %q at seq %d; got %+v", tc.want, tc.seq, rep.Problems)
			}
		})
	}
}

func swap(rows []audit.Row, i, j int) []audit.Row {
	out := slices.Clone(rows)
	out[i], out[j] = out[j], out[i]
	return out
}

func withPrev(rows []audit.Row, i int, prev string) []audit.Row {
	out := slices.Clone(rows)
	out[i].PrevHash = prev
	return out
}

// TestVerifyPairing: a completed row needs an earlier started row of the
// same invocation (or call); the chain itself is intact in every case.
func TestVerifyPairing(t *testing.T) {
	c := common("x")
	start := audit.InvokedStarted(c, "1", "p", "", map[string]any{})
	done := audit.InvokedCompleted(c, audit.OutcomeSuccess, 1, zeroHash(1), "")
	cases := map[string]struct {
		drafts []audit.Draft
		want   string
	}{
		"completed without started":   {[]audit.Draft{done}, "without an earlier skill.invoked_started"},
		"completed before started":    {[]audit.Draft{done, start}, "without an earlier skill.invoked_started"},
		"second started":              {[]audit.Draft{start, start}, "second skill.invoked_started"},
		"second completed":            {[]audit.Draft{start, done, done}, "second skill.invoked_completed"},
		"tool completed, not started": {[]audit.Draft{start, audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeSuccess, 1, "", "")}, "without an open skill.tool_call_started"},
		"tool completed twice": {[]audit.Draft{start, audit.ToolCallStarted(c, "1", "Read", ""),
			audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeSuccess, 1, "", ""), audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeSuccess, 1, "", "")},
			"without an open skill.tool_call_started"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			emitAll(t, s, tc.drafts...)
			rep, err := s.Verify(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Reason, tc.want) {
				t.Fatalf("want one problem %q; got %+v", tc.want, rep.Problems)
			}
		})
	}
	// A reused call id (the skill chooses them) is fine while each
	// completion has an open start.
	s := openStore(t, t.TempDir())
	emitAll(t, s, start, audit.ToolCallStarted(c, "1", "Read", ""), audit.ToolCallStarted(c, "1", "Read", ""),
		audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeSuccess, 1, "", ""), audit.ToolCallCompleted(c, "1", "Read", audit.OutcomeError, 1, "", "x"), done)
	if rep, _ := s.Verify(context.Background()); !rep.OK || len(rep.InFlight) != 0 {
		t.Fatalf("%+v", rep)
	}
}

func TestVerifierStreamsLikeVerify(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation("b")...)...)
	rows[4].TS = "yesterday"
	v := NewVerifier()
	for _, r := range rows {
		v.Add(r)
	}
	a, b := v.Report(), Verify(rows)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) || a.OK {
		t.Fatalf("streaming %s\nslice %s", ja, jb)
	}
}

// TestVerifyReadsLegacyToolRows: a store written before spec §8's tool_name
// (tool rows saying "tool") and before policy_hash verifies, and so does
// its export read back; new rows beside them too.
func TestVerifyReadsLegacyToolRows(t *testing.T) {
	c := common("old")
	legacy := func(d audit.Draft) audit.Draft {
		var m map[string]any
		if err := json.Unmarshal(d.Payload, &m); err != nil {
			t.Fatal(err)
		}
		m["tool"] = m["tool_name"]
		delete(m, "tool_name")
		raw, _ := json.Marshal(m)
		return audit.Draft{Kind: d.Kind, Payload: raw}
	}
	drafts := []audit.Draft{
		audit.InvokedStarted(c, "1", "p", zeroHash(1), map[string]any{}),
		legacy(audit.ToolCallStarted(c, "call-1", "Read", zeroHash(2))),
		legacy(audit.ToolCallCompleted(c, "call-1", "Read", audit.OutcomeSuccess, 3, zeroHash(3), "")),
		legacy(audit.ToolDenied(c, "Bash", "tool_denied", zeroHash(4))),
		audit.InvokedCompleted(c, audit.OutcomeSuccess, 5, "", ""),
		audit.InvokedStartedPolicy(common("new"), "1", "p", zeroHash(1), zeroHash(9), map[string]any{}),
		audit.ToolDenied(common("new"), "Bash", "tool_denied", zeroHash(4)),
		audit.InvokedCompleted(common("new"), audit.OutcomeSuccess, 5, "", ""),
	}
	rows := chain(t, drafts...)
	for _, i := range []int{1, 2, 3} {
		if !strings.Contains(string(rows[i].Payload), `"tool":`) || strings.Contains(string(rows[i].Payload), "tool_name") {
			t.Fatalf("row %d is not a legacy row: %s", i, rows[i].Payload)
		}
	}
	var buf bytes.Buffer
	if err := audit.WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	back, err := audit.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Verify(back); !rep.OK {
		t.Fatalf("export with legacy rows: %+v", rep.Problems)
	}
}
