package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
	"cyberos.dev/wire"
)

// prepare validates everything that can be refused before any row is
// written: the skill folder, the args, the deadline, the traceparent, what
// the sandbox would enforce, and the state directory. id is the
// invocation's; ctx is Run's.
func (s *Supervisor) prepare(ctx context.Context, req Request, id string) (*invocation, error) {
	pol, err := policy.LoadDir(req.SkillDir)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidSkill, req.SkillDir, err)
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
			return nil, fmt.Errorf("%w: traceparent %q: %w (want 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)", ErrInvalidRequest, req.Traceparent, err)
		}
		trace.State = req.Tracestate
	}
	if req.TenantID != "" && !IsUUID(req.TenantID) {
		return nil, fmt.Errorf("%w: tenant %q: must be a UUID (8-4-4-4-12 hex digits)", ErrInvalidRequest, req.TenantID)
	}
	skillDir, err := filepath.Abs(req.SkillDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSkill, err)
	}
	polHash, err := policyHash(pol)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSkill, err)
	}
	// The skill's own folder is reserved by name too (the file tools also
	// find any skill folder on disk by its SKILL.md).
	inv := &invocation{
		s:        s,
		ctx:      ctx,
		obs:      req.Observer,
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
	if inv.obs == nil {
		inv.obs = NoopObserver{}
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
	inv.log = s.logger().With("invocation_id", inv.common.InvocationID, "skill_id", inv.common.SkillID,
		"tenant_id", inv.common.TenantID, "trace_id", inv.common.TraceID)
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
		return nil, fmt.Errorf("%w: %w", ErrInvalidSkill, err)
	}
	inv.spec.SeccompProfileHash = inv.containment.SeccompProfileHash // Start loads what the started row names
	inv.containment.Egress = tools.EgressMode
	if err := s.checkStateDir(); err != nil {
		return nil, err
	}
	if usesMemory(inv.enforcer) {
		if err := s.openMemory(); err != nil {
			return nil, fmt.Errorf("%w: memory store unavailable: %w", ErrRefused, err)
		}
	}
	return inv, nil
}

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
		return fmt.Errorf("%w: state dir %s: %w", ErrRefused, s.StateDir, err)
	}
	// EROFS on a read-only (or remounted read-only) filesystem, root or not.
	if err := unix.Access(s.StateDir, unix.W_OK); err != nil {
		return fmt.Errorf("%w: state dir %s is not writable: %w", ErrRefused, s.StateDir, err)
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
		return "", fmt.Errorf("policy cannot be encoded for its hash: %w", err)
	}
	policyHashes.Lock()
	h, ok := policyHashes.m[string(b)]
	policyHashes.Unlock()
	if ok {
		return h, nil
	}
	h, err = audit.HashJSON(b)
	if err != nil {
		return "", fmt.Errorf("policy cannot be canonicalised for its hash: %w", err)
	}
	policyHashes.Lock()
	if len(policyHashes.m) >= maxPolicyHashes {
		clear(policyHashes.m)
	}
	policyHashes.m[string(b)] = h
	policyHashes.Unlock()
	return h, nil
}

// policyHashes remembers policyHash by the policy's JSON encoding, of
// which the hash is a function: every invocation of a skill hashes the
// same policy again, and its canonical form is most of that work. Emptied
// when it holds maxPolicyHashes.
var policyHashes = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

const maxPolicyHashes = 256

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

// Built-in per-invocation bounds on what one skill costs the supervisor.
const (
	DefaultRateLimitPerMinute   = 600
	DefaultMaxBrokerConnections = 16
	DefaultMaxAuditRows         = 1000
)

// invocationRows are the rows of an invocation the supervisor writes
// itself (started, timeout, completed), counted against MaxAuditRows.
const invocationRows = 3

// limits are an invocation's bounds on its cost to the supervisor.
type limits struct {
	ratePerMinute, maxConns, maxAuditRows int
}

// costLimits resolves the bounds: the operator's defaults (or the built-in
// ones), the rate lowered by the frontmatter's.
func costLimits(pol *policy.Policy, d *Defaults) limits {
	l := limits{DefaultRateLimitPerMinute, DefaultMaxBrokerConnections, DefaultMaxAuditRows}
	if d != nil {
		for _, v := range []struct {
			dst *int
			src int
		}{{&l.ratePerMinute, d.RateLimitPerMinute}, {&l.maxConns, d.MaxBrokerConnections}, {&l.maxAuditRows, d.MaxAuditRows}} {
			if v.src > 0 {
				*v.dst = v.src
			}
		}
	}
	if pol.RateLimitPerMinute > 0 && pol.RateLimitPerMinute < l.ratePerMinute {
		l.ratePerMinute = pol.RateLimitPerMinute
	}
	return l
}
