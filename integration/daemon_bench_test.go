//go:build linux

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
)

// BenchmarkDaemon: invocations/s of a trivial skill (prints {}) through
// the real daemon's admin socket at concurrency 1, 8 and 32, with median and
// p95 latency and the machine's CPU time per invocation, for a daemon with
// warm sandboxes (the default config) and one without (warm.max_sandboxes:
// 0, every sandbox cold): metrics c<N>-warm-* and c<N>-cold-*, and cpus, the
// machine's CPU count. First the cold daemon's RSS idle (after 3 warm-up
// invocations) and per active invocation (32 sleeping skills, ended early
// by their deadline). In the warm daemon, the invocations that find a warm
// sandbox ready (warmReady) are also split by the daemon's own histograms
// into the two audit emits, the dispatch and the rest (the daemon's own
// time), beside the floors of the same work measured here: one fork+exec
// of the skill in a held set of namespaces (execFloor), one admin-socket
// round trip (adminRoundTrip) and one fdatasync of an invocation row's
// bytes appended to the daemon's own journal once it has stopped
// (rowSyncFloor). One round (-benchtime 1x) is the whole measurement:
//
//	go test -tags seccomp -run '^$' -bench BenchmarkDaemon -benchtime 1x ./integration/
func BenchmarkDaemon(b *testing.B) {
	e := newEnv(b)
	trivial := e.skill("trivial", "", "#!/bin/sh\necho '{}'\n")
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
			if mode == "warm" {
				adminRoundTrip(b, d)
			}
			for _, conc := range []int{1, 8, 32} {
				daemonRate(b, d, mode, conc)
			}
			d.stop(60 * time.Second) // ends the sleepers through the timeout path
		}
		rowSyncFloor(b, e.stateDir)
		execFloor(b, filepath.Join(trivial, "main"))
	}
}

// Histograms of the daemon's that split one invocation (the _sum series).
const (
	emitStartSum     = `cyberos_audit_emit_duration_seconds_sum{stage="start"}`
	emitCompletedSum = `cyberos_audit_emit_duration_seconds_sum{stage="completed"}`
	dispatchSum      = `cyberos_skill_invocation_duration_seconds_sum{skill_id="trivial"}`
	warmMisses       = `cyberos_warm_claims_total{result="miss",skill_id="trivial"}`
	warmWaited       = `cyberos_warm_claims_total{result="waited",skill_id="trivial"}`
	warmRefillSum    = `cyberos_warm_refill_duration_seconds_sum`
	warmRefillCount  = `cyberos_warm_refill_duration_seconds_count`
)

// sums reads the named series from one scrape of the daemon's /metrics.
func (d *daemonProc) sums(b *testing.B, series ...string) []float64 {
	resp, err := http.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out := make([]float64, len(series))
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if i := slices.Index(series, name); ok && i >= 0 {
			if out[i], err = strconv.ParseFloat(v, 64); err != nil {
				b.Fatal(err)
			}
			found++
		}
	}
	if found != len(series) {
		b.Fatalf("/metrics lacks one of %v", series)
	}
	return out
}

// p50ms is the median of ds in ms.
func p50ms(ds []time.Duration) float64 {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// adminRoundTrip reports the p50 of GET /healthz over d's admin socket,
// the same client and connection reuse as the invocations: the least any
// request to the daemon costs.
func adminRoundTrip(b *testing.B, d *daemonProc) {
	lat := make([]time.Duration, 0, 50)
	for range 50 {
		t0 := time.Now()
		resp, err := d.client.Get("http://cyberos/healthz")
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(p50ms(lat), "admin-rtt-p50-ms")
}

// rowSyncFloor reports one write and fdatasync of an invocation's started
// row (its bytes as the journal holds them) at the end of the stopped
// daemon's own journal in stateDir, as the store appends it; the zeros are
// written back after. Each comes 10 ms after the one before, as a
// daemon's emits come apart: then the write also changes the file's
// mtime, which on some filesystems (ext4 without a journal) makes each
// fdatasync write the inode too. The p50 of those is the disk's share of
// one emit (row-fdatasync-p50-ms); back to back, within one mtime tick,
// the same writes give row-fdatasync-b2b-p50-ms. Also the row's size
// (row-bytes).
func rowSyncFloor(b *testing.B, stateDir string) {
	f, err := os.OpenFile(filepath.Join(stateDir, auditstore.JournalName), os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	body, err := io.ReadAll(f)
	if err != nil {
		b.Fatal(err)
	}
	end := bytes.IndexByte(body, 0)
	if end < 0 {
		b.Fatal("journal has no preallocated zeros after its end")
	}
	var row []byte
	for line := range bytes.Lines(body[:end]) {
		if bytes.Contains(line, []byte(`"skill.invoked_started"`)) {
			row = line
		}
	}
	if row == nil {
		b.Fatal("no skill.invoked_started row in the journal")
	}
	const n = 40 // of each: spaced, back to back
	if len(body)-end < 2*n*len(row) {
		b.Fatalf("journal has %d bytes of zeros, want %d", len(body)-end, 2*n*len(row))
	}
	var spaced, b2b []time.Duration
	at := int64(end)
	for i := range 2 * n {
		if i%2 == 0 {
			time.Sleep(10 * time.Millisecond) // the pause between two emits, not a wait for anything
		}
		t0 := time.Now()
		if _, err := f.WriteAt(row, at); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		if d := time.Since(t0); i%2 == 0 {
			spaced = append(spaced, d)
		} else {
			b2b = append(b2b, d)
		}
		at += int64(len(row))
	}
	if _, err := f.WriteAt(make([]byte, at-int64(end)), int64(end)); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(p50ms(spaced), "row-fdatasync-p50-ms")
	b.ReportMetric(p50ms(b2b), "row-fdatasync-b2b-p50-ms")
	b.ReportMetric(float64(len(row)), "row-bytes")
}

// execFloor reports the p50 of one run of the skill main in a set of
// namespaces made once and held (user, pid, mount, network, ipc, uts,
// cgroup: unshare running a shell), the shell inside them forking and
// executing main for each line it reads, and the test reading main's
// output back: the fork+exec a warm start cannot avoid, with nothing made
// per run (exec-in-held-ns-p50-ms).
func execFloor(b *testing.B, main string) {
	holder := exec.Command("unshare", "--user", "--map-root-user", "--pid", "--net", "--mount", "--ipc", "--uts", "--cgroup", "--fork", "--mount-proc",
		"/bin/sh", "-c", `while read -r _; do "$0"; done`, main)
	in, err := holder.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outPipe, err := holder.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); _ = holder.Wait() }()
	out := bufio.NewReader(outPipe)
	run := func() time.Duration {
		t0 := time.Now()
		if _, err := in.Write([]byte("\n")); err != nil {
			b.Fatal(err)
		}
		line, err := out.ReadString('\n')
		d := time.Since(t0)
		if err != nil || line != "{}\n" {
			b.Fatalf("%s in held namespaces: %v %q", main, err, line)
		}
		return d
	}
	run() // the namespaces made, the page cache warm
	lat := make([]time.Duration, 0, 50)
	for range 50 {
		lat = append(lat, run())
	}
	b.ReportMetric(p50ms(lat), "exec-in-held-ns-p50-ms")
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
//
// Around each, one scrape of the daemon's histograms splits it: the
// started and the completed row's emits (ready-emit-start-p50-ms,
// ready-emit-completed-p50-ms, as the daemon measures them), the dispatch
// (cyberos_skill_invocation_duration_seconds: broker, activation, the
// skill's run; ready-dispatch-p50-ms), and what is left of the client's
// latency: the daemon's own time (request, policy, claim, envelope,
// response; ready-own-p50-ms).
func warmReady(b *testing.B, d *daemonProc) {
	var lat, own, emitS, emitC, disp []time.Duration
	const ready = `cyberos_warm_sandboxes{skill_id="trivial"}`
	full := stableGauge(b, d, ready)
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	for range 24 {
		waitFor(b, 10*time.Second, func() bool { return d.gauge(ready) >= full })
		before := d.sums(b, emitStartSum, emitCompletedSum, dispatchSum)
		s := time.Now()
		code, _, raw := d.invoke(map[string]any{"skill_id": "trivial"})
		el := time.Since(s)
		after := d.sums(b, emitStartSum, emitCompletedSum, dispatchSum)
		es, ec, dp := sec(after[0]-before[0]), sec(after[1]-before[1]), sec(after[2]-before[2])
		emitS, emitC, disp = append(emitS, es), append(emitC, ec), append(disp, dp)
		own = append(own, el-es-ec-dp)
		var env warmEnvelope
		if code != 200 || json.Unmarshal([]byte(raw), &env) != nil || env.Outcome != "success" || env.Containment["start"] != "warm" {
			b.Fatalf("warm-ready invocation: %d %s", code, raw)
		}
		lat = append(lat, el)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "c1-warm-ready-p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "c1-warm-ready-p95-ms")
	b.ReportMetric(p50ms(own), "ready-own-p50-ms")
	b.ReportMetric(p50ms(emitS), "ready-emit-start-p50-ms")
	b.ReportMetric(p50ms(emitC), "ready-emit-completed-p50-ms")
	b.ReportMetric(p50ms(disp), "ready-dispatch-p50-ms")
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
// what bounds the rate once the CPUs are saturated. The CPU is that of a
// steady state: the warm pool has first grown to what conc callers keep
// it at (an untimed round at conc), and the window ends once every
// sandbox of the round is torn down and the pool is back to that size, so
// each invocation is charged one sandbox made and destroyed, no more (the
// pool's growth) and no less (a teardown or refill after the answer).
func daemonRate(b *testing.B, d *daemonProc, mode string, conc int) {
	const ready = `cyberos_warm_sandboxes{skill_id="trivial"}`
	full := 0.0
	if mode == "warm" {
		callers(b, d, mode, conc, 2*conc, nil)
		full = stableGauge(b, d, ready)
	}
	settled := func() bool {
		n := d.sandboxes()
		if mode == "warm" {
			g := d.gauge(ready)
			return g >= full && float64(n) == g
		}
		return n == 0
	}
	waitFor(b, 60*time.Second, settled)
	total := max(24, 3*conc)
	lat := make([]time.Duration, 0, total)
	var pool0 []float64
	var waited0 float64
	if mode == "warm" {
		pool0 = d.sums(b, warmMisses, warmRefillSum, warmRefillCount)
		waited0 = max(0, d.gauge(warmWaited))
	}
	own0, cpu0, t0 := d.cpu(b), testutil.BusyCPU(b), time.Now()
	callers(b, d, mode, conc, total, &lat)
	el := time.Since(t0)
	waitFor(b, 60*time.Second, settled)
	cpu, own := testutil.BusyCPU(b)-cpu0, d.cpu(b)-own0
	if mode == "warm" {
		// The pool's side of the window: the claims that found no sandbox
		// (each a cold start) and the sandboxes it made, with their mean time.
		pool := d.sums(b, warmMisses, warmRefillSum, warmRefillCount)
		b.ReportMetric(pool[0]-pool0[0], fmt.Sprintf("c%d-warm-misses", conc))
		if w := d.gauge(warmWaited); w >= 0 { // absent before the first wait
			b.ReportMetric(w-waited0, fmt.Sprintf("c%d-warm-waited", conc))
		}
		if n := pool[2] - pool0[2]; n > 0 {
			b.ReportMetric(n, fmt.Sprintf("c%d-warm-refills", conc))
			b.ReportMetric((pool[1]-pool0[1])/n*1000, fmt.Sprintf("c%d-warm-refill-ms", conc))
		}
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/el.Seconds(), fmt.Sprintf("c%d-%s-inv/s", conc, mode))
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, fmt.Sprintf("c%d-%s-p50-ms", conc, mode))
	b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, fmt.Sprintf("c%d-%s-p95-ms", conc, mode))
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(lat)), fmt.Sprintf("c%d-%s-cpu-ms", conc, mode))
	b.ReportMetric(float64(own.Microseconds())/1000/float64(len(lat)), fmt.Sprintf("c%d-%s-daemon-cpu-ms", conc, mode))
}

// cpu is the CPU time of the daemon and of its children it reaped (the
// sandboxes' inits, and through them the skills): on a machine shared with
// other work, the part of the machine's CPU that is the daemon's.
func (d *daemonProc) cpu(b *testing.B) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime, stime,
	// cutime and cstime are the 12th to the 15th of them.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// sandboxes counts the daemon's sandboxes (warm ones ready, running ones,
// and those not yet torn down): each holds a lock file in the run dir's
// locks/ from its making to the end of its teardown.
func (d *daemonProc) sandboxes() int {
	locks, _ := filepath.Glob(filepath.Join(d.e.runDir, "locks", "*.lock"))
	return len(locks)
}

// callers runs total trivial invocations from conc callers, appending
// each latency to lat when it is not nil.
func callers(b *testing.B, d *daemonProc, mode string, conc, total int, lat *[]time.Duration) {
	var mu sync.Mutex
	next := make(chan struct{}, total)
	for j := 0; j < total; j++ {
		next <- struct{}{}
	}
	close(next)
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
				if lat != nil {
					mu.Lock()
					*lat = append(*lat, time.Since(s))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
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
