#!/bin/bash
# Runs a command next to a private NFS-Ganesha (NFSv3 and NFSv4.0/4.1/4.2,
# FSAL VFS on a temporary directory), the way scripts/compare-ganesha.sh does:
#
#   scripts/ganesha-run.sh COMMAND [ARGS...]
#
# Used by the client's and the tools' tests against a server nobody here
# wrote (crates/client/tests/ganesha.rs, crates/tarn/tests/tools_ganesha.rs)
# and by scripts/bench-client.sh --ganesha.
#
# Run as root. Everything happens in a new network + mount + PID namespace:
# its own lo (with 127.0.0.2 added, which Ganesha needs to start), a private
# tmpfs on /run (so rpcbind's socket is not the machine's). COMMAND runs in
# there with TARN_GANESHA_ADDR (host:port of NFS), TARN_GANESHA_MOUNT_PORT
# (NFSv3's MOUNT, also registered with rpcbind), TARN_GANESHA_EXPORT (the
# export's pseudo path) and TARN_GANESHA_DIR (the exported directory) set;
# its exit status is ours. Every process started here is stopped by PID on
# exit, and the PID namespace takes anything left with it.
# TARN_GANESHA_LOG=FILE keeps Ganesha's log. TARN_GANESHA_MINORS="0" (or
# "0, 1, 2") sets the NFSv4 minor versions served (default "1, 2").
set -euo pipefail

if [ "${1:-}" != "--inner" ]; then
  [ "$(id -u)" = 0 ] || { echo "ganesha-run: run as root" >&2; exit 1; }
  need=()
  for p in nfs-ganesha nfs-ganesha-vfs rpcbind iproute2 util-linux; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "ganesha-run: apt-get install ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}"
  fi
  exec unshare --net --mount --pid --mount-proc --fork --kill-child "$0" --inner "$@"
fi
shift

ip link set lo up
ip addr add 127.0.0.2/32 dev lo
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/rpcbind

# /var/tmp: a disk filesystem with kernel file handles, which FSAL VFS needs.
WORK=$(mktemp -d /var/tmp/tarn-client-ganesha.XXXXXX)
chmod 0755 "$WORK"
PIDS=()
stop() { # stop PID: TERM, then KILL after 10 s
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local i
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do stop "${PIDS[$i]}"; done
  if [ -n "${TARN_GANESHA_LOG:-}" ]; then cp "$WORK/ganesha.log" "$TARN_GANESHA_LOG" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rpcbind -w -f & PIDS+=($!)
for _ in $(seq 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done

PORT=2049 MNT_PORT=20048
mkdir -p "$WORK/export" "$WORK/recovery"
chmod 0777 "$WORK/export"
cat > "$WORK/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = $PORT;
    # MOUNT (NFSv3) on a known port too, so clients need not ask rpcbind.
    MNT_Port = $MNT_PORT;
    Protocols = 3, 4;
    Mount_Path_Pseudo = true;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}
NFSV4 {
    Graceless = true;
    # 4.0 for libnfs (scripts/bench-client.sh), which speaks no 4.1;
    # TARN_GANESHA_MINORS="0" makes a 4.0-only server.
    minor_versions = ${TARN_GANESHA_MINORS:-0, 1, 2};
    RecoveryBackend = fs;
    RecoveryRoot = $WORK/recovery;
}
EXPORT {
    Export_Id = 1;
    Path = $WORK/export;
    Pseudo = /tarn;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3, 4;
    Transports = TCP;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
ganesha.nfsd -F -L "$WORK/ganesha.log" -f "$WORK/ganesha.conf" -p "$WORK/ganesha.pid" & GPID=$!
PIDS+=($GPID)
for i in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  kill -0 $GPID 2>/dev/null || { echo "ganesha-run: ganesha exited; log:" >&2; tail -30 "$WORK/ganesha.log" >&2; exit 1; }
  [ "$i" = 200 ] && { echo "ganesha-run: port $PORT never opened; log:" >&2; tail -30 "$WORK/ganesha.log" >&2; exit 1; }
  sleep 0.1
done
echo "ganesha-run: $(ganesha.nfsd -v 2>&1 | head -1 | tr -s ' ') pid $GPID on 127.0.0.1:$PORT" >&2

st=0
TARN_GANESHA_ADDR=127.0.0.1:$PORT TARN_GANESHA_MOUNT_PORT=$MNT_PORT TARN_GANESHA_EXPORT=/tarn TARN_GANESHA_DIR=$WORK/export "$@" & CPID=$!
PIDS+=($CPID)
wait $CPID || st=$?
if [ $st != 0 ]; then echo "ganesha-run: exit $st; end of ganesha's log:" >&2; tail -30 "$WORK/ganesha.log" >&2; fi
exit $st
