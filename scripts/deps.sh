#!/bin/bash
# Installs what Tarn's build and tests need on Debian 12: build tools, the
# Rust toolchain (rustup, if cargo is missing), libnfs-utils (a real NFS client
# for the end-to-end tests) and the guest lab's qemu/debootstrap tools.
set -euo pipefail
need=()
for p in build-essential pkg-config curl ca-certificates libnfs-utils qemu-system-x86 qemu-utils debootstrap \
         busybox-static cpio e2fsprogs bc xz-utils iproute2 procps rpcbind util-linux; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}"
fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
fi
