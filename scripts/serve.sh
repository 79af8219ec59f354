#!/bin/bash
# Builds Tarn and serves a directory (default ./export) over NFSv3 and NFSv4
# on 127.0.0.1:2049. Extra arguments go to `tarn serve` (see `tarn serve --help`).
# Runs as root: the server opens files by kernel file handle (CAP_DAC_READ_SEARCH)
# and acts with each caller's uid and gids.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
bash scripts/deps.sh >/dev/null
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release -q -p tarn
exec ./target/release/tarn serve "$@"
