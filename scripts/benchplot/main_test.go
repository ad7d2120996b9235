package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// coldLines: BenchmarkColdStart as go test prints it, three rounds among
// the lines around them; the cyberos and unshare figures of the first two are
// a real run's, the bwrap and runc columns (reported when both are installed)
// are added in the same format.
const coldLines = `goos: linux
goarch: amd64
pkg: cyberos.dev/supervisor/sandbox
cpu: Intel(R) Xeon(R) Processor
BenchmarkColdStart-2   	       5	        33.79 cyberos-median-ms	        49.93 cyberos-p95-ms	         9.326 cyberos-supervisor-cpu-ms	         6.896 cyberos/unshare	         4.900 unshare-median-ms	         7.334 unshare-p95-ms	        10.00 bwrap-median-ms	        12.00 bwrap-p95-ms	         2.041 bwrap/unshare	        50.00 runc-median-ms	        60.00 runc-p95-ms	        10.20 runc/unshare	         0.6758 cyberos/runc
BenchmarkColdStart-2   	       5	        32.88 cyberos-median-ms	        38.08 cyberos-p95-ms	         8.760 cyberos-supervisor-cpu-ms	         6.507 cyberos/unshare	         5.054 unshare-median-ms	         6.973 unshare-p95-ms	         9.000 bwrap-median-ms	        11.00 bwrap-p95-ms	         1.781 bwrap/unshare	        55.00 runc-median-ms	        70.00 runc-p95-ms	        10.88 runc/unshare	         0.5978 cyberos/runc
BenchmarkColdStart-2   	       5	        40.00 cyberos-median-ms	        41.00 cyberos-p95-ms	         9.000 cyberos-supervisor-cpu-ms	         8.000 cyberos/unshare	         5.000 unshare-median-ms	         7.000 unshare-p95-ms	        11.00 bwrap-median-ms	        13.00 bwrap-p95-ms	         2.200 bwrap/unshare	        52.00 runc-median-ms	        65.00 runc-p95-ms	        10.40 runc/unshare	         0.7692 cyberos/runc
PASS
ok  	cyberos.dev/supervisor/sandbox	1.570s
`

// daemonLines: BenchmarkDaemon's one round (-benchtime 1x) in a real run's
// format (ns/op, then the metrics sorted by unit), twice, plus an unrelated
// benchmark.
const daemonLines = `BenchmarkDaemon-2   	       1	9876543210 ns/op	       300.0 RSS-KiB/active-inv	        15.50 c1-inv/s	        64.00 c1-p50-ms	        80.00 c1-p95-ms	        20.60 c32-inv/s	      1300 c32-p50-ms	      1900 c32-p95-ms	        33.00 c8-inv/s	       230.0 c8-p50-ms	       400.0 c8-p95-ms	        70.00 c8-cpu-ms	         2.000 cpus	        40.00 idle-RSS-MiB
BenchmarkDaemon-2   	       1	9876543210 ns/op	       310.0 RSS-KiB/active-inv	        16.50 c1-inv/s	        60.00 c1-p50-ms	        75.00 c1-p95-ms	        21.60 c32-inv/s	      1200 c32-p50-ms	      1800 c32-p95-ms	        35.00 c8-inv/s	       220.0 c8-p50-ms	       390.0 c8-p95-ms	        74.00 c8-cpu-ms	         2.000 cpus	        41.00 idle-RSS-MiB
BenchmarkChain-2   	   12345	     98765 ns/op	    4096 B/op	      50 allocs/op
`

// tables is md without issue 42's section, which names what each of its
// floors lacks (TestTargets42Missing).
func tables(md string) string {
	head, rest, ok := strings.Cut(md, "\n## Targets (issue 42)")
	if !ok {
		return md
	}
	_, tail, _ := strings.Cut(rest, "\n## Earlier targets")
	return head + tail
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// markdownOf is the bench.md that input's lines make.
func markdownOf(t *testing.T, input string) string {
	t.Helper()
	res, err := parse(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	return build(res).markdown([]string{"raw.txt"})
}

// wantLines fails t for each of wants that md lacks.
func wantLines(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("bench.md lacks %q:\n%s", want, md)
		}
	}
}

func TestParseMedians(t *testing.T) {
	res, err := parse(strings.NewReader(coldLines), strings.NewReader(daemonLines))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bench, unit string
		want        float64
	}{
		{"BenchmarkColdStart", "cyberos-median-ms", 33.79}, // odd count: the middle one
		{"BenchmarkColdStart", "bwrap-median-ms", 10},
		{"BenchmarkColdStart", "runc-median-ms", 52},
		{"BenchmarkColdStart", "unshare-median-ms", 5},
		{"BenchmarkDaemon", "c1-inv/s", 16},      // even count: the mean of the middle two
		{"BenchmarkDaemon", "c8-p50-ms", 225},    // idem
		{"BenchmarkChain", "allocs/op", 50},      // unrelated, parsed all the same
		{"BenchmarkDaemon", "ns/op", 9876543210}, // the standard unit too
	} {
		got, ok := res.median(c.bench, c.unit)
		if !ok || !near(got, c.want) {
			t.Errorf("median(%s, %s) = %v, %v; want %v", c.bench, c.unit, got, ok, c.want)
		}
	}
	if _, ok := res.median("BenchmarkColdStart", "nope-median-ms"); ok {
		t.Error("median of an absent metric reported found")
	}
	if _, ok := res["PASS"]; ok {
		t.Error("a non-benchmark line was parsed")
	}
}

func TestBuildRatiosAndSeries(t *testing.T) {
	res, err := parse(strings.NewReader(coldLines + daemonLines))
	if err != nil {
		t.Fatal(err)
	}
	rep := build(res)
	var names []string
	for _, v := range rep.start {
		names = append(names, v.name)
	}
	if got, want := strings.Join(names, ","), "cyberos,unshare,bwrap,runc,daemon cold"; got != want {
		t.Errorf("start variants %s, want %s", got, want)
	}
	if got := rep.refs["cyberos"] / rep.refs["bwrap"]; !near(got, 3.379) {
		t.Errorf("cyberos/bwrap = %v, want 3.379", got)
	}
	if got := rep.refs["cyberos"] / rep.refs["runc"]; !near(got, 33.79/52) {
		t.Errorf("cyberos/runc = %v, want %v", got, 33.79/52)
	}
	if len(rep.series) != 1 || rep.series[0].label != "cold" || len(rep.series[0].points) != 3 {
		t.Fatalf("series %+v, want one cold series of 3 points", rep.series)
	}
	nan := math.NaN()
	for i, want := range []point{{1, 16, 62, 77.5, nan}, {8, 34, 225, 395, 72}, {32, 21.1, 1250, 1850, nan}} {
		if p := rep.series[0].points[i]; p.conc != want.conc || !near(p.rate, want.rate) || !near(p.p50, want.p50) || !near(p.p95, want.p95) ||
			math.IsNaN(p.cpu) != math.IsNaN(want.cpu) || !math.IsNaN(want.cpu) && !near(p.cpu, want.cpu) {
			t.Errorf("point %d = %+v, want %+v", i, p, want)
		}
	}
	md := rep.markdown([]string{"raw.txt"})
	for _, want := range []string{
		"| cyberos | 33.8 | 41.0 | 6.76× | 3.38× | 0.65× | BenchmarkColdStart, in process |",
		"| bwrap | 10.0 | 12.0 | 2.00× | 1.00× | 0.19× |",
		"- cyberos cold start in process ≤ 2× bwrap: 3.38× (missed)",
		"- cyberos cold start in process ≤ 0.5× runc: 0.65× (missed)",
		"| 8 | cold | 34.0 | 2.12× | 225 | 395 | 72.0 |",
		"| 32 | cold | 21.1 | 1.32× | 1250 | 1850 | — |",
		"- daemon cold throughput at concurrency 8 ≥ 100/s: 34.0/s (missed); 72.0 ms of machine CPU per invocation, so at most 27.8/s on 2 CPUs\n",
		"- warm invocation p50 at concurrency 1 ≤ 5 ms and ≤ 1.1× unshare: — (no warm figure)", // not in this input: said, not made up
		`a warm series`,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("bench.md lacks %q:\n%s", want, md)
		}
	}
}

// A warm series beside the cold one: both lines, a warm bar, its target.
func TestBuildWarmAndCold(t *testing.T) {
	warm := `BenchmarkDaemon-2   	       1	9876543210 ns/op	        15.50 c1-inv/s	        64.00 c1-p50-ms	        200.0 c1-warm-inv/s	        4.000 c1-warm-p50-ms	        6.000 c1-warm-p95-ms	        33.00 c8-inv/s	       400.0 c8-warm-inv/s
`
	res, err := parse(strings.NewReader(coldLines), strings.NewReader(warm))
	if err != nil {
		t.Fatal(err)
	}
	rep := build(res)
	if len(rep.series) != 2 || rep.series[0].label != "cold" || rep.series[1].label != "warm" {
		t.Fatalf("series %+v, want cold and warm", rep.series)
	}
	if p := rep.series[1].points; len(p) != 2 || p[1].conc != 8 || p[1].rate != 400 || !math.IsNaN(p[1].p50) {
		t.Errorf("warm points %+v", p)
	}
	md := rep.markdown(nil)
	for _, want := range []string{
		"| daemon warm | 4.00 | 6.00 | 0.80× | 0.40× | 0.08× |",
		"- daemon warm invocation p50 at concurrency 1 ≤ 5 ms: 4.00 ms (met); ≤ 1.1× unshare: 0.80× (met)",
		"- daemon warm throughput at concurrency 8 ≥ 100/s: 400/s (met)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("bench.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "a warm series") {
		t.Errorf("bench.md says the warm series is missing:\n%s", md)
	}
}

// A warm benchmark of its own and a warm latency without a concurrency: the
// series is named by the benchmark, the latency gets a bar named by its metric.
func TestBuildWarmBenchmark(t *testing.T) {
	in := "BenchmarkDaemon-2   \t       1\t9876543210 ns/op\t        15.50 c1-inv/s\n" +
		"BenchmarkDaemonWarm-2   \t       1\t9876543210 ns/op\t        250.0 c8-inv/s\t        3.500 warm-p50-ms\n"
	res, err := parse(strings.NewReader(coldLines), strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	rep := build(res)
	if len(rep.series) != 2 || rep.series[1].label != "warm" || len(rep.series[1].points) != 1 || rep.series[1].points[0].rate != 250 {
		t.Fatalf("series %+v, want cold and warm (one point at 8)", rep.series)
	}
	last := rep.start[len(rep.start)-1]
	if last.name != "warm-p50-ms" || last.median != 3.5 || last.source != "BenchmarkDaemonWarm warm-p50-ms" {
		t.Errorf("last start variant %+v, want warm-p50-ms 3.5", last)
	}
	if md := rep.markdown(nil); !strings.Contains(md, "| warm-p50-ms | 3.50 | — | 0.70× |") || strings.Contains(md, "a warm series") {
		t.Errorf("bench.md:\n%s", md)
	}
}

// wellFormedSVG fails unless path holds a non-empty, well-formed XML document
// whose root is an svg element.
func wellFormedSVG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<?xml")) {
		t.Fatalf("%s starts %q, want an XML declaration", path, b[:min(len(b), 40)])
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", path, root)
	}
}

func TestRunWritesTableAndPlots(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "raw.txt")
	if err := os.WriteFile(raw, []byte(coldLines+daemonLines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	if err := run(out, "", []string{raw}, nil, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "bench.md"))
	if err != nil || !bytes.Contains(md, []byte("## Start latency")) || !bytes.Contains(md, []byte("## Daemon throughput")) {
		t.Fatalf("bench.md: %v\n%s", err, md)
	}
	wellFormedSVG(t, filepath.Join(out, "start-latency.svg"))
	wellFormedSVG(t, filepath.Join(out, "daemon-throughput.svg"))
	if !bytes.Contains(md, []byte("- daemon RSS per active invocation < 1024 KiB: 305 KiB (met)")) {
		t.Errorf("bench.md lacks the RSS target (median of 300 and 310):\n%s", md)
	}
	for _, f := range []string{"bench.md", "start-latency.svg", "daemon-throughput.svg"} {
		if !strings.Contains(stdout.String(), filepath.Join(out, f)) {
			t.Errorf("stdout does not name %s:\n%s", f, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "not found: a warm series") {
		t.Errorf("stderr does not say the warm series is missing:\n%s", stderr.String())
	}
}

// Input without the daemon, bwrap or runc, from stdin: the table says what is
// missing, the start plot is drawn, no throughput plot, no crash.
func TestRunMissingMetrics(t *testing.T) {
	out := t.TempDir()
	in := "BenchmarkColdStart-2   \t       5\t        33.79 cyberos-median-ms\t         4.900 unshare-median-ms\n" +
		"BenchmarkColdStart-2   \t       5\t        not-a-number cyberos-median-ms\n" +
		"BenchmarkColdStart-2   \t  --- FAIL: x\n"
	var stdout, stderr bytes.Buffer
	if err := run(out, "", nil, strings.NewReader(in), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	wellFormedSVG(t, filepath.Join(out, "start-latency.svg"))
	if _, err := os.Stat(filepath.Join(out, "daemon-throughput.svg")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("daemon-throughput.svg without daemon figures: %v", err)
	}
	for _, want := range []string{"bwrap-median-ms", "runc-median-ms", "BenchmarkDaemon c<N>-inv/s", "a warm series"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "bench.md"))
	for _, want := range []string{"| cyberos | 33.8 | — | 6.90× | — | — |", "## Daemon throughput (invocations/s)\n\nNot measured in this run.", "## Not found in the input",
		"≤ 2× bwrap: — (no figure or reference)", "≥ 100/s: — (no figure)"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("bench.md lacks %q:\n%s", want, md)
		}
	}

	// Nothing at all: a table saying so, no plots.
	empty := t.TempDir()
	stdout.Reset()
	stderr.Reset()
	if err := run(empty, "", nil, strings.NewReader("PASS\n"), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 1 {
		t.Errorf("empty input wrote %d files, want bench.md alone", len(entries))
	}
}

// brokerLines: the broker benchmarks as a real make bench prints them (the
// one-client line is from one; the concurrent ones in the same format).
const brokerLines = `BenchmarkToolCallVsMCP-2   	       1	      2344 broker-calls/s	       387.0 broker-p50-µs	       923.0 broker-p99-µs	         1.059 broker/mcp	      2214 mcp-calls/s	       357.0 mcp-p50-µs	      1560 mcp-p99-µs
BenchmarkToolCallsConcurrentVsMCP/callers=8-2   	       1	      2954 broker-calls/s	       2000 broker-p50-µs	       5000 broker-p99-µs	         2.05 broker/mcp	      1441 mcp-calls/s	       5000 mcp-p50-µs	      9000 mcp-p99-µs
BenchmarkToolCallsConcurrentVsMCP/sandboxes=8-2   	       1	      2718 broker-calls/s	       2000 broker-p50-µs	       5000 broker-p99-µs	         1.98 broker/mcp	      1373 mcp-calls/s	       5000 mcp-p50-µs	      9000 mcp-p99-µs
`

// The broker cases get their table and both broker targets, against the
// MCP SDK figures of the same lines; without them, the targets say so.
func TestBrokerTargets(t *testing.T) {
	res, err := parse(strings.NewReader(brokerLines))
	if err != nil {
		t.Fatal(err)
	}
	md := build(res).markdown([]string{"raw.txt"})
	for _, want := range []string{
		"| BenchmarkToolCallVsMCP | 2344 | 2214 | 1.06× |",
		"| BenchmarkToolCallsConcurrentVsMCP/sandboxes=8 | 2718 | 1373 | 1.98× |",
		"- broker, one client, ≥ 2× the MCP SDK: 1.06× (missed)",
		"- broker, 8 callers, ≥ 10× the MCP SDK: 2.05× (missed)",
		"- daemon RSS per active invocation < 1024 KiB: — (no figure or reference)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("bench.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(tables(md), "fdatasync") {
		t.Errorf("bench.md gives the disk's share without BenchmarkEmitFlush:\n%s", md)
	}
	flush := "BenchmarkEmitFlush-2   \t   40000\t    121170 ns/op\t         0.1180 p50-ms\t         0.1560 p95-ms\n"
	wantLines(t, markdownOf(t, brokerLines+flush),
		"- broker, one client, ≥ 2× the MCP SDK: 1.06× (missed); 2× leaves 226 µs a call: one write and fdatasync of this disk 118 µs (BenchmarkEmitFlush p50)\n")
	echo := strings.Replace(brokerLines, "1.059 broker/mcp", "1.059 broker/mcp\t     26279 echo-calls/s\t        38.00 echo-p50-µs", 1)
	echo = strings.Replace(echo, "2.05 broker/mcp", "2.05 broker/mcp\t    110775 echo-calls/s\t        42.00 echo-p50-µs", 1)
	wantLines(t, markdownOf(t, echo+flush),
		"2× leaves 226 µs a call: one write and fdatasync of this disk 118 µs (BenchmarkEmitFlush p50), a bare echo to another process over a Unix socket 38 µs (p50)\n",
		"- broker, 8 callers, ≥ 10× the MCP SDK: 2.05× (missed); a bare echo over eight Unix socket connections reaches 110775/s (76.9× MCP): the socket is not the bound\n")
	if strings.Contains(tables(md), "machine CPU a call") {
		t.Errorf("bench.md gives a CPU budget without the CPU figures:\n%s", md)
	}
	cpu := strings.Replace(echo, "9000 mcp-p99-µs", "9000 mcp-p99-µs\t       331.5 broker-cpu-µs\t       754.5 mcp-cpu-µs\t        27.26 echo-cpu-µs\t         2.000 cpus", 1)
	wantLines(t, markdownOf(t, cpu),
		"| BenchmarkToolCallsConcurrentVsMCP/callers=8 | 2954 | 1441 | 2.05× | 332 | 754 |\n",
		"| BenchmarkToolCallsConcurrentVsMCP/sandboxes=8 | 2718 | 1373 | 1.98× | — | — |\n",
		"(76.9× MCP): the socket is not the bound; 10× is 14410 calls/s, which leaves 139 µs of machine CPU a call on 2 CPUs: a broker call took 332 µs, an SDK call 754 µs, a bare echo 27 µs\n")
	md = build(results{}).markdown(nil)
	if !strings.Contains(md, "- broker, one client, ≥ 2× the MCP SDK: — (no figure or reference)") {
		t.Errorf("no broker lines: %s", md)
	}
}

// A case whose MCP reference was redone after a stall says so under the
// table; the others say nothing.
func TestBrokerStalledReference(t *testing.T) {
	lines := strings.Replace(brokerLines, "1560 mcp-p99-µs", "1560 mcp-p99-µs\t         1.000 mcp-stalled-runs", 1)
	res, err := parse(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	md := build(res).markdown([]string{"raw.txt"})
	if !strings.Contains(md, "BenchmarkToolCallVsMCP: the MCP reference was run again 1 time(s) after a call of it stalled") {
		t.Errorf("bench.md does not say the reference was redone:\n%s", md)
	}
	if strings.Contains(md, "callers=8: the MCP reference was run again") {
		t.Errorf("bench.md names a case that did not stall:\n%s", md)
	}
}

// The libcontainer floor, when the cold-start lines report it, is a row of
// the start table and is said beside the cold-start and throughput
// targets; input without it says nothing of it.
func TestFloorBesideTargets(t *testing.T) {
	floor := strings.ReplaceAll(coldLines, "0.6758 cyberos/runc", "0.6758 cyberos/runc\t        28.00 libcontainer-floor-median-ms\t        31.00 libcontainer-floor-p95-ms\t        43.00 libcontainer-floor-c8-starts/s\t        46.50 libcontainer-floor-c8-cpu-ms")
	wantLines(t, markdownOf(t, floor+daemonLines),
		"| libcontainer-floor | 28.0 | 31.0 |",
		"- cyberos cold start in process ≤ 2× bwrap: 3.38× (missed); libcontainer-floor alone (the library with DESIGN.md's namespaces, nothing of cyberos's): 2.80×\n",
		"- cyberos cold start in process ≤ 0.5× runc: 0.65× (missed); libcontainer-floor alone (the library with DESIGN.md's namespaces, nothing of cyberos's): 0.54×\n",
		"  - libcontainer-floor alone, eight at a time in process: 43.0 starts/s, 46.5 ms of machine CPU each")
	if md := markdownOf(t, coldLines+daemonLines); strings.Contains(tables(md), "libcontainer-floor") {
		t.Errorf("bench.md names a floor the input lacks:\n%s", md)
	}
}
