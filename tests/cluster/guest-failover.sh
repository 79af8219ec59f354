#!/bin/bash
# tests/cluster/guest-failover.sh SVC VERS (runs INSIDE the guest lab's VM, as root; guest.sh
# boots it). The Linux kernel client mounts the service address SVC and, through it:
#   - writes a file set with fsync (stable) and keeps writing through the failover (a workload
#     of numbered files, each written and fsynced);
#   - holds a whole-file fcntl write lock in a background process that wrote part 1 + fsync;
# then asks the host to fail head A over to B (/share/failover-request; the host kills A, moves
# the address and answers /share/killed at once, /share/failover-done later). After the kill
# the holder writes part 2 + fsync through the same descriptor: the time from seeing /share/killed
# to that fsync returning is the kernel client's first successful call after the failover.
# The locked file is fo-locked in the export's root (the host's probe client opens it there).
# Checks: the lock is still the holder's (another process cannot take it; the host checks
# another client cannot either), the workload completes, every checksum matches after a
# cache drop, the lock is free once released. Prints STEP lines and ends with
#   GUEST-FAILOVER vers=V: N passed, M failed
set -u
SVC=${1:?SVC}; VERS=${2:?VERS}
MNT=/mnt/nfs; W=$MNT/fo-guest; L=$MNT/fo-locked; S=/tmp/fo; export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C
PASSED=0 FAILED=0
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%d", (b - a) * 1000}'; }
ok() { echo "STEP $1 PASS"; PASSED=$((PASSED + 1)); }
bad() { echo "STEP $1 FAIL"; FAILED=$((FAILED + 1)); }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n"; fi; }
lock_try() {  # FILE: F_SETLK of a whole-file write lock from a new process; 0 if granted
  perl -MFcntl -e 'open(my $fh, "+<", $ARGV[0]) or die "open: $!\n";
    exit(fcntl($fh, F_SETLK, pack("s s x4 q q l x4", F_WRLCK, SEEK_SET, 0, 0, 0)) ? 0 : 1)' "$1"
}
must_fail() { ! "$@"; }
finish() {
  echo "GUEST-FAILOVER vers=$VERS: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]; exit $?
}

mkdir -p "$MNT" "$S"
case $VERS in
  3) OPTS="vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp" ;;
  *) OPTS="vers=$VERS,proto=tcp,port=2049" ;;
esac
if mount -t nfs -o "$OPTS" "$SVC:/" "$MNT"; then ok mount; else bad mount; finish; fi
echo "  $(awk -v m="$MNT" '$2==m{print $1" "$3" "$4}' /proc/mounts)"
rm -rf "$W"; mkdir -p "$W"

# Part 1 of the locked file and the stable file set, written and fsynced before the kill.
head -c 3000000 /dev/urandom >"$S/p1"; head -c 2000000 /dev/urandom >"$S/p2"
cat "$S/p1" "$S/p2" | sha256sum | cut -d' ' -f1 >"$S/locked.sum"
for i in $(seq 8); do head -c 1048576 /dev/urandom >"$S/stable$i"; done
for i in $(seq 8); do dd if="$S/stable$i" of="$W/stable$i" bs=1M conv=fsync status=none; done
(cd "$S" && sha256sum stable* >"$S/stable.sum")
rm -f "$L"; : >"$L"
perl /share/lock-holder.pl "$L" "$S/p1" "$S/p2" "$S/" 3000 0.05 "after the failover" 2>"$S/holder.err" &
HP=$!
for _ in $(seq 600); do [ -e "$S/held" ] && break; sleep 0.1; done
check "holder has the lock, part 1 fsynced" test -e "$S/held"
check "another process cannot take the lock" must_fail lock_try "$L"
[ "$FAILED" = 0 ] || finish

# The workload that runs through the failover: numbered 256 KiB files, each fsynced.
head -c 262144 /dev/urandom >"$S/wl"
( for i in $(seq 40); do dd if="$S/wl" of="$W/wl$i" bs=256k conv=fsync status=none || exit 1
    sleep 0.2; done; touch "$S/wl.done" ) 2>"$S/wl.err" &
WP=$!

echo "$(now)" >/share/failover-request
for _ in $(seq 1200); do [ -e /share/killed ] && break; sleep 0.02; done
T_KILLED=$(now)
check "host killed head a" test -e /share/killed
touch "$S/go"
for _ in $(seq 6000); do [ -e "$S/wrote" ] && break; kill -0 $HP 2>/dev/null || break; sleep 0.02; done
T_WROTE=$(now)
check "holder's write + fsync after the failover returned" test -e "$S/wrote"
echo "FIRST-OK-MS $(ms "$T_KILLED" "$T_WROTE")"
echo "  kill seen to the holder's fsync returning: $(ms "$T_KILLED" "$T_WROTE") ms"
# The host checks other clients now and answers once the grace is over.
echo "$(now)" >/share/reclaimed
for _ in $(seq 1200); do [ -e /share/failover-done ] && break; sleep 0.05; done
check "host checks done" test -e /share/failover-done
check "the holder still runs" kill -0 $HP
check "the lock is still the holder's: another process cannot take it" must_fail lock_try "$L"
wait $WP; wrc=$?
check "workload through the failover completed (40 files fsynced)" test "$wrc" = 0 -a -e "$S/wl.done"
[ -s "$S/wl.err" ] && sed 's/^/  | /' "$S/wl.err"
touch "$S/rel"; wait $HP; hrc=$?
check "holder wrote, released and closed (exit $hrc)" test "$hrc" = 0
[ -s "$S/holder.err" ] && sed 's/^/  | /' "$S/holder.err"
check "the lock is free once released" lock_try "$L"

# Everything acknowledged as stable reads back as written, past the client's cache.
sync; echo 3 >/proc/sys/vm/drop_caches
check "locked file (part 1 before, part 2 after the kill) sha256 matches" \
  test "$(sha256sum <"$L" | cut -d' ' -f1)" = "$(cat "$S/locked.sum")"
check "files fsynced before the kill match" bash -c "cd $W && sha256sum -c --quiet $S/stable.sum"
n=0; for i in $(seq 40); do cmp -s "$S/wl" "$W/wl$i" && n=$((n + 1)); done
check "workload files match ($n of 40)" test "$n" = 40
grep -c . /proc/net/rpc/nfs >/dev/null && echo "  rpc: $(awk '$1=="rpc"{print "calls "$2", retrans "$3}' /proc/net/rpc/nfs)"
rm -rf "$W"
umount "$MNT" && ok umount || bad umount
finish
