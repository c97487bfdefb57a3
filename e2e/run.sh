#!/bin/bash
# End-to-end test of the systemd integration in a real systemd (docs/systemd.md).
#
# 1. builds the wheel;  2. makes (or reuses) a pristine Debian tree with debootstrap,
# cached in $E2E_ROOT;  3. lays a tmpfs overlay over it at $E2E_WORK/root and puts in
# the wheel, the Makefile pieces, systemd/, config/ and a probe unit;  4. boots it
# with systemd-nspawn; the probe (e2e/probe.py) runs `make install`, drives
# systemctl/parlschedctl and writes
# result.json, then the container powers off;  5. copies the result to $E2E_OUT.
# The host test tests/e2e/test_systemd.py asserts on result.json.
#
# Cached on purpose and never removed here: $E2E_ROOT (the tree) and $E2E_CACHE (pip).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
E2E_ROOT=${E2E_ROOT:-/var/tmp/parlsched-e2e-root}
E2E_CACHE=${E2E_CACHE:-/var/tmp/parlsched-e2e-cache}
E2E_WORK=${E2E_WORK:-/var/tmp/parlsched-e2e-work}
E2E_OUT=${E2E_OUT:-$repo/build/e2e}
E2E_TIMEOUT=${E2E_TIMEOUT:-840}        # seconds for the whole script
E2E_PY=${E2E_PY:-$repo/.venv/bin/python}
SUITE=bookworm
MIRROR=${E2E_MIRROR:-http://deb.debian.org/debian}
INCLUDE=systemd,systemd-sysv,dbus,python3,python3-venv,python3-pip,procps,make
TREE_KEY="v1 $SUITE minbase $INCLUDE"

start=$(date +%s)
log() { printf '[e2e %4ds] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }
left() { echo $(( E2E_TIMEOUT - ($(date +%s) - start) )); }

[ "$(id -u)" = 0 ] || { echo "e2e/run.sh: needs root (debootstrap, systemd-nspawn)" >&2; exit 2; }

mkdir -p "$(dirname "$E2E_ROOT")" "$E2E_CACHE/pip" "$E2E_OUT"
exec 9>"$E2E_ROOT.lock"
flock -w 600 9 || { echo "e2e/run.sh: another e2e run holds $E2E_ROOT.lock" >&2; exit 2; }

if ! command -v debootstrap >/dev/null || ! command -v systemd-nspawn >/dev/null; then
    log "installing debootstrap and systemd-container"
    timeout 300 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq debootstrap systemd-container >/dev/null
fi

log "building the wheel"
rm -rf "$E2E_OUT/dist"
timeout 300 "$E2E_PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$E2E_OUT/dist" "$repo" \
    > "$E2E_OUT/wheel.log" 2>&1 || { tail -30 "$E2E_OUT/wheel.log" >&2; exit 1; }
wheel=$(ls "$E2E_OUT"/dist/parlsched-*.whl)

if [ "$(cat "$E2E_ROOT/.parlsched-e2e-tree" 2>/dev/null)" != "$TREE_KEY" ]; then
    log "debootstrap $SUITE into $E2E_ROOT (cold; cached for later runs)"
    rm -rf "$E2E_ROOT.new" "$E2E_ROOT"
    timeout 480 debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$E2E_ROOT.new" "$MIRROR" \
        > "$E2E_OUT/debootstrap.log" 2>&1 || { tail -20 "$E2E_OUT/debootstrap.log" >&2; exit 1; }
    echo "$TREE_KEY" > "$E2E_ROOT.new/.parlsched-e2e-tree"
    mv "$E2E_ROOT.new" "$E2E_ROOT"
else
    log "reusing the cached tree $E2E_ROOT"
fi

# A throw-away view of the pristine cached tree: an overlay whose upper layer is a
# tmpfs, so the run starts clean and leaves nothing to delete (a plain copy if the
# kernel refuses the overlay).
cleanup() {
    if mountpoint -q "$E2E_WORK/root"; then umount -l "$E2E_WORK/root"; fi
    if mountpoint -q "$E2E_WORK/layer"; then umount -l "$E2E_WORK/layer"; fi
}
trap cleanup EXIT
cleanup
rm -rf "$E2E_WORK"
mkdir -p "$E2E_WORK/root" "$E2E_WORK/layer"
mount -t tmpfs -o size=6g,mode=0755 parlsched-e2e "$E2E_WORK/layer"
mkdir "$E2E_WORK/layer/upper" "$E2E_WORK/layer/work"
if mount -t overlay parlsched-e2e \
        -o "lowerdir=$E2E_ROOT,upperdir=$E2E_WORK/layer/upper,workdir=$E2E_WORK/layer/work" "$E2E_WORK/root"; then
    log "overlay of the cached tree at $E2E_WORK/root"
else
    umount "$E2E_WORK/layer"
    log "copying the cached tree to $E2E_WORK/root"
    cp -a --reflink=auto "$E2E_ROOT/." "$E2E_WORK/root/"
fi
root=$E2E_WORK/root

# What a user has after a checkout and a wheel build: the Makefile pieces and the files
# `make install` installs.
src=$root/usr/src/parlsched
mkdir -p "$src/dist" "$src/mk" "$src/docs"
cp "$repo/Makefile" "$src/"
cp "$repo/mk/systemd.mk" "$src/mk/"
cp -r "$repo/systemd" "$repo/config" "$src/"
test ! -f "$repo/docs/systemd.md" || cp "$repo/docs/systemd.md" "$src/docs/"
cp "$wheel" "$src/dist/"

# The probe: its files in /e2e (bound to the host's $E2E_WORK/io, so the result is
# there even if the tree is damaged) and a oneshot unit that powers off when done.
io=$E2E_WORK/io
mkdir -p "$io"
cp "$here/probe.py" "$here/workload.py" "$io/"
echo "/usr/src/parlsched/dist/$(basename "$wheel")" > "$io/wheel"
cp "$here/parlsched-e2e-probe.service" "$root/etc/systemd/system/"
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/parlsched-e2e-probe.service \
    "$root/etc/systemd/system/multi-user.target.wants/parlsched-e2e-probe.service"
# pip inside reaches the registry as the host does: the host's CA bundle (which holds
# the CA of a TLS-intercepting proxy, when there is one) and its proxy variables.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$root/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    echo "PIP_CERT=/etc/ssl/certs/ca-certificates.crt" > "$io/pip.env"
fi
env | grep -E '^(https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY|PIP_INDEX_URL|PIP_DEFAULT_TIMEOUT)=' >> "$io/pip.env" || true
# No getty on the read-only console, nothing to wait for.
rm -f "$root/etc/systemd/system/getty.target.wants/"* 2>/dev/null || true

budget=$(( $(left) - 20 ))
[ "$budget" -gt 60 ] || { echo "e2e/run.sh: no time left to boot ($budget s)" >&2; exit 1; }
log "booting systemd in $root (at most ${budget}s)"
rc=0
timeout -k 20 "$budget" systemd-nspawn -D "$root" --register=no --keep-unit \
    --capability=all --system-call-filter=perf_event_open \
    --machine=parlsched-e2e --bind="$io:/e2e" --bind="$E2E_CACHE/pip:/var/cache/parlsched-pip" \
    --boot --console=read-only </dev/null > "$E2E_OUT/console.log" 2>&1 || rc=$?
log "container exited with $rc"

cp "$io/probe.log" "$io/journal.txt" "$E2E_OUT/" 2>/dev/null || true
if [ ! -s "$io/result.json" ]; then
    echo "e2e/run.sh: the probe wrote no result (nspawn rc $rc); last console lines:" >&2
    tail -40 "$E2E_OUT/console.log" >&2
    tail -40 "$E2E_OUT/probe.log" >&2 2>/dev/null || true
    exit 1
fi
cp "$io/result.json" "$E2E_OUT/result.json"
log "result in $E2E_OUT/result.json"
