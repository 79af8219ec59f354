#!/bin/bash
# Starts a Tarn server on a temporary directory on loopback, runs `tarn bench`
# against it (arguments are passed on), and stops the server by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TARN_BIN:-target/release/tarn}
[ -x "$BIN" ] || cargo build --release -q -p tarn
DIR=$(mktemp -d /var/tmp/tarn-bench.XXXXXX)
mkdir -p "$DIR/export" "$DIR/state"; chmod 0777 "$DIR/export"
PORT=${PORT:-$(( 20000 + RANDOM % 20000 ))}
# TARN_SERVE_ARGS: extra `tarn serve` flags, e.g. TARN_SERVE_ARGS=--no-metrics to measure the metrics' cost.
# shellcheck disable=SC2086
"$BIN" serve "$DIR/export" --listen "127.0.0.1:$PORT" --state-dir "$DIR/state" --log-level warn ${TARN_SERVE_ARGS:-} > "$DIR/server.out" 2> "$DIR/server.log" &
PID=$!
cleanup() { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
for _ in $(seq 100); do grep -q "tarn: exporting" "$DIR/server.out" 2>/dev/null && break; sleep 0.05; done
"$BIN" bench --server "127.0.0.1:$PORT" --server-pid "$PID" "$@"
