#!/bin/bash
# Coverage-guided fuzzing (libFuzzer through cargo-fuzz, on the stable
# toolchain: `-s none`, no sanitizer; fuzz/README.md says why).
#   scripts/fuzz.sh TARGET MINUTES   one target for that long (a long run)
#   scripts/fuzz.sh --cpu TARGET MINUTES   until the fuzzer has used that much
#                                    CPU time (long runs on a shared machine)
#   scripts/fuzz.sh --short SECONDS  every target for SECONDS each (the test command's stage)
#   scripts/fuzz.sh --list           the targets
# The committed corpus (fuzz/corpus/TARGET: seed-* and regress-* inputs) is
# read, never written: what a run finds goes to $FUZZ_WORK/TARGET
# (default /var/tmp/tarn-fuzz), crashes to $FUZZ_WORK/TARGET-crash-*. A
# crash fails the script; keep its input as fuzz/corpus/TARGET/regress-NAME
# with a unit test once fixed. The run's memory is capped (-rss_limit_mb), so
# memory a decoded length makes the server touch is a failure too (without a
# sanitizer, libFuzzer cannot see an allocation that is never touched).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"
WORK=${FUZZ_WORK:-/var/tmp/tarn-fuzz}
command -v cargo-fuzz >/dev/null || { echo "fuzz: cargo-fuzz missing (scripts/deps.sh --test installs it)" >&2; exit 1; }
TARGETS=$(cargo fuzz list)
usage() { echo "usage: $0 [--cpu] TARGET MINUTES | --short SECONDS | --list   (targets: $(echo $TARGETS))" >&2; exit 2; }
cpu=0
if [ "${1:-}" = --cpu ]; then cpu=1; shift; fi
case ${1:-} in
  --list) echo "$TARGETS"; exit 0 ;;
  --short) [ $# = 2 ] || usage; secs=$2; run=($TARGETS) ;;
  "") usage ;;
  *) [ $# = 2 ] || usage; grep -qx "$1" <<<"$TARGETS" || usage; secs=$(( $2 * 60 )); run=("$1") ;;
esac
cargo fuzz build -s none -O >/dev/null
# The parallel runs write their results here before one() makes it.
mkdir -p "$WORK"
bin="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release"
# One target: its line on stdout; status 1 when it failed.
one() {
  local t=$1 log t0 st fail=0 execs rate args pid tick used f rc
  mkdir -p "$WORK/$t" "corpus/$t"
  log="$WORK/$t.log"
  t0=$(date +%s)
  # -close_fd_mask=1: the targets' stdout is noise; libFuzzer's own lines are on stderr.
  args=("$WORK/$t" "corpus/$t" -malloc_limit_mb=512 -rss_limit_mb=2048 -timeout=10
        -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$WORK/$t-")
  if [ $cpu = 0 ]; then
    if "$bin/$t" "${args[@]}" -max_total_time="$secs" >"$log" 2>&1; then st=ok; else st=FAILED fail=1; fi
  else
    # libFuzzer only knows wall time: poll the process's CPU time and
    # interrupt it (SIGINT prints the final stats and exits 72) at the budget.
    "$bin/$t" "${args[@]}" >"$log" 2>&1 &
    # (Do not SIGSTOP such a run: libFuzzer's per-input timer counts wall
    # time, and reports the stopped time as a -timeout.)
    pid=$! tick=$(getconf CLK_TCK) used=0
    while kill -0 $pid 2>/dev/null; do
      read -r -a f </proc/$pid/stat 2>/dev/null || break
      used=$(( (f[13] + f[14]) / tick ))
      (( used >= secs )) && { kill -INT $pid; break; }
      sleep 5
    done
    rc=0; wait $pid || rc=$?
    if [ $rc = 0 ] || [ $rc = 72 ]; then st=ok; else st=FAILED fail=1; fi
    echo "$(date -u +%FT%TZ) fuzz $t: $(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1) executions in ${used}s of CPU ($st)" >>"$WORK/cpu-runs.log"
  fi
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
  echo "fuzz $t: $st, ${execs:-?} executions in $(( $(date +%s) - t0 ))s (${rate:-?}/s), corpus $(ls "$WORK/$t" | wc -l) inputs"
  if [ $st = FAILED ]; then
    grep -E "panicked|ERROR|SUMMARY|Test unit written" -A2 "$log" | head -20 >&2
  fi
  return $fail
}
# The short runs two at a time, one per core (libFuzzer runs one thread):
# their lines come out in target order once both are done.
fail=0
if [ $cpu = 0 ] && [ ${#run[@]} -gt 1 ]; then
  par=$(nproc); [ "$par" -ge 1 ] || par=1
  # Each run leaves its exit status in a file: bash forgets a finished
  # job's status once `jobs` has reported it, so `wait PID` can answer
  # "not a child of this shell" (exit 127) for a run that passed.
  for t in "${run[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do sleep 0.2; done
    rm -f "$WORK/$t.rc"
    { one "$t"; echo $? >"$WORK/$t.rc"; } >"$WORK/$t.result" 2>&1 &
  done
  wait
  for t in "${run[@]}"; do
    [ "$(cat "$WORK/$t.rc" 2>/dev/null)" = 0 ] || fail=1
    cat "$WORK/$t.result"; rm -f "$WORK/$t.result" "$WORK/$t.rc"
  done
else
  for t in "${run[@]}"; do one "$t" || fail=1; done
fi
exit $fail
