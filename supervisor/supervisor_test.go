package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/cgroups"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

// fakeRunner plays a skill without a kernel: it writes stdout/stderr, then
// ends as told, or waits for the deadline's signals.
type fakeRunner struct {
	stdout, stderr string
	exit           sandbox.Exit
	stats          cgroups.Stats
	ignoreTerm     bool          // keep running after SIGTERM, until KillAll
	hang           bool          // never end by itself
	closeGate      chan struct{} // when set, Close waits for it
	statsGate      chan struct{} // when set, Stats waits for it
	startErr       error
	checkErr       error
	panicInWait    bool
	// during, when set, runs in Start with the spec (its broker is up).
	during func(spec sandbox.Spec)

	mu       sync.Mutex
	events   []string
	closed   bool
	lastSpec sandbox.Spec
}

func (f *fakeRunner) Reserve(string) (sandbox.Identity, error) {
	return sandbox.Identity{UID: os.Getuid(), GID: os.Getgid(), RangeStart: -1, Owner: -1}, nil
}
func (f *fakeRunner) Release(string)                 {}
func (f *fakeRunner) Owns(id string, pid int32) bool { return pid == int32(os.Getpid()) }

func (f *fakeRunner) Check(sandbox.Spec) (sandbox.Containment, error) {
	return sandbox.Containment{Platform: "fake"}, f.checkErr
}

func (f *fakeRunner) Start(spec sandbox.Spec) (sandbox.Process, error) {
	f.mu.Lock()
	f.lastSpec = spec
	f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	io.WriteString(spec.Stdout, f.stdout)
	io.WriteString(spec.Stderr, f.stderr)
	if f.during != nil {
		f.during(spec)
	}
	return &fakeProc{f: f, done: make(chan sandbox.Exit, 1), t0: time.Now()}, nil
}

func (f *fakeRunner) log(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

type fakeProc struct {
	f    *fakeRunner
	done chan sandbox.Exit
	t0   time.Time
}

func (p *fakeProc) Terminate() error {
	p.f.log(fmt.Sprintf("TERM@%d", time.Since(p.t0).Milliseconds()))
	if !p.f.ignoreTerm {
		p.done <- sandbox.Exit{Code: -1, Signal: syscall.SIGTERM}
	}
	return nil
}

func (p *fakeProc) KillAll() error {
	p.f.log(fmt.Sprintf("KILL@%d", time.Since(p.t0).Milliseconds()))
	select {
	case p.done <- sandbox.Exit{Code: -1, Signal: syscall.SIGKILL}:
	default:
	}
	return nil
}

func (p *fakeProc) Wait() (sandbox.Exit, error) {
	if p.f.panicInWait {
		panic("boom")
	}
	if p.f.hang {
		return <-p.done, nil
	}
	return p.f.exit, nil
}

func (p *fakeProc) Stats() (cgroups.Stats, error) {
	if p.f.statsGate != nil {
		<-p.f.statsGate
	}
	return p.f.stats, nil
}
func (p *fakeProc) OOMKills() (uint64, error) { return p.f.stats.OOMKills, nil }
func (p *fakeProc) Exec(context.Context, sandbox.ExecSpec) (sandbox.ExecExit, error) {
	return sandbox.ExecExit{}, errors.New("fake: no exec")
}
func (p *fakeProc) Close() error {
	if p.f.closeGate != nil {
		<-p.f.closeGate
	}
	p.f.mu.Lock()
	p.f.closed = true
	p.f.mu.Unlock()
	return nil
}
func (p *fakeProc) Containment() sandbox.Containment { return sandbox.Containment{Platform: "fake"} }
func (p *fakeProc) StartLatency() time.Duration      { return time.Millisecond }

func skillDir(t *testing.T, frontmatter string) string {
	t.Helper()
	dir := t.TempDir()
	md := "---\nname: fake\ndescription: d\n" + frontmatter + "---\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(t *testing.T, f *fakeRunner, req Request) (Envelope, error) {
	t.Helper()
	if req.SkillDir == "" {
		req.SkillDir = skillDir(t, "")
	}
	s := newSup(t, f)
	env, err := s.Run(t.Context(), req)
	s.Drain()
	return env, err
}

// newSup is a supervisor on the fake runner and a real audit store.
func newSup(t *testing.T, f *fakeRunner) *Supervisor {
	t.Helper()
	return newSupWith(t, f)
}

// newSupWith is a supervisor on runner r and a real audit store.
func newSupWith(t *testing.T, r sandbox.Runner) *Supervisor {
	t.Helper()
	state := t.TempDir()
	store, err := auditstore.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return &Supervisor{Runner: r, StateDir: state, Audit: store, Tools: tools.Registry(), SocketDir: socketDir(t)}
}

// socketDir is a private (0700) directory for broker sockets. Unix socket
// paths are limited to 108 bytes, so it lives directly under /tmp.
func socketDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestOutcomeClassification(t *testing.T) {
	cases := []struct {
		name    string
		f       *fakeRunner
		outcome Outcome
		msg     string
	}{
		{"one json value", &fakeRunner{stdout: " {\"b\":1, \"a\":2}\n"}, OutcomeSuccess, ""},
		{"two json values", &fakeRunner{stdout: "{} {}"}, OutcomeError, "more than one value"},
		{"empty stdout", &fakeRunner{}, OutcomeError, "empty"},
		{"exit code", &fakeRunner{stderr: "bad thing", exit: sandbox.Exit{Code: 3}}, OutcomeError, "exit status 3: bad thing"},
		{"signal", &fakeRunner{exit: sandbox.Exit{Code: -1, Signal: syscall.SIGSEGV}}, OutcomePanic, "SIGSEGV"},
		{"oom beats signal", &fakeRunner{exit: sandbox.Exit{Code: -1, Signal: syscall.SIGKILL}, stats: cgroups.Stats{OOMKills: 1}}, OutcomeKilled, "OOM"},
		{"exec failure", &fakeRunner{exit: sandbox.Exit{Code: 127, ExecError: "exec format error"}}, OutcomeError, "exec format error"},
		{"result too large", &fakeRunner{stdout: strings.Repeat(" ", MaxResultBytes) + "{}"}, OutcomeError, "exceeds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env, err := run(t, c.f, Request{})
			if err != nil {
				t.Fatal(err)
			}
			if env.Outcome != c.outcome || !strings.Contains(env.ErrorMessage, c.msg) {
				t.Fatalf("outcome %s %q, want %s containing %q", env.Outcome, env.ErrorMessage, c.outcome, c.msg)
			}
			if (env.Outcome == OutcomeSuccess) != (env.ResultHash != "") {
				t.Errorf("result_hash %q with outcome %s", env.ResultHash, env.Outcome)
			}
			if !c.f.closed {
				t.Error("sandbox not closed")
			}
		})
	}
}

// TestDeadlineTermThenKill: SIGTERM at 90 %, kill at 100 %, outcome timeout.
func TestDeadlineTermThenKill(t *testing.T) {
	f := &fakeRunner{hang: true, ignoreTerm: true}
	start := time.Now()
	env, err := run(t, f, Request{Deadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if env.Outcome != OutcomeTimeout || env.SignalSent != "SIGKILL" {
		t.Fatalf("outcome %s signal %s, want timeout by SIGKILL", env.Outcome, env.SignalSent)
	}
	// Timers fire at their time or later (a loaded machine delays them),
	// never earlier. A TERM timer delayed past the kill's time may fire
	// with it, in either order; otherwise TERM comes first.
	term, kill := int64(-1), int64(-1)
	for _, ev := range f.events {
		var ms int64
		switch {
		case strings.HasPrefix(ev, "TERM@"):
			fmt.Sscanf(ev, "TERM@%d", &ms)
			term = ms
		case strings.HasPrefix(ev, "KILL@"):
			fmt.Sscanf(ev, "KILL@%d", &ms)
			kill = ms
		}
	}
	termFirst := len(f.events) > 0 && strings.HasPrefix(f.events[0], "TERM@")
	if len(f.events) != 2 || term < 900 || term > 900+300 || kill < 1000 || kill > 1000+300 ||
		(!termFirst && term < 1000) {
		t.Errorf("signals %v, want TERM at 0.9 s then KILL at 1.0 s (ms since start)", f.events)
	}
	if took < time.Second || took > 2*time.Second || env.DurationMS < 1000 {
		t.Errorf("took %v (duration %d ms), want about 1 s", took, env.DurationMS)
	}
}

// TestDeadlineTermIsEnough: a skill that exits on SIGTERM is still timeout.
func TestDeadlineTermIsEnough(t *testing.T) {
	f := &fakeRunner{hang: true}
	// 3 s: SIGTERM at 2.7 s leaves 300 ms before the kill. With 500 ms (a
	// 50 ms gap) a loaded CI machine fired both timers at once.
	env, err := run(t, f, Request{Deadline: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if env.Outcome != OutcomeTimeout || env.SignalSent != "SIGTERM" || len(f.events) != 1 {
		t.Fatalf("outcome %s signal %s events %v", env.Outcome, env.SignalSent, f.events)
	}
}

func TestDeadlineMayOnlyShorten(t *testing.T) {
	_, err := run(t, &fakeRunner{}, Request{SkillDir: skillDir(t, "effort_minutes: 1\n"), Deadline: 2 * time.Minute})
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("err %v, want ErrInvalidRequest naming the deadline", err)
	}
}

// TestAnswerBeforeTeardown: with a teardown slot, the envelope and the
// completed row do not wait for the sandbox's destruction; Drain does.
func TestAnswerBeforeTeardown(t *testing.T) {
	f := &fakeRunner{stdout: "{}", closeGate: make(chan struct{})}
	s := newSup(t, f)
	s.MaxTeardowns = 1
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	rows, err := s.store(t).Rows(context.Background(), auditstore.Filter{InvocationID: env.InvocationID, Kind: audit.KindInvokedCompleted})
	if err != nil || len(rows) != 1 {
		t.Fatalf("completed rows before the teardown: %v %v", rows, err)
	}
	drained := make(chan struct{})
	go func() { s.Drain(); close(drained) }()
	select {
	case <-drained:
		t.Fatal("Drain returned while the sandbox's Close was still running")
	case <-time.After(50 * time.Millisecond):
	}
	close(f.closeGate)
	<-drained
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		t.Fatal("sandbox not closed after Drain")
	}
}

// TestPanicInDispatchIsRecorded: a bug in our own path ends as panic, with
// a duration and the sandbox closed.
func TestPanicInDispatchIsRecorded(t *testing.T) {
	f := &fakeRunner{panicInWait: true}
	env, err := run(t, f, Request{})
	if err != nil {
		t.Fatal(err)
	}
	if env.Outcome != OutcomePanic || !strings.Contains(env.ErrorMessage, "boom") || !f.closed {
		t.Fatalf("envelope %+v closed %v", env, f.closed)
	}
}

func TestRefusedBeforeAnythingRuns(t *testing.T) {
	t.Run("invalid args", func(t *testing.T) {
		f := &fakeRunner{}
		_, err := run(t, f, Request{Args: []byte("{nope")})
		if !errors.Is(err, ErrInvalidRequest) || f.lastSpec.ID != "" {
			t.Fatalf("err %v, started %q", err, f.lastSpec.ID)
		}
	})
	t.Run("runner check", func(t *testing.T) {
		f := &fakeRunner{checkErr: sandbox.ErrProfile}
		_, err := run(t, f, Request{})
		if !errors.Is(err, ErrInvalidSkill) || f.lastSpec.ID != "" {
			t.Fatalf("err %v, started %q", err, f.lastSpec.ID)
		}
	})
	t.Run("state dir", func(t *testing.T) {
		f := &fakeRunner{}
		blocker := filepath.Join(t.TempDir(), "file")
		os.WriteFile(blocker, nil, 0o600)
		s := &Supervisor{Runner: f, StateDir: filepath.Join(blocker, "state"), Audit: newSup(t, f).Audit}
		_, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		if !errors.Is(err, ErrRefused) || f.lastSpec.ID != "" {
			t.Fatalf("err %v, started %q", err, f.lastSpec.ID)
		}
	})
}

// TestSpecCarriesPolicyAndEnv: limits from frontmatter and exactly the
// contract's environment reach the runner.
func TestSpecCarriesPolicyAndEnv(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	env, err := run(t, f, Request{SkillDir: skillDir(t, "x-memory-mb: 128\nx-pids-max: 16\nx-cpu: 0.5\n"), TenantID: "11111111-2222-3333-4444-555555555555"})
	if err != nil {
		t.Fatal(err)
	}
	s := f.lastSpec
	if s.MemoryMB != 128 || s.PidsMax != 16 || s.CPU != 0.5 || s.SeccompProfile != "default" || s.ID != env.InvocationID {
		t.Errorf("spec %+v", s)
	}
	want := []string{"CYBEROS_BROKER_SOCKET=/run/cyberos/broker.sock", "CYBEROS_SKILL_ID=fake", "CYBEROS_INVOCATION_ID=" + env.InvocationID,
		"CYBEROS_TENANT_ID=11111111-2222-3333-4444-555555555555", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}
	if strings.Join(s.Env, "\n") != strings.Join(want, "\n") {
		t.Errorf("env %q, want %q", s.Env, want)
	}
}

// TestSpecDefaults: a frontmatter silent on x-cpu gets one CPU of quota,
// or the caller's Defaults (0 = no quota); an explicit x-cpu wins. The
// Defaults' rlimits reach the spec; without Defaults the sandbox's own
// defaults apply (0 in the spec).
func TestSpecDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, fm        string
		d               *Defaults
		cpu             float64
		fsizeMB, nofile int64
	}{
		{"built-in", "", nil, policy.DefaultCPU, 0, 0},
		{"config", "", &Defaults{CPU: 2, FileSizeMB: 16, NoFile: 256}, 2, 16, 256},
		{"config no quota", "", &Defaults{CPU: 0}, 0, 0, 0},
		{"negative keeps the built-in", "", &Defaults{CPU: -1}, policy.DefaultCPU, 0, 0},
		{"frontmatter lowers", "x-cpu: 0.5\n", &Defaults{CPU: 2}, 0.5, 0, 0},
		// Raising the quota, or removing it, is the operator's call.
		{"frontmatter cannot raise", "x-cpu: 4\n", &Defaults{CPU: 2}, 2, 0, 0},
		{"frontmatter cannot remove", "x-cpu: 0\n", &Defaults{CPU: 2}, 2, 0, 0},
		{"operator no quota", "x-cpu: 3\n", &Defaults{CPU: 0}, 3, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{stdout: "{}"}
			if _, err := run(t, f, Request{SkillDir: skillDir(t, tc.fm), Defaults: tc.d}); err != nil {
				t.Fatal(err)
			}
			s := f.lastSpec
			if s.CPU != tc.cpu || s.FileSizeMB != tc.fsizeMB || s.NoFile != tc.nofile {
				t.Errorf("spec cpu %v fsize %d nofile %d, want %v %d %d", s.CPU, s.FileSizeMB, s.NoFile, tc.cpu, tc.fsizeMB, tc.nofile)
			}
		})
	}
}

// TestCeilings: a frontmatter asking for more memory, pids or CPU than the
// operator's ceilings is refused before the sandbox starts, naming the key,
// the value and the ceiling; within them it runs. An x-cpu over the ceiling
// is refused even where the default quota would have lowered it.
func TestCeilings(t *testing.T) {
	c := Ceilings{MaxMemoryMB: 1024, MaxPids: 128, MaxCPU: 2}
	for _, tc := range []struct {
		name, fm string
		d        *Defaults
		want     string // "" = runs
	}{
		{"within", "x-memory-mb: 1024\nx-pids-max: 128\nx-cpu: 2\n", nil, ""},
		{"memory", "x-memory-mb: 65536\n", nil, "x-memory-mb: 65536 is over limits.max_memory_mb (1024)"},
		{"pids", "x-pids-max: 4096\n", nil, "x-pids-max: 4096 is over limits.max_pids (128)"},
		{"cpu", "x-cpu: 3\n", nil, "x-cpu: 3 is over limits.max_cpu (2)"},
		{"cpu over the ceiling, lowered by the default", "x-cpu: 3\n", &Defaults{CPU: 1}, "x-cpu: 3 is over limits.max_cpu (2)"},
		{"a default over the ceiling", "", &Defaults{MemoryMB: 2048}, "x-memory-mb: 2048 (the default where the frontmatter is silent) is over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRunner{stdout: "{}"}
			_, err := run(t, f, Request{SkillDir: skillDir(t, tc.fm), Defaults: tc.d, Ceilings: c})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrOverCeiling) || !errors.Is(err, ErrInvalidSkill) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrOverCeiling saying %q", err, tc.want)
			}
			if f.lastSpec.ID != "" {
				t.Errorf("the sandbox of a refused invocation was started")
			}
		})
	}
}

func TestBuffers(t *testing.T) {
	c := &cappedBuffer{max: 4}
	c.Write([]byte("abc"))
	c.Write([]byte("def"))
	if string(c.Bytes()) != "abcd" || !c.overflow {
		t.Errorf("capped %q overflow %v", c.Bytes(), c.overflow)
	}
	tb := &tailBuffer{max: 5}
	tb.Write([]byte("hello"))
	tb.Write([]byte(" world"))
	if string(tb.Bytes()) != "world" || tb.Tail(3) != "rld" {
		t.Errorf("tail %q %q", tb.Bytes(), tb.Tail(3))
	}
}

// hangingStart never finishes starting until released.
type hangingStart struct {
	fakeRunner
	release chan struct{}
}

func (f *hangingStart) Start(spec sandbox.Spec) (sandbox.Process, error) {
	<-f.release
	return f.fakeRunner.Start(spec)
}

// TestDeadlineBoundsSandboxStart: a sandbox start that hangs ends the
// invocation as a timeout at the deadline; what it returns later is closed.
func TestDeadlineBoundsSandboxStart(t *testing.T) {
	f := &hangingStart{release: make(chan struct{})}
	s := newSup(t, &f.fakeRunner)
	s.Runner = f
	t0 := time.Now()
	env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), Deadline: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if env.Outcome != OutcomeTimeout || time.Since(t0) > 3*time.Second {
		t.Fatalf("outcome %s after %v, want timeout at about 300 ms", env.Outcome, time.Since(t0))
	}
	// The deadline reached while starting still gets its skill.timeout row
	// (the late sandbox is killed with SIGKILL).
	rows := rowsOf(t, s, env.InvocationID)
	if kinds(rows) != "skill.invoked_started,skill.timeout,skill.invoked_completed" {
		t.Fatalf("rows %s", kinds(rows))
	}
	if to := payload(t, rows[1]); to["signal"] != "SIGKILL" || to["deadline_ms"] != float64(300) {
		t.Errorf("timeout row %v", to)
	}
	close(f.release)
	testutil.WaitFor(t, 5*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.closed })
}

// TestTenantMustBeAUUID: a tenant that is not a UUID is refused as an
// invalid request, naming it; nothing runs.
func TestTenantMustBeAUUID(t *testing.T) {
	for _, tenant := range []string{"t1", "not a uuid", "11111111-2222-3333-4444-55555555555", "{11111111-2222-3333-4444-555555555555}"} {
		f := &fakeRunner{}
		_, err := run(t, f, Request{SkillDir: skillDir(t, ""), TenantID: tenant})
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "tenant") || f.lastSpec.ID != "" {
			t.Errorf("tenant %q: err %v, started %q", tenant, err, f.lastSpec.ID)
		}
	}
}
