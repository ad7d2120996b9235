package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests below run in a synctest bubble: synctest.Wait returns once
// every goroutine they started is blocked, and a sleep moves the bubble's
// clock, so a timer has fired or not, with nothing left to chance.

// TestStartGateBoundsAndQueues: no more than the bound hold a slot; a
// waiter gets one as soon as a holder leaves; leave is idempotent.
func TestStartGateBoundsAndQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newStartGate(2)
		ctx := context.Background()
		stop := make(chan struct{})
		l1, err1 := g.enter(ctx, stop)
		l2, err2 := g.enter(ctx, stop)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		got := make(chan func(), 1)
		go func() {
			l, err := g.enter(ctx, stop)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait() // the third caller waits in enter
		select {
		case <-got:
			t.Fatal("a third caller got a slot while two were held")
		default:
		}
		l1()
		l1() // a second call frees nothing more
		synctest.Wait()
		var l3 func()
		select {
		case l3 = <-got:
		default:
			t.Fatal("the waiter did not get the freed slot")
		}
		if len(g) != 2 {
			t.Errorf("%d slots held, want 2", len(g))
		}
		l2()
		l3()
		if len(g) != 0 {
			t.Errorf("%d slots held after every leave, want 0", len(g))
		}
	})
}

// TestStartGateCallerGivesUp: a waiter whose request ends, or whose wait
// the shutdown ends, leaves the line without a slot; the holders keep theirs.
func TestStartGateCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newStartGate(1)
		stop := make(chan struct{})
		hold, err := g.enter(context.Background(), stop)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			leave, err := g.enter(ctx, stop)
			leave() // a no-op without a slot
			res <- err
		}()
		synctest.Wait() // the caller waits in enter
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("gave up: err %v, want context.Canceled", err)
		}
		go func() {
			_, err := g.enter(context.Background(), stop)
			res <- err
		}()
		synctest.Wait()
		close(stop)
		if err := <-res; !errors.Is(err, errStopping) {
			t.Fatalf("shutdown: err %v, want errStopping", err)
		}
		if len(g) != 1 {
			t.Fatalf("%d slots held, want the holder's 1", len(g))
		}
		hold()
		if len(g) != 0 {
			t.Fatalf("%d slots held after the holder left", len(g))
		}
	})
}

// TestScavengeAfterBurst: the memory is handed back once after a burst
// falls to a quarter of its peak, not after small peaks, and not while a
// new burst runs.
func TestScavengeAfterBurst(t *testing.T) {
	synctest.Test(t, testScavengeAfterBurst)
}

func testScavengeAfterBurst(t *testing.T) {
	var calls atomic.Int32
	s := newScavenger()
	s.free = func() { calls.Add(1) }
	s.delay = 10 * time.Millisecond
	// pastDelay moves the bubble's clock past a scavenge falling due and
	// waits for its timer's function to return.
	pastDelay := func() {
		time.Sleep(2 * s.delay)
		synctest.Wait()
	}
	var cur atomic.Int64
	run := func(peak int64) {
		for n := int64(1); n <= peak; n++ {
			cur.Store(n)
			s.admitted(n)
		}
		for n := peak - 1; n >= 0; n-- {
			cur.Store(n)
			s.ended(n, cur.Load)
		}
	}
	run(burstMin - 1)
	pastDelay()
	if c := calls.Load(); c != 0 {
		t.Fatalf("%d scavenges after a peak of %d, want none", c, burstMin-1)
	}
	run(100)
	pastDelay()
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d scavenges after a burst, want 1", c)
	}
	// The peak was reset: quiet traffic scavenges no more.
	run(2)
	pastDelay()
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d scavenges after quiet traffic, want still 1", c)
	}
	// A burst that has fallen to a quarter but grew again when the
	// scavenge fell due is not interrupted.
	for n := int64(1); n <= 64; n++ {
		s.admitted(n)
	}
	cur.Store(10)
	s.ended(10, cur.Load)
	cur.Store(60)
	pastDelay()
	if c := calls.Load(); c != 1 {
		t.Fatalf("%d scavenges while a new burst ran, want still 1", c)
	}
	cur.Store(0)
	s.ended(0, cur.Load)
	pastDelay()
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d scavenges after the second burst, want 2", c)
	}
}
