# tests/guest/krb5.sh - host side of the guest lab's Kerberos cases (sourced by run.sh).
# Per krb5 case, everything under <case>/krb5 (the case dir is made 0700: it holds keytabs):
#   a throwaway MIT realm TARN.LAB (kdb5_util + kadmin.local, no kadmind), principals
#     nfs/tarn-server.lab   Tarn's service key        -> krb5/tarn.keytab (host only)
#     host/nfsguest         the guest's machine key   -> krb5/lab-krb5/krb5.keytab (the guest's /etc/krb5.keytab)
#     labuser               the guest's uid 1000      -> krb5/lab-krb5/labuser.keytab (kinit -k in the guest)
#   krb5kdc -n on port 88 inside the case's namespace (the guest reaches it at 10.77.0.1),
#   Tarn's configuration (tarn.toml: the export accepts ONLY the case's flavor), and the lab's
#   user database (passwd/group: root, labuser 1000, nobody) that Tarn sees instead of the host's.
# Only AES-SHA1 keys: the guest kernel (6.1) does aes256/aes128-cts-hmac-sha1-96 and nothing newer.
# The guest mounts by name (tarn-server.lab): rpc.gssd builds the target principal from the name in
# the mount command, not from the address.
# Needs krb5-kdc, krb5-admin-server (kadmin.local, kdb5_util) and krb5-user (scripts/deps.sh --test).
KRB5_REALM=TARN.LAB
KRB5_SERVER_NAME=tarn-server.lab        # the guest's /etc/hosts maps it to $TARN_ADDR
KRB5_GUEST_NAME=nfsguest                # the guest's hostname (build.sh)
KRB5_IDMAP_DOMAIN=tarn.lab              # NFSv4 owner@domain, the same on both sides
KRB5_METRICS=127.0.0.1:9464             # Tarn's metrics, on the namespace's loopback only
KDC_PID=

krb5_tools_missing() {  # prints what is missing, if anything
  local t
  for t in krb5kdc kdb5_util kadmin.local; do
    command -v "$t" >/dev/null 2>&1 || [ -x "/usr/sbin/$t" ] || echo "$t"
  done
}

# The realm, its keytabs, Tarn's configuration and the files the guest gets.
krb5_realm() {  # CASEDIR FLAVOR
  local case=$1 flavor=$2 k=$1/krb5 p
  chmod 0700 "$case"
  rm -rf "$k"; mkdir -p "$k/lab-krb5" "$k/rcache"
  cat > "$k/krb5.conf" <<EOF
[libdefaults]
 default_realm = $KRB5_REALM
 dns_lookup_realm = false
 dns_lookup_kdc = false
 rdns = false
 dns_canonicalize_hostname = false
 permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
 default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96

[realms]
 $KRB5_REALM = {
  kdc = $TARN_ADDR:88
 }

[domain_realm]
 .tarn.lab = $KRB5_REALM
 tarn.lab = $KRB5_REALM
 $KRB5_GUEST_NAME = $KRB5_REALM
EOF
  kdc_conf "$k" "$KRB5_REALM" 88   # scripts/kdc.sh
  (
    export KRB5_CONFIG=$k/krb5.conf KRB5_KDC_PROFILE=$k/kdc.conf
    unset KRB5CCNAME KRB5_KTNAME
    # a random master password: nobody ever needs it again (the realm dies with the case)
    kdb5_util -r "$KRB5_REALM" create -s -P "$(head -c 24 /dev/urandom | base64)" > "$k/setup.log" 2>&1 || exit 1
    for p in "nfs/$KRB5_SERVER_NAME" "host/$KRB5_GUEST_NAME" labuser; do
      kadmin.local -r "$KRB5_REALM" -q "addprinc -randkey $p" >> "$k/setup.log" 2>&1 || exit 1
    done
    kadmin.local -r "$KRB5_REALM" -q "ktadd -k $k/tarn.keytab nfs/$KRB5_SERVER_NAME" >> "$k/setup.log" 2>&1 &&
    kadmin.local -r "$KRB5_REALM" -q "ktadd -k $k/lab-krb5/krb5.keytab host/$KRB5_GUEST_NAME" >> "$k/setup.log" 2>&1 &&
    kadmin.local -r "$KRB5_REALM" -q "ktadd -k $k/lab-krb5/labuser.keytab labuser" >> "$k/setup.log" 2>&1
  ) || { echo "krb5: realm setup failed:"; tail -20 "$k/setup.log"; return 1; }
  chmod 0600 "$k"/*.keytab "$k"/lab-krb5/*.keytab
  cp "$k/krb5.conf" "$k/lab-krb5/krb5.conf"
  # The lab's user database as Tarn sees it (bind-mounted over /etc/passwd and /etc/group in
  # Tarn's own mount namespace, see krb5_tarn_cmd): labuser@TARN.LAB is the local user labuser,
  # uid 1000 like the guest's, whatever this host calls uid 1000; machine principals are root,
  # squashed to nobody.  A real site shares its user database between clients and server too.
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'labuser:x:1000:1000::/home/labuser:/bin/sh' \
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' > "$k/passwd"
  printf '%s\n' 'root:x:0:' 'labuser:x:1000:' 'nogroup:x:65534:' > "$k/group"
  # The export accepts only this case's flavor: an AUTH_SYS call to it would be refused, so the
  # workload passing means the data went through RPCSEC_GSS at that service level.
  {
    lab_export "$case/export" / root
    printf '%s\n' "sec = [\"$flavor\"]" '' '[nfs4]' "idmap_domain = \"$KRB5_IDMAP_DOMAIN\""
  } > "$k/tarn.toml"
  printf '%s\n' "$KRB5_IDMAP_DOMAIN" > "$k/lab-krb5/idmap-domain"
  echo "krb5: realm $KRB5_REALM in $k (principals nfs/$KRB5_SERVER_NAME, host/$KRB5_GUEST_NAME, labuser; AES-SHA1 keys)"
}

# krb5kdc in the case's namespace: port 88 on 10.77.0.1 (the guest) and the namespace's loopback.
start_kdc() {  # CASEDIR -> sets KDC_PID
  local k=$1/krb5
  KRB5_CONFIG=$k/krb5.conf KRB5_KDC_PROFILE=$k/kdc.conf \
    ip netns exec "$NS" krb5kdc -n -r "$KRB5_REALM" > "$k/krb5kdc.out" 2>&1 < /dev/null &
  KDC_PID=$!
  for _ in $(seq 100); do
    kill -0 "$KDC_PID" 2>/dev/null || { echo "krb5kdc exited early:"; cat "$k/krb5kdc.out" "$k/kdc.log" 2>/dev/null | tail -20; return 1; }
    ip netns exec "$NS" ss -Htln "sport = :88" 2>/dev/null | grep -q . && {
      echo "krb5kdc: pid $KDC_PID in netns $NS, realm $KRB5_REALM on $TARN_ADDR:88"; return 0; }
    sleep 0.1
  done
  echo "krb5kdc is not listening on port 88 after 10 s"; return 1
}

# The command that runs Tarn for a krb5 case (printed NUL-separated for mapfile -d ''): its own
# mount namespace with the lab's passwd/group bind-mounted over /etc (principal -> uid, and NFSv4
# owner names, both read those files), the realm's krb5.conf, the service keytab, a replay cache
# in the case dir, metrics on the namespace's loopback.
krb5_tarn_cmd() {  # CASEDIR
  local k=$1/krb5
  printf '%s\0' ip netns exec "$NS" unshare --mount --propagation private -- \
    env -u KRB5_KTNAME -u KRB5CCNAME KRB5_CONFIG="$k/krb5.conf" KRB5RCACHEDIR="$k/rcache" \
    bash -c 'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/group && shift 2 && exec "$@"' _ \
    "$k/passwd" "$k/group" \
    "$TARN_BIN" serve --config "$k/tarn.toml" --keytab "$k/tarn.keytab" \
    --listen "$TARN_ADDR:$TARN_PORT" --metrics "$KRB5_METRICS" \
    --log-level "${TARN_LOG_LEVEL:-info,server::nlm=debug}" --grace "$TARN_GRACE" --state-dir "$1/state"
  # shellcheck disable=SC2086 # TARN_EXTRA_ARGS is a word list on purpose (as for the sys cases)
  [ -n "${TARN_EXTRA_ARGS:-}" ] && printf '%s\0' ${TARN_EXTRA_ARGS}
  return 0
}

tarn_metrics() {  # -> Prometheus text from the running Tarn of this case
  # shellcheck disable=SC2016 # expanded by the inner bash
  ip netns exec "$NS" timeout 5 bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1#*:}" &&
    printf "GET /metrics HTTP/1.0\r\nHost: lab\r\n\r\n" >&3 && cat <&3' _ "$KRB5_METRICS" 2>/dev/null
}

# Host-side evidence that the guest spoke RPCSEC_GSS to Tarn, as a STEP line (counted like the
# guest's): Tarn established contexts (metrics and log, by principal), the KDC issued tickets for
# nfs/tarn-server.lab, and Tarn dropped no GSS call (a dropped call is a stalled client request).
krb5_evidence() {  # CASEDIR -> prints [host] lines and one STEP host-gss line
  local case=$1 k=$1/krb5 m created dropped ok=PASS principals tgs
  m=$(tarn_metrics | tr -d '\r')
  created=$(awk '$1 ~ /^tarn_gss_contexts_created_total({})?$/ {print $2}' <<< "$m")
  dropped=$(awk '/^tarn_gss_dropped_calls_total/{s += $2} END{print s + 0}' <<< "$m")
  principals=$(grep 'RPCSEC_GSS context established' "$case/tarn.log" | grep -o 'principal=[^ ]*' \
    | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), substr($2, 11), $1}')
  tgs=$(grep -c "TGS_REQ.*for nfs/$KRB5_SERVER_NAME@$KRB5_REALM" "$k/kdc.log" 2>/dev/null)
  echo "  [host] tarn metrics: tarn_gss_contexts_created_total=${created:-none}, tarn_gss_dropped_calls_total=$dropped" \
       "($(grep '^tarn_gss_dropped_calls_total' <<< "$m" | grep -o 'reason="[a-z_]*"} [0-9]*' | tr -d '"}' | paste -sd ' '))"
  echo "  [host] tarn.log: contexts established: ${principals:-none}"
  # calls per program (NFS over GSS; NLM, which lockd always sends with AUTH_SYS, as with knfsd)
  echo "  [host] tarn metrics: calls by program: $(awk -F'[{}]' '/^tarn_op_calls_total\{/ {
      if (match($2, /program="[^"]*"/)) { p = substr($2, RSTART + 9, RLENGTH - 10); n[p] += $3 } }
      END { for (p in n) if (n[p] > 0) printf "%s %d; ", p, n[p] }' <<< "$m")"
  echo "  [host] kdc.log: $tgs service ticket(s) issued for nfs/$KRB5_SERVER_NAME; $(grep -c 'AS_REQ.*ISSUE' "$k/kdc.log" 2>/dev/null) TGT(s)"
  grep -q "labuser@$KRB5_REALM" <<< "$principals" || { ok=FAIL; echo "  [host] no context for labuser@$KRB5_REALM"; }
  grep -q "host/$KRB5_GUEST_NAME@$KRB5_REALM" <<< "$principals" || { ok=FAIL; echo "  [host] no context for the machine principal"; }
  { [ -n "$created" ] && awk -v c="$created" 'BEGIN{exit !(c > 0)}'; } || { ok=FAIL; echo "  [host] no GSS context in the metrics"; }
  [ "$dropped" = 0 ] || { ok=FAIL; echo "  [host] Tarn dropped $dropped RPCSEC_GSS call(s): the client would stall until it retransmits"; }
  echo "STEP host-gss $ok 0.0s"
}

# The realm's secrets are of no use after the case, but they are not left lying around either.
krb5_cleanup() {  # CASEDIR
  stop_pid "$KDC_PID"; KDC_PID=
  rm -f "$1"/krb5/*.keytab "$1"/krb5/lab-krb5/*.keytab "$1"/krb5/stash "$1"/vm/share/lab-krb5/*.keytab
}
