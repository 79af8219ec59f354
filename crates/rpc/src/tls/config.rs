//! The rustls configurations: the server's (its files, reloaded whole,
//! with the client-certificate verifier that notes what it is shown) and
//! the client's.

use super::starttls::ALPN;
use std::cell::RefCell;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio_rustls::rustls;

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
            Some(ca) => b.with_client_cert_verifier(Arc::new(Recording(
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
    /// Client certificates mapped to users ([`super::identity`]).
    identities: RwLock<Arc<Vec<super::identity::IdentityRule>>>,
    /// kTLS offload (set once at startup; unset: off).
    ktls: std::sync::OnceLock<super::ktls::Ktls>,
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

    pub fn set_identities(&self, rules: Vec<super::identity::IdentityRule>) {
        *self.identities.write().unwrap() = Arc::new(rules);
    }

    /// The identity rules in force.
    pub fn identities(&self) -> Arc<Vec<super::identity::IdentityRule>> {
        self.identities.read().unwrap().clone()
    }

    /// The user a verified client certificate maps to, if any.
    pub fn identity(&self, cert: &[u8]) -> Option<super::identity::TlsIdentity> {
        let rules = self.identities.read().unwrap().clone();
        super::identity::map(&rules, cert)
    }

    /// Sets the kTLS mode (probing the kernel with `auto`); once, at
    /// startup: a reload keeps it.
    pub fn set_ktls(&self, mode: super::ktls::KtlsMode) -> &super::ktls::Ktls {
        let _ = self.ktls.set(super::ktls::Ktls::new(mode));
        self.ktls()
    }

    pub fn ktls(&self) -> &super::ktls::Ktls {
        self.ktls
            .get_or_init(|| super::ktls::Ktls::new(super::ktls::KtlsMode::Off))
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
        // After the handshake the records are Tarn's (records.rs).
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

/// The TLS 1.2 and 1.3 signature checks of a certificate verifier (both
/// rustls traits have them, with one signature): each body, after the
/// method's name, sees `self` and the message, certificate and signature
/// under the names the caller picks.
macro_rules! signature_checks {
    (|$this:ident, $m:ident, $c:ident, $d:ident| $($check:ident => $body:block)*) => {$(
        fn $check(
            &$this,
            $m: &[u8],
            $c: &rustls::pki_types::CertificateDer<'_>,
            $d: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            $body
        }
    )*};
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

    signature_checks!(|self, m, c, d| verify_tls12_signature => {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    } verify_tls13_signature => {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    });

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

tokio::task_local! {
    /// The end-entity certificate the client presented in the handshake
    /// running in this task (set by [`Recording`]), kept for the record
    /// when the handshake fails: rustls gives it back only on success.
    pub static PRESENTED: RefCell<Option<Vec<u8>>>;
}

/// A client certificate verifier that notes the certificate it is shown
/// in [`PRESENTED`] and leaves every decision to the one it wraps.
#[derive(Debug)]
pub struct Recording(pub Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for Recording {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let _ = PRESENTED.try_with(|p| *p.borrow_mut() = Some(end_entity.to_vec()));
        self.0.verify_client_cert(end_entity, intermediates, now)
    }

    signature_checks!(|self, m, c, d| verify_tls12_signature => {
        self.0.verify_tls12_signature(m, c, d)
    } verify_tls13_signature => {
        self.0.verify_tls13_signature(m, c, d)
    });

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
