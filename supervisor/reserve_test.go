package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/supervisor/sandbox"
)

// TestReserveHeldWhileRunning: an invocation holds a journal reservation
// from before its started row while it runs, and releases it after its
// completed row is durable (with the sandbox's teardown, after the answer).
func TestReserveHeldWhileRunning(t *testing.T) {
	var during []string
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	dir := filepath.Join(s.StateDir, auditstore.ReserveDirName)
	f.during = func(sandbox.Spec) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			during = append(during, e.Name())
		}
	}
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(during, env.InvocationID) {
		t.Fatalf("reservations while running: %v, want %s", during, env.InvocationID)
	}
	s.Drain()
	if _, err := os.Stat(filepath.Join(dir, env.InvocationID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reservation after the completed row: %v", err)
	}
}

// refusingReserver is a store whose reservations fail (a full disk).
type refusingReserver struct{ Auditor }

func (refusingReserver) Reserve(string) (func(), error) {
	return nil, fmt.Errorf("injected: %w", auditstore.ErrNoSpace)
}

// TestReserveFailureBlocksDispatch: no reservation → refused before
// dispatch, nothing written.
func TestReserveFailureBlocksDispatch(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	store := s.Audit.(*auditstore.Store)
	s.Audit = refusingReserver{store}
	_, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	var ae *AuditEmitError
	if !errors.As(err, &ae) || ae.Stage != "reserve" || !errors.Is(err, ErrRefused) || !errors.Is(err, auditstore.ErrNoSpace) {
		t.Fatalf("err %v, want AuditEmitError{Stage: reserve} wrapping ErrNoSpace", err)
	}
	if f.lastSpec.ID != "" {
		t.Fatal("the skill was dispatched without a reservation")
	}
	if rows, _ := store.Rows(context.Background(), auditstore.Filter{}); len(rows) != 0 {
		t.Errorf("%d rows written", len(rows))
	}
}

// startedRowWatcher checks, as the started row is emitted, that the
// invocation's in-flight lock is held and its reservation stands.
type startedRowWatcher struct {
	*auditstore.Store
	state string
	saw   []string // what was missing, or "held"
}

func (w *startedRowWatcher) Reserve(id string) (func(), error) { return w.Store.Reserve(id) }

func (w *startedRowWatcher) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	if d.Kind == audit.KindInvokedStarted {
		var p struct {
			ID string `json:"invocation_id"`
		}
		if err := json.Unmarshal(d.Payload, &p); err != nil || p.ID == "" {
			w.saw = append(w.saw, "no invocation_id in the started row")
			return w.Store.Emit(ctx, d)
		}
		id := p.ID
		switch {
		case !lockedByAnother(filepath.Join(w.state, "inflight", id+".lock")):
			w.saw = append(w.saw, "in-flight lock not held")
		case !exists(filepath.Join(w.state, auditstore.ReserveDirName, id)):
			w.saw = append(w.saw, "no reservation")
		default:
			w.saw = append(w.saw, "held")
		}
	}
	return w.Store.Emit(ctx, d)
}

// lockedByAnother reports whether path exists and an flock on a new open
// of it is refused (flock locks belong to open file descriptions).
func lockedByAnother(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestHoldsTakenBeforeTheStartedRow: the in-flight lock and the journal
// reservation, taken while the request is validated, are both held by the
// time the started row is written, every time.
func TestHoldsTakenBeforeTheStartedRow(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	w := &startedRowWatcher{Store: s.Audit.(*auditstore.Store), state: s.StateDir}
	s.Audit = w
	dir := skillDir(t, "")
	for range 20 {
		if _, err := s.Run(t.Context(), Request{SkillDir: dir}); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range w.saw {
		if v != "held" {
			t.Fatalf("invocation %d: at its started row: %s", i, v)
		}
	}
	if len(w.saw) != 20 {
		t.Fatalf("%d started rows seen, want 20", len(w.saw))
	}
}

// TestNothingHeldAfterARefusal: a request refused by its checks (a bad
// SKILL.md, a bad traceparent) leaves no in-flight lock and no journal
// reservation behind, though both were taken while it was checked.
func TestNothingHeldAfterARefusal(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "SKILL.md"), []byte("no frontmatter\n"), 0o644)
	for _, req := range []Request{{SkillDir: bad}, {SkillDir: skillDir(t, ""), Traceparent: "nonsense"}} {
		if _, err := s.Run(t.Context(), req); err == nil {
			t.Fatalf("%+v: not refused", req)
		}
	}
	s.Drain()
	left := func(dir string) (out []string) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	if l := left(filepath.Join(s.StateDir, "inflight")); len(l) > 0 {
		t.Errorf("in-flight locks left: %v", l)
	}
	if l := left(filepath.Join(s.StateDir, auditstore.ReserveDirName)); len(l) > 0 {
		t.Errorf("reservations left: %v", l)
	}
	if rows, err := s.store(t).Rows(context.Background(), auditstore.Filter{}); err != nil || len(rows) != 0 {
		t.Errorf("%d rows written for refused requests (%v)", len(rows), err)
	}
}

// TestLockReleasedAfterTheCompletedRow: once the invocation's teardown is
// done, its in-flight lock file is gone.
func TestLockReleasedAfterTheCompletedRow(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	s.Drain()
	if exists(inflightPath(s.StateDir, env.InvocationID)) {
		t.Fatal("in-flight lock left after the invocation")
	}
}
