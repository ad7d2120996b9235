#!/usr/bin/env bash
# Cold-start benchmark (make bench). The skill is /bin/true: it prints no
# JSON, so its outcome is "error"; only the time matters here. Needs root. Installs bubblewrap and runc
# when missing so the comparison is complete; skips them if that fails.
# Every benchmark's raw result lines are also appended to $BENCH_OUT/raw.txt
# (default ./bench-out), from which scripts/benchplot writes bench.md and the plots.
set -euo pipefail
bin=$1
if [ "$(id -u)" -ne 0 ]; then echo "make bench needs root" >&2; exit 1; fi
out=${BENCH_OUT:-./bench-out}
mkdir -p "$out"
raw=$out/raw.txt
: > "$raw"
for pkg in bubblewrap runc; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null 2>&1 ||
    echo "($pkg not installed: left out of the comparison)"
done
n=${BENCH_N:-50}
# The in-process benchmarks build cyberos-spawn as `make build` does, and
# libcontainer re-executes it as each sandbox's first process, as in the
# daemon; their test binaries are linked the same way (the Makefile's STATIC).
static=(-tags "seccomp netgo osusergo" -ldflags '-extldflags "-static"')
echo "== in-process runner, as the daemon runs it: Check→Start→Wait→Close→Release of a /bin/true skill, full default policy, $n rounds interleaved with the references"
go test "${static[@]}" -run '^$' -bench 'BenchmarkColdStart$' -benchtime "${n}x" -count 1 ./supervisor/sandbox/ |
  grep -E 'BenchmarkColdStart' | tee -a "$raw" | tr '\t' '\n' | sed -n 's/^ *\([0-9.]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort
echo
echo "== the same cold start per seccomp profile: default, strict, Docker's default imported (native arch), $n rounds interleaved"
go test "${static[@]}" -run '^$' -bench 'BenchmarkColdStartProfiles$' -benchtime "${n}x" -count 1 ./supervisor/sandbox/ |
  grep -E 'BenchmarkColdStartProfiles' | tee -a "$raw" | tr '\t' '\n' | sed -n 's/^ *\([0-9.]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort
echo
echo "== one more process in a running sandbox, as the Bash tool starts each command (/bin/true), $n rounds"
go test "${static[@]}" -run '^$' -bench 'BenchmarkExec$' -benchtime "${n}x" -count 1 ./supervisor/sandbox/ |
  grep -E '^BenchmarkExec' | tr '\t' '\n' | sed -n 's/^ *\([0-9.]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort
echo
echo "== whole CLI: \`cyberos skill run\` of the same skill (process start, policy, sandbox, cleanup), 20 runs"
tmp=$(mktemp -d); chmod 711 "$tmp"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/skill"; cp /bin/true "$tmp/skill/main"; chmod 755 "$tmp/skill" "$tmp/skill/main"
printf -- '---\nname: bench\ndescription: /bin/true\n---\n' > "$tmp/skill/SKILL.md"
for i in $(seq 20); do
  s=$(date +%s%N); "$bin" skill run "$tmp/skill" --state-dir "$tmp/state" >/dev/null 2>&1 || true; e=$(date +%s%N)
  echo $(( (e - s) / 1000 ))
done | sort -n | awk '{a[NR]=$1} END {printf "BenchmarkCLI\t%d\t%.1f cli-median-ms\t%.1f cli-p95-ms\n", NR, a[int(NR/2)+1]/1000, a[int(NR*0.95)]/1000}' |
  tee -a "$raw" | tr '\t' '\n' | sed -n 's/^ *\([0-9.]*\) \(.*\)$/  \2 \1/p'

echo
echo "== audit emit, durable (fdatasync per group commit): latency and rows/s at 1, 10, 100 concurrent emitters;"
echo "   references, same run: BenchmarkEmitFloor (the same emitters into the least a group commit can do on this disk)"
echo "   and BenchmarkEmitFlush (the disk alone: one 16 KiB write + fdatasync; at 100 emitters a row waits for one, its batch's, once the emitters woken with it have run)"
echo "   40 000 rows per run: some 400 commits at 100 emitters (see BenchmarkEmit)"
echo "   3 rounds, each: the store, then its floor, then the disk (so a drift of this machine's disk between rounds moves both)"
go test -c -o "$tmp/audit.test" ./audit/auditstore/
for round in 1 2 3; do
  "$tmp/audit.test" -test.run '^$' -test.bench '^BenchmarkEmit(Floor|Flush)?$' -test.benchtime 40000x -test.count 1 | grep -E '^Benchmark'
done | tee -a "$tmp/emit.txt" "$raw"
awk -f scripts/emit-summary.awk "$tmp/emit.txt"
echo "   the builders' own RFC 8785 encoder vs the same drafts through encoding/json + jcs.Transform, 100 emitters, 3 rounds (BenchmarkEmitCanon):"
for round in 1 2 3; do
  "$tmp/audit.test" -test.run '^$' -test.bench 'BenchmarkEmitCanon' -test.benchtime 20000x -test.count 1 | grep -E '^Benchmark'
done | tee -a "$tmp/canon.txt" "$raw"
awk '/^BenchmarkEmitCanon\// { for (i = 3; i < NF; i++) if ($(i+1) == "p95-ms") { if ($1 ~ /builders/) b[++nb] = $i; else l[++nl] = $i } }
  END { for (r = 1; r <= nb && r <= nl; r++) { q[r] = b[r] / l[r]; s = s sprintf(" %.2f", q[r]) }
    n = r - 1; for (i = 2; i <= n; i++) for (j = i; j > 1 && q[j] < q[j-1]; j--) { t = q[j]; q[j] = q[j-1]; q[j-1] = t }
    if (n) printf "   p95 builders/library, round by round:%s (median %.2f; below 1: the builders\x27 encoder pays end to end)\n", s, n % 2 ? q[(n+1)/2] : (q[n/2] + q[n/2+1]) / 2 }' "$tmp/canon.txt"
echo "   the index applier's work per row (one transaction of 500 rows; issue 42's eight-caller floor):"
go test -run '^$' -bench 'BenchmarkApply/rows=500$' -benchtime 3x -count 3 ./audit/auditstore/ | grep -E '^Benchmark' | tee -a "$raw"
echo "   the syncer's own work between two fdatasyncs, per batch of 50 rows (ids, hashes, journal lines):"
go test -run '^$' -bench 'BenchmarkChain$' -benchmem -count 3 ./audit/auditstore/ | grep -E '^Benchmark' | tee -a "$raw"
echo
echo "== whole invocation in a real sandbox, durable audit vs a no-op sink, interleaved (20 rounds)"
go test "${static[@]}" -run '^$' -bench BenchmarkRunAuditVsNoop -benchtime 20x -count 1 ./supervisor/ | grep -E '^Benchmark' | tee -a "$raw"

echo
echo "== tool calls from inside a sandbox through the broker (enforced, audited durably) vs the MCP Go SDK over stdio, 5 s each;"
echo "   and a bare echo over a Unix socket to another process, the floor of any call across a process boundary"
go test -tags seccomp -run '^$' -bench BenchmarkToolCallVsMCP -benchtime 1x -count 1 ./integration/ | grep -E '^Benchmark' | tee -a "$raw"
echo "   the same with 8 callers in one sandbox, and 8 sandboxes with one caller each, against 8 MCP callers:"
go test -tags seccomp -run '^$' -bench BenchmarkToolCallsConcurrentVsMCP -benchtime 1x -count 1 ./integration/ | grep -E '^Benchmark' | tee -a "$raw"

echo
echo "== the daemon: invocations/s of a trivial skill through the admin socket at concurrency 1, 8, 32; RSS idle and per active invocation;"
echo "   a warm-ready invocation split by the daemon's histograms, and its work floor: exec in held namespaces, admin round trip, row fdatasync"
go test -tags seccomp -run '^$' -bench BenchmarkDaemon -benchtime 1x -count 1 ./integration/ | grep -E '^Benchmark' | tee -a "$raw" | tr '\t' '\n' | sed -n 's/^ *\([0-9.-]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort

echo
echo "== an MCP tools/call over stdio (cyberos mcp serve) vs POST /v1/invocations with and without a request_id, warm sandbox ready, p50 (issue 40: mcp-over-api <= 1.2)"
go test -tags seccomp -run '^$' -bench BenchmarkMCPStdioCall -benchtime 1x -count 1 ./integration/ | grep -E '^Benchmark' | tr '\t' '\n' | sed -n 's/^ *\([0-9.-]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort

echo
echo "== issue 39, MCP servers: a brokered call of server-everything's echo (a skill in a sandbox, the daemon's broker with durable rows,"
echo "   the server in its own sandbox) vs the Go SDK's call over stdio to the same server unsandboxed, plus one fdatasync of a row;"
echo "   3 rounds of 2 s each, interleaved. Then the server ready (the daemon's start path: sandbox, node, initialize, tools/list)"
echo "   vs the same server started without a sandbox, 9 rounds interleaved (issue 39: each at most 1.2x)"
if bash scripts/mcp-servers.sh >/dev/null; then
  go test -tags seccomp -run '^$' -bench BenchmarkMCPServerEcho -benchtime 1x -count 1 ./integration/ | grep -E '^Benchmark' | tee -a "$raw" |
    tr '\t' '\n' | sed -n 's/^ *\([0-9.-]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort || echo "   (BenchmarkMCPServerEcho gave no result)"
  CGO_ENABLED=1 go test "${static[@]}" -run '^$' -bench BenchmarkMCPServerReady -benchtime 1x -count 1 ./supervisor/cli/ | grep -E '^Benchmark' | tee -a "$raw" |
    tr '\t' '\n' | sed -n 's/^ *\([0-9.-]*\) \(.*\)$/  \2 \1/p' | grep -v 'ns/op' | sort || echo "   (BenchmarkMCPServerReady gave no result)"
else
  echo "   (the pinned MCP servers could not be installed into .cache/mcp: left out)"
fi

echo
echo "== results table and plots (scripts/benchplot: medians of the lines above)"
go run ./scripts/benchplot -out "$out" -doc docs/performance.md "$raw"
echo "   raw lines: $raw"
