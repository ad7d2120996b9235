package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// BenchmarkShip: rows shipped per second from a journal holding 4 000 rows
// (2 000 invocations) to a local PostgreSQL (fsync off, as the test server
// runs), in batches of DefaultShipBatch, as the daemon ships.
// go test -run '^$' -bench Ship -benchtime 3x ./fleet/
func BenchmarkShip(b *testing.B) {
	pg := testutil.StartPostgres(b)
	st := benchStore(b)
	var wg sync.WaitGroup
	for w := 0; w < 20; w++ { // concurrent emitters share fdatasyncs
		wg.Add(1)
		go func() { defer wg.Done(); emitB(b, st, "11111111-1111-1111-1111-111111111111", 100) }()
	}
	wg.Wait()
	var rate []float64
	for i := 0; i < b.N; i++ {
		pool := newFleetDB(b, pg, "bench"+string(rune('a'+i))).host("host-a")
		sh := &Shipper{Pool: pool, HostID: "host-a", Source: st}
		t0 := time.Now()
		if err := sh.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		rate = append(rate, 4000/time.Since(t0).Seconds())
		pool.Close()
	}
	var sum float64
	for _, r := range rate {
		sum += r
	}
	b.ReportMetric(sum/float64(len(rate)), "rows/s")
	b.ReportMetric(0, "ns/op")
}
