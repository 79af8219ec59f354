#!/bin/bash
# tests/guest/build.sh - build (once, cached) the Tarn guest lab: a minimal Debian 12 guest
# with the stock kernel, the kernel NFS client (nfs-common), knfsd (nfs-kernel-server),
# krb5-user and fio, booted by a tiny busybox initramfs into tests/guest/guest/lab-init.
# GUEST_DIST=trixie builds the second guest instead: Debian 13 with its stock 6.12 kernel, the
# same packages plus ktls-utils (tlshd, the kernel's TLS handshake agent for xprtsec=tls/mtls),
# in $TARN_GUEST_DIR/trixie (default GUEST_DIST=bookworm: $TARN_GUEST_DIR itself, as before).
# GUEST_DIST=trixie-bpo: the Debian 13 guest with the newest kernel, linux-image-amd64 from
# trixie-backports (7.x: directory delegations, OPEN_XOR_DELEGATION, delegated timestamps), in
# $TARN_GUEST_DIR/trixie-bpo.
#
# Everything lives outside the repo under $TARN_GUEST_DIR (default /var/tmp/tarn-guest):
#   cache/debs/        downloaded .debs (kept across rebuilds)
#   rootfs/            debootstrapped tree (+ .stamp = hash of suite/mirror/package list)
#   vmlinuz initrd.lab root.img kernel.version
#   recipe.sha256      hash of this script + guest/* ; image is rebuilt when it changes
#   build.log
# Re-running is cheap (~1 s) when nothing changed.  FORCE=1 rebuilds everything (debs stay cached).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=${TARN_GUEST_DIR:-${LAB:-/var/tmp/tarn-guest}}
GUEST_DIST=${GUEST_DIST:-bookworm}
case $GUEST_DIST in
  bookworm) SUITE=bookworm EXTRA_PKGS= ;;
  trixie)   SUITE=trixie EXTRA_PKGS=,ktls-utils LAB=$LAB/trixie ;;
  trixie-bpo) SUITE=trixie EXTRA_PKGS=,ktls-utils LAB=$LAB/trixie-bpo BPO_KERNEL=1 ;;
  *) echo "build.sh: GUEST_DIST=$GUEST_DIST: only bookworm, trixie or trixie-bpo" >&2; exit 2;;
esac
# the Debian mirror this machine's apt already uses
MIRROR=${MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
[ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
ROOTFS=$LAB/rootfs
IMG_SIZE=${IMG_SIZE:-1536M}
GUEST_USER=labuser GUEST_UID=1000
GUEST_PKGS=linux-image-amd64,nfs-common,nfs-kernel-server,krb5-user,fio,iproute2,procps,kmod,netbase,e2fsprogs,util-linux,diffutils,perl-base$EXTRA_PKGS
HOST_PKGS=(qemu-system-x86 qemu-utils debootstrap busybox-static cpio e2fsprogs bc xz-utils iproute2)

[ "$(id -u)" = 0 ] || { echo "build.sh: must run as root (debootstrap, chroot)" >&2; exit 2; }
mkdir -p "$LAB/cache/debs"
exec 9>"$LAB/.build.lock"; flock 9          # one build at a time
exec > >(tee -a "$LAB/build.log") 2>&1
T0=$(date +%s.%N)
ts() { printf '[build %6.1fs] %s\n' "$(echo "$(date +%s.%N) - $T0" | bc)" "$*"; }

# what the image depends on: this script and everything baked into the guest
RECIPE=$(cat "$HERE/build.sh" "$HERE"/guest/* | sha256sum | cut -d' ' -f1)
DEBOOT_STAMP=$(echo "$SUITE $MIRROR $GUEST_PKGS ${BPO_KERNEL:-}" | sha256sum | cut -d' ' -f1)

if [ "${FORCE:-0}" = 1 ]; then rm -rf "$ROOTFS" "$LAB/root.img" "$LAB/recipe.sha256"; fi

# --- 0. host tools -----------------------------------------------------------
need=()
for p in "${HOST_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  ts "installing host packages: ${need[*]}"
  inst() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}"; }
  inst || { apt-get -o DPkg::Lock::Timeout=900 update -q && inst; }
fi

# --- fast path ---------------------------------------------------------------
if [ -e "$LAB/root.img" ] && [ -e "$LAB/vmlinuz" ] && [ -e "$LAB/initrd.lab" ] && \
   [ "$(cat "$LAB/recipe.sha256" 2>/dev/null)" = "$RECIPE" ] && \
   [ "$(cat "$ROOTFS/.stamp" 2>/dev/null)" = "$DEBOOT_STAMP" ]; then
  ts "guest image up to date (recipe ${RECIPE:0:12}, kernel $(cat "$LAB/kernel.version"))"
  exit 0
fi
rm -f "$LAB/recipe.sha256"

# --- 1. debootstrap (only when suite/mirror/package list changed) -------------
if [ "$(cat "$ROOTFS/.stamp" 2>/dev/null)" != "$DEBOOT_STAMP" ]; then
  ts "debootstrap --variant=minbase $SUITE from $MIRROR (+ $GUEST_PKGS)"
  rm -rf "$ROOTFS"
  DEBIAN_FRONTEND=noninteractive debootstrap --variant=minbase --include="$GUEST_PKGS" \
      --cache-dir="$LAB/cache/debs" "$SUITE" "$ROOTFS" "$MIRROR" > "$LAB/debootstrap.log" 2>&1 \
    || { tail -30 "$LAB/debootstrap.log"; echo "build.sh: debootstrap failed (log: $LAB/debootstrap.log)"; exit 1; }
  if [ -n "${BPO_KERNEL:-}" ]; then
    # The newest kernel beside the stock one; the lab boots the highest version installed.
    ts "linux-image-amd64 from $SUITE-backports"
    echo "deb $MIRROR $SUITE-backports main" > "$ROOTFS/etc/apt/sources.list.d/backports.list"
    cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
    mount --bind "$LAB/cache/debs" "$ROOTFS/var/cache/apt/archives"
    bpo_ok=0
    { chroot "$ROOTFS" apt-get -q update && DEBIAN_FRONTEND=noninteractive chroot "$ROOTFS" \
        apt-get install -y -q --no-install-recommends -t "$SUITE-backports" linux-image-amd64; } \
      >> "$LAB/debootstrap.log" 2>&1 && bpo_ok=1
    umount "$ROOTFS/var/cache/apt/archives"
    [ $bpo_ok = 1 ] || { tail -30 "$LAB/debootstrap.log"; echo "build.sh: backports kernel failed (log: $LAB/debootstrap.log)"; exit 1; }
  fi
  echo "$DEBOOT_STAMP" > "$ROOTFS/.stamp"
  ts "debootstrap done ($(du -sh "$LAB/cache/debs" | cut -f1) of cached debs)"
fi
KVER=$(ls "$ROOTFS/lib/modules" | sort -V | tail -1)
echo "$KVER" > "$LAB/kernel.version"

# --- 2. guest customisation (idempotent) -------------------------------------
ts "customising rootfs (kernel $KVER)"
echo nfsguest > "$ROOTFS/etc/hostname"
cat > "$ROOTFS/etc/hosts" <<H
127.0.0.1 localhost
10.77.0.1 labhost
10.77.0.2 nfsguest
H
: > "$ROOTFS/etc/fstab"
chroot "$ROOTFS" getent passwd "$GUEST_USER" >/dev/null || \
  chroot "$ROOTFS" useradd -u "$GUEST_UID" -U -m -s /bin/bash "$GUEST_USER"
mkdir -p "$ROOTFS/share" "$ROOTFS/srv/export" "$ROOTFS/mnt/nfs" "$ROOTFS/var/lib/nfs/sm" \
         "$ROOTFS/var/lib/nfs/sm.bak" "$ROOTFS/var/lib/nfs/v4recovery"
# knfsd reference export: /srv/export (tmpfs, mounted by lab-knfsd-start), loopback + lab net
cat > "$ROOTFS/etc/exports" <<X
/srv/export 127.0.0.1(rw,no_root_squash,no_subtree_check,insecure,fsid=1) 10.77.0.0/24(rw,no_root_squash,no_subtree_check,insecure,fsid=1)
X
install -m 0755 "$HERE/guest/lab-init" "$ROOTFS/sbin/lab-init"
install -m 0755 "$HERE/guest/lab-knfsd-start" "$ROOTFS/usr/local/sbin/lab-knfsd-start"
rm -rf "$ROOTFS/var/cache/apt/archives/"*.deb "$ROOTFS/var/lib/apt/lists/"* 2>/dev/null || true
cp "$ROOTFS/boot/vmlinuz-$KVER" "$LAB/vmlinuz"

# --- 3. tiny initramfs: busybox + virtio/ext4 modules, switch_root to /sbin/lab-init
ts "building initrd.lab"
IR=$LAB/initramfs
rm -rf "$IR"; mkdir -p "$IR"/{bin,dev,proc,sys,newroot,lib/modules/$KVER}
cp /bin/busybox "$IR/bin/busybox"
for m in virtio_pci virtio_blk ext4; do
  chroot "$ROOTFS" modprobe -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' > "$IR/modlist.full"
: > "$IR/modlist"
while read -r ko; do
  b=$(basename "$ko"); dst="$IR/lib/modules/$KVER/${b%.xz}"
  case "$ko" in *.xz) xz -dc "$ROOTFS$ko" > "$dst";; *) cp "$ROOTFS$ko" "$dst";; esac
  echo "/lib/modules/$KVER/$(basename "$dst")" >> "$IR/modlist"
done < "$IR/modlist.full"
cat > "$IR/init" <<'I'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
while read -r ko; do insmod "$ko" 2>/dev/null; done < /modlist
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
mount -t ext4 -o rw,noatime /dev/vda /newroot || { echo "LAB: cannot mount /dev/vda"; echo o > /proc/sysrq-trigger; }
umount /proc /sys; mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/lab-init
I
chmod 755 "$IR/init"
(cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) > "$LAB/initrd.lab.tmp"
mv "$LAB/initrd.lab.tmp" "$LAB/initrd.lab"

# --- 4. ext4 root image (boot.sh opens it with snapshot=on, so it stays pristine)
ts "mkfs.ext4 -d rootfs root.img ($IMG_SIZE)"
rm -f "$LAB/root.img.tmp"
mkfs.ext4 -q -L labroot -d "$ROOTFS" "$LAB/root.img.tmp" "$IMG_SIZE"
mv "$LAB/root.img.tmp" "$LAB/root.img"
echo "$RECIPE" > "$LAB/recipe.sha256"
ts "done: kernel $KVER, root.img $(du -h "$LAB/root.img" | cut -f1) used, debs $(du -sh "$LAB/cache/debs" | cut -f1)"
