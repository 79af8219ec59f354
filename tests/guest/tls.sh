# tests/guest/tls.sh - host side of the guest lab's RPC-with-TLS cases (RFC 9289, xprtsec=tls and
# xprtsec=mtls from the Debian 13 guest's tlshd); sourced by run.sh.
# Per case, everything under <case>/tls (the case dir is made 0700: it holds private keys):
#   a throwaway CA (openssl, EC P-256, valid 2 days; its key never leaves the case dir)
#     server.pem/.key   Tarn's certificate: SAN IP:10.77.0.1 (the guest mounts by address) and
#                       DNS:tarn-server.lab (the name the guest's /etc/hosts gives that address);
#                       also IP:127.0.0.1, for knfsd in the guest (the reference cases)
#     client.pem/.key   the guest's certificate for mtls: CN=nfsguest, SAN DNS:nfsguest, clientAuth
#     other-ca.pem + untrusted-client.pem/.key   a second CA and a client certificate it signed,
#                       which Tarn must refuse (for the "untrusted client" check once TLS lands)
#   lab-tls/          what the guest gets in /share/lab-tls: ca.pem, client.pem, client.key, mode,
#                     canary.bin (its pattern in canary.txt), and for mtls the untrusted pair
#   capture.pcap      tcpdump of the tap device over the whole case (tls_capture_start/stop)
#   tarn.toml         Tarn's configuration: the export requires TLS (xprtsec), AUTH_SYS inside it
# Tarn is started with --tls-cert/--tls-key (and --tls-client-ca for mtls) and --config tarn.toml.
TLS_SERVER_NAME=tarn-server.lab
TLS_DAYS=2

tls_tools_missing() { command -v openssl >/dev/null 2>&1 || echo openssl; }

tls_ca() {  # CASEDIR MODE(tls|mtls) [SERVER(tarn|knfsd)]
  local case=$1 mode=$2 t=$1/tls server=${3:-tarn}
  chmod 0700 "$case"
  rm -rf "$t"; mkdir -p "$t/lab-tls"
  (
    set -e
    cd "$t"
    ossl() { openssl "$@" >> setup.log 2>&1; }
    mkca() {  # NAME CN
      ossl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$TLS_DAYS" \
        -subj "/O=Tarn guest lab/CN=$2" -keyout "$1.key" -out "$1.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    }
    leaf() {  # NAME CA CN EXT
      ossl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=Tarn guest lab/CN=$3" \
        -keyout "$1.key" -out "$1.csr"
      printf '%s\n' "$4" > "$1.ext"
      ossl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -days "$TLS_DAYS" \
        -extfile "$1.ext" -out "$1.pem"
    }
    mkca ca "Tarn lab CA"
    mkca other-ca "Tarn lab other CA"
    leaf server ca "$TLS_SERVER_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:$TARN_ADDR,IP:127.0.0.1,DNS:$TLS_SERVER_NAME"
    leaf client ca nfsguest "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:nfsguest"
    leaf untrusted-client other-ca nfsguest "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
subjectAltName=DNS:nfsguest"
    ossl verify -CAfile ca.pem server.pem client.pem
    chmod 0600 ./*.key
    cp ca.pem lab-tls/ca.pem
    # mtls: the guest presents client.pem (and, to be refused, untrusted-client.pem); tls: the
    # guest only checks the server against ca.pem
    [ "$mode" = mtls ] && cp client.pem client.key untrusted-client.pem untrusted-client.key lab-tls/
    # knfsd, the reference, serves from inside the guest: its tlshd needs the server's pair
    [ "$server" = knfsd ] && cp server.pem server.key lab-tls/
    echo "$mode" > lab-tls/mode
    # The canary: 1 MiB of a pattern made here, which the guest writes and reads back over TLS;
    # the capture of the tap device must not contain it (tls_evidence).
    echo "TARN-TLS-CANARY-$(openssl rand -hex 12)" > canary.txt
    { yes "$(cat canary.txt)" || true; } | head -c $((1 << 20)) > lab-tls/canary.bin   # (yes ends on SIGPIPE)
  ) || { echo "tls: CA setup failed:"; tail -20 "$t/setup.log"; return 1; }
  # The export accepts only RPC-with-TLS (and, for mtls, only a client whose certificate the CA
  # signed): the workload passing means the data went through TLS.
  { lab_export "$case/export" / root; echo "xprtsec = [\"$mode\"]"; } > "$t/tarn.toml"
  local who=; [ "$mode" = mtls ] && who=", client certificate CN=nfsguest"
  echo "tls: throwaway CA in $t (server certificate $TARN_ADDR + $TLS_SERVER_NAME$who), export xprtsec=[$mode]"
}

# The `tarn serve` arguments of a TLS case (printed NUL-separated for mapfile -d '')
tls_tarn_args() {  # CASEDIR MODE
  local t=$1/tls
  printf '%s\0' --config "$t/tarn.toml" --tls-cert "$t/server.pem" --tls-key "$t/server.key"
  [ "$2" = mtls ] && printf '%s\0' --tls-client-ca "$t/ca.pem"
  return 0
}

# The capture of the case's tap device, from before the guest boots until it is off.
TLS_CAP_PID=
tls_capture_start() {  # CASEDIR NETNS
  command -v tcpdump >/dev/null || { echo "tls: no tcpdump (scripts/deps.sh --test): no capture"; return 0; }
  ip netns exec "$2" tcpdump -Z root -i "${TAP:-tap0}" -U -s 0 -w "$1/tls/capture.pcap" > "$1/tls/tcpdump.log" 2>&1 < /dev/null &
  TLS_CAP_PID=$!
  for _ in $(seq 50); do grep -q listening "$1/tls/tcpdump.log" 2>/dev/null && return 0; sleep 0.1; done
  echo "tls: tcpdump did not start:"; cat "$1/tls/tcpdump.log"
}
tls_capture_stop() {
  [ -n "$TLS_CAP_PID" ] || return 0
  kill -INT "$TLS_CAP_PID" 2>/dev/null; wait "$TLS_CAP_PID" 2>/dev/null; TLS_CAP_PID=
}

# Host-side evidence of a TLS case, as STEP lines:
#   tls-capture: the capture holds the plaintext STARTTLS replies (so it sees RPC in the clear
#     where there is some) and not one copy of the canary the guest wrote and read back over TLS;
#   tls-untrusted-logged (mtls): Tarn logged the untrusted certificate's handshake as unknown-ca.
tls_evidence() {  # CASEDIR MODE
  local t=$1/tls pat n starttls
  if [ -s "$t/capture.pcap" ]; then
    pat=$(cat "$t/canary.txt")
    n=$(grep -a -c -F "$pat" "$t/capture.pcap")
    starttls=$(grep -a -c -F STARTTLS "$t/capture.pcap")
    echo "  capture of the tap: $(stat -c %s "$t/capture.pcap") bytes; packets with the canary in clear: $n;" \
         "with the STARTTLS verifier in clear: $starttls"
    # (kept only when it fails: the workload makes it hundreds of MB)
    if [ "$n" = 0 ] && [ "$starttls" -gt 0 ]; then echo "STEP tls-capture PASS 0.0s"; rm -f "$t/capture.pcap"
    else echo "STEP tls-capture FAIL 0.0s"; fi
  else
    echo "STEP tls-capture FAIL 0.0s"; echo "  no capture (tcpdump missing or failed)"
  fi
  if [ "$2" = mtls ]; then
    n=$(grep -c 'TLS handshake failed.*unknown-ca' "$1/tarn.log")
    if [ "$n" -gt 0 ]; then echo "STEP tls-untrusted-logged PASS 0.0s"; else echo "STEP tls-untrusted-logged FAIL 0.0s"; fi
    echo "  tarn.log: $n handshake(s) failed as unknown-ca; $(grep -c 'TLS handshake done' "$1/tarn.log") done"
  fi
  return 0
}
