#!/usr/bin/env bash
# Run every `go test -fuzz` target for a bounded time (CI: after make test).
# FUZZTIME (default 20s) is each target's budget; FUZZ_PARALLEL (default 2)
# its workers. A failure leaves the input under the package's
# testdata/fuzz/<Target>/ and fails the run; commit that file with the fix
# so the input stays a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=1
fuzztime=${FUZZTIME:-20s}
parallel=${FUZZ_PARALLEL:-2}

# package  target   (what it feeds)
targets=(
	"./policy FuzzParse"                        # SKILL.md frontmatter
	"./policy FuzzCheckFile"                    # file path canonicalisation in the enforcer
	"./policy FuzzCanonicalMemoryPath"          # memory path canonicalisation
	"./policy FuzzCheckURL"                     # HttpFetch/HttpPost URL checks against the domain allowlist
	"./policy FuzzCheckBash"                    # Bash command checks against the allowlist
	"./supervisor/tools FuzzFileToolPaths"      # paths through the real file tools (links, reserved dirs)
	"./supervisor/seccomp FuzzLoadProfile"      # seccomp profile decoding
	"./supervisor/broker FuzzReadFrame"         # broker frames
	"./supervisor/broker FuzzDispatch"          # JSON-RPC request decoding and dispatch
	"./audit FuzzAppendJCSString"               # RFC 8785 strings in audit payloads (any bytes)
	"./audit FuzzDecodeWriterLine"              # audit journal/export lines read without encoding/json
)

# fuzz_one runs one target, its output also in $out. Go 1.26's fuzz
# coordinator can end a run with a bare "context deadline exceeded" at the
# -fuzztime boundary when a worker is slow to stop (go.dev/issue/75804,
# fixed in Go 1.27): no input is written and nothing is found. Such a run
# is tried once more; any other failure, or a second one, fails.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fuzz_one() {
	# -fuzzminimizetime bounds the minimisation of each new input, which
	# otherwise can take most of a short budget.
	go test -tags seccomp -run '^$' -fuzz "^${2}\$" -fuzztime "$fuzztime" \
		-fuzzminimizetime 5s -parallel "$parallel" "$1" 2>&1 | tee "$out"
	return "${PIPESTATUS[0]}"
}
coordinator_race() {
	! grep -q 'Failing input written' "$out" &&
		grep -A1 -E '^--- FAIL: ' "$out" | grep -qx '    context deadline exceeded'
}

failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "== $name ($pkg, $fuzztime)"
	if fuzz_one "$pkg" "$name"; then
		continue
	fi
	if coordinator_race; then
		echo "== $name: the Go fuzz coordinator's deadline race (go.dev/issue/75804), no input written: once more"
		fuzz_one "$pkg" "$name" && continue
	fi
	failed+=("$name")
done
if ((${#failed[@]})); then
	echo "fuzzing found failures in: ${failed[*]} (inputs under testdata/fuzz/)" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, $fuzztime each, nothing found"
