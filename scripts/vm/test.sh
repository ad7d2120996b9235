#!/usr/bin/env bash
# Runs the root integration suite and the cgroups root tests on this
# machine, which must be cgroup v2 only (a current Debian or Ubuntu VM, e.g.
# the Vagrantfile's): the same test packages scripts/vm/run.sh runs in its
# qemu guest, with CI=1 (root tests and missing tools fail, never skip) and
# CYBEROS_EXPECT_CGROUP_MODE=unified (any other cgroup layout fails).
# Usage (as root): scripts/vm/test.sh [SOURCE_DIR] [go test flags, e.g. -run TestOOM]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)
if [ $# -gt 0 ] && [ -f "$1/go.mod" ]; then src=$1; shift; fi
[ -f "$src/go.mod" ] || src=/vagrant
cd "$src"
export PATH=/usr/local/go/bin:$PATH
if [ "$(id -u)" -ne 0 ]; then
  echo "run as root (sudo $0): the suite needs namespaces and cgroups" >&2
  exit 1
fi
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
  echo "/sys/fs/cgroup is not a cgroup v2 mount: boot with systemd.unified_cgroup_hierarchy=1 (Debian 11+ and Ubuntu 21.10+ do by default)" >&2
  exit 1
fi
export CI=1 CYBEROS_EXPECT_CGROUP_MODE=unified
CGO_ENABLED=1 go test -tags seccomp -count=1 -timeout 30m -v "$@" ./integration/ ./cgroups/
