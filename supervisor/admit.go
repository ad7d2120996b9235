package supervisor

import (
	"fmt"
	"sync"

	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// admit takes what the invocation runs with, or refuses it before any row:
// its in-flight lock, a warm sandbox or else a start slot and a host
// identity for a cold one, and the journal space of its terminal rows. It
// opens the skill.invoke span. What it takes, teardown gives back.
func (inv *invocation) admit() error {
	s := inv.s
	h := inv.holds
	h.wait()
	if h.lockErr != nil {
		return fmt.Errorf("%w: %w", ErrRefused, h.lockErr)
	}
	// The sandbox's own host identity, taken before the started row (which
	// records it) and the broker socket (which it owns): a warm sandbox's,
	// or one reserved now for a cold start.
	inv.containment.Start = StartCold
	if s.Warm != nil && inv.req.SeccompRecorder == nil {
		var err error
		inv.warm, inv.warmDone, err = s.Warm.claim(inv)
		if err != nil {
			return fmt.Errorf("%w: waiting for a warm sandbox: %w", ErrNotStarted, err)
		}
	}
	if inv.warm == nil && inv.req.StartSlot != nil {
		release, err := inv.req.StartSlot()
		if err != nil {
			return fmt.Errorf("%w: waiting to start: %w", ErrNotStarted, err)
		}
		inv.releaseSlot = sync.OnceFunc(release)
	}
	if inv.warm != nil {
		inv.spec.ID, inv.ident = inv.warm.w.ID(), inv.warm.ident
		inv.containment.Start = StartWarm
	} else {
		var err error
		if inv.ident, err = s.Runner.Reserve(inv.spec.ID); err != nil {
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
		inv.reserved = true
	}
	inv.ident.Describe(&inv.containment)

	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(telemetry.Attrs(attribute.String("skill_id", inv.common.SkillID), attribute.String("invocation_id", inv.common.InvocationID),
			attribute.String("tenant_id", inv.common.TenantID), attribute.String("skill_version", inv.pol.Version))...)}
	ctx := inv.workCtx()
	parent := telemetry.ContextWithRemoteParent(ctx, inv.trace)
	if inv.trace.ParentID == "" { // a root, in the trace its rows name
		parent = telemetry.ContextWithRootTraceID(ctx, inv.trace.TraceID)
		opts = append(opts, trace.WithNewRoot())
	}
	inv.spanCtx, inv.span = s.tracer().Start(parent, "skill.invoke", opts...)
	if err := h.reserveErr; err != nil {
		s.metrics().AuditEmitFailures.WithLabelValues(telemetry.StageStart).Inc()
		inv.log.Error("audit: no journal space reserved for the terminal rows; skill not dispatched", "err", err)
		inv.span.SetStatus(codes.Error, "audit space not reserved")
		return &AuditEmitError{Stage: "reserve", Err: err}
	}
	return nil
}
