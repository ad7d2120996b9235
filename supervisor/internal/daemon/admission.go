package daemon

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// errStopping: the daemon's shutdown ended a wait for a start slot.
var errStopping = errors.New("the supervisor is shutting down")

// startGate bounds the sandbox creations in progress. A creation is
// CPU-bound, so beyond a few per core they only slow each other down and
// every caller waits longer: through the daemon, more invocations at once
// gave fewer per second. The other admitted invocations wait in line, in
// order of arrival.
type startGate chan struct{}

func newStartGate(n int) startGate { return make(startGate, n) }

// enter waits for a slot. The returned leave frees it and may be called
// more than once. A caller whose request ends (it gave up) or whose wait
// the shutdown ends leaves the line with the reason, holding no slot.
func (g startGate) enter(ctx context.Context, stop <-chan struct{}) (leave func(), err error) {
	select {
	case g <- struct{}{}:
	default:
		select {
		case g <- struct{}{}:
		case <-ctx.Done():
			return func() {}, ctx.Err()
		case <-stop:
			return func() {}, errStopping
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-g }) }, nil
}

// A burst of invocations grows the Go heap, and the runtime returns the
// freed pages to the OS only gradually: the daemon's RSS stayed near its
// peak minutes after a burst. So once a burst is over (no more than a
// quarter of its peak still admitted, scavengeDelay later) the daemon
// collects and hands the free pages back at once. A peak below burstMin is
// not worth a forced collection.
const (
	burstMin      = 16
	scavengeDelay = 2 * time.Second
)

// scavenger tracks the peak of admitted invocations since the last
// scavenge and runs one after a burst.
type scavenger struct {
	peak    atomic.Int64
	mu      sync.Mutex
	pending bool
	// free hands the memory back (debug.FreeOSMemory; tests count calls).
	free func()
	// delay is scavengeDelay unless a test shortens it.
	delay time.Duration
}

func newScavenger() *scavenger {
	return &scavenger{free: debug.FreeOSMemory, delay: scavengeDelay}
}

// admitted records that n invocations are now admitted.
func (s *scavenger) admitted(n int64) {
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// over reports whether a burst has ended with n still admitted.
func (s *scavenger) over(n int64) bool {
	p := s.peak.Load()
	return p >= burstMin && n <= p/4
}

// ended records that an invocation ended with n still admitted; current
// reads the count again when the scavenge is due.
func (s *scavenger) ended(n int64, current func() int64) {
	if !s.over(n) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending {
		return
	}
	s.pending = true
	time.AfterFunc(s.delay, func() {
		s.mu.Lock()
		s.pending = false
		s.mu.Unlock()
		n := current()
		if !s.over(n) { // another burst began
			return
		}
		s.peak.Store(n)
		s.free()
	})
}
