# tests/guest/lock-holder.pl FILE PART1 PART2 MARK STEPS PAUSE WHEN   (runs INSIDE the guest; perl-base)
#   Holds a write lock on all of FILE (F_SETLKW) across a server's restart or failover: writes PART1
#   and fsyncs, creates MARKheld; once MARKgo exists writes PART2 and fsyncs ("fsync WHEN" if that
#   fails), creates MARKwrote; once MARKrel exists closes FILE, which drops the lock.  Each wait is
#   at most STEPS polls PAUSE seconds apart.  Used by workload.sh and tests/cluster/guest-failover.sh.
use Fcntl;
my ($f, $p1, $p2, $mark, $steps, $pause, $when) = @ARGV;
sub wait_for { my $n = shift; for (1..$steps) { return if -e $n; select(undef, undef, undef, $pause); } die "no $n\n"; }
sub put { my ($fh, $src) = @_; open(my $s, "<", $src) or die; local $/; my $d = <$s>;
          my $w = syswrite($fh, $d); die "write: $!\n" unless $w == length $d; }
open(my $fh, "+<", $f) or die "open $f: $!";
fcntl($fh, F_SETLKW, pack("s s x4 q q l x4", F_WRLCK, SEEK_SET, 0, 0, 0)) or die "lock: $!\n";
put($fh, $p1); $fh->sync or die "fsync: $!\n";
open(my $h, ">", "${mark}held") or die; close $h;
wait_for("${mark}go");
put($fh, $p2); $fh->sync or die "fsync $when: $!\n";
open($h, ">", "${mark}wrote") or die; close $h;
wait_for("${mark}rel");
close $fh or die "close: $!\n";
