// Package supervisor runs one skill invocation end to end: load the policy,
// start the sandbox, enforce the deadline, classify how it ended and build the
// envelope the caller gets back.
package supervisor

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/cgroups"
	"github.com/cyberos/supervisor/policy"
	"github.com/cyberos/supervisor/supervisor/sandbox"
)

// Error classes, tested with errors.Is. The CLI maps them to exit statuses.
var (
	// ErrInvalidSkill: the skill folder, its frontmatter, its profile or the
	// request is invalid; nothing ran (exit 2).
	ErrInvalidSkill = errors.New("invalid skill")
	// ErrRefused: the invocation was refused before dispatch, e.g. the state
	// directory is unusable (exit 3).
	ErrRefused = errors.New("refused before dispatch")
)

// Outcome is how an invocation ended.
type Outcome string

// The outcomes of DESIGN.md "Contracts → Skill process".
const (
	OutcomeSuccess Outcome = "success"
	OutcomeError   Outcome = "error"
	OutcomePanic   Outcome = "panic"
	OutcomeTimeout Outcome = "timeout"
	OutcomeKilled  Outcome = "killed"
)

// Caps on what a skill may hand back.
const (
	MaxResultBytes = 16 << 20 // stdout
	MaxLogBytes    = 1 << 20  // stderr kept in the log file
	LogTailBytes   = 4 << 10  // stderr tail in the envelope
	// termFraction of the deadline is when SIGTERM is sent.
	termNum, termDen = 9, 10
)

// Request is one invocation as a caller asks for it.
type Request struct {
	SkillDir    string
	Args        json.RawMessage // one JSON value; nil means {}
	TenantID    string
	Persona     string
	Traceparent string
	// Deadline, when set, shortens effort_minutes; it may not lengthen it.
	Deadline time.Duration
	// RequestID is the caller's id for the request; generated when empty.
	RequestID string
}

// Envelope is what the caller gets back (the --json output).
type Envelope struct {
	InvocationID   string              `json:"invocation_id"`
	RequestID      string              `json:"request_id"`
	SkillID        string              `json:"skill_id"`
	Version        string              `json:"version"`
	Outcome        Outcome             `json:"outcome"`
	DurationMS     int64               `json:"duration_ms"`
	Result         json.RawMessage     `json:"result"`
	ResultHash     string              `json:"result_hash"`
	ErrorMessage   string              `json:"error_message"`
	Containment    sandbox.Containment `json:"containment"`
	LogTail        string              `json:"log_tail"`
	Stats          cgroups.Stats       `json:"stats"`
	SandboxStartMS float64             `json:"sandbox_start_ms"`
	DeadlineMS     int64               `json:"deadline_ms"`
	SignalSent     string              `json:"signal_sent,omitempty"`
}

// Supervisor runs invocations on a Runner.
type Supervisor struct {
	Runner      sandbox.Runner
	ProfilesDir string
	StateDir    string
	Log         *slog.Logger
	// AllowDegraded is passed to the runner (macOS rlimit-only mode).
	AllowDegraded bool
}

// NewID returns a new ULID string (time-ordered, 26 chars).
func NewID() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }

// checkStateDir makes sure the state directory exists and takes a durable
// write; an unusable one refuses the invocation before anything runs.
func (s *Supervisor) checkStateDir() error {
	if err := os.MkdirAll(filepath.Join(s.StateDir, "logs"), 0o700); err != nil {
		return fmt.Errorf("%w: state dir %s: %v", ErrRefused, s.StateDir, err)
	}
	probe := filepath.Join(s.StateDir, ".probe")
	f, err := os.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.Write([]byte("ok"))
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		os.Remove(probe)
	}
	if err != nil {
		return fmt.Errorf("%w: state dir %s is not writable: %v", ErrRefused, s.StateDir, err)
	}
	return nil
}

// Run performs one invocation. A returned error means nothing ran
// (ErrInvalidSkill, ErrRefused); every invocation that started returns an
// Envelope with its outcome and nil error.
func (s *Supervisor) Run(req Request) (env Envelope, err error) {
	pol, err := policy.LoadDir(req.SkillDir)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w %s: %v", ErrInvalidSkill, req.SkillDir, err)
	}
	args := req.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return Envelope{}, fmt.Errorf("%w: args: not valid JSON", ErrInvalidSkill)
	}
	deadline := time.Duration(pol.EffortMinutes) * time.Minute
	if req.Deadline < 0 {
		return Envelope{}, fmt.Errorf("%w: deadline: must be positive", ErrInvalidSkill)
	}
	if req.Deadline > deadline {
		return Envelope{}, fmt.Errorf("%w: deadline: %v is longer than effort_minutes (%d min); it may only shorten it", ErrInvalidSkill, req.Deadline, pol.EffortMinutes)
	}
	if req.Deadline > 0 {
		deadline = req.Deadline
	}
	skillDir, err := filepath.Abs(req.SkillDir)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalidSkill, err)
	}
	env = Envelope{
		InvocationID: NewID(),
		RequestID:    req.RequestID,
		SkillID:      pol.Name,
		Version:      pol.Version,
		DeadlineMS:   deadline.Milliseconds(),
	}
	if env.RequestID == "" {
		env.RequestID = NewID()
	}
	log := s.logger().With("invocation_id", env.InvocationID, "skill_id", pol.Name, "tenant_id", req.TenantID)

	stdout := &cappedBuffer{max: MaxResultBytes}
	stderr := &tailBuffer{max: MaxLogBytes}
	spec := sandbox.Spec{
		ID:         env.InvocationID,
		SkillDir:   skillDir,
		Entrypoint: pol.Entrypoint,
		Env: []string{
			"CYBEROS_BROKER_SOCKET=" + sandbox.BrokerSockPath,
			"CYBEROS_SKILL_ID=" + pol.Name,
			"CYBEROS_INVOCATION_ID=" + env.InvocationID,
			"CYBEROS_TENANT_ID=" + req.TenantID,
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"HOME=/tmp",
			"LANG=C.UTF-8",
		},
		Stdin:          bytes.NewReader(args),
		Stdout:         stdout,
		Stderr:         stderr,
		MemoryMB:       pol.MemoryMB,
		PidsMax:        pol.PidsMax,
		CPU:            pol.CPU,
		ProfilesDir:    s.ProfilesDir,
		SeccompProfile: pol.SeccompProfile,
		AllowDegraded:  s.AllowDegraded,
	}
	if err := s.Runner.Check(spec); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrInvalidSkill, err)
	}
	if err := s.checkStateDir(); err != nil {
		return Envelope{}, err
	}

	start := time.Now()
	defer func() {
		env.DurationMS = time.Since(start).Milliseconds()
		if r := recover(); r != nil {
			// A bug in our own dispatch path must still end in an outcome.
			log.Error("supervisor panic", "panic", r)
			env.Outcome, env.Result, env.ResultHash = OutcomePanic, nil, ""
			env.ErrorMessage = fmt.Sprintf("supervisor panic: %v", r)
			err = nil
		}
	}()
	proc, err := s.Runner.Start(spec)
	if err != nil {
		env.Outcome = OutcomeError
		env.ErrorMessage = "sandbox did not start: " + err.Error()
		log.Error("sandbox start", "err", err)
		return env, nil
	}
	defer func() {
		if cerr := proc.Close(); cerr != nil {
			log.Error("sandbox cleanup", "err", cerr)
		}
	}()
	env.Containment = proc.Containment()
	env.SandboxStartMS = float64(proc.StartLatency().Microseconds()) / 1000

	var termSent, killSent atomic.Bool
	termTimer := time.AfterFunc(deadline*termNum/termDen, func() {
		termSent.Store(true)
		if err := proc.Terminate(); err != nil {
			log.Warn("deadline SIGTERM", "err", err)
		}
	})
	killTimer := time.AfterFunc(deadline, func() {
		killSent.Store(true)
		if err := proc.KillAll(); err != nil {
			log.Error("deadline kill", "err", err)
		}
	})
	exit, werr := proc.Wait()
	termTimer.Stop()
	killTimer.Stop()
	stats, serr := proc.Stats()
	if serr != nil {
		log.Warn("cgroup stats", "err", serr)
	}
	env.Stats = stats
	env.LogTail = stderr.Tail(LogTailBytes)
	s.writeLog(env.InvocationID, stderr.Bytes(), log)

	switch {
	case werr != nil:
		env.Outcome, env.ErrorMessage = OutcomeError, "wait: "+werr.Error()
	case killSent.Load() || termSent.Load():
		env.Outcome = OutcomeTimeout
		env.SignalSent = "SIGTERM"
		if killSent.Load() {
			env.SignalSent = "SIGKILL"
		}
		env.ErrorMessage = fmt.Sprintf("deadline of %v reached (SIGTERM at %v, kill at %v)", deadline, deadline*termNum/termDen, deadline)
	case stats.OOMKills > 0:
		env.Outcome = OutcomeKilled
		env.ErrorMessage = fmt.Sprintf("killed by the OOM killer at memory.max %d MiB", pol.MemoryMB)
	case exit.ExecError != "":
		env.Outcome = OutcomeError
		env.ErrorMessage = withTail("cannot execute the entrypoint: "+exit.ExecError, env.LogTail)
	case exit.Signal != nil:
		env.Outcome = OutcomePanic
		env.ErrorMessage = "skill died by signal " + signalName(exit.Signal)
	case exit.Code != 0:
		env.Outcome = OutcomeError
		env.ErrorMessage = withTail(fmt.Sprintf("exit status %d", exit.Code), env.LogTail)
	case stdout.overflow:
		env.Outcome = OutcomeError
		env.ErrorMessage = fmt.Sprintf("result exceeds %d bytes", MaxResultBytes)
	default:
		result, perr := oneJSONValue(stdout.Bytes())
		if perr != nil {
			env.Outcome = OutcomeError
			env.ErrorMessage = withTail("stdout is not one JSON value: "+perr.Error(), env.LogTail)
			break
		}
		hash, herr := audit.HashJSON(result)
		if herr != nil {
			env.Outcome = OutcomeError
			env.ErrorMessage = "result cannot be canonicalised: " + herr.Error()
			break
		}
		env.Outcome, env.Result, env.ResultHash = OutcomeSuccess, result, hash
	}
	log.Info("invocation ended", "outcome", env.Outcome, "exit_code", exit.Code, "signal", signalName(exit.Signal))
	return env, nil
}

func (s *Supervisor) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// writeLog keeps the skill's stderr (capped) as the invocation's log.
func (s *Supervisor) writeLog(id string, b []byte, log *slog.Logger) {
	if err := os.WriteFile(filepath.Join(s.StateDir, "logs", id+".stderr"), b, 0o600); err != nil {
		log.Warn("keep skill log", "err", err)
	}
}

func withTail(msg, tail string) string {
	if tail == "" {
		return msg
	}
	return msg + ": " + tail
}

func signalName(sig os.Signal) string {
	if sig == nil {
		return ""
	}
	if s, ok := sig.(syscall.Signal); ok {
		if name := sigNames[s]; name != "" {
			return name
		}
	}
	return sig.String()
}

var sigNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGKILL: "SIGKILL",
	syscall.SIGTERM: "SIGTERM", syscall.SIGBUS: "SIGBUS", syscall.SIGILL: "SIGILL",
	syscall.SIGFPE: "SIGFPE", syscall.SIGSYS: "SIGSYS", syscall.SIGINT: "SIGINT",
	syscall.SIGHUP: "SIGHUP", syscall.SIGPIPE: "SIGPIPE", syscall.SIGQUIT: "SIGQUIT",
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

// cappedBuffer keeps the first max bytes and drops (but accepts) the rest,
// so a skill writing too much is never blocked on a full pipe.
type cappedBuffer struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.overflow = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

func (c *cappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes()
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

// Tail returns the last n bytes as text.
func (t *tailBuffer) Tail(n int) string {
	b := t.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
