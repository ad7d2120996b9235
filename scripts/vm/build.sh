#!/usr/bin/env bash
# Builds what scripts/vm/run.sh boots: Debian's kernel (downloaded with
# apt-get, unpacked, never installed) as an uncompressed vmlinux, and one
# initramfs holding a Debian userland (mmdebstrap: Essential packages plus
# python3 and busybox), the static cyberos binaries and probes, and the
# static test binaries of integration/ and cgroups/. Nothing needs a module:
# the guest runs entirely from the initramfs.
#
# Output (outside git): $VM_CACHE (default .cache/vm/) holds the downloads
# (kept between runs) and build/{vmlinux,initramfs.cpio}.
# Needs root (mmdebstrap, device nodes in the image) and Debian's apt.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
CACHE=${VM_CACHE:-$PWD/.cache/vm}
SUITE=${VM_SUITE:-bookworm}
MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}
# The guest userland: what the tests' skills and helpers exec (sh, sleep,
# cat, mount, python3 for the OOM and abort skills; busybox for `ip`; curl
# for the admin-socket tests; systemd for the installed unit's test).
ROOTFS_PACKAGES=python3,busybox,mount,curl,systemd

log() { echo "vm-build: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/vm/build.sh needs root (mmdebstrap, device nodes in the image)" >&2
  exit 1
fi
bash scripts/install-deps.sh
bash scripts/install-deps.sh promtool # the /metrics lint test in the guest
need=()
for pkg in qemu-system-x86 mmdebstrap cpio xz-utils zstd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$CACHE/kernel" "$CACHE/build"
build=$CACHE/build

# --- kernel ---------------------------------------------------------------
# linux-image-amd64 is a metapackage; its one dependency is the real image.
kpkg=${VM_KERNEL_PACKAGE:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
if [ -z "$kpkg" ]; then
  echo "cannot resolve linux-image-amd64 (apt-get update?)" >&2
  exit 1
fi
deb=$(ls "$CACHE/kernel/${kpkg}"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  log "downloading $kpkg"
  (cd "$CACHE/kernel" && apt-get download "$kpkg" 2>&1 | grep -v 'unsandboxed as root' >&2 || true)
  deb=$(ls "$CACHE/kernel/${kpkg}"_*.deb | head -1)
fi
vmlinux=$CACHE/kernel/$(basename "$deb" .deb).vmlinux
if [ ! -s "$vmlinux" ]; then
  log "unpacking $(basename "$deb")"
  tmp=$(mktemp -d)
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./boot
  bash scripts/vm/extract-vmlinux.sh "$tmp"/boot/vmlinuz-* >"$vmlinux.tmp"
  cp "$tmp"/boot/config-* "$CACHE/kernel/$(basename "$deb" .deb).config"
  rm -rf "$tmp"
  mv "$vmlinux.tmp" "$vmlinux"
fi
ln -sf "$vmlinux" "$build/vmlinux"

# --- guest userland ---------------------------------------------------------
key=$(echo "$SUITE $MIRROR $ROOTFS_PACKAGES" | sha256sum | cut -c1-12)
rootfs=$CACHE/rootfs-$SUITE-$key.tar
if [ ! -s "$rootfs" ]; then
  log "mmdebstrap $SUITE (essential + $ROOTFS_PACKAGES): a few minutes, once"
  mmdebstrap --variant=essential --include="$ROOTFS_PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    "$SUITE" "${rootfs%.tar}.partial.tar" "$MIRROR" >"$CACHE/mmdebstrap.log" 2>&1 ||
    { tail -20 "$CACHE/mmdebstrap.log" >&2; exit 1; }
  mv "${rootfs%.tar}.partial.tar" "$rootfs"
fi

# --- static binaries --------------------------------------------------------
# The guest has no Go toolchain and no compiler: everything is built here.
stage=$build/stage
rm -rf "$stage"
mkdir -p "$stage/opt/cyberos/bin/probes" "$stage/opt/cyberos/tests" "$stage/opt/cyberos/integration" "$stage/opt/cyberos/cgroups"
opt=$stage/opt/cyberos
static=(-tags "seccomp netgo osusergo" -ldflags '-extldflags "-static"')
log "building static binaries"
CGO_ENABLED=1 go build "${static[@]}" -o "$opt/bin/cyberos" ./cmd/cyberos
CGO_ENABLED=1 go build "${static[@]}" -o "$opt/bin/cyberos-spawn" ./cmd/cyberos-spawn
# cyberos-init with musl when installed, as `make build` builds it.
init_cc=${INIT_CC:-$(command -v musl-gcc || echo "${CC:-gcc}")}
"$init_cc" -static -O2 -Wall -Wextra -Werror -idirafter /usr/include -idirafter "/usr/include/$(gcc -print-multiarch)" -o "$opt/bin/cyberos-init" sandbox-init/cyberos-init.c
CGO_ENABLED=0 go build -o "$opt/bin/cyberos-tool" ./cmd/cyberos-tool
for p in integration/testdata/probes/*/; do
  CGO_ENABLED=0 go build -o "$opt/bin/probes/$(basename "$p")" "./$p"
done
for pkg in integration cgroups; do
  CGO_ENABLED=1 go test -c "${static[@]}" -o "$opt/tests/$pkg.test" "./$pkg"
done
for f in "$opt"/bin/cyberos "$opt"/bin/cyberos-spawn "$opt"/bin/cyberos-init "$opt"/tests/*.test; do
  if readelf -l "$f" | grep -q INTERP; then
    echo "$f is dynamically linked; the guest has no matching libraries" >&2
    exit 1
  fi
done
# promtool (static, built by install-deps.sh) for the /metrics lint test.
install -m 0755 .cache/bin/promtool "$opt/bin/promtool"
cp -r seccomp-profiles "$opt/seccomp-profiles"
# The example skills (notes-go built here: the guest has no toolchain) and
# the integration tests' data, where the tests look for them (repoRoot).
cp -r examples "$opt/examples"
CGO_ENABLED=0 go build -o "$opt/examples/notes-go/main" ./examples/notes-go/skill.go
mkdir -p "$opt/integration"
cp -r integration/testdata "$opt/integration/testdata"
# The shipped unit: a placement test runs its ExecStart's flags.
cp -r packaging "$opt/packaging"
install -m 0755 scripts/vm/guest/init "$stage/init"
# overlayfs, a module in Debian's kernel, loaded on demand on a real host:
# without it libcontainer copies the whole binary into a memfd at every
# sandbox start instead of sealing it with an overlay (exeseal), a start
# path production never takes. The guest init loads it.
kver=${kpkg#linux-image-}
ko=lib/modules/$kver/kernel/fs/overlayfs/overlay.ko
mkdir -p "$stage/usr/$(dirname "$ko")" # /lib is /usr/lib in the image
dpkg-deb --fsys-tarfile "$deb" | tar -x -O "./$ko" >"$stage/usr/$ko"
install -m 0755 scripts/vm/guest/run-tests.sh "$opt/run-tests.sh"
# What `make install` installs, as the systemd guest's test uses it (the
# test binaries' boot ignores it), and that test, enabled at boot.
log "make install into the image"
make --no-print-directory install DESTDIR="$stage" >"$CACHE/make-install.log" 2>&1 ||
  { tail -20 "$CACHE/make-install.log" >&2; exit 1; }
install -m 0755 scripts/vm/guest/systemd-test.sh "$opt/systemd-test.sh"
install -D -m 0644 scripts/vm/guest/cyberos-vm-systemd-test.service "$stage/etc/systemd/system/cyberos-vm-systemd-test.service"
mkdir -p "$stage/etc/systemd/system/multi-user.target.wants"
ln -s ../cyberos-vm-systemd-test.service "$stage/etc/systemd/system/multi-user.target.wants/"
# No udev in the image: the serial getty would wait 90 s for its device.
ln -s /dev/null "$stage/etc/systemd/system/serial-getty@ttyS0.service"

# --- initramfs --------------------------------------------------------------
# Uncompressed: the kernel only copies it, which beats decompressing under
# software emulation.
log "packing initramfs"
root=$build/root
rm -rf "$root"
mkdir -p "$root"
tar -x -C "$root" -f "$rootfs"
cp -a "$stage"/. "$root"/
echo cyberos-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost cyberos-vm\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) >"$build/initramfs.cpio.tmp"
mv "$build/initramfs.cpio.tmp" "$build/initramfs.cpio"
rm -rf "$root"
log "ready: $build/vmlinux $build/initramfs.cpio ($(du -h "$build/initramfs.cpio" | cut -f1))"
