package auditstore

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit"
)

// writeRows appends n rows (whole invocations of six rows, cut at n) to the
// store in dir through one Store.
func writeRows(b *testing.B, dir string, n int, opts ...Option) {
	b.Helper()
	s, err := Open(dir, append([]Option{WithMaxBatch(4096)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var waits []func() (audit.Row, error)
	flush := func() {
		for _, w := range waits {
			if _, err := w(); err != nil {
				b.Fatal(err)
			}
		}
		waits = waits[:0]
	}
	for i := 0; i < n; {
		for _, d := range invocation("bench-" + strconv.Itoa(i)) {
			if i == n {
				break
			}
			w, err := s.Enqueue(ctx, d)
			if err != nil {
				b.Fatal(err)
			}
			waits = append(waits, w)
			i++
		}
		if len(waits) >= 8192 {
			flush()
		}
	}
	flush()
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpenVerify: Open and Close of a store of a million rows (written
// once; CYBEROS_BENCH_ROWS overrides), where the start-up check verifies
// the rows after the last checkpoint in both copies (the mark of an earlier
// check is removed before each Open). tail=all: no checkpoint (a store only
// `skill run` wrote, at its first start), the whole chain is the tail;
// tail=1000: a checkpoint 1000 rows before the end (the daemon signs one
// every few seconds while rows flow, and at Close). quick_check: the same
// Open with WithIndexCheck, which `serve` adds. scrub: VerifyDir of the
// whole store, what the daemon's background scrub runs.
func BenchmarkOpenVerify(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("CYBEROS_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	dir := b.TempDir()
	writeRows(b, dir, rows)
	noMark := func() { _ = os.Remove(filepath.Join(dir, ReserveDirName, verifiedName)) }
	open := func(b *testing.B, wantTail int64, opts ...Option) {
		b.Helper()
		// CPU time too: on a shared machine it says more than the wall clock.
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		defer func() {
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
			b.ReportMetric(cpu.Seconds(), "cpu-s/op")
		}()
		for range b.N {
			b.StopTimer()
			noMark()
			b.StartTimer()
			s, err := Open(dir, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Damage(); err != nil {
				b.Fatal(err)
			}
			if got := s.StartCheck().Rows; wantTail >= 0 && got != wantTail {
				b.Fatalf("start-up check verified %d rows, want %d", got, wantTail)
			}
			s.Close()
		}
	}
	b.Run(fmt.Sprintf("rows=%d/tail=all", rows), func(b *testing.B) { open(b, int64(rows)) })
	b.Run(fmt.Sprintf("rows=%d/tail=all/quick_check", rows), func(b *testing.B) { open(b, int64(rows), WithIndexCheck()) })
	// What the daemon's background scrub costs (VerifyDir of everything).
	b.Run(fmt.Sprintf("rows=%d/scrub", rows), func(b *testing.B) {
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		for range b.N {
			rep, err := VerifyDir(context.Background(), dir)
			if err != nil || !rep.OK || rep.Rows != rows {
				b.Fatalf("scrub: %v, %+v", err, rep.Problems)
			}
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
		b.ReportMetric(cpu.Seconds(), "cpu-s/op")
	})

	// A checkpoint, then 1000 rows: the Close of a signing store adds
	// one more checkpoint, so the last one is written here by hand.
	_, key, _ := ed25519.GenerateKey(nil)
	signer := audit.NewSigner(key)
	s, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	h, _, _, err := s.readHead()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Emit(context.Background(), signer.CheckpointRow(h.seq, h.hash)); err != nil {
		b.Fatal(err)
	}
	s.Close()
	writeRows(b, dir, 999)
	b.Run(fmt.Sprintf("rows=%d/tail=1000", rows+1000), func(b *testing.B) { open(b, 1000) })
	b.Run(fmt.Sprintf("rows=%d/tail=1000/quick_check", rows+1000), func(b *testing.B) { open(b, 1000, WithIndexCheck()) })
}
