#!/bin/bash
# Stage 2, pid 1 in the guest: mount a cgroup v2-only system, run the test
# binaries with their output on the second serial port (ttyS1; kernel
# messages stay on ttyS0), end with a status line there and report the
# status through isa-debug-exit.
#
# The kernel passes unknown name=value words of its command line to init as
# environment: CYBEROS_VM_RUN and CYBEROS_VM_SKIP (-test.run and -test.skip
# patterns, optional), CYBEROS_VM_TIMEOUT (each test binary's -test.timeout)
# and CYBEROS_TEST_SLOWDOWN (read by the integration tests).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TMPDIR=/tmp
# CI: root tests and the tests needing python3 or a toolchain fail instead of skipping.
export CI=1
export CYBEROS_EXPECT_CGROUP_MODE=unified
export CYBEROS_IT_PREBUILT=/opt/cyberos/bin
export CYBEROS_PROMTOOL=/opt/cyberos/bin/promtool

out=/dev/ttyS1
finish() { # status
  echo "CYBEROS-VM-STATUS $1" >"$out"
  sync
  # isa-debug-exit: qemu exits with (value << 1) | 1.
  printf "\\$(printf %03o "$1")" | dd of=/dev/port bs=1 seek=244 count=1 conv=notrunc 2>/dev/null
  echo o >/proc/sysrq-trigger
  sleep 10
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
stty -F "$out" raw -echo 2>/dev/null
busybox hostname cyberos-vm
busybox ip link set lo up
# The tests' cgroups are made under the root: delegate the controllers.
if ! echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control; then
  echo "cannot enable memory, pids, cpu in /sys/fs/cgroup" >"$out"
  finish 2
fi

{
  echo "== guest: $(uname -r), cgroup: $(stat -fc %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control), $(nproc) cpus, $(($(sed -n 's/MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo) / 1024)) MiB"
  echo "== test.run: ${CYBEROS_VM_RUN:-all}; test.skip: ${CYBEROS_VM_SKIP:-none}; time-bound slowdown: ${CYBEROS_TEST_SLOWDOWN:-1}"
  echo "== cyberos doctor"
  /opt/cyberos/bin/cyberos doctor
} >"$out" 2>&1

status=0
# The last pass runs the integration package's sandbox and broker suites
# again with every sandbox started warm (CYBEROS_IT_START, see
# integration/helpers_test.go), as `make test` does on the host.
for pass in integration cgroups integration:warm; do
  pkg=${pass%%:*}
  start_kind=cold
  [ "$pass" = "$pkg" ] || start_kind=${pass#*:}
  echo "== $pkg.test ($start_kind starts)" >"$out"
  start=$(date +%s)
  (cd /opt/cyberos/$pkg && CYBEROS_IT_START=$start_kind /opt/cyberos/tests/$pkg.test -test.v -test.count=1 \
    -test.timeout="${CYBEROS_VM_TIMEOUT:-30m}" ${CYBEROS_VM_RUN:+-test.run="$CYBEROS_VM_RUN"} \
    ${CYBEROS_VM_SKIP:+-test.skip="$CYBEROS_VM_SKIP"}) >"$out" 2>&1
  rc=$?
  echo "CYBEROS-VM-PACKAGE $pass rc=$rc seconds=$(($(date +%s) - start))" >"$out"
  [ $rc -eq 0 ] || status=1
done
finish $status
