# tests/guest/krb5-guest.sh - guest side of the lab's krb5 cases: sourced by cmd.sh inside the guest
# (as root), around workload.sh.  run.sh puts the realm's files in /share/lab-krb5 (krb5.conf, the
# machine keytab krb5.keytab with host/nfsguest, labuser.keytab, idmap-domain).
#   krb5_guest_up SERVER_NAME SERVER_ADDR   Kerberos client config, /etc/hosts entry for the server's
#                                           name, rpc_pipefs, rpc.gssd, uid 1000's tickets
#   krb5_guest_down                         prints STEP gss-tickets and STEP no-retrans, stops rpc.gssd
# Root's NFS calls use the machine credential (rpc.gssd takes host/nfsguest from /etc/krb5.keytab;
# Tarn maps it to root and squashes it); labuser's use labuser@TARN.LAB from /tmp/krb5cc_1000.
# rpc.gssd's log (-v: one line per context upcall, no secrets) goes to /share/gssd.log.
KRB5_LAB=/share/lab-krb5
GSSD_PID= KRB5_SVC=

krb5_guest_up() {
  local name=$1 addr=$2 domain
  install -m 0644 "$KRB5_LAB/krb5.conf" /etc/krb5.conf || return 1
  install -m 0600 "$KRB5_LAB/krb5.keytab" /etc/krb5.keytab || return 1
  # mount by name: rpc.gssd asks for a ticket to nfs/<the name in the mount command>
  echo "$addr $name" >> /etc/hosts
  KRB5_SVC=nfs/$name@   # gssd's caches may name it without the realm (a referral request)
  # NFSv4 owners: with RPCSEC_GSS the client sends owner@domain strings (numeric ids only with
  # AUTH_SYS), via nfsidmap (request-key, /etc/request-key.d/id_resolver.conf from nfs-common);
  # the domain must be Tarn's [nfs4] idmap_domain.  Tarn answers with numeric ids, which the
  # client takes as they are.
  domain=$(cat "$KRB5_LAB/idmap-domain")
  sed -i "s/^#* *Domain *=.*/Domain = $domain/" /etc/idmapd.conf
  grep -q "^Domain = $domain\$" /etc/idmapd.conf || return 1
  test -e /etc/request-key.d/id_resolver.conf || { echo "no /etc/request-key.d/id_resolver.conf"; return 1; }
  modprobe -a auth_rpcgss rpcsec_gss_krb5 || return 1
  # rpc.gssd talks to the kernel through rpc_pipefs, at Debian's pipefs-directory (/etc/nfs.conf)
  mkdir -p /run/rpc_pipefs
  mountpoint -q /run/rpc_pipefs || mount -t rpc_pipefs sunrpc /run/rpc_pipefs || return 1
  rpc.gssd -f -v > /share/gssd.log 2>&1 < /dev/null &
  GSSD_PID=$!
  # labuser's tickets where rpc.gssd looks for uid 1000's: /tmp/krb5cc_1000, owned by uid 1000
  kinit -k -t "$KRB5_LAB/labuser.keytab" -c FILE:/tmp/krb5cc_1000 labuser || return 1
  chown 1000:1000 /tmp/krb5cc_1000
  sleep 0.5; kill -0 "$GSSD_PID" 2>/dev/null || { echo "rpc.gssd died:"; cat /share/gssd.log; return 1; }
  echo "krb5: rpc.gssd pid $GSSD_PID; $name = $addr; idmap domain $domain;" \
       "labuser: $(klist -c FILE:/tmp/krb5cc_1000 2>/dev/null | awk '/^Default principal/{print $3}')"
}

# a one-line summary of a credential cache: its principal and the services it holds tickets for
cc_services() {  # CCACHE
  klist -c "$1" 2>/dev/null | awk '/^Default principal/{p = $3} /^[0-9]/ && $5 !~ /^krbtgt/{s = s " " $5}
    END{print p ":" (s == "" ? " no service tickets" : s)}'
}

krb5_guest_down() {
  local svc=$KRB5_SVC mcc rc=0 retrans
  # Tickets for Tarn's service principal in the machine's and labuser's caches: the kernel's
  # GSS upcalls were answered with contexts for nfs/<server name> (Tarn's log and the KDC's log,
  # checked on the host, say which principals and realm).
  mcc=$(ls /tmp/krb5ccmachine_* 2>/dev/null | head -1)
  echo "krb5: machine cache ${mcc:-none}: $( [ -n "$mcc" ] && cc_services "FILE:$mcc")"
  echo "krb5: uid 1000 cache: $(cc_services FILE:/tmp/krb5cc_1000)"
  if [ -n "$mcc" ] && cc_services "FILE:$mcc" | grep -qF " $svc" && cc_services FILE:/tmp/krb5cc_1000 | grep -qF " $svc"; then
    echo "STEP gss-tickets PASS 0.0s"; echo "  root (machine credential) and labuser hold tickets for ${svc}REALM"
  else
    echo "STEP gss-tickets FAIL 0.0s"; echo "  expected tickets for $svc in both caches"; rc=1
  fi
  # A reply the client could not use (or never got) shows as a retransmission: TCP mounts retransmit
  # only after timeo (60 s), so a stall may not fail a step by itself.  rpc line: calls retrans authrefresh
  retrans=$(awk '$1 == "rpc" {print $3}' /proc/net/rpc/nfs)
  if [ "$retrans" = 0 ]; then echo "STEP no-retrans PASS 0.0s"
  else echo "STEP no-retrans FAIL 0.0s"; rc=1; fi
  echo "  /proc/net/rpc/nfs: $(awk '$1 == "rpc" {print $2 " calls, " $3 " retransmissions, " $4 " auth refreshes"}' /proc/net/rpc/nfs)"
  # NFSv4: the owner names nfsidmap resolved for the kernel (id_resolver keys; none for NFSv3)
  echo "krb5: id_resolver keys: $(awk '$8 ~ /^id_resolv/ {sub(/:$/, "", $9); print $9}' /proc/keys | sort | paste -sd ' ')"
  kill "$GSSD_PID" 2>/dev/null; wait "$GSSD_PID" 2>/dev/null
  return $rc
}
