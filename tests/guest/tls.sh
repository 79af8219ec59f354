# tests/guest/tls.sh - host side of the guest lab's RPC-with-TLS cases (RFC 9289, xprtsec=tls and
# xprtsec=mtls from the Debian 13 guest's tlshd); sourced by run.sh.
# Per case, everything under <case>/tls (the case dir is made 0700: it holds private keys):
#   a throwaway CA (openssl, EC P-256, valid 2 days; its key never leaves the case dir)
#     server.pem/.key   Tarn's certificate: SAN IP:10.77.0.1 (the guest mounts by address) and
#                       DNS:tarn-server.lab (the name the guest's /etc/hosts gives that address)
#     client.pem/.key   the guest's certificate for mtls: CN=nfsguest, SAN DNS:nfsguest, clientAuth
#     other-ca.pem + untrusted-client.pem/.key   a second CA and a client certificate it signed,
#                       which Tarn must refuse (for the "untrusted client" check once TLS lands)
#   lab-tls/          what the guest gets in /share/lab-tls: ca.pem, client.pem, client.key, mode
#   tarn.toml         Tarn's configuration: the export requires TLS (xprtsec), AUTH_SYS inside it
# Tarn is started with --tls-cert/--tls-key (and --tls-client-ca for mtls) and --config tarn.toml.
TLS_SERVER_NAME=tarn-server.lab
TLS_DAYS=2

tls_tools_missing() { command -v openssl >/dev/null 2>&1 || echo openssl; }

tls_ca() {  # CASEDIR MODE(tls|mtls)
  local case=$1 mode=$2 t=$1/tls
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
subjectAltName=IP:$TARN_ADDR,DNS:$TLS_SERVER_NAME"
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
    # mtls: the guest presents client.pem; tls: the guest only checks the server against ca.pem
    [ "$mode" = mtls ] && cp client.pem client.key lab-tls/
    echo "$mode" > lab-tls/mode
  ) || { echo "tls: CA setup failed:"; tail -20 "$t/setup.log"; return 1; }
  # The export accepts only RPC-with-TLS (and, for mtls, only a client whose certificate the CA
  # signed): the workload passing means the data went through TLS.
  cat > "$t/tarn.toml" <<EOF
[[export]]
path = "$case/export"
pseudo = "/"
clients = ["10.77.0.0/24"]
squash = "root"
xprtsec = ["$mode"]
EOF
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
