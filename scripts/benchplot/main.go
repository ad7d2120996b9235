// Command benchplot turns the `go test -bench` lines that make bench
// collects (scripts/bench.sh) into a markdown results table and two SVG
// plots, start latency per variant and daemon throughput against
// concurrency, so a reader sees each comparison at a glance.
//
//	benchplot [-out dir] [file ...]
//
// It reads the named files, or stdin when none is named, takes the median of
// each metric over its repeated lines, and writes dir/bench.md,
// dir/start-latency.svg and dir/daemon-throughput.svg. A benchmark or metric
// missing from the input leaves its rows or plot out and is named on stderr;
// no figure is ever made up.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
)

// The benchmarks this tool reads and the issue 19 targets it checks.
const (
	coldBench = "BenchmarkColdStart" // in-process start per variant: <variant>-median-ms, <variant>-p95-ms
	// floorVariant is coldBench's libcontainer container with DESIGN.md's
	// namespaces and nothing of cyberos's; it also reports the rate of
	// eight at a time (-c8-starts/s) and their machine CPU (-c8-cpu-ms).
	floorVariant = "libcontainer-floor"
	// Daemon benchmarks are those whose name contains this; their per-concurrency
	// metrics are c<N>[-<series>]-inv/s, -p50-ms, -p95-ms and -cpu-ms (the
	// machine's busy CPU time per invocation), and cpus (its CPU count).
	daemonBench = "BenchmarkDaemon"

	targetColdVsBwrap = 2.0   // cyberos cold start ≤ 2× bwrap
	targetColdVsRunc  = 0.5   // and ≤ 0.5× runc
	targetWarmP50ms   = 5.0   // warm daemon invocation p50 at concurrency 1
	targetWarmVsUnsh  = 1.1   // ≤ 1.1× unshare of /bin/true
	targetRateConc    = 8     // daemon throughput target is at this concurrency
	targetRate        = 100.0 // invocations/s

	// Broker benchmarks: broker-calls/s, mcp-calls/s and broker/mcp.
	brokerOne         = "BenchmarkToolCallVsMCP"                      // one client
	brokerConcurrent  = "BenchmarkToolCallsConcurrentVsMCP"           // /callers=8, /sandboxes=8
	brokerCallers     = "BenchmarkToolCallsConcurrentVsMCP/callers=8" // the 10× target's case
	targetBrokerOne   = 2.0                                           // ≥ 2× the MCP SDK, one client
	targetBrokerEight = 10.0                                          // ≥ 10× at 8 callers
	targetRSSKiB      = 1024.0                                        // daemon RSS per active invocation (BenchmarkDaemon RSS-KiB/active-inv)
	// flushBench is the disk alone: one write and fdatasync (p50-ms), what
	// every durably audited call waits for at least once.
	flushBench = "BenchmarkEmitFlush"
)

func main() {
	out := flag.String("out", "bench-out", "directory for bench.md and the SVG plots")
	doc := flag.String("doc", "", "also write bench.md's figures and marks, the machine and the date to this file (make bench: docs/performance.md)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchplot [-out dir] [go-test-bench-output ...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*out, *doc, flag.Args(), os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

// run parses files (stdin when there are none), writes the table and the
// plots into out (and, when doc is not empty, the page docs/performance.md
// is), says on stdout what it wrote and on stderr what it could not find.
func run(out, doc string, files []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var readers []io.Reader
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		readers = append(readers, f)
	}
	if len(files) == 0 {
		readers = append(readers, stdin)
		files = []string{"stdin"}
	}
	res, err := parse(readers...)
	if err != nil {
		return err
	}
	rep := build(res)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	md := filepath.Join(out, "bench.md")
	if err := os.WriteFile(md, []byte(rep.markdown(files)), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "table:", md)
	if doc != "" {
		if err := os.WriteFile(doc, []byte(page(rep.markdown(files), machine(), now().UTC())), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "page:", doc)
	}
	if len(rep.start) > 0 {
		p := filepath.Join(out, "start-latency.svg")
		if err := rep.startPlot(p); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "plot:", p)
	}
	if len(rep.series) > 0 {
		p := filepath.Join(out, "daemon-throughput.svg")
		if err := rep.throughputPlot(p); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "plot:", p)
	}
	for _, m := range rep.missing {
		fmt.Fprintln(stderr, "benchplot: not found:", m)
	}
	return nil
}

// results holds, per benchmark (the -GOMAXPROCS suffix removed from its
// name), each metric's values by unit in the order read.
type results map[string]map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads `go test -bench` output: a result line is the benchmark's
// name, its iteration count, then value-unit pairs. Other lines (goos, PASS,
// logs) are skipped.
func parse(rs ...io.Reader) (results, error) {
	res := results{}
	for _, r := range rs {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
				continue
			}
			if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
				continue
			}
			name := procSuffix.ReplaceAllString(f[0], "")
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					break
				}
				if res[name] == nil {
					res[name] = map[string][]float64{}
				}
				res[name][f[i+1]] = append(res[name][f[i+1]], v)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// median is the median of bench's unit over its lines.
func (r results) median(bench, unit string) (float64, bool) {
	vs := slices.Clone(r[bench][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2], true
	}
	return (vs[n/2-1] + vs[n/2]) / 2, true
}

// variant is one bar of the start latency plot.
type variant struct {
	name, source string
	median, p95  float64 // ms; p95 is NaN when not reported
}

// point is one concurrency of a daemon series.
type point struct {
	conc                int
	rate, p50, p95, cpu float64 // NaN when not reported
}

// series is one line of the throughput plot: the cold path, or warm.
type series struct {
	label  string
	points []point // by concurrency
}

// report is what the table and the plots show.
type report struct {
	start     []variant
	refs      map[string]float64 // in-process medians of cyberos, unshare, bwrap, runc, when present
	series    []series
	warmOther []variant // daemon warm latencies reported without a concurrency
	broker    []brokerRow
	rssPerInv float64 // BenchmarkDaemon's RSS-KiB/active-inv, NaN when absent
	// floorRate and floorCPU: the floor variant eight at a time, starts/s
	// and machine CPU ms per start; NaN when absent.
	floorRate, floorCPU float64
	flushMS             float64 // flushBench's p50-ms, NaN when absent
	cpus                float64 // BenchmarkDaemon's cpus, NaN when absent
	missing             []string
	res                 results // every median, for issue 42's targets
}

// res0 turns a NaN-for-absent figure into a figure and whether it is there.
func res0(v float64) (float64, bool) { return v, !math.IsNaN(v) }

// brokerRow is one broker-vs-MCP case: audited calls/s through the broker
// against the MCP Go SDK's in the same run.
type brokerRow struct {
	name              string
	broker, mcp, rate float64 // rate: broker/mcp
	stalled           float64 // MCP reference runs redone after a stalled call
	// echo and echoP50: the bare socket echo of the same case (echo-calls/s,
	// echo-p50-µs); NaN when absent.
	echo, echoP50 float64
	// brokerCPU, mcpCPU, echoCPU: the machine's busy CPU per call while
	// each ran (broker-cpu-µs, mcp-cpu-µs, echo-cpu-µs), and cpus, the
	// machine's CPU count; NaN when absent.
	brokerCPU, mcpCPU, echoCPU, cpus float64
}

// brokerRows picks the broker-vs-MCP benchmarks out of res, sorted by name.
func (rep *report) brokerRows(res results) {
	for name := range res {
		if !strings.HasPrefix(name, brokerOne) && !strings.HasPrefix(name, brokerConcurrent) {
			continue
		}
		bro, okB := res.median(name, "broker-calls/s")
		mcp, okM := res.median(name, "mcp-calls/s")
		if !okB || !okM || mcp == 0 {
			continue
		}
		stalled, _ := res.median(name, "mcp-stalled-runs") // 0 when absent
		row := brokerRow{name: name, broker: bro, mcp: mcp, rate: bro / mcp, stalled: stalled}
		for _, f := range []struct {
			unit string
			v    *float64
		}{
			{"echo-calls/s", &row.echo}, {"echo-p50-µs", &row.echoP50}, {"broker-cpu-µs", &row.brokerCPU},
			{"mcp-cpu-µs", &row.mcpCPU}, {"echo-cpu-µs", &row.echoCPU}, {"cpus", &row.cpus},
		} {
			*f.v = math.NaN()
			if v, ok := res.median(name, f.unit); ok {
				*f.v = v
			}
		}
		rep.broker = append(rep.broker, row)
	}
	slices.SortFunc(rep.broker, func(a, b brokerRow) int { return strings.Compare(a.name, b.name) })
	if len(rep.broker) == 0 {
		rep.missing = append(rep.missing, "broker vs MCP: no "+brokerOne+" or "+brokerConcurrent+" lines")
	}
}

// brokerRatio is the broker/mcp ratio of the named case.
func (rep *report) brokerRatio(name string) (float64, bool) {
	for _, r := range rep.broker {
		if r.name == name {
			return r.rate, true
		}
	}
	return math.NaN(), false
}

// build picks the figures out of res.
func build(res results) report {
	rep := report{refs: map[string]float64{}, res: res}
	rep.startVariants(res)
	rep.daemonSeries(res)
	rep.brokerRows(res)
	rep.rssPerInv = math.NaN()
	if v, ok := res.median(daemonBench, "RSS-KiB/active-inv"); ok {
		rep.rssPerInv = v
	}
	rep.cpus = math.NaN()
	if v, ok := res.median(daemonBench, "cpus"); ok {
		rep.cpus = v
	}
	rep.floorRate, rep.floorCPU = math.NaN(), math.NaN()
	if v, ok := res.median(coldBench, floorVariant+"-c8-starts/s"); ok {
		rep.floorRate = v
	}
	if v, ok := res.median(coldBench, floorVariant+"-c8-cpu-ms"); ok {
		rep.floorCPU = v
	}
	rep.flushMS = math.NaN()
	if v, ok := res.median(flushBench, "p50-ms"); ok {
		rep.flushMS = v
	}
	for _, s := range rep.series {
		if !math.IsNaN(s.points[0].p50) && s.points[0].conc == 1 {
			v := variant{name: "daemon " + s.label, source: daemonSource(s.label) + ", POST→envelope p50 at concurrency 1", median: s.points[0].p50, p95: s.points[0].p95}
			rep.start = append(rep.start, v)
		}
	}
	slices.SortFunc(rep.warmOther, func(a, b variant) int { return strings.Compare(a.source, b.source) })
	rep.start = append(rep.start, rep.warmOther...)
	if !slices.ContainsFunc(rep.series, func(s series) bool { return strings.Contains(s.label, "warm") }) {
		what := "warm start and warm throughput left out"
		if len(rep.warmOther) > 0 {
			what = "warm throughput left out"
		}
		rep.missing = append(rep.missing, `a warm series: no `+daemonBench+`* c<N> metric with "warm" in its name (`+what+`)`)
	}
	return rep
}

// startVariants collects BenchmarkColdStart's <variant>-median-ms in a fixed
// order: cyberos, then the references, then any other variant by name.
func (rep *report) startVariants(res results) {
	m, ok := res[coldBench]
	if !ok {
		rep.missing = append(rep.missing, coldBench+" (in-process start latency per variant)")
		return
	}
	order := []string{"cyberos", "unshare", "bwrap", "runc"}
	var others []string
	for unit := range m {
		if name, ok := strings.CutSuffix(unit, "-median-ms"); ok && !slices.Contains(order, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range append(order, others...) {
		med, ok := res.median(coldBench, name+"-median-ms")
		if !ok {
			if slices.Contains(order, name) {
				rep.missing = append(rep.missing, fmt.Sprintf("%s-median-ms in %s (%s not installed?)", name, coldBench, name))
			}
			continue
		}
		p95, ok := res.median(coldBench, name+"-p95-ms")
		if !ok {
			p95 = math.NaN()
		}
		rep.refs[name] = med
		rep.start = append(rep.start, variant{name: name, source: coldBench + ", in process", median: med, p95: p95})
	}
}

var concToken = regexp.MustCompile(`^c(\d+)$`)

// daemonSeries groups the daemon benchmarks' c<N>…-inv/s, -p50-ms and
// -p95-ms metrics by series: the label is what the metric and benchmark
// names say beside the concurrency ("warm" in c1-warm-inv/s or in
// BenchmarkDaemonWarm). An unlabelled series is the cold path, unless
// another series is labelled cold.
func (rep *report) daemonSeries(res results) {
	byLabel := map[string]map[int]*point{}
	var benches []string
	for b := range res {
		if strings.Contains(b, daemonBench) {
			benches = append(benches, b)
		}
	}
	slices.Sort(benches)
	for _, b := range benches {
		extra := strings.ToLower(strings.Trim(strings.ReplaceAll(strings.TrimPrefix(b, daemonBench), "/", "-"), "-"))
		for unit := range res[b] {
			var rest string
			var kind int // 0 rate, 1 p50, 2 p95, 3 CPU per invocation
			switch {
			case strings.HasSuffix(unit, "inv/s"):
				rest = strings.TrimSuffix(unit, "inv/s")
			case strings.HasSuffix(unit, "-p50-ms"):
				rest, kind = strings.TrimSuffix(unit, "-p50-ms"), 1
			case strings.HasSuffix(unit, "-median-ms"):
				rest, kind = strings.TrimSuffix(unit, "-median-ms"), 1
			case strings.HasSuffix(unit, "-p95-ms"):
				rest, kind = strings.TrimSuffix(unit, "-p95-ms"), 2
			case strings.HasSuffix(unit, "-cpu-ms"):
				rest, kind = strings.TrimSuffix(unit, "-cpu-ms"), 3
			default:
				continue
			}
			conc := 0
			var label []string
			if extra != "" {
				label = append(label, extra)
			}
			for _, tok := range strings.Split(rest, "-") {
				if mm := concToken.FindStringSubmatch(tok); mm != nil && conc == 0 {
					conc, _ = strconv.Atoi(mm[1])
				} else if tok != "" {
					label = append(label, tok)
				}
			}
			if conc <= 0 {
				// A warm latency without a concurrency: its own bar, named by its metric.
				if v, _ := res.median(b, unit); kind == 1 && strings.Contains(strings.ToLower(b+unit), "warm") {
					rep.warmOther = append(rep.warmOther, variant{name: unit, source: b + " " + unit, median: v, p95: math.NaN()})
				}
				continue
			}
			l := strings.Join(label, "-")
			if byLabel[l] == nil {
				byLabel[l] = map[int]*point{}
			}
			p := byLabel[l][conc]
			if p == nil {
				p = &point{conc: conc, rate: math.NaN(), p50: math.NaN(), p95: math.NaN(), cpu: math.NaN()}
				byLabel[l][conc] = p
			}
			v, _ := res.median(b, unit)
			switch kind {
			case 0:
				p.rate = v
			case 1:
				p.p50 = v
			case 2:
				p.p95 = v
			default:
				p.cpu = v
			}
		}
	}
	if len(byLabel) == 0 {
		rep.missing = append(rep.missing, daemonBench+" c<N>-inv/s metrics (daemon throughput per concurrency)")
		return
	}
	unlabelled := "cold"
	if _, ok := byLabel["cold"]; ok {
		unlabelled = "default"
	}
	labels := make([]string, 0, len(byLabel))
	for l := range byLabel {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		s := series{label: l}
		if l == "" {
			s.label = unlabelled
		}
		for _, p := range byLabel[l] {
			s.points = append(s.points, *p)
		}
		slices.SortFunc(s.points, func(a, b point) int { return a.conc - b.conc })
		rep.series = append(rep.series, s)
	}
	slices.SortStableFunc(rep.series, func(a, b series) int { return strings.Compare(a.label, b.label) })
}

func daemonSource(label string) string {
	return fmt.Sprintf("%s (%s)", daemonBench, label)
}

// num formats a measured value with three significant digits or so.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "—"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// ratio formats v/ref, or a dash when the reference is missing.
func ratio(v float64, ref float64, ok bool) string {
	if !ok || ref == 0 || math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v/ref)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// section writes a table's heading, then its header and rows (rows), or a
// line saying this run did not measure it (n == 0).
func section(b *strings.Builder, title string, n int, header string, rows func()) {
	fmt.Fprintf(b, "\n## %s\n\n", title)
	if n == 0 {
		b.WriteString("Not measured in this run.\n")
		return
	}
	b.WriteString(header)
	rows()
}

// markdown renders the tables, each issue 19 target with its figure and
// same-run reference (or a dash when this run lacks one), and what was not
// found.
func (rep report) markdown(inputs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# make bench results\n\nMedians of each metric over its repeated `Benchmark` lines in %s.\n", strings.Join(inputs, ", "))
	targets42(&b, rep.res)
	targets39(&b, rep.res)
	unshare, okU := rep.refs["unshare"]
	bwrap, okB := rep.refs["bwrap"]
	runc, okR := rep.refs["runc"]

	section(&b, "Start latency (ms)", len(rep.start), "| variant | median | p95 | × unshare | × bwrap | × runc | measured by |\n|---|---|---|---|---|---|---|\n", func() {
		for _, v := range rep.start {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", v.name, num(v.median), num(v.p95),
				ratio(v.median, unshare, okU), ratio(v.median, bwrap, okB), ratio(v.median, runc, okR), v.source)
		}
	})

	section(&b, "Daemon throughput (invocations/s)", len(rep.series), "| concurrency | series | inv/s | × concurrency 1 | p50 ms | p95 ms | machine CPU ms per invocation |\n|---|---|---|---|---|---|---|\n", func() {
		for _, s := range rep.series {
			base, okBase := math.NaN(), false
			if s.points[0].conc == 1 && !math.IsNaN(s.points[0].rate) {
				base, okBase = s.points[0].rate, true
			}
			for _, p := range s.points {
				fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s |\n", p.conc, s.label, num(p.rate), ratio(p.rate, base, okBase), num(p.p50), num(p.p95), num(p.cpu))
			}
		}
	})

	section(&b, "Broker vs the MCP Go SDK (audited calls/s)", len(rep.broker),
		"| case | broker calls/s | MCP calls/s | × MCP | machine CPU µs a call, broker | the same, MCP |\n|---|---|---|---|---|---|\n", func() {
			for _, r := range rep.broker {
				fmt.Fprintf(&b, "| %s | %s | %s | %.2f× | %s | %s |\n", r.name, num(r.broker), num(r.mcp), r.rate, num(r.brokerCPU), num(r.mcpCPU))
			}
			for _, r := range rep.broker {
				if r.stalled > 0 {
					fmt.Fprintf(&b, "\n%s: the MCP reference was run again %g time(s) after a call of it stalled (over a second); the figure is from the run that did not.\n", r.name, r.stalled)
				}
			}
		})

	b.WriteString("\n## Earlier targets (issue 19, replaced by issue 42's), same run\n\n")
	c, okC := rep.refs["cyberos"]
	floor, okF := rep.refs[floorVariant]
	fmt.Fprintf(&b, "- cyberos cold start in process ≤ %g× bwrap: %s%s\n", targetColdVsBwrap, against(c/bwrap, okC && okB, c/bwrap <= targetColdVsBwrap, "×"), floorAlone(floor, bwrap, okF && okB))
	fmt.Fprintf(&b, "- cyberos cold start in process ≤ %g× runc: %s%s\n", targetColdVsRunc, against(c/runc, okC && okR, c/runc <= targetColdVsRunc, "×"), floorAlone(floor, runc, okF && okR))
	warm := false
	for _, v := range rep.start {
		if !strings.HasPrefix(v.name, "daemon ") || !strings.Contains(v.name, "warm") {
			continue
		}
		warm = true
		fmt.Fprintf(&b, "- %s invocation p50 at concurrency 1 ≤ %g ms: %s; ≤ %g× unshare: %s\n", v.name, targetWarmP50ms,
			against(v.median, true, v.median <= targetWarmP50ms, " ms"), targetWarmVsUnsh,
			against(v.median/unshare, okU, v.median/unshare <= targetWarmVsUnsh, "×"))
	}
	if !warm {
		fmt.Fprintf(&b, "- warm invocation p50 at concurrency 1 ≤ %g ms and ≤ %g× unshare: — (no warm figure)\n", targetWarmP50ms, targetWarmVsUnsh)
	}
	rated := false
	for _, s := range rep.series {
		for _, p := range s.points {
			if p.conc == targetRateConc && !math.IsNaN(p.rate) {
				rated = true
				fmt.Fprintf(&b, "- daemon %s throughput at concurrency %d ≥ %g/s: %s%s\n", s.label, targetRateConc, targetRate, against(p.rate, true, p.rate >= targetRate, "/s"), cpuBound(p.cpu, rep.cpus))
			}
		}
	}
	if !rated {
		fmt.Fprintf(&b, "- daemon throughput at concurrency %d ≥ %g/s: — (no figure)\n", targetRateConc, targetRate)
	}
	if !math.IsNaN(rep.floorRate) {
		fmt.Fprintf(&b, "  - %s alone, eight at a time in process: %s starts/s, %s ms of machine CPU each: the most a daemon built on the library reaches here\n",
			floorVariant, num(rep.floorRate), num(rep.floorCPU))
	}
	rss, okRSS := res0(rep.rssPerInv)
	fmt.Fprintf(&b, "- daemon RSS per active invocation < %g KiB: %s\n", targetRSSKiB, against(rss, okRSS, rss < targetRSSKiB, " KiB"))
	one, okOne := rep.brokerRatio(brokerOne)
	fmt.Fprintf(&b, "- broker, one client, ≥ %g× the MCP SDK: %s%s\n", targetBrokerOne, against(one, okOne, one >= targetBrokerOne, "×"), rep.flushBudget())
	eight, okEight := rep.brokerRatio(brokerCallers)
	fmt.Fprintf(&b, "- broker, 8 callers, ≥ %g× the MCP SDK: %s%s%s\n", targetBrokerEight, against(eight, okEight, eight >= targetBrokerEight, "×"), rep.echoBeside(), rep.cpuBudget())

	if len(rep.missing) > 0 {
		b.WriteString("\n## Not found in the input\n\n")
		for _, m := range rep.missing {
			fmt.Fprintf(&b, "- %s\n", m)
		}
	}
	return b.String()
}

// flushBudget says how much of the per-call time the one-client broker
// target leaves goes to the disk's fdatasync and to a bare socket echo,
// each when the run has it.
func (rep report) flushBudget() string {
	i := slices.IndexFunc(rep.broker, func(r brokerRow) bool { return r.name == brokerOne })
	if i < 0 || rep.broker[i].mcp <= 0 {
		return ""
	}
	r := rep.broker[i]
	var parts []string
	if !math.IsNaN(rep.flushMS) {
		parts = append(parts, fmt.Sprintf("one write and fdatasync of this disk %.0f µs (%s p50)", rep.flushMS*1000, flushBench))
	}
	if !math.IsNaN(r.echoP50) {
		parts = append(parts, fmt.Sprintf("a bare echo to another process over a Unix socket %.0f µs (p50)", r.echoP50))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("; %g× leaves %.0f µs a call: %s", targetBrokerOne, 1e6/(targetBrokerOne*r.mcp), strings.Join(parts, ", "))
}

// echoBeside says what the bare socket echo reached in the eight-caller
// case, against the MCP SDK, or nothing when the run lacks it.
func (rep report) echoBeside() string {
	i := slices.IndexFunc(rep.broker, func(r brokerRow) bool { return r.name == brokerCallers })
	if i < 0 || math.IsNaN(rep.broker[i].echo) {
		return ""
	}
	r := rep.broker[i]
	return fmt.Sprintf("; a bare echo over eight Unix socket connections reaches %s/s (%.1f× MCP): the socket is not the bound", num(r.echo), r.echo/r.mcp)
}

// cpuBudget says how much machine CPU a call the eight-caller target
// leaves on this machine, beside what a broker call, an SDK call and a bare
// echo took, or nothing when the run lacks the CPU figures.
func (rep report) cpuBudget() string {
	i := slices.IndexFunc(rep.broker, func(r brokerRow) bool { return r.name == brokerCallers })
	if i < 0 {
		return ""
	}
	r := rep.broker[i]
	if math.IsNaN(r.cpus) || math.IsNaN(r.brokerCPU) || math.IsNaN(r.mcpCPU) {
		return ""
	}
	want := targetBrokerEight * r.mcp
	s := fmt.Sprintf("; %g× is %s calls/s, which leaves %.0f µs of machine CPU a call on %g CPUs: a broker call took %.0f µs, an SDK call %.0f µs",
		targetBrokerEight, num(want), r.cpus/want*1e6, r.cpus, r.brokerCPU, r.mcpCPU)
	if !math.IsNaN(r.echoCPU) {
		s += fmt.Sprintf(", a bare echo %.0f µs", r.echoCPU)
	}
	return s
}

// floorAlone is the floor variant's ratio to a reference, said after a
// cold-start target, or nothing when either figure is missing.
func floorAlone(floor, ref float64, ok bool) string {
	if !ok || ref == 0 {
		return ""
	}
	return fmt.Sprintf("; %s alone (the library with DESIGN.md's namespaces, nothing of cyberos's): %.2f×", floorVariant, floor/ref)
}

// cpuBound says what the machine's CPU time per invocation allows on its
// CPUs, or nothing when either figure is missing.
func cpuBound(cpuMS, cpus float64) string {
	if math.IsNaN(cpuMS) || math.IsNaN(cpus) || cpuMS <= 0 {
		return ""
	}
	return fmt.Sprintf("; %s ms of machine CPU per invocation, so at most %s/s on %g CPUs", num(cpuMS), num(cpus*1000/cpuMS), cpus)
}

// against formats a target's figure and whether it is met, or a dash when
// the run lacks the figure or its reference.
func against(v float64, ok, met bool, unit string) string {
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return "— (no figure or reference)"
	}
	if unit == "×" {
		return fmt.Sprintf("%.2f× (%s)", v, verdict(met))
	}
	return fmt.Sprintf("%s%s (%s)", num(v), unit, verdict(met))
}

// startPlot draws the start latency medians as bars, each labelled with its value.
func (rep report) startPlot(path string) error {
	p := plot.New()
	p.Title.Text = "Start latency, median (ms; lower is better)"
	p.Y.Label.Text = "ms"
	p.X.Label.Text = "in process: one sandbox of /bin/true, Check to Release; daemon: one invocation's p50 at concurrency 1"
	p.X.Label.TextStyle.Font.Size = vg.Points(9)
	vals := make(plotter.Values, len(rep.start))
	names := make([]string, len(rep.start))
	xys := make(plotter.XYs, len(rep.start))
	labels := make([]string, len(rep.start))
	for i, v := range rep.start {
		vals[i], names[i] = v.median, v.name
		xys[i] = plotter.XY{X: float64(i), Y: v.median}
		labels[i] = num(v.median)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(36))
	if err != nil {
		return err
	}
	bars.Color = plotutil.Color(2)
	bars.LineStyle.Width = 0
	lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return err
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i].XAlign = text.XCenter
	}
	lbl.Offset = vg.Point{Y: vg.Points(3)}
	p.Add(bars, lbl)
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max *= 1.1 // room for the value labels
	return save(p, vg.Points(max(540, 120+70*float64(len(rep.start)))), 4*vg.Inch, path)
}

// throughputPlot draws invocations/s against concurrency, one line per
// series, and the target at concurrency 8 as a dashed line.
func (rep report) throughputPlot(path string) error {
	p := plot.New()
	p.Title.Text = "Daemon throughput (higher is better)"
	p.X.Label.Text = "concurrent clients"
	p.Y.Label.Text = "invocations/s"
	p.Legend.Top = true
	p.Legend.Left = true
	var ticks plot.ConstantTicks
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range rep.series {
		var xys plotter.XYs
		for _, pt := range s.points {
			if math.IsNaN(pt.rate) {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(pt.conc), Y: pt.rate})
			if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == float64(pt.conc) }) {
				ticks = append(ticks, plot.Tick{Value: float64(pt.conc), Label: strconv.Itoa(pt.conc)})
			}
			lo, hi = math.Min(lo, float64(pt.conc)), math.Max(hi, float64(pt.conc))
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color = plotutil.Color(i)
		points.Color, points.Shape = plotutil.Color(i), plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.label, line, points)
	}
	if lo <= hi {
		// Issue 42's: a share of what the libcontainer floor can create on
		// these CPUs, when the run has the floor's CPU; else issue 19's.
		rate, label := targetRate, fmt.Sprintf("target: %g/s at concurrency %d", targetRate, targetRateConc)
		if !math.IsNaN(rep.floorCPU) && !math.IsNaN(rep.cpus) && rep.floorCPU > 0 {
			rate = targetRateVsFloor * rep.cpus * 1000 / rep.floorCPU
			label = fmt.Sprintf("target: %g× the floor's creates on %g CPUs (%s/s) at concurrency %d", targetRateVsFloor, rep.cpus, num(rate), targetRateConc)
		}
		target, err := plotter.NewLine(plotter.XYs{{X: lo, Y: rate}, {X: hi, Y: rate}})
		if err != nil {
			return err
		}
		target.Color = color.Gray{Y: 128}
		target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(target)
		p.Legend.Add(label, target)
	}
	p.X.Tick.Marker = ticks
	if hi > lo {
		p.X.Scale = plot.LogScale{} // concurrencies 1, 8, 32 spread evenly
	}
	p.Y.Min = 0
	p.Y.Max *= 1.15 // room for the legend
	return save(p, 6*vg.Inch, 4*vg.Inch, path)
}

// save writes p to path in the format its extension names (svg here).
func save(p *plot.Plot, w, h vg.Length, path string) error {
	wt, err := p.WriterTo(w, h, strings.TrimPrefix(filepath.Ext(path), "."))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
