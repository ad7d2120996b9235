package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Issue 42's targets: each a ratio to a floor measured in the same make
// bench run, printed with both numbers and met or missed.
const (
	targetWarmVsBwrap    = 1.0  // warm invocation p50 at concurrency 1 ≤ 1.0× bwrap /bin/true
	targetWarmVsWork     = 1.5  // and ≤ 1.5× the work floor
	targetEmitVsSync     = 1.3  // the daemon's emit ≤ 1.3× one fdatasync of the row
	targetOwnMS          = 0.5  // the daemon's own time at p50, ms
	targetRateVsFloor    = 0.85 // c8 throughput ≥ 0.85× CPUs / floor CPU per create
	targetP95VsP50       = 2.0  // back-to-back warm p95 ≤ 2× its p50
	targetColdVsFloor    = 1.15 // cold start in process ≤ 1.15× the libcontainer floor
	targetCLIOverFloorMS = 10.0 // skill run whole command ≤ the floor + 10 ms
	targetBrokerVsFloor  = 1.5  // broker one caller p50 ≤ 1.5× (fdatasync + echo)
	targetBrokerCPU      = 2.0  // eight callers' CPU a call ≤ 2× (echo CPU + one row's apply)

	cliBench   = "BenchmarkCLI"            // bench.sh's skill run timing: cli-median-ms
	applyBench = "BenchmarkApply/rows=500" // us/row: the index applier's work per row
)

// fig is one figure of the input: its value and what it is, or NaN and
// what is missing.
type fig struct {
	v    float64
	what string
}

func (f fig) ok() bool { return !math.IsNaN(f.v) }

// get is the median of bench's unit, described as what.
func get(res results, bench, unit, what string) fig {
	if v, ok := res.median(bench, unit); ok {
		return fig{v, what}
	}
	return fig{math.NaN(), fmt.Sprintf("%s (%s %s)", what, bench, unit)}
}

// sum adds figures; when any is missing, it is NaN and names those.
func sum(what string, parts ...fig) fig {
	t := 0.0
	var lacks []string
	for _, p := range parts {
		t += p.v
		if !p.ok() && !slices.Contains(lacks, p.what) {
			lacks = append(lacks, p.what)
		}
	}
	if len(lacks) > 0 {
		return fig{math.NaN(), strings.Join(lacks, "; ")}
	}
	return fig{t, what}
}

func scale(k float64, f fig, what string) fig { return fig{k * f.v, what} }

// mark is one target's line: v against k× floor (or floor + k when add),
// the two numbers, the ratio and the verdict; or what the run lacked.
func mark(b *strings.Builder, id, title string, v, floor fig, k float64, unit string, ge bool, detail string) {
	fmt.Fprintf(b, "- **%s** %s: ", id, title)
	var lacks []string
	for _, f := range []fig{v, floor} {
		if !f.ok() {
			lacks = append(lacks, f.what)
		}
	}
	if floor.ok() && floor.v == 0 {
		lacks = append(lacks, floor.what+" above 0")
	}
	if len(lacks) > 0 {
		fmt.Fprintf(b, "— not measured in this run (missing: %s)\n", strings.Join(lacks, "; "))
		return
	}
	r := v.v / floor.v
	met := r <= k
	if ge {
		met = r >= k
	}
	fmt.Fprintf(b, "%s %s against %s %s = %.2f× (target %s %g×): **%s**", num(v.v), unit, floor.what, num(floor.v)+" "+unit, r, map[bool]string{true: "≥", false: "≤"}[ge], k, verdict(met))
	if detail != "" {
		fmt.Fprintf(b, "; %s", detail)
	}
	b.WriteString("\n")
}

// absMark is mark for a target that is a bound, not a ratio: v ≤ bound.
func absMark(b *strings.Builder, id, title string, v fig, bound float64, boundWhat, unit, detail string) {
	fmt.Fprintf(b, "- **%s** %s: ", id, title)
	if !v.ok() || math.IsNaN(bound) {
		missing := v.what
		if v.ok() {
			missing = boundWhat
		}
		fmt.Fprintf(b, "— not measured in this run (missing: %s)\n", missing)
		return
	}
	fmt.Fprintf(b, "%s %s against %s %s %s: **%s**", num(v.v), unit, boundWhat, num(bound), unit, verdict(v.v <= bound))
	if detail != "" {
		fmt.Fprintf(b, "; %s", detail)
	}
	b.WriteString("\n")
}

// series point lookup: the daemon's c<conc>-<label>-<metric>.
func daemonFig(res results, conc int, label, metric, what string) fig {
	return get(res, daemonBench, fmt.Sprintf("c%d-%s-%s", conc, label, metric), what)
}

// targets42 writes issue 42's targets, each against its same-run floor.
func targets42(b *strings.Builder, res results) {
	b.WriteString("\n## Targets (issue 42): each against its floor, same run\n\n")
	bwrap := get(res, coldBench, "bwrap-median-ms", "bwrap /bin/true")
	floorMed := get(res, coldBench, floorVariant+"-median-ms", "the libcontainer floor")
	floorCPU := get(res, coldBench, floorVariant+"-c8-cpu-ms", "the floor's CPU per create")
	cpus := get(res, daemonBench, "cpus", "CPUs")
	exec := get(res, daemonBench, "exec-in-held-ns-p50-ms", "exec in held namespaces")
	rowSync := get(res, daemonBench, "row-fdatasync-p50-ms", "one fdatasync of the row")
	rowBytes := get(res, daemonBench, "row-bytes", "row size")
	admin := get(res, daemonBench, "admin-rtt-p50-ms", "admin round trip")
	work := sum("the work floor", exec, rowSync, rowSync, admin)
	workDetail := ""
	if work.ok() {
		workDetail = fmt.Sprintf("work floor = skill exec in held namespaces %s + 2 × row fdatasync %s (%s bytes) + admin-socket round trip %s ms",
			num(exec.v), num(rowSync.v), num(rowBytes.v), num(admin.v))
	}
	for _, s := range []struct{ label, what string }{{"warm-ready", "a warm sandbox ready"}, {"warm", "back to back, refills beside"}} {
		p50 := daemonFig(res, 1, s.label, "p50-ms", "daemon "+s.label+" p50")
		mark(b, "1", fmt.Sprintf("daemon warm invocation p50, concurrency 1 (%s) ≤ %g× bwrap", s.what, targetWarmVsBwrap), p50, bwrap, targetWarmVsBwrap, "ms", false, "")
		mark(b, "1", fmt.Sprintf("the same ≤ %g× the work floor", targetWarmVsWork), p50, work, targetWarmVsWork, "ms", false, workDetail)
	}
	syncDetail := ""
	if b2b := get(res, daemonBench, "row-fdatasync-b2b-p50-ms", ""); b2b.ok() && rowSync.ok() {
		syncDetail = fmt.Sprintf("the fdatasync 10 ms after the one before, as the daemon's emits come; back to back (one mtime tick) %s ms", num(b2b.v))
	}
	for _, st := range []string{"start", "completed"} {
		e := get(res, daemonBench, "ready-emit-"+st+"-p50-ms", "the daemon's "+st+" emit")
		mark(b, "2", fmt.Sprintf("the daemon's emit of the %s row (its histogram, p50 over the warm-ready invocations) ≤ %g× one fdatasync of the row", st, targetEmitVsSync),
			e, rowSync, targetEmitVsSync, "ms", false, syncDetail)
	}
	own := get(res, daemonBench, "ready-own-p50-ms", "the daemon's own time")
	ownDetail := ""
	if lat, disp := daemonFig(res, 1, "warm-ready", "p50-ms", ""), get(res, daemonBench, "ready-dispatch-p50-ms", ""); lat.ok() && disp.ok() {
		ownDetail = fmt.Sprintf("client p50 %s ms, dispatch (broker, activation, the skill) p50 %s ms", num(lat.v), num(disp.v))
	}
	absMark(b, "3", "the daemon's own time (client latency − dispatch − the two emits) p50", own, targetOwnMS, "the budget", "ms", ownDetail)
	rateFloor := fig{math.NaN(), "CPUs / the floor's CPU per create"}
	if cpus.ok() && floorCPU.ok() && floorCPU.v > 0 {
		rateFloor.v = cpus.v * 1000 / floorCPU.v
	}
	for _, mode := range []string{"warm", "cold"} {
		r := daemonFig(res, 8, mode, "inv/s", "daemon "+mode+" c8 rate")
		detail := ""
		if rateFloor.ok() {
			detail = fmt.Sprintf("%g CPUs, the floor's %s ms of machine CPU per create", cpus.v, num(floorCPU.v))
		}
		mark(b, "4", fmt.Sprintf("daemon %s throughput at concurrency 8 ≥ %g× what the floor can create on these CPUs", mode, targetRateVsFloor), r, rateFloor, targetRateVsFloor, "/s", true, detail)
	}
	for _, c := range []int{1, 8} {
		mark(b, "4", fmt.Sprintf("machine CPU per warm invocation at concurrency %d ≤ a cold one's", c),
			daemonFig(res, c, "warm", "cpu-ms", "warm CPU"), daemonFig(res, c, "cold", "cpu-ms", "cold"), 1, "ms", false, "")
	}
	mark(b, "4", fmt.Sprintf("back-to-back warm p95 at concurrency 1 ≤ %g× its p50", targetP95VsP50),
		daemonFig(res, 1, "warm", "p95-ms", "warm p95"), daemonFig(res, 1, "warm", "p50-ms", "p50"), targetP95VsP50, "ms", false, "")
	mark(b, "5", fmt.Sprintf("cold start in process ≤ %g× the libcontainer floor", targetColdVsFloor),
		get(res, coldBench, "cyberos-median-ms", "cyberos cold start"), floorMed, targetColdVsFloor, "ms", false, "")
	cli := get(res, cliBench, "cli-median-ms", "skill run whole command")
	absMark(b, "5", fmt.Sprintf("`cyberos skill run` whole command, median ≤ the libcontainer floor + %g ms", targetCLIOverFloorMS), cli,
		floorMed.v+targetCLIOverFloorMS, fmt.Sprintf("the floor %s + %g =", num(floorMed.v), targetCLIOverFloorMS), "ms", "")
	flush := rowSync
	if !flush.ok() {
		flush = get(res, flushBench, "p50-ms", "one fdatasync")
	}
	echoP50 := get(res, brokerOne, "echo-p50-µs", "bare echo p50")
	mark(b, "6", fmt.Sprintf("broker, one caller, per-call p50 ≤ %g× (one fdatasync + a bare socket echo)", targetBrokerVsFloor),
		get(res, brokerOne, "broker-p50-µs", "broker p50"), sum("fdatasync + echo", scale(1000, flush, flush.what), echoP50), targetBrokerVsFloor, "µs", false,
		fmt.Sprintf("fdatasync %s µs, echo %s µs", num(flush.v*1000), num(echoP50.v)))
	echoCPU := get(res, brokerCallers, "echo-cpu-µs", "bare echo CPU")
	apply := get(res, applyBench, "us/row", "index apply per row")
	mark(b, "6", fmt.Sprintf("broker, eight callers, machine CPU a call ≤ %g× (a bare echo's CPU + one row's index apply)", targetBrokerCPU),
		get(res, brokerCallers, "broker-cpu-µs", "broker CPU a call"), sum("echo CPU + apply", echoCPU, apply), targetBrokerCPU, "µs", false,
		fmt.Sprintf("echo %s µs, apply %s µs a row", num(echoCPU.v), num(apply.v)))
}
