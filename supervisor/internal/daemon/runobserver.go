package daemon

import (
	"context"

	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
)

// invokeObserver is what the daemon watches of one invocation it runs: the
// start names its cancel switch and idempotency claim and goes to the
// event hub, as do its tool calls and protocol abuse.
type invokeObserver struct {
	d         *Daemon
	cancel    *cancelSwitch
	cl        claim
	requestID string
	// id is the invocation's, once started ("" if it never started).
	id string
}

func (o *invokeObserver) Started(s supervisor.Started) {
	o.id = s.InvocationID
	o.d.cancels.name(o.cancel, o.id)
	if o.cl.own {
		o.d.requests.started(o.cl.key, s.InvocationID)
	}
	o.d.hub.startedAs(s, o.requestID)
}

func (o *invokeObserver) ToolCall(ev broker.Decided) { o.d.hub.decided(ev) }

func (o *invokeObserver) ProtocolAbuse(kind string) { o.d.hub.protocolAbuse(o.id, kind) }

// invocationContext is the context an invocation runs under: parent's
// values, not its cancellation (a caller that disconnects cancels only
// with cancel_on_disconnect, which fires the switch). It ends once the
// switch fires (outcome cancelled) or the daemon stops (cause
// supervisor.ErrStopping: outcome timeout). end releases it.
func (d *Daemon) invocationContext(parent context.Context, s *cancelSwitch) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	go func() {
		select {
		case <-d.stop:
			cancel(supervisor.ErrStopping)
		case <-s.ch:
			cancel(context.Canceled)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}
