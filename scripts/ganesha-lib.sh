# shellcheck shell=bash
# Shared by scripts/ganesha-run.sh, scripts/compare-ganesha.sh and
# scripts/bench-cephfs.sh (sourced, not run): installing NFS-Ganesha (Debian
# 12's on the host, or a newer one in a cached Debian 13 chroot), the private
# namespaces it runs in, its configuration, and stopping what was started, by
# PID (scripts/bench-client.sh stops its own processes with its `stop` too).

# ganesha_install PACKAGE...: apt-get install what is missing of Ganesha and PACKAGE...
ganesha_install() {
  local need=() p
  for p in nfs-ganesha nfs-ganesha-vfs rpcbind iproute2 util-linux "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  [ ${#need[@]} = 0 ] && return 0
  echo "$(basename "$0"): apt-get install ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}"
}

# ganesha_netns: inside `unshare --net --mount --pid`: lo up with 127.0.0.2
# (Ganesha needs it to start), a private /run, and rpcbind on it. Sets up
# PIDS, stop and the EXIT trap (ganesha_cleanup, then the caller's
# ganesha_at_exit if defined).
ganesha_netns() {
  ip link set lo up
  ip addr add 127.0.0.2/32 dev lo
  mount --make-rprivate /
  mount -t tmpfs -o mode=0755 tmpfs /run
  mkdir -p /run/rpcbind
  PIDS=()
  trap ganesha_cleanup EXIT
  trap 'exit 130' INT TERM
  rpcbind -w -f & PIDS+=($!)
  for _ in $(seq 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done
}

stop() { # stop PID: TERM, then KILL after 10 s
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

ganesha_cleanup() { # every process started, newest first; then the caller's own cleanup
  local i
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do stop "${PIDS[$i]}"; done
  if declare -F ganesha_at_exit >/dev/null; then ganesha_at_exit; fi
}

wait_port() { # wait_port PORT PID LOG: until PORT accepts, or return 1 with LOG's tail if PID exits (or 20 s pass)
  local i
  for i in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "$(basename "$0"): server exited; log:" >&2; tail -30 "$3" >&2; return 1; }
    sleep 0.1
  done
  echo "$(basename "$0"): port $1 never opened; log:" >&2; tail -30 "$3" >&2; return 1
}

# ganesha_conf FILE PORT MOUNT_PORT EXPORT_DIR PSEUDO RECOVERY_DIR MINORS [FSAL]:
# NFSv3 and NFSv4 (minor versions MINORS, e.g. "0, 1, 2") on PORT, MOUNT on
# MOUNT_PORT (so clients need not ask rpcbind), sec=sys, no grace. FSAL is
# the export's FSAL block body (default "Name = VFS;"); blocks the FSAL needs
# at the top level (CEPH { ... }) the caller appends to FILE. For Ganesha 9
# (GANESHA_CHROOT set), Allow_Set_Io_Flusher_Fail too: it refuses to start
# without PR_SET_IO_FLUSHER otherwise, which needs CAP_SYS_RESOURCE, and
# root here may lack it (nothing here mounts Ganesha through the kernel, the
# case the flag is for). Ganesha 4.3 does not know the option.
ganesha_conf() {
  local core9=
  [ -z "${GANESHA_CHROOT:-}" ] || core9="Allow_Set_Io_Flusher_Fail = true;"
  cat > "$1" <<EOF
NFS_CORE_PARAM {
    $core9
    NFS_Port = $2;
    MNT_Port = $3;
    Protocols = 3, 4;
    Mount_Path_Pseudo = true;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}
NFSV4 {
    Graceless = true;
    minor_versions = $7;
    RecoveryBackend = fs;
    RecoveryRoot = $6;
}
EXPORT {
    Export_Id = 1;
    Path = $4;
    Pseudo = $5;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3, 4;
    Transports = TCP;
    FSAL { ${8:-Name = VFS;} }
}
LOG { Default_Log_Level = EVENT; }
EOF
}

# ganesha_start CONF LOG: starts ganesha.nfsd, sets GPID, adds it to PIDS, waits for
# PORT and MOUNT_PORT (globals GP, GMP); returns 1, LOG's tail printed, if they never open.
# With GANESHA_CHROOT set (ganesha_trixie, ganesha_trixie_mounts), the one in
# that chroot: CONF, LOG and the paths in CONF must be seen there too. chroot
# execs ganesha.nfsd, so GPID is Ganesha's own PID (for tarn bench --server-pid).
ganesha_start() {
  local in=()
  [ -z "${GANESHA_CHROOT:-}" ] || in=(chroot "$GANESHA_CHROOT")
  "${in[@]}" ganesha.nfsd -F -L "$2" -f "$1" -p "${1%.conf}.pid" & GPID=$!
  PIDS+=("$GPID")
  wait_port "$GP" "$GPID" "$2" || return 1
  wait_port "$GMP" "$GPID" "$2" || return 1
  echo "$(basename "$0"): $("${in[@]}" ganesha.nfsd -v 2>&1 | grep -m1 . | tr -s ' ') pid $GPID on 127.0.0.1:$GP (mount $GMP)" >&2
}

# ---- NFS-Ganesha from Debian 13's backports, in a chroot ----
# Debian 12 has Ganesha 4.3; trixie-backports has 9.x, with FSAL_CEPH
# (nfs-ganesha-ceph). The chroot is made once with debootstrap and kept in
# TARN_GANESHA_TRIXIE (default /var/tmp/tarn-ganesha-trixie); later calls
# only check it. Mirror: TARN_DEBIAN_MIRROR (default the Debian mirror the
# host's apt uses, deb.debian.org/debian).

# ganesha_trixie [PKG...]: makes the chroot if it is not there (root, and a
# mirror that serves trixie and trixie-backports, are needed then), installs
# PKG... into it if missing, and sets GANESHA_CHROOT to it. Returns non-zero,
# the reason on stderr, if it cannot; never leaves a half-made chroot where a
# later call would take it for a made one. Run it outside any private
# network namespace: it downloads.
ganesha_trixie() {
  local root=${TARN_GANESHA_TRIXIE:-/var/tmp/tarn-ganesha-trixie}
  local mirror=${TARN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local me lock need=() p t
  me=$(basename "$0")
  [ "$(id -u)" = 0 ] || { echo "$me: Ganesha 9 chroot: needs root" >&2; return 1; }
  mkdir -p "$(dirname "$root")"
  # Two scripts making it at once: the second waits for the first.
  exec {lock}>"$root.lock"
  flock "$lock"
  if [ ! -f "$root/.tarn-ganesha-ready" ]; then
    if ! command -v debootstrap >/dev/null; then
      echo "$me: apt-get install debootstrap" >&2
      { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends debootstrap; } >&2 ||
        { echo "$me: Ganesha 9 chroot: no debootstrap" >&2; exec {lock}>&-; return 1; }
    fi
    t=$SECONDS
    echo "$me: making the Debian 13 chroot with NFS-Ganesha from trixie-backports in $root (once; about half a minute from a nearby mirror)" >&2
    rm -rf "$root.tmp"
    if ! debootstrap --variant=minbase trixie "$root.tmp" "$mirror" >"$root.log" 2>&1; then
      tail -5 "$root.log" >&2
      echo "$me: Ganesha 9 chroot: debootstrap trixie from $mirror failed (log: $root.log)" >&2
      rm -rf "$root.tmp"; exec {lock}>&-; return 1
    fi
    echo "deb $mirror trixie-backports main" >"$root.tmp/etc/apt/sources.list.d/backports.list"
    # Nothing installed there may start a service.
    printf '#!/bin/sh\nexit 101\n' >"$root.tmp/usr/sbin/policy-rc.d"
    chmod 0755 "$root.tmp/usr/sbin/policy-rc.d"
    if ! _ganesha_trixie_apt "$root.tmp" nfs-ganesha nfs-ganesha-vfs nfs-ganesha-ceph >>"$root.log" 2>&1 ||
       [ ! -x "$root.tmp/usr/bin/ganesha.nfsd" ] ||
       [ -z "$(find "$root.tmp/usr/lib" -name libfsalceph.so -print -quit)" ]; then
      tail -5 "$root.log" >&2
      echo "$me: Ganesha 9 chroot: installing nfs-ganesha, nfs-ganesha-vfs, nfs-ganesha-ceph from trixie-backports failed (log: $root.log)" >&2
      rm -rf "$root.tmp"; exec {lock}>&-; return 1
    fi
    chroot "$root.tmp" apt-get clean
    chroot "$root.tmp" ganesha.nfsd -v 2>&1 | grep -m1 . >"$root.tmp/.tarn-ganesha-ready"
    rm -rf "$root"
    mv "$root.tmp" "$root"
    echo "$me: made $root in $((SECONDS - t)) s: $(cat "$root/.tarn-ganesha-ready")" >&2
  fi
  for p in "$@"; do
    chroot "$root" dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} != 0 ] && ! _ganesha_trixie_apt "$root" "${need[@]}" >>"$root.log" 2>&1; then
    tail -5 "$root.log" >&2
    echo "$me: Ganesha 9 chroot: installing ${need[*]} failed (log: $root.log)" >&2
    exec {lock}>&-; return 1
  fi
  exec {lock}>&-
  GANESHA_CHROOT=$root
}

# _ganesha_trixie_apt ROOT PKG...: apt-get install PKG... (trixie-backports
# preferred) in ROOT, with /proc mounted in a mount namespace of its own (so
# no mount outlives it).
_ganesha_trixie_apt() {
  # shellcheck disable=SC2016 # the script's own variables
  unshare --mount --fork /bin/sh -ec '
    root=$1; shift
    mount --make-rprivate /
    mount -t proc proc "$root/proc"
    chroot "$root" apt-get update -q
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends -t trixie-backports "$@"
  ' sh "$@"
}

# ganesha_trixie_mounts DIR...: inside the private namespaces (after
# ganesha_netns), what Ganesha in GANESHA_CHROOT needs: /proc (this PID
# namespace's), /dev, /sys, the private /run (rpcbind's socket), empty
# tmpfs on /tmp and /var/tmp, and each DIR at the same path inside. All
# of it goes away with the mount namespace; nothing is left in the chroot
# but the empty mount points of a DIR outside /tmp and /var/tmp.
ganesha_trixie_mounts() {
  local r=$GANESHA_CHROOT d
  mount -t proc proc "$r/proc"
  mount --rbind /dev "$r/dev"
  mount --rbind /sys "$r/sys"
  mount --bind /run "$r/run"
  mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
  mount -t tmpfs -o mode=1777 tmpfs "$r/var/tmp"
  for d in "$@"; do
    mkdir -p "$r$d"
    mount --bind "$d" "$r$d"
  done
}
