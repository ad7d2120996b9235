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

echo
echo "== a shell skill calling tools through the broker (cyberos-tool): emit and read a note; Bash and other scopes are refused"
"$bin" skill run examples/notes-shell --args '{"title":"demo","text":"hello from the sandbox"}' --state-dir "$state" --json |
  python3 -c 'import json,sys; e=json.load(sys.stdin); print("outcome", e["outcome"]); print(json.dumps(e["result"], indent=1))'
echo
echo "== a Go skill (skillclient): lists its tools, saves and searches a note, runs uname inside its sandbox"
"$bin" skill run examples/notes-go --args '{"text":"gopher notes"}' --state-dir "$state" --json |
  python3 -c 'import json,sys; e=json.load(sys.stdin); r=e["result"]; print("outcome", e["outcome"]); print("tools", [t["name"] for t in r["tools"]]); print("search", r["search"]); print("uname", r["uname"]["stdout"].strip()); print("bash id refused:", r["bash_id_refused"])'
echo
echo "== the audit chain of all of the above"
"$bin" audit verify --state-dir "$state"
