#!/bin/bash
# scripts/ktls-guest-bench.sh - kTLS offload against rustls, measured inside the Debian 13 guest of
# the guest lab (its 6.12 kernel has the tls module; the development host's kernel has none).
# Boots the guest once (tests/guest/boot.sh, GUEST_DIST=trixie) with the release tarn binary and a
# throwaway CA (tests/guest/tls.sh) in /share; inside, two servers at once, ktls=auto on
# 127.0.0.1:2049 and ktls=off on :2050 ([tls] ktls, export xprtsec none+tls), then
#   tarn bench --sec sys,tls against the off one (the plain-TCP baseline), and REPS times
#   --sec tls against auto, then off (alternating, so both see the same load): --ops read1m,read4k
#   --inflight 1,16, the server's CPU per MiB from /proc/PID/stat;
#   the kernel NFS client: tlshd + mount -o vers=4.2,xprtsec=tls on the auto server, 16 MiB
#   written, read back through a fresh mount and compared;
#   each server's tarn_tls_connections metric and kTLS log lines.
# Under TCG emulation absolute numbers mean little; the ratio kTLS/rustls in one run is the result.
# Env: TARN_BIN (default target/release/tarn), TARN_GUEST_DIR (default /var/tmp/tarn-guest-trixie),
#      SECONDS_PER_RUN (5), FILE_SIZE (64M), REPS (2), NOAESNI (unset), OUT (default: a new
#      /var/tmp/tarn-ktls-bench.XXXXXX).
# As root (network namespace, qemu). Prints the guest's output; results in $OUT/run/share.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${TARN_BIN:-target/release/tarn}")
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p tarn" >&2; exit 2; }
export TARN_GUEST_DIR=${TARN_GUEST_DIR:-/var/tmp/tarn-guest-trixie} GUEST_DIST=trixie
OUT=${OUT:-$(mktemp -d /var/tmp/tarn-ktls-bench.XXXXXX)}
mkdir -p "$OUT"
TARN_ADDR=127.0.0.1
# shellcheck source=../tests/guest/tls.sh
. tests/guest/tls.sh
tls_ca "$OUT" tls >/dev/null || exit 1
cp "$OUT/tls/server.pem" "$OUT/tls/server.key" "$OUT/tls/lab-tls/"
{
  echo "SEC=${SECONDS_PER_RUN:-5} SIZE=${FILE_SIZE:-64M} REPS=${REPS:-2} NOAESNI=${NOAESNI:-}"
  cat <<'GUEST'
# (in the guest, as root)
set -u
L=/share/lab-tls
install -m 0755 /share/tarn /usr/local/bin/tarn
modprobe tls; echo "guest kernel $(uname -r), tls module: $(lsmod | awk '$1=="tls"{print "loaded"}')"
# The lab guest has no udev, which on a normal system loads the CPU's crypto modules at boot: without
# them the kernel's gcm(aes) is the generic C composition (ghash-generic), far slower than rustls's.
# NOAESNI=1 leaves them out, to see that.
[ -n "${NOAESNI:-}" ] || modprobe -a aesni_intel ghash_clmulni_intel
echo "guest CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x 'aes\|pclmulqdq\|avx\|avx2\|vaes\|vpclmulqdq\|movbe' | tr '\n' ' ')"
gcm() { echo "kernel gcm(aes) drivers $1: $(awk '/^name/{n=$3} /^driver/{d=$3} /^priority/{if (n=="gcm(aes)") print d"("$3")"}' /proc/crypto | sort -u | tr '\n' ' ')"; }
gcm "at start"
declare -A PID PORT=([auto]=2049 [off]=2050) MPORT=([auto]=9109 [off]=9110)
serve() {  # MODE: both run at once, so their runs alternate under the same load
  mkdir -p /srv/$1 /var/lib/tarn-$1; chmod 0777 /srv/$1
  cat > /tmp/tarn-$1.toml <<EOF
listen = "127.0.0.1:${PORT[$1]}"
[tls]
cert = "$L/server.pem"
key = "$L/server.key"
ktls = "$1"
[[export]]
path = "/srv/$1"
pseudo = "/"
clients = ["127.0.0.1"]
squash = "none"
xprtsec = ["none", "tls"]
EOF
  tarn serve --config /tmp/tarn-$1.toml --state-dir /var/lib/tarn-$1 --metrics 127.0.0.1:${MPORT[$1]} \
    --log-level info > /share/serve-$1.out 2> /share/serve-$1.log &
  PID[$1]=$!
  for _ in $(seq 200); do grep -q "tarn: exporting" /share/serve-$1.out 2>/dev/null && break; sleep 0.1; done
  grep -h "RPC-with-TLS enabled" /share/serve-$1.log /share/serve-$1.out | cut -c29- | sed 's/^/  server: /'
}
metric() {  # MODE
  exec 3<>/dev/tcp/127.0.0.1/${MPORT[$1]}
  printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
  grep '^tarn_tls_connections_total' <&3 | sed "s/^/  $1 metric: /"
  exec 3<&-
}
bench() {  # MODE SEC
  tarn bench --server 127.0.0.1:${PORT[$1]} --server-pid ${PID[$1]} --sec $2 --tls-ca $L/ca.pem \
    --ops read1m,read4k --inflight 1,16 --seconds $SEC --file-size $SIZE --keep 2>&1 \
    | grep -v '^tarn bench: \|^op ' | sed "s/^/$1 /"
}
rc=0
serve auto; serve off
echo "mode op sec inflight ops/s MB/s p50 p99 cpu-us/op note"
bench off sys,tls | tee -a /share/bench.out
for r in $(seq $REPS); do
  bench auto tls | tee -a /share/bench.out
  bench off tls | tee -a /share/bench.out
done
echo "--- kernel NFS client, xprtsec=tls, against the ktls=auto server"
. /share/tls-guest.sh
if tls_guest_up 127.0.0.1; then
  mkdir -p /mnt/t
  head -c 16M /dev/urandom > /tmp/data
  if mount -t nfs -o vers=4.2,xprtsec=tls 127.0.0.1:/ /mnt/t; then
    grep ' /mnt/t ' /proc/mounts
    cp /tmp/data /mnt/t/data && sync && umount /mnt/t
    if mount -t nfs -o vers=4.2,xprtsec=tls 127.0.0.1:/ /mnt/t && cmp /tmp/data /mnt/t/data; then
      echo "STEP kernel-client-ktls PASS"
    else echo "STEP kernel-client-ktls FAIL (read back)"; rc=1; fi
    umount /mnt/t
  else echo "STEP kernel-client-ktls FAIL (mount)"; rc=1; fi
  tls_guest_down
else echo "STEP kernel-client-ktls FAIL (tlshd)"; rc=1; fi
gcm "after the runs"
for m in auto off; do
  metric $m
  echo "  $m handshakes: $(grep -c "TLS handshake done" /share/serve-$m.log)"
  grep -h "kTLS" /share/serve-$m.log | grep -v "RPC-with-TLS enabled" | cut -c29- | sort | uniq -c | head -20 | sed "s/^/  $m log: /"
  kill -TERM ${PID[$m]}; wait ${PID[$m]}
done
exit $rc
GUEST
} > "$OUT/cmd.sh"
MEM=${MEM:-2048} TIMEOUT=${TIMEOUT:-1500} RUN_DIR=$OUT/run \
  bash tests/guest/boot.sh "$OUT/cmd.sh" "$BIN" "$OUT/tls/lab-tls" tests/guest/tls-guest.sh
rc=$?
echo "results: $OUT/run/share (bench.out, serve-*.log)"
exit $rc
