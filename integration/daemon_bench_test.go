//go:build linux

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// BenchmarkDaemon: invocations/s of a trivial skill (prints {}) through
// the real daemon's admin socket at concurrency 1, 8 and 32, with median and
// p95 latency and the machine's CPU time per invocation, for a daemon with
// warm sandboxes (the default config) and one without (warm.max_sandboxes:
// 0, every sandbox cold): metrics c<N>-warm-* and c<N>-cold-*, and cpus, the
// machine's CPU count. First the cold daemon's RSS idle (after 3 warm-up
// invocations) and per active invocation (32 sleeping skills, ended early
// by their deadline). One round (-benchtime 1x) is the whole measurement:
//
//	go test -tags seccomp -run '^$' -bench BenchmarkDaemon -benchtime 1x ./integration/
func BenchmarkDaemon(b *testing.B) {
	e := newEnv(b)
	e.skill("trivial", "", "#!/bin/sh\necho '{}'\n")
	e.skill("sleeper", "effort_minutes: 1\n", "#!/bin/sh\nsleep 30\n")
	b.ReportMetric(float64(runtime.NumCPU()), "cpus")
	for i := 0; i < b.N; i++ {
		for _, mode := range []string{"cold", "warm"} {
			extra := []string{"shutdown_grace: 0s"}
			if mode == "cold" {
				extra = append(extra, "warm: {max_sandboxes: 0}")
			}
			d := startDaemon(b, e, extra...)
			// Warm up: the rootfs skeleton, the store, page cache (and the
			// skill's first warm sandboxes).
			for j := 0; j < 3; j++ {
				if code, env, raw := d.invoke(map[string]any{"skill_id": "trivial"}); code != 200 || env.Outcome != "success" {
					b.Fatalf("warm-up: %d %s", code, raw)
				}
			}
			if mode == "cold" {
				// Idle: the warm-up's sandboxes torn down.
				waitFor(b, 30*time.Second, func() bool { return len(envProcs(e)) == 0 && len(envCgroups(e)) == 0 })
				daemonRSS(b, d)
			} else { // warmReady waits for the pool to settle
				warmReady(b, d)
			}
			for _, conc := range []int{1, 8, 32} {
				daemonRate(b, d, mode, conc)
			}
			d.stop(60 * time.Second) // ends the sleepers through the timeout path
		}
	}
}

// daemonRSS reports d's RSS idle and per active invocation.
func daemonRSS(b *testing.B, d *daemonProc) {
	idle := vmRSS(b, d.cmd.Process.Pid)
	const k = 32
	for j := 0; j < k; j++ {
		go d.invoke(map[string]any{"skill_id": "sleeper", "deadline_ms": 15000})
	}
	waitFor(b, 60*time.Second, func() bool { return d.status().ActiveInvocations == k })
	// Every sandbox up and waiting: its skill's sleep(1) running.
	waitFor(b, 60*time.Second, func() bool {
		n := 0
		for _, pid := range envProcs(d.e) {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); string(comm) == "sleep\n" {
				n++
			}
		}
		return n == k
	})
	busy := vmRSS(b, d.cmd.Process.Pid)
	b.ReportMetric(float64(idle)/1024, "idle-RSS-MiB")
	b.ReportMetric(float64(busy-idle)/k, "RSS-KiB/active-inv")
	waitFor(b, 90*time.Second, func() bool { return d.status().ActiveInvocations == 0 })
}

// warmReady reports the latency of invocations that each find a warm
// sandbox ready (an agent calling a skill in a loop with think time between
// calls): before each, the pool is back to the size it settled at after
// the warm-up, so no refill of the previous call's sandbox runs beside it.
func warmReady(b *testing.B, d *daemonProc) {
	var lat []time.Duration
	const ready = `cyberos_warm_sandboxes{skill_id="trivial"}`
	full := stableGauge(b, d, ready)
	for range 24 {
		waitFor(b, 10*time.Second, func() bool { return d.gauge(ready) >= full })
		s := time.Now()
		code, _, raw := d.invoke(map[string]any{"skill_id": "trivial"})
		el := time.Since(s)
		var env warmEnvelope
		if code != 200 || json.Unmarshal([]byte(raw), &env) != nil || env.Outcome != "success" || env.Containment["start"] != "warm" {
			b.Fatalf("warm-ready invocation: %d %s", code, raw)
		}
		lat = append(lat, el)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "c1-warm-ready-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "c1-warm-ready-p95-ms")
}

// stableGauge waits until series has kept one value for a second and
// returns it.
func stableGauge(b *testing.B, d *daemonProc, series string) float64 {
	last, since := d.gauge(series), time.Now()
	waitFor(b, 30*time.Second, func() bool {
		if v := d.gauge(series); v != last {
			last, since = v, time.Now()
		}
		return time.Since(since) >= time.Second
	})
	return last
}

// gauge reads one series' value from the daemon's /metrics (-1 if absent).
func (d *daemonProc) gauge(series string) float64 {
	resp, err := http.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// daemonRate runs max(24, 3*conc) trivial invocations from conc callers
// and reports their rate, their latency and the machine's busy CPU time
// (every process, the kernel and these callers included) per invocation:
// what bounds the rate once the CPUs are saturated.
func daemonRate(b *testing.B, d *daemonProc, mode string, conc int) {
	total := max(24, 3*conc)
	lat := make([]time.Duration, 0, total)
	var mu sync.Mutex
	next := make(chan struct{}, total)
	for j := 0; j < total; j++ {
		next <- struct{}{}
	}
	close(next)
	cpu0, t0 := testutil.BusyCPU(b), time.Now()
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				s := time.Now()
				code, env, raw := d.invoke(map[string]any{"skill_id": "trivial"})
				if code != 200 || env.Outcome != "success" {
					b.Errorf("%s c=%d: %d %s", mode, conc, code, raw)
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(s))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el, cpu := time.Since(t0), testutil.BusyCPU(b)-cpu0
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/el.Seconds(), fmt.Sprintf("c%d-%s-inv/s", conc, mode))
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, fmt.Sprintf("c%d-%s-p50-ms", conc, mode))
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, fmt.Sprintf("c%d-%s-p95-ms", conc, mode))
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(lat)), fmt.Sprintf("c%d-%s-cpu-ms", conc, mode))
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
