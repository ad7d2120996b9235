package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
	"unicode"

	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/telemetry"
)

// MaxDeadlineMS bounds deadline_ms: a day, far below the milliseconds a
// time.Duration can hold, so no deadline overflows into a short one.
const MaxDeadlineMS = 86_400_000

// errShuttingDown refuses an invocation once shutdown has begun.
var errShuttingDown = fail(kindShuttingDown, errors.New("the supervisor is shutting down"))

// handleInvoke is POST /v1/invocations: the request is decoded, its
// request_id claimed, the invocation admitted, run, and answered.
func (d *Daemon) handleInvoke(w http.ResponseWriter, r *http.Request) {
	if err := d.accepting(); err != nil {
		d.refuse(w, err)
		return
	}
	req, dir, err := d.decodeInvoke(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	tenant := req.TenantID
	if tenant == "" {
		tenant = DefaultTenant
	}
	cl, answered := d.claimRequest(w, r, &req, tenant)
	if answered {
		return
	}
	done, err := d.admit()
	if err != nil {
		d.countRefused(err)
		d.reply(w, &req, cl, err, nil)
		return
	}
	defer done()
	env, err := d.invoke(r, &req, tenant, dir, cl)
	d.reply(w, &req, cl, err, env)
}

// accepting refuses every invocation while the daemon shuts down or its
// audit store is damaged.
func (d *Daemon) accepting() error {
	if d.draining.Load() {
		return errShuttingDown
	}
	if err := d.store.Damage(); err != nil {
		return fail(kindAuditDamaged, err)
	}
	return nil
}

// refuse answers with an invocation turned away, counted by its reason.
func (d *Daemon) refuse(w http.ResponseWriter, err error) {
	d.countRefused(err)
	writeErr(w, err)
}

// countRefused counts err in cyberos_admission_refused_total when its
// kind is a refusal.
func (d *Daemon) countRefused(err error) {
	if reason := answers[kindOf(err)].refused; reason != "" {
		d.refused(reason)
	}
}

// decodeInvoke reads and checks the body: at most MaxInvokeBody bytes, no
// key twice, no unknown key, the fields in bounds, the skill installed.
// It returns the request and the skill's folder.
func (d *Daemon) decodeInvoke(w http.ResponseWriter, r *http.Request) (InvokeRequest, string, error) {
	var req InvokeRequest
	// A body declared larger than the limit is refused before any of it
	// is read; one without a length (chunked) when it passes the limit.
	// The rest of the body is not read: the connection ends with the
	// answer.
	tooLarge := fail(kindTooLarge, fmt.Errorf("body: over %d bytes", MaxInvokeBody))
	if r.ContentLength > MaxInvokeBody {
		return req, "", tooLarge
	}
	// The body is read up to MaxInvokeBody bytes, within the admin
	// socket's request timeout (adminServer).
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxInvokeBody))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return req, "", tooLarge
	} else if err != nil {
		return req, "", fail(kindBadRequest, fmt.Errorf("body: %w", err))
	}
	// A key given twice is refused, as the broker refuses it: the decoder
	// below would keep the last one silently.
	if err := broker.CheckObject(raw); errors.Is(err, broker.ErrDuplicateKey) {
		return req, "", fail(kindBadRequest, fmt.Errorf("body: %w", err))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, "", fail(kindBadRequest, fmt.Errorf("body: %w", err))
	}
	switch {
	case !SkillIDPattern().MatchString(req.SkillID):
		return req, "", fail(kindBadRequest, fmt.Errorf("skill_id %q must match %s", req.SkillID, SkillIDPattern()))
	case !validText(req.TenantID, 128) || !validText(req.CallerPersona, 256) || !validText(req.Version, 64) || !validText(req.RequestID, 128):
		return req, "", fail(kindBadRequest, errors.New("tenant_id, caller_persona, version or request_id: too long or holds control characters"))
	case req.DeadlineMS < 0 || req.DeadlineMS > MaxDeadlineMS:
		return req, "", fail(kindBadRequest, fmt.Errorf("deadline_ms %d: must be a whole number of milliseconds from 1 to %d (24 h)", req.DeadlineMS, MaxDeadlineMS))
	}
	dir := filepath.Join(d.cfg.SkillsDir, req.SkillID)
	if fi, err := os.Stat(filepath.Join(dir, "SKILL.md")); err != nil || !fi.Mode().IsRegular() {
		return req, "", fail(kindNotFound, fmt.Errorf("no skill %q in %s", req.SkillID, d.cfg.SkillsDir))
	}
	return req, dir, nil
}

func validText(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// claimRequest claims req's request_id when it has one and idempotency
// is on. A repeat is answered here (answered true): with the first
// request's answer, once it comes if it is still running, or with the
// envelope of a run a crash cut short.
func (d *Daemon) claimRequest(w http.ResponseWriter, r *http.Request, req *InvokeRequest, tenant string) (cl claim, answered bool) {
	if req.RequestID == "" || d.requests == nil {
		return claim{}, false
	}
	cl, err := d.requests.claim(req, tenant)
	switch {
	case errors.Is(err, errRequestConflict):
		apiErr(w, kindConflict, fmt.Errorf("request_id %q: %w", req.RequestID, err))
	case err != nil:
		apiErr(w, kindRefused, err)
	case cl.wait != nil:
		select {
		case <-cl.wait.done:
			writeRaw(w, cl.wait.status, cl.wait.answer)
		case <-r.Context().Done():
		}
	case cl.rec != nil && cl.rec.Status != 0:
		writeRaw(w, cl.rec.Status, cl.rec.Answer)
	case cl.rec != nil:
		writeJSON(w, http.StatusOK, lostEnvelope(cl.rec))
	default:
		return cl, false
	}
	return cl, true
}

// admit takes a place among max_concurrent running invocations, unless
// shutdown has begun; done gives it back once the invocation has ended.
func (d *Daemon) admit() (done func(), err error) {
	n := d.inflight.Add(1)
	if n > int64(d.cfg.MaxConcurrent) {
		d.inflight.Add(-1)
		return nil, fail(kindTooMany, fmt.Errorf("max_concurrent (%d) invocations are running", d.cfg.MaxConcurrent))
	}
	d.scav.admitted(n)
	d.gate.Lock()
	if d.draining.Load() { // raced with the start of shutdown
		d.gate.Unlock()
		d.inflight.Add(-1)
		return nil, errShuttingDown
	}
	d.wg.Add(1)
	d.gate.Unlock()
	return func() {
		d.scav.ended(d.inflight.Add(-1), d.inflight.Load)
		d.wg.Done()
	}, nil
}

// invoke runs the admitted invocation, cancelled by `cancel ID`, by
// shutdown, or, with cancel_on_disconnect, by the caller going away.
func (d *Daemon) invoke(r *http.Request, req *InvokeRequest, tenant, dir string, cl claim) (supervisor.Envelope, error) {
	traceparent, tracestate := req.Traceparent, ""
	if traceparent == "" {
		traceparent, tracestate = telemetry.FromHeaders(r.Header)
	}
	cancel := d.cancels.open()
	defer d.cancels.close(cancel)
	if req.CancelOnDisconnect {
		stop := context.AfterFunc(r.Context(), cancel.fire)
		defer stop()
	}
	ctx, endCtx := d.invocationContext(r.Context(), cancel)
	defer endCtx()
	obs := &invokeObserver{d: d, cancel: cancel, cl: cl, requestID: req.RequestID}
	def := supervisor.Defaults(d.currentDefaults())
	env, err := d.sup.Run(ctx, supervisor.Request{
		SkillDir: dir, SkillID: req.SkillID, Version: req.Version, Args: req.Args,
		TenantID: tenant, Persona: req.CallerPersona, Traceparent: traceparent, Tracestate: tracestate,
		Deadline: time.Duration(req.DeadlineMS) * time.Millisecond, RequestID: req.RequestID,
		Defaults: &def,
		Ceilings: d.cfg.Limits.Ceilings(),
		Observer: obs,
		// Admitted; a cold sandbox is created once a start slot is free. A
		// caller that gives up meanwhile leaves the line, and nothing runs.
		StartSlot: func() (func(), error) { return d.starts.enter(r.Context(), d.stop) },
	})
	if id := obs.id; id != "" {
		outcome := string(env.Outcome)
		if err != nil && outcome == "" {
			outcome = "error"
		}
		d.hub.ended(id, outcome)
	}
	return env, err
}

// reply answers with env, or with err when it is not nil. A claimed
// request_id records the answer first (an invocation that ran) or forgets
// the claim (nothing ran).
func (d *Daemon) reply(w http.ResponseWriter, req *InvokeRequest, cl claim, err error, env any) {
	code, ran, body := http.StatusOK, true, env
	if err != nil {
		var ae APIError
		code, ae = answerOf(err)
		ran, body = answers[kindOf(err)].ran, ae
	}
	b := mustJSON(body)
	if cl.own {
		if ran {
			if err := d.requests.finish(cl.key, code, b); err != nil {
				d.log.Error("idempotency record not written", "request_id", req.RequestID, "err", err)
			}
		} else {
			d.requests.drop(cl.key, code, b)
		}
	}
	writeRaw(w, code, b)
}
