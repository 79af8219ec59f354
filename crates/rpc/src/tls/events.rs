//! A small bounded record of what went wrong with TLS lately, from the
//! server's side, for `tarn doctor`: failed handshakes (who, when, why,
//! and the certificate the client presented, if any) and calls refused
//! because the connection's protection was not the one the export wants.
//! The counts by reason are the metrics'; this keeps the particulars.

pub use super::config::{Recording, PRESENTED};
use crate::transport::XprtSec;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use tokio_rustls::rustls;

/// Entries kept of each kind (the oldest go first).
pub const KEEP: usize = 64;

/// A certificate, as an operator reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertSummary {
    pub subject: String,
    pub issuer: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// "DNS:host", "IP:10.0.0.1", "URI:...".
    pub sans: Vec<String>,
}

impl CertSummary {
    pub fn of(der: &[u8]) -> Option<CertSummary> {
        let c = super::x509::parse(der)?;
        Some(CertSummary {
            subject: c.subject_string(),
            issuer: c.issuer_string(),
            not_before: c.not_before,
            not_after: c.not_after,
            sans: c.sans.iter().map(|s| s.to_string()).collect(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeFailure {
    pub unix_s: i64,
    pub peer: String,
    /// One of [`crate::tls::FAILURE_REASONS`].
    pub reason: String,
    /// The TLS alert the client sent, when it aborted with one
    /// ("BadCertificate", "UnknownCA", ...).
    #[serde(default)]
    pub alert: Option<String>,
    pub error: String,
    /// The client's certificate, when it sent one.
    #[serde(default)]
    pub presented: Option<CertSummary>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub unix_s: i64,
    /// The client's address (no port: one entry per client and export).
    pub client: String,
    pub export: String,
    /// The connection's protection and what the export accepts.
    pub had: String,
    pub wants: Vec<String>,
    pub count: u64,
}

/// The server's own TLS setting, to explain failures against.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerTls {
    pub cert_file: String,
    pub cert: Option<CertSummary>,
    pub client_ca_file: Option<String>,
    /// Subjects of the client CA's certificates.
    pub client_cas: Vec<String>,
}

impl ServerTls {
    /// Read from the files in force (what does not parse is left out).
    pub fn of(f: &super::config::TlsFiles) -> ServerTls {
        let certs = |p: &std::path::Path| super::config::load_certs(p).unwrap_or_default();
        ServerTls {
            cert_file: f.cert.display().to_string(),
            cert: certs(&f.cert).first().and_then(|c| CertSummary::of(c)),
            client_ca_file: f.client_ca.as_ref().map(|p| p.display().to_string()),
            client_cas: f
                .client_ca
                .as_deref()
                .map(certs)
                .unwrap_or_default()
                .iter()
                .filter_map(|c| CertSummary::of(c))
                .map(|c| c.subject)
                .collect(),
        }
    }
}

/// What the admin socket sends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsEventsSnap {
    pub server: Option<ServerTls>,
    pub failures: Vec<HandshakeFailure>,
    pub refusals: Vec<Refusal>,
}

#[derive(Default)]
struct Inner {
    server: Option<ServerTls>,
    failures: VecDeque<HandshakeFailure>,
    refusals: VecDeque<Refusal>,
}

#[derive(Default)]
pub struct TlsEvents {
    inner: Mutex<Inner>,
}

fn now_s() -> i64 {
    super::x509::unix_now()
}

/// The process's record (one server per process; diagnostics only).
pub fn global() -> &'static TlsEvents {
    static G: OnceLock<TlsEvents> = OnceLock::new();
    G.get_or_init(TlsEvents::default)
}

impl TlsEvents {
    pub fn set_server(&self, s: ServerTls) {
        self.inner.lock().unwrap().server = Some(s);
    }

    pub fn handshake_failed(
        &self,
        peer: SocketAddr,
        reason: &str,
        e: &std::io::Error,
        presented: Option<&[u8]>,
    ) {
        let alert = e
            .get_ref()
            .and_then(|i| i.downcast_ref::<rustls::Error>())
            .and_then(|t| match t {
                rustls::Error::AlertReceived(a) => Some(format!("{a:?}")),
                _ => None,
            });
        self.push_failure(HandshakeFailure {
            unix_s: now_s(),
            peer: peer.to_string(),
            reason: reason.into(),
            alert,
            error: e.to_string(),
            presented: presented.and_then(CertSummary::of),
        });
    }

    /// A handshake that ended without an error of its own (a timeout).
    pub fn handshake_timed_out(&self, peer: SocketAddr, presented: Option<&[u8]>) {
        self.push_failure(HandshakeFailure {
            unix_s: now_s(),
            peer: peer.to_string(),
            reason: "timeout".into(),
            alert: None,
            error: "the handshake did not finish in time".into(),
            presented: presented.and_then(CertSummary::of),
        });
    }

    fn push_failure(&self, f: HandshakeFailure) {
        let mut g = self.inner.lock().unwrap();
        if g.failures.len() >= KEEP {
            g.failures.pop_front();
        }
        g.failures.push_back(f);
    }

    /// A call refused for its connection's protection.
    pub fn refused(&self, client: IpAddr, export: &str, had: XprtSec, wants: &[XprtSec]) {
        let mut g = self.inner.lock().unwrap();
        let client = client.to_string();
        let now = now_s();
        if let Some(i) = g
            .refusals
            .iter()
            .position(|r| r.client == client && r.export == export && r.had == had.name())
        {
            let mut r = g.refusals.remove(i).unwrap();
            r.count += 1;
            r.unix_s = now;
            r.wants = wants.iter().map(|w| w.name().to_string()).collect();
            g.refusals.push_back(r);
            return;
        }
        if g.refusals.len() >= KEEP {
            g.refusals.pop_front();
        }
        g.refusals.push_back(Refusal {
            unix_s: now,
            client,
            export: export.into(),
            had: had.name().into(),
            wants: wants.iter().map(|w| w.name().to_string()).collect(),
            count: 1,
        });
    }

    pub fn snapshot(&self) -> TlsEventsSnap {
        let g = self.inner.lock().unwrap();
        TlsEventsSnap {
            server: g.server.clone(),
            failures: g.failures.iter().cloned().collect(),
            refusals: g.refusals.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_refusals_merged() {
        let t = TlsEvents::default();
        let p: SocketAddr = "10.0.0.1:700".parse().unwrap();
        for _ in 0..KEEP + 5 {
            t.handshake_timed_out(p, None);
        }
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        t.refused(a, "/srv", XprtSec::Tls, &[XprtSec::Mtls]);
        t.refused(a, "/srv", XprtSec::Tls, &[XprtSec::Mtls]);
        t.refused(a, "/other", XprtSec::None, &[XprtSec::Tls]);
        let s = t.snapshot();
        assert_eq!(s.failures.len(), KEEP);
        assert_eq!(s.refusals.len(), 2);
        assert_eq!(s.refusals[0].export, "/srv");
        assert_eq!(s.refusals[0].count, 2);
        assert_eq!(s.refusals[1].export, "/other");
    }
}
