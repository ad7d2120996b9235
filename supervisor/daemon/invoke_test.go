package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
