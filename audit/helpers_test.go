package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// zeroHash returns a valid 64-hex hash distinct per n.
func zeroHash(n int) string {
	h := fmt.Sprintf("%x", n)
	return strings.Repeat("0", 64-len(h)) + h
}

func common(inv string) Common {
	return Common{
		InvocationID: inv,
		RequestID:    "01HZKREQ" + inv,
		SkillID:      "obs.triage-alert",
		TenantID:     "550e8400-e29b-41d4-a716-446655440000",
		TraceID:      "0af7651916cd43dd8448eb211c80319c",
	}
}

// invocation returns the drafts of one whole invocation: started, a tool
// call, a denial, a timeout signal, completed.
func invocation(inv string) []Draft {
	c := common(inv)
	return []Draft{
		InvokedStarted(c, "1.0.0", "cuo-cpo@0.4.1", zeroHash(1), map[string]any{"seccomp": true, "pids_max": 64}),
		ToolCallStarted(c, "call-1", "MemoryRead", zeroHash(2)),
		ToolCallCompleted(c, "call-1", "MemoryRead", OutcomeSuccess, 3, zeroHash(3), ""),
		ToolDenied(c, "Bash", "tool_not_in_allowed_tools", zeroHash(4)),
		Timeout(c, 54000, "SIGTERM"),
		InvokedCompleted(c, OutcomeTimeout, 60000, "", "deadline exceeded"),
	}
}

// chain links drafts into rows as a writer does (seq from 1, each
// prev_hash the row_hash before, row_hash from ComputeHash), without a
// store; every row passes RowProblems.
func chain(t testing.TB, drafts ...Draft) []Row {
	t.Helper()
	rows := make([]Row, 0, len(drafts))
	var prev *Row
	for i, d := range drafts {
		payload, err := d.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		r := Row{Seq: int64(i + 1), RowID: ulid.Make().String(), Kind: d.Kind,
			TS: time.Now().UTC().Format(TimeFormat), PrevHash: GenesisHash, Payload: payload}
		if prev != nil {
			r.PrevHash = prev.RowHash
		}
		if r.RowHash, err = r.ComputeHash(); err != nil {
			t.Fatal(err)
		}
		if reasons, _ := RowProblems(prev, r); len(reasons) > 0 {
			t.Fatalf("row %d does not verify: %v", r.Seq, reasons)
		}
		rows = append(rows, r)
		prev = &rows[len(rows)-1]
	}
	return rows
}

func rowsEqual(a, b Row) bool {
	return a.Seq == b.Seq && a.RowID == b.RowID && a.Kind == b.Kind && a.TS == b.TS &&
		a.PrevHash == b.PrevHash && a.RowHash == b.RowHash && string(a.Payload) == string(b.Payload)
}
