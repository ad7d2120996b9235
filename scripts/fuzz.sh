#!/usr/bin/env bash
# Run every `go test -fuzz` target for a bounded amount of work (CI: after
# make test). Each target's budget is a count of executions, about 20 s of
# work on the 2-core CI machine: a count sets no wall-clock deadline, so Go
# 1.26's fuzz coordinator cannot fail a run at the deadline having found
# nothing (go.dev/issue/75804, fixed in Go 1.27; seen here on 3 targets in
# one CI run, twice in a row on one). FUZZTIME (a duration such as 60s, or a
# count such as 100000x) replaces every target's budget; FUZZ_PARALLEL
# (default 2) is the number of workers. A failure leaves the input under the
# package's testdata/fuzz/<Target>/ and fails the run; commit that file with
# the fix so the input stays a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=1
parallel=${FUZZ_PARALLEL:-2}

# package  target  executions  (what it feeds)
targets=(
	"./policy FuzzParse 300000x"                  # SKILL.md frontmatter
	"./policy FuzzCheckFile 500000x"              # file path canonicalisation in the enforcer
	"./policy FuzzCanonicalMemoryPath 400000x"    # memory path canonicalisation
	"./policy FuzzCheckURL 400000x"               # HttpFetch/HttpPost URL checks against the domain allowlist
	"./policy FuzzCheckBash 400000x"              # Bash command checks against the allowlist
	"./supervisor/internal/tools FuzzFileToolPaths 30000x" # paths through the real file tools (links, reserved dirs)
	"./supervisor/internal/seccomp FuzzLoadProfile 30000x" # seccomp profile decoding
	"./supervisor/internal/broker FuzzReadFrame 100000x"   # broker frames
	"./supervisor/internal/broker FuzzDispatch 80000x"     # JSON-RPC request decoding and dispatch
	"./audit FuzzAppendJCSString 150000x"         # RFC 8785 strings in audit payloads (any bytes)
	"./audit FuzzDecodeWriterLine 300000x"        # audit journal/export lines read without encoding/json
)

# fuzz_one runs one target for a budget, its output also in $out.
# -fuzzminimizetime bounds the minimisation of each new input, which
# otherwise can take most of a short budget; -timeout bounds a count that a
# slow machine would take long over.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fuzz_one() {
	go test -tags seccomp -run '^$' -fuzz "^${2}\$" -fuzztime "$3" \
		-fuzzminimizetime 5s -parallel "$parallel" -timeout 10m "$1" 2>&1 | tee "$out"
	return "${PIPESTATUS[0]}"
}
# coordinator_race says whether a failed run is go.dev/issue/75804, which
# only a duration budget (FUZZTIME=60s) can meet: a bare "context deadline
# exceeded" at the deadline and no input written. Such a run is tried once
# more; any other failure, or a second one, fails.
coordinator_race() {
	! grep -q 'Failing input written' "$out" &&
		grep -A1 -E '^--- FAIL: ' "$out" | grep -qx '    context deadline exceeded'
}

failed=()
for t in "${targets[@]}"; do
	read -r pkg name budget <<<"$t"
	budget=${FUZZTIME:-$budget}
	echo "== $name ($pkg, $budget)"
	if fuzz_one "$pkg" "$name" "$budget"; then
		continue
	fi
	if [[ $budget != *x ]] && coordinator_race; then
		echo "== $name: the Go fuzz coordinator's deadline race (go.dev/issue/75804), no input written: once more"
		fuzz_one "$pkg" "$name" "$budget" && continue
	fi
	failed+=("$name")
done
if ((${#failed[@]})); then
	echo "fuzzing found failures in: ${failed[*]} (inputs under testdata/fuzz/)" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${FUZZTIME:-their budgets}, nothing found"
