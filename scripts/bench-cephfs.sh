#!/bin/bash
# scripts/bench-cephfs.sh [tarn bench options]
#
# One Tarn head over CephFS against one over the local backend, on the same
# machine, in one run: starts a throwaway one-node Ceph cluster
# (scripts/ceph-cluster.sh: monitor, memstore OSD, MDS, on 127.0.0.1), a
# `tarn serve` exporting `cephfs:///` and one exporting a local directory,
# runs the same `tarn bench` workloads against each, and prints them side by
# side with the ratio (CephFS first, local as the reference).
#
# The OSD keeps its objects in memory and every daemon shares this host's two
# cores with Tarn and the bench, so the ratio says what the CephFS backend
# costs next to the local one here, not what a real cluster delivers.
#
# Env: TARN_BIN (default target/release/tarn, built if missing); OPS,
# INFLIGHT, SECONDS_PER_RUN, FILE_SIZE, FILES (the bench's --ops, --inflight,
# --seconds, --file-size, --files). Needs Ceph: scripts/deps.sh --ceph.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TARN_BIN:-target/release/tarn}
[ -x "$BIN" ] || cargo build --release -q -p tarn
OPS=${OPS:-getattr,lookup,access,create,readdirplus,read4k,write4k,read1m,write1m}
INFLIGHT=${INFLIGHT:-1,16}
SECS=${SECONDS_PER_RUN:-3}
FILE_SIZE=${FILE_SIZE:-256M}
FILES=${FILES:-2000}

DIR=$(mktemp -d /var/tmp/tarn-bench-cephfs.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  bash scripts/ceph-cluster.sh stop "$DIR/ceph" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

t0=$(date +%s.%N)
mkdir -p "$DIR/ceph"
bash scripts/ceph-cluster.sh start "$DIR/ceph" >"$DIR/ceph-start.log" 2>&1 \
  || { cat "$DIR/ceph-start.log" >&2; exit 1; }
printf 'ceph cluster up in %.1f s\n' "$(echo "$(date +%s.%N) - $t0" | bc)"

serve() {  # NAME EXPORT-PATH [EXTRA TOML LINE]: sets PORT and PID once it serves
  local name=$1 path=$2 extra=${3:-}
  PORT=$(( 20000 + RANDOM % 20000 ))
  mkdir -p "$DIR/$name/state"
  # Root is not squashed: the bench works in the export's root, which on a
  # fresh CephFS belongs to root with mode 0755. Both heads the same.
  cat >"$DIR/$name/tarn.toml" <<EOF
listen = "127.0.0.1:$PORT"
state_dir = "$DIR/$name/state"
[[export]]
path = "$path"
pseudo = "/"
clients = ["127.0.0.1"]
squash = "none"
$extra
EOF
  "$BIN" serve --config "$DIR/$name/tarn.toml" --log-level warn >"$DIR/$name/out" 2>"$DIR/$name/log" &
  PID=$!
  PIDS+=("$PID")
  local i
  for i in $(seq 300); do
    grep -q "tarn: exporting" "$DIR/$name/out" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "bench-cephfs: $name did not start:" >&2; cat "$DIR/$name/log" >&2; return 1
}
mkdir -p "$DIR/local/export"
serve cephfs "cephfs:///" "ceph_conf = \"$DIR/ceph/ceph.conf\""; CPORT=$PORT CPID=$PID
serve local "$DIR/local/export"; LPORT=$PORT LPID=$PID

bench() {  # LABEL PORT PID
  "$BIN" bench --server "127.0.0.1:$2" --server-pid "$3" --uid 0 --gid 0 --json --label "$1" \
    --ops "$OPS" --inflight "$INFLIGHT" --seconds "$SECS" --file-size "$FILE_SIZE" --files "$FILES" \
    --dir-entries 2000 >"$DIR/$1.json"
}
echo "== tarn bench, same workloads: CephFS head, then local head (ops $OPS; in flight $INFLIGHT; ${SECS}s each) =="
bench cephfs "$CPORT" "$CPID"
bench local "$LPORT" "$LPID"
"$BIN" bench --compare "cephfs=$DIR/cephfs.json" --compare "local=$DIR/local.json"
