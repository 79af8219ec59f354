#!/bin/bash
# `tarn mount` next to `tarn cp`: 1 MiB sequential write and read of a
# file (default 1 GiB) through the FUSE mount and by tarn cp, 4 KiB random
# reads of a 256 MiB file (fio, or a python reader without it) through the
# mount next to the client library doing the same reads
# (crates/client/examples/randread.rs) and to a local file, stat of 10,000
# files uncached and cached, and tar x of 10,000 files.
# Usage: scripts/fuse-bench.sh [TARN_BIN] [VERS] [MIB]   (as root; loopback only)
# RAND_MIB (256) and RAND_SECS (10) size the random-read runs; RANDREAD_BIN
# is the library's reader (default: examples/randread next to TARN_BIN:
# cargo build --release -p client --example randread).
set -euo pipefail
BIN=${1:-target/release/tarn}
VERS=${2:-4.1}
MIB=${3:-1024}
RAND_MIB=${RAND_MIB:-256}
RAND_SECS=${RAND_SECS:-10}
RANDREAD_BIN=${RANDREAD_BIN:-$(dirname "$BIN")/examples/randread}
W=$(mktemp -d /var/tmp/tarn-fuse-bench.XXXXXX)
mkdir -p "$W/export" "$W/state" "$W/mnt" "$W/local"
chmod 777 "$W/export"
PORT=$((20000 + RANDOM % 10000))
"$BIN" serve "$W/export" --listen 127.0.0.1:$PORT --state-dir "$W/state" --grace 0.05 >"$W/serve.out" 2>"$W/serve.err" &
SPID=$!
MPID=
cleanup() {
  fusermount3 -u "$W/mnt" 2>/dev/null || true
  [ -n "$MPID" ] && kill -KILL "$MPID" 2>/dev/null || true
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
# A copy of the mount in another mount namespace (a process that unshared
# while it was mounted) keeps the FUSE connection, and so the mount
# process, alive after fusermount3 -u here: after 10 s it is killed by PID.
umnt() {
  fusermount3 -u "$W/mnt"
  for _ in $(seq 100); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$MPID" 2>/dev/null || true
  wait "$MPID" || true; MPID=
}
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

# 4 KiB random reads, one at a time. The file is written on the server's
# disk directly, so the server reads it from its page cache in every run.
randread() { # randread FILE LABEL: fio (or python) for RAND_SECS; prints IOPS and mean latency
  if command -v fio >/dev/null; then
    fio --name=rr --filename="$1" --rw=randread --bs=4k --size=${RAND_MIB}m --ioengine=psync \
      --direct=0 --invalidate="${3:-1}" --runtime="$RAND_SECS" --time_based --output-format=json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("%.0f IOPS, latency mean %.0f us, p99 %.0f us" % (j["iops"], j["clat_ns"]["mean"]/1e3, j["clat_ns"]["percentile"]["99.000000"]/1e3))' |
      sed "s|^|$2 (fio): |"
  else
    python3 - "$1" "$RAND_SECS" <<'PY' | sed "s|^|$2 (python, fio missing): |"
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
blocks = os.fstat(fd).st_size // 4096; lat = []; t0 = time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[2]):
    t = time.perf_counter(); os.pread(fd, 4096, random.randrange(blocks) * 4096); lat.append(time.perf_counter() - t)
lat.sort(); print("%.0f IOPS, latency mean %.0f us, p99 %.0f us" % (len(lat) / (time.perf_counter() - t0), sum(lat) / len(lat) * 1e6, lat[len(lat) * 99 // 100] * 1e6))
PY
  fi
}
head -c $((RAND_MIB * 1048576)) /dev/urandom >"$W/export/rand"
chmod 644 "$W/export/rand"
cat "$W/export/rand" >/dev/null
mnt actimeo=60
randread "$W/mnt/rand" "randread 4 KiB through the mount (${RAND_MIB} MiB file, FUSE page cache cold)"
umnt
case $VERS in
  4.1|4.2)
    if [ -x "$RANDREAD_BIN" ]; then
      echo "randread 4 KiB by the library (client::remote, same file): $("$RANDREAD_BIN" 127.0.0.1:$PORT /rand "$RAND_SECS" "${VERS#4.}")"
    else
      echo "randread by the library skipped: $RANDREAD_BIN missing (cargo build --release -p client --example randread)"
    fi ;;
  *) echo "randread by the library: NFSv4.1/4.2 only (the example's session)" ;;
esac
# The same reads of the local file in the page cache: the system call's own cost.
randread "$W/export/rand" "randread 4 KiB of the local file (page cache)" 0
rm -f "$W/export/rand"

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
