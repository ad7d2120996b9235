package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// reserveTool is HttpFetch replaced by a tool that reserves args.n bytes,
// waits on hold when args.hold is set, and returns a canonical string of
// args.n bytes.
func reserveTool(hold <-chan struct{}, entered chan<- struct{}) func(*Config) {
	return func(cfg *Config) {
		cfg.Tools[policy.ToolHttpFetch] = &fakeTool{name: policy.ToolHttpFetch, fn: func(ctx context.Context, c *tools.Call) (any, error) {
			var a struct {
				N    int64
				Hold bool
			}
			_ = json.Unmarshal(c.Args, &a)
			if err := c.Mem.Reserve(ctx, a.N); err != nil {
				return nil, err
			}
			if a.Hold {
				entered <- struct{}{}
				<-hold
			}
			return tools.Canonical(`"` + strings.Repeat("<", int(a.N)) + `"`), nil
		}}
	}
}

func reserveBody(id int, n int64, hold bool) string {
	return callBody(id, "HttpFetch", fmt.Sprintf(`{"n":%d,"hold":%v}`, n, hold), "")
}

// free reports whether all of b is free.
func free(b *Budget) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used == 0
}

// TestBudgetRefusalIsAudited: a call needing more than the invocation's
// budget is refused with -32603 memory_budget, its started row is closed
// and a skill.tool_denied row records the reason, as for every refusal.
func TestBudgetRefusalIsAudited(t *testing.T) {
	e := startEnv(t, reserveTool(nil, nil), func(c *Config) { c.InvocationBudget = 1 << 20 })
	c := e.dial()
	r := c.rpc(reserveBody(1, 2<<20, false))
	if r.Error == nil || r.Error.Code != -32603 || r.reason() != "memory_budget" {
		t.Fatalf("a call over the budget: %+v", r.Error)
	}
	if !strings.Contains(r.Error.Data.Detail, "the invocation's 1 MiB budget") {
		t.Errorf("detail %q does not say which budget", r.Error.Data.Detail)
	}
	denied := e.audit.kind(audit.KindToolDenied)
	if len(denied) != 1 || denied[0].str("reason") != "memory_budget" {
		t.Fatalf("tool_denied rows %+v", denied)
	}
	if s, co := e.audit.kind(audit.KindToolCallStarted), e.audit.kind(audit.KindToolCallCompleted); len(s) != 1 || len(co) != 1 {
		t.Fatalf("started %d, completed %d rows, want one pair", len(s), len(co))
	}
	// Within the budget the same call runs, and gives everything back.
	if r := c.rpc(reserveBody(2, 512<<10, false)); r.Error != nil || len(r.Result) != 512<<10+2 {
		t.Fatalf("a call within the budget: %+v", r.Error)
	}
	// Given back once the response is written, which the client may see
	// first.
	testutil.WaitFor(t, 5*time.Second, func() bool { return free(e.b.d.invMem) })
}

// TestBudgetWaitsForTheBytes: a call finding the budget spent waits until
// the holder's response is written, then runs; the daemon's budget, shared
// by two brokers, is held and given back the same way.
func TestBudgetWaitsForTheBytes(t *testing.T) {
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	daemon := NewBudget(1<<20, "the daemon's")
	e := startEnv(t, reserveTool(hold, entered), func(c *Config) { c.Budget = daemon })
	other := startEnv(t, reserveTool(nil, nil), func(c *Config) { c.Budget = daemon })
	a, b := e.dial(), other.dial()
	a.send([]byte(reserveBody(1, 800<<10, true)))
	<-entered
	b.send([]byte(reserveBody(2, 800<<10, false)))
	if _, err := b.tryRecv(200 * time.Millisecond); err == nil {
		t.Fatal("the second call ran while the daemon's budget was spent")
	}
	close(hold)
	if r := decodeWire(t, a.recv()); r.Error != nil {
		t.Fatalf("holder: %+v", r.Error)
	}
	if r := decodeWire(t, b.recv()); r.Error != nil {
		t.Fatalf("waiter: %+v", r.Error)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return free(daemon) })
}

// TestBudgetBatchDoesNotWaitOnItself: in a batch, a call does not wait for
// bytes its own frame holds (they go back only once the frame is written):
// it is refused at once.
func TestBudgetBatchDoesNotWaitOnItself(t *testing.T) {
	e := startEnv(t, reserveTool(nil, nil), func(c *Config) { c.InvocationBudget = 1 << 20 })
	c := e.dial()
	start := time.Now()
	c.send([]byte("[" + reserveBody(1, 800<<10, false) + "," + reserveBody(2, 800<<10, false) + "]"))
	var rs []wireResponse
	if err := json.Unmarshal(c.recv(), &rs); err != nil || len(rs) != 2 {
		t.Fatalf("batch response: %v", err)
	}
	if rs[0].Error != nil || rs[1].reason() != "memory_budget" {
		t.Fatalf("batch: first %+v, second %+v; want a result, then memory_budget", rs[0].Error, rs[1].Error)
	}
	if d := time.Since(start); d >= BudgetWait {
		t.Errorf("the batch's second call waited %v", d)
	}
	testutil.WaitFor(t, 5*time.Second, func() bool { return free(e.b.d.invMem) })
}

// TestTakeWaitsBoundedAndAllOrNothing: take waits for room up to its
// context, and on failure holds nothing of any budget.
func TestTakeWaitsBoundedAndAllOrNothing(t *testing.T) {
	inv, daemon := NewBudget(100, "the invocation's"), NewBudget(100, "the daemon's")
	if _, err := take(context.Background(), 60, true, inv, daemon); err != nil {
		t.Fatal(err)
	}
	inv2 := NewBudget(100, "another invocation's")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	b, err := take(ctx, 60, true, inv2, daemon)
	if err == nil || b != daemon {
		t.Fatalf("take over the daemon's budget: %v from %v", err, b)
	}
	if !free(inv2) {
		t.Error("a failed take kept the first budget's bytes")
	}
	if b, err := take(context.Background(), 101, true, inv2); err == nil || b != inv2 {
		t.Errorf("take of more than a budget's size: %v", err)
	}
	if _, err := take(context.Background(), 60, false, inv2, daemon); !errors.Is(err, errBudgetWait) {
		t.Errorf("take without waiting: %v, want errBudgetWait", err)
	}
	// Not first-come first-served: while 60 bytes wait, 40 are taken.
	waiting := make(chan error, 1)
	go func() {
		_, err := take(context.Background(), 60, true, daemon)
		waiting <- err
	}()
	if _, err := take(context.Background(), 40, false, daemon); err != nil {
		t.Errorf("a small take behind a waiting large one: %v", err)
	}
	give(40, daemon)
	give(60, inv, daemon)
	if err := <-waiting; err != nil {
		t.Fatalf("the waiting take: %v", err)
	}
	give(60, daemon)
	if !free(inv) || !free(daemon) {
		t.Error("give did not return the bytes")
	}
}

// TestCanonicalResultSentAsIs: a tools.Canonical result reaches the skill
// byte for byte ('<' unescaped), and its result_hash is the audit's hash
// of it.
func TestCanonicalResultSentAsIs(t *testing.T) {
	e := startEnv(t, reserveTool(nil, nil))
	c := e.dial()
	c.send([]byte(reserveBody(7, 1000, false)))
	raw := c.recv()
	want := `{"jsonrpc":"2.0","id":7,"result":"` + strings.Repeat("<", 1000) + `"}`
	if string(raw) != want {
		t.Fatalf("response %.100s…, want the result unescaped in its envelope", raw)
	}
	co := e.audit.kind(audit.KindToolCallCompleted)
	if len(co) != 1 || co[0].str("result_hash") != hashOf(t, `"`+strings.Repeat("<", 1000)+`"`) {
		t.Fatalf("result_hash %v", co)
	}
}

// TestResultsAreNotHTMLEscaped: a result the broker encodes itself costs
// one byte for '<', '>' and '&'.
func TestResultsAreNotHTMLEscaped(t *testing.T) {
	raw, canonical, err := marshalResult(map[string]string{"a": "<>&"})
	if err != nil || canonical || !bytes.Equal(raw, []byte(`{"a":"<>&"}`)) {
		t.Fatalf("marshalResult: %s, %v, %v", raw, canonical, err)
	}
}
