package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/cgroups"
)

// gatedHandler, at level info, holds every record until open is closed,
// then keeps them.
type gatedHandler struct {
	open chan struct{}
	mu   *sync.Mutex
	recs *[]slog.Record
	// attrs are those of With, in order.
	attrs []slog.Attr
}

func (h gatedHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h gatedHandler) Handle(_ context.Context, r slog.Record) error {
	<-h.open
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	*h.recs = append(*h.recs, r)
	h.mu.Unlock()
	return nil
}

func (h gatedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return h
}

func (h gatedHandler) WithGroup(string) slog.Handler { return h }

// TestAStalledLogDoesNotHoldTheAnswer: a log sink that stops taking
// lines (journald stalled) does not hold a successful invocation's answer
// at the default level;
// the invocation's one line, "invocation ended", is written once the sink
// takes lines again, with its outcome and the broker's counts.
func TestAStalledLogDoesNotHoldTheAnswer(t *testing.T) {
	f := &fakeRunner{stdout: "{}"}
	s := newSup(t, f)
	s.MaxTeardowns = 1 // as the daemon and skill run have it
	h := gatedHandler{open: make(chan struct{}), mu: &sync.Mutex{}, recs: &[]slog.Record{}}
	s.Log = slog.New(h)
	done := make(chan error, 1)
	var env Envelope
	go func() {
		var err error
		env, err = s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || env.Outcome != OutcomeSuccess {
			t.Fatalf("%v %+v", err, env)
		}
	case <-time.After(10 * time.Second):
		close(h.open)
		t.Fatal("no answer while the log sink was stalled")
	}
	close(h.open)
	s.Drain()
	h.mu.Lock()
	defer h.mu.Unlock()
	var ended []slog.Record
	for _, r := range *h.recs {
		if r.Message == "invocation ended" {
			ended = append(ended, r)
		}
	}
	if len(ended) != 1 {
		t.Fatalf("%d \"invocation ended\" lines, want 1", len(ended))
	}
	got := map[string]string{}
	ended[0].Attrs(func(a slog.Attr) bool { got[a.Key] = a.Value.String(); return true })
	for k, want := range map[string]string{"invocation_id": env.InvocationID, "outcome": "success", "exit_code": "0", "tool_calls": "0", "denied": "0"} {
		if got[k] != want {
			t.Errorf("invocation ended: %s=%q, want %q (%v)", k, got[k], want, got)
		}
	}
}

// completedRowGate closes gate once a skill.invoked_completed row is
// durable.
type completedRowGate struct {
	Auditor
	gate chan struct{}
}

func (g completedRowGate) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	r, err := g.Auditor.Emit(ctx, d)
	if d.Kind == audit.KindInvokedCompleted {
		close(g.gate)
	}
	return r, err
}

// TestStatsReadBesideTheCompletedRow: the outcome needs only the OOM
// kills; the rest of the accounting (memory and pids peaks, limit hits)
// does not delay the completed row, and still fills the envelope. Here
// the accounting is only readable once the row is durable.
func TestStatsReadBesideTheCompletedRow(t *testing.T) {
	gate := make(chan struct{})
	want := cgroups.Stats{MemoryPeakBytes: 12 << 20, MemoryLimitBytes: 512 << 20, PidsPeak: 3, PidsLimit: 64, PidsLimitHits: 1}
	f := &fakeRunner{stdout: "{}", stats: want, statsGate: gate}
	s := newSup(t, f)
	s.Audit = completedRowGate{Auditor: s.Audit, gate: gate}
	done := make(chan struct{})
	var env Envelope
	var err error
	go func() {
		defer close(done)
		env, err = s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the completed row waited for the accounting")
	}
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	if env.Stats != want {
		t.Errorf("envelope stats %+v, want %+v", env.Stats, want)
	}
}
