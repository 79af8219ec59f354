//! RPC-with-TLS (RFC 9289): a NULL call with AUTH_TLS is answered with the
//! STARTTLS verifier, then both ends run a TLS 1.3 handshake (ALPN
//! "sunrpc") on the same TCP connection and speak RPC inside it.
//!
//! The handshake runs in user space (rustls); the record layer then stays
//! there or goes to the kernel ([`crate::ktls_offload`], `tls.ktls`).

use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::{OpaqueAuth, AUTH_NONE};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio_rustls::rustls;

/// The AUTH_TLS credential flavor (RFC 9289 §4.1).
pub const AUTH_TLS: u32 = 7;
/// The body of the verifier that tells the client to start TLS.
pub const STARTTLS: &[u8] = b"STARTTLS";
/// The ALPN protocol name both ends offer (RFC 9289 §5.1.3).
pub const ALPN: &[u8] = b"sunrpc";

/// How a connection is protected, weakest first (knfsd's xprtsec names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XprtSec {
    /// Plain TCP.
    #[default]
    None,
    /// TLS, the client not authenticated by a certificate.
    Tls,
    /// TLS with a client certificate verified against the client CA.
    Mtls,
}

impl XprtSec {
    pub const ALL: [XprtSec; 3] = [XprtSec::None, XprtSec::Tls, XprtSec::Mtls];

    pub fn name(self) -> &'static str {
        match self {
            XprtSec::None => "none",
            XprtSec::Tls => "tls",
            XprtSec::Mtls => "mtls",
        }
    }
}

impl std::str::FromStr for XprtSec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(XprtSec::None),
            "tls" => Ok(XprtSec::Tls),
            "mtls" => Ok(XprtSec::Mtls),
            o => Err(format!("{o:?}: expected \"none\", \"tls\" or \"mtls\"")),
        }
    }
}

impl std::fmt::Display for XprtSec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// If `rec` (one record, mark removed) is a NULL call with an AUTH_TLS
/// credential, its xid. Looked at before the pipeline: the answer changes
/// the connection, not just one reply.
pub fn starttls_probe(rec: &[u8]) -> Option<u32> {
    let w = |i: usize| -> Option<u32> {
        rec.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    // xid, CALL, rpcvers 2, prog, vers, proc 0, cred flavor.
    (w(1)? == 0 && w(2)? == 2 && w(5)? == 0 && w(6)? == AUTH_TLS).then_some(w(0)?)
}

/// The reply to a STARTTLS probe, record mark included: accepted, SUCCESS,
/// an AUTH_NONE verifier whose body is "STARTTLS" (RFC 9289 §4.1).
pub fn starttls_reply(xid: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(40);
    crate::record::begin(&mut out);
    crate::msg::success_header_verf(
        xid,
        OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::from_static(STARTTLS),
        },
        &mut out,
    );
    crate::record::finish(&mut out);
    out.freeze()
}

/// The NULL call a client sends to ask for TLS, record mark included.
pub fn starttls_call(xid: u32, prog: u32, vers: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(48);
    crate::record::begin(&mut out);
    for w in [xid, 0, 2, prog, vers, 0, AUTH_TLS, 0, AUTH_NONE, 0] {
        out.put_u32(w);
    }
    crate::record::finish(&mut out);
    out.freeze()
}

/// Whether `rec` (mark removed) is an accepted, successful reply to `xid`
/// carrying the STARTTLS verifier.
pub fn is_starttls_reply(rec: &[u8], xid: u32) -> bool {
    let mut want = BytesMut::new();
    crate::msg::success_header_verf(
        xid,
        OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::from_static(STARTTLS),
        },
        &mut want,
    );
    rec == &want[..]
}

fn read_pem(path: &Path) -> Result<BufReader<std::fs::File>, String> {
    std::fs::File::open(path)
        .map(BufReader::new)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut read_pem(path)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no PEM \"CERTIFICATE\" block found",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    rustls_pemfile::private_key(&mut read_pem(path)?)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no PEM private key found", path.display()))
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut r = rustls::RootCertStore::empty();
    for c in load_certs(path)? {
        r.add(c)
            .map_err(|e| format!("{}: bad CA certificate: {e}", path.display()))?;
    }
    Ok(r)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where the server's TLS material lives (read again on reload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA that client certificates must chain to (mTLS); without it no
    /// client certificate is asked for.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads and checks the files: a rustls server configuration, TLS 1.3
    /// only, ALPN "sunrpc".
    pub fn load(&self) -> Result<rustls::ServerConfig, String> {
        let certs = load_certs(&self.cert)?;
        let key = load_key(&self.key)?;
        let b = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?;
        let b = match &self.client_ca {
            // Certificates are optional: "tls" exports take clients
            // without one, "mtls" exports want a verified one.
            Some(ca) => b.with_client_cert_verifier(Arc::new(crate::tls_events::Recording(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(ca)?),
                    provider(),
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?,
            ))),
            None => b.with_no_client_auth(),
        };
        let mut c = b.with_single_cert(certs, key).map_err(|e| {
            format!(
                "{} / {}: certificate and key do not go together: {e}",
                self.cert.display(),
                self.key.display()
            )
        })?;
        c.alpn_protocols = vec![ALPN.to_vec()];
        // kTLS, or Tarn's records, need the traffic keys once the handshake
        // is done.
        c.enable_secret_extraction = true;
        Ok(c)
    }
}

/// The server's TLS state: the configuration in force, replaced whole on
/// reload (connections already up keep theirs).
pub struct TlsServer {
    files: RwLock<TlsFiles>,
    cfg: RwLock<Arc<rustls::ServerConfig>>,
    /// Client certificates mapped to users ([`crate::tls_identity`]).
    identities: RwLock<Arc<Vec<crate::tls_identity::IdentityRule>>>,
    /// kTLS offload (set once at startup; unset: off).
    ktls: std::sync::OnceLock<crate::ktls_offload::Ktls>,
}

impl TlsServer {
    pub fn new(files: TlsFiles) -> Result<Arc<TlsServer>, String> {
        let cfg = Arc::new(files.load()?);
        Ok(Arc::new(TlsServer {
            files: RwLock::new(files),
            cfg: RwLock::new(cfg),
            identities: Default::default(),
            ktls: Default::default(),
        }))
    }

    /// Reads the files again (SIGHUP); on error the old configuration stays.
    pub fn reload(&self, files: Option<TlsFiles>) -> Result<(), String> {
        let files = files.unwrap_or_else(|| self.files.read().unwrap().clone());
        let cfg = Arc::new(files.load()?);
        *self.cfg.write().unwrap() = cfg;
        *self.files.write().unwrap() = files;
        Ok(())
    }

    pub fn set_identities(&self, rules: Vec<crate::tls_identity::IdentityRule>) {
        *self.identities.write().unwrap() = Arc::new(rules);
    }

    /// The identity rules in force.
    pub fn identities(&self) -> Arc<Vec<crate::tls_identity::IdentityRule>> {
        self.identities.read().unwrap().clone()
    }

    /// The user a verified client certificate maps to, if any.
    pub fn identity(&self, cert: &[u8]) -> Option<crate::tls_identity::TlsIdentity> {
        let rules = self.identities.read().unwrap().clone();
        crate::tls_identity::map(&rules, cert)
    }

    /// Sets the kTLS mode (probing the kernel with `auto`); once, at
    /// startup: a reload keeps it.
    pub fn set_ktls(&self, mode: crate::ktls_offload::KtlsMode) -> &crate::ktls_offload::Ktls {
        let _ = self.ktls.set(crate::ktls_offload::Ktls::new(mode));
        self.ktls()
    }

    pub fn ktls(&self) -> &crate::ktls_offload::Ktls {
        self.ktls
            .get_or_init(|| crate::ktls_offload::Ktls::new(crate::ktls_offload::KtlsMode::Off))
    }

    /// The files in force.
    pub fn files(&self) -> TlsFiles {
        self.files.read().unwrap().clone()
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.cfg.read().unwrap().clone())
    }
}

/// What a client needs to start TLS with a server.
#[derive(Clone)]
pub struct TlsClient {
    pub config: Arc<rustls::ClientConfig>,
    /// The name (or IP address) the server's certificate must carry.
    pub server_name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// Client-side TLS settings.
#[derive(Clone, Debug, Default)]
pub struct TlsClientOptions {
    /// CA file the server's certificate must chain to (required unless
    /// `insecure`).
    pub ca: Option<PathBuf>,
    /// Client certificate and key, for mTLS.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Skip verifying the server's certificate (asked for explicitly only).
    pub insecure: bool,
}

impl TlsClient {
    /// `server` is the host name or IP address the client was given:
    /// the certificate must name it (DNS name or IP address SAN).
    pub fn new(server: &str, o: &TlsClientOptions) -> Result<TlsClient, String> {
        let b = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?;
        let b = if o.insecure {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
        } else {
            let ca = o.ca.as_deref().ok_or(
                "TLS needs a CA to verify the server by (tls-ca=FILE or TARN_TLS_CA), or insecure",
            )?;
            b.with_root_certificates(roots(ca)?)
        };
        let mut c = match (&o.cert, &o.key) {
            (Some(cert), Some(key)) => b
                .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
                .map_err(|e| format!("{}: {e}", cert.display()))?,
            (None, None) => b.with_no_client_auth(),
            _ => return Err("a client certificate needs its key too (and the other way)".into()),
        };
        c.alpn_protocols = vec![ALPN.to_vec()];
        // After the handshake the records are Tarn's (tls_records).
        c.enable_secret_extraction = true;
        let host = server.trim_start_matches('[').trim_end_matches(']');
        let server_name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("{server}: not a name TLS can verify: {e}"))?;
        Ok(TlsClient {
            config: Arc::new(c),
            server_name,
        })
    }
}

/// Accepts any server certificate (the `insecure` option).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS alert by its name in RFC 8446 (`unknown_ca`,
/// `certificate_required`, ...), for errors a user reads.
pub fn alert_name(a: rustls::AlertDescription) -> String {
    use rustls::AlertDescription as A;
    let n = match a {
        A::UnknownCA => "unknown_ca",
        A::CertificateRequired => "certificate_required",
        A::BadCertificate => "bad_certificate",
        A::CertificateExpired => "certificate_expired",
        A::CertificateRevoked => "certificate_revoked",
        A::CertificateUnknown => "certificate_unknown",
        A::UnsupportedCertificate => "unsupported_certificate",
        A::AccessDenied => "access_denied",
        A::HandshakeFailure => "handshake_failure",
        A::ProtocolVersion => "protocol_version",
        A::NoApplicationProtocol => "no_application_protocol",
        A::DecryptError => "decrypt_error",
        A::InternalError => "internal_error",
        other => return format!("{other:?}"),
    };
    n.to_string()
}

/// Every label [`failure_reason`] and the server give a failed handshake
/// (the metrics keep one counter each).
pub const FAILURE_REASONS: [&str; 12] = [
    "no-client-certificate",
    "unknown-ca",
    "expired-certificate",
    "name-mismatch",
    "bad-certificate",
    "alert-received",
    "incompatible",
    "no-alpn",
    "other",
    "closed",
    "io",
    "timeout",
];

/// A short label for why a handshake failed, for metrics and logs.
pub fn failure_reason(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "closed",
            _ => "io",
        };
    };
    match t {
        E::NoCertificatesPresented => "no-client-certificate",
        E::InvalidCertificate(C::UnknownIssuer) => "unknown-ca",
        // webpki reports expiry with its context (the times).
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => "expired-certificate",
        E::InvalidCertificate(C::NotValidForName) => "name-mismatch",
        E::InvalidCertificate(_) => "bad-certificate",
        E::AlertReceived(_) => "alert-received",
        E::PeerIncompatible(_) => "incompatible",
        E::NoApplicationProtocol => "no-alpn",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starttls_reply_bytes() {
        let r = starttls_reply(0x01020304);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x80, 0, 0, 32,         // record mark: last fragment, 32 bytes
            1, 2, 3, 4,             // xid
            0, 0, 0, 1,             // REPLY
            0, 0, 0, 0,             // MSG_ACCEPTED
            0, 0, 0, 0,             // verifier flavor AUTH_NONE
            0, 0, 0, 8,             // verifier length
            b'S', b'T', b'A', b'R', b'T', b'T', b'L', b'S',
            0, 0, 0, 0,             // SUCCESS
        ];
        assert_eq!(&r[..], want);
        assert!(is_starttls_reply(&r[4..], 0x01020304));
        assert!(!is_starttls_reply(&r[4..], 5));
    }

    #[test]
    fn probe_is_recognised() {
        let c = starttls_call(9, 100003, 3);
        assert_eq!(starttls_probe(&c[4..]), Some(9));
        // An AUTH_SYS NULL is not a probe; neither is AUTH_TLS on proc 1.
        let mut x = c[4..].to_vec();
        x[27] = 1;
        assert_eq!(starttls_probe(&x), None);
        let mut y = c[4..].to_vec();
        y[23] = 1;
        assert_eq!(starttls_probe(&y), None);
        assert_eq!(starttls_probe(&c[4..12]), None);
    }
}
