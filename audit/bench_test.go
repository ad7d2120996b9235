package audit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkEmit measures durable Emit latency (each call returns after its
// row's commit is fsynced) with 1, 10 and 100 concurrent emitters sharing
// one fresh store in the test's temp dir, each emitter calling Emit in a
// loop. b.N is the total number of rows. Reported: p50/p95/p99 latency of
// one Emit in ms, rows/s, and rows per commit (the group-commit factor).
// `make bench-audit`-style run: go test -run '^$' -bench Emit -benchtime 2000x ./audit/
func BenchmarkEmit(b *testing.B) {
	for _, emitters := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("emitters=%d", emitters), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range emitters {
				wg.Go(func() {
					// Each emitter is one invocation making tool calls: a
					// started and a completed row per call, built per row
					// as the broker would.
					c := common(fmt.Sprintf("01HZKBENCH%06d", w))
					for i := w; i < b.N; i += emitters {
						call := fmt.Sprint(i / 2)
						d := ToolCallStarted(c, call, "MemoryRead", zeroHash(i))
						if i%2 == 1 {
							d = ToolCallCompleted(c, call, "MemoryRead", OutcomeSuccess, 3, zeroHash(i), "")
						}
						t0 := time.Now()
						if _, err := s.Emit(ctx, d); err != nil {
							b.Error(err)
							return
						}
						lat[i] = time.Since(t0)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			b.ReportMetric(float64(b.N)/float64(max(s.commits.Load(), 1)), "rows/commit")
		})
	}
}
