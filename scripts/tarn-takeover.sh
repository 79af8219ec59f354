#!/bin/bash
# scripts/tarn-takeover.sh - run by a failover manager (a keepalived notify script, a pacemaker
# resource) on the head that is about to take a failed head's service address, BEFORE it adds
# the address (docs/cluster.md, "Moving the service address"):
#
#   tarn-takeover.sh --etcd URL[,URL...] --cluster NAME --failed NODE \
#                    [--timeout SECONDS] [--self NODE] [--unless-alive IP]
#
# 0. Nothing to take over (exit 0 at once) when NODE is --self (the address comes home), or when
#    the head at --unless-alive answers an NFS NULL call on port 2049 (a cluster starting, where
#    the failover manager hands out the address for the first time; a head that is merely
#    slow also counts as alive: stop it before moving its address by hand).
# 1. Wait until etcd's grace record (/tarn/NAME/grace) shows NODE lost and every live head
#    enforcing the grace. Only then may the failed head's clients come: one that reaches a head
#    earlier gets NFS4ERR_NO_GRACE for its reclaims and loses its locks. This takes up to the
#    cluster's lease_seconds (plus a third of it) after the failed head's last renewal. The head
#    that declares NODE lost also ends its CephFS sessions (its capabilities and POSIX locks go);
#    ending them earlier, before every head enforces the grace, would let a head grant a new
#    lock that NODE's clients are about to reclaim.
#
# Exit status 0: ready, add the address now; 1: not ready within --timeout (default 60 s);
# 2: usage. Needs etcdctl (Debian: etcd-client).
set -euo pipefail
ETCD= NAME=tarn FAILED= TIMEOUT=60 SELF= ALIVE=
usage() { sed -n '6,7p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --etcd) ETCD=$2;; --cluster) NAME=$2;; --failed) FAILED=$2;; --timeout) TIMEOUT=$2;;
    --self) SELF=$2;; --unless-alive) ALIVE=$2;;
    *) usage;;
  esac
  shift 2 || usage
done
[ -n "$ETCD" ] && [ -n "$FAILED" ] || usage
ms() { echo $(( $(date +%s%N) / 1000000 )); }
t0=$(ms)
if [ "$FAILED" = "$SELF" ]; then echo "tarn-takeover: $FAILED is this head: nothing to take over"; exit 0; fi
# An NFSv3 NULL call on port 2049 (rpcinfo would ask rpcbind first, which a head need not run).
nfs_null() {
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/2049" || exit 1
    printf "\x80\x00\x00\x28TARN\x00\x00\x00\x00\x00\x00\x00\x02\x00\x01\x86\xa3\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" >&3
    [ "$(head -c 28 <&3 | wc -c)" = 28 ]' "$1" 2>/dev/null
}
if [ -n "$ALIVE" ] && nfs_null "$ALIVE"; then
  echo "tarn-takeover: $FAILED answers at $ALIVE: nothing to take over"; exit 0
fi

# The record: "current recovery deadline", then "node lease_until need_grace enforcing lost".
ready() {
  ETCDCTL_API=3 etcdctl --endpoints "$ETCD" --command-timeout 5s get --print-value-only \
    "/tarn/$NAME/grace" 2>/dev/null | awk -v f="$FAILED" '
    NR == 1 { rec = $2; next }
    $1 == f { lost = ($5 == 1); next }
    $5 == 0 && $4 != 1 { bad = 1 }
    END { exit !(rec != 0 && lost && !bad) }'
}
until ready; do
  if [ $(( $(ms) - t0 )) -gt $(( TIMEOUT * 1000 )) ]; then
    echo "tarn-takeover: $FAILED not declared lost with every head enforcing the grace in $TIMEOUT s" >&2
    exit 1
  fi
  sleep 0.05
done
echo "tarn-takeover: $FAILED lost, every live head enforces the grace ($(( $(ms) - t0 )) ms): move the address"
