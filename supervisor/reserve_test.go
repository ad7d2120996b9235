package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/supervisor/sandbox"
)

// TestReserveHeldWhileRunning: an invocation holds a journal reservation
// from before its started row while it runs, and releases it once its
// completed row is durable.
func TestReserveHeldWhileRunning(t *testing.T) {
	var during []string
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	dir := filepath.Join(s.StateDir, audit.ReserveDirName)
	f.during = func(sandbox.Spec) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			during = append(during, e.Name())
		}
	}
	env, err := s.Run(Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(during, env.InvocationID) {
		t.Fatalf("reservations while running: %v, want %s", during, env.InvocationID)
	}
	if _, err := os.Stat(filepath.Join(dir, env.InvocationID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reservation after the completed row: %v", err)
	}
}

// refusingReserver is a store whose reservations fail (a full disk).
type refusingReserver struct{ Auditor }

func (refusingReserver) Reserve(string) (func(), error) {
	return nil, fmt.Errorf("injected: %w", audit.ErrNoSpace)
}

// TestReserveFailureBlocksDispatch: no reservation → refused before
// dispatch, nothing written.
func TestReserveFailureBlocksDispatch(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	store := s.Audit.(*audit.Store)
	s.Audit = refusingReserver{store}
	_, err := s.Run(Request{SkillDir: skillDir(t, "")})
	var ae *AuditEmitError
	if !errors.As(err, &ae) || ae.Stage != "reserve" || !errors.Is(err, ErrRefused) || !errors.Is(err, audit.ErrNoSpace) {
		t.Fatalf("err %v, want AuditEmitError{Stage: reserve} wrapping ErrNoSpace", err)
	}
	if f.lastSpec.ID != "" {
		t.Fatal("the skill was dispatched without a reservation")
	}
	if rows, _ := store.Rows(context.Background(), audit.Filter{}); len(rows) != 0 {
		t.Errorf("%d rows written", len(rows))
	}
}
