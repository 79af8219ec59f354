#!/bin/bash
# `tarn mount` next to `tarn cp`: 1 MiB sequential write and read of a
# file (default 1 GiB) through the FUSE mount and by tarn cp, stat of
# 10,000 files uncached and cached, and tar x of 10,000 files.
# Usage: scripts/fuse-bench.sh [TARN_BIN] [VERS] [MIB]   (as root; loopback only)
set -euo pipefail
BIN=${1:-target/release/tarn}
VERS=${2:-4.1}
MIB=${3:-1024}
W=$(mktemp -d /var/tmp/tarn-fuse-bench.XXXXXX)
mkdir -p "$W/export" "$W/state" "$W/mnt" "$W/local"
chmod 777 "$W/export"
PORT=$((20000 + RANDOM % 10000))
"$BIN" serve "$W/export" --listen 127.0.0.1:$PORT --state-dir "$W/state" --grace 0.05 >"$W/serve.out" 2>"$W/serve.err" &
SPID=$!
MPID=
cleanup() {
  fusermount3 -u "$W/mnt" 2>/dev/null || true
  [ -n "$MPID" ] && kill "$MPID" 2>/dev/null || true
  kill "$SPID" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
sleep 0.5
URL="nfs://127.0.0.1:$PORT/?vers=$VERS&uid=1000&gid=1000"
mnt() {
  "$BIN" mount -f "$URL" "$W/mnt" -o "$1" 2>"$W/mount.err" &
  MPID=$!
  for _ in $(seq 200); do grep -q " $W/mnt " /proc/mounts && return; sleep 0.05; done
  cat "$W/mount.err"; exit 1
}
umnt() { fusermount3 -u "$W/mnt"; wait "$MPID" || true; MPID=; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f MB/s", b / s / 1e6 }'; }
secs() { local t0=$1; awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }
BYTES=$((MIB * 1048576))
head -c $BYTES /dev/urandom >"$W/local/big"

mnt actimeo=60
t=$(date +%s.%N); dd if="$W/local/big" of="$W/mnt/big" bs=1M conv=fsync status=none; s=$(secs $t)
echo "mount write ${MIB} MiB (bs=1M, fsync): ${s}s, $(rate $BYTES $s)"
umnt; mnt actimeo=60
t=$(date +%s.%N); dd if="$W/mnt/big" of=/dev/null bs=1M status=none; s=$(secs $t)
echo "mount read  ${MIB} MiB (bs=1M, cold page cache): ${s}s, $(rate $BYTES $s)"
cmp "$W/local/big" "$W/mnt/big"
umnt
rm -f "$W/export/big"
t=$(date +%s.%N); "$BIN" cp -q "$W/local/big" "nfs://127.0.0.1:$PORT/big?vers=$VERS&uid=1000&gid=1000"; s=$(secs $t)
echo "tarn cp local->nfs ${MIB} MiB: ${s}s, $(rate $BYTES $s)"
t=$(date +%s.%N); "$BIN" cp -q "nfs://127.0.0.1:$PORT/big?vers=$VERS&uid=1000&gid=1000" "$W/local/back"; s=$(secs $t)
echo "tarn cp nfs->local ${MIB} MiB: ${s}s, $(rate $BYTES $s)"
rm -f "$W/local/back" "$W/export/big"

mkdir "$W/local/tree"
for d in $(seq 0 99); do mkdir "$W/local/tree/d$d"; for f in $(seq 0 99); do echo "$d $f" >"$W/local/tree/d$d/f$f"; done; done
tar cf "$W/local/tree.tar" -C "$W/local" tree
mnt actimeo=60
t=$(date +%s.%N); tar xf "$W/local/tree.tar" --no-same-owner -C "$W/mnt"; s=$(secs $t)
echo "tar x of 10,000 files through the mount: ${s}s"
umnt; mnt actimeo=60
t=$(date +%s.%N); find "$W/mnt/tree" -type f -print0 | xargs -0 stat -c %s >/dev/null; s=$(secs $t)
echo "stat 10,000 files, uncached: ${s}s"
t=$(date +%s.%N); find "$W/mnt/tree" -type f -print0 | xargs -0 stat -c %s >/dev/null; s=$(secs $t)
echo "stat 10,000 files, cached (actimeo=60): ${s}s"
umnt
rm -rf "$W/export/tree"
t=$(date +%s.%N); "$BIN" cp -r -q "$W/local/tree" "nfs://127.0.0.1:$PORT/tree?vers=$VERS&uid=1000&gid=1000"; s=$(secs $t)
echo "tarn cp -r of the same 10,000 files: ${s}s"
