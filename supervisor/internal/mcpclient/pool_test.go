package mcpclient

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/internal/mcptest"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/internal/tools"
)

func hostileSpec(name string, share Share, idle time.Duration) Spec {
	return Spec{Name: name, Share: share, Idle: idle, Transport: func(string) (func(context.Context) (mcp.Transport, error), error) {
		return func(context.Context) (mcp.Transport, error) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), mcptest.EnvServe+"=1")
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil
		}, nil
	}}
}

func pidOf(t *testing.T, src tools.Source, server string) string {
	t.Helper()
	res, err := call(t, src, "mcp__"+server+"__pid", `{}`, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(res)
}

// per_tenant: one instance per tenant, shared by its invocations, never
// by another tenant; global: one for all; per_invocation: one per
// invocation, ended with it.
func TestPoolShareModes(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("tenanted", SharePerTenant, 0), hostileSpec("shared", ShareGlobal, 0),
		hostileSpec("own", SharePerInvocation, 0)}, a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a1, a2, b1 := p.For("tenant-a", "inv-1"), p.For("tenant-a", "inv-2"), p.For("tenant-b", "inv-3")
	if pidOf(t, a1, "tenanted") != pidOf(t, a2, "tenanted") {
		t.Error("one tenant's invocations got two per_tenant servers")
	}
	if pidOf(t, a1, "tenanted") == pidOf(t, b1, "tenanted") {
		t.Error("two tenants share a per_tenant server")
	}
	if pidOf(t, a1, "shared") != pidOf(t, b1, "shared") {
		t.Error("a global server is not shared")
	}
	own1 := pidOf(t, a1, "own")
	if own1 == pidOf(t, a2, "own") {
		t.Error("two invocations share a per_invocation server")
	}
	if err := a1.(interface{ Close() error }).Close(); err != nil {
		t.Fatal(err)
	}
	if pidOf(t, a2, "tenanted") != pidOf(t, p.For("tenant-a", "inv-4"), "tenanted") {
		t.Error("ending an invocation ended its tenant's server")
	}
	if len(p.instances) != 4 { // tenanted a, b; shared; own inv-2 (inv-1's is gone)
		t.Errorf("%d instances after inv-1 ended, want 4", len(p.instances))
	}
}

// A server unused for its idle time is stopped, and the next call starts
// it again.
func TestPoolIdleStop(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("lazy", ShareGlobal, 300*time.Millisecond)}, a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	src := p.For("t", "i")
	first := pidOf(t, src, "lazy")
	srv, _ := p.instance("lazy", "t", "i")
	// Wait for the idle server to stop.
	testutil.WaitFor(t, 10*time.Second, func() bool { return !srv.Running() })
	if again := pidOf(t, src, "lazy"); again == first {
		t.Error("the server was not started again")
	}
}

// At most maxRunning sessions run at once: a third tenant's start fails
// cleanly, and succeeds once a running one stopped.
func TestPoolMaxRunning(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("capped", SharePerTenant, 0)}, a, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pidOf(t, p.For("a", "1"), "capped")
	pidOf(t, p.For("b", "2"), "capped")
	if _, ok, err := p.For("c", "3").Lookup(context.Background(), "mcp__capped__pid"); !ok || !errors.Is(err, tools.ErrFailed) {
		t.Fatalf("third: ok %v err %v, want ErrFailed", ok, err)
	}
	srv, _ := p.instance("capped", "a", "1")
	srv.stopIdle(time.Now().Add(time.Hour), time.Minute)
	// Wait for a slot to free.
	testutil.WaitFor(t, 10*time.Second, func() bool {
		s, _ := p.instance("capped", "c", "3")
		s.mu.Lock()
		s.nextTry = time.Time{} // past the backoff of the refused start
		s.mu.Unlock()
		_, _, err := p.For("c", "3").Lookup(context.Background(), "mcp__capped__pid")
		return err == nil
	})
}

// The series count sessions, starts and calls by server.
func TestPoolMetrics(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("counted", ShareGlobal, 0)}, a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if p.Metrics, err = NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	pidOf(t, p.For("a", "1"), "counted")
	if got := promtest.ToFloat64(p.Metrics.Running.WithLabelValues("counted")); got != 1 {
		t.Errorf("running %v, want 1", got)
	}
	if got := promtest.ToFloat64(p.Metrics.Starts.WithLabelValues("counted", StartOK)); got != 1 {
		t.Errorf("starts %v, want 1", got)
	}
	if n := promtest.CollectAndCount(p.Metrics.CallDuration); n != 1 {
		t.Errorf("%d call duration series, want 1", n)
	}
	p.Close()
	// Wait for the session's end to be counted.
	testutil.WaitFor(t, 10*time.Second, func() bool { return promtest.ToFloat64(p.Metrics.Running.WithLabelValues("counted")) == 0 })
}

// Status reports each server without starting it: stopped before its
// first use, up with its tools and their definition hashes once used,
// restarting after a crash, and up again with one restart.
func TestPoolStatus(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("live", ShareGlobal, 0), hostileSpec("idle", ShareGlobal, 0)}, a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if st := p.Status(); len(st) != 2 || st[0].Server != "idle" || st[0].Status != StatusStopped || st[1].Status != StatusStopped {
		t.Fatalf("before use: %+v", st)
	}
	src := p.For("t", "i")
	pidOf(t, src, "live")
	find := func() InstanceStatus {
		for _, s := range p.Status() {
			if s.Server == "live" {
				return s
			}
		}
		t.Fatal("live: not in the status")
		return InstanceStatus{}
	}
	st := find()
	var echo *ToolStatus
	for i := range st.Tools {
		if st.Tools[i].Name == "mcp__live__echo" {
			echo = &st.Tools[i]
		}
	}
	if st.Status != StatusUp || st.Instance != "global" || st.Restarts != 0 || echo == nil || len(echo.DefinitionHash) != 64 {
		t.Fatalf("after use: %+v", st)
	}
	if _, err := call(t, src, "mcp__live__crash", `{}`, ""); err == nil {
		t.Fatal("crash answered")
	}
	if !testutil.Eventually(10*time.Second, func() bool { return find().Status == StatusRestarting }) {
		t.Fatal("timed out waiting for the crash to show")
	}
	if !testutil.Eventually(20*time.Second, func() bool { _, err := call(t, src, "mcp__live__echo", `{"text":"x"}`, ""); return err == nil }) {
		t.Fatal("timed out waiting for a restart")
	}
	if st := find(); st.Status != StatusUp || st.Restarts != 1 {
		t.Errorf("after the restart: %+v", st)
	}
}

// Apply (a reload): a changed server's new calls go to a new instance
// while its old one finishes the call in flight and only then ends; a
// removed server's tools are gone, an added one's served.
func TestPoolApply(t *testing.T) {
	a, _ := OpenApprovals(t.TempDir())
	p, err := NewPool([]Spec{hostileSpec("chg", ShareGlobal, 0), hostileSpec("gone", ShareGlobal, 0)}, a, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	src := p.For("t", "i")
	before := pidOf(t, src, "chg")
	pidOf(t, src, "gone")
	old, err := p.instance("chg", "t", "i")
	if err != nil || old == nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hung := make(chan error, 1)
	go func() {
		_, err := callCtx(ctx, t, src, "mcp__chg__hang", `{}`, "")
		hung <- err
	}()
	if !testutil.Eventually(10*time.Second, func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return old.inflight == 1
	}) {
		t.Fatal("timed out waiting for the call in flight")
	}
	if err := p.Apply([]string{"chg", "gone"}, []Spec{hostileSpec("chg", ShareGlobal, 0), hostileSpec("added", ShareGlobal, 0)}); err != nil {
		t.Fatal(err)
	}
	if after := pidOf(t, src, "chg"); after == before {
		t.Error("the changed server's new call went to its old instance")
	}
	if !old.Running() {
		t.Error("the old instance ended with a call in flight")
	}
	if _, ok, _ := src.Lookup(context.Background(), "mcp__gone__echo"); ok {
		t.Error("a removed server's tool is still served")
	}
	pidOf(t, src, "added")
	cancel()
	if err := <-hung; err == nil {
		t.Error("the cancelled call answered")
	}
	if !testutil.Eventually(10*time.Second, func() bool { return !old.Running() }) {
		t.Fatal("timed out waiting for the old instance to end after its last call")
	}
	if got := p.Servers(); len(got) != 2 || got[0] != "added" || got[1] != "chg" {
		t.Errorf("servers after Apply: %v", got)
	}
}
