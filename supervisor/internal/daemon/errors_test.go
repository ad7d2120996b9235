package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"cyberos.dev/supervisor"
)

// Every error is answered from the one table: a kind given with fail, the
// supervisor's sentinels however wrapped, anything else internal.
func TestErrorTable(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   kind
	}{
		{fail(kindBadRequest, errors.New("x")), 400, kindBadRequest},
		{fmt.Errorf("wrapped: %w", fail(kindTooMany, errors.New("x"))), 429, kindTooMany},
		{errShuttingDown, 503, kindShuttingDown},
		{fmt.Errorf("skill x: %w", supervisor.ErrNotFound), 404, kindNotFound},
		{fmt.Errorf("%w: bad frontmatter", supervisor.ErrInvalidSkill), 400, kindInvalid},
		{supervisor.ErrInvalidRequest, 400, kindInvalid},
		{supervisor.ErrAuditIncomplete, 503, kindAuditIncomplete},
		{supervisor.ErrNotStarted, 503, kindNotStarted},
		{supervisor.ErrRefused, 503, kindRefused},
		{errors.New("disk on fire"), 500, kindInternal},
	} {
		status, body := answerOf(tc.err)
		if status != tc.status || body.Code != string(tc.code) || body.Error != tc.err.Error() {
			t.Errorf("%v: answered %d %+v, want %d %s", tc.err, status, body, tc.status, tc.code)
		}
	}
	for k, a := range answers {
		if a.status < 400 {
			t.Errorf("kind %s answers %d, not an error status", k, a.status)
		}
	}
	// Only an invocation that ran keeps its error answer for a repeat.
	for k, a := range answers {
		if a.ran != (k == kindAuditIncomplete) {
			t.Errorf("kind %s: ran %v", k, a.ran)
		}
	}
}

// A kind that leaves the body unread closes the connection.
func TestTooLargeCloses(t *testing.T) {
	rec := httptest.NewRecorder()
	apiErr(rec, kindTooLarge, errors.New("body: over"))
	if rec.Code != http.StatusRequestEntityTooLarge || rec.Header().Get("Connection") != "close" {
		t.Fatalf("too_large: %d, Connection %q", rec.Code, rec.Header().Get("Connection"))
	}
}
