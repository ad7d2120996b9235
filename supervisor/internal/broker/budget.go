package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// Budgets of response bytes in flight: what tool calls may hold between
// reading their input and writing their response (a file's bytes, a
// result's encoding). A call reserves before it allocates (tools.Memory);
// one that does not fit waits up to BudgetWait, then is refused with
// memory_budget, audited as every refusal is.
const (
	// DefaultInvocationBudget is one invocation's budget: two Reads of a
	// file at MaxFileReadBytes with their results at once.
	DefaultInvocationBudget = 64 << 20
	// DefaultDaemonBudget is every invocation's together (Config.Budget).
	DefaultDaemonBudget = 96 << 20
	// BudgetWait bounds how long a call waits for its bytes.
	BudgetWait = 15 * time.Second
)

// Budget is a pool of bytes shared by the calls of one or more brokers.
// It is not first-come first-served (golang.org/x/sync/semaphore is): a
// call already holding bytes (a Grep between files, a Glob's growing
// result) may only take more at once, never wait (frameMem), and in
// arrival order it could take nothing while a larger request waits, even
// with room for it. A large request starved by small ones is refused after
// BudgetWait instead.
type Budget struct {
	size int64
	name string // "the invocation's", "the daemon's": for the refusal

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed, and replaced, when bytes come back
}

// NewBudget returns a budget of size bytes; name says whose it is in a
// refusal's detail ("the daemon's").
func NewBudget(size int64, name string) *Budget {
	return &Budget{size: size, name: name, changed: make(chan struct{})}
}

// errBudgetWait: the budget had no room in time.
var errBudgetWait = errors.New("no room in the budget in time")

// acquire takes n bytes when they are free, waiting for them (until ctx
// ends) when wait is set.
func (b *Budget) acquire(ctx context.Context, n int64, wait bool) error {
	if n > b.size {
		return fmt.Errorf("%d bytes over the %d-byte budget", n, b.size)
	}
	for {
		b.mu.Lock()
		if b.used+n <= b.size {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		changed := b.changed
		b.mu.Unlock()
		if !wait {
			return errBudgetWait
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errBudgetWait, ctx.Err())
		}
	}
}

// release gives n bytes back and wakes the waiters.
func (b *Budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// take reserves n bytes of each budget (nil ones skipped), in order,
// waiting when wait is set (up to the earlier of ctx's end and
// BudgetWait), else only when they are free now. On failure nothing is
// held and the budget that refused is returned.
func take(ctx context.Context, n int64, wait bool, budgets ...*Budget) (*Budget, error) {
	ctx, cancel := context.WithTimeout(ctx, BudgetWait)
	defer cancel()
	for i, b := range budgets {
		if b == nil {
			continue
		}
		if err := b.acquire(ctx, n, wait); err != nil {
			give(n, budgets[:i]...)
			return b, err
		}
	}
	return nil, nil
}

// give returns n bytes to each budget.
func give(n int64, budgets ...*Budget) {
	for _, b := range budgets {
		if b != nil && n > 0 {
			b.release(n)
		}
	}
}

// frameMem is what the calls answered in one response frame hold, against
// the invocation's budget and the daemon's; all of it goes back once the
// frame is written (release). A call may wait for its bytes only while its
// frame holds none: bytes held by another call of the frame (a batch) go
// back only after the whole frame is written, so waiting on them could not
// end, and a call holding bytes that waits may wait on calls that wait on
// it (tools.withClaim is how a tool that grows copes).
type frameMem struct {
	inv, daemon *Budget
	mu          sync.Mutex
	held        int64
}

func (f *frameMem) call(tool policy.Tool) *callMem { return &callMem{f: f, tool: tool} }

// release gives back everything the frame's calls hold.
func (f *frameMem) release() {
	if f == nil {
		return
	}
	f.mu.Lock()
	n := f.held
	f.held = 0
	f.mu.Unlock()
	give(n, f.inv, f.daemon)
}

// callMem is one call's tools.Memory.
type callMem struct {
	f    *frameMem
	tool policy.Tool
	mu   sync.Mutex
	held int64
}

var _ tools.Memory = (*callMem)(nil)

// Reserve implements tools.Memory.
func (c *callMem) Reserve(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.f.mu.Lock()
	wait := c.f.held == 0
	c.f.mu.Unlock()
	if b, err := take(ctx, n, wait, c.f.inv, c.f.daemon); err != nil {
		return &policy.Denial{Reason: policy.ReasonMemoryBudget, Tool: c.tool,
			Detail: fmt.Sprintf("the call needs %d KiB more of %s %d MiB budget of response bytes in flight; retry later", (n+1023)>>10, b.name, b.size>>20)}
	}
	c.held += n
	c.f.mu.Lock()
	c.f.held += n
	c.f.mu.Unlock()
	return nil
}

// Release implements tools.Memory.
func (c *callMem) Release(n int64) {
	c.mu.Lock()
	n = min(n, c.held)
	c.held -= n
	c.mu.Unlock()
	if n <= 0 {
		return
	}
	c.f.mu.Lock()
	c.f.held -= n
	c.f.mu.Unlock()
	give(n, c.f.inv, c.f.daemon)
}
