package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/sandbox"
)

// Start kinds, Containment.Start.
const (
	StartWarm = sandbox.StartWarm
	StartCold = sandbox.StartCold
)

// WarmConfig bounds a WarmPool. The zero value of each bound but
// MaxSandboxes takes its default.
type WarmConfig struct {
	// MaxSandboxes is how many warm sandboxes (ready or being made) may
	// exist at once across skills; 0 disables the pool.
	MaxSandboxes int
	// MaxPerSkill bounds one skill's ready sandboxes (DefaultWarmPerSkill).
	MaxPerSkill int
	// MaxMemoryMB bounds the sum of the warm sandboxes' memory limits, and
	// MaxPids the sum of their pids limits; 0 = only MaxSandboxes bounds.
	MaxMemoryMB int64
	MaxPids     int64
	// Idle is how long a skill's sandboxes wait unused before they are
	// destroyed (DefaultWarmIdle).
	Idle time.Duration
	// NoRefill: sandboxes are made only by Make, never by a claim or the
	// end of an invocation (`skill run --start warm` makes one, then hands
	// it to its one invocation).
	NoRefill bool
}

// Defaults of WarmConfig.
const (
	DefaultWarmPerSkill = 4
	DefaultWarmIdle     = time.Minute
	// warmRetryAfter is how long a skill whose warm sandbox could not be
	// made goes without another try.
	warmRetryAfter = 5 * time.Second
)

// WarmPool keeps sandboxes made ahead of their invocations, per skill
// shape: one is claimed by exactly one invocation and destroyed after it,
// never reused. A pool refills in the background towards the number of
// invocations of the shape seen running at once, plus one per miss, up to
// MaxPerSkill and within its budget; a shape unused for Idle is emptied. A SKILL.md, profile or limit change is
// a new shape: the old one's sandboxes are destroyed at its first claim.
type WarmPool struct {
	sup *Supervisor
	cfg WarmConfig

	mu      sync.Mutex
	entries map[string]*warmEntry
	// count, memMB and pids are what ready and filling sandboxes hold.
	count       int
	memMB, pids int64
	closed      bool

	refills chan struct{} // semaphore bounding concurrent refills
	// lend lets a refill queued for a slot start without one: a claim
	// waiting for a sandbox lends it the CPU its cold start would take.
	lend chan struct{}
	wg   sync.WaitGroup
	stop chan struct{}
	// makeAvg is a moving average of the time to make one sandbox: how
	// long a claim waits at most for a refill in flight (a cold start
	// takes no less), 0 (no wait) until one was made.
	makeAvg time.Duration
}

// warmEntry is one shape's sandboxes.
type warmEntry struct {
	key      string
	skillDir string
	skillID  string
	tmpl     sandbox.Spec
	ready    []*warmBox
	filling  int
	making   int // of filling, those being made now (not queued for a refill slot)
	inUse    int // claimed, running
	// waiters are the claims waiting for a sandbox being made, oldest
	// first, at most one per making: fill hands its sandbox to the first.
	waiters  []chan *warmBox
	want     int // ready sandboxes to keep: grows with concurrent use and misses
	lastUse  time.Time
	failedAt time.Time
}

// warmBox is one warm sandbox with its host identity and broker socket.
type warmBox struct {
	w     sandbox.Warm
	sock  *broker.Socket
	ident sandbox.Identity
	entry *warmEntry
}

// destroy removes a box never activated.
func (b *warmBox) destroy() {
	_ = b.w.Close()
	_ = b.sock.Close()
}

// ErrWarmUnsupported: this platform's runner cannot make warm sandboxes.
var ErrWarmUnsupported = errors.New("warm sandboxes: this platform's runner cannot make them")

// NewWarmPool returns the pool of s (whose Runner must be a
// sandbox.Warmer), or nil when cfg disables it.
func NewWarmPool(s *Supervisor, cfg WarmConfig) (*WarmPool, error) {
	if cfg.MaxSandboxes <= 0 {
		return nil, nil
	}
	if _, ok := s.Runner.(sandbox.Warmer); !ok {
		return nil, ErrWarmUnsupported
	}
	if cfg.MaxPerSkill <= 0 {
		cfg.MaxPerSkill = DefaultWarmPerSkill
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultWarmIdle
	}
	p := &WarmPool{sup: s, cfg: cfg, entries: map[string]*warmEntry{},
		refills: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)), lend: make(chan struct{}), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.janitor()
	return p, nil
}

// shapeKey names what a warm sandbox was made from: the skill folder (by
// path and inode), the effective policy, the profile's bytes and every
// limit of the spec.
func shapeKey(spec sandbox.Spec, policyHash string) (string, error) {
	fi, err := os.Stat(spec.SkillDir)
	if err != nil {
		return "", err
	}
	var ino, dev uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino, dev = st.Ino, uint64(st.Dev) //nolint:unconvert // Dev's type differs by platform
	}
	b, err := json.Marshal(struct {
		Dir, Entrypoint, ProfilesDir, Profile, ProfileHash, Policy string
		Ino, Dev                                                   uint64
		Mem, Pids, Tmp, FSize, NoFile                              int64
		CPU                                                        float64
		Degraded                                                   bool
	}{spec.SkillDir, spec.Entrypoint, spec.ProfilesDir, spec.SeccompProfile, spec.SeccompProfileHash, policyHash,
		ino, dev, spec.MemoryMB, spec.PidsMax, spec.TmpSizeMB, spec.FileSizeMB, spec.NoFile, spec.CPU, spec.AllowDegraded})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// claim takes a live warm sandbox of inv's shape, or returns nil (a miss:
// the invocation starts cold). With none ready but a sandbox of the shape
// being made that no other claim waits for, it waits for that one, at most as long as making one takes (makeAvg) and until inv's
// context ends, which returns that context's error. Either way the
// shape's demand is noted and its refill started. done must be called
// once the invocation ended, whatever claim returned.
func (p *WarmPool) claim(inv *invocation) (box *warmBox, done func(), err error) {
	key, err := shapeKey(inv.spec, inv.policyHash)
	if err != nil {
		return nil, func() {}, nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, func() {}, nil
	}
	e, dead := p.entryLocked(key, inv)
	e.lastUse = time.Now()
	e.inUse++
	e.want = max(e.want, min(p.cfg.MaxPerSkill, e.inUse))
	done = func() {
		p.mu.Lock()
		e.inUse--
		if !p.closed && p.entries[e.key] == e {
			p.fillLocked(e)
		}
		p.mu.Unlock()
	}
	box, dead = p.takeReadyLocked(e, dead)
	// A sandbox being made is ready sooner than a cold start made now
	// would be, and costs no second one: wait for it rather than miss. A
	// refill still queued for its slot is not waited for.
	result := "hit"
	var wait chan *warmBox
	if box == nil && len(e.waiters) < e.making && p.makeAvg > 0 {
		wait = make(chan *warmBox, 1)
		e.waiters = append(e.waiters, wait)
		result = "waited"
		// Calls came faster than refills, as on a miss: keep one more
		// ready, and make one more now outside the refill slots, on the CPU
		// a cold start would have taken: a refill queued for a slot (of any
		// shape) if one is, else a new one of this shape.
		e.want = min(p.cfg.MaxPerSkill, e.want+1)
		select {
		case p.lend <- struct{}{}:
		default:
			if !p.cfg.NoRefill && len(e.ready)+e.filling < e.want && p.fitsLocked(e) {
				p.takeLocked(e)
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					_ = p.fill(e)
				}()
			}
		}
	}
	bound := p.makeAvg
	p.mu.Unlock()
	for _, b := range dead {
		b.destroy()
	}
	if wait != nil {
		if box, err = p.await(inv.ctx, e, wait, bound); err != nil {
			return nil, done, err
		}
		if box != nil && !box.w.Alive() {
			box.destroy()
			box = nil
		}
	}
	// A hit refills once its invocation has ended, so that the making of
	// the next sandbox does not take CPU from this one, unless it took the
	// shape's last one: the next claim would find none, so the refill
	// starts now, beside this invocation. A miss refills now, and keeps one
	// more ready from now on: calls came faster than refills.
	p.mu.Lock()
	if !p.closed && p.entries[e.key] == e {
		if box == nil {
			e.want = min(p.cfg.MaxPerSkill, e.want+1)
			p.fillLocked(e)
		} else if len(e.ready) == 0 {
			p.fillLocked(e)
		}
	}
	p.mu.Unlock()
	if box == nil {
		result = "miss"
	}
	p.sup.metrics().WarmClaims.WithLabelValues(e.skillID, result).Inc()
	p.gauge(e)
	return box, done, nil
}

// takeReadyLocked takes the first live ready sandbox of e, adding the dead
// ones it passes to dead.
func (p *WarmPool) takeReadyLocked(e *warmEntry, dead []*warmBox) (*warmBox, []*warmBox) {
	for len(e.ready) > 0 {
		b := e.ready[0]
		e.ready = e.ready[1:]
		p.releaseLocked(e)
		if b.w.Alive() {
			return b, dead
		}
		dead = append(dead, b)
	}
	return nil, dead
}

// await waits on wait, one of e's waiters, for the sandbox a refill hands
// it, for at most bound, until ctx ends or the pool closes. It returns
// the sandbox, or nil (the claim misses); once ctx ended, ctx's error and
// no sandbox: one handed over meanwhile goes back to e's ready ones, or
// is destroyed when it does not fit there any more.
func (p *WarmPool) await(ctx context.Context, e *warmEntry, wait chan *warmBox, bound time.Duration) (*warmBox, error) {
	t := time.NewTimer(bound)
	defer t.Stop()
	var cut error
	select {
	case b := <-wait:
		return b, nil
	case <-ctx.Done():
		cut = ctx.Err()
	case <-t.C:
	case <-p.stop:
	}
	p.mu.Lock()
	if i := slices.Index(e.waiters, wait); i >= 0 {
		e.waiters = slices.Delete(e.waiters, i, i+1)
		p.mu.Unlock()
		return nil, cut
	}
	// Handed over under the lock before this claim left the queue.
	b := <-wait
	if cut == nil {
		p.mu.Unlock()
		return b, nil
	}
	keep := b != nil && !p.closed && p.entries[e.key] == e && p.fitsLocked(e) && b.w.Alive()
	if keep {
		p.holdLocked(e)
		e.ready = append(e.ready, b)
	}
	p.mu.Unlock()
	if b != nil && !keep {
		b.destroy()
	}
	p.gauge(e)
	return nil, cut
}

// entryLocked returns the entry of shape key, made from inv when it is
// new, and the sandboxes of the skill's old shapes, to destroy: a changed
// skill is a new shape.
func (p *WarmPool) entryLocked(key string, inv *invocation) (e *warmEntry, dead []*warmBox) {
	if e = p.entries[key]; e != nil {
		return e, nil
	}
	for k, old := range p.entries {
		if old.skillDir == inv.spec.SkillDir {
			dead = append(dead, p.dropLocked(k, old)...)
		}
	}
	tmpl := inv.spec
	tmpl.Env, tmpl.Stdin, tmpl.Stdout, tmpl.Stderr, tmpl.Deadline, tmpl.BrokerSocket, tmpl.Recorder = nil, nil, nil, nil, 0, "", nil
	e = &warmEntry{key: key, skillDir: inv.spec.SkillDir, skillID: inv.common.SkillID, tmpl: tmpl}
	p.entries[key] = e
	return e, dead
}

// Make makes one warm sandbox of req's shape now, within the pool's
// budget, and keeps it ready for that shape's next claim: what `skill run
// --start warm` does before its invocation. req is validated as Run
// validates it, and refused with the same errors.
func (p *WarmPool) Make(req Request) error {
	inv, err := p.sup.prepare(context.Background(), req, NewID())
	if err != nil {
		return err
	}
	key, err := shapeKey(inv.spec, inv.policyHash)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSkill, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("warm sandboxes: the pool is closed")
	}
	e, dead := p.entryLocked(key, inv)
	fits := p.fitsLocked(e)
	if fits {
		p.takeLocked(e)
	}
	p.mu.Unlock()
	for _, b := range dead {
		b.destroy()
	}
	if !fits {
		return fmt.Errorf("warm sandboxes: one more of %s is over the pool's budget", e.skillID)
	}
	return p.fill(e)
}

// dropLocked removes entry k and returns its ready sandboxes to destroy.
func (p *WarmPool) dropLocked(k string, e *warmEntry) []*warmBox {
	delete(p.entries, k)
	out := e.ready
	for range e.ready {
		p.releaseLocked(e)
	}
	e.ready, e.want = nil, 0
	return out
}

// releaseLocked gives back the budget of one of e's sandboxes.
func (p *WarmPool) releaseLocked(e *warmEntry) {
	p.count--
	p.memMB -= e.tmpl.MemoryMB
	p.pids -= e.tmpl.PidsMax
}

// fitsLocked reports whether one more of e's sandboxes fits the budget.
func (p *WarmPool) fitsLocked(e *warmEntry) bool {
	return p.count < p.cfg.MaxSandboxes &&
		(p.cfg.MaxMemoryMB <= 0 || p.memMB+e.tmpl.MemoryMB <= p.cfg.MaxMemoryMB) &&
		(p.cfg.MaxPids <= 0 || p.pids+e.tmpl.PidsMax <= p.cfg.MaxPids)
}

// takeLocked takes the budget of one more of e's sandboxes, being made.
func (p *WarmPool) takeLocked(e *warmEntry) {
	e.filling++
	p.holdLocked(e)
}

// holdLocked takes the budget of one more of e's sandboxes.
func (p *WarmPool) holdLocked(e *warmEntry) {
	p.count++
	p.memMB += e.tmpl.MemoryMB
	p.pids += e.tmpl.PidsMax
}

// fillLocked starts the refills e needs, within the budget.
func (p *WarmPool) fillLocked(e *warmEntry) {
	if p.cfg.NoRefill || time.Since(e.failedAt) < warmRetryAfter {
		return
	}
	for len(e.ready)+e.filling < e.want && p.fitsLocked(e) {
		p.takeLocked(e)
		p.wg.Add(1)
		go p.refill(e)
	}
}

// refill makes one sandbox of e's shape in the background, with at most
// half as many refills at once as the runtime has CPUs (p.refills).
func (p *WarmPool) refill(e *warmEntry) {
	defer p.wg.Done()
	select {
	case p.refills <- struct{}{}:
	case <-p.lend: // a waiting claim's
		_ = p.fill(e)
		return
	case <-p.stop:
		p.mu.Lock()
		e.filling--
		p.releaseLocked(e)
		p.mu.Unlock()
		return
	}
	_ = p.fill(e)
	<-p.refills
}

// fill makes one sandbox of e's shape, whose budget was taken, and keeps
// it ready. One that could not be made gives its budget back, and so does
// one made after its shape was dropped or the pool closed, which is
// destroyed.
func (p *WarmPool) fill(e *warmEntry) error {
	p.mu.Lock()
	e.making++
	p.mu.Unlock()
	t0 := time.Now()
	box, err := p.make(e)
	took := time.Since(t0)
	if err == nil {
		p.sup.metrics().WarmRefill.Observe(took.Seconds())
	}
	p.mu.Lock()
	e.filling--
	e.making--
	keep := err == nil && !p.closed && p.entries[e.key] == e
	switch {
	case keep && len(e.waiters) > 0:
		// The oldest waiting claim takes it, as a claim takes a ready one.
		w := e.waiters[0]
		e.waiters = e.waiters[1:]
		p.releaseLocked(e)
		w <- box
	case keep:
		e.ready = append(e.ready, box)
	default:
		p.releaseLocked(e)
		if err != nil {
			e.failedAt = time.Now()
		}
	}
	if err == nil {
		if p.makeAvg == 0 {
			p.makeAvg = took
		} else {
			p.makeAvg += (took - p.makeAvg) / 4
		}
	}
	// A waiting claim whose sandbox will not come misses now.
	for len(e.waiters) > e.making {
		w := e.waiters[len(e.waiters)-1]
		e.waiters = e.waiters[:len(e.waiters)-1]
		w <- nil
	}
	p.mu.Unlock()
	if err != nil {
		p.sup.logger().Warn("warm sandbox not made; invocations start cold", "skill_id", e.skillID, "err", err)
	} else if !keep {
		box.destroy()
	}
	p.gauge(e)
	return err
}

// make creates one warm sandbox: its identity, its broker socket (owned by
// that identity, bind-mounted into it) and the sandbox.
func (p *WarmPool) make(e *warmEntry) (*warmBox, error) {
	id := "warm-" + NewID()
	r := p.sup.Runner
	ident, err := r.Reserve(id)
	if err != nil {
		return nil, err
	}
	defer r.Release(id) // a no-op once Prewarm took the identity over
	sock, err := broker.Listen(p.sup.SocketDir, id, ident.UID, ident.GID)
	if err != nil {
		return nil, err
	}
	spec := e.tmpl
	spec.ID, spec.BrokerSocket = id, sock.Path()
	w, err := r.(sandbox.Warmer).Prewarm(spec)
	if err != nil {
		_ = sock.Close()
		return nil, fmt.Errorf("prewarm: %w", err)
	}
	return &warmBox{w: w, sock: sock, ident: ident, entry: e}, nil
}

// gauge publishes the ready count of e's skill, over all its shapes (an
// old one may still be emptying after an edit). It sets the gauge under
// the pool's lock: two refills ending together once set it out of order,
// leaving 1 shown for 2 ready.
func (p *WarmPool) gauge(e *warmEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, o := range p.entries {
		if o.skillID == e.skillID {
			n += len(o.ready)
		}
	}
	p.sup.metrics().WarmSandboxes.WithLabelValues(e.skillID).Set(float64(n))
}

// janitor empties the shapes unused for Idle.
func (p *WarmPool) janitor() {
	defer p.wg.Done()
	tick := time.NewTicker(max(p.cfg.Idle/4, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		p.expire(time.Now())
	}
}

// expire empties the shapes unused for Idle at now.
func (p *WarmPool) expire(now time.Time) {
	var dead []*warmBox
	p.mu.Lock()
	for k, e := range p.entries {
		if e.inUse == 0 && now.Sub(e.lastUse) > p.cfg.Idle {
			dead = append(dead, p.dropLocked(k, e)...)
		}
	}
	p.mu.Unlock()
	for _, b := range dead {
		b.destroy()
		p.gauge(b.entry)
	}
}

// Ready is how many warm sandboxes are ready now, across shapes.
func (p *WarmPool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		n += len(e.ready)
	}
	return n
}

// Close destroys every warm sandbox and waits for the refills under way,
// whose sandboxes are destroyed too. Claims after Close miss.
func (p *WarmPool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	var dead []*warmBox
	for k, e := range p.entries {
		dead = append(dead, p.dropLocked(k, e)...)
	}
	p.mu.Unlock()
	for _, b := range dead {
		b.destroy()
		p.gauge(b.entry)
	}
	p.wg.Wait()
}
