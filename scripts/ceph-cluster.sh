#!/bin/bash
# A throwaway one-host Ceph cluster with a CephFS, for tests:
#
#   scripts/ceph-cluster.sh start DIR    # prints CEPH_CONF=DIR/ceph.conf when the fs is usable
#   scripts/ceph-cluster.sh stop DIR     # stops every daemon it started, by PID
#
# Everything lives under DIR (its own ceph.conf, keyring, daemon data, logs,
# admin sockets): nothing in /etc/ceph or /var/lib/ceph is read or written.
# Daemons listen on 127.0.0.1 only (or on CEPH_ADDR, an address of the
# network namespace the script runs in: the failover test puts the cluster
# on a bridge its heads' namespaces reach), on ports out of Ceph's defaults: the
# monitor on CEPH_PORT (default: a free port from 20000-31799, below the
# kernel's ephemeral range, where a busy test run's outgoing connections
# could take it first), the others in the 200 ports above it. One monitor (mon.a), one OSD on memstore (no disk: its
# objects live in the OSD's memory, capped at 1 GiB), one MDS (mds.a), a
# CephFS named "cephfs"; a manager (mgr.x) only with CEPH_MGR=1 (its RSS
# is ~300 MB against ~120 MB for the other three together; nothing the
# tests do needs it, but without it statfs reports no space figures).
#
# Authentication is cephx, as in any real cluster: the keyring holds one
# generated key per daemon and client.admin, so the tests exercise the same
# keyring path an operator configures (auth none would hide a backend that
# forgets to pass the keyring on).
#
# Needs ceph-mon, ceph-osd, ceph-mds (and ceph-mgr for CEPH_MGR=1) and the
# ceph CLI (ceph-common): scripts/deps.sh --ceph.
set -euo pipefail

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

stop() {
  [ -f "$DIR/pids" ] || return 0
  local pids
  pids=$(cat "$DIR/pids")
  for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
  # Up to 10 s for a clean exit, then KILL whatever is left.
  for _ in $(seq 100); do
    local alive=0
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  rm -f "$DIR/pids"
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

for b in ceph-mon ceph-osd ceph-mds ceph ceph-authtool monmaptool; do
  command -v "$b" >/dev/null || { echo "ceph-cluster: $b not found (scripts/deps.sh --ceph)" >&2; exit 3; }
done

t0=$(date +%s%N)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[ ! -e "$DIR/ceph.conf" ] || { echo "ceph-cluster: $DIR already holds a cluster" >&2; exit 2; }
mkdir -p "$DIR"/{run,log,mon/ceph-a,osd/ceph-0,mds/ceph-a,mgr/ceph-x}
ADDR=${CEPH_ADDR:-127.0.0.1}
free_port() { # a port from 20000-31799 nothing is bound to on ADDR now
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 11800))
    python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2])))' "$ADDR" "$p" 2>/dev/null &&
      { echo "$p"; return 0; }
  done
  echo "ceph-cluster: no free port found for the monitor" >&2
  return 1
}
PORT=${CEPH_PORT:-$(free_port)}
FSID=$(cat /proc/sys/kernel/random/uuid)
CONF=$DIR/ceph.conf
KEYRING=$DIR/keyring

cat >"$CONF" <<EOF
[global]
fsid = $FSID
mon host = v2:$ADDR:$PORT
mon initial members = a
public addr = $ADDR
ms bind msgr1 = false
ms bind ipv6 = false
ms bind port min = $((PORT + 1))
ms bind port max = $((PORT + 200))
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $KEYRING
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
log file = $DIR/log/\$name.log
pid file = $DIR/run/\$name.pid
crash dir = $DIR/crash
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
# A test cluster on a busy 2-core machine: no health noise about clocks or space.
mon clock drift allowed = 10
mon data avail warn = 1
mon data avail crit = 0
[mon]
mon data = $DIR/mon/\$cluster-\$id
[osd]
osd data = $DIR/osd/\$cluster-\$id
osd objectstore = memstore
memstore device bytes = 1073741824
osd max object name len = 256
osd max object namespace len = 64
[mds]
mds data = $DIR/mds/\$cluster-\$id
mds cache memory limit = 134217728
[mgr]
mgr data = $DIR/mgr/\$cluster-\$id
EOF

# One keyring for all: each daemon finds its own key by name.
ceph-authtool --create-keyring "$KEYRING" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$KEYRING" --gen-key -n client.admin \
  --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
ceph-authtool "$KEYRING" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
ceph-authtool "$KEYRING" --gen-key -n mds.a --cap mon 'allow profile mds' --cap osd 'allow *' --cap mds 'allow' --cap mgr 'allow profile mds' >/dev/null
ceph-authtool "$KEYRING" --gen-key -n mgr.x --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *' >/dev/null

: >"$DIR/pids"
# -E: a command failing inside a function (ceph_, run) also reports. The
# caller usually removes DIR, so the end of each daemon's log is printed.
set -E
failed() {
  echo "ceph-cluster: start failed at line $1 (monitor on $ADDR:$PORT); logs in $DIR/log, their ends:" >&2
  local f
  for f in "$DIR"/log/*; do
    [ -s "$f" ] || continue
    echo "--- $f" >&2
    tail -n 5 "$f" >&2 || true
  done
  stop || true
}
trap 'failed $LINENO' ERR
ceph_() { timeout 60 ceph -c "$CONF" "$@"; }
# Starts a daemon in the foreground of a background job, so its PID is ours.
run() {
  local name=$1; shift
  "$@" -c "$CONF" -f >"$DIR/log/$name.out" 2>&1 &
  echo $! >>"$DIR/pids"
}

monmaptool --create --fsid "$FSID" --addv a "[v2:$ADDR:$PORT]" "$DIR/monmap" >/dev/null
# mkfs imports every key of the keyring (with its caps) into the monitor.
ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$KEYRING"
run mon.a ceph-mon -i a

OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
ceph_ osd new "$OSD_UUID" 0 >/dev/null
ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$OSD_UUID" >"$DIR/log/osd.0.mkfs" 2>&1
run osd.0 ceph-osd -i 0
if [ "${CEPH_MGR:-0}" = 1 ]; then
  run mgr.x ceph-mgr -i x
fi
run mds.a ceph-mds -i a

ceph_ osd pool create cephfs_metadata 8 8 >/dev/null 2>&1
ceph_ osd pool create cephfs_data 8 8 >/dev/null 2>&1
ceph_ fs new cephfs cephfs_metadata cephfs_data >/dev/null 2>&1

# Usable: an MDS is active for the fs (so the metadata pool's PGs are
# active: it wrote there) and an object can be written to the data pool
# (rados blocks until its PG is active). Not `ceph pg stat`: PG states come
# from the manager, which may not run.
for i in $(seq 600); do
  ceph_ fs dump 2>/dev/null | grep -q 'up:active' && break
  [ "$i" = 600 ] && { echo "ceph-cluster: no active MDS after 120 s" >&2; false; }
  sleep 0.2
done
echo ok | timeout 120 rados -c "$CONF" -p cephfs_data put ceph-cluster-probe -
timeout 60 rados -c "$CONF" -p cephfs_data rm ceph-cluster-probe
trap - ERR
t1=$(date +%s%N)
echo "# ceph cluster up in $(( (t1 - t0) / 1000000 )) ms: fsid $FSID, mon v2:$ADDR:$PORT, fs cephfs" >&2
echo "CEPH_CONF=$CONF"
