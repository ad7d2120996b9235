package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDeadlineMSIsBounded: a deadline_ms that would overflow a
// time.Duration (and so become a short or negative deadline) or that is
// negative is refused with a 400 naming the limit, before anything runs.
func TestDeadlineMSIsBounded(t *testing.T) {
	for _, body := range []string{
		`{"skill_id":"notes","deadline_ms":18446744073710}`,
		`{"skill_id":"notes","deadline_ms":10000000000000}`,
		`{"skill_id":"notes","deadline_ms":86400001}`,
		`{"skill_id":"notes","deadline_ms":-1}`,
	} {
		d := &Daemon{}
		rec := httptest.NewRecorder()
		d.handleInvoke(rec, httptest.NewRequest(http.MethodPost, "/v1/invocations", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "86400000") {
			t.Errorf("%s: %d %s, want 400 naming the limit", body, rec.Code, rec.Body)
		}
	}
}

// TestInvokeBodyDuplicateKeys: a body naming a key twice is a 400 naming
// the key (broker.CheckObject), before the skill is looked up.
func TestInvokeBodyDuplicateKeys(t *testing.T) {
	for body, key := range map[string]string{
		`{"skill_id":"a","skill_id":"b"}`:                  "skill_id",
		`{"skill_id":"a","args":{},"args":[]}`:             "args",
		`{"skill_id":"a","sk\u0069ll_id":"b"}`:             "skill_id",
		`{"tenant_id":"x","skill_id":"a","tenant_id":"y"}`: "tenant_id",
	} {
		d := &Daemon{}
		rec := httptest.NewRecorder()
		d.handleInvoke(rec, httptest.NewRequest(http.MethodPost, "/v1/invocations", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `duplicate key \"`+key+`\"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, rec.Code, rec.Body, key)
		}
	}
}

// TestInvokeBodyDeclaredTooLarge: a Content-Length over MaxInvokeBody is
// 413 without reading the body (here one that never arrives).
func TestInvokeBodyDeclaredTooLarge(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	req := httptest.NewRequest(http.MethodPost, "/v1/invocations", pr)
	req.ContentLength = 200 << 20
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		(&Daemon{}).handleInvoke(rec, req)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		pw.Close()
		<-done
		t.Fatal("the handler waited for a body declared over the limit")
	}
	if rec.Code != http.StatusRequestEntityTooLarge || rec.Header().Get("Connection") != "close" {
		t.Errorf("%d %s (Connection %q), want 413 closing the connection", rec.Code, rec.Body, rec.Header().Get("Connection"))
	}
}
