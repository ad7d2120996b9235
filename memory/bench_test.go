package memory

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkSearch10k: MemorySearch latency (p50, p95) over 10 000 documents
// of one tenant (and 10 000 of another), a two-word query matching about
// 1 in 10, limit 10, on each backend.
// go test -run '^$' -bench Search10k -benchtime 200x ./memory/
func BenchmarkSearch10k(b *testing.B) {
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name, func(b *testing.B) {
			var s *Store
			if name == "sqlite" {
				var err error
				if s, err = Open(b.TempDir()); err != nil {
					b.Fatal(err)
				}
				defer s.Close()
			} else {
				s = newPGStoreB(b)
			}
			ctx := context.Background()
			words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"}
			for i := range 10000 {
				for _, tenant := range []string{tenantA, tenantB} {
					body := fmt.Sprintf("note %d about %s and %s, with some ordinary words around them", i, words[i%10], words[(i/10)%10])
					if _, err := s.Emit(ctx, Entry{Tenant: tenant, Path: fmt.Sprintf("notes/%05d", i), Body: body, Scopes: all}); err != nil {
						b.Fatal(err)
					}
				}
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				hits, err := s.Search(ctx, tenantA, "alpha beta", all, nil, 10)
				lat = append(lat, time.Since(t0))
				if err != nil || len(hits) != 10 {
					b.Fatalf("%d hits, %v", len(hits), err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
