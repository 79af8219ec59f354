# tests/guest/tls-guest.sh - guest side of the lab's RPC-with-TLS cases (Debian 13 guest only: it
# has ktls-utils): sourced by cmd.sh inside the guest (as root), around workload.sh.  run.sh puts
# the case's files in /share/lab-tls (ca.pem, mode = tls|mtls, and for mtls client.pem, client.key).
#   tls_guest_check             kernel side only: kTLS (modprobe tls) and the netlink "handshake"
#                               family the NFS client's TLS upcall uses; prints what it found
#   tls_guest_up SERVER_ADDR    /etc/tlshd.conf, tlshd started (log /share/tlshd.log), checks it runs;
#                               with /share/lab-tls/server.pem (knfsd cases) tlshd serves knfsd's side
#   tls_knfsd_export            knfsd's /srv/export for 127.0.0.1 again, with xprtsec= of the mode
#   tls_guest_checks SERVER_ADDR VERS OPTS   after the workload: STEP tls-canary (the host's
#                               canary file written and read back over TLS, for the host's capture),
#                               STEP tls-plain-refused (a mount without xprtsec= fails), and for mtls
#                               STEP tls-untrusted-refused (tlshd presenting a certificate of a CA
#                               Tarn does not trust cannot mount)
#   tls_guest_down              stops tlshd, prints STEP tls-handshakes (tlshd saw a handshake succeed)
TLS_LAB=/share/lab-tls
TLSHD_PID=

tls_guest_check() {
  modprobe tls || { echo "tls: modprobe tls failed (no CONFIG_TLS?)"; return 1; }
  # the kernel's handshake upcall (net/handshake, CONFIG_NET_HANDSHAKE) is a generic netlink family;
  # the NFS client asks it for a TLS session, tlshd listens on it
  local fam
  fam=$(perl -e '
    use Socket; socket(my $s, 16, SOCK_RAW, 16) or die "netlink: $!\n";   # AF_NETLINK, NETLINK_GENERIC
    my $name = "handshake\0"; my $attr = pack("SS", 4 + length($name), 2) . $name;  # CTRL_ATTR_FAMILY_NAME
    $attr .= "\0" x ((4 - length($attr) % 4) % 4);
    my $msg = pack("CCS", 3, 1, 0) . $attr;                                   # CTRL_CMD_GETFAMILY v1
    my $hdr = pack("LSSLL", 16 + length($msg), 16, 1, 1, 0);                  # GENL_ID_CTRL, NLM_F_REQUEST
    send($s, $hdr . $msg, 0) or die "send: $!\n"; recv($s, my $r, 8192, 0);
    my ($len, $type) = unpack("LS", $r);
    if ($type == 2) { my $err = unpack("l", substr($r, 16, 4)); print "absent (errno ", -$err, ")\n"; exit 1 }
    print "present\n";') || { echo "tls: netlink family handshake: $fam"; return 1; }
  echo "tls: kernel $(uname -r): tls module $(lsmod | awk '$1=="tls"{print "loaded"}'), netlink family handshake $fam," \
       "CONFIG_TLS=$(grep -h '^CONFIG_TLS=' /boot/config-"$(uname -r)" 2>/dev/null | cut -d= -f2)" \
       "CONFIG_NET_HANDSHAKE=$(grep -h '^CONFIG_NET_HANDSHAKE=' /boot/config-"$(uname -r)" 2>/dev/null | cut -d= -f2)"
}

tls_guest_up() {
  local addr=$1 mode
  mode=$(cat "$TLS_LAB/mode")
  tls_guest_check || return 1
  command -v tlshd >/dev/null || { echo "tls: no tlshd (ktls-utils) in this guest"; return 1; }
  mkdir -p /etc/tlshd
  install -m 0644 "$TLS_LAB/ca.pem" /etc/tlshd/ca.pem || return 1
  {
    echo '[debug]'
    echo 'loglevel=1'
    echo 'tls=0'
    echo 'nl=0'
    if [ -e "$TLS_LAB/server.pem" ]; then   # knfsd in this guest: tlshd does its side too
      install -m 0644 "$TLS_LAB/server.pem" /etc/tlshd/server.pem || return 1
      install -m 0600 "$TLS_LAB/server.key" /etc/tlshd/server.key || return 1
      echo '[authenticate.server]'
      echo 'x509.truststore=/etc/tlshd/ca.pem'
      echo 'x509.certificate=/etc/tlshd/server.pem'
      echo 'x509.private_key=/etc/tlshd/server.key'
    fi
    echo '[authenticate.client]'
    echo 'x509.truststore=/etc/tlshd/ca.pem'
    if [ "$mode" = mtls ]; then
      install -m 0644 "$TLS_LAB/client.pem" /etc/tlshd/client.pem || return 1
      install -m 0600 "$TLS_LAB/client.key" /etc/tlshd/client.key || return 1
      echo 'x509.certificate=/etc/tlshd/client.pem'
      echo 'x509.private_key=/etc/tlshd/client.key'
    fi
  } > /etc/tlshd.conf
  echo "$addr tarn-server.lab" >> /etc/hosts
  # -s: log to stderr, not syslog (there is no syslog in the guest)
  tlshd -s > /share/tlshd.log 2>&1 < /dev/null &
  TLSHD_PID=$!
  sleep 0.5; kill -0 "$TLSHD_PID" 2>/dev/null || { echo "tls: tlshd died:"; cat /share/tlshd.log; return 1; }
  echo "tls: tlshd pid $TLSHD_PID ($(dpkg-query -W -f '${Version}' ktls-utils 2>/dev/null)), mode $mode," \
       "trusts the lab CA$([ "$mode" = mtls ] && echo ", presents client.pem")"
}

tls_knfsd_export() {
  local mode
  mode=$(cat "$TLS_LAB/mode")
  exportfs -u 127.0.0.1:/srv/export || return 1
  exportfs -o "rw,no_root_squash,insecure,no_subtree_check,xprtsec=$mode" 127.0.0.1:/srv/export || return 1
  echo "tls: knfsd exports: $(exportfs -v | tr -s ' \n\t' ' ')"
}

# One STEP line as workload.sh prints them: NAME, then a command that must succeed.
tls_step() {
  local name=$1 t0 rc; shift
  t0=$(date +%s.%N)
  "$@" > "/tmp/$name.log" 2>&1; rc=$?
  echo "STEP $name $([ $rc = 0 ] && echo PASS || echo FAIL) $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')s"
  sed 's/^/  /' "/tmp/$name.log" | tail -n 12
  return $rc
}

# Mount attempts that must fail are bounded: soft, one retransmission, no mount retries, and a
# timeout around it all (a kernel that kept retrying would otherwise hang the case).
TLS_REFUSE_OPTS=soft,timeo=50,retrans=1,retry=0
tls_must_not_mount() {  # VERS OPTS SERVER_ADDR: the mount fails (or never completes)
  local m=/mnt/tls-refused rc
  mkdir -p $m
  timeout -k 5 120 mount -t nfs -o "vers=$1,${2:+$2,}$TLS_REFUSE_OPTS" "$3:$TLS_EXPORT" $m; rc=$?
  if [ $rc = 0 ]; then
    echo "mounted, though it must not: $(grep " $m " /proc/mounts)"
    ls $m >/dev/null 2>&1 && echo "and a listing worked"
    umount -f $m; return 1
  fi
  echo "mount refused (exit $rc$([ $rc = 124 ] && echo ', timed out'))"
}

tls_canary() {  # VERS OPTS SERVER_ADDR MODE
  local m=/mnt/tls-canary
  mkdir -p $m
  mount -t nfs -o "vers=$1,${2:+$2,}xprtsec=$4" "$3:$TLS_EXPORT" $m || return 1
  cp "$TLS_LAB/canary.bin" $m/canary.bin && sync || { umount $m; return 1; }
  umount $m || return 1
  # a fresh mount: the read comes from the server, not this client's page cache
  mount -t nfs -o "vers=$1,${2:+$2,}xprtsec=$4" "$3:$TLS_EXPORT" $m || return 1
  cmp "$TLS_LAB/canary.bin" $m/canary.bin && rm $m/canary.bin; local rc=$?
  umount $m; [ $rc = 0 ] && echo "$(stat -c %s "$TLS_LAB/canary.bin") bytes of the canary written and read back over TLS"
  return $rc
}

tls_untrusted() {  # VERS OPTS SERVER_ADDR: tlshd presents a certificate Tarn's client CA did not sign
  local conf=/etc/tlshd.conf rc
  install -m 0644 "$TLS_LAB/untrusted-client.pem" /etc/tlshd/untrusted.pem || return 1
  install -m 0600 "$TLS_LAB/untrusted-client.key" /etc/tlshd/untrusted.key || return 1
  cp $conf $conf.trusted
  sed -i 's#/etc/tlshd/client.pem#/etc/tlshd/untrusted.pem#; s#/etc/tlshd/client.key#/etc/tlshd/untrusted.key#' $conf
  kill "$TLSHD_PID"; wait "$TLSHD_PID" 2>/dev/null
  tlshd -s >> /share/tlshd.log 2>&1 < /dev/null & TLSHD_PID=$!
  sleep 0.5
  tls_must_not_mount "$1" "${2:+$2,}xprtsec=mtls" "$3"; rc=$?
  # back to the trusted certificate (tls_guest_down looks for the earlier successes in the log)
  mv $conf.trusted $conf
  kill "$TLSHD_PID"; wait "$TLSHD_PID" 2>/dev/null
  tlshd -s >> /share/tlshd.log 2>&1 < /dev/null & TLSHD_PID=$!
  return $rc
}

TLS_EXPORT=/
tls_guest_checks() {  # SERVER_ADDR VERS OPTS [EXPORT] (the workload's mount options, without xprtsec)
  local addr=$1 vers=$2 opts=$3 mode rc=0
  TLS_EXPORT=${4:-/}
  mode=$(cat "$TLS_LAB/mode")
  tls_step tls-canary tls_canary "$vers" "$opts" "$addr" "$mode" || rc=1
  tls_step tls-plain-refused tls_must_not_mount "$vers" "$opts" "$addr" || rc=1
  if [ "$mode" = mtls ]; then tls_step tls-untrusted-refused tls_untrusted "$vers" "$opts" "$addr" || rc=1; fi
  return $rc
}

tls_guest_down() {
  local rc=0
  if [ -n "$TLSHD_PID" ]; then kill "$TLSHD_PID" 2>/dev/null; wait "$TLSHD_PID" 2>/dev/null; fi
  # the workload's mounts were made with xprtsec=: tlshd must have completed handshakes for them
  if grep -qi 'handshake.*success\|success.*handshake' /share/tlshd.log; then
    echo "STEP tls-handshakes PASS 0s"
    echo "  tlshd: $(grep -ci 'success' /share/tlshd.log) successful handshake line(s)"
  else
    echo "STEP tls-handshakes FAIL 0s"; sed 's/^/  | /' /share/tlshd.log | tail -20; rc=1
  fi
  return $rc
}
