//go:build linux

package integration

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAuditRepairRowByRow: with the other file intact, `audit repair`
// restores each damaged row of the tamper table (and a deleted journal
// row) from the copy that verifies, keeps the replaced files in
// audit-damaged-<time>/, and the store then verifies and runs skills.
func TestAuditRepairRowByRow(t *testing.T) {
	base := newEnv(t)
	dir := base.skill("repaired", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	for range 3 {
		base.run(dir).mustOutcome(t, "success")
	}
	cases := append([]tamper{}, tampers...)
	cases = append(cases, tamper{"journal row deleted", func(t *testing.T, d string, v int) {
		lines, rest := journalLines(t, d)
		writeJournal(t, d, append(lines[:v:v], lines[v+1:]...), rest)
	}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			copyStateDir(t, base.stateDir, e)
			tc.do(t, e.stateDir, 2)
			if code, out := e.verify(); code == 0 {
				t.Fatalf("audit verify passes the damaged store:\n%s", out)
			}
			out, err := cyberos("audit", "repair", "--state-dir", e.stateDir).CombinedOutput()
			if err != nil {
				t.Fatalf("audit repair: %v\n%s", err, out)
			}
			t.Logf("repair: %s", out)
			if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 6 rows") {
				t.Errorf("verify after repair: exit %d\n%s", code, out)
			}
			if kept, _ := filepath.Glob(filepath.Join(e.stateDir, "audit-damaged-*", "audit.jsonl")); len(kept) != 1 {
				t.Errorf("replaced journal kept as %v, want one audit-damaged-*/audit.jsonl", kept)
			}
			e.run(e.skill("repaired", "", "#!/bin/sh\necho '{\"n\":1}'\n")).mustOutcome(t, "success")
		})
	}
}
