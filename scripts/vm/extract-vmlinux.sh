#!/usr/bin/env bash
# Prints the uncompressed kernel (ELF vmlinux) inside a bzImage: finds the
# first compression magic that decompresses to an ELF image (as the
# kernel's scripts/extract-vmlinux does). Under software emulation vmlinux
# boots about twice as fast as the bzImage, which decompresses itself.
# Usage: extract-vmlinux.sh vmlinuz > vmlinux
set -euo pipefail
img=$1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
try() { # magic (grep -P bytes), decompressor...
  local magic=$1 pos
  shift
  for pos in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1); do
    # Trailing data after the stream makes decompressors complain; the ELF
    # check below decides.
    tail -c +$((pos + 1)) "$img" | "$@" >"$tmp" 2>/dev/null || true
    if [ "$(head -c 4 "$tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      cat "$tmp"
      exit 0
    fi
  done
}
try '\xfd7zXZ\x00' xz -dc
try '\x28\xb5\x2f\xfd' zstd -dc
try '\x1f\x8b\x08' gzip -dc
try '\x5d\x00\x00\x00' xz -dc --format=lzma
try '\x02\x21\x4c\x18' lz4 -dc
echo "no compressed ELF kernel found in $img" >&2
exit 1
