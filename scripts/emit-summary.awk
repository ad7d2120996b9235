# Summary of the audit emit benchmarks (make bench): for each number of
# emitters, the median over the runs (-count) of BenchmarkEmit's p50, p95,
# p99 and rows/s, the same for BenchmarkEmitFloor (its reference, same run),
# and the store/floor ratios of p50 and p95 round by round (the k-th store
# run against the k-th floor run: the disk drifts between rounds) with their
# median; then BenchmarkEmitFlush's median p50 (the disk alone).
# Input: `go test -bench` lines, e.g.
#   BenchmarkEmit/emitters=100-2  40000  9155 ns/op  0.73 p50-ms  1.53 p95-ms  ...
# Each metric is a value followed by its unit.

function median(list,    n, v, i, j, t) {
	n = split(list, v, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && v[j] + 0 < v[j-1] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
	if (n == 0) return ""
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}

/^BenchmarkEmit/ {
	name = $1
	sub(/-[0-9]+$/, "", name) # the GOMAXPROCS suffix
	split(name, part, "/")
	bench = part[1]; sub(/^BenchmarkEmit/, "", bench)
	if (bench == "") bench = "store"
	else if (bench == "Floor") bench = "floor"
	else if (bench == "Flush") bench = "flush"
	else next
	em = part[2]; sub(/^emitters=/, "", em)
	if (em == "") em = "-"
	if (!(em in seenEm) && em != "-") { seenEm[em] = 1; order[++nEm] = em }
	for (i = 3; i < NF; i++)
		if ($(i+1) ~ /^(p50-ms|p95-ms|p99-ms|rows\/s)$/) {
			k = bench SUBSEP em SUBSEP $(i+1)
			vals[k] = vals[k] " " $i
			runs[bench SUBSEP em]++
		}
}

END {
	printf "   median over the runs (store = BenchmarkEmit, floor = BenchmarkEmitFloor, same run):\n"
	printf "   %-10s %-6s %8s %8s %8s %9s\n", "emitters", "", "p50 ms", "p95 ms", "p99 ms", "rows/s"
	for (e = 1; e <= nEm; e++) {
		em = order[e]
		for (b = 1; b <= 2; b++) {
			bench = b == 1 ? "store" : "floor"
			printf "   %-10s %-6s %8.3f %8.3f %8.3f %9.0f\n", b == 1 ? em : "", bench,
				median(vals[bench, em, "p50-ms"]), median(vals[bench, em, "p95-ms"]),
				median(vals[bench, em, "p99-ms"]), median(vals[bench, em, "rows/s"])
		}
		for (m = 1; m <= 2; m++) {
			metric = m == 1 ? "p50-ms" : "p95-ms"
			ns = split(vals["store", em, metric], sv, " ")
			nf = split(vals["floor", em, metric], fv, " ")
			ratios = ""
			for (r = 1; r <= ns && r <= nf; r++)
				if (fv[r] > 0) ratios = ratios sprintf(" %.2f", sv[r] / fv[r])
			if (ratios != "")
				printf "   %-10s %-6s %s store/floor, round by round:%s (median %.2f)\n", "", "", substr(metric, 1, 3), ratios, median(ratios)
		}
	}
	if (vals["flush", "-", "p50-ms"] != "")
		printf "   disk alone (BenchmarkEmitFlush, 16 KiB write + fdatasync): p50 %.3f ms, p95 %.3f ms\n",
			median(vals["flush", "-", "p50-ms"]), median(vals["flush", "-", "p95-ms"])
	if (vals["store", "100", "p95-ms"] != "")
		printf "   target p95 < 2 ms at 100 emitters: median p95 %.3f ms over %d runs (each run: %s)\n",
			median(vals["store", "100", "p95-ms"]), split(vals["store", "100", "p95-ms"], tmp, " "), substr(vals["store", "100", "p95-ms"], 2)
}
