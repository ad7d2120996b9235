// Package supervisor runs one skill invocation end to end: load the policy,
// start the sandbox, enforce the deadline, classify how it ended and build the
// envelope the caller gets back.
package supervisor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/cgroups"
	"cyberos.dev/memory"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
	"cyberos.dev/wire"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"
)

// Error classes, tested with errors.Is. The CLI maps them to exit statuses.
var (
	// ErrInvalidSkill: the skill folder, its frontmatter, its profile or the
	// request is invalid; nothing ran (exit 2).
	ErrInvalidSkill = errors.New("invalid skill")
	// ErrInvalidRequest: the caller's side of the request (args, deadline,
	// tenant, traceparent) is invalid; nothing ran (exit 2, HTTP 400).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrRefused: the invocation was refused before dispatch, e.g. the state
	// directory is unusable (exit 3).
	ErrRefused = errors.New("refused before dispatch")
	// ErrNotStarted: Request.StartSlot refused the invocation (the caller
	// left, or the daemon is stopping) while it waited to start; nothing
	// ran and no row was written. errors.Is(err, ErrRefused) holds for it.
	ErrNotStarted = fmt.Errorf("%w: not started", ErrRefused)
	// ErrNotFound: the skill asked for is not there (or not in that
	// version); nothing ran.
	ErrNotFound = errors.New("skill not found")
	// ErrAuditIncomplete: the skill ran (its effects stand, its envelope is
	// returned too) but its skill.invoked_completed row could not be made
	// durable; it is retried in the background. Never reported as success.
	ErrAuditIncomplete = errors.New("the invocation ran but its completed audit row is not durable yet")
)

// completedRetries are the waits between the tries of a completed row
// before the caller is told ErrAuditIncomplete.
var completedRetries = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond}

// AuditEmitError is the typed error of spec 000's AuditEmitFailed: the
// row of Stage ("start") could not be written, so the skill was not
// dispatched. errors.Is(err, ErrRefused) holds for it.
type AuditEmitError struct {
	Stage string
	Err   error
}

func (e *AuditEmitError) Error() string {
	return fmt.Sprintf("audit emit failed at stage %s: %v", e.Stage, e.Err)
}
func (e *AuditEmitError) Unwrap() []error { return []error{ErrRefused, e.Err} }

// Outcome is how an invocation ended.
type Outcome string

// The outcomes of DESIGN.md "Contracts → Skill process", typed; the words
// are declared once, in audit, which checks them on every completed row.
const (
	OutcomeSuccess Outcome = audit.OutcomeSuccess
	OutcomeError   Outcome = audit.OutcomeError
	OutcomePanic   Outcome = audit.OutcomePanic
	OutcomeTimeout Outcome = audit.OutcomeTimeout
	OutcomeKilled  Outcome = audit.OutcomeKilled
	// OutcomeCancelled: Request.Cancel was closed while the skill ran.
	OutcomeCancelled Outcome = audit.OutcomeCancelled
	// OutcomeLost closes an invocation whose supervisor died before it
	// could record how it ended (crash reconciliation).
	OutcomeLost Outcome = audit.OutcomeLost
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
	// Tracestate is the caller's W3C tracestate, kept with Traceparent
	// (ignored without it).
	Tracestate string
	// Deadline, when set, shortens effort_minutes; it may not lengthen it.
	Deadline time.Duration
	// RequestID is the caller's id for the request; generated when empty.
	RequestID string
	// SeccompRecorder, when set, runs the skill under the recording form
	// of its seccomp profile (`cyberos seccomp record`).
	SeccompRecorder *sandbox.SyscallRecorder

	// SkillID, when set, must equal the frontmatter name (ErrInvalidSkill);
	// Version, when set, must equal its version (ErrNotFound).
	SkillID, Version string
	// Defaults replace the built-in limits a frontmatter leaves unset (the
	// daemon config's defaults). Nil keeps the built-in ones.
	Defaults *Defaults
	// Ceilings bound the limits a frontmatter may ask for (ErrOverCeiling).
	Ceilings Ceilings
	// OnStarted is called once the started row is durable, before dispatch.
	OnStarted func(Started)
	// OnToolCall is called for every decided tool call (it must not block).
	OnToolCall func(broker.Decided)
	// OnProtocolAbuse is called at the first broker protocol abuse of each
	// kind (it must not block).
	OnProtocolAbuse func(kind string)
	// StartSlot, when set, is called before a cold start to take one of
	// the slots of sandbox creations in progress (the daemon's bound), and
	// its release once the start has returned, whether it started or not.
	// Its error refuses the invocation before any row (ErrNotStarted). A
	// warm sandbox is not created, so it takes no slot.
	StartSlot func() (release func(), err error)
	// Stop, when closed, ends the invocation early through the timeout path
	// (SIGTERM now, SIGKILL after the usual 10% grace, at most StopKillAfter):
	// the daemon's shutdown. The outcome is timeout, with its skill.timeout row.
	Stop <-chan struct{}
	// Cancel, when closed, ends the invocation as Stop does, with the
	// outcome cancelled: the caller gave up on it.
	Cancel <-chan struct{}
}

// Defaults are limits applied where the frontmatter is silent.
type Defaults struct {
	MemoryMB       int64
	PidsMax        int64
	EffortMinutes  int
	SeccompProfile string
	// CPU replaces x-cpu where it is unset: 0 is a value (no quota); a
	// negative CPU keeps the built-in policy.DefaultCPU.
	CPU float64
	// FileSizeMB and NoFile are the sandbox's RLIMIT_FSIZE (MiB) and
	// RLIMIT_NOFILE; 0 keeps the sandbox's defaults.
	FileSizeMB int64
	NoFile     int64
	// RateLimitPerMinute caps an invocation's tool calls per minute; a
	// frontmatter's x-rate-limit-per-minute may lower it, never raise it.
	// MaxBrokerConnections caps its simultaneous broker connections and
	// MaxAuditRows its audit rows (reached: the invocation ends killed).
	// Zero: the built-in Default* (supervisor/broker.go).
	RateLimitPerMinute   int
	MaxBrokerConnections int
	MaxAuditRows         int
}

// Started describes an invocation whose started row is durable.
type Started struct {
	InvocationID string
	SkillID      string
	TenantID     string
	StartedAt    time.Time
}

// StopKillAfter caps the time between SIGTERM and SIGKILL when an
// invocation is stopped (Request.Stop).
const StopKillAfter = 10 * time.Second

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
	TraceID        string              `json:"trace_id"`
	// ProtocolAbuse counts the broker protocol abuse of the invocation by
	// kind (audit.ProtocolAbuseKinds); absent when none.
	ProtocolAbuse map[string]int64 `json:"protocol_abuse,omitempty"`
}

// Auditor takes audit rows and returns once they are durable: the
// auditstore.Store in production; tests wrap it to make a stage fail.
type Auditor interface {
	Emit(ctx context.Context, d audit.Draft) (audit.Row, error)
}

// Reserver is the optional side of an Auditor that holds journal space for
// an invocation's terminal rows from before its started row until its
// completed row is durable (auditstore.Store.Reserve); Auditors without it
// (tests' fakes) reserve nothing.
type Reserver interface {
	Reserve(invocationID string) (release func(), err error)
}

// Supervisor runs invocations on a Runner, auditing each one.
type Supervisor struct {
	Runner sandbox.Runner
	// Warm, when set, hands invocations sandboxes made ahead (the daemon's;
	// a recording run never takes one).
	Warm        *WarmPool
	Audit       Auditor
	Metrics     *telemetry.Metrics
	ProfilesDir string
	StateDir    string
	Log         *slog.Logger
	// AllowDegraded is passed to the runner (macOS rlimit-only mode).
	AllowDegraded bool

	// SocketDir is the private (root, 0700) directory of the broker sockets.
	SocketDir string
	// Tools is the registry the broker dispatches to (tools.Registry()).
	Tools map[policy.Tool]tools.Tool
	// MCP, when set, serves the configured MCP servers' tools to every
	// invocation (the broker judges and audits their calls as native ones).
	MCP ToolSources
	// Memory backs the Memory* tools. When nil, OpenMemory is called for a
	// skill that may use a Memory* tool, until it succeeds (a failure, such
	// as a full disk, is retried by the next such skill, not kept).
	Memory     *memory.Store
	OpenMemory func() (*memory.Store, error)
	memMu      sync.Mutex // guards Memory while OpenMemory may set it
	// AllowLoopbackHTTP lets Http tools reach 127.0.0.0/8 and ::1: runner
	// configuration for tests, never taken from frontmatter.
	AllowLoopbackHTTP bool
	// NoConnectAfter is how long a running skill may go without connecting
	// to its broker before skill.no_connect is recorded (default 60 s).
	NoConnectAfter time.Duration
	// ReservedDirs are host directories the file tools refuse whatever a
	// skill's x-allowed-files says, beside StateDir, SocketDir and
	// ProfilesDir, which are always reserved: the runner's run dir (the
	// shared rootfs skeleton, container state), the binaries' directory,
	// the daemon's skills dir and config dir. The invoked skill's own
	// folder, any skill folder and any SKILL.md are refused as well.
	ReservedDirs []string

	// Tracer makes the skill.invoke span (and hands itself to the broker for
	// the tool-call spans). Nil: no spans.
	Tracer trace.Tracer

	// MinFreeBytes is the free space the state filesystem must have for an
	// invocation to start (0: DefaultMinFreeBytes).
	MinFreeBytes int64
	// LogBudget caps the bytes of kept skill logs (0: DefaultLogBudget).
	LogBudget int64
	logsOnce  sync.Once
	logs      *logStore

	metricsOnce sync.Once

	// MaxTeardowns is how many sandboxes of ended invocations may be
	// destroyed in the background, after their answer, at once; past it (and
	// with 0) a sandbox is destroyed before its invocation answers. Each
	// holds its host id range until it is gone.
	MaxTeardowns int
	// teardowns counts the sandboxes being destroyed in the background;
	// teardownSlots holds one token for each.
	teardowns     sync.WaitGroup
	teardownOnce  sync.Once
	teardownSlots chan struct{}

	// ResponseBudget is the bytes every invocation's tool calls may hold
	// between reading and answering, together (0:
	// broker.DefaultDaemonBudget); each invocation has its own share too.
	ResponseBudget int64
	responseOnce   sync.Once
	responseMem    *broker.Budget

	// clock is time.Now unless a test sets it.
	clock func() time.Time
}

func (s *Supervisor) now() time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return time.Now()
}

// reservedDirs is every directory of the supervisor's own state, by its
// absolute name and, where that differs, the name symlinks resolve it to.
// A skill allowed /var/lib/** would otherwise rewrite the audit store, or
// one allowed /etc/** the seccomp profile every later sandbox is built from
// (TestHostileSupervisorState).
func (s *Supervisor) reservedDirs() []string {
	return withResolved(nil, append([]string{s.StateDir, s.SocketDir, s.ProfilesDir}, s.ReservedDirs...)...)
}

// withResolved appends each non-empty dir to out by its absolute name and,
// where that differs, by the name symlinks resolve it to.
func withResolved(out []string, dirs ...string) []string {
	for _, d := range dirs {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			continue
		}
		out = append(out, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			out = append(out, real)
		}
	}
	return out
}

// policyHash is the HashJSON of the effective policy (defaults applied),
// the one the invocation's enforcer judges by: skill.invoked_started
// carries it as policy_hash.
func policyHash(pol *policy.Policy) (string, error) {
	b, err := json.Marshal(pol)
	if err != nil {
		return "", fmt.Errorf("policy cannot be encoded for its hash: %v", err)
	}
	h, err := audit.HashJSON(b)
	if err != nil {
		return "", fmt.Errorf("policy cannot be canonicalised for its hash: %v", err)
	}
	return h, nil
}

// NewID returns a new ULID string (time-ordered, 26 chars).
func NewID() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }

// checkStateDir makes sure the state directory exists, is writable and has
// the free space running invocations' terminal rows may need; an unusable
// one refuses the invocation before anything runs. It writes nothing: the
// durable write that gates dispatch is the started row itself (Emit returns
// once it is durable, and a failure refuses the invocation as ErrRefused),
// preceded by the in-flight lock and the journal reservation, which create
// files there. A probe file written and fsynced here on every invocation
// only repeated that proof.
func (s *Supervisor) checkStateDir() error {
	if err := os.MkdirAll(filepath.Join(s.StateDir, "logs"), 0o700); err != nil {
		return fmt.Errorf("%w: state dir %s: %v", ErrRefused, s.StateDir, err)
	}
	// EROFS on a read-only (or remounted read-only) filesystem, root or not.
	if err := unix.Access(s.StateDir, unix.W_OK); err != nil {
		return fmt.Errorf("%w: state dir %s is not writable: %v", ErrRefused, s.StateDir, err)
	}
	if free, size, ok := auditstore.FreeSpace(s.StateDir); ok && free < s.minFree(size) {
		return fmt.Errorf("%w: state dir %s has %d KiB free, below the %d KiB kept for the audit rows of running invocations", ErrRefused, s.StateDir, free>>10, s.minFree(size)>>10)
	}
	return nil
}

// DefaultMinFreeBytes is the free space below which no invocation starts
// (Supervisor.MinFreeBytes 0; a sixteenth of a smaller filesystem): what
// running invocations' terminal audit rows may still need once the
// journal's preallocation is used up.
const DefaultMinFreeBytes = 8 << 20

func (s *Supervisor) minFree(fsBytes int64) int64 {
	if s.MinFreeBytes > 0 {
		return s.MinFreeBytes
	}
	return min(DefaultMinFreeBytes, fsBytes/16)
}

// Run performs one invocation, audited as spec 000 §1 says: the
// skill.invoked_started row is durable before the skill is dispatched (if it
// cannot be written nothing runs: ErrAuditStart), and every dispatch that
// started ends in a skill.invoked_completed row, whatever happened. A
// returned error means nothing ran (ErrInvalidSkill, ErrRefused,
// ErrAuditStart); otherwise the Envelope carries the outcome.
func (s *Supervisor) Run(req Request) (Envelope, error) {
	id := NewID()
	h := s.takeHolds(id)
	inv, err := s.prepare(req, id)
	if err != nil {
		h.end()
		return Envelope{}, err
	}
	return s.invoke(inv, h)
}

// invocation is a validated request, ready to audit and dispatch.
type invocation struct {
	pol         *policy.Policy
	enforcer    *policy.Enforcer
	policyHash  string // of pol, for skill.invoked_started
	spec        sandbox.Spec
	containment sandbox.Containment
	ident       sandbox.Identity
	common      audit.Common
	trace       telemetry.TraceContext
	persona     string
	argsHash    string
	deadline    time.Duration
	stdout      *cappedBuffer
	stderr      *tailBuffer
	env         Envelope
	req         Request
	spanCtx     context.Context // carries skill.invoke
	limits      limits
	capHit      atomic.Bool     // the broker reached the audit row cap
	warm        *warmBox        // the warm sandbox claimed, nil for a cold start
	releaseSlot func()          // gives back a cold start's StartSlot; nil without one
	proc        sandbox.Process // the started sandbox, destroyed by teardown
	// running is the started sandbox too, for the broker's Bash tool,
	// which waits for it; brokerUp returns the broker invoke started,
	// which accepts no connection before durable is closed (the started
	// row is durable).
	running  atomic.Pointer[sandbox.Process]
	brokerUp func() (*broker.Broker, error)
	durable  chan struct{}
	holds    *holds // the in-flight lock and reservation, ended by teardown
	// stats gets the sandbox's accounting, read beside the completed row,
	// once dispatch saw the skill end.
	stats chan cgroups.Stats
	// exit is how the skill ended, once dispatch saw it end.
	exit *sandbox.Exit
	// ended is what "invocation ended" says; the teardown writes the
	// line, after the answer (a stalled log sink must not hold it).
	ended      []any
	endedLevel slog.Level // of the "invocation ended" line: Warn for a failure
}

// prepare validates everything that can be refused before any row is
// written: the skill folder, the args, the deadline, the traceparent, what
// the sandbox would enforce, and the state directory. id is the
// invocation's.
func (s *Supervisor) prepare(req Request, id string) (*invocation, error) {
	pol, err := policy.LoadDir(req.SkillDir)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidSkill, req.SkillDir, err)
	}
	if req.SkillID != "" && pol.Name != req.SkillID {
		return nil, fmt.Errorf("%w: skill id %q does not match the frontmatter name %q", ErrInvalidSkill, req.SkillID, pol.Name)
	}
	if req.Version != "" && pol.Version != req.Version {
		return nil, fmt.Errorf("%w: %s version %s (installed: %s)", ErrNotFound, pol.Name, req.Version, pol.Version)
	}
	asked := pol
	pol = applyDefaults(pol, req.Defaults)
	if err := req.Ceilings.check(asked, pol); err != nil {
		return nil, err
	}
	args := req.Args
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	argsHash, err := audit.HashJSON(args)
	if err != nil {
		return nil, fmt.Errorf("%w: args: not one valid JSON value", ErrInvalidRequest)
	}
	deadline := time.Duration(pol.EffortMinutes) * time.Minute
	if req.Deadline < 0 {
		return nil, fmt.Errorf("%w: deadline: must be positive", ErrInvalidRequest)
	}
	if req.Deadline > deadline {
		return nil, fmt.Errorf("%w: deadline: %v is longer than effort_minutes (%d min); it may only shorten it", ErrInvalidRequest, req.Deadline, pol.EffortMinutes)
	}
	if req.Deadline > 0 {
		deadline = req.Deadline
	}
	// Without the caller's traceparent the invocation starts a trace:
	// skill.invoke is its root, no parent is made up.
	trace := telemetry.NewRootTraceContext()
	if req.Traceparent != "" {
		if trace, err = telemetry.ParseTraceparent(req.Traceparent); err != nil {
			return nil, fmt.Errorf("%w: traceparent %q: %v (want 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)", ErrInvalidRequest, req.Traceparent, err)
		}
		trace.State = req.Tracestate
	}
	if req.TenantID != "" && !IsUUID(req.TenantID) {
		return nil, fmt.Errorf("%w: tenant %q: must be a UUID (8-4-4-4-12 hex digits)", ErrInvalidRequest, req.TenantID)
	}
	skillDir, err := filepath.Abs(req.SkillDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSkill, err)
	}
	polHash, err := policyHash(pol)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSkill, err)
	}
	// The skill's own folder is reserved by name too (the file tools also
	// find any skill folder on disk by its SKILL.md).
	inv := &invocation{
		pol:      pol,
		enforcer: policy.NewEnforcer(pol, policy.EnforcerOptions{AllowLoopback: s.AllowLoopbackHTTP, ReservedDirs: withResolved(s.reservedDirs(), skillDir)}),
		persona:  req.Persona,
		argsHash: argsHash,
		deadline: deadline,
		stdout:   &cappedBuffer{max: MaxResultBytes},
		stderr:   &tailBuffer{max: MaxLogBytes},
		req:      req,
		limits:   costLimits(pol, req.Defaults),
	}
	inv.policyHash = polHash
	if f := req.OnToolCall; f != nil {
		// Live tool-call events name the policy that judged them, as
		// replay does from the started row.
		inv.req.OnToolCall = func(d broker.Decided) {
			d.PolicyHash = polHash
			f(d)
		}
	}
	inv.env = Envelope{
		InvocationID: id,
		RequestID:    req.RequestID,
		SkillID:      pol.Name,
		Version:      pol.Version,
		TraceID:      trace.TraceID,
		DeadlineMS:   deadline.Milliseconds(),
	}
	if inv.env.RequestID == "" {
		inv.env.RequestID = NewID()
	}
	inv.trace = trace
	inv.common = audit.Common{
		InvocationID: inv.env.InvocationID,
		RequestID:    inv.env.RequestID,
		SkillID:      pol.Name,
		TenantID:     req.TenantID,
		TraceID:      trace.TraceID,
	}
	inv.spec = sandbox.Spec{
		ID:         inv.env.InvocationID,
		SkillDir:   skillDir,
		Entrypoint: pol.Entrypoint,
		Env: []string{
			wire.EnvSocket + "=" + sandbox.BrokerSockPath,
			wire.EnvSkillID + "=" + pol.Name,
			wire.EnvInvocationID + "=" + inv.env.InvocationID,
			wire.EnvTenantID + "=" + req.TenantID,
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"HOME=/tmp",
			"LANG=C.UTF-8",
		},
		Stdin:          bytes.NewReader(args),
		Stdout:         inv.stdout,
		Stderr:         inv.stderr,
		MemoryMB:       pol.MemoryMB,
		PidsMax:        pol.PidsMax,
		CPU:            pol.CPU,
		ProfilesDir:    s.ProfilesDir,
		SeccompProfile: pol.SeccompProfile,
		AllowDegraded:  s.AllowDegraded,
		Recorder:       req.SeccompRecorder,
		Deadline:       deadline,
	}
	if d := req.Defaults; d != nil {
		inv.spec.FileSizeMB, inv.spec.NoFile = d.FileSizeMB, d.NoFile
	}
	if inv.containment, err = s.Runner.Check(inv.spec); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSkill, err)
	}
	inv.spec.SeccompProfileHash = inv.containment.SeccompProfileHash // Start loads what the started row names
	inv.containment.Egress = tools.EgressMode
	if err := s.checkStateDir(); err != nil {
		return nil, err
	}
	if usesMemory(inv.enforcer) {
		if err := s.openMemory(); err != nil {
			return nil, fmt.Errorf("%w: memory store unavailable: %v", ErrRefused, err)
		}
	}
	return inv, nil
}

// invoke is invoke-with-audit: started row, dispatch (panics recovered),
// timeout row, completed row. Only a failed started row stops it. h are
// the invocation's lock and reservation, which it ends.
func (s *Supervisor) invoke(inv *invocation, h *holds) (envOut Envelope, _ error) {
	ctx := context.Background()
	log := s.logger().With("invocation_id", inv.common.InvocationID, "skill_id", inv.common.SkillID,
		"tenant_id", inv.common.TenantID, "trace_id", inv.common.TraceID)
	h.wait()
	if h.lockErr != nil {
		h.end()
		return Envelope{}, fmt.Errorf("%w: %v", ErrRefused, h.lockErr)
	}
	// From the teardown on, it ends the holds (after the answer, when
	// there is a sandbox to destroy); before that, a return ends them.
	handed := false
	defer func() {
		if !handed {
			h.end()
		}
	}()
	var err error
	// The sandbox's own host identity, taken before the started row (which
	// records it) and the broker socket (which it owns): a warm sandbox's,
	// or one reserved now for a cold start.
	inv.containment.Start = StartCold
	if s.Warm != nil && inv.req.SeccompRecorder == nil {
		var done func()
		inv.warm, done = s.Warm.claim(inv)
		defer done()
	}
	if inv.warm == nil && inv.req.StartSlot != nil {
		release, err := inv.req.StartSlot()
		if err != nil {
			return Envelope{}, fmt.Errorf("%w: waiting to start: %v", ErrNotStarted, err)
		}
		inv.releaseSlot = sync.OnceFunc(release)
		defer inv.releaseSlot()
	}
	if inv.warm != nil {
		inv.spec.ID, inv.ident = inv.warm.w.ID(), inv.warm.ident
		inv.containment.Start = StartWarm
	} else {
		if inv.ident, err = s.Runner.Reserve(inv.spec.ID); err != nil {
			return Envelope{}, fmt.Errorf("%w: %v", ErrRefused, err)
		}
		defer s.Runner.Release(inv.spec.ID)
	}
	inv.ident.Describe(&inv.containment)
	// The sandbox is destroyed, and the holds ended, once the completed
	// row is durable.
	inv.holds, handed = h, true
	defer s.teardown(inv, log)

	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.Attrs(attribute.String("skill_id", inv.common.SkillID), attribute.String("invocation_id", inv.common.InvocationID),
			attribute.String("tenant_id", inv.common.TenantID), attribute.String("skill_version", inv.pol.Version))...)}
	parent := telemetry.ContextWithRemoteParent(ctx, inv.trace)
	if inv.trace.ParentID == "" { // a root, in the trace its rows name
		parent = telemetry.ContextWithRootTraceID(ctx, inv.trace.TraceID)
		opts = append(opts, trace.WithNewRoot())
	}
	spanCtx, span := s.tracer().Start(parent, "skill.invoke", opts...)
	inv.spanCtx = spanCtx
	if err := h.reserveErr; err != nil {
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageStart).Inc()
		log.Error("audit: no journal space reserved for the terminal rows; skill not dispatched", "err", err)
		span.SetStatus(codes.Error, "audit space not reserved")
		span.End()
		return Envelope{}, &AuditEmitError{Stage: "reserve", Err: err}
	}
	// The broker starts while the started row is made durable; it reads
	// no call before the row is (and no process of the sandbox runs before
	// dispatch activates or starts it, after the row).
	inv.durable = make(chan struct{})
	inv.brokerUp = s.startBrokerAsync(inv, log)
	started := audit.InvokedStartedPolicy(inv.common, inv.pol.Version, inv.persona, inv.argsHash, inv.policyHash, inv.containment)
	startedAt := s.now()
	if _, err := s.emitTimed(ctx, telemetry.StageStart, started); err != nil {
		if brk, berr := inv.brokerUp(); berr == nil {
			_ = brk.Close()
		}
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageStart).Inc()
		log.Error("audit: skill.invoked_started not written; skill not dispatched", "err", err)
		span.SetStatus(codes.Error, "audit start row not written")
		span.End()
		return Envelope{}, &AuditEmitError{Stage: "start", Err: err}
	}
	close(inv.durable)
	if inv.req.OnStarted != nil {
		inv.req.OnStarted(Started{InvocationID: inv.common.InvocationID, SkillID: inv.common.SkillID, TenantID: inv.common.TenantID, StartedAt: startedAt})
	}
	defer func() {
		span.SetAttributes(telemetry.Attrs(attribute.String("outcome", string(envOut.Outcome)), attribute.Int64("duration_ms", envOut.DurationMS))...)
		if envOut.Outcome != OutcomeSuccess {
			span.SetStatus(codes.Error, string(envOut.Outcome))
		}
		span.End()
	}()
	s.metrics().InvocationsRunning.Inc()
	defer s.metrics().InvocationsRunning.Dec()

	t0 := s.now()
	env, auditMsg := s.dispatchRecovered(inv, log)
	if brk, err := inv.brokerUp(); err == nil {
		_ = brk.Close() // closed by dispatch unless it panicked first
	}
	env.DurationMS = s.now().Sub(t0).Milliseconds()
	if inv.exit != nil {
		inv.ended = []any{"outcome", env.Outcome, "exit_code", inv.exit.Code, "signal", signalName(inv.exit.Signal),
			"duration", time.Duration(env.DurationMS) * time.Millisecond}
		if env.Outcome != OutcomeSuccess {
			// A failure is a warning that says why: the envelope's error
			// (with the stderr tail) and the audited reason.
			inv.endedLevel = slog.LevelWarn
			inv.ended = append(inv.ended, "error", env.ErrorMessage, "reason", auditMsg)
		}
		if brk, err := inv.brokerUp(); err == nil {
			st := brk.Stats() // final: the broker is closed
			inv.ended = append(inv.ended, "tool_calls", st.ToolCalls, "denied", st.Denied)
		}
	}

	if env.Outcome == OutcomeTimeout {
		if _, err := s.Audit.Emit(ctx, audit.Timeout(inv.common, env.DeadlineMS, env.SignalSent)); err != nil {
			log.Error("audit: skill.timeout not written", "err", err)
		}
	}
	completed := audit.InvokedCompletedAbuse(inv.common, string(env.Outcome), env.DurationMS, env.ResultHash, auditMsg, env.ProtocolAbuse)
	var incomplete error
	err = s.emitCompleted(ctx, completed)
	if inv.stats != nil {
		env.Stats = <-inv.stats
	}
	if err != nil {
		// sev-1: the skill's effects stand (they cannot be reversed), and
		// the caller is told the record is not durable: never a plain
		// success. The row is retried in the background; if this process
		// ends first, the next start closes the invocation as lost.
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageCompleted).Inc()
		log.Error("audit: skill.invoked_completed not written; sev-1, effects not reversed", "severity", "sev-1", "err", err)
		go s.retryCompleted(completed, log, h.keepReservation())
		incomplete = fmt.Errorf("%w: invocation %s: %v", ErrAuditIncomplete, inv.common.InvocationID, err)
	}
	s.metrics().InvokedTotal.WithLabelValues(inv.common.SkillID, string(env.Outcome)).Inc()
	s.metrics().InvokedDuration.WithLabelValues(inv.common.SkillID).Observe(time.Duration(env.DurationMS * int64(time.Millisecond)).Seconds())
	envOut = env
	return env, incomplete
}

// emitCompleted writes the completed row, trying again after each of
// completedRetries: a full disk may clear as logs are cut.
func (s *Supervisor) emitCompleted(ctx context.Context, d audit.Draft) error {
	_, err := s.emitTimed(ctx, telemetry.StageCompleted, d)
	for _, wait := range completedRetries {
		if err == nil {
			break
		}
		time.Sleep(wait)
		_, err = s.Audit.Emit(ctx, d)
	}
	return err
}

// emitTimed writes an invocation row and records how long it took to be
// durable (cyberos_audit_emit_duration_seconds, the spec's 50 ms p95).
func (s *Supervisor) emitTimed(ctx context.Context, stage string, d audit.Draft) (audit.Row, error) {
	t0 := time.Now()
	row, err := s.Audit.Emit(ctx, d)
	s.metrics().AuditEmitDuration.WithLabelValues(stage).Observe(time.Since(t0).Seconds())
	return row, err
}

// retryCompleted keeps trying a completed row that could not be written,
// every few seconds, for as long as this process lives; the row's reserved
// space is released once it lands.
func (s *Supervisor) retryCompleted(d audit.Draft, log *slog.Logger, release func()) {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		time.Sleep(wait)
		if _, err := s.Audit.Emit(context.Background(), d); err == nil {
			release()
			log.Warn("audit: skill.invoked_completed written late")
			return
		}
	}
}

// dispatchRecovered runs the sandbox; a panic anywhere in our dispatch path
// becomes the outcome panic instead of an unterminated started row. It
// returns the envelope and the error message fit for the audit row (never
// the skill's stderr, which may echo its args).
func (s *Supervisor) dispatchRecovered(inv *invocation, log *slog.Logger) (env Envelope, auditMsg string) {
	env = inv.env
	defer func() {
		if r := recover(); r != nil {
			log.Error("supervisor panic during dispatch", "panic", r, "stack", string(debug.Stack()))
			env.Outcome, env.Result, env.ResultHash = OutcomePanic, nil, ""
			env.ErrorMessage = fmt.Sprintf("supervisor panic: %v", r)
			auditMsg = env.ErrorMessage
		}
	}()
	return s.dispatch(inv, log)
}

func (s *Supervisor) dispatch(inv *invocation, log *slog.Logger) (Envelope, string) {
	env := inv.env
	deadline := inv.deadline
	// The broker exists before the skill does: its socket is bind-mounted
	// into the sandbox. Tool calls that need the sandbox (Bash) wait for it.
	brk, err := inv.brokerUp()
	if err != nil {
		env.Outcome = OutcomeError
		env.ErrorMessage = "broker did not start: " + err.Error()
		log.Error("broker start", "err", err)
		return env, "broker did not start"
	}
	defer func() {
		if cerr := brk.Close(); cerr != nil {
			log.Error("broker close", "err", cerr)
		}
	}()
	inv.spec.BrokerSocket = brk.Path()
	var proc sandbox.Process
	var hung bool
	if inv.warm != nil {
		proc, err = inv.warm.w.Activate(sandbox.Activation{Env: inv.spec.Env, Stdin: inv.spec.Stdin, Stdout: inv.spec.Stdout, Stderr: inv.spec.Stderr, Deadline: inv.spec.Deadline})
	} else {
		proc, err, hung = s.startWithin(inv.spec, deadline, log)
	}
	if inv.releaseSlot != nil {
		inv.releaseSlot()
	}
	if hung {
		// startWithin kills whatever the start returns later.
		env.Outcome = OutcomeTimeout
		env.SignalSent = "SIGKILL"
		env.ErrorMessage = fmt.Sprintf("deadline of %v reached while the sandbox was starting", deadline)
		return env, env.ErrorMessage
	}
	if err != nil {
		env.Outcome = OutcomeError
		env.ErrorMessage = "sandbox did not start: " + err.Error()
		log.Error("sandbox start", "err", err)
		return env, "sandbox did not start"
	}
	inv.running.Store(&proc)
	inv.proc = proc
	if inv.capHit.Load() { // reached while the sandbox was starting
		_ = proc.KillAll()
	}
	env.Containment = proc.Containment()
	env.Containment.Egress = tools.EgressMode
	env.Containment.Start = inv.containment.Start
	if proc.Containment().Start == StartCold && inv.warm != nil {
		// Its init died between the claim and the activation: the runner
		// made it again, cold, with the identity the started row records.
		env.Containment.Start = StartCold
		log.Warn("warm sandbox's init died after its claim: it was made again, cold")
	}
	env.SandboxStartMS = float64(proc.StartLatency().Microseconds()) / 1000
	s.metrics().SandboxStart.Observe(proc.StartLatency().Seconds())

	var termSent, killSent, stopSent, cancelSent atomic.Bool
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
	var timersMu sync.Mutex
	waited := make(chan struct{})
	if inv.req.Stop != nil || inv.req.Cancel != nil {
		go func() {
			cancelled := false
			select {
			case <-inv.req.Stop:
			case <-inv.req.Cancel:
				cancelled = true
			case <-waited:
				return
			}
			timersMu.Lock()
			defer timersMu.Unlock()
			select {
			case <-waited:
				return
			default:
			}
			if cancelled {
				cancelSent.Store(true)
				log.Info("invocation cancelled: ending it through the deadline path")
			} else {
				stopSent.Store(true)
				log.Warn("supervisor stopping: ending the invocation through the timeout path")
			}
			termTimer.Reset(0)
			killTimer.Reset(min(deadline-deadline*termNum/termDen, StopKillAfter))
		}()
	}
	exit, werr := proc.Wait()
	timersMu.Lock()
	close(waited)
	termTimer.Stop()
	killTimer.Stop()
	timersMu.Unlock()
	// The outcome needs the OOM kills; the rest of the accounting only
	// fills the envelope, and is read while the completed row becomes
	// durable (invoke waits for it after the row).
	oomKills, oerr := proc.OOMKills()
	if oerr != nil {
		log.Warn("cgroup oom kills", "err", oerr)
	}
	inv.stats = make(chan cgroups.Stats, 1)
	go func() {
		st, serr := proc.Stats()
		if serr != nil {
			log.Warn("cgroup stats", "err", serr)
		}
		inv.stats <- st
	}()
	env.ProtocolAbuse = brk.ProtocolAbuse()
	env.LogTail = inv.stderr.Tail(LogTailBytes)
	s.writeLog(env.InvocationID, inv.stderr.Bytes(), log)

	v := classify(ending{
		waitErr: werr, exit: exit, capHit: inv.capHit.Load(),
		termSent: termSent.Load(), killSent: killSent.Load(), stopSent: stopSent.Load(), cancelSent: cancelSent.Load(),
		oomKills: oomKills, stdoutOverflow: inv.stdout.overflow, stdout: inv.stdout.Bytes(), logTail: env.LogTail,
		deadline: deadline, maxAuditRows: inv.limits.maxAuditRows, memoryMB: inv.pol.MemoryMB,
	})
	env.Outcome = v.outcome
	if v.signalSent != "" {
		env.SignalSent = v.signalSent
	}
	if v.outcome == OutcomeSuccess {
		env.Result, env.ResultHash = v.result, v.resultHash
	} else {
		env.ErrorMessage = v.errorMessage
	}
	inv.exit = &exit
	return env, v.auditMsg
}

func usesMemory(e *policy.Enforcer) bool {
	for _, t := range e.Tools() {
		if t == policy.ToolMemoryRead || t == policy.ToolMemorySearch || t == policy.ToolMemoryEmit {
			return true
		}
	}
	return false
}

func (s *Supervisor) openMemory() error {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	if s.Memory == nil && s.OpenMemory != nil {
		m, err := s.OpenMemory()
		if err != nil {
			return err
		}
		s.Memory = m
	}
	return nil
}

// memory returns the memory store (nil while it is not open).
func (s *Supervisor) memory() *memory.Store {
	s.memMu.Lock()
	defer s.memMu.Unlock()
	return s.Memory
}

func (s *Supervisor) metrics() *telemetry.Metrics {
	s.metricsOnce.Do(func() {
		if s.Metrics == nil {
			s.Metrics = telemetry.NewMetrics()
		}
	})
	return s.Metrics
}

// teardown destroys the invocation's sandbox (and a warm one it claimed
// but never activated) and ends its holds. Once Wait returned, the
// sandbox's init has killed and reaped every other process of it (but one
// the kernel keeps past init's bound), and the completed row is durable:
// what is left (the holds, init's reap, cgroups, container state, the id
// range) need not delay the answer, so it goes on in the background, at
// most MaxTeardowns at once; past that, in line. Drain waits for it.
func (s *Supervisor) teardown(inv *invocation, log *slog.Logger) {
	proc, warm, h := inv.proc, inv.warm, inv.holds
	if proc == nil && warm == nil {
		h.end()
		return
	}
	work := func() {
		defer func() {
			if r := recover(); r != nil {
				log.Error("supervisor panic during sandbox cleanup", "panic", r, "stack", string(debug.Stack()))
			}
		}()
		if inv.ended != nil {
			log.Log(context.Background(), inv.endedLevel, "invocation ended", inv.ended...)
		}
		h.end()
		if proc != nil {
			if err := proc.Close(); err != nil {
				log.Error("sandbox cleanup", "err", err)
			}
		}
		if warm != nil {
			warm.destroy() // a no-op after the Process's own Close
		}
	}
	s.teardownOnce.Do(func() { s.teardownSlots = make(chan struct{}, max(0, s.MaxTeardowns)) })
	select {
	case s.teardownSlots <- struct{}{}:
		s.teardowns.Add(1)
		go func() {
			defer func() { <-s.teardownSlots; s.teardowns.Done() }()
			work()
		}()
	default:
		work()
	}
}

// Drain waits until every sandbox of an ended invocation is destroyed.
// Whoever ends the supervisor calls it after the last invocation returned.
func (s *Supervisor) Drain() { s.teardowns.Wait() }

// startWithin starts the sandbox, giving up at the deadline: a start that
// hangs ends the invocation as a timeout, and whatever the start returns
// later is killed and cleaned up in the background.
func (s *Supervisor) startWithin(spec sandbox.Spec, deadline time.Duration, log *slog.Logger) (sandbox.Process, error, bool) {
	type started struct {
		p        sandbox.Process
		err      error
		panicked any
	}
	ch := make(chan started, 1)
	go func() {
		// A panic here is re-raised in the caller's goroutine, where the
		// dispatch path recovers it into the outcome panic.
		defer func() {
			if r := recover(); r != nil {
				ch <- started{panicked: r}
			}
		}()
		p, err := s.Runner.Start(spec)
		ch <- started{p: p, err: err}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case st := <-ch:
		if st.panicked != nil {
			panic(st.panicked)
		}
		return st.p, st.err, false
	case <-timer.C:
		log.Error("sandbox start hung past the deadline")
		go func() {
			if st := <-ch; st.p != nil {
				_ = st.p.KillAll()
				_, _ = st.p.Wait()
				_ = st.p.Close()
			}
		}()
		return nil, nil, true
	}
}

func (s *Supervisor) tracer() trace.Tracer {
	if s.Tracer == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return s.Tracer
}

// applyDefaults returns pol with d's limits where the frontmatter set none
// (a copy: a Policy is immutable once parsed).
func applyDefaults(pol *policy.Policy, d *Defaults) *policy.Policy {
	if d == nil {
		return pol
	}
	c := *pol
	if !pol.Given("x-memory-mb") && d.MemoryMB > 0 {
		c.MemoryMB = d.MemoryMB
	}
	if !pol.Given("x-pids-max") && d.PidsMax > 0 {
		c.PidsMax = d.PidsMax
	}
	if !pol.Given("effort_minutes") && d.EffortMinutes > 0 {
		c.EffortMinutes = d.EffortMinutes
	}
	if !pol.Given("x-seccomp-profile") && d.SeccompProfile != "" {
		c.SeccompProfile = d.SeccompProfile
	}
	if !pol.Given("x-cpu") && d.CPU >= 0 {
		c.CPU = d.CPU
	}
	// The operator's quota is a ceiling: a frontmatter may lower it, never
	// raise it or ask for none (x-cpu: 0).
	if d.CPU > 0 && (c.CPU == 0 || c.CPU > d.CPU) {
		c.CPU = d.CPU
	}
	return &c
}

func (s *Supervisor) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// writeLog keeps the skill's stderr (capped) as the invocation's log.
// The logs share a budget (LogBudget), oldest removed first.
func (s *Supervisor) writeLog(id string, b []byte, log *slog.Logger) {
	s.logsOnce.Do(func() { s.logs = newLogStore(filepath.Join(s.StateDir, "logs"), s.LogBudget) })
	if err := s.logs.keep(id, b); err != nil {
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
	syscall.SIGXFSZ: "SIGXFSZ", // a write past RLIMIT_FSIZE
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

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// IsUUID reports whether s is a UUID in its canonical text form, the
// form a tenant id takes (the spec's Uuid).
func IsUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
