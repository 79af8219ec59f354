#!/bin/bash
# tests/cluster/failover.sh - two Tarn heads over one CephFS, each in its own network namespace,
# sharing a 3-member etcd; the service address moves from head A to head B (host-side clients).
#
#   bash tests/cluster/failover.sh        (as root; a release tarn: cargo build --release -p tarn)
#
# 1. Ceph (mon, osd, mds) and etcd on the lab bridge; heads A and B (lib.sh has the layout).
# 2. A client in its own namespace (`tarn failover-hold`, NFSv4.1) writes through the service
#    address, on A: FILE_SYNC and UNSTABLE + COMMIT, then takes a write lock on the file.
# 3. A is SIGKILLed. Like a failover manager, the script waits until the cluster has declared A
#    lost and every live head enforces the grace (scripts/tarn-takeover.sh), removes the address
#    from A's side and adds it on B's with a gratuitous ARP.
# 4. Checks: B refuses a second client's conflicting lock before the kill (locks are in CephFS
#    too), while the takeover waits (DENIED, then NFS4ERR_GRACE; never granted), during the
#    grace (NFS4ERR_GRACE), also through the address right after the move; the first client's
#    next write succeeds (its session recovered on B: new client, CLAIM_PREVIOUS open, reclaimed
#    lock); its data,
#    before and after the failover, reads back as written; once the grace is over the second
#    client gets NFS4ERR_DENIED (the reclaimed lock is held), then the lock once released.
# 5. NFSv3: a REMOVE retransmitted with the same xid is answered by a's duplicate request cache
#    before the failover, and runs again on b after it (NFS3ERR_NOENT: the cache is per head,
#    docs/cluster.md); a libnfs client writes and reads a file through the moved address.
# Prints the time from the kill to the client's first successful call, and ends with
#   failover: N passed, M failed
# Exit status non-zero iff a check failed. Env: TARN_BIN, FO_ETCD_LEASE (2), FO_GRACE (60),
# FO_KEEP=1 (keep the run directory), FO_DIR (default /var/tmp/tarn-failover-<pid>).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

[ "$(id -u)" = 0 ] || { echo "failover.sh: must run as root (network namespaces)" >&2; exit 2; }
[ -x "$TARN_BIN" ] || { echo "failover.sh: no $TARN_BIN (cargo build --release -p tarn)" >&2; exit 2; }
for b in etcd etcdctl arping ceph-mon nfs-cat; do
  command -v $b >/dev/null || { echo "failover.sh: $b missing (scripts/deps.sh --test)" >&2; exit 2; }
done

T_START=$(fo_ms)
fo_init "${FO_DIR:-/var/tmp/tarn-failover-$$}"
finish() {
  local rc=$?
  fo_cleanup
  if [ "$rc" = 0 ] && [ "${FO_KEEP:-0}" != 1 ]; then rm -rf "$FO_DIR"; else echo "failover.sh: run directory $FO_DIR"; fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

PASS=0 FAIL=0
check() {  # NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then PASS=$((PASS + 1)); fo_log "ok   $name"
  else FAIL=$((FAIL + 1)); fo_log "FAIL $name"; fi
}
in_c() { ip netns exec "$FO_NS_C" "$@"; }
probe() { fo_probe "$1" "$FILE"; }

fo_log "setting up (run directory $FO_DIR)"
fo_net_up
fo_etcd_up
fo_ceph_up
fo_svc_add "$FO_NS_A"
fo_heads_up
fo_log "lab up in $(( ($(fo_ms) - T_START) / 1000 )) s: etcd x3, ceph, heads a ($FO_A_IP) and b ($FO_B_IP), service address $FO_SVC on a"

fo_wait_heads_recovered
FILE=fo-$$
H=$FO_DIR/hold; mkdir -p "$H"
fo_bg hold ip netns exec "$FO_NS_C" env TARN_LOG=warn "$TARN_BIN" failover-hold "$FO_SVC:2049" \
  --dir "$H" --name "$FILE" --wait 120
for _ in $(seq 600); do [ -e "$H/held" ] && break; kill -0 "$(fo_pid hold)" 2>/dev/null || break; sleep 0.1; done
check "client holds a write lock through the service address on a" test -e "$H/held"
[ -e "$H/held" ] || { cat "$FO_DIR/hold.log"; exit 1; }

# NFSv3 retransmission: a REMOVE sent twice with one xid is answered twice NFS3_OK by a's
# duplicate request cache; the same call sent after the failover reaches b (its own cache).
DRC="nfs://$FO_SVC//$FILE.drc?version=3&nfsport=2049&mountport=2049"
echo x >"$FO_DIR/drc.src"; in_c nfs-cp "$FO_DIR/drc.src" "$DRC" >/dev/null 2>&1 || true
XID=$(( 0x7a000000 + $$ ))
r=$(in_c timeout 20 python3 "$HERE/nfs3-replay.py" "$FO_SVC" "$XID" "$FILE.drc" 2 2>&1 | tr '\n' ' ')
check "NFSv3 REMOVE retransmitted to a: its duplicate request cache answers ($r)" test "$r" = "NFS3_OK NFS3_OK "

out=$(ip netns exec "$FO_LAB" timeout 20 bash "$FO_REPO/scripts/tarn-takeover.sh" --etcd "$FO_ETCD_URLS" \
  --cluster tfo --failed a --unless-alive "$FO_A_IP" --timeout 10 2>&1) || true
check "tarn-takeover.sh leaves a live head alone ($out)" grep -q 'answers at' <<<"$out"

# Locks are in CephFS too: b knows a's client's lock.
r=$(probe "$FO_B_IP")
check "before the failover, b refuses a conflicting lock held through a ($r)" test "$r" = DENIED

# ---- the failover ------------------------------------------------------------------------------------
# Between the kill and the move: never granted (a's lock is in Ceph until the head that declares
# a lost ends a's CephFS sessions, and by then every head is in grace). In the background, so
# that a slow answer does not hold up the move; stopped before the move.
( while [ ! -e "$FO_DIR/stop-probes" ]; do probe "$FO_B_IP"; sleep 0.05; done ) >"$FO_DIR/wait-probes" &
PROBES=$!
echo "$PROBES probe-loop" >>"$FO_DIR/pids"
fo_before_move() {
  touch "$FO_DIR/stop-probes"
  local r; r=$(probe "$FO_B_IP")
  check "during the grace, b refuses a second client's conflicting lock ($r)" test "$r" = GRACE
}
fo_failover "$H/go"
wait "$PROBES"
seen=$(sort "$FO_DIR/wait-probes" | uniq -c | xargs)
check "no conflicting lock granted through b while the takeover waited ($seen)" \
  bash -c '[ -s "$0" ] && ! grep -qx GRANTED "$0"' "$FO_DIR/wait-probes"
r=$(probe "$FO_SVC")
check "a new client's conflicting lock through the moved address is refused ($r)" test "$r" = GRACE -o "$r" = DENIED

for _ in $(seq 1200); do [ -e "$H/first-ok" ] && break; kill -0 "$(fo_pid hold)" 2>/dev/null || break; sleep 0.05; done
check "the client's first write after the failover succeeded" test -e "$H/first-ok"
[ -e "$H/first-ok" ] || { cat "$FO_DIR/hold.log"; exit 1; }
T_FIRST=$(( $(cat "$H/first-ok") / 1000000 ))
for _ in $(seq 1200); do [ -e "$H/reclaimed" ] && break; kill -0 "$(fo_pid hold)" 2>/dev/null || break; sleep 0.05; done
check "open and lock reclaimed on b, data (before and after the kill) reads back as written" test -e "$H/reclaimed"
grep -E 'first write|verified' "$FO_DIR/hold.log" | sed 's/^/    /'

# Once every client of a reclaimed, the grace ends; the reclaimed lock holds.
r=$(fo_wait_grace_over "$FILE")
T_LIFTED=$(fo_ms)
check "after the grace, b refuses the conflicting lock: the reclaimed lock is held ($r)" test "$r" = DENIED
touch "$H/release"
for _ in $(seq 300); do kill -0 "$(fo_pid hold)" 2>/dev/null || break; sleep 0.1; done
wait "$(fo_pid hold)"; hold_rc=$?
check "the client released and closed (exit $hold_rc)" test "$hold_rc" = 0
check "the lock is free once released" test "$(probe "$FO_SVC")" = GRANTED

r=$(in_c timeout 20 python3 "$HERE/nfs3-replay.py" "$FO_SVC" "$XID" "$FILE.drc" 1 2>&1 | tr '\n' ' ')
check "the same REMOVE retransmitted after the failover runs again on b: NFS3ERR_NOENT, the cache is per head ($r)" test "$r" = "NFS3ERR_NOENT "

# NFSv3 through the moved address (libnfs; MOUNT and NFS on 2049).
V3="nfs://$FO_SVC//$FILE.v3?version=3&nfsport=2049&mountport=2049"
head -c 1048576 /dev/urandom >"$FO_DIR/v3.src"
in_c nfs-cp "$FO_DIR/v3.src" "$V3" >/dev/null 2>&1 && in_c nfs-cat "$V3" >"$FO_DIR/v3.back" 2>/dev/null || true
check "NFSv3 write and read back through b" cmp -s "$FO_DIR/v3.src" "$FO_DIR/v3.back"

fo_log "timings after the kill: cluster ready $(( T_READY - T_KILL )) ms, address moved $(( T_MOVED - T_KILL )) ms, client's first successful call $(( T_FIRST - T_KILL )) ms, grace over <= $(( T_LIFTED - T_KILL )) ms"
echo "failover: kill to first successful call $(( T_FIRST - T_KILL )) ms"
echo "failover: $PASS passed, $FAIL failed ($(( ($(fo_ms) - T_START) / 1000 )) s)"
[ "$FAIL" = 0 ]
