package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// issue42Lines: every figure issue 42's targets read, beside coldLines
// (cyberos 33.79 ms and bwrap 10.0 ms, medians).
const issue42Lines = `BenchmarkColdStart-2   	       5	        28.00 libcontainer-floor-median-ms	        20.00 libcontainer-floor-c8-cpu-ms
BenchmarkDaemon-2   	       1	9876543210 ns/op	         4.000 c1-warm-ready-p50-ms	         5.000 c1-warm-p50-ms	        12.00 c1-warm-p95-ms	        90.00 c8-warm-inv/s	        80.00 c8-cold-inv/s	        10.00 c1-warm-cpu-ms	        12.00 c1-cold-cpu-ms	        20.00 c8-warm-cpu-ms	        18.00 c8-cold-cpu-ms	         2.000 cpus	         1.500 exec-in-held-ns-p50-ms	         0.2000 row-fdatasync-p50-ms	         0.1200 row-fdatasync-b2b-p50-ms	       900.0 row-bytes	         0.1000 admin-rtt-p50-ms	         0.6000 ready-emit-start-p50-ms	         0.2500 ready-emit-completed-p50-ms	         0.9000 ready-own-p50-ms	         2.000 ready-dispatch-p50-ms
BenchmarkCLI	20	46.8 cli-median-ms	50.0 cli-p95-ms
BenchmarkToolCallVsMCP-2   	       1	       300.0 broker-p50-µs	        40.00 echo-p50-µs
BenchmarkToolCallsConcurrentVsMCP/callers=8-2   	       1	       330.0 broker-cpu-µs	        27.00 echo-cpu-µs
BenchmarkApply/rows=500-2   	       3	   1000 ns/op	        40.00 us/row
`

// Each issue 42 target prints its figure, its floor, the ratio and the
// mark; the floor's CPU per create turns into a rate on the run's CPUs,
// and the work floor is its four parts added.
func TestTargets42(t *testing.T) {
	wantLines(t, markdownOf(t, coldLines+issue42Lines),
		"- **1** daemon warm invocation p50, concurrency 1 (a warm sandbox ready) ≤ 1× bwrap: 4.00 ms against bwrap /bin/true 10.0 ms = 0.40× (target ≤ 1×): **met**\n",
		"- **1** the same ≤ 1.5× the work floor: 4.00 ms against the work floor 2.00 ms = 2.00× (target ≤ 1.5×): **missed**; work floor = skill exec in held namespaces 1.50 + 2 × row fdatasync 0.20 (900 bytes) + admin-socket round trip 0.10 ms\n",
		"(back to back, refills beside) ≤ 1× bwrap: 5.00 ms against bwrap /bin/true 10.0 ms = 0.50× (target ≤ 1×): **met**\n",
		"- **1** the same ≤ 1.5× the work floor: 5.00 ms against the work floor 2.00 ms = 2.50× (target ≤ 1.5×): **missed**",
		"≤ 1.3× one fdatasync of the row: 0.60 ms against one fdatasync of the row 0.20 ms = 3.00× (target ≤ 1.3×): **missed**; the fdatasync 10 ms after the one before, as the daemon's emits come; back to back (one mtime tick) 0.12 ms\n",
		"≤ 1.3× one fdatasync of the row: 0.25 ms against one fdatasync of the row 0.20 ms = 1.25× (target ≤ 1.3×): **met**; the fdatasync",
		"- **3** the daemon's own time (client latency − dispatch − the two emits) p50: 0.90 ms against the budget 0.50 ms: **missed**; client p50 4.00 ms, dispatch (broker, activation, the skill) p50 2.00 ms\n",
		"- **4** daemon warm throughput at concurrency 8 ≥ 0.85× what the floor can create on these CPUs: 90.0 /s against CPUs / the floor's CPU per create 100 /s = 0.90× (target ≥ 0.85×): **met**; 2 CPUs, the floor's 20.0 ms of machine CPU per create\n",
		"- **4** daemon cold throughput at concurrency 8 ≥ 0.85× what the floor can create on these CPUs: 80.0 /s against CPUs / the floor's CPU per create 100 /s = 0.80× (target ≥ 0.85×): **missed**",
		"- **4** machine CPU per warm invocation at concurrency 1 ≤ a cold one's: 10.0 ms against cold 12.0 ms = 0.83× (target ≤ 1×): **met**\n",
		"- **4** machine CPU per warm invocation at concurrency 8 ≤ a cold one's: 20.0 ms against cold 18.0 ms = 1.11× (target ≤ 1×): **missed**\n",
		"- **4** back-to-back warm p95 at concurrency 1 ≤ 2× its p50: 12.0 ms against p50 5.00 ms = 2.40× (target ≤ 2×): **missed**\n",
		"- **5** cold start in process ≤ 1.15× the libcontainer floor: 33.8 ms against the libcontainer floor 28.0 ms = 1.21× (target ≤ 1.15×): **missed**\n",
		"- **5** `cyberos skill run` whole command, median ≤ the libcontainer floor + 10 ms: 46.8 ms against the floor 28.0 + 10 = 38.0 ms: **missed**\n",
		"- **6** broker, one caller, per-call p50 ≤ 1.5× (one fdatasync + a bare socket echo): 300 µs against fdatasync + echo 240 µs = 1.25× (target ≤ 1.5×): **met**; fdatasync 200 µs, echo 40.0 µs\n",
		"- **6** broker, eight callers, machine CPU a call ≤ 2× (a bare echo's CPU + one row's index apply): 330 µs against echo CPU + apply 67.0 µs = 4.93× (target ≤ 2×): **missed**; echo 27.0 µs, apply 40.0 µs a row\n")
}

// A run without a target's figure or floor says which is missing and
// marks nothing; the one-caller broker target falls back to the disk's
// own fdatasync (BenchmarkEmitFlush) when the row's is missing.
func TestTargets42Missing(t *testing.T) {
	md := markdownOf(t, "")
	if strings.Contains(md, "**met**") || strings.Contains(md, "**missed**") {
		t.Errorf("marks without figures:\n%s", md)
	}
	wantLines(t, md,
		"- **3** the daemon's own time (client latency − dispatch − the two emits) p50: — not measured in this run (missing: the daemon's own time (BenchmarkDaemon ready-own-p50-ms))\n",
		"- **1** the same ≤ 1.5× the work floor: — not measured in this run (missing: daemon warm-ready p50 (BenchmarkDaemon c1-warm-ready-p50-ms); exec in held namespaces (BenchmarkDaemon exec-in-held-ns-p50-ms); one fdatasync of the row (BenchmarkDaemon row-fdatasync-p50-ms); admin round trip (BenchmarkDaemon admin-rtt-p50-ms))\n")
	flush := "BenchmarkEmitFlush-2   \t   40000\t    121170 ns/op\t         0.1180 p50-ms\n"
	wantLines(t, markdownOf(t, flush+"BenchmarkToolCallVsMCP-2 1 300.0 broker-p50-µs 40.00 echo-p50-µs\n"),
		"300 µs against fdatasync + echo 158 µs = 1.90× (target ≤ 1.5×): **missed**; fdatasync 118 µs, echo 40.0 µs\n")
}

// -doc writes the page: the date and machine of the run, then bench.md's
// sections without its title; the throughput plot's target line is issue
// 42's, from the floor's CPU per create.
func TestRunWritesPage(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC) }
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	if err := os.WriteFile(raw, []byte(coldLines+issue42Lines), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "performance.md")
	var stdout, stderr strings.Builder
	if err := run(filepath.Join(dir, "out"), doc, []string{raw}, nil, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	wantLines(t, md, "# Performance\n", "make bench", "- Run: 2026-12-07 16:00 UTC\n", "- Machine: ", "CPUs",
		"## Targets (issue 42)", "**met**", "## Start latency (ms)")
	if strings.Contains(md, "# make bench results") {
		t.Errorf("the page keeps bench.md's title:\n%s", md)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "out", "daemon-throughput.svg"))
	if err != nil || !strings.Contains(string(svg), "0.85× the floor&#39;s creates on 2 CPUs (85.0/s)") {
		t.Errorf("the throughput plot's target is not issue 42's (%v)", err)
	}
	if !strings.Contains(stdout.String(), "page: "+doc) {
		t.Errorf("stdout does not name the page: %s", stdout.String())
	}
}
