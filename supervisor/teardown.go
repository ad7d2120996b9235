package supervisor

import (
	"runtime/debug"

	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// teardown gives back what the invocation took, whichever phase it reached:
// it ends the span, destroys the sandbox and ends the holds (in the
// background once the answer is ready), releases a cold start's host
// identity and start slot, and ends a warm claim (its shape refills).
func (inv *invocation) teardown() {
	s := inv.s
	if inv.dispatched {
		s.metrics().InvocationsRunning.Dec()
	}
	if inv.span != nil {
		if inv.dispatched {
			env := inv.env
			inv.span.SetAttributes(telemetry.Attrs(attribute.String("outcome", string(env.Outcome)), attribute.Int64("duration_ms", env.DurationMS))...)
			if env.Outcome != OutcomeSuccess {
				inv.span.SetStatus(codes.Error, string(env.Outcome))
			}
		}
		inv.span.End()
	}
	s.destroy(inv)
	if inv.reserved {
		s.Runner.Release(inv.spec.ID)
	}
	if inv.releaseSlot != nil {
		inv.releaseSlot()
	}
	if inv.warmDone != nil {
		inv.warmDone()
	}
}

// destroy destroys the invocation's sandbox (and a warm one it claimed
// but never activated) and ends its holds. Once Wait returned, the
// sandbox's init has killed and reaped every other process of it (but one
// the kernel keeps past init's bound), and the completed row is durable:
// what is left (the holds, init's reap, cgroups, container state, the id
// range) need not delay the answer, so it goes on in the background, at
// most MaxTeardowns at once; past that, in line. Drain waits for it.
func (s *Supervisor) destroy(inv *invocation) {
	proc, warm, h, log := inv.proc, inv.warm, inv.holds, inv.log
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
			log.Log(inv.workCtx(), inv.endedLevel, "invocation ended", inv.ended...)
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
