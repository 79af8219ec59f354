# Shared by scripts/ganesha-run.sh and scripts/compare-ganesha.sh (sourced,
# not run): installing NFS-Ganesha, the private namespaces it runs in, its
# configuration, and stopping what was started, by PID (scripts/bench-client.sh
# stops its own processes with its `stop` too).

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

wait_port() { # wait_port PORT PID LOG: until PORT accepts, or fail with LOG's tail if PID exits
  local i
  for i in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "$(basename "$0"): server exited; log:" >&2; tail -30 "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "$(basename "$0"): port $1 never opened; log:" >&2; tail -30 "$3" >&2; exit 1
}

# ganesha_conf FILE PORT MOUNT_PORT EXPORT_DIR PSEUDO RECOVERY_DIR MINORS:
# NFSv3 and NFSv4 (minor versions MINORS, e.g. "0, 1, 2") on PORT, MOUNT on
# MOUNT_PORT (so clients need not ask rpcbind), FSAL VFS, sec=sys, no grace.
ganesha_conf() {
  cat > "$1" <<EOF
NFS_CORE_PARAM {
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
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
}

# ganesha_start CONF LOG: starts ganesha.nfsd, sets GPID, adds it to PIDS, waits for PORT (global GP)
ganesha_start() {
  ganesha.nfsd -F -L "$2" -f "$1" -p "${1%.conf}.pid" & GPID=$!
  PIDS+=($GPID)
  wait_port "$GP" "$GPID" "$2"
  wait_port "$GMP" "$GPID" "$2"
  echo "$(basename "$0"): $(ganesha.nfsd -v 2>&1 | head -1 | tr -s ' ') pid $GPID on 127.0.0.1:$GP (mount $GMP)" >&2
}
