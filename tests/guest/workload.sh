#!/bin/bash
# tests/guest/workload.sh SERVER VERS [SEC] [EXPORT] [MOUNT_OPTS]   (runs INSIDE the guest, as root)
#   SERVER      server address (127.0.0.1 for knfsd in the guest, 10.77.0.1 for a server in the netns)
#   VERS        NFS version: 3, 4.0, 4.1, 4.2
#   SEC         security flavour (default sys)
#   EXPORT      export path (default /)
#   MOUNT_OPTS  extra mount options, e.g. port=2049,mountport=2049,mountproto=tcp,nolock
# Each step prints exactly one line `STEP <name> PASS|FAIL <seconds>s` (details indented below it),
# then `WORKLOAD <server> vers=<v> sec=<s>: N passed, M failed`; exits non-zero if any step failed.
# Env knobs (defaults sized for TCG, see README):
#   BIG_MB=256        size of the big file          SMALL_N=40     number of small files
#   TREE_N=10000      files in the tree (100/dir)   FIO_MB=32      fio file size
#   FIO_RUNTIME=10    fio random-read phase (s)     STEP_TIMEOUT=450 per step (s)
#   STAT_N=$TREE_N    files of the stat-pass step   STAT_ASSERT=0|1 its 1% GETATTR bound enforced
#   LOCAL_CHANGE=1    step local-change: the host writes a file the client has cached (run.sh)
#   ONLY_STEPS="a b"  run only these steps (function names without s_) between mount and umount
#   SQUASH=0|1        server squashes root to 65534 (then root-owned checks expect 65534:65534,
#                     and the tree/cp -a steps run as the unprivileged user)
#   LAB_UID=1000      unprivileged guest user (created if missing)      MNT=/mnt/nfs
#   MIXED_VERS, MIXED_OPTS   when set: step mixed-locks mounts the export again (vers=MIXED_VERS,
#                     options MIXED_OPTS) on $MNT-mixed and checks that fcntl locks conflict
#                     across the two protocols (NFSv3/NLM against NFSv4.x LOCK)
#   RESTART_LOCK=1    step restart-lock: hold an fcntl lock while the host restarts the server
#                     (writes /share/restart-request, waits for /share/restart-done; run.sh does
#                     it), the lock must survive (reclaim); RESTART_GRACE=5 the server's grace (s)
#   PJDFSTEST=1       step pjdfstest: the POSIX suite (/share/pjdfstest, the Rust pjdfstest that
#                     run.sh ships from the host) as root on a second mount of PJD_EXPORT (default
#                     EXPORT), an export that keeps root (the suite chowns, makes device nodes,
#                     switches users), at $MNT-pjd.  PJD_TESTS="chmod open ..." runs a subset (its
#                     name filters; default: the whole suite); PJD_ALLOW="name ..." failures
#                     allowed (each also fails through knfsd: run.sh keeps the list).  The whole
#                     output comes back as /share/pjdfstest.out.  PJD_NAPTIME=0.01 (s) the
#                     suite's sleep before a timestamp must have moved
set -u
SERVER=${1:?usage: workload.sh SERVER VERS [SEC] [EXPORT] [MOUNT_OPTS]}
VERS=${2:?NFS version}
SEC=${3:-sys}; EXPORT=${4:-/}; MOUNT_OPTS=${5:-}
export SERVER VERS SEC EXPORT MOUNT_OPTS
export MNT=${MNT:-/mnt/nfs} BIG_MB=${BIG_MB:-256} SMALL_N=${SMALL_N:-40} TREE_N=${TREE_N:-10000}
export FIO_MB=${FIO_MB:-32} FIO_RUNTIME=${FIO_RUNTIME:-10} STEP_TIMEOUT=${STEP_TIMEOUT:-450}
export MIXED_VERS=${MIXED_VERS:-} MIXED_OPTS=${MIXED_OPTS:-} RESTART_LOCK=${RESTART_LOCK:-0}
export RESTART_GRACE=${RESTART_GRACE:-5}
export PJD_EXPORT=${PJD_EXPORT:-$EXPORT} PJD_TESTS=${PJD_TESTS:-} PJD_ALLOW=${PJD_ALLOW:-}
export PJD_NAPTIME=${PJD_NAPTIME:-0.01}
export SQUASH=${SQUASH:-0} LAB_UID=${LAB_UID:-1000} LAB_USER=${LAB_USER:-labuser}
export W=$MNT/wl-$$ LOGS=/tmp/wl-logs SCRATCH=/tmp/wl-scratch
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C
mkdir -p "$LOGS" "$SCRATCH" "$MNT"
getent passwd "$LAB_USER" >/dev/null || useradd -u "$LAB_UID" -U -m -s /bin/bash "$LAB_USER"
export ROOT_UID=0; [ "$SQUASH" = 1 ] && ROOT_UID=65534

now() { date +%s.%N; }
# awk arithmetic (no bc in the guest): elapsed A B -> B-A ; rate MIB A B -> MIB/(B-A)
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", b - a}'; }
rate() { awk -v m="$1" -v a="$2" -v b="$3" 'BEGIN{printf "%.1f", (b > a) ? m / (b - a) : 0}'; }
info() { echo "  $*"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# run a command as the unprivileged guest user (no PAM, no login shell)
as_user() { setpriv --reuid="$LAB_UID" --regid="$LAB_UID" --init-groups -- "$@"; }
# the command must fail (used for permission/lock checks)
# ask_host NAME CONTENT: a request to run.sh, which reads and removes /share/NAME-request the
# moment it exists: written aside and renamed into place, as a write after that removal would
# fail over the share (ENOENT). Clears NAME-done first, which run.sh makes when it is done.
ask_host() {
  rm -f "/share/$1-done"
  echo "$2" > "/share/$1-request.new" && mv "/share/$1-request.new" "/share/$1-request"
}
must_fail() { if "$@" 2>/dev/null; then echo "UNEXPECTED SUCCESS: $*"; return 1; fi; return 0; }
# run a step in a bash -e subshell with a timeout; print STEP line, and the log tail on failure
PASSED=0; FAILED=0
step() {
  local name=$1 fn=$2 t0 rc dt
  t0=$(now)
  timeout -k 10 "$STEP_TIMEOUT" bash -c "set -eo pipefail; $fn" > "$LOGS/$name.log" 2>&1; rc=$?
  dt=$(elapsed "$t0" "$(now)")
  if [ $rc = 0 ]; then
    echo "STEP $name PASS ${dt}s"; PASSED=$((PASSED+1))
    grep '^INFO ' "$LOGS/$name.log" | sed 's/^INFO /  /'
  else
    echo "STEP $name FAIL ${dt}s"; FAILED=$((FAILED+1))
    [ $rc = 124 ] && echo "  timed out after ${STEP_TIMEOUT}s"
    tail -n 25 "$LOGS/$name.log" | sed 's/^/  | /'
  fi
  return $rc
}
summary() {
  echo "WORKLOAD $SERVER vers=$VERS sec=$SEC: $PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]; exit $?
}

# ---------------------------------------------------------------------------------------------
s_mount() {
  local o="vers=$VERS,sec=$SEC"; [ -n "$MOUNT_OPTS" ] && o="$o,$MOUNT_OPTS"
  echo "mount -t nfs -o $o $SERVER:$EXPORT $MNT"
  mount -t nfs -o "$o" "$SERVER:$EXPORT" "$MNT"
  mountpoint "$MNT"
  echo "INFO $(awk -v m="$MNT" '$2==m{print $1" "$3" "$4}' /proc/mounts)"
  # a Kerberos flavor: the kernel's mount options must name exactly it (sec=krb5 is not krb5i)
  if [ "$SEC" != sys ]; then
    awk -v m="$MNT" -v s="sec=$SEC" '$2==m{n=split($4,o,","); for(i=1;i<=n;i++) if(o[i]==s) f=1} END{exit !f}' /proc/mounts
  fi
  # RPC-with-TLS: the kernel must show the transport security asked for (xprtsec=tls|mtls)
  local xs=
  [[ ,$MOUNT_OPTS, =~ ,(xprtsec=[a-z]+), ]] && xs=${BASH_REMATCH[1]}
  if [ -n "$xs" ] && [ "$xs" != xprtsec=none ]; then
    awk -v m="$MNT" -v s="$xs" '$2==m{n=split($4,o,","); for(i=1;i<=n;i++) if(o[i]==s) f=1} END{exit !f}' /proc/mounts
  fi
  # NFSv3 with locking: the server's rpcbind must name NLM (nlockmgr) for the guest's lockd
  if [ "$VERS" = 3 ] && [[ ,$MOUNT_OPTS, != *,nolock,* ]]; then
    echo "INFO rpcinfo -p $SERVER: $(rpcinfo -p "$SERVER" | awk 'NR>1{print $5"/v"$2"/"$3"/"$4}' | sort -u | tr '\n' ' ')"
    rpcinfo -p "$SERVER" | grep -qw nlockmgr
  fi
  mkdir "$W"; chmod 1777 "$W"
  test "$(stat -c %a "$W")" = 1777
}
s_smallfiles() {
  mkdir -p "$SCRATCH/small" "$W/small"
  local sizes=(0 1 511 512 4095 4096 4097 65535 65536 65537 131072 1048575 1048576 1048577)
  local i=0 n sz
  for ((i = 0; i < SMALL_N; i++)); do
    sz=${sizes[i % ${#sizes[@]}]}; [ $i -ge ${#sizes[@]} ] && sz=$((sz + i * 37))
    head -c "$sz" /dev/urandom > "$SCRATCH/small/f$i"
  done
  (cd "$SCRATCH/small" && sha256sum f* > ../small.sha256)
  for f in "$SCRATCH"/small/f*; do cat "$f" > "$W/small/${f##*/}"; done
  echo appended >> "$W/small/f1"; echo appended >> "$SCRATCH/small/f1"       # append path
  (cd "$SCRATCH/small" && sha256sum f* > ../small.sha256)
  drop_caches
  (cd "$W/small" && sha256sum -c --quiet "$SCRATCH/small.sha256")
  for f in "$SCRATCH"/small/f*; do
    test "$(stat -c %s "$f")" = "$(stat -c %s "$W/small/${f##*/}")"
  done
  # overwrite in the middle, truncate, extend
  printf 'XYZ' | dd of="$W/small/f7" bs=1 seek=100 conv=notrunc status=none
  printf 'XYZ' | dd of="$SCRATCH/small/f7" bs=1 seek=100 conv=notrunc status=none
  truncate -s 10 "$W/small/f8"; truncate -s 10 "$SCRATCH/small/f8"
  truncate -s 3000000 "$W/small/f9"; truncate -s 3000000 "$SCRATCH/small/f9"
  drop_caches
  for f in f7 f8 f9; do cmp "$SCRATCH/small/$f" "$W/small/$f"; done
  echo "INFO $SMALL_N small files (0 B .. 1 MiB+), sha256 verified after drop_caches"
}
s_bigfile() {
  head -c "${BIG_MB}M" /dev/urandom > "$SCRATCH/big"
  local a b c
  a=$(now); dd if="$SCRATCH/big" of="$W/big" bs=1M conv=fsync status=none; b=$(now)
  rm -f "$SCRATCH/big.sum"; sha256sum < "$SCRATCH/big" > "$SCRATCH/big.sum"
  drop_caches
  c=$(now); sha256sum < "$W/big" > "$SCRATCH/big.sum2"; local d; d=$(now)
  cmp "$SCRATCH/big.sum" "$SCRATCH/big.sum2"
  test "$(stat -c %s "$W/big")" = $((BIG_MB * 1048576))
  rm -f "$W/big" "$SCRATCH/big"
  echo "INFO big file ${BIG_MB} MiB: write+fsync $(rate "$BIG_MB" "$a" "$b") MiB/s," \
       "read+sha256 $(rate "$BIG_MB" "$c" "$d") MiB/s"
}
# the tree steps run as root, or as the unprivileged user when root is squashed
# (cp -a as root would fail to preserve ownership on a root-squashing server)
tree_run() { if [ "$SQUASH" = 1 ]; then as_user bash -ec "$1"; else bash -ec "$1"; fi; }
s_tree_create() {
  tree_run '
    mkdir "$W/tree"; cd "$W/tree"
    for ((d = 0; d < (TREE_N + 99) / 100; d++)); do
      mkdir "d$d"
      for ((f = 0; f < 100 && d * 100 + f < TREE_N; f++)); do echo "file $d/$f" > "d$d/f$f"; done
    done'
  echo "INFO tree: $TREE_N files in $(( (TREE_N + 99) / 100 )) dirs"
}
s_tree_ls() {
  drop_caches
  local n; n=$(tree_run 'ls -lR "$W/tree"' | grep -c '^-')
  echo "ls -lR: $n files"; test "$n" = "$TREE_N"
}
s_tree_cp() { drop_caches; tree_run 'cp -a "$W/tree" "$W/tree2"'; }
s_tree_diff() {
  drop_caches; tree_run 'diff -r "$W/tree" "$W/tree2"'
  # cp -a preserved modes and owners
  test "$(cd "$W/tree" && find . -printf '%m %u %g %p\n' | sort | sha256sum)" = \
       "$(cd "$W/tree2" && find . -printf '%m %u %g %p\n' | sort | sha256sum)"
}
s_tree_rm() { tree_run 'rm -rf "$W/tree" "$W/tree2"'; test ! -e "$W/tree"; test ! -e "$W/tree2"; }
s_links() {
  mkdir "$W/ln"; cd "$W/ln"
  # rename: file, over an existing file, directory, across directories
  echo one > a; mv a b; test ! -e a; test "$(cat b)" = one
  echo two > c; mv c b; test "$(cat b)" = two; test ! -e c
  mkdir -p d1/sub; echo x > d1/sub/x; mv d1 d2; test "$(cat d2/sub/x)" = x
  mkdir d3; mv d2/sub/x d3/y; test "$(cat d3/y)" = x; test ! -e d2/sub/x
  must_fail mv d3 d3/inside                                   # into itself
  # hard links
  echo data > h1; ln h1 h2
  test "$(stat -c %h h1)" = 2; test "$(stat -c %i h1)" = "$(stat -c %i h2)"
  echo more >> h2; drop_caches; test "$(cat h1)" = "$(printf 'data\nmore')"
  rm h1; test "$(stat -c %h h2)" = 1; test "$(head -1 h2)" = data
  must_fail ln d3 d3link                                      # no hard links to directories
  # symlinks
  ln -s h2 s1; test "$(readlink s1)" = h2; test "$(head -1 s1)" = data
  ln -s d3 sd; test "$(cat sd/y)" = x
  ln -s /nonexistent/target dangling; test -L dangling; test ! -e dangling
  test "$(readlink dangling)" = /nonexistent/target
  long=$(printf 'x%.0s' $(seq 1000)); ln -s "$long" slong; test "$(readlink slong)" = "$long"
  mv s1 s1r; test "$(readlink s1r)" = h2
  drop_caches; test "$(stat -c %F sd)" = "symbolic link"
  cd /; rm -rf "$W/ln"
}
s_perms() {
  mkdir "$W/perm"; chmod 1777 "$W/perm"; cd "$W/perm"
  echo secret > secret; chmod 600 secret
  echo public > public; chmod 644 public
  mkdir rootdir; chmod 755 rootdir
  printf '#!/bin/sh\necho ran\n' > script; chmod 755 script; cp script noexec; chmod 644 noexec
  # files created by root are owned by root, or by 65534 when the server squashes root
  test "$(stat -c %u:%g secret)" = "$ROOT_UID:$ROOT_UID"
  drop_caches
  must_fail as_user cat secret                                # 600 owned by someone else
  test "$(as_user cat public)" = public                        # 644 readable
  must_fail as_user sh -c 'echo x >> public'                   # ... but not writable
  must_fail as_user touch rootdir/x                            # 755 dir of someone else
  must_fail as_user chmod 666 secret                           # not the owner
  must_fail as_user rm secret                                  # sticky dir, not the owner
  test "$(as_user ./script)" = ran; must_fail as_user ./noexec # execute bit
  # a directory the user owns is writable by the user
  as_user mkdir userdir; test "$(stat -c %u userdir)" = "$LAB_UID"
  as_user sh -c 'echo mine > userdir/f && chmod 600 userdir/f && cat userdir/f' | grep -qx mine
  test "$(stat -c %u:%a userdir/f)" = "$LAB_UID:600"
  as_user chmod 700 userdir; as_user touch userdir/g; as_user rm userdir/g
  if [ "$SQUASH" = 1 ]; then
    must_fail cat userdir/f                                   # squashed root is just nobody
    must_fail chown 0 public                                  # squashed root cannot chown
  else
    test "$(cat userdir/f)" = mine                             # root may read anything
    chown "$LAB_UID:$LAB_UID" public; test "$(stat -c %u public)" = "$LAB_UID"
    test "$(as_user sh -c 'echo w >> public && tail -1 public')" = w
  fi
  as_user rm -rf userdir; cd /; rm -rf "$W/perm"
}
s_df() {
  df -h "$MNT"; df -i "$MNT" || true
  local size avail
  size=$(df -P -k "$MNT" | awk 'NR==2{print $2}'); avail=$(df -P -k "$MNT" | awk 'NR==2{print $4}')
  test "$size" -gt 0; test "$avail" -gt 0; test "$avail" -le "$size"
  stat -f "$MNT"
  echo "INFO df: size ${size} KiB, avail ${avail} KiB"
}
# a perl helper (perl-base only) for POSIX fcntl byte-range locks.  struct flock on x86_64:
# short l_type, short l_whence, (pad), off_t l_start, off_t l_len, pid_t l_pid, (pad)
fcntl_lock() {  # FILE START LEN r|w hold|try   (hold: lock, touch FILE.held, wait for FILE.rel)
  perl -MFcntl -e '
    my ($f, $s, $l, $t, $mode) = @ARGV;
    open(my $fh, "+<", $f) or die "open $f: $!";
    my $fl = pack("s s x4 q q l x4", $t eq "w" ? F_WRLCK : F_RDLCK, SEEK_SET, $s, $l, 0);
    if (!fcntl($fh, $mode eq "hold" ? F_SETLKW : F_SETLK, $fl)) { print "lock failed: $!\n"; exit 1; }
    if ($mode eq "hold") {
      open(my $h, ">", "$f.held") or die; close $h;
      for (1..600) { last if -e "$f.rel"; select(undef, undef, undef, 0.1); }
    }
    exit 0;' "$@"
}
s_locks() {
  mkdir "$W/lk"; cd "$W/lk"; touch fl fc
  # flock(1): an exclusive lock held by another process makes flock -n fail
  mkfifo "$SCRATCH/rel"
  ( flock -x 8; touch "$SCRATCH/held"; read -t 120 _ < "$SCRATCH/rel" ) 8> fl &
  local hp=$!
  for _ in $(seq 300); do [ -e "$SCRATCH/held" ] && break; sleep 0.1; done
  test -e "$SCRATCH/held"
  must_fail flock -n -x fl true
  must_fail flock -n -s fl true
  must_fail flock -w 1 fl true                                 # waits, then gives up
  echo release > "$SCRATCH/rel"; wait $hp
  flock -n -x fl true                                         # free again
  echo "INFO flock: held lock blocks flock -n/-s/-w, released lock is free"
  # fcntl (POSIX) byte-range locks between two processes
  fcntl_lock fc 0 100 w hold & hp=$!
  for _ in $(seq 300); do [ -e fc.held ] && break; sleep 0.1; done
  test -e fc.held
  must_fail fcntl_lock fc 0 0 w try                            # whole file overlaps
  must_fail fcntl_lock fc 50 100 r try                         # read lock overlapping a write lock
  fcntl_lock fc 100 100 w try                                 # disjoint range is free
  touch fc.rel; wait $hp
  fcntl_lock fc 0 0 w try                                     # released
  echo "INFO fcntl: write lock [0,100) blocks overlapping F_SETLK, [100,200) is free"
  cd /; rm -rf "$W/lk" "$SCRATCH/rel" "$SCRATCH/held"
}
# an NFSv3 (NLM) lock against an NFSv4.x LOCK: the same file through two mounts of the export
s_mixed_locks() {
  local o="vers=$MIXED_VERS,sec=$SEC" rel
  m2=$MNT-mixed                            # global: the EXIT trap below runs after the function
  [ -n "$MIXED_OPTS" ] && o="$o,$MIXED_OPTS"
  mkdir -p "$m2"
  echo "mount -t nfs -o $o $SERVER:$EXPORT $m2"
  mount -t nfs -o "$o" "$SERVER:$EXPORT" "$m2"
  trap 'cd /; umount "$m2" 2>/dev/null || umount -f -l "$m2"' EXIT
  mkdir "$W/mx"; echo mixed > "$W/mx/f"
  rel=${W#"$MNT"/}/mx
  local a=$W/mx b=$m2/$rel
  test "$(cat "$b/f")" = mixed
  echo "INFO second mount: $(awk -v m="$m2" '$2==m{print $3" "$4}' /proc/mounts | cut -c1-60)..."
  local dir1 dir2 p1 p2 hp
  for dir1 in a b; do                     # hold through one mount, try through the other
    if [ $dir1 = a ]; then p1=$a p2=$b dir2="vers=$MIXED_VERS"; else p1=$b p2=$a dir2="vers=$VERS"; fi
    rm -f "$a/f.held" "$a/f.rel"
    fcntl_lock "$p1/f" 0 100 w hold & hp=$!
    for _ in $(seq 300); do [ -e "$p1/f.held" ] && break; sleep 0.1; done
    test -e "$p1/f.held"
    must_fail fcntl_lock "$p2/f" 0 0 w try                     # whole file overlaps
    must_fail fcntl_lock "$p2/f" 50 100 r try                  # read lock overlapping
    fcntl_lock "$p2/f" 100 100 w try                           # disjoint range is free
    touch "$p1/f.rel"; wait $hp
    # released: the holder's client unlocks a closing file asynchronously
    # (Linux does not wait for that LOCKU), so allow it a few seconds
    for _ in $(seq 25); do fcntl_lock "$p2/f" 0 0 w try >/dev/null && break; sleep 0.2; done
    fcntl_lock "$p2/f" 0 0 w try
    echo "INFO write lock [0,100) via $( [ $dir1 = a ] && echo "vers=$VERS" || echo "vers=$MIXED_VERS") blocks F_SETLK via $dir2; free after release"
  done
  cd /; rm -rf "$W/mx"
}
# restart the server while holding a lock: the kernel must reclaim it (NLM after SM_NOTIFY for
# NFSv3, CLAIM_PREVIOUS + LOCK reclaim for NFSv4.x), the data must survive
s_restart_lock() {
  mkdir "$W/rl"; cd "$W/rl"
  head -c 300000 /dev/urandom > "$SCRATCH/rl1"; head -c 200000 /dev/urandom > "$SCRATCH/rl2"
  cat "$SCRATCH/rl1" "$SCRATCH/rl2" | sha256sum > "$SCRATCH/rl.sum"
  touch f
  # holder: lock the whole file, write part 1 + fsync, then (on f.go) part 2 + fsync, then release
  perl /share/lock-holder.pl f "$SCRATCH/rl1" "$SCRATCH/rl2" f. 1800 0.1 "after restart" & local hp=$!
  for _ in $(seq 300); do [ -e f.held ] && break; sleep 0.1; done
  test -e f.held
  must_fail fcntl_lock f 0 0 w try                             # locked before the restart
  ask_host restart "$(now)"
  local t0; t0=$(now)
  for _ in $(seq 600); do [ -e /share/restart-done ] && break; sleep 0.1; done
  test -e /share/restart-done
  echo "INFO server restarted (request to restart-done $(elapsed "$t0" "$(now)")s)"
  # Call the server now with an operation that carries client state: an NFSv4 client learns of
  # the restart only from such a call (4.1: any SEQUENCE; 4.0: STALE_CLIENTID on OPEN/RENEW, while
  # GETATTR/LOOKUP work without state) and must reclaim within the grace period.  Creating a new
  # file sends OPEN (a cached open of f would not).  NFSv3: Tarn's SM_NOTIFY starts the reclaim.
  echo poke > poke; stat f > /dev/null
  sleep "$((RESTART_GRACE + 2))"                              # past the server's grace period
  kill -0 $hp                                                 # the holder still runs
  must_fail fcntl_lock f 0 0 w try                             # still locked: reclaimed
  must_fail fcntl_lock f 1000 10 r try
  echo "INFO $(elapsed "$t0" "$(now)")s after the restart request the lock is still held"
  touch f.go
  for _ in $(seq 300); do [ -e f.wrote ] || ! kill -0 $hp 2>/dev/null && break; sleep 0.1; done
  test -e f.wrote
  touch f.rel; wait $hp
  fcntl_lock f 0 0 w try                                      # released
  drop_caches
  test "$(stat -c %s f)" = 500000
  sha256sum < f | cmp - "$SCRATCH/rl.sum"
  echo "INFO data written before and after the restart verified (sha256, 500000 bytes)"
  cd /; rm -rf "$W/rl" "$SCRATCH"/rl*
}
s_fio() {
  mkdir "$W/fio"
  fio --name=randwrite-verify --directory="$W/fio" --filename=fio.dat --size="${FIO_MB}M" \
      --rw=randwrite --bs=4k --ioengine=psync --direct=1 --verify=crc32c --do_verify=1 \
      --verify_fatal=1 --output-format=terse --terse-version=3 > "$SCRATCH/fio1" \
    || { cat "$SCRATCH/fio1"; return 1; }
  fio --name=randrw --directory="$W/fio" --filename=fio.dat --size="${FIO_MB}M" --rw=randrw \
      --bs=4k --ioengine=psync --direct=1 --time_based --runtime="$FIO_RUNTIME" --numjobs=2 \
      --group_reporting --output-format=terse --terse-version=3 > "$SCRATCH/fio2" \
    || { cat "$SCRATCH/fio2"; return 1; }
  # terse v3: field 5 = error, 8 = read iops, 49 = write iops
  local e1 e2; e1=$(cut -d';' -f5 "$SCRATCH/fio1"); e2=$(cut -d';' -f5 "$SCRATCH/fio2")
  test "$e1" = 0; test "$e2" = 0
  echo "INFO fio: ${FIO_MB} MiB randwrite 4k O_DIRECT + crc32c verify ($(cut -d';' -f49 "$SCRATCH/fio1") write IOPS);" \
       "randrw ${FIO_RUNTIME}s x2 jobs: $(cut -d';' -f8 "$SCRATCH/fio2") read / $(cut -d';' -f49 "$SCRATCH/fio2") write IOPS"
  rm -rf "$W/fio"
}
# NFSv4.2 sparse files: fallocate -l (ALLOCATE), fallocate --punch-hole (DEALLOCATE),
# SEEK_DATA/SEEK_HOLE (SEEK) through perl's sysseek (the image has perl-base, no python3;
# whence 3 and 4 are SEEK_DATA and SEEK_HOLE), and the bytes read back after drop_caches
# (READ, or READ_PLUS where the kernel uses it) against the same steps on a local file.
# The mountstats op counts show what went over the wire.
seek_at() {  # FILE d|h:OFFSET ... -> one offset (or ENXIO) per line
  perl -e 'open(my $f, "<", shift) or die "$!\n";
    for (@ARGV) { my ($w, $o) = split /:/; my $r = sysseek($f, $o, $w eq "d" ? 3 : 4);
      print defined $r ? $r + 0 : ($!{ENXIO} ? "ENXIO" : "ERR $!"), "\n" }' "$@"
}
s_sparse() {
  local f=$W/sparse ref=$SCRATCH/sparse M=1048576 K64=65536 got want
  rm -f "$ref"
  head -c $K64 /dev/urandom > "$SCRATCH/d1"; head -c $K64 /dev/urandom > "$SCRATCH/d2"
  for t in "$f" "$ref"; do
    fallocate -l 8M "$t"
    test "$(stat -c %s "$t")" = $((8 * M))
    dd if="$SCRATCH/d1" of="$t" bs=64k seek=16 conv=notrunc,fsync status=none  # at 1 MiB
    dd if="$SCRATCH/d2" of="$t" bs=64k seek=80 conv=notrunc,fsync status=none  # at 5 MiB
    # free everything else: data at [1M, 1M+64k) and [5M, 5M+64k) only
    fallocate --punch-hole --offset 0 --length $M "$t"
    fallocate --punch-hole --offset $((M + K64)) --length $((4 * M - K64)) "$t"
    fallocate --punch-hole --offset $((5 * M + K64)) --length $((3 * M - K64)) "$t"
    test "$(stat -c %s "$t")" = $((8 * M))
  done
  drop_caches
  cmp "$ref" "$f"
  test "$(sha256sum < "$f")" = "$(sha256sum < "$ref")"
  want="$M 0 $((M + K64)) $((5 * M)) $((5 * M + K64)) ENXIO $((5 * M + K64)) ENXIO ENXIO"
  got=$(seek_at "$f" d:0 h:0 h:$M d:$((M + K64)) h:$((5 * M)) d:$((5 * M + K64)) \
        h:$((5 * M + K64)) d:$((8 * M)) h:$((8 * M)) | tr '\n' ' ')
  echo "  seek: $got"
  test "${got% }" = "$want"
  # a punch inside the data, not page-aligned on either side: zeros there, nothing else changes
  fallocate --punch-hole --offset $((M + 1000)) --length 5000 "$f"
  fallocate --punch-hole --offset $((M + 1000)) --length 5000 "$ref"
  drop_caches
  cmp "$ref" "$f"
  rm -f "$f" "$ref"
  echo "INFO sparse: fallocate, punch-hole, SEEK_DATA/SEEK_HOLE and read-back checked; ops sent:" \
       "$(awk '/^[ \t]*(ALLOCATE|DEALLOCATE|SEEK|READ_PLUS):/{printf "%s%s ", $1, $2}' /proc/self/mountstats)"
}
# NFSv4.2 server-side copy: cp (coreutils >= 9 tries a reflink first, then copy_file_range,
# which the kernel client turns into CLONE, then COPY) of a file bigger than one COPY call
# (Tarn copies at most 16 MiB per COPY; the client loops on the short counts), sha256 after
# drop_caches, and COPY counted in /proc/self/mountstats. Then cp --reflink=always: succeeds
# where the export's filesystem shares extents (the bytes checked), else fails cleanly
# (EOPNOTSUPP from CLONE's NOTSUPP), never a hang. The kernel stops sending CLONE to a server
# after its first NOTSUPP (an earlier cp -a may have had it), so CLONE is counted, not required.
op_count() { awk -v op="$1:" '$1==op{n+=$2} END{print n+0}' /proc/self/mountstats; }
s_copy() {
  local mb=$(( BIG_MB < 40 ? BIG_MB : 40 )) c0 c1 k0 k1 a b rc
  head -c "${mb}M" /dev/urandom > "$SCRATCH/copysrc"
  cp "$SCRATCH/copysrc" "$W/copysrc"; sync
  drop_caches
  c0=$(op_count COPY); k0=$(op_count CLONE)
  a=$(now); cp "$W/copysrc" "$W/copydst"; b=$(now)
  c1=$(op_count COPY); k1=$(op_count CLONE)
  echo "  COPY calls $c0 -> $c1, CLONE calls $k0 -> $k1"
  test "$c1" -gt "$c0"                                       # server-side copy went over the wire
  drop_caches
  test "$(sha256sum < "$W/copydst")" = "$(sha256sum < "$SCRATCH/copysrc")"
  test "$(stat -c %s "$W/copydst")" = $((mb * 1048576))
  echo "INFO copy: cp of ${mb} MiB in $(elapsed "$a" "$b")s by $((c1 - c0)) COPY calls" \
       "(CLONE tried $((k1 - k0))x), sha256 verified"
  rc=0; timeout 60 cp --reflink=always "$W/copysrc" "$W/clonedst" 2> "$SCRATCH/clone.err" || rc=$?
  echo "  cp --reflink=always: rc=$rc $(head -c 200 "$SCRATCH/clone.err")"
  test "$rc" != 124                                          # a clean answer, not a hang
  if [ "$rc" = 0 ]; then
    drop_caches
    test "$(sha256sum < "$W/clonedst")" = "$(sha256sum < "$SCRATCH/copysrc")"
    echo "INFO reflink: cp --reflink=always cloned (the export's filesystem shares extents)"
  else
    grep -qi 'not supported' "$SCRATCH/clone.err"
    echo "INFO reflink: cp --reflink=always refused cleanly: $(head -c 120 "$SCRATCH/clone.err")"
  fi
  rm -f "$W/copysrc" "$W/copydst" "$W/clonedst" "$SCRATCH/copysrc" "$SCRATCH/clone.err"
}
# NFSv4.2 extended attributes (RFC 8276): user.* set, get, list and remove through the kernel
# client. The image has no attr package (setfattr/getfattr) and no python3, so perl-base's
# syscall() makes the calls: x86_64 setxattr 188, getxattr 191, listxattr 194, removexattr 197;
# FLAGS 1 = XATTR_CREATE, 2 = XATTR_REPLACE.
xa() {  # set FILE NAME VALUE [FLAGS] | get FILE NAME | list FILE | remove FILE NAME
  perl -e 'my ($op, $f, $n, $v, $fl) = @ARGV; my $b = "\0" x 65536; my $r;
    if ($op eq "set") { $r = syscall(188, $f, $n, $v, length($v), ($fl // 0) + 0) }
    elsif ($op eq "get") { $r = syscall(191, $f, $n, $b, 65536); print substr($b, 0, $r) if $r >= 0 }
    elsif ($op eq "list") { $r = syscall(194, $f, $b, 65536);
      print map { "$_\n" } split /\0/, substr($b, 0, $r) if $r > 0 }
    elsif ($op eq "remove") { $r = syscall(197, $f, $n) }
    else { die "xa: unknown op $op\n" }
    if ($r < 0) { print STDERR "xa $op $n: $!\n"; exit 1 }' "$@"
}
s_xattr() {
  local f=$W/xattr big
  echo data > "$f"
  xa set "$f" user.color blue
  test "$(xa get "$f" user.color)" = blue
  big=$(head -c 2000 /dev/urandom | od -An -tx1 | tr -d ' \n')   # 4000 bytes
  xa set "$f" user.big "$big"
  must_fail xa set "$f" user.color red 1                      # CREATE of an existing one: EEXIST
  must_fail xa set "$f" user.none red 2                       # REPLACE of a missing one: ENODATA
  xa set "$f" user.color red 2
  drop_caches
  test "$(xa get "$f" user.color)" = red
  test "$(xa get "$f" user.big)" = "$big"
  test "$(xa list "$f" | grep '^user\.' | sort | tr '\n' ' ')" = "user.big user.color "
  xa remove "$f" user.color
  must_fail xa get "$f" user.color                            # ENODATA
  must_fail xa remove "$f" user.color
  test "$(xa list "$f" | grep '^user\.' | tr '\n' ' ')" = "user.big "
  # someone else's 644 file: the unprivileged user reads and lists, but may not write
  chmod 644 "$f"
  test "$(as_user bash -c 'xa get "$1" user.big' - "$f")" = "$big"
  must_fail as_user bash -c 'xa set "$1" user.mine x' - "$f"
  must_fail as_user bash -c 'xa remove "$1" user.big' - "$f"
  # directories carry them too
  mkdir "$W/xattr-dir"; xa set "$W/xattr-dir" user.d yes
  test "$(xa get "$W/xattr-dir" user.d)" = yes
  rm -rf "$f" "$W/xattr-dir"
  echo "INFO xattr: user.* set/get/list/remove, CREATE/REPLACE, permissions checked; ops sent:" \
       "$(awk '/^[ \t]*(GETXATTR|SETXATTR|LISTXATTRS|REMOVEXATTR):/{printf "%s%s ", $1, $2}' /proc/self/mountstats)"
}
# The attribute-revalidation storm (seeds/nfs4-attribute-cache-revalidation-storm.txt) and its
# cure, delegations. A second mount of the same export whose file attributes expire at once
# (acregmin=acregmax=0: every stat revalidates unless a delegation vouches for the file) and whose
# directories stay cached (so path walks cost nothing): pass 1 stats STAT_N files the client holds
# no delegation for (one GETATTR each); each file is then opened for reading once (the server may
# grant a read delegation, which the client keeps after close); pass 2 stats them again. The
# counts are the client's own (/proc/self/mountstats of that mount: every call it sent), so the
# same step reads the same way against knfsd. With STAT_ASSERT=1 (Tarn, NFSv4.x) pass 2 must
# send at most 1% of pass 1's GETATTRs.
mount_ops() {  # MOUNTPOINT OP -> calls of OP sent through that mount
  awk -v m="$1" -v op="$2:" '$1=="device"{on=($5==m)} on && $1==op{n+=$2} END{print n+0}' /proc/self/mountstats
}
mount_all_ops() {  # MOUNTPOINT -> "OP:N ..." for every op sent through that mount
  awk -v m="$1" '$1=="device"{on=($5==m)} on && /^[ \t]*[A-Z_]+: [0-9]/ && $2>0{printf "%s%s ", $1, $2}' /proc/self/mountstats
}
s_stat_pass() {
  local n=${STAT_N:-$TREE_N} o="vers=$VERS,sec=$SEC,acregmin=0,acregmax=0,acdirmin=3600,acdirmax=3600"
  local rel dir g0 g1 g2 g3 t0 t1 t2 t3 opens0 opens1 dr
  m=$MNT-stat                              # global: the EXIT trap below runs after the function
  [ -n "$MOUNT_OPTS" ] && o="$o,$MOUNT_OPTS"
  # Linux returns delegations on close beyond this many (default 5000); room for the whole set
  local wm
  for wm in /sys/module/nfsv4/parameters/delegation_watermark /sys/module/nfs/parameters/delegation_watermark; do
    [ -w "$wm" ] && { echo $((n + 1000)) > "$wm"; echo "INFO $wm = $(cat "$wm")"; break; }
  done
  mkdir -p "$m"
  mount -t nfs -o "$o" "$SERVER:$EXPORT" "$m"
  trap 'cd /; umount "$m" 2>/dev/null || umount -f -l "$m"' EXIT
  rel=${W#"$MNT"/}/stat; dir=$m/$rel
  mkdir "$dir"
  for ((i = 0; i < n; i++)); do echo "$i" > "$dir/f$i"; done
  echo "INFO after creating: $(mount_all_ops "$m")"
  # The creator may hold write delegations on what it made: unmounting returns them, so that
  # pass 1 starts with none (per-mount counts start again at zero)
  umount "$m"; mount -t nfs -o "$o" "$SERVER:$EXPORT" "$m"
  g0=$(mount_ops "$m" GETATTR); t0=$(now)
  find "$dir" -type f -print0 | xargs -0 stat -c %s > /dev/null
  g1=$(mount_ops "$m" GETATTR); t1=$(now)
  # Linux counts an OPEN by handle of a file it knows as OPEN_NOATTR
  opens0=$(( $(mount_ops "$m" OPEN) + $(mount_ops "$m" OPEN_NOATTR) ))
  find "$dir" -type f -print0 | xargs -0 cat > /dev/null
  opens1=$(( $(mount_ops "$m" OPEN) + $(mount_ops "$m" OPEN_NOATTR) ))
  g2=$(mount_ops "$m" GETATTR); t2=$(now)
  find "$dir" -type f -print0 | xargs -0 stat -c %s > /dev/null
  g3=$(mount_ops "$m" GETATTR); t3=$(now)
  echo "INFO after both passes: $(mount_all_ops "$m")"
  dr=$(mount_ops "$m" DELEGRETURN)
  echo "INFO stat pass 1 (no delegations): $((g1 - g0)) GETATTR for $n files in $(elapsed "$t0" "$t1")s;" \
       "pass 2 (after $((opens1 - opens0)) OPENs): $((g3 - g2)) GETATTR in $(elapsed "$t2" "$t3")s;" \
       "DELEGRETURN so far $dr"
  if [ "${STAT_ASSERT:-0}" = 1 ]; then
    case $VERS in 4.0|4.1|4.2)
      test $((g1 - g0)) -ge $((n / 2))             # pass 1 really went to the server
      test $(((g3 - g2) * 100)) -le $((g1 - g0)) ;; # pass 2: at most 1% of that
    esac
  fi
  cd /; rm -rf "$dir"
}
# A file changed on the server by a local process, not through NFS (LOCAL_CHANGE=1: run.sh's
# supervisor writes it): the client holds a read delegation on it and its data cached, so only a
# recall can tell it; it must read the new content within a few seconds.
s_local_change() {
  local f=$W/lc rel t0 i
  rel=${W#"$MNT"/}/lc
  echo old > "$f"; test "$(cat "$f")" = old; test "$(cat "$f")" = old   # opened, cached, delegated
  echo "before: $(mount_all_ops "$MNT")"
  ask_host local-write "$rel new"; t0=$(now)
  for _ in $(seq 300); do [ -e /share/local-write-done ] && break; sleep 0.1; done
  test -e /share/local-write-done
  for ((i = 0; i < 100; i++)); do [ "$(cat "$f")" = new ] && break; sleep 0.1; done
  echo "after: $(mount_all_ops "$MNT")"
  stat "$f"
  echo "INFO local write seen by the client $(elapsed "$t0" "$(now)")s after it was asked for"
  test "$(cat "$f")" = new
  rm -f "$f"
}
# pjdfstest (the Rust rewrite of the POSIX file-system suite) through a mount of an export that
# keeps root: the suite runs as root (chown, mknod of devices, setuid to its dummy users). The
# features are those Linux has (as in crates/tarn/tests/fuse_posix.rs); users nobody/nogroup and
# daemon/daemon exist in the guest. Prints one INFO summary line (run.sh puts the counts in its
# table) and one line per failed test with the suite's reason; fails on any failure not in
# PJD_ALLOW, and names allowed ones that passed (stale entries).
s_pjdfstest() {
  local o="vers=$VERS,sec=$SEC" out=$SCRATCH/pjdfstest.out cfg=$SCRATCH/pjdfstest.toml rc=0
  local sum d unexpected=() stale=() f
  m=$MNT-pjd                               # global: the EXIT trap below runs after the function
  [ -n "$MOUNT_OPTS" ] && o="$o,$MOUNT_OPTS"
  test -x /share/pjdfstest || { echo "no /share/pjdfstest (run.sh ships the host's ~/.cargo/bin/pjdfstest)"; return 1; }
  install -m 0755 /share/pjdfstest /usr/local/bin/pjdfstest
  mkdir -p "$m"
  echo "mount -t nfs -o $o $SERVER:$PJD_EXPORT $m"
  mount -t nfs -o "$o" "$SERVER:$PJD_EXPORT" "$m"
  trap 'cd /; umount "$m" 2>/dev/null || umount -f -l "$m"' EXIT
  d=$m/pjd-$$; mkdir "$d"; chmod 0755 "$d"
  test "$(stat -c %u "$d")" = 0                              # root is root on this export
  printf '%s\n' '[features]' 'posix_fallocate = {}' 'rename_ctime = {}' 'utime_now = {}' \
    'utimensat = {}' '[settings]' "naptime = $PJD_NAPTIME" 'allow_remount = false' '[dummy_auth]' \
    'entries = [ ["nobody", "nogroup"], ["daemon", "daemon"] ]' > "$cfg"
  # shellcheck disable=SC2086 # PJD_TESTS is a list of name filters
  (cd "$d" && pjdfstest -c "$cfg" -p "$d" ${PJD_TESTS:-}) > "$out" 2>&1 || rc=$?
  cp "$out" /share/pjdfstest.out 2>/dev/null || true
  sum=$(grep -m1 '^Summary:' "$out") || { echo "pjdfstest ended (rc=$rc) without its summary:"; tail -20 "$out"; return 1; }
  # each failed test with its reason (the indented lines after it, joined)
  awk '$NF == "FAILED" {if (n) print n "\t" r; n = $1; r = ""; next}
       /^[ \t]/ && n {gsub(/[ \t]+/, " "); r = r $0; next} {if (n) print n "\t" r; n = ""}
       END {if (n) print n "\t" r}' "$out" > "$SCRATCH/pjd-failed"
  while IFS=$'\t' read -r f why; do
    if [[ " ${PJD_ALLOW:-} " == *" $f "* ]]; then echo "INFO FAILED (allowed) $f:${why:0:200}"
    else unexpected+=("$f"); echo "INFO FAILED $f:${why:0:200}"; fi
  done < "$SCRATCH/pjd-failed"
  for f in ${PJD_ALLOW:-}; do
    grep -qE "^$f +ok$" "$out" && stale+=("$f")
  done
  [ ${#stale[@]} -gt 0 ] && echo "INFO allowed but passed (drop from PJD_ALLOW): ${stale[*]}"
  [ ${#unexpected[@]} -gt 0 ] && echo "INFO not allowed: ${unexpected[*]}"
  echo "INFO pjdfstest ${PJD_TESTS:-whole suite}: ${sum#Summary: } (${#unexpected[@]} not allowed)"
  cd /; rm -rf "$d"
  test ${#unexpected[@]} = 0
}
s_umount() {
  cd /; rm -rf "$W"
  # What the client did with delegations (NFSv4.1+: the server grants read delegations; each
  # DELEGRETURN is one the client had). Information only: the counts depend on the workload.
  case $VERS in 4.1|4.2) echo "INFO delegations: ops sent:" \
    "$(awk '/^[ \t]*(OPEN|OPEN_NOATTR|DELEGRETURN|TEST_STATEID|FREE_STATEID):/{printf "%s%s ", $1, $2}' /proc/self/mountstats)" ;; esac
  umount "$MNT"
  ! mountpoint -q "$MNT"
}
export -f now elapsed rate info drop_caches as_user must_fail ask_host tree_run fcntl_lock \
  s_mount s_smallfiles s_bigfile s_tree_create s_tree_ls s_tree_cp s_tree_diff s_tree_rm \
  s_links s_perms s_df s_locks s_mixed_locks s_restart_lock s_fio s_umount seek_at s_sparse \
  op_count s_copy xa s_xattr mount_ops mount_all_ops s_stat_pass s_local_change s_pjdfstest

echo "workload: server=$SERVER vers=$VERS sec=$SEC export=$EXPORT opts=${MOUNT_OPTS:-none} squash=$SQUASH" \
     "big=${BIG_MB}MiB tree=$TREE_N fio=${FIO_MB}MiB/${FIO_RUNTIME}s kernel=$(uname -r)"
step mount s_mount || summary                        # nothing else makes sense without a mount
STEPS="smallfiles bigfile tree_create tree_ls tree_cp tree_diff tree_rm links perms df locks"
[ -n "${MIXED_VERS:-}" ] && STEPS="$STEPS mixed_locks"
[ "${RESTART_LOCK:-0}" = 1 ] && STEPS="$STEPS restart_lock"
[ "$VERS" = 4.2 ] && STEPS="$STEPS sparse copy"       # SEEK, ALLOCATE, DEALLOCATE, COPY are NFSv4.2
[ "$VERS" = 4.2 ] && STEPS="$STEPS xattr"             # GETXATTR ... REMOVEXATTR are NFSv4.2 (RFC 8276)
[ "${LOCAL_CHANGE:-0}" = 1 ] && STEPS="$STEPS local_change"
STEPS="$STEPS stat_pass fio"
[ "${PJDFSTEST:-0}" = 1 ] && STEPS="$STEPS pjdfstest"
[ -n "${ONLY_STEPS:-}" ] && STEPS=$ONLY_STEPS      # debugging: just these steps (after mount)
for s in $STEPS; do
  step "${s//_/-}" "s_$s"; rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then     # a hung hard mount would hang every later step too
    echo "  aborting the remaining steps: step ${s//_/-} timed out (server hung?)"
    umount -f -l "$MNT" 2>/dev/null; summary
  fi
done
if ! step umount s_umount; then umount -f -l "$MNT" 2>/dev/null; fi
summary
