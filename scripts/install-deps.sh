#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when missing.
set -euo pipefail
need=()
for pkg in libseccomp-dev pkg-config gcc libc6-dev python3 curl; do
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
