#!/bin/bash
# The whole test suite: formatting, lints, unit/property/end-to-end tests
# (libnfs against a real server), the guest lab (the Linux kernel NFS client
# in qemu, against knfsd and Tarn), and a short benchmark run that only checks
# the bench completes. Installs what it needs. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
T0=$(date +%s)
stage() { echo; echo "=== $* ($(( $(date +%s) - T0 ))s)"; }
stage "dependencies"
bash scripts/deps.sh --test
export PATH="$HOME/.cargo/bin:$PATH"
stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings
stage "cargo test"
cargo test --workspace 2>&1 | tee /tmp/tarn-cargo-test.log
stage "release build"
cargo build --release -q -p tarn
stage "bench (short run: it must complete; numbers are not judged here)"
bash scripts/bench.sh --seconds 0.5 --ops null,getattr,lookup,read4k,write4k,read1m,v4getattr,v4open-read-close --inflight 1,32 --file-size 64M
stage "RPCSEC_GSS bench (short: 1 MiB I/O per flavor; 128 krb5p calls in flight on one context, no drop)"
SECONDS_PER_RUN=0.5 GSS_SECONDS=10 INFLIGHT=1,16 bash scripts/bench-gss.sh
cargo bench -q -p rpc --bench gss_crypto   # RFC 4121 tokens, MIT vs Rust, per AES enctype
if [ "${SKIP_GUEST:-0}" = 1 ]; then
  stage "guest lab skipped (SKIP_GUEST=1)"
else
  stage "guest lab: Linux kernel NFS client in qemu"
  TARN_BIN="$PWD/target/release/tarn" bash tests/guest/run.sh
fi
stage "done"
