// Package supervisor runs one skill invocation end to end: load the policy,
// start the sandbox, enforce the deadline, classify how it ended and build the
// envelope the caller gets back.
//
// Supervisor.Run takes one invocation through its phases, one file each and
// in this order: prepare.go, admit.go, start.go, wait.go, record.go,
// teardown.go; invocation.go holds the invocation's type and Run.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/cgroups"
	"cyberos.dev/memory"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/trace"
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
	// OutcomeCancelled: Run's context ended (not with ErrStopping) while
	// the skill ran.
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
	// Observer, when set, is told what the invocation does as it happens.
	Observer Observer
	// StartSlot, when set, is called before a cold start to take one of
	// the slots of sandbox creations in progress (the daemon's bound), and
	// its release once the start has returned, whether it started or not.
	// Its error refuses the invocation before any row (ErrNotStarted). A
	// warm sandbox is not created, so it takes no slot. It is a hook of its
	// own, not an Observer method: it decides (it may refuse the invocation
	// and holds a resource until it is released), where an observer only
	// watches and must not block.
	StartSlot func() (release func(), err error)
}

// Observer is told what an invocation does, as it happens. Started is
// called on Run's goroutine, before dispatch; ToolCall and ProtocolAbuse on
// the broker's, and they must not block. Embed NoopObserver to implement
// only some.
type Observer interface {
	// Started: the started row is durable; the skill is dispatched next.
	Started(Started)
	// ToolCall: a tool call was decided (allowed or denied); its
	// PolicyHash names the policy that judged it.
	ToolCall(broker.Decided)
	// ProtocolAbuse: the first broker protocol abuse of kind.
	ProtocolAbuse(kind string)
}

// NoopObserver is an Observer that does nothing, to embed.
type NoopObserver struct{}

func (NoopObserver) Started(Started)         {}
func (NoopObserver) ToolCall(broker.Decided) {}
func (NoopObserver) ProtocolAbuse(string)    {}

// ErrStopping is the cause (context.CancelCauseFunc) a caller gives Run's
// context when the supervisor itself is stopping (the daemon's shutdown):
// the invocation then ends through the timeout path with the outcome
// timeout and its skill.timeout row. Any other end of the context is the
// caller giving up: the outcome is cancelled.
var ErrStopping = errors.New("the supervisor is stopping")

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
	// Zero: the built-in Default* (prepare.go).
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
// invocation is stopped or cancelled (Run's context ends).
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
	// Sources serve tools besides the native ones to every invocation, e.g.
	// mcpclient.Pool, the configured MCP servers' (the broker judges and
	// audits their calls as native ones).
	Sources []ToolSources
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

// NewID returns a new ULID string (time-ordered, 26 chars).
func NewID() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }

// IsUUID reports whether s is a UUID in its canonical text form, the
// form a tenant id takes (the spec's Uuid).
func IsUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
