#!/bin/bash
# The whole test suite: formatting, lints, unit/property/end-to-end tests
# (libnfs against a real server), pynfs (the NFSv4 server conformance suite),
# a short benchmark run that only checks the bench completes, and the guest
# lab (the Linux kernel NFS client in qemu against Tarn), and a short run of
# every fuzz target (fuzz/README.md). Installs what it
# needs. Run as root (re-execs with sudo otherwise).
#   scripts/test.sh          what CI runs: fits CI's 45-minute budget on 2 cores
#   scripts/test.sh --full   also the whole guest matrix at full size (knfsd as a
#                            reference, NFSv4.0, every krb5 flavor, TLS from the
#                            Debian 13 guest), a 10-minute soak (RSS growth
#                            judged), the guest failover and fsx through the
#                            FUSE mount at a million operations a run: hours
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"
FULL=0
for a in "$@"; do
  case $a in
    --full) FULL=1 ;;
    *) echo "usage: $0 [--full]" >&2; exit 2 ;;
  esac
done
rm -f /tmp/tarn-pynfs.log /tmp/tarn-guest.log /tmp/tarn-package.log /tmp/tarn-failover.log /tmp/tarn-guest-failover.log
T0=$(date +%s) TS=$(date +%s) LAST=
TIMES=()
stage() {  # each stage's start (seconds since the start) and, at the end, a table of durations
  local now; now=$(date +%s)
  [ -n "$LAST" ] && TIMES+=("$(printf '%6ss  %s' $((now - TS)) "$LAST")")
  LAST=$* TS=$now
  echo; echo "=== $* ($((now - T0))s)"
}
stage "dependencies"
bash scripts/deps.sh --test
export PATH="$HOME/.cargo/bin:$PATH"
# deps.sh --test installed Ceph and etcd: the CephFS and cluster tests must
# run, not skip (~45 s and ~15 s).
export TARN_REQUIRE_CEPH=1 TARN_REQUIRE_ETCD=1
stage "cargo fmt --check, docs (links resolve, README a front door), import circles"
cargo fmt --all -- --check
bash scripts/check-docs.sh
# Module import circles: none in these crates (the rest are listed).
python3 scripts/check-imports.py --strict client krb5 metrics mount proto rpc server tarn testkdc vfs xdr
stage "cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings
stage "cargo test"
# Most of the time of a few test binaries is waiting, so they run beside
# the rest (which leaves the two cores about two-thirds idle by itself):
# - crash_cycles (146 s of wall time for 66 s of CPU: restarts and grace
#   periods). Not cephfs: beside the rest it took 235 s instead of 55, and
#   once a write through head B did not wait for head A's delegation;
# - tarn_krb and fuse_krb (Kerberos ticket lifetimes): their tests take
#   turns on a process-wide lock (the GSS environment variables), so each
#   test is a process of its own, a binary's tests side by side.
# The credential test compares its throughput over minutes, and other load
# can fail its 10% bound: it runs first, with nothing beside it (run last,
# after the other tests had churned the page cache and /var/tmp, its
# throughput sank through the run, 158 -> 120 MiB/s, on this VM; alone on
# an idle machine it holds 160-190).

BESIDE="crash_cycles"
SPLIT="tarn_krb fuse_krb"
ALONE=writes_stay_full_size_and_unstable_across_renewed_short_tickets
cargo test -q --workspace --no-run
SKIPS=()
declare -A NAMES
for bin in $BESIDE $SPLIT; do
  NAMES[$bin]=$(cargo test -q --workspace --test "$bin" -- --list --format terse 2>/dev/null | sed -n 's/: test$//p')
  for t in ${NAMES[$bin]}; do SKIPS+=(--skip "$t"); done
done
grep -qx "$ALONE" <<<"${NAMES[tarn_krb]}" || { echo "test.sh: no test $ALONE in tarn_krb" >&2; exit 1; }
one_test() { cargo test -q --workspace --test "$1" -- --exact "$2"; }
# Its 10% bound is judged on wall-clock throughput over two minutes, which
# this shared VM's neighbours move by as much (rehearsals today: 181 -> 151,
# 143 -> 121 MiB/s within a ticket with no change in the code). A run that
# misses only that bound is run once more and judged by the second: the
# slump the test is for (writes held back at the end of every ticket) is
# deterministic and fails both; any other failure fails at once.
# It runs at a higher CPU priority where it may (root): on this shared VM
# other tenants' load dented single ticket periods by 20-25% for ~12 s
# (rehearsals 2026-12-07: 160-170 MiB/s baseline under that load, 180-200
# on an idle machine with no dent); the bound stays 10%.
PRIO=()
if nice -n -10 true 2>/dev/null; then PRIO=(nice -n -10); fi
if ! "${PRIO[@]}" cargo test -q --workspace --test tarn_krb -- --exact "$ALONE" >/tmp/tarn-cargo-test-alone.log 2>&1; then
  cat /tmp/tarn-cargo-test-alone.log
  grep -q 'throughput fell at the end of' /tmp/tarn-cargo-test-alone.log || exit 1
  echo "credential test: the throughput bound was missed once; run again (the second run decides)"
  "${PRIO[@]}" cargo test -q --workspace --test tarn_krb -- --exact "$ALONE" 2>&1 | tee /tmp/tarn-cargo-test-alone.log
else
  cat /tmp/tarn-cargo-test-alone.log
fi
split_bin() {  # BIN: each test but ALONE a process of its own, side by side
  local t pids=() fail=0 p
  for t in ${NAMES[$1]}; do
    [ "$t" = "$ALONE" ] && continue
    one_test "$1" "$t" >"/tmp/tarn-split-$t.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  for t in ${NAMES[$1]}; do
    [ "$t" = "$ALONE" ] || { cat "/tmp/tarn-split-$t.log"; rm -f "/tmp/tarn-split-$t.log"; }
  done
  [ $fail = 0 ] || echo "FAILED: a test of $1"
  return $fail
}
( for b in $BESIDE; do cargo test --workspace --test "$b" || { echo "FAILED: $b"; exit 1; }; done ) >/tmp/tarn-beside-1.log 2>&1 &
BESIDE_PIDS=($!)
( for b in $SPLIT; do split_bin "$b" || exit 1; done ) >/tmp/tarn-beside-2.log 2>&1 &
BESIDE_PIDS+=($!)
fail=0
cargo test --workspace -- --exact "${SKIPS[@]}" 2>&1 | tee /tmp/tarn-cargo-test.log || fail=1
cat /tmp/tarn-cargo-test-alone.log >> /tmp/tarn-cargo-test.log; rm -f /tmp/tarn-cargo-test-alone.log
for p in "${BESIDE_PIDS[@]}"; do wait "$p" || fail=1; done
cat /tmp/tarn-beside-1.log /tmp/tarn-beside-2.log | tee -a /tmp/tarn-cargo-test.log
rm -f /tmp/tarn-beside-1.log /tmp/tarn-beside-2.log
[ $fail = 0 ] || { grep -h '^FAILED: ' /tmp/tarn-cargo-test.log; exit 1; }
stage "NFS-Ganesha: the client library, the tools and the FUSE mount against a server nobody here wrote"
# Root and private namespaces (scripts/ganesha-run.sh), so not in plain `cargo test`.
# --workspace: the same features as the stage before, so nothing is rebuilt. ~15 s.
TARN_GANESHA=1 cargo test --workspace --test ganesha --test tools_ganesha
# `tarn mount`'s workload (FUSE) over NFSv3 and NFSv4.1 against Ganesha
# (~10 s), and fsx through the mount against it (~40 s).
TARN_GANESHA=1 cargo test --workspace --test fuse_mount --test fuse_integrity ganesha
stage "fuzz (short: every target 8 s; scripts/fuzz.sh TARGET MINUTES for long runs)"
bash scripts/fuzz.sh --short 8
stage "release build"
cargo build --release -q -p tarn
# The library's 4 KiB random read, which fuse-bench sets beside the mount's.
cargo build --release -q -p client --example randread
# The guest lab (the kernel client in qemu, ~11 minutes) leaves about a
# third of the two cores idle (its steps wait on the guest's I/O, fio's
# fixed run times, a grace period), and pynfs (~5 minutes, one call at a
# time) about half: the guest lab runs in the background from here, beside
# the package test and pynfs; its log is printed when it is waited for.
# The stages with timing in them (failover, soak, the benches) come after.
GUEST_PID=
if [ "${SKIP_GUEST:-0}" = 1 ]; then
  stage "guest lab skipped (SKIP_GUEST=1)"
else
  stage "guest lab (Linux kernel NFS client in qemu): started in the background"
  GUEST_T0=$(date +%s)
  TARN_BIN="$PWD/target/release/tarn" GUEST_FULL=$FULL bash tests/guest/run.sh >/tmp/tarn-guest.log 2>&1 &
  GUEST_PID=$!
  # A stage failing meanwhile stops it (run.sh cleans up on TERM).
  trap 'st=$?; [ -z "$GUEST_PID" ] || { kill -TERM "$GUEST_PID" 2>/dev/null; wait "$GUEST_PID" 2>/dev/null || true; }; exit $st' EXIT
fi
stage "Debian package: built, unit verified, installed/served/purged in a Debian 12 chroot"
TARN_BIN="$PWD/target/release/tarn" bash scripts/package-test.sh 2>&1 | tee /tmp/tarn-package.log
stage "pynfs: NFSv4.1 and NFSv4.0 server conformance (../shared/pynfs)"
TARN_BIN="$PWD/target/release/tarn" bash scripts/pynfs.sh all 2>&1 | tee /tmp/tarn-pynfs.log
if [ -n "$GUEST_PID" ]; then
  stage "guest lab: waiting for it"
  guest_rc=0
  wait "$GUEST_PID" || guest_rc=$?
  GUEST_PID=
  cat /tmp/tarn-guest.log
  echo "guest lab: $(( $(date +%s) - GUEST_T0 ))s from its start"
  [ "$guest_rc" = 0 ] || { echo "FAILED: the guest lab (exit $guest_rc)"; exit 1; }
fi
stage "failover: heads A and B in their own network namespaces over one CephFS, 3-member etcd; A SIGKILLed, the service address moved to B (host-side client; ~15 s)"
TARN_BIN="$PWD/target/release/tarn" bash tests/cluster/failover.sh 2>&1 | tee /tmp/tarn-failover.log
if [ "$FULL" = 1 ]; then
  stage "soak (10 minutes: 64 clients, Tarn's and libnfs's, one killed and replaced every 5 s; data, errors, RSS growth, descriptors, threads checked)"
  TARN_BIN="$PWD/target/release/tarn" bash scripts/soak.sh --minutes 10
else
  # Short: RSS growth is judged on runs of 10 minutes or more only (--full).
  stage "soak (1 minute: 64 clients, Tarn's and libnfs's, one killed and replaced every 5 s; data, errors, descriptors, threads checked)"
  TARN_BIN="$PWD/target/release/tarn" bash scripts/soak.sh --minutes 1
fi
if [ "$FULL" = 1 ]; then
  stage "fsx through tarn mount at full size (a million operations a run: NFSv3, NFSv4.1, NFSv4.1 nodeleg; mmap on and off; hours)"
  FSX_OPS=1000000 cargo test --workspace --test fuse_integrity fsx_over 2>&1 | tee -a /tmp/tarn-cargo-test.log
fi
stage "bench (short run: it must complete; numbers are not judged here)"
bash scripts/bench.sh --seconds 0.5 --ops null,getattr,lookup,read4k,write4k,read1m,v4getattr,v4open-read-close --inflight 1,32 --file-size 64M
# The tools vs libnfs's nfs-cp/nfs-cat, on Tarn and on NFS-Ganesha (64 MiB, 300 files; ~20 s).
TARN_BIN="$PWD/target/release/tarn" bash scripts/bench-client.sh --quick --ganesha
# tarn mount vs the tools over the library: tar x, rm -r, ls -lR of 500 files,
# 8 MiB sequential, 4 KiB random reads, round trips per file (~10 s).
bash scripts/fuse-bench.sh --quick --bin "$PWD/target/release/tarn"
stage "RPCSEC_GSS bench (short: 1 MiB I/O per flavor; 128 krb5p calls in flight on one context, no drop)"
SECONDS_PER_RUN=0.5 GSS_SECONDS=10 INFLIGHT=1,16 bash scripts/bench-gss.sh
cargo bench -q -p rpc --bench gss_crypto   # RFC 4121 tokens, MIT vs Rust, per AES enctype
stage "RPC-with-TLS bench (short: sys, krb5p and TLS against one server; 1 MiB READ/WRITE, 4 KiB READ at 1 and 16 in flight; ~15 s)"
SECONDS_PER_RUN=0.5 FILE_SIZE=64M bash scripts/bench-tls.sh
if [ "$FULL" = 1 ] && [ "${SKIP_GUEST:-0}" != 1 ]; then
  stage "guest failover: the kernel client in qemu through the service address while head A is SIGKILLed and the address moves to B (NFSv4.1 and NFSv3; ~3 minutes)"
  TARN_BIN="$PWD/target/release/tarn" bash tests/cluster/guest.sh 2>&1 | tee /tmp/tarn-guest-failover.log
fi
stage "done"
echo "stage times:"; printf '%s\n' "${TIMES[@]}"
echo "total: $(( $(date +%s) - T0 ))s"
# One closing line over the runners that count tests: cargo test, pynfs (failures outside
# its allow-list; a failure stops this script earlier), the failover checks and the guest
# lab's workload steps.
sum() { awk -v re="$1" '{ if (match($0, re)) { split(substr($0, RSTART, RLENGTH), w, " "); n += w[1] } } END { print n + 0 }' "$2" 2>/dev/null || echo 0; }
passed=$(( $(sum '[0-9]+ passed' /tmp/tarn-cargo-test.log) + $(sum '[0-9]+ passed' /tmp/tarn-pynfs.log) \
  + $(sum '[0-9]+ passed' /tmp/tarn-package.log) \
  + $(grep -h '^failover: [0-9]* passed' /tmp/tarn-failover.log 2>/dev/null | sum '[0-9]+ passed' /dev/stdin) \
  + $(grep -h '^guest failover: [0-9]* passed' /tmp/tarn-guest-failover.log 2>/dev/null | sum '[0-9]+ passed' /dev/stdin) \
  + $( [ -f /tmp/tarn-guest.log ] && sum '^[0-9]+ passed' /tmp/tarn-guest.log || echo 0) ))
echo "all: $passed passed, 0 failed"
