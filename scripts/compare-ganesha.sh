#!/bin/bash
# Side-by-side benchmark of Tarn against NFS-Ganesha (Debian's nfs-ganesha +
# nfs-ganesha-vfs) on loopback, same machine, same run (issue 7).
#
#   ./scripts/compare-ganesha.sh [--quick] [tarn bench options...]
#
# Installs Ganesha if missing, builds target/release/tarn if missing, then in a
# private network + mount namespace (its own lo with 127.0.0.2 added, which
# Ganesha needs to start; a private tmpfs on /run so its rpcbind socket is not
# the machine's) starts rpcbind and Ganesha (FSAL VFS on a temporary directory),
# runs `tarn bench --json` against it, stops it, starts `tarn serve` on the same
# kind of directory, runs the same bench, and prints one table
# (`tarn bench --compare`). Every process it started is stopped by PID on exit
# and the temporary directory removed. --quick: 0.5 s phases, small sizes (CI).
# Further options go to both `tarn bench` runs (e.g. --connections 4,
# --inflight 1,16,64, --ops getattr,read4k). RESULTS_DIR=DIR keeps the JSON.
# Then, unless KRB5P=0, krb5p rows: a throwaway MIT realm (scripts/kdc.sh)
# inside the namespaces, both servers accepting krb5p with the same keytab,
# and the read workloads (null, getattr, read4k, read1m at 1 and 16 in flight)
# as nobody@TARN.BENCH (the local user nobody on both servers; reads only).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TARN_BIN:-$PWD/target/release/tarn}
[ "$(id -u)" = 0 ] || exec sudo -E "$0" "$@"

if [ "${1:-}" != "--inner" ]; then
  quick=0
  if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
  need=()
  pkgs=(nfs-ganesha nfs-ganesha-vfs rpcbind iproute2 util-linux e2fsprogs)
  [ "${KRB5P:-1}" = 0 ] || pkgs+=(krb5-kdc krb5-admin-server krb5-user)
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "compare-ganesha: apt-get install ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}"
  fi
  [ -x "$BIN" ] || cargo build --release -q -p tarn
  # A PID namespace too: if this script is killed, everything it started dies with it.
  exec unshare --net --mount --pid --mount-proc --fork --kill-child "$0" --inner "$quick" "$@"
fi

# ---- inside the private namespaces ----
shift
quick=$1; shift
# Unless told otherwise: every NFSv3 workload, then NFSv4.1's.
ops=()
case " $* " in *" --ops "*|*" --ops="*) ;; *)
  ops=(--ops null,getattr,lookup,access,readdirplus,create,read4k,write4k,read1m,write1m,v4getattr,v4open-read-close) ;;
esac
if [ "$quick" = 1 ]; then
  sizes=(--seconds 0.5 --file-size 64M --dir-entries 2000 --files 300)
else
  sizes=(--seconds "${SECONDS_PER_PHASE:-3}")
fi

ip link set lo up
ip addr add 127.0.0.2/32 dev lo
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/rpcbind

WORK=$(mktemp -d /var/tmp/tarn-vs-ganesha.XXXXXX)
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
  if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR"; cp "$WORK"/*.json "$WORK"/ganesha.log "$RESULTS_DIR"/ 2>/dev/null || true; fi
  for m in "$WORK"/*/export; do mountpoint -q "$m" && umount "$m"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_port() { # wait_port PORT PID LOG
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "compare-ganesha: server exited; log:" >&2; tail -20 "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "compare-ganesha: port $1 never opened; log:" >&2; tail -20 "$3" >&2; exit 1
}

rpcbind -w -f & PIDS+=($!)
for _ in $(seq 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done

# ---- a Kerberos realm for the krb5p rows ----
krb5p=${KRB5P:-1}
if [ "$krb5p" = 1 ]; then
  # shellcheck source=scripts/kdc.sh
  . scripts/kdc.sh
  K=$WORK/kdc
  mkdir -p "$K"
  if kdc_start "$K" TARN.BENCH 127.0.0.1 8888 && PIDS+=("$KDC_PID") &&
     kdc_addprinc TARN.BENCH nfs/localhost && kdc_ktadd TARN.BENCH "$K/nfs.keytab" nfs/localhost &&
     kdc_addprinc TARN.BENCH nobody benchpw && kdc_kinit TARN.BENCH nobody benchpw "$K/ccache"; then
    export KRB5_CONFIG=$K/krb5.conf KRB5CCNAME=FILE:$K/ccache
  else
    [ -z "$KDC_PID" ] || PIDS+=("$KDC_PID")
    echo "compare-ganesha: no Kerberos realm, so no krb5p rows" >&2
    krb5p=0
  fi
fi
krb5p_run() { # krb5p_run LABEL BENCH-ARGS...: appends krb5p rows to LABEL.json
  local label=$1 n; shift
  [ "$krb5p" = 1 ] || return 0
  # One bench per level, each bounded: a server that drops GSS calls leaves
  # the bench waiting (it does not retransmit), and the rows of the other
  # level should survive that. (Ganesha 4.3 did, at 16 in flight.)
  for n in 1 16; do
    timeout -k 5 "$((quick ? 40 : 120))" \
      "$BIN" bench "$@" --label "$label" --json --keep --sec krb5p --gss-target nfs@localhost \
      --ops null,getattr,read4k,read1m --inflight $n "${sizes[@]}" >> "$WORK/$label.json" ||
      echo "compare-ganesha: krb5p at $n in flight against $label did not finish (rows that did are kept)" >&2
  done
}

# ---- NFS-Ganesha ----
GP=2049 GMP=20048
# Each server's export is a fresh ext4 filesystem of its own (a sparse image
# on a loop device), so neither inherits the other's state: ext4 allocates
# inodes slowly next to many recently deleted ones, which made whichever
# server ran second create files at half speed.
fresh_fs() { # fresh_fs DIR
  mkdir -p "$1"
  if truncate -s "${IMAGE_SIZE:-8G}" "$1.img" && mkfs.ext4 -q -F "$1.img" && mount -o loop "$1.img" "$1"; then
    return 0
  fi
  echo "compare-ganesha: no loop device; $1 stays a plain directory" >&2
}
fresh_fs "$WORK/ganesha/export"
mkdir -p "$WORK/ganesha/recovery"
chmod 0777 "$WORK/ganesha/export"
cat > "$WORK/ganesha/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    NFS_Port = $GP;
    MNT_Port = $GMP;
    Protocols = 3, 4;
    Mount_Path_Pseudo = true;
    Enable_NLM = false;
    Enable_RQUOTA = false;
}
NFSV4 {
    Graceless = true;
    RecoveryBackend = fs;
    RecoveryRoot = $WORK/ganesha/recovery;
}
EXPORT {
    Export_Id = 1;
    Path = $WORK/ganesha/export;
    Pseudo = /bench;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3, 4;
    Transports = TCP;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
if [ "$krb5p" = 1 ]; then
  sed -i 's/SecType = sys;/SecType = sys, krb5p;/' "$WORK/ganesha/ganesha.conf"
  cat >> "$WORK/ganesha/ganesha.conf" <<EOF
NFS_KRB5 {
    PrincipalName = "nfs@localhost";
    KeytabPath = $K/nfs.keytab;
    Active_krb5 = true;
}
EOF
fi
ganesha.nfsd -F -L "$WORK/ganesha.log" -f "$WORK/ganesha/ganesha.conf" -p "$WORK/ganesha/ganesha.pid" & GPID=$!
PIDS+=($GPID)
wait_port $GP $GPID "$WORK/ganesha.log"
wait_port $GMP $GPID "$WORK/ganesha.log"
echo "compare-ganesha: $(ganesha.nfsd -v 2>&1 | head -1 | tr -s ' ') pid $GPID on 127.0.0.1:$GP (mount $GMP)" >&2
"$BIN" bench --server 127.0.0.1:$GP --mount-server 127.0.0.1:$GMP --export /bench \
  --server-pid $GPID --label ganesha --json --keep "${sizes[@]}" "${ops[@]}" "$@" > "$WORK/ganesha.json"
krb5p_run ganesha --server 127.0.0.1:$GP --mount-server 127.0.0.1:$GMP --export /bench --server-pid $GPID
stop $GPID

# ---- Tarn ----
TP=2050
fresh_fs "$WORK/tarn/export"
mkdir -p "$WORK/tarn/state"
chmod 0777 "$WORK/tarn/export"
tarn_sec=()
[ "$krb5p" = 1 ] && tarn_sec=(--sec sys,krb5p --keytab "$K/nfs.keytab")
"$BIN" serve "$WORK/tarn/export" --listen 127.0.0.1:$TP --state-dir "$WORK/tarn/state" --log-level warn "${tarn_sec[@]}" \
  > "$WORK/tarn.out" 2> "$WORK/tarn.log" & TPID=$!
PIDS+=($TPID)
wait_port $TP $TPID "$WORK/tarn.log"
echo "compare-ganesha: tarn pid $TPID on 127.0.0.1:$TP" >&2
"$BIN" bench --server 127.0.0.1:$TP --server-pid $TPID --label tarn --json --keep "${sizes[@]}" "${ops[@]}" "$@" > "$WORK/tarn.json"
krb5p_run tarn --server 127.0.0.1:$TP --server-pid $TPID
stop $TPID

echo
echo "Tarn vs NFS-Ganesha: NFSv3 (v4* rows: NFSv4.1) over loopback TCP, $(nproc) CPUs, tarn bench ${sizes[*]} $*"
"$BIN" bench --compare tarn="$WORK/tarn.json" --compare ganesha="$WORK/ganesha.json"
