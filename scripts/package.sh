#!/usr/bin/env bash
# Builds the Debian package of Tarn: dist/tarn_VERSION_ARCH.deb.
#
#   scripts/package.sh                  # cargo build --release -p tarn, then package
#   TARN_BIN=path/to/tarn scripts/package.sh   # package an already built binary
#
# Plain dpkg-deb rather than cargo-deb: dpkg-deb is on every Debian system
# (nothing more to build or pin on CI), and the control file, maintainer
# scripts and conffiles are ordinary files in packaging/ that read as what
# they are. What it needs: dpkg-dev (dpkg-deb, dpkg-shlibdeps), gzip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${OUT_DIR:-$root/dist}
if [ -z "${TARN_BIN:-}" ]; then
    cargo build --release -p tarn
    TARN_BIN=${CARGO_TARGET_DIR:-$root/target}/release/tarn
fi
[ -x "$TARN_BIN" ] || { echo "package.sh: no binary at $TARN_BIN" >&2; exit 1; }
version=$("$TARN_BIN" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$work/tarn

install -D -m 0755 "$TARN_BIN" "$pkg/usr/bin/tarn"
# Debug info stays in the build; the package carries a stripped binary.
strip --strip-debug "$pkg/usr/bin/tarn" 2>/dev/null || true
install -D -m 0644 packaging/tarn.service "$pkg/lib/systemd/system/tarn.service"
install -D -m 0644 packaging/tarn.toml "$pkg/etc/tarn/tarn.toml"
install -d -m 0700 "$pkg/var/lib/tarn"
install -d -m 0755 "$pkg/var/lib/tarn/export"
install -D -m 0644 packaging/debian/copyright "$pkg/usr/share/doc/tarn/copyright"
install -D -m 0644 README.md "$pkg/usr/share/doc/tarn/README.md"
gzip -9n "$pkg/usr/share/doc/tarn/README.md"

# Man pages and completions from the CLI definitions.
"$TARN_BIN" generate-assets "$work/assets"
install -d "$pkg/usr/share/man/man1"
for m in "$work"/assets/man/*.1; do
    gzip -9n -c "$m" > "$pkg/usr/share/man/man1/$(basename "$m").gz"
done
install -D -m 0644 "$work/assets/completions/tarn" "$pkg/usr/share/bash-completion/completions/tarn"
install -D -m 0644 "$work/assets/completions/_tarn" "$pkg/usr/share/zsh/vendor-completions/_tarn"
install -D -m 0644 "$work/assets/completions/tarn.fish" "$pkg/usr/share/fish/vendor_completions.d/tarn.fish"

# Shared-library dependencies, as dpkg-shlibdeps works them out (it wants a
# debian/control beside it).
mkdir -p "$work/shlibs/debian"
printf 'Source: tarn\n\nPackage: tarn\nArchitecture: any\n' > "$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$pkg/usr/bin/tarn" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || depends="libc6"

install -d "$pkg/DEBIAN"
install -m 0644 packaging/debian/conffiles "$pkg/DEBIAN/conffiles"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$pkg/DEBIAN/"
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
cat > "$pkg/DEBIAN/control" <<CONTROL
Package: tarn
Version: $version-1
Architecture: $arch
Maintainer: Tarn maintainers <tarn@localhost>
Installed-Size: $size
Depends: $depends
Recommends: rpcbind
Suggests: krb5-user
Section: net
Priority: optional
Description: user-space NFS server (NFSv3, NFSv4.0, 4.1, 4.2) and tools
 Tarn serves directories over NFSv3 (with MOUNT, NLM and NSM) and
 NFSv4.0/4.1/4.2 from user space, with Kerberos (krb5, krb5i, krb5p),
 delegations and per-client export rules. It reads its own TOML
 configuration or /etc/exports. The package installs a hardened systemd
 unit (not enabled: systemctl enable --now tarn), man pages and shell
 completions; tarn stats, top, doctor, exports and reload talk to the
 running server.
CONTROL

mkdir -p "$out"
deb=$out/tarn_${version}-1_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
echo "$deb"
