#!/bin/bash
# deploy/memgate.service under a real systemd: a Debian 12 container booted with systemd-nspawn,
# memgate installed in it by the steps of docs/service.md, then checks.sh. `make systemd-check`.
#
# Needs root. Without root, systemd-nspawn or a Debian mirror it prints
# "systemd-check skipped: <reason>" and exits 0; once the container has booted, any failed check
# exits 1. The container is always powered off and its files removed afterwards.
#
# Safety: the host may not run systemd as PID 1. systemd is only ever booted inside the container's
# own root directory, never against the host's (its boot-time tmpfiles cleanup would empty the
# host's /tmp). nspawn runs in a private mount namespace with its own tmpfs on /tmp and
# /run/systemd, and the container has loopback only (--private-network).
#
# Environment: MEMGATE_SYSTEMD_CACHE (default /var/cache/memgate-systemd-check) holds rootfs.base
# (the debootstrapped Debian, made once), wheels/ and the run's files; MIRROR overrides the mirror;
# KEEP=1 leaves the container running for a look inside.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
CACHE=${MEMGATE_SYSTEMD_CACHE:-/var/cache/memgate-systemd-check}
BASE=$CACHE/rootfs.base
ROOT=$CACHE/rootfs
MACHINE=memgate-check
STARTED=$(date +%s)

skip() { echo "systemd-check skipped: $*"; exit 0; }
say() { echo "--- $(date -u +%T) $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (it boots a container with systemd-nspawn)"
for tool in unshare nsenter; do command -v $tool >/dev/null || skip "no $tool on this host"; done

mirror() {
    [ -n "${MIRROR:-}" ] && { echo "$MIRROR"; return; }
    # The mirror apt is configured with: deb822 sources first, then the one-line format.
    # Either file may be missing (pipefail and set -e would end the script on it): no match is "".
    { sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } \
        | { grep -v security || true; } | head -1
    { sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null || true; } \
        | { grep -v security || true; } | head -1
}

if ! command -v systemd-nspawn >/dev/null || { [ ! -x "$BASE/lib/systemd/systemd" ] && ! command -v debootstrap >/dev/null; }; then
    say "installing debootstrap and systemd-container on the host"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap systemd-container; } \
        >/dev/null 2>&1 || skip "no systemd-nspawn or debootstrap, and apt-get could not install them"
fi
mkdir -p "$CACHE"
if [ ! -x "$BASE/lib/systemd/systemd" ]; then
    MIRROR=$(mirror | head -1)
    [ -n "$MIRROR" ] || skip "no Debian mirror in apt's sources (set MIRROR)"
    say "debootstrap bookworm from $MIRROR into $BASE (once)"
    rm -rf "$BASE.part"
    debootstrap --variant=minbase \
        --include=systemd,systemd-sysv,dbus,python3,python3-venv,ca-certificates,procps,iproute2 \
        bookworm "$BASE.part" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || skip "debootstrap from $MIRROR failed (see $CACHE/debootstrap.log)"
    mv "$BASE.part" "$BASE"
fi

# The checkout as it is now, tracked and new files, without what .gitignore names (.venv, caches).
say "wheels of the checkout and its dependencies (pip, on the host)"
rm -rf "$CACHE/checkout" && mkdir -p "$CACHE/checkout" "$CACHE/wheels"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$CACHE/checkout" 2>/dev/null || true)
rm -f "$CACHE"/wheels/memgate-*.whl
# hatchling: `pip install <source folder>` builds memgate with it, offline too.
# (The host's pip config may name local index folders that do not exist; pip's warning is noise.)
python3 -m pip wheel -q --disable-pip-version-check -w "$CACHE/wheels" "$CACHE/checkout" hatchling 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }

say "fresh container root from $BASE"
rm -rf "$ROOT"
cp -a "$BASE" "$ROOT"
mkdir -p "$ROOT/root/check"
cp -a "$CACHE/checkout" "$ROOT/root/check/checkout"
mkdir -p "$ROOT/opt/memgate"
cp -a "$CACHE/wheels" "$ROOT/opt/memgate/wheels"
cp "$HERE"/install.sh "$HERE"/checks.sh "$HERE"/docs_steps.py "$HERE"/tg.py "$ROOT/root/check/"
python3 "$HERE/docs_steps.py" "$SRC/docs/service.md" "$ROOT/root/check/steps"
# The container has no network: exec's check installs the host's bubblewrap package (apt's cache,
# else downloaded here); without one that check fails, saying so.
deb=$(ls /var/cache/apt/archives/bubblewrap_*.deb 2>/dev/null | head -1 || true)
[ -n "$deb" ] || deb=$(cd "$CACHE" && apt-get download -q bubblewrap >/dev/null 2>&1 && ls "$CACHE"/bubblewrap_*.deb | head -1 || true)
[ -z "$deb" ] || cp "$deb" "$ROOT/root/check/bubblewrap.deb"

# Booted by a helper that runs inside `unshare -m --propagation private`: the tmpfs mounts and the
# cgroup it moves into stay out of the host's view.
cat >"$CACHE/boot.sh" <<EOF
#!/bin/bash
set -eu
echo \$\$ >"$CACHE/nspawn.pid"
mount -t tmpfs -o mode=1777,size=64m memgate-check-tmp /tmp
mount -t tmpfs -o mode=755,size=8m memgate-check-run /run/systemd
for hierarchy in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
    if [ -d \$hierarchy ]; then mkdir -p \$hierarchy/$MACHINE; echo \$\$ >\$hierarchy/$MACHINE/cgroup.procs; fi
done
exec systemd-nspawn --directory="$ROOT" --boot --machine=$MACHINE --register=no --keep-unit \
    --private-network --console=read-only
EOF
chmod 700 "$CACHE/boot.sh"

NSPAWN= INIT=
children() { ps -o pid= --ppid "$1" | tr -d ' ' | head -1 || true; }
poweroff() {
    local rc=$?
    if [ -n "${KEEP:-}" ] && [ -n "$INIT" ]; then
        echo "KEEP is set: the container stays up; enter with nsenter --target $INIT --all, stop with"
        echo "  nsenter --target $INIT --all systemctl poweroff, then rm -rf $ROOT"
        exit $rc
    fi
    say "power off"
    [ -z "$NSPAWN" ] || [ -n "$INIT" ] || INIT=$(children "$NSPAWN")
    # systemctl poweroff inside; SIGTERM makes nspawn ask the container's systemd for the same.
    { [ -n "$INIT" ] && inside systemctl poweroff >/dev/null 2>&1; } || { [ -n "$NSPAWN" ] && kill -TERM "$NSPAWN" 2>/dev/null; } || true
    if [ -n "$NSPAWN" ]; then
        # nspawn ends once the container's systemd has shut down.
        for _ in $(seq 150); do kill -0 "$NSPAWN" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$NSPAWN" 2>/dev/null; then
            echo "the container did not power off within 30 s: killed"
            [ -z "$INIT" ] || kill -KILL "$INIT" 2>/dev/null || true
            kill -KILL "$NSPAWN" 2>/dev/null || true
        fi
    fi
    for hierarchy in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
        [ -d $hierarchy/$MACHINE ] && find $hierarchy/$MACHINE -depth -type d -exec rmdir {} + 2>/dev/null
    done
    rm -rf "$ROOT"
    echo "systemd-check: $(($(date +%s) - STARTED)) s in all"
    exit $rc
}
trap poweroff EXIT
trap 'exit 130' INT TERM HUP

# Run a command in the container only: $INIT must be a live process named systemd, not our PID 1.
inside() {
    [ -n "$INIT" ] && [ "$INIT" != 1 ] && [ "$(cat /proc/"$INIT"/comm 2>/dev/null)" = systemd ] || return 1
    nsenter --target "$INIT" --all env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 TERM=dumb SYSTEMD_PAGER= SYSTEMD_COLORS=0 "$@"
}

say "boot"
rm -f "$CACHE/nspawn.pid"
unshare --mount --propagation private "$CACHE/boot.sh" >"$CACHE/nspawn.log" 2>&1 </dev/null &
state=
for _ in $(seq 300); do
    [ -s "$CACHE/nspawn.pid" ] && NSPAWN=$(cat "$CACHE/nspawn.pid")
    [ -z "$NSPAWN" ] || INIT=$(children "$NSPAWN")
    if [ -n "$INIT" ]; then
        state=$(inside systemctl is-system-running 2>/dev/null) || true
        case $state in running | degraded) break ;; esac
    fi
    sleep 0.1
done
case $state in
    running) echo "booted: systemd $(inside systemctl --version | head -1 | cut -d' ' -f2) is PID 1 of the container (host PID $INIT)" ;;
    *) tail -5 "$CACHE/nspawn.log"; skip "the container did not boot (state '${state:-none}')" ;;
esac
# From here on, any failure fails the check.

say "install as docs/service.md says"
# Each in a session of its own (setsid), so no signal sent in there can reach this script.
if ! inside setsid --wait /root/check/install.sh >"$CACHE/install.log" 2>&1; then
    tail -25 "$CACHE/install.log"
    echo "FAIL: the install steps of docs/service.md (full log: $CACHE/install.log)"
    exit 1
fi
grep -E '^(\$ |created|kept|✓|✗|apt stand-in)' "$CACHE/install.log" || true

say "checks"
inside setsid --wait /root/check/checks.sh
