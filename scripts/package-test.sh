#!/usr/bin/env bash
# The Debian package, tested: builds it (scripts/package.sh), checks the unit
# with systemd-analyze verify, then in a Debian 12 chroot: dpkg -i, the
# files are where they belong, the binary runs and serves the shipped
# configuration (tarn ls over NFS, tarn exports, tarn reload), dpkg --purge
# leaves nothing behind. (systemd cannot run in a chroot: the unit's
# sd_notify readiness is tested by crates/tarn/tests/service.rs.)
#
#   TARN_BIN=target/debug/tarn scripts/package-test.sh   # package that binary
#   TARN_CHROOT=/var/tmp/tarn-pkg-chroot/bookworm        # where the chroot is kept
#
# The chroot is made once with debootstrap (about a minute from a Debian
# mirror) and reused; the test purges what it installed. Needs root,
# debootstrap and dpkg-dev; skips with a message without them.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "package-test: SKIPPED: $*"; exit 0; }
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || skip "needs root (chroot, dpkg in the chroot)"
command -v debootstrap >/dev/null || skip "no debootstrap (apt-get install debootstrap)"
command -v dpkg-deb >/dev/null || skip "no dpkg-deb"
t0=$SECONDS
chroot_dir=${TARN_CHROOT:-/var/tmp/tarn-pkg-chroot/bookworm}
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    mountpoint -q "$chroot_dir/proc" && umount "$chroot_dir/proc" || true
    rm -rf "$work"
}
trap cleanup EXIT

deb=$(OUT_DIR=$work scripts/package.sh | tail -1)
echo "package-test: built $(basename "$deb") in $((SECONDS - t0)) s"

# The unit, as systemd reads it (the binary path pointed at the package's).
mkdir -p "$work/root" "$work/unit"
dpkg-deb -x "$deb" "$work/root"
sed "s|/usr/bin/tarn|$work/root/usr/bin/tarn|g" "$work/root/lib/systemd/system/tarn.service" > "$work/unit/tarn.service"
out=$(systemd-analyze verify --man=no "$work/unit/tarn.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify complains: $out"
echo "package-test: systemd-analyze verify tarn.service: clean"

if [ ! -x "$chroot_dir/usr/bin/dpkg" ]; then
    t=$SECONDS
    deps=$(dpkg-deb -f "$deb" Depends | sed 's/ *([^)]*)//g; s/ //g')
    rm -rf "$chroot_dir.tmp"
    mkdir -p "$(dirname "$chroot_dir")"
    debootstrap --variant=minbase --include="$deps" bookworm "$chroot_dir.tmp" http://deb.debian.org/debian \
        > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; skip "debootstrap failed (no mirror?)"; }
    mv "$chroot_dir.tmp" "$chroot_dir"
    echo "package-test: debootstrap'd Debian 12 in $((SECONDS - t)) s"
fi
in_chroot() { chroot "$chroot_dir" "$@"; }
mount -t proc proc "$chroot_dir/proc"
# A run that died half-way left the package in: start clean.
in_chroot dpkg --purge tarn >/dev/null 2>&1 || true

cp "$deb" "$chroot_dir/tmp/tarn.deb"
if ! in_chroot dpkg -i /tmp/tarn.deb > "$work/dpkg.log" 2>&1; then
    # A dependency the cached chroot lacks.
    in_chroot apt-get -y -q -f install > "$work/apt.log" 2>&1 || { cat "$work/dpkg.log" "$work/apt.log"; fail "dpkg -i"; }
fi
rm -f "$chroot_dir/tmp/tarn.deb"
for f in /usr/bin/tarn /etc/tarn/tarn.toml /lib/systemd/system/tarn.service \
         /usr/share/man/man1/tarn.1.gz /usr/share/man/man1/tarn-serve.1.gz \
         /usr/share/man/man1/tarn-import-exports.1.gz \
         /usr/share/bash-completion/completions/tarn /usr/share/zsh/vendor-completions/_tarn \
         /usr/share/fish/vendor_completions.d/tarn.fish /usr/share/doc/tarn/copyright; do
    [ -e "$chroot_dir$f" ] || fail "$f not installed"
done
[ "$(stat -c %a "$chroot_dir/var/lib/tarn")" = 700 ] || fail "/var/lib/tarn is not 0700"
in_chroot dpkg-query -W -f='${Conffiles}\n' tarn | grep '/etc/tarn/tarn.toml' >/dev/null || fail "tarn.toml is not a conffile"
echo "package-test: $(in_chroot tarn --version) runs in the chroot"
in_chroot tarn check-config /etc/tarn/tarn.toml > /dev/null || fail "the shipped tarn.toml does not check"
zcat "$chroot_dir/usr/share/man/man1/tarn-serve.1.gz" | grep 'exports(5) file' >/dev/null || fail "tarn-serve(1) lacks --exports"
echo "package-test: dpkg -i: files in place, tarn.toml a conffile"

# Serve the shipped configuration, on a free port instead of 2049.
port=$((20000 + RANDOM % 20000))
sed "s/127.0.0.1:2049/127.0.0.1:$port/" "$chroot_dir/etc/tarn/tarn.toml" > "$chroot_dir/tmp/tarn-test.toml"
echo hello > "$chroot_dir/var/lib/tarn/export/hello.txt"
chroot "$chroot_dir" /usr/bin/tarn serve --config /tmp/tarn-test.toml --state-dir /var/lib/tarn \
    > "$work/serve.out" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 100); do
    grep -q "tarn: exporting" "$work/serve.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; fail "tarn serve exited"; }
    sleep 0.1
done
in_chroot tarn ls "nfs://127.0.0.1:$port/" | grep -x 'hello.txt' >/dev/null || { cat "$work/serve.log"; fail "tarn ls over NFS"; }
[ "$(in_chroot tarn cat "nfs://127.0.0.1:$port/hello.txt")" = hello ] || fail "tarn cat over NFS"
in_chroot tarn exports --socket /var/lib/tarn/admin.sock | grep '127.0.0.1 .*rw' >/dev/null || fail "tarn exports"
in_chroot tarn reload --socket /var/lib/tarn/admin.sock | grep 'nothing changed' >/dev/null || fail "tarn reload"
grep -q $'\e' "$work/serve.log" && fail "escape codes in the log"
kill -TERM "$pid"
wait "$pid" || fail "tarn serve did not stop cleanly"
pid=
rm -f "$chroot_dir/tmp/tarn-test.toml"
echo "package-test: served the shipped config: tarn ls/cat over NFS, tarn exports, tarn reload"

# Reinstall (as an upgrade does) keeps an edited conffile; remove keeps the
# configuration and the state (the file-handle key), purge drops both.
cp "$deb" "$chroot_dir/tmp/tarn.deb"
echo "# edited by the operator" >> "$chroot_dir/etc/tarn/tarn.toml"
in_chroot dpkg -i /tmp/tarn.deb > /dev/null 2>&1 || fail "dpkg -i over the installed package"
rm -f "$chroot_dir/tmp/tarn.deb"
grep -qx "# edited by the operator" "$chroot_dir/etc/tarn/tarn.toml" || fail "the upgrade lost the edited tarn.toml"
in_chroot dpkg --remove tarn > /dev/null
[ ! -e "$chroot_dir/usr/bin/tarn" ] || fail "/usr/bin/tarn left after remove"
[ -f "$chroot_dir/etc/tarn/tarn.toml" ] && [ -f "$chroot_dir/var/lib/tarn/handle.key" ] \
    || fail "remove dropped the configuration or the state"
echo "package-test: reinstall keeps an edited tarn.toml; remove keeps config and state"
in_chroot dpkg --purge tarn > /dev/null
for f in /usr/bin/tarn /etc/tarn /var/lib/tarn /lib/systemd/system/tarn.service /usr/share/man/man1/tarn.1.gz; do
    [ ! -e "$chroot_dir$f" ] || fail "$f left after purge"
done
echo "package-test: dpkg --purge leaves nothing"
echo "package-test: 1 passed, 0 failed ($((SECONDS - t0)) s)"
