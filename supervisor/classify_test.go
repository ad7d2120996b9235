package supervisor

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit"
)

// TestClassify: each cause of an ending gives its outcome, signal and
// messages, and the earlier cause wins when several hold.
func TestClassify(t *testing.T) {
	base := ending{deadline: 10 * time.Second, maxAuditRows: 100, memoryMB: 64, stdout: []byte(`{"ok":true}`), logTail: "TAIL"}
	with := func(f func(*ending)) ending { e := base; f(&e); return e }
	for _, tc := range []struct {
		name       string
		e          ending
		outcome    Outcome
		signalSent string
		auditMsg   string // a prefix
		errMsg     string // a prefix; empty: the audit message
	}{
		{"success", base, OutcomeSuccess, "", "", ""},
		{"wait fails first of all", with(func(e *ending) { e.waitErr = errors.New("boom"); e.capHit, e.killSent = true, true }),
			OutcomeError, "", "wait: boom", ""},
		{"audit cap before the deadline", with(func(e *ending) { e.capHit, e.killSent, e.oomKills = true, true, 1 }),
			OutcomeKilled, "", "killed at the audit row cap: 100 rows", ""},
		{"SIGTERM only", with(func(e *ending) { e.termSent = true; e.exit.Code = 143 }),
			OutcomeTimeout, "SIGTERM", "deadline of 10s reached (SIGTERM at 9s, kill at 10s)", ""},
		{"kill sent", with(func(e *ending) { e.termSent, e.killSent = true, true; e.exit.Signal = syscall.SIGKILL }),
			OutcomeTimeout, "SIGKILL", "deadline of 10s reached", ""},
		{"daemon stop", with(func(e *ending) { e.termSent, e.stopSent = true, true }),
			OutcomeTimeout, "SIGTERM", "supervisor shut down", ""},
		{"caller cancel", with(func(e *ending) { e.termSent, e.cancelSent = true, true; e.exit.Code = 143 }),
			OutcomeCancelled, "SIGTERM", "cancelled by the caller", ""},
		{"deadline before OOM", with(func(e *ending) { e.killSent = true; e.oomKills = 2 }),
			OutcomeTimeout, "SIGKILL", "deadline of 10s", ""},
		{"OOM", with(func(e *ending) { e.oomKills = 1; e.exit.Signal = syscall.SIGKILL }),
			OutcomeKilled, "", "killed by the OOM killer at memory.max 64 MiB", ""},
		{"exec error", with(func(e *ending) { e.exit.ExecError = "no such file"; e.exit.Code = 127 }),
			OutcomeError, "", "cannot execute the entrypoint: no such file", "cannot execute the entrypoint: no such file: TAIL"},
		{"signal", with(func(e *ending) { e.exit.Signal = syscall.SIGSEGV }),
			OutcomePanic, "", "skill died by signal SIGSEGV", ""},
		{"SIGSYS suggests seccomp record", with(func(e *ending) { e.exit.Signal = syscall.SIGSYS }),
			OutcomePanic, "", "skill died by signal SIGSYS", "skill died by signal SIGSYS (the seccomp filter kills with SIGSYS; " + recordHint + ")"},
		{"EPERM in stderr suggests seccomp record", with(func(e *ending) {
			e.exit.Code = 1
			e.logTail = "mkdir: cannot create directory: Operation not permitted"
		}),
			OutcomeError, "", "exit status 1", "exit status 1: mkdir: cannot create directory: Operation not permitted (hint: " + recordHint + ")"},
		{"exit status", with(func(e *ending) { e.exit.Code = 3 }),
			OutcomeError, "", "exit status 3", "exit status 3: TAIL"},
		{"oversized result", with(func(e *ending) { e.stdoutOverflow = true }),
			OutcomeError, "", "result exceeds", ""},
		{"stdout not JSON", with(func(e *ending) { e.stdout = []byte("hello") }),
			OutcomeError, "", "stdout is not one JSON value: ", ""},
		{"two JSON values", with(func(e *ending) { e.stdout = []byte("1 2") }),
			OutcomeError, "", "stdout is not one JSON value: ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := classify(tc.e)
			if v.outcome != tc.outcome || v.signalSent != tc.signalSent {
				t.Fatalf("outcome %s signal %q, want %s %q (%+v)", v.outcome, v.signalSent, tc.outcome, tc.signalSent, v)
			}
			if !strings.HasPrefix(v.auditMsg, tc.auditMsg) {
				t.Errorf("audit message %q, want prefix %q", v.auditMsg, tc.auditMsg)
			}
			if strings.Contains(v.auditMsg, "TAIL") {
				t.Errorf("audit message %q carries the skill's stderr", v.auditMsg)
			}
			want := tc.errMsg
			if want == "" {
				want = tc.auditMsg
			}
			if !strings.HasPrefix(v.errorMessage, want) {
				t.Errorf("error message %q, want prefix %q", v.errorMessage, want)
			}
			if tc.outcome == OutcomeSuccess {
				if string(v.result) != `{"ok":true}` || v.resultHash == "" || v.errorMessage != "" || v.auditMsg != "" {
					t.Errorf("success verdict %+v", v)
				}
			} else if v.result != nil || v.resultHash != "" || v.errorMessage == "" || v.auditMsg == "" {
				t.Errorf("failure verdict %+v", v)
			}
		})
	}
}

// TestOutcomesAreAuditOutcomes: every typed Outcome is one a completed
// audit row accepts, so classify can never produce a row audit refuses.
func TestOutcomesAreAuditOutcomes(t *testing.T) {
	c := audit.Common{InvocationID: "i", SkillID: "s"}
	for _, o := range []Outcome{OutcomeSuccess, OutcomeError, OutcomePanic, OutcomeTimeout, OutcomeKilled, OutcomeLost} {
		if err := audit.InvokedCompleted(c, string(o), 1, "", "").Validate(); err != nil {
			t.Errorf("outcome %s: %v", o, err)
		}
	}
	if err := audit.InvokedCompleted(c, "exploded", 1, "", "").Validate(); err == nil {
		t.Error("an outcome outside the list was accepted")
	}
}
