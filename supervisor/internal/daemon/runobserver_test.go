package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"cyberos.dev/supervisor"
)

// TestInvocationContext: an invocation's context outlives its request's
// (a caller that disconnects cancels only through the switch, which
// cancel_on_disconnect fires), ends with the cause context.Canceled when
// the switch fires (outcome cancelled) and with supervisor.ErrStopping
// when the daemon stops (outcome timeout).
func TestInvocationContext(t *testing.T) {
	done := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(100 * time.Millisecond): // absence of an event: a bounded look
			return false
		}
	}
	wait := func(ctx context.Context) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the invocation's context did not end")
		}
	}

	d := &Daemon{stop: make(chan struct{})}
	req, disconnect := context.WithCancel(t.Context())
	sw := (&cancels{}).open()
	ctx, end := d.invocationContext(req, sw)
	defer end()
	disconnect()
	if done(ctx) {
		t.Fatal("the request's end (a disconnect) ended the invocation's context")
	}
	sw.fire()
	wait(ctx)
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) || errors.Is(cause, supervisor.ErrStopping) {
		t.Errorf("cause %v after the switch fired, want context.Canceled", cause)
	}

	ctx2, end2 := d.invocationContext(t.Context(), (&cancels{}).open())
	defer end2()
	close(d.stop)
	wait(ctx2)
	if cause := context.Cause(ctx2); !errors.Is(cause, supervisor.ErrStopping) {
		t.Errorf("cause %v after the daemon stopped, want supervisor.ErrStopping", cause)
	}
}
