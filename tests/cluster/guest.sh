#!/bin/bash
# tests/cluster/guest.sh - the failover with the Linux kernel client: the guest lab's VM (Debian 12,
# tests/guest/boot.sh) sits on the failover lab's bridge (tests/cluster/lib.sh) and mounts the
# service address; head A is SIGKILLed while the guest writes and holds a lock, the address moves
# to head B. The guest side is guest-failover.sh (its STEP lines are this test's checks); from the
# host, another NFSv4.1 client tries the guest's lock through B during the grace (refused:
# NFS4ERR_GRACE) and after it (refused: NFS4ERR_DENIED, the guest reclaimed it).
#
#   bash tests/cluster/guest.sh           (as root; scripts/test.sh --full runs it)
#
# Env: FO_GUEST_VERS="4.1 3" (NFS versions, one lab and one VM each; 3 with NLM locks), TARN_BIN, FO_ETCD_LEASE,
# FO_KEEP=1, CASE_TIMEOUT=600 (s per VM). Ends with
#   guest failover: N passed, M failed
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
GUEST=$FO_REPO/tests/guest

[ "$(id -u)" = 0 ] || { echo "guest.sh: must run as root" >&2; exit 2; }
[ -x "$TARN_BIN" ] || { echo "guest.sh: no $TARN_BIN (cargo build --release -p tarn)" >&2; exit 2; }
bash "$GUEST/build.sh" >/dev/null || { echo "guest.sh: guest build failed" >&2; exit 1; }

TOTAL_PASS=0 TOTAL_FAIL=0 SUMMARY=()
BASE=${FO_DIR:-/var/tmp/tarn-failover-guest-$$}
T0=$(fo_ms)

one() {  # VERS: one lab, one VM
  local vers=$1 share r pass fail first
  fo_init "$BASE/v$vers"
  PASS=0 FAIL=0
  check() { local n=$1; shift; if "$@"; then PASS=$((PASS + 1)); fo_log "ok   $n"; else FAIL=$((FAIL + 1)); fo_log "FAIL $n"; fi; }
  fo_log "=== NFS vers=$vers: setting up (run directory $FO_DIR)"
  fo_net_up && fo_etcd_up && fo_ceph_up || return 1
  FO_RPCBIND=1   # NFSv3's lockd finds NLM through the server's rpcbind
  # NLM hosts never say they finished reclaiming: with NFSv3 the grace runs to its bound.
  if [ "$vers" = 3 ]; then FO_GRACE=20; else FO_GRACE=60; fi
  fo_svc_add "$FO_NS_A"
  fo_heads_up
  fo_wait_heads_recovered
  fo_log "lab up in $(( ($(fo_ms) - T0) / 1000 )) s; booting the guest"

  share=$FO_DIR/vm/share
  printf 'exec bash /share/guest-failover.sh %q %q\n' "$FO_SVC" "$vers" >"$FO_DIR/cmd.sh"
  fo_bg vm env RUN_DIR="$FO_DIR/vm" NETNS="$FO_LAB" TAP=tap0 TIMEOUT="${CASE_TIMEOUT:-600}" \
    bash "$GUEST/boot.sh" "$FO_DIR/cmd.sh" "$HERE/guest-failover.sh" "$GUEST/lock-holder.pl"
  for _ in $(seq $(( ${CASE_TIMEOUT:-600} * 10 ))); do
    [ -e "$share/failover-request" ] && break
    kill -0 "$(fo_pid vm)" 2>/dev/null || break
    sleep 0.1
  done
  if [ -e "$share/failover-request" ]; then
    # Locks are in CephFS too: b knows the guest's lock taken through a.
    r=$(fo_probe "$FO_B_IP" fo-locked)
    check "before the kill, b refuses another client's lock on the guest's file ($r)" test "$r" = DENIED
    fo_before_move() {
      local r; r=$(fo_probe "$FO_B_IP" fo-locked)
      check "during the grace, b refuses another client's lock on the guest's file ($r)" test "$r" = GRACE
    }
    fo_failover "$share/killed"
    for _ in $(seq 1200); do [ -e "$share/reclaimed" ] && break; kill -0 "$(fo_pid vm)" 2>/dev/null || break; sleep 0.05; done
    r=$(fo_probe "$FO_SVC" fo-locked)
    check "after the guest's first call through b, another client's lock is refused ($r)" test "$r" = GRACE -o "$r" = DENIED
    r=$(fo_wait_grace_over fo-locked)
    check "after the grace, the guest's reclaimed lock holds against another client ($r)" test "$r" = DENIED
    touch "$share/failover-done"
  fi
  wait "$(fo_pid vm)"
  sed 's/^/    | /' "$share/out.log" 2>/dev/null
  pass=$(grep -c '^STEP .* PASS' "$share/out.log" 2>/dev/null); fail=$(grep -c '^STEP .* FAIL' "$share/out.log" 2>/dev/null)
  grep -q '^GUEST-FAILOVER' "$share/out.log" 2>/dev/null || { fail=$((fail + 1)); fo_log "FAIL no summary from the guest (log: $FO_DIR/vm.log)"; tail -5 "$FO_DIR/vm.log"; }
  first=$(awk '$1=="FIRST-OK-MS"{print $2}' "$share/out.log" 2>/dev/null)
  PASS=$((PASS + pass)) FAIL=$((FAIL + fail))
  SUMMARY+=("vers=$vers: $PASS passed, $FAIL failed; kill to the kernel client's first successful write+fsync ${first:-?} ms (address moved $(( ${T_MOVED:-0} - ${T_KILL:-0} )) ms after the kill)")
  TOTAL_PASS=$((TOTAL_PASS + PASS)) TOTAL_FAIL=$((TOTAL_FAIL + FAIL))
}

trap 'fo_cleanup' EXIT
trap 'exit 130' INT; trap 'exit 143' TERM
for v in ${FO_GUEST_VERS:-4.1 3}; do
  one "$v" || TOTAL_FAIL=$((TOTAL_FAIL + 1))
  fo_cleanup
done
for s in "${SUMMARY[@]}"; do echo "guest failover $s"; done
[ "$TOTAL_FAIL" = 0 ] && [ "${FO_KEEP:-0}" != 1 ] && rm -rf "$BASE"
[ "$TOTAL_FAIL" = 0 ] || echo "guest.sh: run directory $BASE"
echo "guest failover: $TOTAL_PASS passed, $TOTAL_FAIL failed ($(( ($(fo_ms) - T0) / 1000 )) s)"
[ "$TOTAL_FAIL" = 0 ]
