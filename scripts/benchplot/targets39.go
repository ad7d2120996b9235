package main

import (
	"fmt"
	"strings"
)

// Issue 39's performance targets: MCP servers, each against a reference
// measured in the same make bench run.
const (
	targetMCPCallVsDirect  = 1.2 // brokered echo p50 ≤ 1.2× (the SDK's direct call + one fdatasync)
	targetMCPReadyVsDirect = 1.2 // a sandboxed server ready ≤ 1.2× the same server unsandboxed

	// mcpEchoBench: brokered-p50-µs, direct-p50-µs, row-fdatasync-p50-ms
	// (and -b2b-), the CPU a call of each side's processes.
	mcpEchoBench = "BenchmarkMCPServerEcho"
	// mcpReadyBench: sandboxed-ready-p50-ms, direct-ready-p50-ms,
	// sandbox-start-p50-ms, the CPU of each start.
	mcpReadyBench = "BenchmarkMCPServerReady"
)

// micros is f, in ms, in µs.
func micros(f fig, what string) fig { return fig{f.v * 1000, what} }

// details joins the parts whose figures are all in the run.
func details(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// when is format's text of figs when every one is in the run, else "".
func when(format string, figs ...fig) string {
	vs := make([]any, len(figs))
	for i, f := range figs {
		if !f.ok() {
			return ""
		}
		vs[i] = num(f.v)
	}
	return fmt.Sprintf(format, vs...)
}

// targets39 writes issue 39's targets, each against its same-run reference.
func targets39(b *strings.Builder, res results) {
	b.WriteString("\n## Targets (issue 39): MCP servers, each against its reference, same run\n\n")
	brokered := get(res, mcpEchoBench, "brokered-p50-µs", "brokered echo p50")
	direct := get(res, mcpEchoBench, "direct-p50-µs", "direct echo p50")
	sync := get(res, mcpEchoBench, "row-fdatasync-p50-ms", "one fdatasync of a row")
	b2b := get(res, mcpEchoBench, "row-fdatasync-b2b-p50-ms", "")
	mark(b, "call", fmt.Sprintf("a brokered call of server-everything's echo (a sandboxed skill, the daemon's broker, the server in its own sandbox), p50 ≤ %g× (the Go SDK's direct call over stdio to it unsandboxed + one fdatasync)", targetMCPCallVsDirect),
		brokered, sum("direct + fdatasync", direct, micros(sync, sync.what)), targetMCPCallVsDirect, "µs", false,
		details(when("direct %s µs, fdatasync of a row %s µs (back to back %s µs)", direct, micros(sync, ""), micros(b2b, "")),
			floor39(res, brokered),
			when("the daemon's own tools/call to the sandboxed server (its histogram) mean %s µs, the direct calls' mean %s µs",
				get(res, mcpEchoBench, "brokered-sdk-call-mean-µs", ""), get(res, mcpEchoBench, "direct-mean-µs", "")),
			when("the echo's started row made durable before the call (its histogram) mean %s µs",
				get(res, mcpEchoBench, "brokered-started-row-mean-µs", "")),
			when("CPU a call: the daemon %s µs, the sandboxed node %s µs; direct: the client %s µs, node %s µs",
				get(res, mcpEchoBench, "brokered-daemon-cpu-µs", ""), get(res, mcpEchoBench, "brokered-node-cpu-µs", ""),
				get(res, mcpEchoBench, "direct-client-cpu-µs", ""), get(res, mcpEchoBench, "direct-node-cpu-µs", ""))))
	mark(b, "ready", fmt.Sprintf("a sandboxed stdio server (server-everything) ready, initialized and its tools listed, p50 ≤ %g× the same server started without a sandbox", targetMCPReadyVsDirect),
		get(res, mcpReadyBench, "sandboxed-ready-p50-ms", "sandboxed ready p50"), get(res, mcpReadyBench, "direct-ready-p50-ms", "unsandboxed"),
		targetMCPReadyVsDirect, "ms", false,
		details(when("the sandbox's share (its standby's activation, or the runner's Start) %s ms of it", get(res, mcpReadyBench, "sandbox-start-p50-ms", "")),
			when("CPU to ready: the sandbox's cgroup %s ms (its cpu limit throttled it %s ms), the unsandboxed node %s ms",
				get(res, mcpReadyBench, "sandboxed-cpu-ms", ""), get(res, mcpReadyBench, "sandboxed-throttled-ms", ""), get(res, mcpReadyBench, "direct-node-cpu-ms", "")),
			when("their threads' waits for a CPU (run queue, summed): sandboxed %s ms, unsandboxed %s ms",
				get(res, mcpReadyBench, "sandboxed-runqueue-ms", ""), get(res, mcpReadyBench, "direct-runqueue-ms", ""))))
}

// floor39 is the brokered call against its floor in the same run: a
// native Read through the same broker (the skill's round trip, policy and
// durable rows, one fdatasync) plus the direct MCP call made after a
// row's fdatasync (the server idle as long as the started row takes).
func floor39(res results, brokered fig) string {
	read := get(res, mcpEchoBench, "brokered-read-p50-µs", "")
	synced := get(res, mcpEchoBench, "direct-synced-p50-µs", "")
	if !read.ok() || !synced.ok() || !brokered.ok() {
		return ""
	}
	floor := read.v + synced.v
	return fmt.Sprintf("floor: a brokered native Read %s µs + the direct call after an fdatasync %s µs = %s µs; the brokered echo is %.2f× it",
		num(read.v), num(synced.v), num(floor), brokered.v/floor)
}
