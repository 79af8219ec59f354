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
# shellcheck source=scripts/ganesha-lib.sh
. scripts/ganesha-lib.sh

if [ "${1:-}" != "--inner" ]; then
  quick=0
  if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
  pkgs=(e2fsprogs)
  [ "${KRB5P:-1}" = 0 ] || pkgs+=(krb5-kdc krb5-admin-server krb5-user)
  ganesha_install "${pkgs[@]}"
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

WORK=$(mktemp -d /var/tmp/tarn-vs-ganesha.XXXXXX)
chmod 0755 "$WORK"
ganesha_at_exit() {
  if [ -n "${RESULTS_DIR:-}" ]; then mkdir -p "$RESULTS_DIR"; cp "$WORK"/*.json "$WORK"/ganesha.log "$RESULTS_DIR"/ 2>/dev/null || true; fi
  for m in "$WORK"/*/export; do mountpoint -q "$m" && umount "$m"; done
  rm -rf "$WORK"
}
ganesha_netns

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
ganesha_conf "$WORK/ganesha/ganesha.conf" $GP $GMP "$WORK/ganesha/export" /bench "$WORK/ganesha/recovery" "0, 1, 2"
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
ganesha_start "$WORK/ganesha/ganesha.conf" "$WORK/ganesha.log"
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
