package main

import (
	"strings"
	"testing"
)

// issue39Lines: every figure issue 39's targets read.
const issue39Lines = `BenchmarkMCPServerEcho-2   	       1	       342.2 brokered-calls/s	       700.0 brokered-daemon-cpu-µs	       400.0 brokered-node-cpu-µs	      1100 brokered-p50-µs	       300.0 brokered-read-p50-µs	       200.0 direct-synced-p50-µs	     38694 brokered-p99-µs	       700.0 brokered-sdk-call-mean-µs	       250.0 brokered-started-row-mean-µs	       400.0 direct-mean-µs	      2757 direct-calls/s	       180.0 direct-client-cpu-µs	        80.00 direct-node-cpu-µs	       100.0 direct-p50-µs	      4534 direct-p99-µs	      1614 row-bytes	         0.2500 row-fdatasync-b2b-p50-ms	         0.5000 row-fdatasync-p50-ms
BenchmarkMCPServerReady-2   	       1	       290.0 direct-node-cpu-ms	       400.0 direct-ready-p50-ms	        30.00 sandbox-start-p50-ms	       300.0 sandboxed-cpu-ms	         1.100 sandboxed-over-direct	       440.0 sandboxed-ready-p50-ms	         5.000 sandboxed-throttled-ms	       600.0 sandboxed-runqueue-ms	       500.0 direct-runqueue-ms
`

// Each issue 39 target prints its figure, its reference, the ratio, the
// mark and where the time and CPU went; the call's reference is the
// direct call plus one fdatasync, and its floor the brokered native Read
// plus the direct call after an fdatasync.
func TestTargets39(t *testing.T) {
	wantLines(t, markdownOf(t, issue39Lines),
		"## Targets (issue 39): MCP servers, each against its reference, same run\n",
		"- **call** a brokered call of server-everything's echo (a sandboxed skill, the daemon's broker, the server in its own sandbox), p50 ≤ 1.2× (the Go SDK's direct call over stdio to it unsandboxed + one fdatasync): 1100 µs against direct + fdatasync 600 µs = 1.83× (target ≤ 1.2×): **missed**; direct 100 µs, fdatasync of a row 500 µs (back to back 250 µs); floor: a brokered native Read 300 µs + the direct call after an fdatasync 200 µs = 500 µs; the brokered echo is 2.20× it; the daemon's own tools/call to the sandboxed server (its histogram) mean 700 µs, the direct calls' mean 400 µs; the echo's started row made durable before the call (its histogram) mean 250 µs; CPU a call: the daemon 700 µs, the sandboxed node 400 µs; direct: the client 180 µs, node 80.0 µs\n",
		"- **ready** a sandboxed stdio server (server-everything) ready, initialized and its tools listed, p50 ≤ 1.2× the same server started without a sandbox: 440 ms against unsandboxed 400 ms = 1.10× (target ≤ 1.2×): **met**; the sandbox's share (its standby's activation, or the runner's Start) 30.0 ms of it; CPU to ready: the sandbox's cgroup 300 ms (its cpu limit throttled it 5.00 ms), the unsandboxed node 290 ms; their threads' waits for a CPU (run queue, summed): sandboxed 600 ms, unsandboxed 500 ms\n")
}

// A run without the MCP benchmarks says what is missing and marks
// nothing; one without the CPU figures leaves their detail out.
func TestTargets39Missing(t *testing.T) {
	md := markdownOf(t, "")
	if strings.Contains(md, "**met**") || strings.Contains(md, "**missed**") {
		t.Errorf("marks without figures:\n%s", md)
	}
	wantLines(t, md,
		"(the Go SDK's direct call over stdio to it unsandboxed + one fdatasync): — not measured in this run (missing: brokered echo p50 (BenchmarkMCPServerEcho brokered-p50-µs); direct echo p50 (BenchmarkMCPServerEcho direct-p50-µs); one fdatasync of a row (BenchmarkMCPServerEcho row-fdatasync-p50-ms))\n",
		"the same server started without a sandbox: — not measured in this run (missing: sandboxed ready p50 (BenchmarkMCPServerReady sandboxed-ready-p50-ms); unsandboxed (BenchmarkMCPServerReady direct-ready-p50-ms))\n")
	md = markdownOf(t, "BenchmarkMCPServerReady-2 1 440.0 sandboxed-ready-p50-ms 400.0 direct-ready-p50-ms\n")
	wantLines(t, md, "440 ms against unsandboxed 400 ms = 1.10× (target ≤ 1.2×): **met**\n")
}
