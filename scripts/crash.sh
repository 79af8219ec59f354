#!/usr/bin/env bash
# Crash safety by repeated SIGKILL, for long runs: the crash_cycles test
# (crates/tarn/tests/crash_cycles.rs) in a release build.
#
#   scripts/crash.sh [--cycles N] [--seed S] [--grace SECS]
#
# Prints the seed (TARN_CRASH_SEED repeats a run), time per cycle, bytes
# acknowledged stable and lost. A failure names the cycle and keeps the
# server's log in $TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=1000
while [ $# -gt 0 ]; do
    case "$1" in
        --cycles) cycles="$2"; shift 2 ;;
        --seed) export TARN_CRASH_SEED="$2"; shift 2 ;;
        --grace) export TARN_CRASH_GRACE="$2"; shift 2 ;;
        *) echo "usage: $0 [--cycles N] [--seed S] [--grace SECS]" >&2; exit 2 ;;
    esac
done
export TARN_CRASH_CYCLES="$cycles"
exec cargo test --release -p tarn --test crash_cycles -- \
    acknowledged_state_survives_repeated_sigkill --exact --nocapture
