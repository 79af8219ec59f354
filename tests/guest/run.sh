#!/bin/bash
# tests/guest/run.sh - the guest-lab stage of the test suite: the real Linux kernel NFS client
# (Debian 12 kernel in a qemu guest) runs tests/guest/workload.sh against each server below.
#   bash tests/guest/run.sh            (as root)
# Builds/refreshes the cached guest (build.sh), runs every enabled case in its own VM, prints a
# table of boot time and step timings side by side, and ends with exactly one line
#   N passed, M failed, K skipped
# (N/M: workload steps over all cases, K: skipped cases).  Exit status non-zero iff M > 0 or a case
# crashed (no workload summary from the guest, VM timeout, server died).
# Env knobs:
#   TARN_BIN=<repo>/target/release/tarn   the Tarn server binary (case skipped if missing)
#   TARN_LOG_LEVEL=info  TARN_EXTRA_ARGS=""  more `tarn serve` options (--state-dir <case dir> is
#                         added automatically when the binary supports it)
#   CASES_MATCH=<regex>   only run cases whose name matches (others: SKIP ... filtered out)
#   TARN_GUEST_DIR=/var/tmp/tarn-guest    cache + run dirs      CASE_TIMEOUT=1200 s per VM
#   BIG_MB SMALL_N TREE_N FIO_MB FIO_RUNTIME STEP_TIMEOUT   passed to workload.sh (see there)
#   MEM=2048 CPUS=2 ACCEL=tcg|kvm         passed to boot.sh
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
LAB=${TARN_GUEST_DIR:-/var/tmp/tarn-guest}; export TARN_GUEST_DIR=$LAB
TARN_BIN=${TARN_BIN:-$REPO/target/release/tarn}
CASE_TIMEOUT=${CASE_TIMEOUT:-1200}
TARN_ADDR=10.77.0.1 TARN_PORT=2049

# ---- cases: one line each:  on|off | server | NFS version | sec flavour | reason when off ----------
CASES='
on  | knfsd | 3   | sys   |
on  | knfsd | 4.1 | sys   |
on  | tarn  | 3   | sys   |
on  | tarn  | 4.0 | sys   |
on  | tarn  | 4.1 | sys   |
on  | tarn  | 4.2 | sys   |
off | tarn  | 3   | krb5  | Kerberos not implemented yet (issue 5)
off | tarn  | 3   | krb5i | Kerberos not implemented yet (issue 5)
off | tarn  | 3   | krb5p | Kerberos not implemented yet (issue 5)
'
# How each server is started and mounted:
#   knfsd: inside the guest (lab-knfsd-start), tmpfs export /srv/export over 127.0.0.1, no_root_squash.
#   tarn:  on the host inside the run's network namespace at 10.77.0.1:2049 (NFSv3 + MOUNT on one
#          port, no rpcbind), exporting a fresh 0777 directory; root is squashed to 65534.
#          NLM is not implemented yet, so the guest mounts with nolock (locks are client-local).
TARN_MOUNT_OPTS="proto=tcp,port=$TARN_PORT,mountport=$TARN_PORT,mountproto=tcp,nolock"

[ "$(id -u)" = 0 ] || { echo "run.sh: must run as root (qemu, network namespaces, debootstrap)" >&2; exit 2; }
T_START=$(date +%s.%N)
el() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}'; }

# ---- cleanup: everything started here is tracked by PID / name and torn down on any exit --------
BPID= TARN_PID= NS=
stop_pid() {  # PID: TERM, wait up to 5 s, KILL
  local p=$1; [ -n "$p" ] && kill -0 "$p" 2>/dev/null || return 0
  kill -TERM "$p" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; return 0
}
cleanup() {
  stop_pid "$BPID"; BPID=      # boot.sh tears down its VM itself on TERM
  stop_pid "$TARN_PID"; TARN_PID=
  if [ -n "$NS" ]; then "$HERE/net.sh" down "$NS"; NS=; fi
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM; trap 'exit 129' HUP

# ---- build (cached) ---------------------------------------------------------------------------------
echo "=== build (cached guest image in $LAB)"
T=$(date +%s.%N)
if ! bash "$HERE/build.sh"; then echo "run.sh: guest build failed (log: $LAB/build.log)"; echo "0 passed, 0 failed, 0 skipped"; exit 1; fi
BUILD_S=$(el "$T")
echo "build: ${BUILD_S}s"

SESSION=$LAB/runs/$(date +%Y%m%d-%H%M%S)-run-$$
mkdir -p "$SESSION"
TOTAL_PASS=0 TOTAL_FAIL=0 SKIPPED=0 CRASHED=0
declare -a COLS=() STEPS=()
declare -A CELL=()
SKIPS=()

add_step_row() { local s; for s in "${STEPS[@]}"; do [ "$s" = "$1" ] && return; done; STEPS+=("$1"); }

# write the guest-side script for one case
guest_cmd() {  # SERVER VERS SEC > cmd.sh
  local v
  echo 'set -u'
  for v in BIG_MB SMALL_N TREE_N FIO_MB FIO_RUNTIME STEP_TIMEOUT; do
    [ -n "${!v:-}" ] && printf 'export %s=%q\n' "$v" "${!v}"
  done
  case "$1" in
    knfsd) echo 'lab-knfsd-start || { echo "lab-knfsd-start failed"; exit 97; }'
           printf 'exec bash /share/workload.sh 127.0.0.1 %q %q /srv/export ""\n' "$2" "$3";;
    tarn)  echo 'export SQUASH=1'
           if [ "${2%%.*}" = 4 ]; then
             # NFSv4 needs neither MOUNT nor NLM: one port, locks in the protocol.
             printf 'exec bash /share/workload.sh %q %q %q / %q\n' "$TARN_ADDR" "$2" "$3" "proto=tcp,port=$TARN_PORT"
           else
             echo 'echo "note: tarn has no NLM yet: mounting with nolock, flock/fcntl checks are client-local"'
             printf 'exec bash /share/workload.sh %q %q %q / %q\n' "$TARN_ADDR" "$2" "$3" "$TARN_MOUNT_OPTS"
           fi;;
  esac
}

start_tarn() {  # CASEDIR -> sets TARN_PID, NS; returns non-zero if it does not come up
  local dir=$1/export
  mkdir -p "$dir"; chmod 0777 "$dir"
  local extra=()
  # keep tarn's file-handle key in the case dir, not in /var/lib/tarn, when the binary supports it
  if "$TARN_BIN" serve --help 2>/dev/null | grep -q -- '--state-dir'; then extra=(--state-dir "$1/state"); fi
  # shellcheck disable=SC2086 # TARN_EXTRA_ARGS is a word list on purpose
  NO_COLOR=1 ip netns exec "$NS" "$TARN_BIN" serve "$dir" --listen "$TARN_ADDR:$TARN_PORT" \
     --allow 10.77.0.0/24 --log-level "${TARN_LOG_LEVEL:-info}" "${extra[@]}" ${TARN_EXTRA_ARGS:-} \
     > "$1/tarn.log" 2>&1 < /dev/null &
  TARN_PID=$!
  echo "tarn: pid $TARN_PID, serving $dir on $TARN_ADDR:$TARN_PORT in netns $NS (log $1/tarn.log)"
  for _ in $(seq 100); do
    kill -0 "$TARN_PID" 2>/dev/null || { echo "tarn exited early:"; tail -20 "$1/tarn.log"; return 1; }
    ip netns exec "$NS" ss -Htln "sport = :$TARN_PORT" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  echo "tarn is not listening on $TARN_ADDR:$TARN_PORT after 10 s:"; tail -20 "$1/tarn.log"; return 1
}

run_case() {  # NAME SERVER VERS SEC
  local name=$1 server=$2 vers=$3 sec=$4 slug dir rc out crashed=0 t
  slug=${name// /-}; dir=$SESSION/$slug; mkdir -p "$dir"
  echo; echo "=== CASE $name"
  t=$(date +%s.%N)
  guest_cmd "$server" "$vers" "$sec" > "$dir/cmd.sh"
  NS=tarnlab-$$-${#COLS[@]}
  "$HERE/net.sh" up "$NS" || { echo "run.sh: netns setup failed"; crashed=1; }
  if [ $crashed = 0 ] && [ "$server" = tarn ]; then start_tarn "$dir" || crashed=1; fi
  if [ $crashed = 0 ]; then
    NETNS=$NS RUN_DIR=$dir/vm TIMEOUT=$CASE_TIMEOUT bash "$HERE/boot.sh" "$dir/cmd.sh" "$HERE/workload.sh" \
      > "$dir/out.log" 2> "$dir/boot.err" &
    BPID=$!; wait "$BPID"; rc=$?; BPID=
    sed 's/^/  /' "$dir/out.log"
    grep -v '^boot.sh: run dir' "$dir/boot.err" | sed 's/^/  [boot] /'
    if [ "$server" = tarn ]; then
      if ! kill -0 "$TARN_PID" 2>/dev/null; then echo "  tarn DIED during the run; log tail:"; crashed=1; tail -20 "$dir/tarn.log" | sed 's/^/  | /'; fi
    fi
    grep -q '^WORKLOAD ' "$dir/out.log" || { echo "  no WORKLOAD summary from the guest (rc=$rc): crashed"; crashed=1; }
  fi
  stop_pid "$TARN_PID"; TARN_PID=
  "$HERE/net.sh" down "$NS"; NS=
  COLS+=("$name")
  local c=$((${#COLS[@]} - 1)) st res sec_s
  CELL[$c,boot]=$(grep -o 'boot_to_cmd_s=[0-9.]*' "$dir/boot.err" 2>/dev/null | cut -d= -f2)s
  while read -r _ st res sec_s; do
    add_step_row "$st"
    if [ "$res" = PASS ]; then CELL[$c,$st]=$sec_s; TOTAL_PASS=$((TOTAL_PASS+1))
    else CELL[$c,$st]="FAIL $sec_s"; TOTAL_FAIL=$((TOTAL_FAIL+1)); fi
  done < <(grep -E '^STEP [^ ]+ (PASS|FAIL) ' "$dir/out.log" 2>/dev/null)
  [ $crashed = 1 ] && { CRASHED=$((CRASHED+1)); CELL[$c,result]=CRASHED; } || CELL[$c,result]=ok
  if [ "${CELL[$c,result]}" = ok ] && grep -qE '^STEP [^ ]+ FAIL ' "$dir/out.log" 2>/dev/null; then
    CELL[$c,result]=FAILED; fi
  CELL[$c,wall]=$(el "$t")s
  echo "=== CASE $name: ${CELL[$c,result]} in ${CELL[$c,wall]} (run dir $dir)"
}

echo "=== cases (session dir $SESSION)"
while IFS='|' read -r on server vers sec reason; do
  on=$(echo $on); server=$(echo $server); vers=$(echo $vers); sec=$(echo $sec); reason=$(echo $reason)
  [ -n "$on" ] || continue
  name="$server v$vers"; [ "$sec" != sys ] && name="$name $sec"
  if [ "$on" != on ]; then SKIPS+=("SKIP $name: $reason"); echo "SKIP $name: $reason"; continue; fi
  if [ -n "${CASES_MATCH:-}" ] && ! [[ $name =~ $CASES_MATCH ]]; then
    SKIPS+=("SKIP $name: filtered out by CASES_MATCH=$CASES_MATCH"); echo "${SKIPS[-1]}"; continue; fi
  if [ "$server" = tarn ] && [ ! -x "$TARN_BIN" ]; then
    SKIPS+=("SKIP $name: no tarn binary (build with cargo build --release)"); echo "${SKIPS[-1]}"; continue; fi
  run_case "$name" "$server" "$vers" "$sec"
done <<< "$CASES"
SKIPPED=${#SKIPS[@]}

# ---- table ----------------------------------------------------------------------------------------
echo
ACC=$(grep -ho 'accel=[a-z]*' "$SESSION"/*/boot.err 2>/dev/null | head -1 | cut -d= -f2)
echo "=== guest lab timings, seconds (accel=${ACC:-none}, ${CPUS:-2} vCPU, ${MEM:-2048} MiB; functional, not benchmarks)"
W=14
printf '%-14s' "step"; for c in "${COLS[@]}"; do printf " %${W}s" "$c"; done; echo
for row in boot "${STEPS[@]}" wall result; do
  printf '%-14s' "$row"
  for i in "${!COLS[@]}"; do printf " %${W}s" "${CELL[$i,$row]:--}"; done; echo
done
echo "build: ${BUILD_S}s   stage total: $(el "$T_START")s"
for s in "${SKIPS[@]}"; do echo "$s"; done
[ "$CRASHED" -gt 0 ] && echo "$CRASHED case(s) crashed"
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed, $SKIPPED skipped"
[ "$TOTAL_FAIL" = 0 ] && [ "$CRASHED" = 0 ]
