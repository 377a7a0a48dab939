#!/bin/bash
# Inside the check's container, after install.sh: what deploy/memgate.service promises, checked
# under the container's systemd. One PASS or FAIL line per check; exits 1 if any failed.
set -uo pipefail
CHECK=/root/check
FAILED=0
PASSED=0
tg() { python3 $CHECK/tg.py "$@"; }
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }
check() {
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
wait_for() {
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@"; do [ "$(date +%s)" -lt $deadline ] || return 1; sleep 0.1; done
}
prop() { systemctl show --property="$1" --value memgate; }
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
running() { [ "$(prop ActiveState)" = active ] && [ "$(prop MainPID)" != 0 ] && tg healthy; }
answered() {
    tg send "$1" && wait_for 30 tg replied "$1"
}
# Passes when the command prints nothing; otherwise shows (the start of) what it printed.
no_output() {
    local out
    out=$("$@" 2>&1)
    [ -z "$out" ] && return 0
    printf '%s\n' "$out" | head -5 | sed 's/^/    found: /'
    return 1
}
fake_llm() {
    systemctl stop fake-llm
    systemd-run --quiet --unit=fake-llm --property=WorkingDirectory=/opt/memgate/src \
        /opt/memgate/.venv/bin/python -m tests.fakes.llm --port 8000 "$@"
    wait_for 20 tg up http://127.0.0.1:8000/v1/models
}
UID_MEMGATE=$(id -u memgate)
GID_MEMGATE=$(id -g memgate)

echo "== the unit"
check "systemd-analyze verify: no warning" no_output systemd-analyze verify /etc/systemd/system/memgate.service
check "enable --now: memgate is active and Telegram connected" wait_for 30 running
check "a message is answered" answered "hello one"
doctor=$(sed -n '/^sudo sh -c/,$p' $CHECK/steps/4.sh | sed 's/^sudo //')
check "memgate doctor as the service user (docs step 4) passes while the service runs" \
    sh -c "$doctor" >$CHECK/doctor.log 2>&1
sed 's/^/    /' $CHECK/doctor.log

echo "== files"
check "everything under /var/lib/memgate and /var/cache/memgate is owned by memgate" \
    no_output find /var/lib/memgate /var/cache/memgate ! -user memgate
# The tokenizer's vocabulary cache holds public data only and keeps tiktoken's usual readable mode
# (its cache folder may be shared with other programs); everything else is owner-only.
check "no file or folder there is open to group or others (but the public vocabulary cache)" \
    no_output find /var/lib/memgate /var/cache/memgate -perm /077 ! -path "/var/cache/memgate/tiktoken/*"
check "the state folder, workspace and sessions exist (init as root, then the service)" \
    test -d /var/lib/memgate/state -a -f /var/lib/memgate/workspace/AGENTS.md -a -d /var/lib/memgate/workspace/sessions
echo "    $(stat -c '%a %U:%G %n' /var/lib/memgate /var/lib/memgate/state /var/lib/memgate/workspace /var/lib/memgate/workspace/AGENTS.md | paste -sd' ')"

echo "== sandbox"
PID=$(prop MainPID)
# MainPID is 0 when memgate is not running: then every check here fails, without looking at PID 0.
status() { [ "$PID" -gt 0 ] && sed -n "s/^$1:[[:space:]]*//p" /proc/"$PID"/status; }
check "runs as memgate (uid $UID_MEMGATE)" test "$(status Uid)" = "$(printf '%s\t' "$UID_MEMGATE" "$UID_MEMGATE" "$UID_MEMGATE" "$UID_MEMGATE" | sed 's/\t$//')"
check "no capabilities (effective, permitted, bounding, ambient)" \
    test "$(status CapEff)$(status CapPrm)$(status CapBnd)$(status CapAmb)" = "$(printf '0%.0s' $(seq 64))"
check "NoNewPrivs" test "$(status NoNewPrivs)" = 1
check "seccomp filter on" test "$(status Seccomp)" = 2
# In the service's own mount namespace. Read-only is tried as root, which only a read-only mount
# stops; writable as the service user.
in_service() { [ "$PID" -gt 0 ] && nsenter --target "$PID" --mount "$@"; }
as_service() { in_service --setuid "$UID_MEMGATE" --setgid "$GID_MEMGATE" "$@"; }
read_only() {
    local said
    said=$(in_service touch "$1/.check" 2>&1) && return 1
    [[ $said == *"Read-only file system"* ]]
}
for folder in /etc/memgate /opt/memgate /usr/local /var/lib; do
    check "$folder is read-only to the service" read_only $folder
done
for folder in /var/lib/memgate/state /var/lib/memgate/workspace /var/cache/memgate; do
    check "$folder is writable by the service" as_service sh -c "touch $folder/.check && rm $folder/.check"
done
mkdir -p /home/someone && touch /home/someone/marker /tmp/outside-marker
check "home folders hidden (ProtectHome)" in_service test ! -e /home/someone/marker -a ! -e $CHECK
check "a private /tmp (PrivateTmp)" in_service test ! -e /tmp/outside-marker
# PID 1 (root's systemd) is in the container's /proc, but not in the one the service sees.
proc_hidden() { [ -e /proc/1 ] && as_service test ! -e /proc/1; }
check "other users' processes invisible in /proc (ProtectProc=invisible)" proc_hidden
check "no device nodes beyond the pseudo ones (PrivateDevices)" in_service test ! -e /dev/net/tun -a -e /dev/null
check "memgate's journal has no permission error or traceback" \
    no_output sh -c "journalctl -u memgate -o cat | grep -i -E 'permission denied|read-only file system|operation not permitted|traceback'"

echo "== stop while a reply is in flight"
fake_llm --delay 4
before=$(tg count sendChatAction)
tg send "slow during stop"
writing() { [ "$(tg count sendChatAction)" -gt "$before" ]; }
wait_for 20 writing
limit=$(($(systemctl show --property=TimeoutStopUSec --value memgate | sed 's/s$//') * 1000))
T=$(date +%s%N)
systemctl stop memgate
rc=$?
took=$(ms "$T")
check "systemctl stop: rc=$rc in $took ms (TimeoutStopSec ${limit} ms), exit status $(prop ExecMainStatus), result $(prop Result)" \
    test $rc = 0 -a "$took" -lt "$limit" -a "$(prop ExecMainStatus)" = 0 -a "$(prop Result)" = success
check "the reply in flight was sent before the stop ended" tg replied "slow during stop"
fake_llm
systemctl start memgate
check "started again" wait_for 30 running

echo "== kill -9"
OLD=$(prop MainPID)
restarts=$(prop NRestarts)
# Never `kill 0` (this process group) when memgate is not running.
[ "$OLD" -gt 0 ] && kill -KILL "$OLD"
T=$(date +%s%N)
replaced() { [ "$(prop MainPID)" != "$OLD" ] && running; }
wait_for 60 replaced
check "restarted by systemd ($(ms "$T") ms, PID $OLD -> $(prop MainPID), NRestarts $restarts -> $(prop NRestarts))" \
    test "$(prop NRestarts)" = $((restarts + 1)) -a "$(prop MainPID)" != "$OLD"
check "answers after the restart" answered "after kill -9"

echo "== a bad config"
install -m 640 -o root -g memgate $CHECK/config.bad.yaml /etc/memgate/config.yaml
systemctl restart memgate
# A unit that systemd will restart waits in SubState auto-restart; one it gave up on is failed.
ended() { [ "$(prop ActiveState)" = failed ] || [ "$(prop SubState)" = auto-restart ]; }
wait_for 30 ended
check "exit status 78, failed, not restarted ($(systemctl show --property=ExecMainStatus,ActiveState,SubState memgate | paste -sd' '))" \
    test "$(prop ExecMainStatus)" = 78 -a "$(prop SubState)" = failed
bad_pid=$(prop ExecMainPID)
logged() { [ "$(journalctl -q -o cat _PID="$bad_pid" | wc -l)" -ge 1 ]; }
wait_for 10 logged
check "one journal line from memgate: $(journalctl -q -o cat _PID="$bad_pid" | head -1)" \
    test "$(journalctl -q -o cat _PID="$bad_pid" | wc -l)" = 1
# The fix as docs/service.md gives it: the file, reset-failed, restart.
install -m 640 -o root -g memgate $CHECK/config.good.yaml /etc/memgate/config.yaml
systemctl reset-failed memgate
systemctl restart memgate
check "fixed file, reset-failed, restart: running again" wait_for 30 running
check "answers after the fix" answered "after the fix"

echo "== the start limit counts every start"
# StartLimitBurst=5 in StartLimitIntervalSec=300, and manual starts count: from a cleared counter,
# five restarts are allowed and the sixth is refused, although nothing failed.
systemctl reset-failed memgate
allowed=0
for _ in 1 2 3 4 5; do systemctl restart memgate 2>/dev/null && allowed=$((allowed + 1)); done
said=$(systemctl restart memgate 2>&1)
rc=$?
echo "    systemctl said: $said" | head -1
check "$allowed restarts allowed, the 6th refused (rc=$rc) with 'Start request repeated too quickly' in the journal" \
    sh -c "[ $allowed = 5 -a $rc != 0 ] && journalctl -u memgate -o cat | grep -q 'Start request repeated too quickly'"
systemctl reset-failed memgate
systemctl start memgate
check "after reset-failed it starts again" wait_for 30 running

echo "== exposure"
systemd-analyze security memgate --no-pager >$CHECK/security.log 2>&1
score=$(sed -n 's/.*Overall exposure level for memgate.service: \([0-9.]*\).*/\1/p' $CHECK/security.log)
check "systemd-analyze security: ${score:-?} (at most 1.5)" awk -v s="${score:-99}" 'BEGIN { exit !(s <= 1.5) }'

echo "== secrets"
secret_free() { ! grep -r -q -E 'sk-check-0123456789|AAH-fake-token' "$@"; }
check "the key and the token appear nowhere in the journal" sh -c "! journalctl -o cat | grep -q -E 'sk-check-0123456789|AAH-fake-token'"
check "nor in /var/lib/memgate or /var/cache/memgate" secret_free /var/lib/memgate /var/cache/memgate

echo "== exec, with the drop-in of docs/service.md (after the exposure check: it loosens the unit)"
if [ -f $CHECK/bubblewrap.deb ]; then
    dpkg -i $CHECK/bubblewrap.deb >/dev/null
    # As docs/service.md says: the package, the drop-in, exec on in the config, a restart.
    install -D -m 644 /opt/memgate/src/deploy/memgate-exec.conf /etc/systemd/system/memgate.service.d/exec.conf
    /opt/memgate/.venv/bin/python - <<'EOF_CONFIG'
import yaml

path = "/etc/memgate/config.yaml"
config = yaml.safe_load(open(path))
config.setdefault("tools", {})["exec"] = {"enabled": True, "approve": "never"}
open(path, "w").write(yaml.safe_dump(config, sort_keys=False))
EOF_CONFIG
    fake_llm --exec 'id -un; touch made-by-exec; ls /var/lib/memgate/state; cat /etc/memgate/memgate.env; cat /etc/memgate/config.yaml; echo exec-end'
    systemctl daemon-reload
    systemctl reset-failed memgate
    systemctl restart memgate
    check "restarted with the drop-in and exec on" wait_for 30 running
    tg send "run the command"
    check "the model's exec call was answered" wait_for 30 tg said "exec said:"
    tg said "exec said:" >$CHECK/exec.log
    head -12 $CHECK/exec.log | sed 's/^/    /'
    check "exec ran inside the unit, as memgate, to its end" \
        sh -c "grep -q 'exit status 0' $CHECK/exec.log && grep -qx memgate $CHECK/exec.log && grep -qx exec-end $CHECK/exec.log"
    check "its file landed in the workspace" test -f /var/lib/memgate/workspace/made-by-exec
    check "the state folder, the env file and the config are absent inside" \
        test "$(grep -c 'No such file or directory' $CHECK/exec.log)" = 3
    fake_llm
else
    fail "exec: no bubblewrap package was found on the host to install in the container"
fi

echo
echo "systemd-check: $PASSED passed, $FAILED failed"
[ $FAILED = 0 ]
