#!/usr/bin/env bash
# Installs, only when missing, the Debian packages the build, the tests and
# the linter need, and golangci-lint. With the argument "build" only what
# `make build` and `make demo` need (no PostgreSQL, no golangci-lint); with
# "promtool" only promtool, which only the tests need (make test-tools).
set -euo pipefail
bin_dir="$(cd "$(dirname "$0")/.." && pwd)/.cache/bin"
if [ "${1:-}" = promtool ]; then
  # promtool for the tests of the shipped alerting rules and of /metrics
  # (telemetry): Prometheus's own checker, built the same way. go install
  # stamps no version into it, so the version built is noted beside it.
  PROMTOOL_VERSION=v0.316.0
  if [ ! -x "$bin_dir/promtool" ] || [ "$(cat "$bin_dir/promtool.version" 2>/dev/null)" != "$PROMTOOL_VERSION" ]; then
    echo "installing promtool (github.com/prometheus/prometheus $PROMTOOL_VERSION) into $bin_dir: a few minutes, once"
    rm -f "$bin_dir/promtool" "$bin_dir/promtool.version"
    GOBIN="$bin_dir" PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=0 \
      go install "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
    echo "$PROMTOOL_VERSION" >"$bin_dir/promtool.version"
  fi
  exit 0
fi
# The build's packages (musl-tools: cyberos-init; python3 and curl: the
# demo and the README's quickstart); PostgreSQL only for the fleet tests.
pkgs=(libseccomp-dev pkg-config gcc libc6-dev musl-tools python3 curl)
if [ "${1:-}" != build ]; then
  pkgs+=(postgresql)
fi
need=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
  echo "Go is not installed (expected at /usr/local/go)" >&2
  exit 1
fi
if [ "${1:-}" = build ]; then
  exit 0
fi
# golangci-lint for `make lint`, built into .cache/bin unless that version is
# there: a tool, kept out of go.mod so its dependencies are not the product's.
GOLANGCI_LINT_VERSION=v2.15.0
have=$("$bin_dir/golangci-lint" version 2>/dev/null || true)
if [[ "$have" != *"has version ${GOLANGCI_LINT_VERSION#v} "* ]]; then
  echo "installing golangci-lint $GOLANGCI_LINT_VERSION into $bin_dir"
  rm -f "$bin_dir/golangci-lint" # go install will not replace what it did not build
  GOBIN="$bin_dir" PATH="/usr/local/go/bin:$PATH" \
    go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
fi
