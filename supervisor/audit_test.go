package supervisor

// Spec 000 (skill-invocation-audit) §4 acceptance criteria, one test each,
// against the real SQLite audit store; the sandbox is faked because the
// kernel is not the point here (integration/ runs the real one).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/sandbox"
)

// faultyAuditor is the test seam: it fails every row of one kind and passes
// the others to the real store.
type faultyAuditor struct {
	inner Auditor
	fail  audit.Kind
}

func (f faultyAuditor) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	if d.Kind == f.fail {
		return audit.Row{}, fmt.Errorf("injected failure for %s: %w", d.Kind, auditstore.ErrUnavailable)
	}
	return f.inner.Emit(ctx, d)
}

func (s *Supervisor) store(t *testing.T) *auditstore.Store {
	t.Helper()
	switch a := s.Audit.(type) {
	case *auditstore.Store:
		return a
	case faultyAuditor:
		return a.inner.(*auditstore.Store)
	}
	t.Fatalf("no store behind %T", s.Audit)
	return nil
}

func rowsOf(t *testing.T, s *Supervisor, id string) []audit.Row {
	t.Helper()
	rows, err := s.store(t).Rows(context.Background(), auditstore.Filter{InvocationID: id})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func payload(t *testing.T, r audit.Row) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func kinds(rows []audit.Row) string {
	var k []string
	for _, r := range rows {
		k = append(k, string(r.Kind))
	}
	return strings.Join(k, ",")
}

func TestAC01InvocationEmitsStartedAndCompleted(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, s, env.InvocationID)
	if kinds(rows) != "skill.invoked_started,skill.invoked_completed" {
		t.Fatalf("rows %s", kinds(rows))
	}
	st, co := payload(t, rows[0]), payload(t, rows[1])
	if st["request_id"] != co["request_id"] || st["skill_id"] != "fake" || co["outcome"] != "success" {
		t.Errorf("started %v completed %v", st, co)
	}
	if st["containment"] == nil {
		t.Error("started row lacks the achieved containment")
	}
}

func TestAC02ArgsHashIsCanonicalSHA256(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Args: []byte(`{ "q" : "test", "a": [1.0, 2e0] }`)})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := audit.HashJSON([]byte(`{"a":[1,2],"q":"test"}`))
	if got := payload(t, rowsOf(t, s, env.InvocationID)[0])["args_hash"]; got != want {
		t.Errorf("args_hash %v, want %s", got, want)
	}
}

func TestAC03StartedFailureBlocksDispatch(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	s.Audit = faultyAuditor{inner: s.Audit, fail: audit.KindInvokedStarted}
	_, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	var ae *AuditEmitError
	if !errors.As(err, &ae) || ae.Stage != "start" || !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v, want AuditEmitError{Stage: start}", err)
	}
	if f.lastSpec.ID != "" {
		t.Fatal("the skill was dispatched although its started row was not written")
	}
	if rows, _ := s.store(t).Rows(context.Background(), auditstore.Filter{}); len(rows) != 0 {
		t.Errorf("%d rows written", len(rows))
	}
	// The broker started beside the row is closed: no socket is left.
	if ents, err := os.ReadDir(s.SocketDir); err != nil || len(ents) != 0 {
		t.Errorf("socket dir after the refused invocation: %v, %v; want it empty", ents, err)
	}
}

func TestAC04CompletedFailureLogsSev1AndKeepsEffects(t *testing.T) {
	var logs bytes.Buffer
	f := &fakeRunner{stdout: `{"sent":"email"}`}
	s := newSup(t, f)
	s.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	s.Audit = faultyAuditor{inner: s.Audit, fail: audit.KindInvokedCompleted}
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	// The caller is never told success without the record (issue 17), but
	// gets what the skill did: its effects stand.
	if !errors.Is(err, ErrAuditIncomplete) || !strings.Contains(err.Error(), env.InvocationID) {
		t.Fatalf("a completed-row failure: err %v, want ErrAuditIncomplete naming the invocation", err)
	}
	if env.Outcome != OutcomeSuccess || string(env.Result) != `{"sent":"email"}` {
		t.Errorf("the skill's effect was reversed or hidden: %+v", env)
	}
	if !strings.Contains(logs.String(), `"severity":"sev-1"`) || !strings.Contains(logs.String(), "invoked_completed") {
		t.Errorf("no sev-1 log line: %s", logs.String())
	}
	if got := testutil.ToFloat64(s.metrics().AuditEmitFailures.WithLabelValues("completed")); got != 1 {
		t.Errorf("cyberos_audit_emit_failures_total{stage=completed} = %v, want 1", got)
	}
}

func TestAC05TraceIDPropagated(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Traceparent: tp})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rowsOf(t, s, env.InvocationID) {
		if got := payload(t, r)["trace_id"]; got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s trace_id %v", r.Kind, got)
		}
	}
	if _, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Traceparent: "00-XYZ"}); !errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrInvalidSkill) || !strings.Contains(err.Error(), "traceparent") {
		t.Errorf("a malformed traceparent was accepted: %v", err)
	}
}

func TestAC06HundredParallelInvocations(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	dir := skillDir(t, "")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Run(t.Context(), Request{SkillDir: dir}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rep, err := s.store(t).Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 200 || !rep.OK || len(rep.InFlight) != 0 {
		t.Errorf("report %+v, want 200 rows, all paired, chain intact", rep)
	}
}

func TestAC07PanicEmitsCompletedWithDuration(t *testing.T) {
	s := newSup(t, &fakeRunner{panicInWait: true})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, s, env.InvocationID)
	co := payload(t, rows[len(rows)-1])
	if co["outcome"] != "panic" || co["duration_ms"] == nil {
		t.Errorf("completed %v", co)
	}
}

func TestAC08CompensationSkillEmitsRows(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "x-compensation: true\n")})
	if err != nil {
		t.Fatal(err)
	}
	if k := kinds(rowsOf(t, s, env.InvocationID)); k != "skill.invoked_started,skill.invoked_completed" {
		t.Errorf("compensation skill rows %s", k)
	}
}

func TestAC09ErrorHasMessage(t *testing.T) {
	s := newSup(t, &fakeRunner{exit: sandbox.Exit{Code: 2}, stderr: "private detail"})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	co := payload(t, rowsOf(t, s, env.InvocationID)[1])
	if co["outcome"] != "error" || co["error_message"] != "exit status 2" {
		t.Errorf("completed %v", co)
	}
	if !strings.Contains(env.ErrorMessage, "private detail") {
		t.Errorf("the caller's envelope should carry the stderr tail: %q", env.ErrorMessage)
	}
}

func TestAC10TimeoutIsRecorded(t *testing.T) {
	s := newSup(t, &fakeRunner{hang: true, ignoreTerm: true})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Deadline: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, s, env.InvocationID)
	if kinds(rows) != "skill.invoked_started,skill.timeout,skill.invoked_completed" {
		t.Fatalf("rows %s", kinds(rows))
	}
	to, co := payload(t, rows[1]), payload(t, rows[2])
	if to["deadline_ms"] != float64(300) || to["signal"] != "SIGKILL" || co["outcome"] != "timeout" {
		t.Errorf("timeout %v completed %v", to, co)
	}
}

// AC 11 (emit p95 < 50 ms) is a speed property: auditstore.BenchmarkEmit measures
// it (see the issue note), not a timed test.

func TestAC12TenantInBothRows(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), TenantID: "7d4e2f0a-0000-4000-8000-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rowsOf(t, s, env.InvocationID) {
		if payload(t, r)["tenant_id"] != "7d4e2f0a-0000-4000-8000-000000000001" {
			t.Errorf("%s lacks the tenant", r.Kind)
		}
	}
}

// slowPanic panics inside dispatch after 200 ms have passed on its clock.
type slowPanic struct {
	fakeRunner
	clock *fakeClock
}

func (f *slowPanic) Start(spec sandbox.Spec) (sandbox.Process, error) {
	f.clock.advance(200 * time.Millisecond)
	panic("late boom")
}

// fakeClock is a settable clock for the supervisor's duration measurement.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestAC13DurationAccurateOnPanic(t *testing.T) {
	// The dispatch runs 200 ms (on the supervisor's clock), then panics:
	// duration_ms must cover the dispatch and the panic handling, 200..210.
	f := &slowPanic{clock: &fakeClock{t: time.Now()}}
	s := newSup(t, &f.fakeRunner)
	s.Runner = f
	s.clock = f.clock.now
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	co := payload(t, rowsOf(t, s, env.InvocationID)[1])
	d := int64(co["duration_ms"].(float64))
	if co["outcome"] != "panic" || d < 200 || d > 210 {
		t.Errorf("duration_ms %d for a dispatch that panicked after 200 ms; want 200..210", d)
	}
}

func TestAC14ResultHashEmptyOnErrorAndPanic(t *testing.T) {
	for _, f := range []*fakeRunner{
		{stdout: `{"partial":1}`, exit: sandbox.Exit{Code: 1}},
		{stdout: `{"partial":1}`, exit: sandbox.Exit{Code: -1, Signal: syscall.SIGSEGV}},
	} {
		s := newSup(t, f)
		env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		if err != nil {
			t.Fatal(err)
		}
		co := payload(t, rowsOf(t, s, env.InvocationID)[1])
		if co["result_hash"] != "" || env.ResultHash != "" {
			t.Errorf("%s: result_hash %v", co["outcome"], co["result_hash"])
		}
	}
}

func TestAC15EmitFailureMetric(t *testing.T) {
	for _, stage := range []struct {
		kind  audit.Kind
		label string
	}{{audit.KindInvokedStarted, "start"}, {audit.KindInvokedCompleted, "completed"}} {
		s := newSup(t, &fakeRunner{stdout: "{}"})
		if got := testutil.ToFloat64(s.metrics().AuditEmitFailures.WithLabelValues(stage.label)); got != 0 {
			t.Fatalf("%s starts at %v", stage.label, got)
		}
		s.Audit = faultyAuditor{inner: s.Audit, fail: stage.kind}
		_, _ = s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		if got := testutil.ToFloat64(s.metrics().AuditEmitFailures.WithLabelValues(stage.label)); got != 1 {
			t.Errorf("cyberos_audit_emit_failures_total{stage=%q} = %v, want 1", stage.label, got)
		}
	}
}

// TestRawArgsAppearNowhere: the args string is in no row, no log line and
// no byte of the state directory.
func TestRawArgsAppearNowhere(t *testing.T) {
	const secret = "SECRET-ARGS-4f1c9e"
	var logs bytes.Buffer
	s := newSup(t, &fakeRunner{stdout: `{"ok":true}`, exit: sandbox.Exit{}})
	s.Log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Args: []byte(`{"q":"` + secret + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rowsOf(t, s, env.InvocationID) {
		if bytes.Contains(r.Payload, []byte(secret)) {
			t.Errorf("%s row holds the raw args", r.Kind)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Error("a log line holds the raw args")
	}
	s.store(t).Close()
	_ = filepath.WalkDir(s.StateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the raw args", p)
			}
		}
		return nil
	})
}

// TestReconcileClosesLostButNotLive: a started row whose supervisor is gone
// is closed as lost; one whose in-flight lock is held is left alone.
func TestReconcileClosesLostButNotLive(t *testing.T) {
	s := newSup(t, &fakeRunner{})
	ctx := context.Background()
	lost := audit.Common{InvocationID: NewID(), RequestID: NewID(), SkillID: "fake", TenantID: "t", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	live := lost
	live.InvocationID = NewID()
	for _, c := range []audit.Common{lost, live} {
		if _, err := s.Audit.Emit(ctx, audit.InvokedStarted(c, "1", "p", strings.Repeat("a", 64), map[string]any{})); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := lockInflight(s.StateDir, live.InvocationID)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	closed, err := s.Reconcile(ctx, s.store(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0] != lost.InvocationID {
		t.Fatalf("closed %v, want only %s", closed, lost.InvocationID)
	}
	rows := rowsOf(t, s, lost.InvocationID)
	if co := payload(t, rows[len(rows)-1]); co["outcome"] != "lost" {
		t.Errorf("closing row %v", co)
	}
	if un, _ := s.store(t).Unterminated(ctx); len(un) != 1 {
		t.Errorf("%d unterminated, want the live one only", len(un))
	}
}

// TestPolicyHashInStartedRow: skill.invoked_started carries the hash of the
// effective policy (defaults applied): equal run after run, different when
// the frontmatter or a default it takes changes; and the invoked skill's own
// folder is reserved to the supervisor.
func TestPolicyHashInStartedRow(t *testing.T) {
	s := newSup(t, &fakeRunner{stdout: "{}"})
	dir := skillDir(t, "allowed_tools: [Read]\nx-allowed-files: [\"/**\"]\n")
	hashOf := func(req Request) string {
		t.Helper()
		env, err := s.Run(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := payload(t, rowsOf(t, s, env.InvocationID)[0])["policy_hash"].(string)
		return h
	}
	first := hashOf(Request{SkillDir: dir})
	pol, err := policy.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(pol)
	want, _ := audit.HashJSON(b)
	if first != want || hashOf(Request{SkillDir: dir}) != first {
		t.Fatalf("policy_hash %q, want %q run after run", first, want)
	}
	if h := hashOf(Request{SkillDir: dir, Defaults: &Defaults{MemoryMB: 96}}); h == first || len(h) != 64 {
		t.Errorf("a changed default leaves policy_hash %q", h)
	}
	md := filepath.Join(dir, "SKILL.md")
	old, _ := os.ReadFile(md)
	if err := os.WriteFile(md, append(old[:len(old)-4], []byte("x-memory-mb: 4096\n---\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if h := hashOf(Request{SkillDir: dir}); h == first || len(h) != 64 {
		t.Errorf("a changed frontmatter leaves policy_hash %q", h)
	}
	inv, err := s.prepare(t.Context(), Request{SkillDir: dir}, NewID())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "main"), filepath.Join(dir, "data", "x")} {
		if !inv.enforcer.Reserved(p) {
			t.Errorf("the invoked skill's own folder is not reserved: %s", p)
		}
	}
}
