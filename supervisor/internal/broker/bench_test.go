package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/skillclient"
	"cyberos.dev/supervisor/internal/tools"
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

// BenchmarkDurableCall is BenchmarkNoopCall with every row durable in a
// real auditstore.Store (one fdatasync per append), from 1 and 8 callers on
// their own connections: MemoryRead is effect-free (its rows share the
// reply's append), MemoryEmit is not (its started row is durable before
// it runs). Reports calls/s and appends per call.
func BenchmarkDurableCall(b *testing.B) {
	for _, tool := range []string{"MemoryRead", "MemoryEmit"} {
		for _, callers := range []int{1, 8} {
			b.Run(fmt.Sprintf("tool=%s/callers=%d", tool, callers), func(b *testing.B) {
				store, err := auditstore.Open(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				e := startEnv(b, func(c *Config) {
					c.Audit = store
					c.Env.Enforcer = testEnforcer(b, allToolsSkill)
					for _, t := range c.Tools {
						t.(*fakeTool).fn = func(context.Context, *tools.Call) (any, error) { return struct{}{}, nil }
					}
				})
				clients := make([]*skillclient.Client, callers)
				for i := range clients {
					if clients[i], err = skillclient.Dial(e.b.Path()); err != nil {
						b.Fatal(err)
					}
					defer clients[i].Close()
				}
				ctx := context.Background()
				args := map[string]string{"path": "memories/projects/cyberos/notes/x.md"}
				var next atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(b.N) {
							if err := c.Call(ctx, tool, args, nil); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				e.b.Close()
				rows, err := store.Rows(ctx, auditstore.Filter{InvocationID: e.cfg.Common.InvocationID})
				if err != nil {
					b.Fatal(err)
				}
				ts := map[string]bool{}
				for _, r := range rows {
					ts[r.TS] = true
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
				b.ReportMetric(float64(len(ts))/float64(b.N), "appends/call")
			})
		}
	}
}
