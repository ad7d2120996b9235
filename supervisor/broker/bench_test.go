package broker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/skillclient"
)

// discardAudit accepts every row, as fast as a sink can.
type discardAudit struct{}

func (discardAudit) Emit(_ context.Context, d audit.Draft) (audit.Row, error) {
	return audit.Row{Kind: d.Kind}, nil
}

// BenchmarkNoopCall is the broker's own cost per tool call: a no-op tool
// over the real socket through skillclient, with enforcement, args and
// result hashing, two audit rows (to a sink that discards them) and
// metrics. Reports calls/s and the p50/p99 round trip.
func BenchmarkNoopCall(b *testing.B) {
	e := startEnv(b, func(c *Config) { c.Audit = discardAudit{} })
	c, err := skillclient.Dial(e.b.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	args := map[string]string{"path": "memories/projects/cyberos/notes/x.md"}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		t0 := time.Now()
		if err := c.Call(ctx, "MemoryRead", args, nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
