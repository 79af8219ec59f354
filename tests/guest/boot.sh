#!/bin/bash
# tests/guest/boot.sh GUEST_SCRIPT [EXTRA_FILE...]
#   Boots the lab guest (built by build.sh), runs GUEST_SCRIPT inside it as root (bash), prints
#   the script's combined stdout/stderr and exits with the script's exit code (124: timeout,
#   99: no result from the guest).  EXTRA_FILEs are copied next to it; in the guest everything is
#   under /share (virtio-9p) and whatever the script writes there comes back in $RUN_DIR/share.
# Env knobs:
#   MEM=2048 (MiB)  CPUS=2  ACCEL=tcg|kvm (default: kvm only with real vmx/svm and no kvm_pvm)
#   TIMEOUT=900 (s, wall clock for the whole VM)  APPEND="extra kernel args"
#   NETNS=<name>    use this existing namespace (caller owns it); default: create tarnlab-$$ and
#                   delete it on exit.  TAP=tap0
#   TARN_GUEST_DIR=/var/tmp/tarn-guest   RUN_DIR=<dir> (default $TARN_GUEST_DIR/runs/<stamp>-$$)
#   GUEST_DIST=bookworm|trixie  which guest (trixie: the Debian 13 one in $TARN_GUEST_DIR/trixie)
# Outputs: $RUN_DIR/{serial.log,qemu.out,qemu.cmd,timing,share/out.log,share/rc,share/boot_to_cmd_s}
# The VM, its timeout wrapper and (if created here) the namespace are always torn down on exit,
# including on errors, timeouts and SIGINT/SIGTERM.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=${TARN_GUEST_DIR:-${LAB:-/var/tmp/tarn-guest}}
RUNS=$LAB/runs
case ${GUEST_DIST:-bookworm} in
  bookworm) ;; trixie) LAB=$LAB/trixie;; trixie-bpo) LAB=$LAB/trixie-bpo;;
  *) echo "boot.sh: GUEST_DIST=$GUEST_DIST: only bookworm, trixie or trixie-bpo" >&2; exit 2;;
esac
MEM=${MEM:-2048}; CPUS=${CPUS:-2}; TIMEOUT=${TIMEOUT:-900}; APPEND=${APPEND:-}; TAP=${TAP:-tap0}
[ $# -ge 1 ] && [ -f "$1" ] || { sed -n '2,15p' "$0" >&2; exit 2; }
for f in vmlinuz initrd.lab root.img; do
  [ -e "$LAB/$f" ] || { echo "boot.sh: $LAB/$f missing - run build.sh first (GUEST_DIST=${GUEST_DIST:-bookworm})" >&2; exit 3; }
done

OWN_NS=0; TPID=; RUN=
cleanup() {
  local qp
  qp=$(cat "$RUN/qemu.pid" 2>/dev/null)
  for p in $qp $TPID; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null
      for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null
    fi
  done
  [ -n "$TPID" ] && wait "$TPID" 2>/dev/null
  if [ "$OWN_NS" = 1 ]; then "$HERE/net.sh" down "$NETNS"; fi
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP

if [ -z "${NETNS:-}" ]; then NETNS=tarnlab-$$; OWN_NS=1; fi
"$HERE/net.sh" up "$NETNS" || { echo "boot.sh: cannot set up netns $NETNS" >&2; exit 3; }

RUN=${RUN_DIR:-$RUNS/$(date +%Y%m%d-%H%M%S)-$$}
rm -rf "$RUN/share"; mkdir -p "$RUN/share" "$LAB/tmp"
cp "$1" "$RUN/share/cmd.sh"; shift
for f in "$@"; do cp -r "$f" "$RUN/share/"; done
chmod -R a+rwX "$RUN/share"

if [ -z "${ACCEL:-}" ]; then
  # KVM only with real VT-x/AMD-V.  On these machines /dev/kvm is a nested PVM hypervisor
  # (kvm_pvm module, no vmx/svm flag): a stock kernel runs far slower there than under TCG.
  ACCEL=tcg
  if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then ACCEL=kvm; fi
fi
if [ "$ACCEL" = kvm ]; then ACC=(-enable-kvm -cpu host,-arch-capabilities)
else ACC=(-accel tcg,thread=multi -cpu max); fi
CMD=(qemu-system-x86_64 "${ACC[@]}" -smp "$CPUS" -m "$MEM" -nographic -nodefaults -no-reboot
  -kernel "$LAB/vmlinuz" -initrd "$LAB/initrd.lab"
  -append "console=ttyS0 quiet loglevel=4 panic=-1 net.ifnames=0 tsc=reliable $APPEND"
  -drive "file=$LAB/root.img,if=virtio,format=raw,snapshot=on,cache=unsafe"
  -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" -device virtio-net-pci,netdev=n0,romfile=
  -virtfs "local,path=$RUN/share,mount_tag=labshare,security_model=none,id=fs0"
  -serial "file:$RUN/serial.log" -monitor none -pidfile "$RUN/qemu.pid")
echo "${CMD[*]}" > "$RUN/qemu.cmd"
rm -f "$RUN/qemu.pid"
T0=$(date +%s.%N)
# snapshot=on puts its overlay in TMPDIR: keep it off the (small) /tmp
TMPDIR=$LAB/tmp timeout -k 5 "$TIMEOUT" ip netns exec "$NETNS" "${CMD[@]}" < /dev/null > "$RUN/qemu.out" 2>&1 &
TPID=$!
wait "$TPID"; QRC=$?
TPID=
T1=$(date +%s.%N)
RC=$(cat "$RUN/share/rc" 2>/dev/null || echo 99)
[ "$QRC" = 124 ] && [ ! -s "$RUN/share/rc" ] && RC=124
B2C=$(cat "$RUN/share/boot_to_cmd_s" 2>/dev/null || echo NA)
printf 'accel=%s wall_s=%.1f boot_to_cmd_s=%s qemu_rc=%s cmd_rc=%s\n' \
  "$ACCEL" "$(echo "$T1 - $T0" | bc)" "$B2C" "$QRC" "$RC" | tee "$RUN/timing" >&2
cat "$RUN/share/out.log" 2>/dev/null
if [ "$RC" = 99 ] || [ "$RC" = 124 ]; then
  [ "$RC" = 124 ] && echo "boot.sh: TIMEOUT after ${TIMEOUT}s" >&2
  echo "boot.sh: no result from guest; last lines of $RUN/serial.log:" >&2
  tail -20 "$RUN/serial.log" >&2; cat "$RUN/qemu.out" >&2
fi
echo "boot.sh: run dir $RUN" >&2
# keep the 20 newest run dirs
ls -1dt "$RUNS"/*/ 2>/dev/null | tail -n +21 | xargs -r rm -rf
exit "$RC"
