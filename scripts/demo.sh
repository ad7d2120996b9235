#!/usr/bin/env bash
# Runs the example skill in a real sandbox and prints its result and what was enforced.
set -euo pipefail
bin=$1 state=$2
if [ "$(id -u)" -ne 0 ]; then
  echo "make demo needs root (namespaces, cgroups): sudo make demo" >&2
  exit 1
fi
echo "== cyberos skill validate examples/hello-shell"
"$bin" skill validate examples/hello-shell
echo
echo "== cyberos skill run examples/hello-shell --args '{\"name\":\"demo\"}'"
"$bin" skill run examples/hello-shell --args '{"name":"demo"}' --state-dir "$state"
