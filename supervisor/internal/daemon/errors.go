package daemon

import (
	"errors"
	"net/http"

	"cyberos.dev/supervisor"
	"cyberos.dev/telemetry"
)

// kind is the class of an admin API error: the code of its answer.
type kind string

// The kinds of error the admin API answers with.
const (
	kindBadRequest      kind = "bad_request"
	kindInvalid         kind = "invalid"
	kindNotFound        kind = "not_found"
	kindTooLarge        kind = "too_large"
	kindConflict        kind = "request_id_conflict"
	kindTooMany         kind = "too_many_invocations"
	kindShuttingDown    kind = "shutting_down"
	kindAuditDamaged    kind = "audit_damaged"
	kindAuditIncomplete kind = "audit_incomplete"
	kindNotStarted      kind = "not_started"
	kindRefused         kind = "refused"
	kindForbidden       kind = "forbidden"
	kindUnauthorized    kind = "unauthorized"
	kindInternal        kind = "internal"
)

// answers is the one table from an error's kind to its answer: the HTTP
// status; for an invocation turned away, the reason counted in
// cyberos_admission_refused_total; whether the invocation ran all the
// same (its answer is then kept for a repeated request_id); and whether
// the connection closes (a body left unread).
var answers = map[kind]struct {
	status  int
	refused string
	ran     bool
	close   bool
}{
	kindBadRequest:      {status: http.StatusBadRequest},
	kindInvalid:         {status: http.StatusBadRequest},
	kindNotFound:        {status: http.StatusNotFound},
	kindTooLarge:        {status: http.StatusRequestEntityTooLarge, close: true},
	kindConflict:        {status: http.StatusConflict},
	kindTooMany:         {status: http.StatusTooManyRequests, refused: telemetry.RefusedMaxConcurrent},
	kindShuttingDown:    {status: http.StatusServiceUnavailable, refused: telemetry.RefusedShuttingDown},
	kindAuditDamaged:    {status: http.StatusServiceUnavailable, refused: telemetry.RefusedAuditDamaged},
	kindAuditIncomplete: {status: http.StatusServiceUnavailable, ran: true},
	kindNotStarted:      {status: http.StatusServiceUnavailable},
	kindRefused:         {status: http.StatusServiceUnavailable},
	kindForbidden:       {status: http.StatusForbidden, close: true},
	kindUnauthorized:    {status: http.StatusUnauthorized},
	kindInternal:        {status: http.StatusInternalServerError},
}

// supervisorKinds are the kinds of the supervisor's errors, first match
// first; any other error is internal.
var supervisorKinds = []struct {
	err  error
	kind kind
}{
	{supervisor.ErrNotFound, kindNotFound},
	{supervisor.ErrInvalidSkill, kindInvalid},
	{supervisor.ErrInvalidRequest, kindInvalid},
	// The skill ran; its record is not durable: never a success.
	{supervisor.ErrAuditIncomplete, kindAuditIncomplete},
	{supervisor.ErrNotStarted, kindNotStarted},
	{supervisor.ErrRefused, kindRefused},
}

// apiError is an error of a known kind.
type apiError struct {
	kind kind
	err  error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// fail gives err its kind.
func fail(k kind, err error) error { return &apiError{kind: k, err: err} }

// kindOf is err's kind: an *apiError's own, else the supervisor's
// sentinel's, else internal.
func kindOf(err error) kind {
	if ae, ok := errors.AsType[*apiError](err); ok {
		return ae.kind
	}
	for _, s := range supervisorKinds {
		if errors.Is(err, s.err) {
			return s.kind
		}
	}
	return kindInternal
}

// answerOf is err's answer: its status and body.
func answerOf(err error) (int, APIError) {
	k := kindOf(err)
	return answers[k].status, APIError{Error: err.Error(), Code: string(k)}
}

// apiErr answers with err as an error of kind k.
func apiErr(w http.ResponseWriter, k kind, err error) {
	if answers[k].close {
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, answers[k].status, APIError{Error: err.Error(), Code: string(k)})
}

// writeErr answers with err, of the kind kindOf finds.
func writeErr(w http.ResponseWriter, err error) { apiErr(w, kindOf(err), err) }
