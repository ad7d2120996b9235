package auditstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
	"cyberos.dev/audit/internal/canonref"
)

// BenchmarkEmit measures durable Emit latency (each call returns after its
// row's commit is fdatasynced) with 1, 10 and 100 concurrent emitters
// sharing one fresh store in the test's temp dir, each emitter calling Emit
// in a loop. b.N is the total number of rows. Reported: p50/p95/p99
// latency of one Emit in ms, rows/s, and rows per commit (the group-commit
// factor). `make bench` runs, three times in a row (so each round has the
// store and its references, below, within half a minute of each other),
// and prints the medians and the store/floor ratios
// (scripts/emit-summary.awk):
// go test -run '^$' -bench BenchmarkEmit -benchtime 40000x -count 1 ./audit/auditstore/
//
// Why 40 000 rows: at 100 emitters the rows of one commit (about 100) share
// one latency, so a run of 4 000 rows is some 40 commits and its p95 is
// that of its second slowest commit; the release of all emitters at once
// (the first commit takes one row or a few, the next the rest) is a few
// percent of it. 40 000 rows is some 400 commits, and takes the store
// through what a daemon under this load meets every few thousand rows: the
// journal growing by a chunk (journalChunk of written zeros in one
// fdatasync: that commit's rows wait 8–10 ms here), the index applier's
// first run (maxPendingRows) and the collector at the working heap. Those
// show in p99, not p95.
func BenchmarkEmit(b *testing.B) {
	for _, emitters := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("emitters=%d", emitters), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			closedLoop(b, emitters, func(d audit.Draft) error {
				_, err := s.Emit(ctx, d)
				return err
			})
			b.ReportMetric(float64(b.N)/float64(max(s.commits.Load(), 1)), "rows/commit")
		})
	}
}

// BenchmarkEmitCanon asks whether the builders' own RFC 8785 encoder
// (payload, appendJCSString) matters end to end: durable Emit latency at
// 100 concurrent emitters through the real store, as BenchmarkEmit, once
// with the production builders ("builders") and once with the same drafts
// built through encoding/json + jcs.Transform ("library", see
// canonref.Builders; TestLibraryCanonicalMatchesBuilders holds the bytes
// equal). `make bench` prints the p95 ratio builders/library:
// go test -run '^$' -bench BenchmarkEmitCanon -benchtime 20000x -count 3 ./audit/auditstore/
func BenchmarkEmitCanon(b *testing.B) {
	for _, v := range []struct {
		name  string
		canon func(map[string]any) ([]byte, error)
	}{{"builders", nil}, {"library", canonref.JCS}} {
		b.Run(v.name, func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			canonref.Builders = v.canon
			defer func() { canonref.Builders = nil }()
			ctx := context.Background()
			closedLoop(b, 100, func(d audit.Draft) error {
				_, err := s.Emit(ctx, d)
				return err
			})
			b.ReportMetric(float64(b.N)/float64(max(s.commits.Load(), 1)), "rows/commit")
		})
	}
}

// BenchmarkEmitFloor is the reference for BenchmarkEmit, same run: the same
// emitters building the same drafts, but the least a durable group commit
// can do on this disk instead of the store: append the payload to a shared
// buffer under a mutex, and one goroutine writes each buffer to a
// preallocated file with one write and one fdatasync, then wakes its
// emitters and, as the store's syncer does (Store.letEmittersRun), lets
// them run again before it takes the next buffer. No chain, no hashing, no
// journal lines, no index. Whatever BenchmarkEmit spends above this is the
// store's; the rest is the disk and the scheduler of this machine.
func BenchmarkEmitFloor(b *testing.B) {
	for _, emitters := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("emitters=%d", emitters), func(b *testing.B) {
			f := newFloorLog(b)
			closedLoop(b, emitters, f.emit)
		})
	}
}

// BenchmarkEmitFlush is the disk's own figure, same run: one goroutine
// writes 16 KiB (a batch of about 30 rows) to a preallocated file and
// fdatasyncs it, b.N times; p50/p95/p99 of one write+fdatasync. An emitter
// among 100 waits for one of these, its batch's, once the emitters woken
// with it have run again (see Store.letEmittersRun), plus the chaining and
// the scheduling of the emitters; when BenchmarkEmit and its floor move
// between runs and this does not, it was the CPU side (this machine's
// vCPUs), not the disk.
func BenchmarkEmitFlush(b *testing.B) {
	f := preallocated(b)
	buf := make([]byte, 16<<10)
	for i := range buf {
		buf[i] = 'x'
	}
	lat := make([]time.Duration, 0, b.N)
	var off int64
	for b.Loop() {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, off%(15<<20)); err != nil {
			b.Fatal(err)
		}
		if err := statedir.Datasync(f); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		off += int64(len(buf))
	}
	reportLatency(b, lat)
}

// preallocated returns a 16 MiB file of written zeros in the test's temp
// dir, as the journal preallocates its space.
func preallocated(b *testing.B) *os.File {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if _, err := f.WriteAt(make([]byte, 16<<20), 0); err != nil {
		b.Fatal(err)
	}
	if err := statedir.Datasync(f); err != nil {
		b.Fatal(err)
	}
	return f
}

// closedLoop runs b.N emits from emitters goroutines, each in a loop, and
// reports p50/p95/p99 latency of one emit and rows/s. Each emitter is one
// invocation making tool calls: a started and a completed row per call,
// built per row as the broker would, outside the timed call. Steady state:
// each emitter first emits warmupRows untimed rows (a fresh store's and the
// runtime's first-use costs: heap growth, pools, the first appends), then
// all start the timed loop together.
func closedLoop(b *testing.B, emitters int, emit func(audit.Draft) error) {
	const warmupRows = 5
	lat := make([]time.Duration, b.N)
	var wg, warm sync.WaitGroup
	go1 := make(chan struct{})
	warm.Add(emitters)
	for w := range emitters {
		wg.Go(func() {
			c := common(fmt.Sprintf("01HZKBENCH%06d", w))
			for i := range warmupRows {
				if err := emit(audit.NoConnect(c, int64(i))); err != nil {
					b.Error(err)
				}
			}
			warm.Done()
			<-go1
			for i := w; i < b.N; i += emitters {
				call := fmt.Sprint(i / 2)
				d := audit.ToolCallStarted(c, call, "MemoryRead", zeroHash(i))
				if i%2 == 1 {
					d = audit.ToolCallCompleted(c, call, "MemoryRead", audit.OutcomeSuccess, 3, zeroHash(i), "")
				}
				t0 := time.Now()
				if err := emit(d); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	warm.Wait()
	b.ResetTimer()
	start := time.Now()
	close(go1)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatency(b, lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
}

// reportLatency reports the p50, p95 and p99 of lat in ms.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*p))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// floorLog is BenchmarkEmitFloor's minimal group commit.
type floorLog struct {
	mu    sync.Mutex
	cur   *floorBatch
	ready chan struct{}
}

type floorBatch struct {
	buf  []byte
	done chan struct{}
	err  error

	waiters int32         // emitters waiting for buf (under floorLog.mu)
	resumed atomic.Int32  // of those, how many have run again since done
	ran     chan struct{} // closed by the last of them
}

func newFloorBatch() *floorBatch {
	return &floorBatch{done: make(chan struct{}), ran: make(chan struct{})}
}

func newFloorLog(b *testing.B) *floorLog {
	f := preallocated(b)
	l := &floorLog{cur: newFloorBatch(), ready: make(chan struct{}, 1)}
	stop, stopped := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop); <-stopped })
	go func() {
		defer close(stopped)
		var off int64
		resume := time.NewTimer(time.Hour)
		resume.Stop()
		for {
			l.mu.Lock()
			for len(l.cur.buf) == 0 {
				l.mu.Unlock()
				select {
				case <-l.ready:
				case <-stop:
					return
				}
				l.mu.Lock()
			}
			bt := l.cur
			l.cur = newFloorBatch()
			l.mu.Unlock()
			if _, bt.err = f.WriteAt(bt.buf, off%(15<<20)); bt.err == nil {
				bt.err = statedir.Datasync(f)
			}
			off += int64(len(bt.buf))
			close(bt.done)
			if bt.waiters < 2 {
				runtime.Gosched()
				continue
			}
			resume.Reset(resumeWait)
			select {
			case <-bt.ran:
			case <-resume.C:
			}
			resume.Stop()
		}
	}()
	return l
}

func (l *floorLog) emit(d audit.Draft) error {
	l.mu.Lock()
	bt := l.cur
	first := len(bt.buf) == 0
	bt.buf = append(bt.buf, d.Payload...)
	bt.buf = append(bt.buf, '\n')
	bt.waiters++
	l.mu.Unlock()
	if first {
		select {
		case l.ready <- struct{}{}:
		default:
		}
	}
	<-bt.done
	if bt.resumed.Add(1) == bt.waiters {
		close(bt.ran)
	}
	return bt.err
}

// BenchmarkChain measures the syncer's work between two fdatasyncs for a
// batch of 50 rows (100 emitters put 50 to 100 in one append): seq, row
// ids, the hashes' suffixes and the journal lines. Every emitter waiting
// for the next append waits for it too.
func BenchmarkChain(b *testing.B) {
	s := openStore(b, b.TempDir())
	c := common("01HZKBENCH000001")
	slots := make([]slot, 50)
	for i := range slots {
		var err error
		if slots[i], err = prepare(audit.ToolCallStarted(c, fmt.Sprint(i), "MemoryRead", zeroHash(i))); err != nil {
			b.Fatal(err)
		}
	}
	var buf []byte
	for b.Loop() {
		var err error
		if _, buf, err = s.chain(slots, head{1, audit.GenesisHash}, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFdatasync is the disk's side of the journal's layout (see
// journal): one 4 KiB write and fdatasync, b.N times, into a preallocated
// file ("overwrite", what the journal does), the same with an fstat
// between two appends ("overwrite+stat", what appendPoint avoids), and
// appending to a file that grows ("grow", what preallocation avoids).
// Reported: p50/p95/p99 of one write+fdatasync.
func BenchmarkFdatasync(b *testing.B) {
	buf := bytes.Repeat([]byte{'x'}, 4<<10)
	for _, mode := range []string{"overwrite", "overwrite+stat", "grow"} {
		b.Run(mode, func(b *testing.B) {
			var f *os.File
			if mode == "grow" {
				var err error
				if f, err = os.OpenFile(filepath.Join(b.TempDir(), "grow"), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { f.Close() })
			} else {
				f = preallocated(b)
			}
			lat := make([]time.Duration, 0, b.N)
			var off int64
			for b.Loop() {
				if mode == "overwrite+stat" {
					if _, err := f.Stat(); err != nil {
						b.Fatal(err)
					}
				}
				t0 := time.Now()
				if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if err := statedir.Datasync(f); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if off += int64(len(buf)); mode != "grow" {
					off %= 15 << 20
				}
			}
			reportLatency(b, lat)
		})
	}
}

// BenchmarkApply measures the index applier's work per row (see applyIdle):
// each iteration enqueues a batch of tool-call rows, untimed, waits until
// they are durable, then times catchUp, which applies them to the index in
// one transaction. Batches of 500 rows, and of half maxPendingRows, near
// what a busy writer hands over at once (at maxPendingRows the background
// applier would start on its own). Reported: µs of apply per row.
func BenchmarkApply(b *testing.B) {
	for _, rows := range []int{500, maxPendingRows / 2} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) { benchApply(b, rows) })
	}
}

func benchApply(b *testing.B, rows int) {
	s := openStore(b, b.TempDir())
	ctx := context.Background()
	c := common("01HZKBENCH000001")
	var applying time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		waits := make([]func() (audit.Row, error), rows)
		for i := range waits {
			var err error
			if waits[i], err = s.Enqueue(ctx, audit.ToolCallStarted(c, fmt.Sprint(n), "MemoryRead", zeroHash(n))); err != nil {
				b.Fatal(err)
			}
			n++
		}
		for _, w := range waits {
			if _, err := w(); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		t0 := time.Now()
		if err := s.catchUp(ctx); err != nil {
			b.Fatal(err)
		}
		applying += time.Since(t0)
	}
	b.ReportMetric(float64(applying.Microseconds())/float64(n), "us/row")
}
