# scripts/kdc.sh - a throwaway MIT Kerberos realm for tests and benchmarks; source it, then
#   kdc_start DIR REALM ADDR PORT     creates DIR/krb5.conf (clients: KRB5_CONFIG=DIR/krb5.conf),
#                                     the database and krb5kdc; KDC_PID is its PID (kill it by that)
#   kdc_conf DIR REALM PORT           writes DIR/kdc.conf (REALM's KDC on PORT, its database, stash,
#                                     ACL and log in DIR) and an empty DIR/kadm5.acl
#   kdc_addprinc REALM NAME [PASSWORD] adds NAME (random key without a password)
#   kdc_ktadd REALM KEYTAB NAME...    writes the principals' keys into KEYTAB
#   kdc_kinit REALM NAME PASSWORD CCACHE [LIFETIME]   a credential cache (never a client keytab:
#                                     the library would renew silently and hide expiry)
#   kdc_nfs_realm DIR REALM PORT USER PASSWORD   kdc_start on 127.0.0.1:PORT, nfs/localhost's key in
#                                     DIR/nfs.keytab, USER added and kinit'ed into DIR/cc, and
#                                     KRB5_CONFIG and KRB5CCNAME exported for them
#   kdc_bench NAME                    for a benchmark with a realm: BIN (TARN_BIN, else the release
#                                     build, built if missing), DIR (/var/tmp/tarn-NAME.*, with a
#                                     world-writable export/ and state/) and PID (its server's, to
#                                     set); on exit the server and the KDC stop and DIR goes, and a
#                                     failed run shows the end of DIR/server.log
# aes256/aes128-cts-hmac-sha1-96 only (what the Linux client negotiates); clock skew 5 s so expiry
# tests need not wait the default five minutes. Needs krb5-kdc, krb5-admin-server, krb5-user.
KDC_DIR= KDC_PID=
kdc_env() { KRB5_CONFIG=$KDC_DIR/krb5.conf KRB5_KDC_PROFILE=$KDC_DIR/kdc.conf "$@"; }
kdc_start() {
  local dir=$1 realm=$2 addr=$3 port=$4
  KDC_DIR=$dir
  cat > "$dir/krb5.conf" <<CONF
[libdefaults]
 default_realm = $realm
 dns_lookup_realm = false
 dns_lookup_kdc = false
 rdns = false
 dns_canonicalize_hostname = false
 clockskew = 5
 udp_preference_limit = 1
[realms]
 $realm = {
  kdc = $addr:$port
 }
[domain_realm]
 localhost = $realm
CONF
  kdc_conf "$dir" "$realm" "$port"
  kdc_env kdb5_util -r "$realm" create -s -P "master-$RANDOM$RANDOM" > "$dir/kdb5_util.log" 2>&1 \
    || { cat "$dir/kdb5_util.log" >&2; return 1; }
  # Not through kdc_env: $! must be krb5kdc itself (a function would run in a subshell).
  KRB5_CONFIG=$dir/krb5.conf KRB5_KDC_PROFILE=$dir/kdc.conf krb5kdc -n -r "$realm" > /dev/null 2>&1 &
  KDC_PID=$!
  local i
  for i in $(seq 200); do
    (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && return 0
    kill -0 "$KDC_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "kdc.sh: krb5kdc does not listen on $addr:$port (see $dir/kdc.log)" >&2; return 1
}
kdc_conf() {
  local dir=$1 realm=$2 port=$3
  cat > "$dir/kdc.conf" <<CONF
[kdcdefaults]
 kdc_ports = $port
 kdc_tcp_ports = $port
[realms]
 $realm = {
  database_name = $dir/principal
  key_stash_file = $dir/stash
  acl_file = $dir/kadm5.acl
  max_life = 10h
  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
 }
[logging]
 kdc = FILE:$dir/kdc.log
CONF
  : > "$dir/kadm5.acl"
}
kdc_addprinc() {
  local realm=$1 name=$2 pw=${3:-}
  if [ -n "$pw" ]; then kdc_env kadmin.local -r "$realm" -q "addprinc -pw $pw $name"
  else kdc_env kadmin.local -r "$realm" -q "addprinc -randkey $name"; fi > /dev/null
}
kdc_ktadd() {
  local realm=$1 kt=$2; shift 2
  local p; for p in "$@"; do kdc_env kadmin.local -r "$realm" -q "ktadd -k $kt $p" > /dev/null; done
}
kdc_kinit() {
  local realm=$1 name=$2 pw=$3 cc=$4 life=${5:-10h}
  echo "$pw" | KRB5_CONFIG=$KDC_DIR/krb5.conf kinit -l "$life" -c "FILE:$cc" "$name@$realm" > /dev/null
}
kdc_nfs_realm() {
  local dir=$1 realm=$2 port=$3 user=$4 pw=$5
  # One chain: a step's failure is the function's status, under set -e or not.
  kdc_start "$dir" "$realm" 127.0.0.1 "$port" &&
    kdc_addprinc "$realm" nfs/localhost &&
    kdc_addprinc "$realm" "$user" "$pw" &&
    kdc_ktadd "$realm" "$dir/nfs.keytab" nfs/localhost &&
    kdc_kinit "$realm" "$user" "$pw" "$dir/cc" &&
    export KRB5_CONFIG=$dir/krb5.conf KRB5CCNAME=FILE:$dir/cc
}
kdc_bench() {
  KDC_BENCH=$1
  BIN=${TARN_BIN:-target/release/tarn}
  [ -x "$BIN" ] || cargo build --release -q -p tarn
  DIR=$(mktemp -d "/var/tmp/tarn-$1.XXXXXX")
  mkdir -p "$DIR/export" "$DIR/state"; chmod 0777 "$DIR/export"
  PID=
  trap kdc_bench_cleanup EXIT
}
kdc_bench_cleanup() {
  local rc=$?
  [ "$rc" = 0 ] || { echo "$KDC_BENCH.sh: failed; the server's log ends:" >&2; tail -20 "$DIR/server.log" >&2 || true; }
  [ -n "$PID" ] && { kill -TERM "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
  [ -n "$KDC_PID" ] && { kill -TERM "$KDC_PID" 2>/dev/null; wait "$KDC_PID" 2>/dev/null; }
  rm -rf "$DIR"
}
