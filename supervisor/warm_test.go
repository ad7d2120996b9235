package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/cgroups"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

// warmRunner is a goroutine-safe fake Runner that can prewarm: each warm
// sandbox counts its activations.
type warmRunner struct {
	made, cold, closed atomic.Int64
	mu                 sync.Mutex
	activated          map[string]int
	kill               atomic.Bool   // the ready sandboxes' inits are dead
	gate               chan struct{} // when set, Prewarm waits for it to close
}

func (r *warmRunner) Reserve(string) (sandbox.Identity, error) {
	return sandbox.Identity{UID: os.Getuid(), GID: os.Getgid(), RangeStart: -1, Owner: -1}, nil
}
func (r *warmRunner) Release(string)          {}
func (r *warmRunner) Owns(string, int32) bool { return false }
func (r *warmRunner) Check(sandbox.Spec) (sandbox.Containment, error) {
	return sandbox.Containment{Platform: "fake"}, nil
}

func (r *warmRunner) Start(spec sandbox.Spec) (sandbox.Process, error) {
	r.cold.Add(1)
	io.WriteString(spec.Stdout, "{}")
	return warmProc{}, nil
}

func (r *warmRunner) Prewarm(spec sandbox.Spec) (sandbox.Warm, error) {
	r.mu.Lock()
	gate := r.gate
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	r.made.Add(1)
	return &fakeWarm{r: r, id: spec.ID}, nil
}

type fakeWarm struct {
	r  *warmRunner
	id string
}

func (w *fakeWarm) ID() string   { return w.id }
func (w *fakeWarm) Alive() bool  { return !w.r.kill.Load() }
func (w *fakeWarm) Close() error { w.r.closed.Add(1); return nil }
func (w *fakeWarm) Activate(a sandbox.Activation) (sandbox.Process, error) {
	w.r.mu.Lock()
	w.r.activated[w.id]++
	w.r.mu.Unlock()
	io.WriteString(a.Stdout, "{}")
	return warmProc{}, nil
}

type warmProc struct{}

func (warmProc) Terminate() error                 { return nil }
func (warmProc) KillAll() error                   { return nil }
func (warmProc) Wait() (sandbox.Exit, error)      { return sandbox.Exit{}, nil }
func (warmProc) Stats() (cgroups.Stats, error)    { return cgroups.Stats{}, nil }
func (warmProc) OOMKills() (uint64, error)        { return 0, nil }
func (warmProc) Close() error                     { return nil }
func (warmProc) StartLatency() time.Duration      { return 0 }
func (warmProc) Containment() sandbox.Containment { return sandbox.Containment{Platform: "fake"} }
func (warmProc) Exec(context.Context, sandbox.ExecSpec) (sandbox.ExecExit, error) {
	return sandbox.ExecExit{}, errors.New("fake: no exec")
}

// warmSup is a supervisor on r with a warm pool of cfg as its Warm, and a
// skill folder.
func warmSup(t *testing.T, r *warmRunner, cfg WarmConfig) (*Supervisor, *WarmPool, string) {
	t.Helper()
	s := newSupWith(t, r)
	pool, err := NewWarmPool(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Warm = pool
	return s, pool, skillDir(t, "")
}

// TestWarmPoolHandsEachSandboxOnce: concurrent invocations of one skill
// through the pool; no warm sandbox is activated twice, some are
// activated, and Close leaves none ready. Run under -race.
func TestWarmPoolHandsEachSandboxOnce(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 4, MaxPerSkill: 4})
	var wg sync.WaitGroup
	var starts sync.Map
	var slots, released atomic.Int64
	slot := func() (func(), error) { //nolint:unparam // Request.StartSlot's signature
		slots.Add(1)
		return func() { released.Add(1) }, nil
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				env, err := s.Run(t.Context(), Request{SkillDir: dir, StartSlot: slot})
				if err != nil || env.Outcome != OutcomeSuccess {
					t.Errorf("goroutine %d run %d: %v %s %s", g, i, err, env.Outcome, env.ErrorMessage)
					return
				}
				starts.Store(fmt.Sprintf("%d/%d", g, i), env.Containment.Start)
			}
		}()
	}
	wg.Wait()
	pool.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.activated {
		if n != 1 {
			t.Errorf("warm sandbox %s activated %d times", id, n)
		}
	}
	warm := 0
	starts.Range(func(_, v any) bool {
		if v == StartWarm {
			warm++
		}
		return true
	})
	if warm == 0 || warm != len(r.activated) || int64(warm)+r.cold.Load() != 160 {
		t.Errorf("%d warm starts, %d activations, %d cold starts, want every one of 160 warm or cold and some warm", warm, len(r.activated), r.cold.Load())
	}
	if pool.Ready() != 0 {
		t.Errorf("%d warm sandboxes ready after Close", pool.Ready())
	}
	// Only cold starts wait for a start slot, each given back once.
	if slots.Load() != r.cold.Load() || released.Load() != slots.Load() {
		t.Errorf("%d start slots taken, %d released, for %d cold starts", slots.Load(), released.Load(), r.cold.Load())
	}
}

// TestStartSlotRefusalRunsNothing: an invocation whose start slot is
// refused (its caller left the line) is ErrNotStarted, writes no row and
// starts no sandbox.
func TestStartSlotRefusalRunsNothing(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s := newSupWith(t, r)
	_, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, ""), StartSlot: func() (func(), error) { return nil, context.Canceled }})
	if !errors.Is(err, ErrNotStarted) || !errors.Is(err, ErrRefused) {
		t.Fatalf("err %v, want ErrNotStarted (an ErrRefused)", err)
	}
	rows, err := s.Audit.(*auditstore.Store).Rows(context.Background(), auditstore.Filter{})
	if err != nil || len(rows) != 0 || r.cold.Load() != 0 {
		t.Fatalf("%d rows (%v) and %d starts after a refused start slot, want none", len(rows), err, r.cold.Load())
	}
}

// TestWarmPoolSkipsDeadSandboxes: sandboxes whose init died are discarded
// at the claim, and the invocation starts cold; once sandboxes are made
// alive again, the next invocation after a refill starts warm.
func TestWarmPoolSkipsDeadSandboxes(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	r.kill.Store(true)
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 2})
	defer pool.Close()
	run := func(what, want string) {
		t.Helper()
		env, err := s.Run(t.Context(), Request{SkillDir: dir})
		if err != nil || env.Outcome != OutcomeSuccess || env.Containment.Start != want {
			t.Fatalf("%s: %v %s start %q, want a %s success", what, err, env.Outcome, env.Containment.Start, want)
		}
	}
	// The first claim misses (nothing made yet) and starts the refill.
	run("first run", StartCold)
	for i := range 3 {
		// Each claim meets a ready (dead) sandbox: the refill landed.
		testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() >= 1 })
		closed := r.closed.Load()
		run(fmt.Sprintf("run %d over a dead sandbox", i), StartCold)
		if r.closed.Load() <= closed {
			t.Fatalf("run %d: the dead sandbox it met was not destroyed", i)
		}
	}
	r.mu.Lock()
	n := len(r.activated)
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("dead sandboxes: %d made, %d activated, want none activated", r.made.Load(), n)
	}
	// Alive again: the run after a refill starts warm.
	r.kill.Store(false)
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() >= 1 })
	run("run over a live sandbox", StartWarm)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.activated) != 1 {
		t.Errorf("activated %v, want the one live sandbox", r.activated)
	}
}

// TestWarmPoolMakeHandsOverOne: Make makes one sandbox of the request's
// shape, which the invocation then claims (start warm); with NoRefill
// nothing else is made, before or after; a bad request is refused as Run
// refuses it, and past the budget Make says so.
func TestWarmPoolMakeHandsOverOne(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 1, MaxPerSkill: 1, NoRefill: true})
	if err := pool.Make(Request{SkillDir: dir, TenantID: "not-a-uuid"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Make of a bad request: %v, want ErrInvalidRequest", err)
	}
	if err := pool.Make(Request{SkillDir: dir}); err != nil {
		t.Fatal(err)
	}
	if err := pool.Make(Request{SkillDir: dir}); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("a second Make within a budget of 1: %v, want a budget error", err)
	}
	env, err := s.Run(t.Context(), Request{SkillDir: dir})
	if err != nil || env.Outcome != OutcomeSuccess || env.Containment.Start != StartWarm {
		t.Fatalf("run: %v %s start %q, want a warm success", err, env.Outcome, env.Containment.Start)
	}
	env, err = s.Run(t.Context(), Request{SkillDir: dir})
	if err != nil || env.Containment.Start != StartCold {
		t.Fatalf("second run: %v start %q, want cold (nothing refilled)", err, env.Containment.Start)
	}
	pool.Close()
	if n := r.made.Load(); n != 1 {
		t.Errorf("%d warm sandboxes made, want the one Make made", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.activated) != 1 {
		t.Errorf("activated %v, want one sandbox once", r.activated)
	}
}

// TestWarmPoolMadeButUnclaimedIsDestroyed: a sandbox Make made for an
// invocation refused afterwards (its SKILL.md broken in between) is never
// activated, and Close destroys it.
func TestWarmPoolMadeButUnclaimedIsDestroyed(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 1, MaxPerSkill: 1, NoRefill: true})
	if err := pool.Make(Request{SkillDir: dir}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: [\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(t.Context(), Request{SkillDir: dir}); !errors.Is(err, ErrInvalidSkill) {
		t.Fatalf("run of a broken skill: %v, want ErrInvalidSkill", err)
	}
	pool.Close()
	if r.made.Load() != 1 || r.closed.Load() != 1 || len(r.activated) != 0 {
		t.Errorf("made %d, destroyed %d, activated %v: want the one sandbox destroyed, never activated", r.made.Load(), r.closed.Load(), r.activated)
	}
}

// TestWarmPoolDropsAnEditedSkillsSandboxes: after SKILL.md changes, the
// next invocation is a new shape: it does not get the old shape's
// sandbox, and the old shape's ready sandboxes are destroyed.
func TestWarmPoolDropsAnEditedSkillsSandboxes(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 4, MaxPerSkill: 2, NoRefill: true})
	defer pool.Close()
	for range 2 {
		if err := pool.Make(Request{SkillDir: dir}); err != nil {
			t.Fatal(err)
		}
	}
	md := "---\nname: fake\ndescription: edited\n---\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := s.Run(t.Context(), Request{SkillDir: dir})
	if err != nil || env.Containment.Start != StartCold {
		t.Fatalf("after the edit: %v start %q, want cold", err, env.Containment.Start)
	}
	if n := r.closed.Load(); n != 2 {
		t.Errorf("%d of the old shape's 2 sandboxes destroyed", n)
	}
	if n := pool.Ready(); n != 0 {
		t.Errorf("%d sandboxes still ready", n)
	}
}

// TestShapeKeyNamesWhatTheSandboxWasMadeFrom: a warm sandbox is only
// handed to an invocation of the same shape: another skill folder, the
// same path swapped for another folder, another policy, profile bytes or
// limit is another shape.
func TestShapeKeyNamesWhatTheSandboxWasMadeFrom(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "skill")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{SkillDir: dir, Entrypoint: "main", MemoryMB: 64, PidsMax: 8, SeccompProfile: "default", SeccompProfileHash: "aa"}
	key := func(s sandbox.Spec, pol string) string {
		t.Helper()
		k, err := shapeKey(s, pol)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k0 := key(spec, "p1")
	if key(spec, "p1") != k0 {
		t.Fatal("the same shape gave two keys")
	}
	other := spec
	other.MemoryMB = 65
	profile := spec
	profile.SeccompProfileHash = "bb"
	for name, k := range map[string]string{"policy": key(spec, "p2"), "memory": key(other, "p1"), "profile bytes": key(profile, "p1")} {
		if k == k0 {
			t.Errorf("another %s, the same key", name)
		}
	}
	// The folder swapped for another at the same path (a new inode).
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if key(spec, "p1") == k0 {
		t.Error("a swapped skill folder kept the key")
	}
}

// TestWarmGaugeFollowsThePool: cyberos_warm_sandboxes shows the skill's
// ready sandboxes, and 0 once idle expiry has emptied them.
func TestWarmGaugeFollowsThePool(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s := newSupWith(t, r)
	s.Metrics = telemetry.NewMetrics()
	pool, err := NewWarmPool(s, WarmConfig{MaxSandboxes: 2, Idle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s.Warm = pool
	if env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")}); err != nil || env.Outcome != OutcomeSuccess {
		t.Fatal(err, env.Outcome)
	}
	gauge := func() float64 { return promtest.ToFloat64(s.Metrics.WarmSandboxes.WithLabelValues("fake")) }
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() >= 1 && gauge() == float64(pool.Ready()) })
	pool.expire(time.Now().Add(2 * time.Hour)) // what the janitor does once the hour has passed
	if pool.Ready() != 0 || gauge() != 0 {
		t.Fatalf("after idle expiry: %d ready, gauge %v, want 0 and 0", pool.Ready(), gauge())
	}
}

// refillInFlight readies a pool for a claim that finds a refill of its
// shape in flight: one run (a miss, whose refill lands and sets the
// wait's bound to a minute), then Prewarm held, and a second run (a hit)
// whose refill is then under way, held. It returns the gate to open.
func refillInFlight(t *testing.T, s *Supervisor, r *warmRunner, pool *WarmPool, dir string) chan struct{} {
	t.Helper()
	if env, err := s.Run(t.Context(), Request{SkillDir: dir}); err != nil || env.Containment.Start != StartCold {
		t.Fatalf("first run: %v start %q, want cold", err, env.Containment.Start)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() == 1 })
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	pool.mu.Lock()
	pool.makeAvg = time.Minute
	pool.mu.Unlock()
	if env, err := s.Run(t.Context(), Request{SkillDir: dir}); err != nil || env.Containment.Start != StartWarm {
		t.Fatalf("second run: %v start %q, want warm", err, env.Containment.Start)
	}
	return gate
}

// waiting is how many claims of any shape wait for a refill.
func (p *WarmPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		n += len(e.waiters)
	}
	return n
}

// TestWarmClaimWaitsForTheRefillInFlight: back-to-back invocations, the
// second's refill still being made when the third claims: the third waits
// for that sandbox and starts warm, not cold, and no second one is made
// for it; each sandbox is activated once.
func TestWarmClaimWaitsForTheRefillInFlight(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 4, MaxPerSkill: 1})
	claims := func(result string) float64 {
		return promtest.ToFloat64(s.metrics().WarmClaims.WithLabelValues("fake", result))
	}
	hits0, waited0, misses0 := claims("hit"), claims("waited"), claims("miss")
	gate := refillInFlight(t, s, r, pool, dir)
	type result struct {
		env Envelope
		err error
	}
	got := make(chan result, 1)
	go func() {
		env, err := s.Run(t.Context(), Request{SkillDir: dir})
		got <- result{env, err}
	}()
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.waiting() == 1 })
	close(gate)
	res := <-got
	if res.err != nil || res.env.Outcome != OutcomeSuccess || res.env.Containment.Start != StartWarm {
		t.Fatalf("third run: %v %s start %q, want a warm success", res.err, res.env.Outcome, res.env.Containment.Start)
	}
	// The third's own refill lands; nothing else is made.
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() == 1 })
	pool.Close()
	if c, m := r.cold.Load(), r.made.Load(); c != 1 || m != 3 {
		t.Errorf("%d cold starts, %d warm sandboxes made, want the first run's 1 and 3 (one per run)", c, m)
	}
	if h, w, m := claims("hit")-hits0, claims("waited")-waited0, claims("miss")-misses0; h != 1 || w != 1 || m != 1 {
		t.Errorf("%v hit, %v waited, %v missed, want 1 each", h, w, m)
	}
	// Every sandbox made is destroyed: the two run, the last refill unused.
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.closed.Load() == 3 })
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.activated {
		if n != 1 {
			t.Errorf("warm sandbox %s activated %d times", id, n)
		}
	}
	if len(r.activated) != 2 {
		t.Errorf("%d activated, want 2", len(r.activated))
	}
}

// TestWarmClaimWaitCutByContext: an invocation whose context ends while it
// waits for a refill in flight is ErrNotStarted, starts nothing (no cold
// start, no second sandbox made), and the sandbox it waited for lands
// ready for the next claim; Close destroys it.
func TestWarmClaimWaitCutByContext(t *testing.T) {
	r := &warmRunner{activated: map[string]int{}}
	s, pool, dir := warmSup(t, r, WarmConfig{MaxSandboxes: 4, MaxPerSkill: 1})
	gate := refillInFlight(t, s, r, pool, dir)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, Request{SkillDir: dir})
		errc <- err
	}()
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.waiting() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, ErrNotStarted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("run cut while waiting: %v, want ErrNotStarted (context canceled)", err)
	}
	if pool.waiting() != 0 {
		t.Fatal("the cut claim still waits")
	}
	close(gate)
	testutil.WaitFor(t, 10*time.Second, func() bool { return pool.Ready() == 1 })
	time.Sleep(50 * time.Millisecond) // a second refill, were one started, lands
	if c, m := r.cold.Load(), r.made.Load(); c != 1 || m != 2 || pool.Ready() != 1 {
		t.Fatalf("%d cold starts, %d made, %d ready, want the first run's 1, 2 and the one waited for", c, m, pool.Ready())
	}
	rows, err := s.Audit.(*auditstore.Store).Rows(context.Background(), auditstore.Filter{})
	if err != nil || len(rows) != 4 {
		t.Fatalf("%d rows (%v), want the two runs' 4 and none of the cut one", len(rows), err)
	}
	pool.Close()
	// Both destroyed: the one run, and the one waited for, unused.
	testutil.WaitFor(t, 10*time.Second, func() bool { return r.closed.Load() == 2 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.activated) != 1 {
		t.Errorf("%d activated, want 1", len(r.activated))
	}
}
