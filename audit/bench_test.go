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
// one store on the test's temp dir. b.N is the total number of rows.
// Reported: p50/p95/p99 latency of one Emit in ms, rows/s, rows per commit.
func BenchmarkEmit(b *testing.B) {
	for _, emitters := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("emitters=%d", emitters), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			c := Common{InvocationID: "inv", RequestID: "req", SkillID: "bench", TenantID: "t", TraceID: "0af7651916cd43dd8448eb211c80319c"}
			d := ToolCallStarted(c, "call", "Read", zeroHash(7))
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := range emitters {
				wg.Go(func() {
					for i := w; i < b.N; i += emitters {
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
