#!/bin/bash
# The unit's test, in the systemd guest (scripts/vm/run.sh -systemd): what
# `make install` put in the image is started as an operator would, used,
# and stopped, and must leave nothing behind. Output on the second serial
# port, a status line there, the status through isa-debug-exit (as
# run-tests.sh does). Run by cyberos-vm-systemd-test.service at boot.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
out=/dev/ttyS1
stty -F "$out" raw -echo 2>/dev/null
exec >"$out" 2>&1

finish() { # status
  echo "CYBEROS-VM-STATUS $1"
  sync
  printf "\\$(printf %03o "$1")" | dd of=/dev/port bs=1 seek=244 count=1 conv=notrunc 2>/dev/null
  echo o >/proc/sysrq-trigger
  sleep 10
}
fail() {
  echo "--- FAIL: $*"
  # What every cyberos process is doing, then the Go stacks of the daemon
  # and its creation helper (SIGQUIT: they print them to the journal).
  quit=
  for d in /proc/[0-9]*; do
    read -r n 2>/dev/null <"$d/comm" || continue
    case $n in cyberos* | runc* | sh | sleep) ;; *) continue ;; esac
    echo "    proc: ${d#/proc/} $n state=$(sed -n 's/^State:[[:space:]]*//p' "$d/status") wchan=$(cat "$d/wchan" 2>/dev/null) $(cat "$d/cgroup" 2>/dev/null)"
    case $n in cyberos | cyberos-spawn) quit+=" ${d#/proc/}" ;; esac
  done
  [ -n "$quit" ] && kill -QUIT $quit 2>/dev/null && sleep 3
  journalctl -u cyberos-supervisor --no-pager -n 3000 2>&1 | sed 's/^/    journal: /'
  finish 1
}
# post SKILL BODY: an invocation through the admin socket into /tmp/SKILL.json,
# bounded: the skills here have a one-minute budget, and a daemon that never
# answers must fail the test with its state, not hang it until the VM's timeout.
post() {
  curl -s --max-time 300 --unix-socket "$admin" http://localhost/v1/invocations -d "$2" >"/tmp/$1.json"
}
step() { echo "== $*"; }

unit=cyberos-supervisor
admin=/run/cyberos/supervisor.sock
step "guest: $(uname -r), systemd $(systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p'), cgroup $(stat -fc %T /sys/fs/cgroup)"

step "the installed config is valid; the example skill goes into its skills_dir"
cyberos supervisor serve --config /etc/cyberos/supervisor.yaml --check || fail "serve --check on the installed config"
cp -r /opt/cyberos/examples/hello-shell /opt/cyberos/skills/ || fail "copy hello-shell"

step "systemctl enable --now $unit"
# Type=notify: this returns once the daemon said READY, so the admin socket
# must answer at once, without a retry.
timeout 120 systemctl enable --now "$unit" || fail "systemctl enable --now $unit"
systemctl is-active --quiet "$unit" || fail "$unit is not active after start"
code=$(curl -s -o /tmp/healthz -w '%{http_code}' --unix-socket "$admin" http://localhost/healthz)
[ "$code" = 200 ] || fail "/healthz right after start: $code $(cat /tmp/healthz)"
echo "/healthz: $code $(cat /tmp/healthz)"

step "an invocation"
post inv '{"skill_id":"hello-shell","args":{"name":"systemd"}}' || fail "POST /v1/invocations (curl exit $?)"
grep -q '"outcome":"success"' /tmp/inv.json || fail "the invocation did not succeed: $(cat /tmp/inv.json)"
echo "invocation: $(head -c 300 /tmp/inv.json)"
unitcg=$(systemctl show -P ControlGroup "$unit")
cg=/sys/fs/cgroup$unitcg
echo "the unit's cgroup: $unitcg"

step "the daemon in $unitcg/supervisor, each sandbox under $unitcg/cyberos"
main=$(systemctl show -P MainPID "$unit")
[ "$(cat /proc/"$main"/cgroup)" = "0::$unitcg/supervisor" ] || fail "the daemon (pid $main) is in $(cat /proc/"$main"/cgroup)"
mkdir -p /opt/cyberos/skills/sleeper
printf -- '---\nname: sleeper\ndescription: sleeps a while\neffort_minutes: 1\n---\n' >/opt/cyberos/skills/sleeper/SKILL.md
printf '#!/bin/sh\nsleep 5\necho "{}"\n' >/opt/cyberos/skills/sleeper/main
chmod 0755 /opt/cyberos/skills/sleeper /opt/cyberos/skills/sleeper/main
post sleeper '{"skill_id":"sleeper"}' &
inv=$!
skill=
for _ in $(seq 100); do
  for c in /proc/[0-9]*/comm; do
    read -r n 2>/dev/null <"$c" && [ "$n" = sleep ] && grep -q "^0::$unitcg/cyberos/" "${c%/comm}/cgroup" 2>/dev/null && skill=${c%/comm} && break
  done
  [ -n "$skill" ] && break
  sleep 0.2
done
[ -n "$skill" ] || fail "no skill process under $unitcg/cyberos/: $(find "$cg" -type d)"
echo "the skill's cgroup: $(cat "$skill/cgroup")"
systemctl status "$unit" --no-pager -l | grep -q "cyberos/" || fail "systemctl status does not show the sandbox: $(systemctl status "$unit" --no-pager -l)"
wait $inv || fail "POST sleeper (curl exit $?)"
grep -q '"outcome":"success"' /tmp/sleeper.json || fail "sleeper did not succeed: $(cat /tmp/sleeper.json)"
cp -r /opt/cyberos/examples/notes-shell /opt/cyberos/skills/ || fail "copy notes-shell"
post notes '{"skill_id":"notes-shell","args":{"title":"t","text":"under systemd"}}' || fail "POST notes-shell (curl exit $?)"
grep -q '"outcome":"success"' /tmp/notes.json || fail "notes-shell (tools through the broker) did not succeed: $(cat /tmp/notes.json)"

step "systemctl stop $unit leaves nothing"
timeout 120 systemctl stop "$unit" || fail "systemctl stop $unit"
state=$(systemctl show -P ActiveState "$unit") result=$(systemctl show -P Result "$unit")
[ "$state" = inactive ] && [ "$result" = success ] || fail "after stop: ActiveState=$state Result=$result"
[ ! -e "$cg" ] || fail "the unit's cgroup $cg is still there: $(find "$cg" -type d)"
left=$(find /sys/fs/cgroup -type d -name 'cyberos*' ! -name cyberos-vm-systemd-test.service)
[ -z "$left" ] || fail "cgroups left: $left"
procs=$(for c in /proc/[0-9]*/comm; do read -r n 2>/dev/null <"$c" && case $n in cyberos* | runc*) echo "${c%/comm} $n" ;; esac; done)
[ -z "$procs" ] || fail "processes left: $procs"
[ ! -e "$admin" ] || fail "the admin socket $admin is still there"
socks=$(find /run -name '*.sock' -path '*cyberos*' 2>/dev/null)
[ -z "$socks" ] || fail "sockets left: $socks"
grep -q ' /run/cyberos' /proc/self/mountinfo && fail "mounts left under /run/cyberos: $(grep ' /run/cyberos' /proc/self/mountinfo)"

echo "--- PASS: the unit starts (Type=notify), serves, and stops clean"
finish 0
