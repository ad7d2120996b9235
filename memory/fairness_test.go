package memory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"cyberos.dev/internal/testutil"
)

// heavyBody is a note of about n bytes in which "needle" occurs throughout,
// among a vocabulary small enough for any full-text index.
func heavyBody(i, n int) string {
	var b strings.Builder
	for j := 0; b.Len() < n-64; j++ {
		fmt.Fprintf(&b, "needle w%04d n%d ", j%1000, i)
	}
	return b.String()
}

// One tenant's heavy searches do not stall another's memory: with 100
// notes of about 1 MB and six concurrent MemorySearch calls of limit 100
// running for the heavy tenant, another tenant's trivial search answers
// within 100 ms at the 95th percentile of 20, on both backends.
func TestTenantSearchFairness(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		t0 := time.Now()
		for i := range 100 {
			if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: fmt.Sprintf("notes/big%03d", i),
				Body: heavyBody(i, 900_000), Scopes: all}); err != nil {
				t.Fatalf("emit note %d: %v", i, err)
			}
		}
		emit(t, s, tenantB, "notes/small", "a trivial lightword note")
		t.Logf("100 notes of 900 kB stored in %v", time.Since(t0).Round(time.Millisecond))

		hctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var started, served atomic.Int64
		var mu sync.Mutex
		var heavy []time.Duration
		var heavyErrs []error
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for hctx.Err() == nil {
					started.Add(1)
					t1 := time.Now()
					hits, err := s.Search(hctx, tenantA, "needle", all, nil, 100)
					d := time.Since(t1)
					mu.Lock()
					switch {
					case hctx.Err() != nil: // cut by the end of the test
					case err != nil:
						heavyErrs = append(heavyErrs, err)
					case len(hits) == 100:
						served.Add(1)
					}
					heavy = append(heavy, d)
					mu.Unlock()
				}
			}()
		}
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		// stopHeavy cancels tenant A's searches and waits for them, 30 s
		// at most: a search that cannot be stopped is a failure too.
		stopHeavy := sync.OnceValue(func() bool {
			stop()
			select {
			case <-ended:
				return true
			case <-time.After(30 * time.Second):
				t.Errorf("tenant A's searches still run 30 s after they were cancelled")
				return false
			}
		})
		defer stopHeavy()
		testutil.WaitFor(t, 10*time.Second, func() bool { return started.Load() >= 6 })

		// Tenant B searches until it has 20 answers and tenant A has had
		// at least six searches answered meanwhile (or 60 s have passed).
		var lat []time.Duration
		deadline := time.Now().Add(60 * time.Second)
		for (len(lat) < 20 || served.Load() < 6) && time.Now().Before(deadline) {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			t1 := time.Now()
			hits, err := s.Search(lctx, tenantB, "lightword", all, nil, 10)
			lat = append(lat, time.Since(t1))
			cancel()
			if err != nil || len(hits) != 1 {
				t.Fatalf("tenant B's search: %d hits, %v", len(hits), err)
			}
		}
		if !stopHeavy() {
			return
		}
		slices.Sort(lat)
		slices.Sort(heavy)
		p95 := lat[int(math.Ceil(0.95*float64(len(lat))))-1]
		t.Logf("tenant B: %d searches, p50 %v, p95 %v, max %v", len(lat), lat[len(lat)/2], p95, lat[len(lat)-1])
		t.Logf("tenant A: %d searches answered with 100 hits, %d refused (%v), longest %v",
			served.Load(), len(heavyErrs), firstErr(heavyErrs), heavy[len(heavy)-1])
		if len(lat) < 20 {
			t.Fatalf("only %d of tenant B's searches within 60 s", len(lat))
		}
		switch {
		case raceEnabled:
			// The race pass looks for data races in the same scenario; the
			// bound is the plain pass's (make test runs both).
			t.Logf("race detector on: the 100ms bound is asserted in the plain pass")
		case p95 > 100*time.Millisecond:
			t.Errorf("tenant B's search p95 is %v while tenant A searches, want under 100ms", p95)
		}
		if served.Load() == 0 {
			t.Errorf("no search of tenant A was answered")
		}
		if heavy[len(heavy)-1] > 10*time.Second {
			t.Errorf("a search of tenant A took %v, want its work bounded (under 10 s)", heavy[len(heavy)-1])
		}
	})
}

func firstErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[0]
}

// One tenant's concurrent invocations cannot write without bound: 21
// writers of tenant A get no more than the configured burst and rate
// through, and tenant B still writes meanwhile.
func TestTenantWriteRate(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for w := range 21 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 {
					_, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: fmt.Sprintf("flood/%02d/%03d", w, i), Body: "x", Scopes: all})
					if errors.Is(err, ErrRateLimited) {
						refused.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("emit: %v, want nil or ErrRateLimited", err)
						return
					}
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(t0)
		emit(t, s, tenantB, "notes/b", "tenant B still writes")
		l := DefaultLimits()
		allowed := float64(l.WriteBurst) + l.WritesPerSecond*elapsed.Seconds()
		t.Logf("tenant A: %d writes accepted, %d refused in %v (allowed %.0f)", ok.Load(), refused.Load(), elapsed, allowed)
		if float64(ok.Load()) > allowed+1 {
			t.Errorf("tenant A wrote %d notes in %v, over the bound of %.0f", ok.Load(), elapsed, allowed)
		}
	})
}

// A tenant's calls beyond its concurrency wait for a slot, at most the
// statement timeout, then are ErrTimeout; another tenant is not held up.
func TestTenantConcurrencyBound(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		emit(t, s, tenantA, "notes/a", "alpha")
		emit(t, s, tenantB, "notes/b", "beta")
		if err := s.SetLimits(Limits{TenantConcurrency: 1, StatementTimeout: 300 * time.Millisecond,
			WritesPerSecond: 10, WriteBurst: 10}); err != nil {
			t.Fatal(err)
		}
		hold, held := make(chan struct{}), make(chan struct{})
		go s.do(ctx, tenantA, "hold", false, func(context.Context) error { close(held); <-hold; return nil })
		<-held
		t0 := time.Now()
		_, err := s.Search(ctx, tenantA, "alpha", all, nil, 10)
		if !errors.Is(err, ErrTimeout) || time.Since(t0) < 300*time.Millisecond {
			t.Errorf("tenant A's second call: %v after %v, want ErrTimeout after the 300ms statement timeout", err, time.Since(t0))
		}
		if hits, err := s.Search(ctx, tenantB, "beta", all, nil, 10); err != nil || len(hits) != 1 {
			t.Errorf("tenant B while A's slot is held: %d hits, %v", len(hits), err)
		}
		close(hold)
		if hits, err := s.Search(ctx, tenantA, "alpha", all, nil, 10); err != nil || len(hits) != 1 {
			t.Errorf("tenant A once its slot is free: %d hits, %v", len(hits), err)
		}
	})
}

// A statement that runs past the statement timeout is stopped in the
// database and reported as ErrTimeout: SQLite is interrupted, PostgreSQL
// cancels it by its statement_timeout even when the client does not.
func TestStatementTimeout(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		if err := s.SetLimits(Limits{TenantConcurrency: 1, StatementTimeout: 200 * time.Millisecond,
			WritesPerSecond: 10, WriteBurst: 10}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err := s.do(context.Background(), tenantA, "spin", false, func(ctx context.Context) error {
			switch b := s.b.(type) {
			case *sqliteDB:
				var n int64
				err := b.db.QueryRowContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
					SELECT count(*) FROM c`).Scan(&n)
				return dbErr(ctx, "spin", err)
			case *pgDB:
				// A context that never ends: only the server's
				// statement_timeout, set from the deadline, stops the sleep.
				return b.inTenant(deadlineOnly{ctx}, "spin", tenantA, func(tx pgx.Tx) error {
					_, err := tx.Exec(context.Background(), `SELECT pg_sleep(5)`)
					return err
				})
			}
			return nil
		})
		if !errors.Is(err, ErrTimeout) || time.Since(t0) > 3*time.Second {
			t.Errorf("a statement that runs on: %v after %v, want ErrTimeout soon after 200ms", err, time.Since(t0))
		}
	})
}

// deadlineOnly reports ctx's deadline but is never done.
type deadlineOnly struct{ ctx context.Context }

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.ctx.Deadline() }
func (deadlineOnly) Done() <-chan struct{}         { return nil }
func (deadlineOnly) Err() error                    { return nil }
func (deadlineOnly) Value(any) any                 { return nil }
