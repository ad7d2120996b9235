#!/usr/bin/env bash
# Provisions a Debian or Ubuntu machine with cgroup v2 (the Vagrantfile's
# VM, or any VM of your own) to build cyberos and run its root integration
# suite: the Debian packages of scripts/install-deps.sh plus make, and the Go
# toolchain go.mod asks for at /usr/local/go. Idempotent; run as root.
# Usage: scripts/vm/provision.sh [SOURCE_DIR]   (default: the checkout it is in, or /vagrant)
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)}
[ -f "$src/go.mod" ] || src=/vagrant
[ -f "$src/go.mod" ] || { echo "no cyberos checkout at $src (pass its path)" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
  echo "run as root (sudo $0)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends make ca-certificates curl >/dev/null
bash "$src/scripts/install-deps.sh" 2>/dev/null || true # it exits 1 when Go is missing; Go comes next
want=$(awk '/^go /{print $2; exit}' "$src/go.mod")
have=$(/usr/local/go/bin/go env GOVERSION 2>/dev/null || true)
# Install unless the Go there is at least go.mod's version.
if [ -z "$have" ] || ! printf '%s\n' "go$want" "$have" | sort -V -C; then
  arch=$(dpkg --print-architecture)
  echo "installing go$want ($arch) at /usr/local/go"
  curl -fsSL "https://go.dev/dl/go$want.linux-$arch.tar.gz" -o /tmp/go.tgz
  rm -rf /usr/local/go
  tar -C /usr/local -xzf /tmp/go.tgz
  rm /tmp/go.tgz
fi
bash "$src/scripts/install-deps.sh"
/usr/local/go/bin/go version
