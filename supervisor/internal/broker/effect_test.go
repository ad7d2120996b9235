package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// allToolsSkill allows every native tool (their fakes check no resource).
const allToolsSkill = `---
name: test-skill
description: Broker tests with every tool allowed.
allowed_tools: [Bash, Read, Write, Edit, Glob, Grep, MemoryRead, MemorySearch, MemoryEmit, HttpFetch, HttpPost]
---
`

var (
	effectFreeTools = []policy.Tool{policy.ToolRead, policy.ToolGlob, policy.ToolGrep, policy.ToolMemoryRead, policy.ToolMemorySearch}
	effectfulTools  = []policy.Tool{policy.ToolBash, policy.ToolWrite, policy.ToolEdit, policy.ToolMemoryEmit, policy.ToolHttpFetch, policy.ToolHttpPost}
)

// storeEnv is a broker over a real auditstore.Store in a temporary state dir,
// every tool allowed, each fake tool a no-op unless fns replaces it. wrap,
// when set, puts an Auditor between the broker and the store.
func storeEnv(t *testing.T, fns map[policy.Tool]func(context.Context, *tools.Call) (any, error), wrap func(*auditstore.Store) Auditor) (*testEnv, *auditstore.Store) {
	t.Helper()
	store, err := auditstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() }) // after the broker's Close (cleanups run last first)
	e := startEnv(t, func(c *Config) {
		c.Env.Enforcer = testEnforcer(t, allToolsSkill)
		c.Audit = store
		if wrap != nil {
			c.Audit = wrap(store)
		}
		for name, tl := range c.Tools {
			ft := tl.(*fakeTool)
			ft.fn = func(context.Context, *tools.Call) (any, error) { return struct{}{}, nil }
			if fn, ok := fns[name]; ok {
				ft.fn = fn
			}
		}
	})
	return e, store
}

// toolRow is a durable tool row with the payload fields the tests read.
type toolRow struct {
	audit.Row
	CallID   string `json:"call_id"`
	ToolName string `json:"tool_name"`
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
}

func (r toolRow) String() string {
	return fmt.Sprintf("{seq %d %s call %s %s outcome %q reason %q ts %s}", r.Seq, r.Kind, r.CallID, r.ToolName, r.Outcome, r.Reason, r.TS)
}

// durableRows returns the invocation's durable rows (reads see exactly
// the rows whose append was fdatasynced).
func durableRows(t *testing.T, store *auditstore.Store, invocationID string, kind audit.Kind) []toolRow {
	t.Helper()
	rows, err := store.Rows(context.Background(), auditstore.Filter{InvocationID: invocationID, Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]toolRow, len(rows))
	for i, r := range rows {
		out[i].Row = r
		if err := json.Unmarshal(r.Payload, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// appends counts the durable appends (fdatasyncs) that wrote rows: the
// rows of one append share its ts, and appends follow one another.
func appends(rows []toolRow) int {
	ts := map[string]bool{}
	for _, r := range rows {
		ts[r.TS] = true
	}
	return len(ts)
}

func verifyStore(t *testing.T, store *auditstore.Store) {
	t.Helper()
	rep, err := store.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("the audit trail does not verify: %+v", rep.Problems)
	}
}

// A tool that acts outside the supervisor runs only once its started row
// is durable: each effectful fake, when it runs, reads the store and must
// find its own started row there.
func TestEffectfulToolRunsAfterStartedRowIsDurable(t *testing.T) {
	var mu sync.Mutex
	seen := map[policy.Tool]int{} // durable started rows of the tool when it ran
	var store *auditstore.Store
	var invocationID string
	fns := map[policy.Tool]func(context.Context, *tools.Call) (any, error){}
	for _, name := range effectfulTools {
		fns[name] = func(ctx context.Context, _ *tools.Call) (any, error) {
			mu.Lock()
			st, inv := store, invocationID
			mu.Unlock()
			n := 0
			rows, err := st.Rows(ctx, auditstore.Filter{InvocationID: inv, Kind: audit.KindToolCallStarted})
			if err != nil {
				return nil, err
			}
			for _, r := range rows {
				var p struct {
					ToolName string `json:"tool_name"`
				}
				if json.Unmarshal(r.Payload, &p) == nil && p.ToolName == string(name) {
					n++
				}
			}
			mu.Lock()
			seen[name] = n
			mu.Unlock()
			return struct{}{}, nil
		}
	}
	e, st := storeEnv(t, fns, nil)
	mu.Lock()
	store, invocationID = st, e.cfg.Common.InvocationID
	mu.Unlock()
	c := e.dial()
	for i, name := range effectfulTools {
		if r := c.rpc(callBody(i, string(name), `{}`, "")); r.Error != nil {
			t.Fatalf("%s: %+v", name, r.Error)
		}
		mu.Lock()
		n := seen[name]
		mu.Unlock()
		if n != 1 {
			t.Errorf("%s ran with %d durable started rows of its own, want 1: its effect could leave before its audit", name, n)
		}
	}
	e.b.Close() // every queued completed row durable
	started := durableRows(t, store, invocationID, audit.KindToolCallStarted)
	completed := durableRows(t, store, invocationID, audit.KindToolCallCompleted)
	if len(started) != len(effectfulTools) || len(completed) != len(effectfulTools) {
		t.Fatalf("%d started and %d completed rows, want %d each", len(started), len(completed), len(effectfulTools))
	}
	verifyStore(t, store)
}

// An effect-free call's reply goes only once both its rows are durable,
// and the two share one append: one fdatasync per call, not two.
func TestEffectFreeCallIsOneAppend(t *testing.T) {
	e, store := storeEnv(t, nil, nil)
	inv := e.cfg.Common.InvocationID
	c := e.dial()
	const each = 20
	calls, shared := 0, 0
	for _, name := range effectFreeTools {
		for i := 0; i < each; i++ {
			if r := c.rpc(callBody(i, string(name), fmt.Sprintf(`{"i":%d}`, i), "")); r.Error != nil {
				t.Fatalf("%s: %+v", name, r.Error)
			}
			calls++
			// Durable before the reply: a read right after it sees both.
			started := durableRows(t, store, inv, audit.KindToolCallStarted)
			completed := durableRows(t, store, inv, audit.KindToolCallCompleted)
			if len(started) != calls || len(completed) != calls {
				t.Fatalf("%s call %d: answered with %d started and %d completed rows durable, want %d each", name, i, len(started), len(completed), calls)
			}
			s, d := started[calls-1], completed[calls-1]
			if s.CallID != d.CallID || s.ToolName != string(name) || d.Outcome != audit.OutcomeSuccess || s.Seq >= d.Seq {
				t.Fatalf("%s call %d: rows %+v then %+v", name, i, s, d)
			}
			if s.TS == d.TS {
				shared++
			}
		}
	}
	// Only a scheduling stall of a millisecond between the two rows (the
	// store's lazy hold) splits a pair; most must share their append.
	rows := append(durableRows(t, store, inv, audit.KindToolCallStarted), durableRows(t, store, inv, audit.KindToolCallCompleted)...)
	t.Logf("%d effect-free calls: %d durable appends, %d pairs in one append", calls, appends(rows), shared)
	if shared < calls*3/4 {
		t.Errorf("only %d of %d calls had both rows in one append", shared, calls)
	}
	if n := appends(rows); n > calls+calls/4 {
		t.Errorf("%d appends for %d calls, want about one per call", n, calls)
	}
	verifyStore(t, store)
}

// The started row's durability before an effectful tool runs is timed
// (cyberos_audit_emit_duration_seconds{stage="tool_call_started"}), once
// per call; an effect-free call's started row, written with its reply,
// is not.
func TestStartedRowEmitIsTimed(t *testing.T) {
	e, _ := storeEnv(t, nil, nil)
	c := e.dial()
	hist := func() (uint64, float64) {
		var m dto.Metric
		if err := e.metrics.AuditEmitDuration.WithLabelValues(stageToolCallStarted).(prometheus.Histogram).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	for i, name := range append(slices.Clone(effectfulTools), effectFreeTools...) {
		if r := c.rpc(callBody(i, string(name), `{}`, "")); r.Error != nil {
			t.Fatalf("%s: %+v", name, r.Error)
		}
	}
	n, sum := hist()
	if n != uint64(len(effectfulTools)) {
		t.Fatalf("%d started rows timed, want %d (the effectful calls only)", n, len(effectfulTools))
	}
	if sum <= 0 {
		t.Fatalf("the timed started rows sum to %v s", sum)
	}
}

// Concurrent callers share appends (group commit): never more than one
// fdatasync per call, every pair complete and in order.
func TestEffectFreeConcurrentCallsShareAppends(t *testing.T) {
	e, store := storeEnv(t, nil, nil)
	const callers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for k := 0; k < callers; k++ {
		c := e.dial()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				c.trySend([]byte(callBody(i, "MemoryRead", fmt.Sprintf(`{"k":%d,"i":%d}`, k, i), "")))
				b, err := c.tryRecv(5 * time.Second) // as recv
				if err != nil {
					errs <- err
					return
				}
				var r wireResponse
				if err := json.Unmarshal(b, &r); err != nil || r.Error != nil {
					errs <- fmt.Errorf("caller %d call %d: %s", k, i, b)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	inv := e.cfg.Common.InvocationID
	started := durableRows(t, store, inv, audit.KindToolCallStarted)
	completed := durableRows(t, store, inv, audit.KindToolCallCompleted)
	if len(started) != callers*each || len(completed) != callers*each {
		t.Fatalf("%d started and %d completed rows, want %d each", len(started), len(completed), callers*each)
	}
	n := appends(append(started, completed...))
	t.Logf("%d concurrent effect-free calls: %d durable appends", callers*each, n)
	if n > callers*each {
		t.Errorf("%d appends for %d calls: more than one fdatasync per call", n, callers*each)
	}
	verifyStore(t, store)
}

// An effect-free tool that fails, times out, panics or refuses its
// resource still gets started, completed (and tool_denied) rows, in that
// order, durable before the reply; a call refused by policy gets only its
// tool_denied row and does not run.
func TestEffectFreeFailuresKeepRowOrder(t *testing.T) {
	fns := map[policy.Tool]func(context.Context, *tools.Call) (any, error){
		policy.ToolRead: func(context.Context, *tools.Call) (any, error) {
			return nil, fmt.Errorf("%w: read failed", tools.ErrFailed)
		},
		policy.ToolGrep: func(context.Context, *tools.Call) (any, error) {
			return nil, fmt.Errorf("%w: after 5s", tools.ErrTimeout)
		},
		policy.ToolGlob: func(context.Context, *tools.Call) (any, error) { panic("fake glob panic") },
		policy.ToolMemoryRead: func(context.Context, *tools.Call) (any, error) {
			return nil, &policy.Denial{Reason: policy.ReasonScope, Tool: policy.ToolMemoryRead, Detail: "not in allowed_memory_scopes"}
		},
	}
	e, store := storeEnv(t, fns, nil)
	inv := e.cfg.Common.InvocationID
	c := e.dial()
	for _, tc := range []struct {
		tool    policy.Tool
		reason  string
		outcome string
		denied  string // the tool_denied row's reason, when one follows
	}{
		{policy.ToolRead, "tool_error", audit.OutcomeError, ""},
		{policy.ToolGrep, "timeout", audit.OutcomeTimeout, ""},
		{policy.ToolGlob, "tool_error", audit.OutcomeError, ""},
		{policy.ToolMemoryRead, string(policy.ReasonScope), audit.OutcomeError, string(policy.ReasonScope)},
	} {
		before := len(durableRows(t, store, inv, ""))
		r := c.rpc(callBody(1, string(tc.tool), `{}`, ""))
		if r.Error == nil || r.reason() != tc.reason {
			t.Errorf("%s: %+v, want reason %s", tc.tool, r.Error, tc.reason)
			continue
		}
		rows := durableRows(t, store, inv, "")[before:]
		want := 2
		if tc.denied != "" {
			want = 3
		}
		if len(rows) != want {
			t.Errorf("%s: %d durable rows at the reply, want %d: %+v", tc.tool, len(rows), want, rows)
			continue
		}
		if rows[0].Kind != audit.KindToolCallStarted || rows[1].Kind != audit.KindToolCallCompleted ||
			rows[0].CallID != rows[1].CallID || rows[1].Outcome != tc.outcome {
			t.Errorf("%s: rows %+v", tc.tool, rows)
		}
		if tc.denied != "" && (rows[2].Kind != audit.KindToolDenied || rows[2].Reason != tc.denied) {
			t.Errorf("%s: third row %+v, want tool_denied %s", tc.tool, rows[2], tc.denied)
		}
	}
	// Refused by policy: only tool_denied, nothing ran.
	before := len(durableRows(t, store, inv, ""))
	if r := c.rpc(callBody(2, "Task", `{}`, "")); r.reason() != string(policy.ReasonUnknownTool) {
		t.Fatalf("unknown tool: %+v", r.Error)
	}
	if rows := durableRows(t, store, inv, "")[before:]; len(rows) != 1 || rows[0].Kind != audit.KindToolDenied {
		t.Fatalf("unknown tool: rows %+v", rows)
	}
	verifyStore(t, store)
}

// faultyQueue fails the store's rows at will: enqueueErr at once (the
// store closed, an invalid row), commitErr when the queued row's append
// fails (ENOSPC, EIO), emitErr for rows added by Emit.
type faultyQueue struct {
	*auditstore.Store
	enqueueErr, commitErr, emitErr error
	writeOrphan                    bool
}

func (f *faultyQueue) EnqueueNotify(ctx context.Context, d audit.Draft, done func(error)) error {
	switch {
	case f.enqueueErr != nil:
		return f.enqueueErr
	case f.commitErr != nil:
		go done(f.commitErr)
		return nil
	}
	return f.Store.EnqueueNotify(ctx, d, done)
}

// EnqueueFollowed fails like EnqueueNotify; a row following a failed one fails
// as the store's own does (audit's TestFollowedRowNeverOutlivesItsLeader)
// unless writeOrphan asks for the broken rule.
func (f *faultyQueue) EnqueueFollowed(ctx context.Context, d audit.Draft) (func() (audit.Row, error), func(context.Context, audit.Draft) (audit.Row, error), error) {
	switch {
	case f.enqueueErr != nil:
		return nil, nil, f.enqueueErr
	case f.commitErr != nil:
		then := func(ctx context.Context, next audit.Draft) (audit.Row, error) {
			if f.writeOrphan {
				return f.Emit(ctx, next)
			}
			return audit.Row{}, fmt.Errorf("%w: the row it follows was not written: %w", auditstore.ErrUnavailable, f.commitErr)
		}
		return func() (audit.Row, error) { return audit.Row{}, f.commitErr }, then, nil
	}
	return f.Store.EnqueueFollowed(ctx, d)
}

func (f *faultyQueue) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	if f.emitErr != nil {
		return audit.Row{}, f.emitErr
	}
	return f.Store.Emit(ctx, d)
}

// An effect-free call whose started row cannot be queued does not run;
// one whose started row's append fails gets the same audit_unavailable
// and never its result, whatever became of the completed row.
func TestEffectFreeStartedRowFailure(t *testing.T) {
	diskFull := fmt.Errorf("%w: append: no space left on device", auditstore.ErrUnavailable)
	for _, tc := range []struct {
		name    string
		fq      faultyQueue
		runs    bool // the tool may run (it has no effect but its reply)
		written int  // durable rows of the call
	}{
		{"enqueue fails", faultyQueue{enqueueErr: auditstore.ErrClosed}, false, 0},
		{"append fails", faultyQueue{commitErr: diskFull, emitErr: diskFull}, true, 0},
		{"only the started append fails", faultyQueue{commitErr: diskFull}, true, 0},
		// Were the store to write a completed row after its failed started
		// row, the call is still refused (and the operator told).
		{"the store's rule broken", faultyQueue{commitErr: diskFull, writeOrphan: true}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, store := storeEnv(t, map[policy.Tool]func(context.Context, *tools.Call) (any, error){
				policy.ToolRead: func(context.Context, *tools.Call) (any, error) { return "secret result", nil },
			}, func(s *auditstore.Store) Auditor { fq := tc.fq; fq.Store = s; return &fq })
			c := e.dial()
			r := c.rpc(callBody(1, "Read", `{}`, ""))
			if r.Error == nil || r.Error.Code != -32603 || r.reason() != "audit_unavailable" || r.Result != nil {
				t.Fatalf("reply %+v %s, want audit_unavailable and no result", r.Error, r.Result)
			}
			if n := e.tools.calls(policy.ToolRead); n != 0 && !tc.runs {
				t.Fatalf("the tool ran %d times without its started row", n)
			}
			if rows := durableRows(t, store, e.cfg.Common.InvocationID, ""); len(rows) != tc.written {
				t.Fatalf("%d rows written, want %d: %+v", len(rows), tc.written, rows)
			}
		})
	}
	// The store itself closed: Enqueue fails, nothing runs.
	e, store := storeEnv(t, nil, nil)
	store.Close()
	r := e.dial().rpc(callBody(1, "MemoryRead", `{}`, ""))
	if r.Error == nil || r.reason() != "audit_unavailable" {
		t.Fatalf("closed store: %+v", r.Error)
	}
	if e.tools.calls(policy.ToolMemoryRead) != 0 {
		t.Fatal("the tool ran with the store closed")
	}
}
