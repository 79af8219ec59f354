#!/bin/bash
# The client tools against libnfs (Debian's libnfs-utils: nfs-cp, nfs-cat) on
# the same server in the same run (issue 16):
#   (a) a large file (1 GiB) local -> NFS and NFS -> local (`tarn cp` vs
#       `nfs-cp`), and NFS -> /dev/null (`tarn cat` vs `nfs-cat`);
#   (b) a tree of 10,000 small files (1-8 KiB, 100 directories) local -> NFS
#       and back: `tarn cp -r` vs a loop of one `nfs-cp` per file (libnfs has no
#       recursive copy; that loop is what a user of libnfs-utils would write),
#       with the libnfs per-file cost split into process start-up and the rest.
# Each row: MiB/s or files/s, and tarn/libnfs per libnfs protocol version
# (NFSv3, and NFSv4.0, the only NFSv4 libnfs 4.0 speaks). Targets: >= 1.5x on
# the large file, >= 3x on the tree. Each large-file row also has a "local"
# line: the same bytes moved by dd on this machine without NFS (the upload
# with an fsync, as COMMIT puts it on disk), which neither tool can beat
# where client and server share one machine's cores, memory and disk.
#
#   scripts/bench-client.sh [--quick] [--ganesha]
#
# Starts a release `tarn serve` on loopback (a fresh export under /var/tmp);
# with --ganesha (root) also runs everything against NFS-Ganesha, started by
# scripts/ganesha-run.sh in private namespaces. --quick: 64 MiB, 300 files,
# one repetition (CI: it must complete; the numbers are not judged there).
# Environment: TARN_BIN (default target/release/tarn, built if missing),
# TARN_VERS (the tools' NFS version, default 4.1), TARN_NCONNECT=N (passed as
# nconnect=N), VERBOSE=1 (print each timed step), SIZE_MIB, FILES, DIRS,
# REPS (large-file repetitions, median shown; default 12, so that each
# tool and dd run first, in the middle and last as often), LIBNFS_VERS
# (default "3 4"), DELAY_MS=D: both tools reach Tarn through
# tarn-delay-proxy (built beside TARN_BIN if missing), which adds D ms
# (fractions allowed) each way, round trip +2D, without limiting bandwidth:
# loopback has no latency for pipelining and nconnect to hide, and this
# kernel no netem (not applied to Ganesha).
#
# Page cache: drop_caches is not ours to use on a shared machine, so both
# tools get the same conditions instead: the local source is the same (cached)
# file for both, every copy writes a fresh file, and each tool reads back the
# file it wrote itself (so the server has it cached for both), and dirty
# pages are written back (syncfs, untimed) before each timed step; before a
# large-file step as much memory as it fills is written and freed (see
# settle below). Directions run in the same order for both tools. Every copy is checked (cmp / diff -r),
# untimed. Every process started here is stopped by PID; the work directory
# is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
QUICK=0 GANESHA=0
for a in "$@"; do
  case $a in
    --quick) QUICK=1 ;;
    --ganesha) GANESHA=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
BIN=${TARN_BIN:-$ROOT/target/release/tarn}
if [ -z "${TARN_GANESHA_ADDR:-}" ]; then
  command -v nfs-cp >/dev/null || { echo "bench-client: nfs-cp missing: install libnfs-utils (scripts/deps.sh --test)" >&2; exit 1; }
  [ -x "$BIN" ] || cargo build --release -q -p tarn
  if [ -n "${DELAY_MS:-}" ]; then
    PROXY=${TARN_DELAY_PROXY:-$(dirname "$BIN")/tarn-delay-proxy}
    [ -x "$PROXY" ] || cargo build --release -q -p tarn --bin tarn-delay-proxy
  fi
  if [ $GANESHA = 1 ]; then
    [ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
    # Ganesha's namespaces; this script runs again inside them.
    TARN_BIN=$BIN exec "$ROOT/scripts/ganesha-run.sh" "$ROOT/scripts/bench-client.sh" "$@"
  fi
fi

if [ $QUICK = 1 ]; then
  SIZE_MIB=${SIZE_MIB:-64} FILES=${FILES:-300} DIRS=${DIRS:-10} REPS=${REPS:-1}
else
  SIZE_MIB=${SIZE_MIB:-1024} FILES=${FILES:-10000} DIRS=${DIRS:-100} REPS=${REPS:-12}
fi
LIBNFS_VERS=${LIBNFS_VERS:-3 4}
TARN_VERS=${TARN_VERS:-4.1}
TQ="?vers=$TARN_VERS&uid=1000&gid=1000${TARN_NCONNECT:+&nconnect=$TARN_NCONNECT}"

WORK=$(mktemp -d /var/tmp/tarn-bench-client.XXXXXX)
chmod 0755 "$WORK"
PIDS=()
# stop PID (TERM, then KILL after 10 s), as the Ganesha scripts stop theirs.
# shellcheck source=scripts/ganesha-lib.sh
. "$ROOT/scripts/ganesha-lib.sh"
cleanup() {
  local i st=$?
  if [ $st != 0 ] && [ -s "$WORK/tarn.log" ]; then
    echo "bench-client: exit $st; end of tarn serve's log:" >&2; tail -20 "$WORK/tarn.log" >&2
  fi
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do stop "${PIDS[$i]}"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tarn serve ----
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# started OUT PATTERN WHAT LOG: waits up to 10 s for a line matching PATTERN in OUT; else says WHAT
# did not start, shows LOG and fails.
started() {
  local out=$1 pattern=$2 what=$3 log=$4 i
  for i in $(seq 100); do
    grep -q "$pattern" "$out" 2>/dev/null && return 0
    [ "$i" = 100 ] || sleep 0.1
  done
  echo "bench-client: $what did not start:" >&2; cat "$log" >&2; exit 1
}
PORT=$(free_port)
mkdir -p "$WORK/tarn-export" "$WORK/tarn-state" "$WORK/local"
chmod 0777 "$WORK/tarn-export"
"$BIN" serve "$WORK/tarn-export" --listen "127.0.0.1:$PORT" --state-dir "$WORK/tarn-state" \
  --log-level warn >"$WORK/tarn.out" 2>"$WORK/tarn.log" &
PIDS+=($!)
started "$WORK/tarn.out" '^tarn: exporting' "tarn serve" "$WORK/tarn.log"

# DELAY_MS: the tools reach tarn serve through the delay proxy.
SPORT=$PORT
if [ -n "${DELAY_MS:-}" ]; then
  PORT=$(free_port)
  "${PROXY:-$(dirname "$BIN")/tarn-delay-proxy}" "127.0.0.1:$PORT" "127.0.0.1:$SPORT" "$DELAY_MS" \
    >"$WORK/proxy.out" 2>"$WORK/proxy.log" &
  PIDS+=($!)
  started "$WORK/proxy.out" '^listening' tarn-delay-proxy "$WORK/proxy.log"
fi

# Servers: name, tarn's URL base, libnfs's URL base, its NFSv3 and NFSv4
# query strings, and the directory on disk behind the URL bases.
SERVERS=(tarn)
declare -A T_BASE L_BASE L_Q3 L_Q4 DISK
T_BASE[tarn]="nfs://127.0.0.1:$PORT/bench"
L_BASE[tarn]="nfs://127.0.0.1/bench"
L_Q3[tarn]="?version=3&nfsport=$PORT&mountport=$PORT&uid=1000&gid=1000"
L_Q4[tarn]="?version=4&nfsport=$PORT&uid=1000&gid=1000"
DISK[tarn]=$WORK/tarn-export/bench
if [ -n "${TARN_GANESHA_ADDR:-}" ]; then
  SERVERS+=(ganesha)
  gh=${TARN_GANESHA_ADDR%:*} gp=${TARN_GANESHA_ADDR##*:}
  T_BASE[ganesha]="nfs://$TARN_GANESHA_ADDR$TARN_GANESHA_EXPORT/bench"
  L_BASE[ganesha]="nfs://$gh$TARN_GANESHA_EXPORT/bench"
  L_Q3[ganesha]="?version=3&nfsport=$gp&mountport=$TARN_GANESHA_MOUNT_PORT&uid=1000&gid=1000"
  L_Q4[ganesha]="?version=4&nfsport=$gp&uid=1000&gid=1000"
  DISK[ganesha]=$TARN_GANESHA_DIR/bench
fi
lq() { local s=$1 v=$2; if [ "$v" = 3 ]; then echo "${L_Q3[$s]}"; else echo "${L_Q4[$s]}"; fi; }

# ---- measuring ----
now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }
T=0
# Before each timed step, untimed: the dirty pages of the steps before are
# written back (syncfs of the work directory's file system, which holds both
# servers' exports), so no tool pays for another's writeback.
# And, on a VM that hands free memory back to its host (virtio-balloon free
# page reporting), the first to fill fresh pages after a pause pays the
# host's page faults (1 GiB: ~2 s more here), and whoever runs right after
# reuses those pages: twice PRIME_MIB of page cache is written and freed
# just before, in 1 MiB writes as the tools write (measured here: after 8 KiB
# writes (head -c) or only PRIME_MIB, the first 1 GiB download still paid
# 0.1-2.3 s more than the next; after this, 0.41-0.48 s against 0.41 s).
PRIME_MIB=0
settle() {
  sync -f "$WORK" 2>/dev/null || sync
  if [ "$PRIME_MIB" -gt 0 ]; then
    dd if=/dev/zero of="$WORK/prime" bs=1M count="$((2 * PRIME_MIB))" status=none
    rm -f "$WORK/prime"
  fi
}
timed() {
  local t0; settle; t0=$(now); "$@"; T=$(secs "$t0" "$(now)")
  [ "${VERBOSE:-0}" = 0 ] || echo "    $T s: ${*//$WORK/\$WORK}" | cut -c1-160
}
to_null() { "$@" >/dev/null; }
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
rate() { awk -v n="$1" -v t="$2" 'BEGIN { printf "%.1f", n / t }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
ROWS=()
row() { # server, workload, tarn rate, libnfs version, libnfs rate or -, unit
  local r x=n/a
  [ "$5" = - ] || x=$(ratio "$3" "$5")
  local who=v$4; [ "$4" != local ] || who=local
  r=$(printf '%-8s %-34s %10s %-6s %10s %-7s %s' "$1" "$2" "$3" "$who" "$5" "$6" "$x")
  ROWS+=("$r")
  echo "  $r"
}
header() { printf '%-8s %-34s %10s %-6s %10s %-7s %s\n' server workload tarn libnfs libnfs unit tarn/libnfs; }
same() { cmp -s "$1" "$2" || { echo "bench-client: $2 differs from $1" >&2; exit 1; }; }
tree_same() { diff -r "$1" "$2" >/dev/null || { echo "bench-client: tree $2 differs from $1" >&2; diff -r "$1" "$2" | head >&2; exit 1; }; }

echo "bench-client: $("$BIN" --version 2>/dev/null || echo tarn) (tools: vers=$TARN_VERS${TARN_NCONNECT:+, nconnect=$TARN_NCONNECT}) vs" \
  "libnfs-utils $(dpkg-query -W -f '${Version}' libnfs-utils 2>/dev/null || echo '?') (NFSv${LIBNFS_VERS// /, NFSv}; NFSv4 = 4.0)"
echo "bench-client: servers: ${SERVERS[*]}${DELAY_MS:+ (tarn through tarn-delay-proxy: +$DELAY_MS ms each way)}; ${SIZE_MIB} MiB file x $REPS (median), $FILES files in $DIRS directories; work in $WORK"

SRC=$WORK/local/big.src
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$SRC"
DOWN=$WORK/local/down

# A seeded tree: DIRS directories, FILES files of 1-8 KiB.
python3 - "$WORK/local/tree" "$FILES" "$DIRS" <<'EOF'
import os, random, sys
root, files, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(16)
for d in range(dirs):
    os.makedirs(os.path.join(root, f"d{d:03}"), exist_ok=True)
for i in range(files):
    with open(os.path.join(root, f"d{i % dirs:03}", f"f{i:05}"), "wb") as f:
        f.write(rng.randbytes(rng.randint(1024, 8192)))
EOF
TREE_BYTES=$(du -sb --apparent-size "$WORK/local/tree" | cut -f1)
mapfile -t TFILES < <(cd "$WORK/local/tree" && find . -type f | sed 's|^\./||' | sort)
mapfile -t TDIRS < <(cd "$WORK/local/tree" && find . -mindepth 1 -type d | sed 's|^\./||' | sort)

# libnfs 4.0's NFSv4 (4.0) writes fail for files of 4 KiB and more ("Failed to
# write to dest file", against Tarn and Ganesha alike; 4095 bytes fail, 2048
# pass), so by default libnfs writes only over NFSv3, and its NFSv4 reads
# read what its NFSv3 wrote. LIBNFS_V4_WRITES=1 tries them anyway.
writes() { [ "$1" = 3 ] || [ "${LIBNFS_V4_WRITES:-0}" = 1 ]; }
from() { if writes "$1"; then echo "$1"; else echo 3; fi; }  # whose file version $1 reads
for v in $LIBNFS_VERS; do
  writes "$v" || [[ " $LIBNFS_VERS " == *" 3 "* ]] || { echo "bench-client: LIBNFS_VERS=$LIBNFS_VERS: NFSv4 reads need 3 there too" >&2; exit 2; }
done

turn() { # R TOOL...: the tools turned left by R-1 places
  local r=$1; shift
  local n=$# k; k=$(( (r - 1) % n ))
  local a=("$@")
  echo "${a[@]:k}" "${a[@]:0:k}"
}
large() { # server
  local s=$1 r PRIME_MIB=$SIZE_MIB
  local -A R=()  # workload_tool -> seconds of each repetition
  mkdir -p "${DISK[$s]}"; chmod 0777 "${DISK[$s]}"
  for r in $(seq "$REPS"); do
    # The order of the tools turns by one place each repetition: on this
    # VM whoever runs first in a step pays extra (first-touch memory, by
    # the host, of pages freed before; up to 3 s of a 1 GiB download, 0.4 s
    # of a cat; priming below does not catch it all), so each tool must be
    # first, in the middle and last as often (REPS a multiple of the
    # number of tools; alternating two orders had left NFSv3 always in the
    # middle).
    # f: the same bytes moved on this machine without NFS (dd, 1 MiB
    # blocks), the floor both tools share: a server's disk and page cache
    # and this VM's memory cost the same whoever moves the data.
    local ups=(t f) alls=(t f) t
    for t in $LIBNFS_VERS; do writes "$t" && ups+=("$t"); alls+=("$t"); done
    # local -> NFS: fresh files on the server
    for t in $(turn "$r" "${ups[@]}"); do
      if [ "$t" = t ]; then
        timed "$BIN" cp -q "$SRC" "${T_BASE[$s]}/big.t$r$TQ"; R[up_t]+=" $T"
        same "$SRC" "${DISK[$s]}/big.t$r"
      elif [ "$t" = f ]; then  # into the export's file system, on disk at the end as after COMMIT
        timed dd if="$SRC" of="${DISK[$s]}/big.f$r" bs=1M conv=fsync status=none; R[up_f]+=" $T"
        same "$SRC" "${DISK[$s]}/big.f$r"
      else
        timed to_null nfs-cp "$SRC" "${L_BASE[$s]}/big.l$t.$r$(lq "$s" "$t")"; R[up_$t]+=" $T"
        same "$SRC" "${DISK[$s]}/big.l$t.$r"
      fi
    done
    # NFS -> local: each tool reads the file it wrote, into a fresh file
    for t in $(turn "$r" "${alls[@]}"); do
      if [ "$t" = t ]; then
        timed "$BIN" cp -q "${T_BASE[$s]}/big.t$r$TQ" "$DOWN"; R[down_t]+=" $T"
      elif [ "$t" = f ]; then  # from the server's file, cached as for the tools
        timed dd if="${DISK[$s]}/big.f$r" of="$DOWN" bs=1M status=none; R[down_f]+=" $T"
      else
        timed to_null nfs-cp "${L_BASE[$s]}/big.l$(from "$t").$r$(lq "$s" "$t")" "$DOWN"; R[down_$t]+=" $T"
      fi
      same "$SRC" "$DOWN"; rm -f "$DOWN"
    done
    # NFS -> stdout (/dev/null)
    for t in $(turn "$r" "${alls[@]}"); do
      if [ "$t" = t ]; then
        timed to_null "$BIN" cat "${T_BASE[$s]}/big.t$r$TQ"; R[cat_t]+=" $T"
      elif [ "$t" = f ]; then
        timed dd if="${DISK[$s]}/big.f$r" of=/dev/null bs=1M status=none; R[cat_f]+=" $T"
      else
        timed to_null nfs-cat "${L_BASE[$s]}/big.l$(from "$t").$r$(lq "$s" "$t")"; R[cat_$t]+=" $T"
      fi
    done
    rm -f "${DISK[$s]}"/big.*
  done
  local mib=$SIZE_MIB w tr name lr
  for w in up down cat; do
    tr=$(rate "$mib" "$(median ${R[${w}_t]})")
    case $w in
      up) name="$mib MiB local -> NFS (cp)" ;;
      down) name="$mib MiB NFS -> local (cp)" ;;
      cat) name="$mib MiB NFS -> /dev/null (cat)" ;;
    esac
    for v in $LIBNFS_VERS; do
      lr=-; [ -n "${R[${w}_$v]:-}" ] && lr=$(rate "$mib" "$(median ${R[${w}_$v]})")
      row "$s" "$name" "$tr" "$v" "$lr" MiB/s
    done
    row "$s" "$name" "$tr" local "$(rate "$mib" "$(median ${R[${w}_f]})")" MiB/s
  done
}

# One nfs-cp of the loops; a failure is retried (twice) and counted.
RETRIES=0
lcp() {
  local i
  for i in 1 2 3; do
    nfs-cp "$1" "$2" >/dev/null 2>"$WORK/lcp.err" && return 0
    echo "bench-client: nfs-cp $1 $2 failed: $(cat "$WORK/lcp.err")" >&2
    RETRIES=$((RETRIES + 1))
  done
  return 1
}

small_tree() { # server
  local s=$1 v f d tup tdown
  local -A lu=() ld=()
  mkdir -p "${DISK[$s]}"; chmod 0777 "${DISK[$s]}"
  timed "$BIN" cp -r -q "$WORK/local/tree" "${T_BASE[$s]}/tree.t$TQ"; tup=$T
  tree_same "$WORK/local/tree" "${DISK[$s]}/tree.t"
  timed "$BIN" cp -r -q "${T_BASE[$s]}/tree.t$TQ" "$WORK/local/tree.t"; tdown=$T
  tree_same "$WORK/local/tree" "$WORK/local/tree.t"
  rm -rf "$WORK/local/tree.t" "${DISK[$s]}/tree.t"
  local q base
  for v in $LIBNFS_VERS; do
    writes "$v" || continue
    q=$(lq "$s" "$v") base="${L_BASE[$s]}/tree.l$v"
    # nfs-cp makes no directories: made beforehand on the server's disk, untimed.
    for d in "${TDIRS[@]}"; do mkdir -p "${DISK[$s]}/tree.l$v/$d"; done
    chmod -R 0777 "${DISK[$s]}/tree.l$v"
    up_loop() { for f in "${TFILES[@]}"; do lcp "$WORK/local/tree/$f" "$base/$f$q"; done; }
    timed up_loop; lu[$v]=$T
    tree_same "$WORK/local/tree" "${DISK[$s]}/tree.l$v"
  done
  for v in $LIBNFS_VERS; do
    q=$(lq "$s" "$v") base="${L_BASE[$s]}/tree.l$(from "$v")"
    # ... and locally, untimed.
    for d in "${TDIRS[@]}"; do mkdir -p "$WORK/local/tree.l$v/$d"; done
    down_loop() { for f in "${TFILES[@]}"; do lcp "$base/$f$q" "$WORK/local/tree.l$v/$f"; done; }
    timed down_loop; ld[$v]=$T
    tree_same "$WORK/local/tree" "$WORK/local/tree.l$v"
    rm -rf "$WORK/local/tree.l$v"
  done
  rm -rf "${DISK[$s]}"/tree.l*
  [ "$RETRIES" = 0 ] || echo "  (nfs-cp failed and was retried $RETRIES times in these loops)"
  RETRIES=0
  local n=$FILES lr
  for v in $LIBNFS_VERS; do
    lr=-; [ -n "${lu[$v]:-}" ] && lr=$(rate "$n" "${lu[$v]}")
    row "$s" "$n files local -> NFS (cp -r)" "$(rate "$n" "$tup")" "$v" "$lr" files/s
  done
  for v in $LIBNFS_VERS; do
    row "$s" "$n files NFS -> local (cp -r)" "$(rate "$n" "$tdown")" "$v" "$(rate "$n" "${ld[$v]}")" files/s
  done
  local mib
  mib=$(awk -v b="$TREE_BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')
  echo "  ($n files, $mib MiB; tarn: up ${tup} s, down ${tdown} s; libnfs" \
    "$(for v in $LIBNFS_VERS; do printf 'v%s: up %s s, down %s s; ' "$v" "${lu[$v]:--}" "${ld[$v]}"; done | sed 's/; $//'))"
  # Where libnfs's per-file time goes: process start-up (nfs-cp with no
  # arguments: exec, dynamic linking, usage message) vs the rest (connect,
  # MOUNT or SETCLIENTID, lookups, create, write, close).
  local k=100 t0 exec_ms
  t0=$(now); for _ in $(seq $k); do nfs-cp >/dev/null 2>&1 || true; done
  exec_ms=$(awk -v t="$(secs "$t0" "$(now)")" -v k=$k 'BEGIN { printf "%.2f", t * 1000 / k }')
  for v in $LIBNFS_VERS; do
    awk -v u="${lu[$v]:-0}" -v d="${ld[$v]}" -v n="$n" -v e="$exec_ms" -v v="$v" 'BEGIN {
      pu = u * 1000 / n; pd = d * 1000 / n
      if (u > 0) printf "  libnfs v%s per file: up %.2f ms (start-up %.2f + the rest %.2f),", v, pu, e, pu - e
      else printf "  libnfs v%s per file:", v
      printf " down %.2f ms (start-up %.2f + the rest %.2f); start-up = nfs-cp with no arguments, the rest = connection, MOUNT or SETCLIENTID, lookups, I/O\n", pd, e, pd - e }'
  done
  # And tarn's own cost for one file in a process of its own (context: cp -r does all in one).
  local one=$WORK/local/tree/${TFILES[0]}
  t0=$(now); for i in $(seq 20); do "$BIN" cp -q "$one" "${T_BASE[$s]}/one$i$TQ"; done
  echo "  tarn cp of one small file per process: $(awk -v t="$(secs "$t0" "$(now)")" 'BEGIN { printf "%.2f", t * 1000 / 20 }') ms"
  rm -f "${DISK[$s]}"/one*
}

for s in "${SERVERS[@]}"; do
  echo "== $s: large file"
  large "$s"
  echo "== $s: small-file tree (libnfs: a loop of one nfs-cp per file; it has no recursive copy)"
  small_tree "$s"
done
echo
echo "bench-client: results (rates: MiB/s or files/s; libnfs NFSv4 is 4.0; tools vers=$TARN_VERS${TARN_NCONNECT:+ nconnect=$TARN_NCONNECT})"
header
printf '%s\n' "${ROWS[@]}"
echo "(local: the same bytes moved by dd on this machine, no NFS: up with an fsync at the end, as COMMIT;" \
  "tarn/local is how close the tool comes to what the machine's disk and memory allow)"
