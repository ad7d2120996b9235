package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
)

func TestRequestsAnswerARepeatFromTheFirst(t *testing.T) {
	dir := t.TempDir()
	r, err := newRequests(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req := &InvokeRequest{SkillID: "notes", RequestID: "r-1", Args: json.RawMessage(`{"a":1}`)}
	first, err := r.claim(req, "t1")
	if err != nil || !first.own {
		t.Fatalf("first claim %+v %v, want own", first, err)
	}
	// While it runs, the same request waits for its answer.
	again, err := r.claim(req, "t1")
	if err != nil || again.wait == nil {
		t.Fatalf("claim while running %+v %v, want wait", again, err)
	}
	// Another body under the same key is a conflict; another tenant is not.
	other := *req
	other.Args = json.RawMessage(`{"a":2}`)
	if _, err := r.claim(&other, "t1"); !errors.Is(err, errRequestConflict) {
		t.Fatalf("different body: %v, want errRequestConflict", err)
	}
	if c, err := r.claim(req, "t2"); err != nil || !c.own {
		t.Fatalf("another tenant's same request_id: %+v %v, want own", c, err)
	}
	r.started(first.key, "INV1")
	if err := r.finish(first.key, 200, []byte(`{"outcome":"success"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.wait.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting repeat was not woken")
	}
	if again.wait.status != 200 || string(again.wait.answer) != `{"outcome":"success"}` {
		t.Fatalf("waiter got %d %s", again.wait.status, again.wait.answer)
	}
	later, err := r.claim(req, "t1")
	if err != nil || later.rec == nil || later.rec.Status != 200 || string(later.rec.Answer) != `{"outcome":"success"}` {
		t.Fatalf("claim after the answer %+v %v, want the recorded answer", later, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "requests", first.key+".json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record %v %v, want mode 0600", fi, err)
	}
}

// TestRequestsAfterACrash: a record without an answer that no live request
// owns (the daemon died while it ran) is answered as lost, never run again.
func TestRequestsAfterACrash(t *testing.T) {
	dir := t.TempDir()
	r, _ := newRequests(dir, time.Hour)
	req := &InvokeRequest{SkillID: "notes", RequestID: "r-1"}
	c, err := r.claim(req, "t1")
	if err != nil || !c.own {
		t.Fatal(c, err)
	}
	r.started(c.key, "INV1")
	restarted, _ := newRequests(dir, time.Hour)
	c2, err := restarted.claim(req, "t1")
	if err != nil || c2.rec == nil || c2.rec.Status != 0 || c2.rec.InvocationID != "INV1" {
		t.Fatalf("after restart %+v %v, want the unanswered record of INV1", c2, err)
	}
	if env := lostEnvelope(c2.rec); env.Outcome != "lost" || env.InvocationID != "INV1" || env.RequestID != "r-1" {
		t.Fatalf("lost envelope %+v", env)
	}
}

// TestRequestsDropAndWindow: a request refused before anything ran may be
// retried; a record older than the window is forgotten.
func TestRequestsDropAndWindow(t *testing.T) {
	dir := t.TempDir()
	r, _ := newRequests(dir, time.Hour)
	req := &InvokeRequest{SkillID: "notes", RequestID: "r-1"}
	c, _ := r.claim(req, "t1")
	r.drop(c.key, 429, []byte(`{}`))
	if c2, err := r.claim(req, "t1"); err != nil || !c2.own {
		t.Fatalf("after drop %+v %v, want own", c2, err)
	} else if err := r.finish(c2.key, 200, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if c3, err := r.claim(req, "t1"); err != nil || !c3.own {
		t.Fatalf("after the window %+v %v, want own", c3, err)
	}
	r.sweep()
	if ents, _ := os.ReadDir(filepath.Join(dir, "requests")); len(ents) != 1 {
		t.Fatalf("sweep left %d records, want the live one", len(ents))
	}
}

// TestRequestsNamedFromTheAuditAfterACrash: the daemon died after the
// started row was durable but before the record was given the invocation
// id; the next start takes the id from the audit rows. A record with no
// started row ran nothing, and is forgotten so a retry runs.
func TestRequestsNamedFromTheAuditAfterACrash(t *testing.T) {
	dir := t.TempDir()
	store, err := auditstore.Open(filepath.Join(dir, "audit"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r, _ := newRequests(dir, time.Hour)
	ran := &InvokeRequest{SkillID: "notes", RequestID: "r-ran"}
	never := &InvokeRequest{SkillID: "notes", RequestID: "r-never"}
	for _, req := range []*InvokeRequest{ran, never} {
		if c, err := r.claim(req, "t1"); err != nil || !c.own {
			t.Fatal(c, err)
		}
	}
	// Another tenant's same request_id names another invocation.
	c := audit.Common{InvocationID: "INV-OTHER", RequestID: "r-ran", SkillID: "notes", TenantID: "t2"}
	if _, err := store.Emit(context.Background(), audit.InvokedStarted(c, "1", "", "", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	c = audit.Common{InvocationID: "INV-RAN", RequestID: "r-ran", SkillID: "notes", TenantID: "t1"}
	if _, err := store.Emit(context.Background(), audit.InvokedStarted(c, "1", "", "", map[string]any{})); err != nil {
		t.Fatal(err)
	}
	restarted, _ := newRequests(dir, time.Hour)
	if err := restarted.resolveUnnamed(context.Background(), store); err != nil {
		t.Fatal(err)
	}
	got, err := restarted.claim(ran, "t1")
	if err != nil || got.rec == nil || got.rec.InvocationID != "INV-RAN" {
		t.Fatalf("the request that ran: %+v %v, want its record naming INV-RAN", got, err)
	}
	if got, err := restarted.claim(never, "t1"); err != nil || !got.own {
		t.Fatalf("the request that never started: %+v %v, want a fresh claim", got, err)
	}
}
