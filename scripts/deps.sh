#!/bin/bash
# Installs what Tarn needs on Debian 12: build tools, MIT Kerberos headers
# and libclang (libgssapi's bindings are generated at build time), and the
# Rust toolchain (rustup, if cargo is missing). With --test, also what the
# tests use: libnfs-utils (a real NFS client), NFS-Ganesha (a server nobody
# here wrote: scripts/ganesha-run.sh), rpcbind, an MIT KDC and its
# tools (the RPCSEC_GSS tests start a realm on loopback), python3-ply and python3-gssapi (pynfs, its 4.0 krb5i pass), fuse3
# (fusermount3, for `tarn mount` and its tests), fio (verified I/O through
# the mount, and its 4 KiB random-read bench), etcd-server (the cluster tests' recovery store) with etcdctl (etcd-client) and
# arping (iputils-arping: the failover test moves the service address with a gratuitous ARP), tcpdump (the guest lab's TLS cases
# capture the tap device to show no plaintext passes), openssl (the TLS tests' throwaway CAs), and the guest
# lab's qemu/debootstrap tools (debootstrap, systemd-analyze and dpkg-dev also
# serve scripts/package-test.sh), and cargo-fuzz from crates.io (the fuzz
# targets in fuzz/ build with it on the stable toolchain), and fsx (fsx-rs,
# the file-system exerciser, from crates.io: tests/fuse_integrity.rs runs
# it through `tarn mount`) and pjdfstest (the POSIX file-system suite's Rust
# rewrite, from crates.io: tests/fuse_posix.rs).
# With --ceph (and with --test): a one-host Ceph cluster's daemons and
# libcephfs2 (the CephFS backend's tests start one on loopback with
# scripts/ceph-cluster.sh; about 54 MB to download, 30 s to install).
set -euo pipefail
pkgs=(build-essential pkg-config curl ca-certificates libkrb5-dev libclang-dev)
if [ "${1:-}" = --test ] || [ "${1:-}" = --ceph ]; then
  pkgs+=(ceph-mon ceph-osd ceph-mds ceph-common libcephfs2)
fi
if [ "${1:-}" = --test ]; then
  pkgs+=(krb5-kdc krb5-admin-server krb5-user libnfs-utils rpcbind util-linux iproute2 procps qemu-system-x86 qemu-utils debootstrap
         systemd dpkg-dev
         busybox-static cpio e2fsprogs bc xz-utils python3 python3-ply python3-gssapi
         nfs-ganesha nfs-ganesha-vfs fuse3 fio tcpdump openssl etcd-server
         etcd-client iputils-arping)
fi
need=()
for p in "${pkgs[@]}"; do
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
if [ "${1:-}" = --test ] && ! [ -x "$HOME/.cargo/bin/cargo-fuzz" ] && ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "deps: cargo install cargo-fuzz"
  PATH="$HOME/.cargo/bin:$PATH" cargo install --locked --quiet cargo-fuzz
fi
FSX_VERSION=0.3.2
if [ "${1:-}" = --test ] && ! "$HOME/.cargo/bin/fsx" --version 2>/dev/null | grep -qx "fsx $FSX_VERSION"; then
  echo "deps: cargo install fsx $FSX_VERSION"
  PATH="$HOME/.cargo/bin:$PATH" cargo install --locked --quiet --version "$FSX_VERSION" fsx
fi
PJDFSTEST_VERSION=0.2.2
if [ "${1:-}" = --test ] && ! "$HOME/.cargo/bin/pjdfstest" --version 2>/dev/null | grep -qx "pjdfstest $PJDFSTEST_VERSION"; then
  echo "deps: cargo install pjdfstest $PJDFSTEST_VERSION"
  PATH="$HOME/.cargo/bin:$PATH" cargo install --locked --quiet --version "$PJDFSTEST_VERSION" pjdfstest
fi
