package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound what one tenant takes of the store on this host, so that a
// tenant's heavy calls cannot stall another tenant's: the store's
// connections and CPU are shared by every tenant of the host.
type Limits struct {
	// TenantConcurrency is how many calls of one tenant are in the store at
	// once; more wait for a slot, up to StatementTimeout.
	TenantConcurrency int
	// StatementTimeout bounds one call's time in the store (PostgreSQL's
	// statement_timeout, a deadline that interrupts SQLite).
	StatementTimeout time.Duration
	// WritesPerSecond and WriteBurst are a token bucket on each tenant's
	// Emits; an Emit over it is ErrRateLimited.
	WritesPerSecond float64
	WriteBurst      int
}

// DefaultLimits are the limits a store opens with.
func DefaultLimits() Limits {
	return Limits{TenantConcurrency: 2, StatementTimeout: 5 * time.Second, WritesPerSecond: 20, WriteBurst: 200}
}

// Validate says which limit is out of range.
func (l Limits) Validate() error {
	switch {
	case l.TenantConcurrency < 1 || l.TenantConcurrency > 1024:
		return fmt.Errorf("%w: tenant concurrency must be 1..1024, got %d", ErrInvalid, l.TenantConcurrency)
	case l.StatementTimeout < 10*time.Millisecond || l.StatementTimeout > 10*time.Minute:
		return fmt.Errorf("%w: statement timeout must be 10ms..10m, got %v", ErrInvalid, l.StatementTimeout)
	case !(l.WritesPerSecond > 0) || l.WritesPerSecond > 1e6:
		return fmt.Errorf("%w: writes per second must be over 0 and at most 1e6, got %v", ErrInvalid, l.WritesPerSecond)
	case l.WriteBurst < 1 || l.WriteBurst > 1_000_000:
		return fmt.Errorf("%w: write burst must be 1..1000000, got %d", ErrInvalid, l.WriteBurst)
	}
	return nil
}

// SetLimits replaces the store's limits; tenants' buckets and slots start
// afresh. Call it before the store is used.
func (s *Store) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	s.fair.mu.Lock()
	defer s.fair.mu.Unlock()
	s.fair.lim = l
	s.fair.tenants = map[string]*tenantShare{}
	return nil
}

// Limits returns the store's limits.
func (s *Store) Limits() Limits {
	s.fair.mu.Lock()
	defer s.fair.mu.Unlock()
	return s.fair.lim
}

// fairness holds each tenant's share of the store.
type fairness struct {
	mu      sync.Mutex
	lim     Limits
	tenants map[string]*tenantShare
}

type tenantShare struct {
	slots  chan struct{} // one token per call in the store
	writes *rate.Limiter
	users  int // calls holding or waiting for a slot
}

// pruneAt is the map size from which idle tenants are dropped; a tenant
// is idle with no call in flight and a full bucket, so dropping it forgets
// nothing.
const pruneAt = 1024

// do runs fn for tenant within its share: a write first takes a token of
// its bucket (ErrRateLimited when empty, without waiting), then the call
// waits for one of the tenant's slots and runs with the statement timeout.
// A call cut by that timeout is ErrTimeout; the caller's own cancellation
// or deadline stays that.
func (s *Store) do(ctx context.Context, tenant, op string, write bool, fn func(context.Context) error) error {
	s.fair.mu.Lock()
	lim := s.fair.lim
	ts := s.fair.tenants[tenant]
	if ts == nil {
		if len(s.fair.tenants) >= pruneAt {
			s.fair.prune()
		}
		ts = &tenantShare{slots: make(chan struct{}, lim.TenantConcurrency),
			writes: rate.NewLimiter(rate.Limit(lim.WritesPerSecond), lim.WriteBurst)}
		s.fair.tenants[tenant] = ts
	}
	if write && !ts.writes.Allow() {
		s.fair.mu.Unlock()
		return fmt.Errorf("%w: over %g writes per second (burst %d)", ErrRateLimited, lim.WritesPerSecond, lim.WriteBurst)
	}
	ts.users++
	s.fair.mu.Unlock()
	defer func() {
		s.fair.mu.Lock()
		ts.users--
		s.fair.mu.Unlock()
	}()

	octx, cancel := context.WithTimeout(ctx, lim.StatementTimeout)
	defer cancel()
	select {
	case ts.slots <- struct{}{}:
	case <-octx.Done():
		if ctx.Err() != nil {
			return fmt.Errorf("memory %s: %w", op, ctx.Err())
		}
		return fmt.Errorf("%w: memory %s waited %v for one of the tenant's %d slots",
			ErrTimeout, op, lim.StatementTimeout, lim.TenantConcurrency)
	}
	defer func() { <-ts.slots }()
	err := fn(octx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrTimeout) && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: memory %s took over %v", ErrTimeout, op, lim.StatementTimeout)
	}
	return err
}

// prune drops idle tenants; f.mu is held.
func (f *fairness) prune() {
	now := time.Now()
	for id, ts := range f.tenants {
		if ts.users == 0 && ts.writes.TokensAt(now) >= float64(f.lim.WriteBurst) {
			delete(f.tenants, id)
		}
	}
}
