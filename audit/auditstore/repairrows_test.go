package auditstore

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepairRowByRow: each damage of the tamper table, and garbage in the
// index, is repaired from the other file's copy of the row: the store
// verifies after, with every row, the damaged files are kept in
// audit-damaged-<time>/, and the chain goes on.
func TestRepairRowByRow(t *testing.T) {
	cases := append([]struct {
		name string
		do   func(t *testing.T, dir string, v int)
	}{}, damages...)
	cases = append(cases, struct {
		name string
		do   func(t *testing.T, dir string, v int)
	}{"index garbage page", func(t *testing.T, dir string, _ int) {
		f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1024), 4096)
		f.Close()
	}}, struct {
		name string
		do   func(t *testing.T, dir string, v int)
	}{"journal deleted", func(t *testing.T, dir string, _ int) {
		if err := os.Remove(filepath.Join(dir, JournalName)); err != nil {
			t.Fatal(err)
		}
	}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := closedStore(t, 2)
			tc.do(t, dir, 2)
			if rep := verifyDir(t, dir); rep.OK {
				t.Fatal("the damage does not fail verify")
			}
			res, err := Repair(context.Background(), dir, false)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if rep := verifyDir(t, dir); !rep.OK || rep.Rows != 12 {
				t.Fatalf("after repair (%s): %+v", res.Action, rep)
			}
			kept, _ := filepath.Glob(filepath.Join(dir, DamagedDirPrefix+"*", "*"))
			if len(kept) == 0 || len(res.Moved) != len(kept) {
				t.Errorf("damaged files kept: %v, reported %v", kept, res.Moved)
			}
			s := openStore(t, dir)
			if err := s.Damage(); err != nil {
				t.Fatalf("the repaired store is refused: %v", err)
			}
			emitAll(t, s, invocation("after")...)
			s.Close()
			if rep := verifyDir(t, dir); !rep.OK || rep.Rows != 18 {
				t.Errorf("after repair and 6 more rows: %+v", rep)
			}
		})
	}
}

// TestRepairRefusesRowDamagedInBoth: a row altered in both files verifies
// nowhere: the repair changes nothing and names that row, and only it.
func TestRepairRefusesRowDamagedInBoth(t *testing.T) {
	dir := closedStore(t, 2)
	damages[0].do(t, dir, 2) // seq 3 in the journal
	damages[4].do(t, dir, 2) // and in the index
	before := map[string][]byte{}
	for _, n := range []string{JournalName, FileName} {
		b, _ := os.ReadFile(filepath.Join(dir, n))
		before[n] = b
	}
	_, err := Repair(context.Background(), dir, false)
	if err == nil || !strings.Contains(err.Error(), "not repaired") || !strings.Contains(err.Error(), "seq 3 ") ||
		strings.Contains(err.Error(), "seq 4 ") || !strings.Contains(err.Error(), "1 rows verify in neither") {
		t.Fatalf("repair of a row damaged in both files: %v", err)
	}
	for n, b := range before {
		if now, _ := os.ReadFile(filepath.Join(dir, n)); !bytes.Equal(now, b) {
			t.Errorf("%s changed by a refused repair", n)
		}
	}
	if kept, _ := filepath.Glob(filepath.Join(dir, DamagedDirPrefix+"*")); len(kept) != 0 {
		t.Errorf("a refused repair made %v", kept)
	}
}
