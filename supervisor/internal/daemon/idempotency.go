package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/supervisor"
)

// requests remembers each (tenant_id, request_id) the daemon accepted, so a
// caller that retries after a lost answer, or after a crash, gets the first
// invocation's answer instead of a second run. Each key is a 0600 file in
// dir, made durable before the invocation runs and rewritten with the
// answer before the answer is sent.
type requests struct {
	dir    string
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	running map[string]*pending
}

// pending is a request this daemon is running now; done is closed once the
// answer is set.
type pending struct {
	bodyHash string
	done     chan struct{}
	status   int
	answer   []byte
}

// requestRecord is the file kept per key. Status 0 means the answer was
// never written: the invocation was still running when the daemon died.
type requestRecord struct {
	TenantID     string          `json:"tenant_id"`
	RequestID    string          `json:"request_id"`
	BodyHash     string          `json:"body_hash"`
	AcceptedAt   time.Time       `json:"accepted_at"`
	InvocationID string          `json:"invocation_id,omitempty"`
	SkillID      string          `json:"skill_id"`
	Status       int             `json:"status,omitempty"`
	Answer       json.RawMessage `json:"answer,omitempty"`
}

// errRequestConflict: the request_id was used before with another body.
var errRequestConflict = errors.New("request_id was already used with a different request body")

func newRequests(stateDir string, window time.Duration) (*requests, error) {
	dir := filepath.Join(stateDir, "requests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("idempotency records: %w", err)
	}
	r := &requests{dir: dir, window: window, now: time.Now, running: map[string]*pending{}}
	r.sweep()
	return r, nil
}

func requestKey(tenant, requestID string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + requestID))
	return hex.EncodeToString(sum[:])
}

// claim is what a request found for its key.
type claim struct {
	key string
	// own: this request runs the invocation and must call finish or drop.
	own bool
	// wait: the same request is running in this daemon; its answer comes
	// on wait.done.
	wait *pending
	// rec: an earlier answer (Status != 0) or a run a crash cut short.
	rec *requestRecord
}

// claim takes the key for req, or returns what an earlier request with the
// same key left. A different body under the same key is errRequestConflict.
func (r *requests) claim(req *InvokeRequest, tenant string) (claim, error) {
	bodyHash, err := audit.HashJSON(mustJSON(req))
	if err != nil {
		return claim{}, err
	}
	key := requestKey(tenant, req.RequestID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.running[key]; ok {
		if p.bodyHash != bodyHash {
			return claim{}, errRequestConflict
		}
		return claim{key: key, wait: p}, nil
	}
	path := filepath.Join(r.dir, key+".json")
	if old, err := readRecord(path); err == nil && r.now().Sub(old.AcceptedAt) <= r.window {
		if old.BodyHash != bodyHash {
			return claim{}, errRequestConflict
		}
		return claim{key: key, rec: old}, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return claim{}, fmt.Errorf("idempotency record for request_id %q: %w", req.RequestID, err)
	}
	rec := requestRecord{TenantID: tenant, RequestID: req.RequestID, BodyHash: bodyHash,
		AcceptedAt: r.now().UTC(), SkillID: req.SkillID}
	if err := writeRecord(path, &rec); err != nil {
		return claim{}, err
	}
	r.running[key] = &pending{bodyHash: bodyHash, done: make(chan struct{})}
	return claim{key: key, own: true}, nil
}

// started notes the invocation id once its started row is durable, so a
// crash from here on is answered with that invocation.
func (r *requests) started(key, invocationID string) {
	path := filepath.Join(r.dir, key+".json")
	rec, err := readRecord(path)
	if err != nil {
		return
	}
	rec.InvocationID = invocationID
	_ = writeRecord(path, rec)
}

// finish records the answer durably, then wakes the requests waiting on it.
func (r *requests) finish(key string, status int, answer []byte) error {
	path := filepath.Join(r.dir, key+".json")
	rec, err := readRecord(path)
	if err == nil {
		rec.Status, rec.Answer = status, answer
		err = writeRecord(path, rec)
	}
	r.wake(key, status, answer)
	return err
}

// drop forgets a claim whose request ran nothing (refused before dispatch),
// so a retry may run; requests waiting on it get the same refusal.
func (r *requests) drop(key string, status int, answer []byte) {
	_ = os.Remove(filepath.Join(r.dir, key+".json"))
	r.wake(key, status, answer)
}

// wake ends key's run in this daemon and hands its answer to the requests
// waiting on it.
func (r *requests) wake(key string, status int, answer []byte) {
	r.mu.Lock()
	p := r.running[key]
	delete(r.running, key)
	r.mu.Unlock()
	if p != nil {
		p.status, p.answer = status, answer
		close(p.done)
	}
}

// lostEnvelope answers a request whose first run the daemon's end cut
// short: startup reconciliation closed it as lost, and it never runs again.
func lostEnvelope(rec *requestRecord) supervisor.Envelope {
	return supervisor.Envelope{
		InvocationID: rec.InvocationID,
		RequestID:    rec.RequestID,
		SkillID:      rec.SkillID,
		Outcome:      supervisor.OutcomeLost,
		ErrorMessage: "the supervisor stopped before this invocation completed; it was not run again",
	}
}

// resolveUnnamed fills the invocation id of each record a crash left
// without one: the started row became durable but the daemon died before
// started() rewrote the record. The audit rows are the truth; a record
// with no started row ran nothing and is forgotten, so a retry runs.
func (r *requests) resolveUnnamed(ctx context.Context, store *auditstore.Store) error {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	unnamed := map[string]*requestRecord{}
	for _, e := range ents {
		rec, err := readRecord(filepath.Join(r.dir, e.Name()))
		if err == nil && rec.Status == 0 && rec.InvocationID == "" {
			unnamed[requestKey(rec.TenantID, rec.RequestID)] = rec
		}
	}
	if len(unnamed) == 0 {
		return nil
	}
	err = store.Each(ctx, auditstore.Filter{Kind: audit.KindInvokedStarted}, func(row audit.Row) error {
		var p struct {
			InvocationID string `json:"invocation_id"`
			RequestID    string `json:"request_id"`
			TenantID     string `json:"tenant_id"`
		}
		if json.Unmarshal(row.Payload, &p) != nil || p.RequestID == "" {
			return nil
		}
		key := requestKey(p.TenantID, p.RequestID)
		if rec, ok := unnamed[key]; ok {
			rec.InvocationID = p.InvocationID
			delete(unnamed, key)
			return writeRecord(filepath.Join(r.dir, key+".json"), rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idempotency records: name the invocations a crash cut short: %w", err)
	}
	for key := range unnamed {
		_ = os.Remove(filepath.Join(r.dir, key+".json"))
	}
	return nil
}

// sweep removes the records older than the window.
func (r *requests) sweep() {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		path := filepath.Join(r.dir, e.Name())
		rec, err := readRecord(path)
		if err != nil || r.now().Sub(rec.AcceptedAt) > r.window {
			r.mu.Lock()
			_, live := r.running[e.Name()[:len(e.Name())-len(filepath.Ext(e.Name()))]]
			r.mu.Unlock()
			if !live {
				_ = os.Remove(path)
			}
		}
	}
}

func readRecord(path string) (*requestRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec requestRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return &rec, nil
}

// writeRecord replaces path atomically and durably: a temporary file,
// fsync, rename, fsync of the directory.
func writeRecord(path string, rec *requestRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("idempotency record: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("idempotency record: %w", err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("idempotency record: %w", err)
	}
	defer dir.Close()
	return dir.Sync()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // InvokeRequest always marshals
	}
	return b
}
