#!/bin/bash
# scripts/bench-gss.sh - the RPCSEC_GSS benchmark (issue 5). A throwaway MIT realm on loopback
# (scripts/kdc.sh), Tarn exporting a temporary directory with sys, krb5, krb5i and krb5p, then:
#   1. 1 MiB READ and WRITE under each flavor, in one `tarn bench` run: each Kerberos row says
#      its throughput as a share of sys;
#   2. 128 calls in flight on one krb5p context over one connection for GSS_SECONDS (default 60):
#      any call the server drops fails the run, and the server's drop counter is printed.
# Env: TARN_BIN, SECONDS_PER_RUN (default 5), GSS_SECONDS (60), INFLIGHT (1,16).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/kdc.sh
kdc_bench bench-gss
REALM=TARN.BENCH
port() { echo $(( 20000 + RANDOM % 20000 )); }
KPORT=$(port) PORT=$(port) MPORT=$(port)
kdc_nfs_realm "$DIR" "$REALM" "$KPORT" bench "bench-pw-$RANDOM$RANDOM"
# The bench principal is the bench's AUTH_SYS user (uid 1000), through the static principal map.
cat > "$DIR/tarn.toml" <<CONF
listen = "127.0.0.1:$PORT"
[[export]]
path = "$DIR/export"
pseudo = "/"
clients = ["127.0.0.1"]
sec = ["sys", "krb5", "krb5i", "krb5p"]
[gss]
keytab = "$DIR/nfs.keytab"
[gss.principals]
"bench@$REALM" = "1000:1000"
CONF
"$BIN" serve --config "$DIR/tarn.toml" --state-dir "$DIR/state" --metrics "127.0.0.1:$MPORT" \
  --log-level warn > "$DIR/server.out" 2> "$DIR/server.log" &
PID=$!
for _ in $(seq 100); do grep -q "tarn: exporting" "$DIR/server.out" 2>/dev/null && break; sleep 0.05; done
grep -q "tarn: exporting" "$DIR/server.out" || { cat "$DIR/server.log" >&2; exit 1; }
echo "== 1 MiB READ and WRITE per flavor (one context per connection) =="
"$BIN" bench --server "127.0.0.1:$PORT" --server-pid "$PID" --sec sys,krb5,krb5i,krb5p \
  --ops read1m,write1m --inflight "${INFLIGHT:-1,16}" --seconds "${SECONDS_PER_RUN:-5}" --file-size 256M
echo "== 128 calls in flight on one krb5p context, one connection, ${GSS_SECONDS:-60} s =="
"$BIN" bench --server "127.0.0.1:$PORT" --server-pid "$PID" --sec krb5p --ops read4k,write4k \
  --inflight 128 --seconds "$(( ${GSS_SECONDS:-60} / 2 ))" --file-size 64M \
  --server-metrics "127.0.0.1:$MPORT"
