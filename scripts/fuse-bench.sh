#!/bin/bash
# `tarn mount` side by side with the tools over the client library, one
# `tarn serve` of a temporary directory on loopback:
#   tar x of FILES small files       vs  tarn cp -r of the same tree
#   rm -r of them                    vs  tarn rm -r
#   ls -lR of them (fresh mount)     vs  tarn ls -l -R
#   sequential 1 MiB write (fsync)   vs  tarn cp local->nfs
#   sequential 1 MiB read (cold)     vs  tarn cat
#   4 KiB random reads, one at a time (fio, or python without it)
#                                    vs  the library (client/examples/randread)
# and prints a table with the ratio mount/tool. With the server's metrics
# it also counts the NFS calls the mount sent per file for tar x, rm -r
# and ls -lR (the server's per-operation counters).
#
# Usage: scripts/fuse-bench.sh [--quick] [--vers 3|4.0|4.1|4.2] [--bin TARN]
#                              [--files N] [--mib N] [--rand-secs S] [--mount-opts O]
#   (as root; loopback only). Defaults: 10,000 files, 256 MiB, 5 s of
#   random reads, vers 4.1, TARN = $CARGO_TARGET_DIR/release/tarn.
#   --quick: 500 files, 8 MiB, 1 s of random reads (for CI).
# RANDREAD_BIN is the library's reader (default: examples/randread next to
# TARN; cargo build --release -p client --example randread).
set -euo pipefail
BIN=${CARGO_TARGET_DIR:-target}/release/tarn
VERS=4.1
FILES=10000
MIB=256
RAND_SECS=5
MOPTS=actimeo=60
while [ $# -gt 0 ]; do
  case $1 in
    --quick) FILES=500 MIB=8 RAND_SECS=1 ;;
    --vers) VERS=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --files) FILES=$2; shift ;;
    --mib) MIB=$2; shift ;;
    --rand-secs) RAND_SECS=$2; shift ;;
    --mount-opts) MOPTS=$2; shift ;;
    *) echo "usage: $0 [--quick] [--vers V] [--bin TARN] [--files N] [--mib N] [--rand-secs S] [--mount-opts O]" >&2; exit 2 ;;
  esac
  shift
done
RANDREAD_BIN=${RANDREAD_BIN:-$(dirname "$BIN")/examples/randread}
W=$(mktemp -d /var/tmp/tarn-fuse-bench.XXXXXX)
mkdir -p "$W/export" "$W/state" "$W/mnt" "$W/local"
chmod 777 "$W/export"
PORT=$((20000 + RANDOM % 10000))
MPORT=$((PORT + 10000))
"$BIN" serve "$W/export" --listen 127.0.0.1:$PORT --state-dir "$W/state" --grace 0.05 \
  --metrics 127.0.0.1:$MPORT >"$W/serve.out" 2>"$W/serve.err" &
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
for _ in $(seq 100); do grep -q . "$W/serve.err" 2>/dev/null && break; (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
Q="vers=$VERS&uid=1000&gid=1000"
URL="nfs://127.0.0.1:$PORT"
mnt() {
  "$BIN" mount -f "$URL/?$Q" "$W/mnt" -o "$MOPTS" 2>"$W/mount.err" &
  MPID=$!
  for _ in $(seq 200); do grep -q " $W/mnt " /proc/mounts && return; sleep 0.05; done
  cat "$W/mount.err"; exit 1
}
# A copy of the mount in another mount namespace keeps the mount process
# alive after fusermount3 -u here: after 10 s it is killed by PID.
umnt() {
  fusermount3 -u "$W/mnt"
  for _ in $(seq 100); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$MPID" 2>/dev/null || true
  wait "$MPID" || true; MPID=
}
# The server's calls so far (round trips: COMPOUNDs and NFSv3/NLM
# procedures; the operations inside COMPOUNDs are program "nfs4op").
# With BENCH_OPS=1 each phase also lists its operations by name.
metrics() { curl -s "http://127.0.0.1:$MPORT/metrics" 2>/dev/null | grep '^tarn_op_calls_total' || true; }
calls() {
  metrics >"$W/m.$1"
  awk '!/program="nfs4op"/ { n += $NF } END { printf "%d", n }' "$W/m.$1"
}
per_file() { # PHASE BEFORE AFTER: round trips per file, and the ops with BENCH_OPS=1
  NOTES+=("$1: $(awk -v a="$2" -v b="$3" -v n="$FILES" 'BEGIN { printf "%.2f", (b - a) / n }') round trips per file")
  if [ "${BENCH_OPS:-}" = 1 ]; then
    NOTES+=("  $(awk -v n="$FILES" 'NR == FNR { a[$1] = $NF; next } { d = $NF - a[$1]; if (d > 0) { sub(/.*op="/, "", $1); sub(/".*/, "", $1); printf "%s %.2f  ", $1, d / n } }' "$W/m.before" "$W/m.after")")
  fi
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
ROWS=()
row() { ROWS+=("$1|$2|$3|$4"); } # label | mount | tool | unit
NOTES=()

# --- small files --------------------------------------------------------
mkdir "$W/local/tree"
DIRS=$(( (FILES + 99) / 100 ))
python3 - "$W/local/tree" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%d" % (i // 100))
    if i % 100 == 0:
        os.mkdir(d)
    with open(os.path.join(d, "f%d" % (i % 100)), "w") as f:
        f.write("%d %s\n" % (i, "x" * (i % 200)))
PY
tar cf "$W/local/tree.tar" -C "$W/local" tree

mnt
c0=$(calls before); t=$(now); tar xf "$W/local/tree.tar" --no-same-owner -C "$W/mnt"; s_tar=$(secs "$t"); c1=$(calls after)
per_file "tar x" "$c0" "$c1"
umnt
diff -r "$W/local/tree" "$W/export/tree" >/dev/null || { echo "tar x through the mount: the tree differs" >&2; exit 1; }
mnt
c0=$(calls before); t=$(now); ls -lR "$W/mnt/tree" >/dev/null; s_ls=$(secs "$t"); c1=$(calls after)
per_file "ls -lR (fresh mount)" "$c0" "$c1"
umnt; mnt
c0=$(calls before); t=$(now); rm -r "$W/mnt/tree"; s_rm=$(secs "$t"); c1=$(calls after)
per_file "rm -r (fresh mount)" "$c0" "$c1"
umnt

t=$(now); "$BIN" cp -r -q "$W/local/tree" "$URL/tree?$Q"; c_cp=$(secs "$t")
t=$(now); "$BIN" ls -l -R "$URL/tree?$Q" >/dev/null; c_ls=$(secs "$t")
t=$(now); "$BIN" rm -r "$URL/tree?$Q"; c_rm=$(secs "$t")
row "tar x $FILES files / tarn cp -r" "$s_tar" "$c_cp" s
row "rm -r $FILES files / tarn rm -r" "$s_rm" "$c_rm" s
row "ls -lR $FILES files / tarn ls -l -R" "$s_ls" "$c_ls" s

# --- sequential 1 MiB ----------------------------------------------------
BYTES=$((MIB * 1048576))
head -c $BYTES /dev/urandom >"$W/local/big"
mnt
t=$(now); dd if="$W/local/big" of="$W/mnt/big" bs=1M conv=fsync status=none; s_w=$(secs "$t")
umnt; mnt
t=$(now); dd if="$W/mnt/big" of=/dev/null bs=1M status=none; s_r=$(secs "$t")
umnt
cmp "$W/local/big" "$W/export/big"
rm -f "$W/export/big"
t=$(now); "$BIN" cp -q "$W/local/big" "$URL/big?$Q"; c_w=$(secs "$t")
t=$(now); "$BIN" cat "$URL/big?$Q" >/dev/null; c_r=$(secs "$t")
rm -f "$W/export/big" "$W/local/big"
mbs() { awk -v b="$BYTES" -v s="$1" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
# Throughput rows: the ratio is still mount time / tool time.
row "write $MIB MiB bs=1M+fsync / tarn cp (MB/s)" "$(mbs "$s_w")" "$(mbs "$c_w")" "MB/s"
row "read $MIB MiB bs=1M cold / tarn cat (MB/s)" "$(mbs "$s_r")" "$(mbs "$c_r")" "MB/s"

# --- 4 KiB random reads ----------------------------------------------------
RMIB=$(( MIB < 256 ? MIB : 256 ))
head -c $((RMIB * 1048576)) /dev/urandom >"$W/export/rand"
chmod 644 "$W/export/rand"
cat "$W/export/rand" >/dev/null
randread_us() { # FILE: mean latency in µs of one 4 KiB pread, page cache cold
  if command -v fio >/dev/null; then
    fio --name=rr --filename="$1" --rw=randread --bs=4k --size=${RMIB}m --ioengine=psync \
      --direct=0 --invalidate=1 --runtime="$RAND_SECS" --time_based --output-format=json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print("%.1f" % (j["clat_ns"]["mean"]/1e3))'
  else
    python3 - "$1" "$RAND_SECS" <<'PY'
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
blocks = os.fstat(fd).st_size // 4096; n = 0; t0 = time.perf_counter()
while time.perf_counter() - t0 < float(sys.argv[2]):
    os.pread(fd, 4096, random.randrange(blocks) * 4096); n += 1
print("%.1f" % ((time.perf_counter() - t0) / n * 1e6))
PY
  fi
}
mnt
s_rr=$(randread_us "$W/mnt/rand")
umnt
c_rr=-
case $VERS in
  4.1|4.2)
    if [ -x "$RANDREAD_BIN" ]; then
      c_rr=$("$RANDREAD_BIN" 127.0.0.1:$PORT /rand "$RAND_SECS" "${VERS#4.}" |
        sed -n 's/.*latency mean \([0-9.]*\) us.*/\1/p')
    else
      NOTES+=("randread by the library skipped: $RANDREAD_BIN missing (cargo build --release -p client --example randread)")
    fi ;;
  *) NOTES+=("randread by the library: NFSv4.1/4.2 only (the example's session)") ;;
esac
row "4 KiB random read, mean / library (us)" "$s_rr" "${c_rr:--}" us
rm -f "$W/export/rand"

# --- the table ---------------------------------------------------------------
echo "fuse-bench: tarn mount -o $MOPTS, vers=$VERS, $FILES files, $MIB MiB (loopback)"
printf '%-46s %12s %12s %8s\n' "operation: mount / tool" mount tool ratio
for r in "${ROWS[@]}"; do
  IFS='|' read -r label m c unit <<<"$r"
  ratio=$(awk -v m="$m" -v c="$c" -v u="$unit" 'BEGIN {
    if (c == "-" || c + 0 == 0 || m + 0 == 0) { print "-"; exit }
    # time ratio: for a rate, tool/mount
    printf "%.2fx", (u == "MB/s") ? c / m : m / c }')
  printf '%-46s %12s %12s %8s\n' "$label" "$m $unit" "$c $unit" "$ratio"
done
for n in "${NOTES[@]}"; do echo "  $n"; done
