package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/supervisor/sandbox"
)

// ending is everything classify looks at once the skill's process is gone.
type ending struct {
	waitErr                      error
	exit                         sandbox.Exit
	capHit                       bool // the audit row cap was reached
	termSent, killSent, stopSent bool // the deadline (or the daemon's stop) fired
	cancelSent                   bool // the caller's cancel fired (with termSent)
	oomKills                     uint64
	stdoutOverflow               bool
	stdout                       []byte
	logTail                      string

	// For the messages only.
	deadline     time.Duration
	maxAuditRows int
	memoryMB     int64
}

// verdict is how an invocation ended: its outcome and the envelope fields
// that go with it. auditMsg is the audit row's error message, in our words
// only (never the skill's stderr, which may echo its args).
type verdict struct {
	outcome      Outcome
	signalSent   string
	errorMessage string
	auditMsg     string
	result       json.RawMessage
	resultHash   string
}

// classify maps how the skill's process ended onto an outcome. The first
// matching cause wins: a failed wait, the audit row cap, the deadline, the
// OOM killer, an entrypoint that could not run, a signal, a non-zero exit, an
// oversized result; otherwise stdout must be one JSON value for success.
func classify(e ending) verdict {
	var v verdict
	switch {
	case e.waitErr != nil:
		v.auditMsg = "wait: " + e.waitErr.Error()
		v.outcome, v.errorMessage = OutcomeError, v.auditMsg
	case e.capHit:
		v.outcome = OutcomeKilled
		v.auditMsg = fmt.Sprintf("killed at the audit row cap: %d rows (skill.audit_cap_reached)", e.maxAuditRows)
		v.errorMessage = v.auditMsg
	case e.cancelSent && (e.killSent || e.termSent):
		v.outcome = OutcomeCancelled
		v.signalSent = "SIGTERM"
		if e.killSent {
			v.signalSent = "SIGKILL"
		}
		v.auditMsg = "cancelled by the caller: ended through the deadline path (SIGTERM, then kill after the grace)"
		v.errorMessage = v.auditMsg
	case e.killSent || e.termSent:
		v.outcome = OutcomeTimeout
		v.signalSent = "SIGTERM"
		if e.killSent {
			v.signalSent = "SIGKILL"
		}
		v.auditMsg = fmt.Sprintf("deadline of %v reached (SIGTERM at %v, kill at %v)", e.deadline, e.deadline*termNum/termDen, e.deadline)
		if e.stopSent {
			v.auditMsg = "supervisor shut down: ended through the timeout path (SIGTERM, then kill after the grace)"
		}
		v.errorMessage = v.auditMsg
	case e.oomKills > 0:
		v.outcome = OutcomeKilled
		v.auditMsg = fmt.Sprintf("killed by the OOM killer at memory.max %d MiB", e.memoryMB)
		v.errorMessage = v.auditMsg
	case e.exit.ExecError != "":
		v.outcome = OutcomeError
		v.auditMsg = "cannot execute the entrypoint: " + e.exit.ExecError
		v.errorMessage = withTail(v.auditMsg, e.logTail)
	case e.exit.Signal != nil:
		v.outcome = OutcomePanic
		v.auditMsg = "skill died by signal " + signalName(e.exit.Signal)
		v.errorMessage = v.auditMsg
		if e.exit.Signal == syscall.SIGSYS {
			v.errorMessage += " (the seccomp filter kills with SIGSYS; " + recordHint + ")"
		}
	case e.exit.Code != 0:
		v.outcome = OutcomeError
		v.auditMsg = fmt.Sprintf("exit status %d", e.exit.Code)
		v.errorMessage = withTail(v.auditMsg, e.logTail)
		if refusedBySeccomp(e.logTail) {
			v.errorMessage += " (hint: " + recordHint + ")"
		}
	case e.stdoutOverflow:
		v.outcome = OutcomeError
		v.auditMsg = fmt.Sprintf("result exceeds %d bytes", MaxResultBytes)
		v.errorMessage = v.auditMsg
	default:
		result, perr := oneJSONValue(e.stdout)
		if perr != nil {
			v.outcome = OutcomeError
			v.auditMsg = "stdout is not one JSON value: " + perr.Error()
			v.errorMessage = withTail(v.auditMsg, e.logTail)
			break
		}
		hash, herr := audit.HashJSON(result)
		if herr != nil {
			v.outcome = OutcomeError
			v.auditMsg = "result cannot be canonicalised"
			v.errorMessage = v.auditMsg + ": " + herr.Error()
			break
		}
		v.outcome, v.result, v.resultHash = OutcomeSuccess, result, hash
	}
	return v
}

// recordHint is what an error that may be the seccomp profile's refusal
// suggests.
const recordHint = "if its seccomp profile refused a syscall, `cyberos seccomp record SKILL_DIR` runs it once and lists the syscalls it needs"

// refusedBySeccomp reports whether a skill's stderr reads like a syscall
// its profile refused: the profile's EPERM ("Operation not permitted") or
// the shell's report of a SIGSYS ("Bad system call").
func refusedBySeccomp(tail string) bool {
	return strings.Contains(tail, "Operation not permitted") || strings.Contains(tail, "Bad system call")
}

func withTail(msg, tail string) string {
	if tail == "" {
		return msg
	}
	return msg + ": " + tail
}

// oneJSONValue returns b if it holds exactly one JSON value (surrounding
// whitespace allowed).
func oneJSONValue(b []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty")
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one value")
	}
	return v, nil
}
