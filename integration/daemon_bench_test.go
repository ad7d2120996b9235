package integration

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkDaemon: invocations/s of a trivial skill (prints {}) through
// the real daemon's admin socket at concurrency 1, 8 and 32, with median and
// p95 latency; first the daemon's RSS idle (after 3 warm-up invocations) and per
// active invocation (32 sleeping skills, ended early by their deadline). One round (-benchtime 1x) is the whole measurement:
//
//	go test -tags seccomp -run '^$' -bench BenchmarkDaemon -benchtime 1x ./integration/
func BenchmarkDaemon(b *testing.B) {
	e := newEnv(b)
	e.skill("trivial", "", "#!/bin/sh\necho '{}'\n")
	e.skill("sleeper", "effort_minutes: 1\n", "#!/bin/sh\nsleep 30\n")
	d := startDaemon(b, e, "shutdown_grace: 0s")
	for i := 0; i < b.N; i++ {
		// Warm up: the rootfs skeleton, the store, page cache.
		for j := 0; j < 3; j++ {
			if code, env, raw := d.invoke(map[string]any{"skill_id": "trivial"}); code != 200 || env.Outcome != "success" {
				b.Fatalf("warm-up: %d %s", code, raw)
			}
		}
		time.Sleep(500 * time.Millisecond)
		idle := vmRSS(b, d.cmd.Process.Pid)
		const k = 32
		for j := 0; j < k; j++ {
			go d.invoke(map[string]any{"skill_id": "sleeper", "deadline_ms": 15000})
		}
		waitFor(b, 60*time.Second, func() bool { return d.status().ActiveInvocations == k })
		time.Sleep(time.Second) // every sandbox up and waiting
		busy := vmRSS(b, d.cmd.Process.Pid)
		b.ReportMetric(float64(idle)/1024, "idle-RSS-MiB")
		b.ReportMetric(float64(busy-idle)/k, "RSS-KiB/active-inv")
		waitFor(b, 90*time.Second, func() bool { return d.status().ActiveInvocations == 0 })
		for _, conc := range []int{1, 8, 32} {
			total := max(24, 3*conc)
			lat := make([]time.Duration, 0, total)
			var mu sync.Mutex
			next := make(chan struct{}, total)
			for j := 0; j < total; j++ {
				next <- struct{}{}
			}
			close(next)
			t0 := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range next {
						s := time.Now()
						code, env, raw := d.invoke(map[string]any{"skill_id": "trivial"})
						if code != 200 || env.Outcome != "success" {
							b.Errorf("c=%d: %d %s", conc, code, raw)
							return
						}
						mu.Lock()
						lat = append(lat, time.Since(s))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			el := time.Since(t0)
			slices.Sort(lat)
			b.ReportMetric(float64(len(lat))/el.Seconds(), fmt.Sprintf("c%d-inv/s", conc))
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, fmt.Sprintf("c%d-p50-ms", conc))
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, fmt.Sprintf("c%d-p95-ms", conc))
		}

		d.stop(60 * time.Second) // ends the sleepers through the timeout path
	}
}

// vmRSS reads VmRSS (KiB) of pid.
func vmRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
