package auditstore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/audit"
)

// zeroHash returns a valid 64-hex hash distinct per n.
func zeroHash(n int) string {
	h := fmt.Sprintf("%x", n)
	return strings.Repeat("0", 64-len(h)) + h
}

func common(inv string) audit.Common {
	return audit.Common{
		InvocationID: inv,
		RequestID:    "01HZKREQ" + inv,
		SkillID:      "obs.triage-alert",
		TenantID:     "550e8400-e29b-41d4-a716-446655440000",
		TraceID:      "0af7651916cd43dd8448eb211c80319c",
	}
}

// invocation returns the drafts of one whole invocation: started, a tool
// call, a denial, a timeout signal, completed.
func invocation(inv string) []audit.Draft {
	c := common(inv)
	return []audit.Draft{
		audit.InvokedStarted(c, "1.0.0", "cuo-cpo@0.4.1", zeroHash(1), map[string]any{"seccomp": true, "pids_max": 64}),
		audit.ToolCallStarted(c, "call-1", "MemoryRead", zeroHash(2)),
		audit.ToolCallCompleted(c, "call-1", "MemoryRead", audit.OutcomeSuccess, 3, zeroHash(3), ""),
		audit.ToolDenied(c, "Bash", "tool_not_in_allowed_tools", zeroHash(4)),
		audit.Timeout(c, 54000, "SIGTERM"),
		audit.InvokedCompleted(c, audit.OutcomeTimeout, 60000, "", "deadline exceeded"),
	}
}

func openStore(t testing.TB, dir string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func emitAll(t testing.TB, s *Store, drafts ...audit.Draft) []audit.Row {
	t.Helper()
	var rows []audit.Row
	for _, d := range drafts {
		r, err := s.Emit(context.Background(), d)
		if err != nil {
			t.Fatalf("emit %s: %v", d.Kind, err)
		}
		rows = append(rows, r)
	}
	return rows
}

func allRows(t testing.TB, s *Store) []audit.Row {
	t.Helper()
	rows, err := s.Rows(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// rawDB opens the store's file directly, as someone with access to the
// state dir would, with the append-only triggers dropped if asked.
func rawDB(t testing.TB, dir string, dropTriggers bool) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{`DROP TRIGGER audit_rows_no_update`, `DROP TRIGGER audit_rows_no_delete`} {
		if !dropTriggers {
			break
		}
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// problemsFor returns the reasons Verify gave for the row with this seq or
// row id.
func problemsFor(rep Report, seq int64, rowID string) []string {
	var out []string
	for _, p := range rep.Problems {
		if p.Seq == seq || p.RowID == rowID {
			out = append(out, p.Reason)
		}
	}
	return out
}
