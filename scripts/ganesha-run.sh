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
# "0, 1") sets the NFSv4 minor versions served (default "0, 1, 2").
set -euo pipefail
# shellcheck source=scripts/ganesha-lib.sh
. "$(dirname "$0")/ganesha-lib.sh"

if [ "${1:-}" != "--inner" ]; then
  [ "$(id -u)" = 0 ] || { echo "ganesha-run: run as root" >&2; exit 1; }
  ganesha_install
  exec unshare --net --mount --pid --mount-proc --fork --kill-child "$0" --inner "$@"
fi
shift

# /var/tmp: a disk filesystem with kernel file handles, which FSAL VFS needs.
WORK=$(mktemp -d /var/tmp/tarn-client-ganesha.XXXXXX)
chmod 0755 "$WORK"
ganesha_at_exit() {
  if [ -n "${TARN_GANESHA_LOG:-}" ]; then cp "$WORK/ganesha.log" "$TARN_GANESHA_LOG" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
ganesha_netns

GP=2049 GMP=20048
mkdir -p "$WORK/export" "$WORK/recovery"
chmod 0777 "$WORK/export"
# 4.0 for libnfs (scripts/bench-client.sh), which speaks no 4.1.
ganesha_conf "$WORK/ganesha.conf" $GP $GMP "$WORK/export" /tarn "$WORK/recovery" "${TARN_GANESHA_MINORS:-0, 1, 2}"
ganesha_start "$WORK/ganesha.conf" "$WORK/ganesha.log"

st=0
TARN_GANESHA_ADDR=127.0.0.1:$GP TARN_GANESHA_MOUNT_PORT=$GMP TARN_GANESHA_EXPORT=/tarn TARN_GANESHA_DIR=$WORK/export "$@" & CPID=$!
PIDS+=($CPID)
wait $CPID || st=$?
if [ $st != 0 ]; then echo "ganesha-run: exit $st; end of ganesha's log:" >&2; tail -30 "$WORK/ganesha.log" >&2; fi
exit $st
