#!/bin/bash
# Deterministic simulation of the NFSv4 state core and the shared lock
# manager (crates/server/src/nfs4/sim): many clients, restarts, partitions,
# invariants checked after every step. CI runs 32 seeds x 2,000 steps through
# `cargo test`; this runs more. A failing seed prints a minimal replay.
#   scripts/simulate.sh --seeds N [--steps M] [--from S] [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=32 STEPS=2000 FROM=0 PROFILE=()
usage() { echo "usage: $0 --seeds N [--steps M] [--from FIRST_SEED] [--release]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --seeds) SEEDS=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --from) FROM=${2:?}; shift 2 ;;
    --release) PROFILE=(--release); shift ;;
    *) usage ;;
  esac
done
for n in "$SEEDS" "$STEPS" "$FROM"; do
  [[ $n =~ ^[0-9]+$ ]] || usage
done
echo "simulating seeds $FROM..$((FROM + SEEDS - 1)), $STEPS steps each"
TARN_SIM_SEEDS=$SEEDS TARN_SIM_STEPS=$STEPS TARN_SIM_FIRST_SEED=$FROM \
  exec cargo test "${PROFILE[@]}" -p server --lib -- nfs4::sim::tests::seeds_keep_the_invariants --exact --nocapture
