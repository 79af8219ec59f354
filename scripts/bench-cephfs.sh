#!/bin/bash
# scripts/bench-cephfs.sh [tarn bench options]
#
# Tarn over CephFS against NFS-Ganesha 9's FSAL_CEPH on the same cluster, and
# against Tarn over the local backend, on the same machine, in one run:
# starts a throwaway one-node Ceph cluster (scripts/ceph-cluster.sh: monitor,
# memstore OSD, MDS, on 127.0.0.1), a `tarn serve` exporting `cephfs:///`
# and one exporting a local directory, and runs the same `tarn bench`
# workloads against
#   tarn-ceph    Tarn, export cephfs:/// (the bench works in the fs's root)
#   ganesha      NFS-Ganesha 9.14, FSAL_CEPH, Ganesha's defaults (its CEPH
#                block sets only Ceph_Conf; Ganesha turns libcephfs's object
#                cache off unless told otherwise), export of /ganesha-default
#   ganesha-oc   the same with `client_oc = true` in the CEPH block
#                (libcephfs's object cache on), export of /ganesha-oc
#   local        Tarn, a local directory (the reference the CephFS figures
#                were compared with before)
# in that order, REPS times (best of REPS per row), and prints one table:
# per workload and level in flight, each server's throughput, Tarn/Ganesha
# and CephFS/local ratios, and each server's CPU per operation (tarn bench
# --server-pid: Tarn's or Ganesha's process, libcephfs's client inside it
# included; the Ceph daemons' CPU is nobody's). After the first round, a
# 2 s GETATTR run against Tarn over CephFS and each Ganesha counts the MDS
# requests their libcephfs client made meanwhile (its admin socket's
# "reply" counter): how many GETATTRs were not answered from what the
# client holds capabilities for.
#
# Ganesha 9.14 is Debian 13's (trixie-backports: nfs-ganesha, -vfs, -ceph),
# run from a Debian 13 chroot made once with debootstrap and kept in
# /var/tmp/tarn-ganesha-trixie (ganesha_trixie in scripts/ganesha-lib.sh;
# about half a minute from the Debian mirror the first time, nothing after).
# With Ganesha, everything (cluster, both Tarn heads, Ganesha, the benches)
# runs in a private network + mount + PID namespace, as
# scripts/compare-ganesha.sh does: its own lo (with 127.0.0.2, which Ganesha
# needs), a private /run for rpcbind, so nothing is seen on the host's
# network. Each Ganesha configuration is started for its turn and stopped
# after it (two would fight over rpcbind's registrations), NFSv3 and NFSv4.1
# on loopback, its libcephfs client reading a copy of the cluster's
# ceph.conf (its own admin socket and log) and the cluster's keyring. Every
# process started is stopped by PID on exit and the temporary directory
# removed. Without root, with GANESHA=0, or when the chroot cannot be made
# (the reason is printed), the Ganesha columns are left out and the rest
# runs on the host's loopback as before.
#
# The OSD keeps its objects in memory and every daemon shares this host's two
# cores with the server and the bench, so the ratios say what each server
# costs next to the other here, not what a real cluster delivers.
#
# Env: TARN_BIN (default target/release/tarn, built if missing); OPS,
# INFLIGHT, SECONDS_PER_RUN, FILE_SIZE, FILES (the bench's --ops, --inflight,
# --seconds, --file-size, --files; OPS may name the NFSv4.1 workloads
# v4getattr, v4open-read-close too); REPS (default 1): rounds of the four
# servers, best of each row kept; GANESHA=0: no Ganesha; TARN_GANESHA_TRIXIE
# (where the chroot is kept), TARN_DEBIAN_MIRROR (where it is made from);
# RESULTS_DIR=DIR keeps the JSON rows and the servers' logs. Needs Ceph:
# scripts/deps.sh --ceph.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TARN_BIN:-$PWD/target/release/tarn}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
OPS=${OPS:-getattr,lookup,access,create,readdirplus,read4k,write4k,read1m,write1m}
INFLIGHT=${INFLIGHT:-1,16}
SECS=${SECONDS_PER_RUN:-3}
FILE_SIZE=${FILE_SIZE:-256M}
FILES=${FILES:-2000}
REPS=${REPS:-1}
# shellcheck source=scripts/ganesha-lib.sh
. scripts/ganesha-lib.sh

if [ "${1:-}" != --inner ]; then
  [ -x "$BIN" ] || cargo build --release -q -p tarn
  if [ "${GANESHA:-1}" != 0 ]; then
    why=
    if [ "$(id -u)" != 0 ]; then
      why="needs root"
    else
      for p in rpcbind iproute2 util-linux; do
        dpkg -s "$p" >/dev/null 2>&1 && continue
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            -o DPkg::Lock::Timeout=900 --no-install-recommends "$p"; } >&2 || { why="no $p"; break; }
      done
      # Made (the first time) out here: the namespaces have no network.
      # shellcheck disable=SC2119 # no extra packages
      [ -n "$why" ] || ganesha_trixie || why="no Ganesha 9 chroot (above)"
    fi
    if [ -z "$why" ]; then
      export GANESHA_CHROOT
      # A PID namespace too: if this script is killed, everything it started dies with it.
      exec unshare --net --mount --pid --mount-proc --fork --kill-child "$0" --inner "$@"
    fi
    echo "bench-cephfs: no NFS-Ganesha columns: $why" >&2
  fi
  G=0
  PIDS=()
  trap ganesha_cleanup EXIT
  trap 'exit 130' INT; trap 'exit 143' TERM
else
  shift
  G=1
  ganesha_netns  # lo, /run, rpcbind; PIDS and the EXIT trap (ganesha_cleanup)
fi

DIR=$(mktemp -d /var/tmp/tarn-bench-cephfs.XXXXXX)
chmod 0755 "$DIR"
ganesha_at_exit() {  # after every process in PIDS is stopped
  bash scripts/ceph-cluster.sh stop "$DIR/ceph" >/dev/null 2>&1 || true
  if [ -n "${RESULTS_DIR:-}" ]; then
    mkdir -p "$RESULTS_DIR"
    cp "$DIR"/*.json "$RESULTS_DIR"/ 2>/dev/null || true
    for f in "$DIR"/*/log "$DIR"/*/ganesha.log "$DIR"/*/client.log; do
      [ -f "$f" ] && cp "$f" "$RESULTS_DIR/$(basename "$(dirname "$f")")-$(basename "$f")"
    done
  fi
  rm -rf "$DIR"
}

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
mkdir -p "$DIR/local/export" "$DIR/cephfs"
# The CephFS head's own copy of ceph.conf: its libcephfs's admin socket
# apart (for the MDS request counts below).
{ cat "$DIR/ceph/ceph.conf"
  printf '[client]\nadmin socket = %s\nlog file = %s\n' "$DIR/cephfs/client.asok" "$DIR/cephfs/client.log"
} >"$DIR/cephfs/ceph.conf"
serve cephfs "cephfs:///" "ceph_conf = \"$DIR/cephfs/ceph.conf\""; CPORT=$PORT CPID=$PID
serve local "$DIR/local/export"; LPORT=$PORT LPID=$PID

# Calls in a run times runs, generously: a server that drops a call leaves
# the bench waiting (it does not retransmit), so each bench is bounded.
nruns=$(( $(tr ',' '\n' <<<"$OPS" | grep -c .) * $(tr ',' '\n' <<<"$INFLIGHT" | grep -c .) ))
limit=$(echo "$nruns * (5 * $SECS + 20) + 300" | bc | cut -d. -f1)
bench() {  # LABEL PID tarn-bench-args...: appends LABEL's rows to LABEL.json; 1 if it failed
  local label=$1 pid=$2; shift 2
  timeout -k 5 "$limit" "$BIN" bench "$@" --server-pid "$pid" --uid 0 --gid 0 --json --label "$label" \
    --ops "$OPS" --inflight "$INFLIGHT" --seconds "$SECS" --file-size "$FILE_SIZE" --files "$FILES" \
    --dir-entries 2000 >>"$DIR/$label.json"
}

# mds_per_getattr LABEL PID tarn-bench-args...: a 2 s GETATTR run (1 in
# flight) against LABEL, with the MDS requests its libcephfs made meanwhile
# (the client's "reply" perf counter, from LABEL's admin socket): how often
# a GETATTR is not answered from what the client holds capabilities for.
mds_replies() { timeout 20 ceph --admin-daemon "$DIR/$1/client.asok" perf dump 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["client"]["reply"]["avgcount"])' 2>/dev/null || echo -; }
mds_per_getattr() {
  local label=$1 pid=$2 before after; shift 2
  before=$(mds_replies "$label")
  timeout -k 5 120 "$BIN" bench "$@" --server-pid "$pid" --uid 0 --gid 0 --json --label "$label" \
    --ops getattr --inflight 1 --seconds 2 --files 10 --file-size 1M --dir-entries 10 >"$DIR/$label-mds.json" || return 0
  after=$(mds_replies "$label")
  python3 - "$label" "$before" "$after" "$DIR/$label-mds.json" <<'PY' >>"$DIR/mds.txt"
import json, sys
label, before, after, path = sys.argv[1:]
ops = sum(json.loads(l)["ops"] for l in open(path) if l.strip())
if before == "-" or after == "-" or not ops:
    print(f"{label}: MDS requests per GETATTR: unknown (no admin socket answer)")
else:
    n = int(after) - int(before)
    print(f"{label}: {n} MDS requests during {ops:.0f} GETATTRs: {n / ops:.4f} per GETATTR")
PY
}

# ---- NFS-Ganesha 9, FSAL_CEPH, one configuration at a time ----
if [ $G = 1 ]; then
  ganesha_trixie_mounts "$DIR"
  # Each configuration exports a directory of its own, made through Tarn's
  # CephFS head, so no server's bench meets another's leftovers.
  "$BIN" mkdir "nfs://127.0.0.1:$CPORT/ganesha-default"
  "$BIN" mkdir "nfs://127.0.0.1:$CPORT/ganesha-oc"
  GP=2049 GMP=20048
fi
ganesha_up() {  # NAME CEPHFS-PATH CEPH-BLOCK-EXTRA: starts Ganesha exporting CEPHFS-PATH as /bench; sets GPID
  local d=$DIR/$1
  mkdir -p "$d/recovery"
  # Its own copy of the cluster's ceph.conf: the same monitor and keyring,
  # its libcephfs's admin socket and log apart from Tarn's.
  { cat "$DIR/ceph/ceph.conf"
    printf '[client]\nadmin socket = %s\nlog file = %s\n' "$d/client.asok" "$d/client.log"
  } >"$d/ceph.conf"
  ganesha_conf "$d/ganesha.conf" "$GP" "$GMP" "$2" /bench "$d/recovery" "1, 2" \
    'Name = CEPH; User_Id = "admin"; Filesystem = "cephfs";'
  printf 'CEPH {\n    Ceph_Conf = %s;\n    %s\n}\n' "$d/ceph.conf" "$3" >>"$d/ganesha.conf"
  ganesha_start "$d/ganesha.conf" "$d/ganesha.log"
}
ganesha_down() {  # stops GPID and forgets it
  local i keep=() t=$SECONDS
  stop "$GPID"
  # A Ganesha killed rather than stopped leaves its CephFS session (and the
  # capabilities it holds) to the MDS's timeout.
  [ $((SECONDS - t)) -lt 10 ] || echo "bench-cephfs: Ganesha (pid $GPID) did not exit within 10 s of TERM: killed" >&2
  for i in "${PIDS[@]}"; do [ "$i" = "$GPID" ] || keep+=("$i"); done
  PIDS=("${keep[@]}")
}
ganesha_turn() {  # LABEL CEPHFS-PATH CEPH-BLOCK-EXTRA
  if ! ganesha_up "$1" "$2" "$3"; then
    echo "bench-cephfs: $1 did not start: no $1 rows this round" >&2
    ganesha_down
    return 0
  fi
  # What its libcephfs client runs with, from the client's admin socket.
  echo "bench-cephfs: $1: libcephfs $(timeout 20 ceph --admin-daemon "$DIR/$1/client.asok" config get client_oc 2>&1 |
    tr -d '{}" \n' || true)" >&2
  bench "$1" "$GPID" --server "127.0.0.1:$GP" --mount-server "127.0.0.1:$GMP" --export /bench ||
    { echo "bench-cephfs: the bench against $1 failed (rows that finished are kept); end of its log:" >&2
      tail -20 "$DIR/$1/ganesha.log" >&2; }
  [ "$rep" != 1 ] || mds_per_getattr "$1" "$GPID" --server "127.0.0.1:$GP" --mount-server "127.0.0.1:$GMP" --export /bench
  ganesha_down
}

echo "== tarn bench, same workloads, in turn: Tarn over CephFS$([ $G = 1 ] && echo ", Ganesha FSAL_CEPH, Ganesha FSAL_CEPH client_oc"), Tarn over local (ops $OPS; in flight $INFLIGHT; ${SECS}s each; $REPS round(s)) =="
for rep in $(seq "$REPS"); do
  [ "$REPS" = 1 ] || echo "-- round $rep of $REPS" >&2
  bench cephfs "$CPID" --server "127.0.0.1:$CPORT"
  [ "$rep" != 1 ] || mds_per_getattr cephfs "$CPID" --server "127.0.0.1:$CPORT"
  if [ $G = 1 ]; then
    ganesha_turn ganesha /ganesha-default ""
    ganesha_turn ganesha-oc /ganesha-oc "client_oc = true;"
  fi
  bench local "$LPID" --server "127.0.0.1:$LPORT"
done

labels=(cephfs)
[ $G = 0 ] || labels+=(ganesha ganesha-oc)
labels+=(local)
echo
if [ $G = 1 ]; then
  # shellcheck disable=SC2016 # dpkg-query's format
  echo "Ganesha: $(cat "$GANESHA_CHROOT/.tarn-ganesha-ready"), Debian 13 chroot, libcephfs2 $(chroot "$GANESHA_CHROOT" dpkg-query -W -f '${Version}' libcephfs2); cluster: $(ceph-mon --version | cut -d' ' -f1-3)"
fi
python3 - "$DIR" "$REPS" "${labels[@]}" <<'EOF'
import json, os, sys

d, reps, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
names = {"cephfs": "tarn-ceph", "ganesha": "ganesha", "ganesha-oc": "gan-oc", "local": "local"}

def metric(r):
    op = r.get("op")
    if op in ("read1m", "write1m"):
        return r.get("mb_per_s"), "MB/s"
    if op == "readdirplus":
        return r.get("entries_per_s"), "entries/s"
    if op == "create":
        return r.get("ops_per_s"), "files/s"
    return r.get("ops_per_s"), "ops/s"

# The best of the rounds per server and (workload, in flight).
best, order = {}, []
for l in labels:
    p = os.path.join(d, l + ".json")
    if not os.path.exists(p):
        continue
    for line in open(p):
        if not line.lstrip().startswith("{"):
            continue
        r = json.loads(line)
        k = (r.get("op"), r.get("inflight"))
        if k not in order:
            order.append(k)
        old = best.get((l, k))
        if old is None or (metric(r)[0] or 0) > (metric(old)[0] or 0):
            best[(l, k)] = r

def num(v):
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"

ratios = [(a, b, n) for a, b, n in
          [("cephfs", "ganesha", "T/G"), ("cephfs", "ganesha-oc", "T/Goc"), ("cephfs", "local", "C/L")]
          if b in labels]
n = len(labels)

def line(first, vals, rats, cpus):
    return (f"{first[0]:<12} {first[1]:>4} {first[2]:>9} "
            + " ".join(f"{v:>9}" for v in vals) + " | "
            + " ".join(f"{v:>6}" for v in rats) + " | "
            + " ".join(f"{v:>9}" for v in cpus))

print(" " * 28 + "throughput".ljust(10 * n - 1) + " | " + "ratio".ljust(7 * len(ratios) - 1) + " | cpu us/op")
print(line(("workload", "infl", "unit"), [names[l] for l in labels], [r[2] for r in ratios],
           [names[l] for l in labels]))
for k in order:
    rs = [best.get((l, k)) for l in labels]
    unit = metric(next(r for r in rs if r))[1]
    vals = dict(zip(labels, (metric(r)[0] if r else None for r in rs)))
    print(line((k[0], str(k[1]), unit), [num(vals[l]) for l in labels],
               [ratio(vals[a], vals[b]) for a, b, _ in ratios],
               [num(r.get("server_cpu_us_per_op")) if r else "-" for r in rs]))
said = {"T/G": "ganesha's", "T/Goc": "gan-oc's (client_oc = true)", "C/L": "Tarn over local's"}
print(f"Best of {reps} round(s). {', '.join(r[2] for r in ratios)}: Tarn over CephFS's throughput over "
      f"{', '.join(said[r[2]] for r in ratios)} (higher: better for tarn-ceph).\n"
      "cpu us/op: the server process's CPU per operation (readdirplus: per whole listing; create: per "
      "file, CREATE+WRITE+COMMIT), its libcephfs client included, the Ceph daemons not.")
EOF
if [ -f "$DIR/mds.txt" ]; then
  echo
  echo "MDS requests per GETATTR (2 s, 1 in flight, after round 1; the libcephfs client's \"reply\" counter):"
  cat "$DIR/mds.txt"
fi
