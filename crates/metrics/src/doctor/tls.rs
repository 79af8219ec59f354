//! `tarn doctor`'s TLS rules: the server's record of recent failed
//! handshakes and refused calls, explained in plain words against the
//! server's own certificate and client CA.

use super::finding::Finding;
use crate::snapshot::Snapshot;
use rpc::tls_events::{CertSummary, HandshakeFailure, ServerTls};
use rpc::x509::fmt_time;

/// Events this old (seconds before the end of the window) or newer are
/// reported, so a doctor run soon after a failed mount still sees it.
pub const LOOKBACK_S: i64 = 600;

fn date(t: i64) -> String {
    fmt_time(t)
}

fn client_of(peer: &str) -> String {
    peer.parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| peer.to_string())
}

/// The server's certificate in one phrase: subject, names, end.
fn ours(s: Option<&ServerTls>) -> String {
    match s.and_then(|s| s.cert.as_ref().map(|c| (s, c))) {
        Some((s, c)) => format!(
            "our certificate ({}, subject {}) names {} and expires on {}",
            s.cert_file,
            c.subject,
            if c.sans.is_empty() {
                "nothing (no subjectAltName)".to_string()
            } else {
                c.sans.join(", ")
            },
            date(c.not_after)
        ),
        None => "our certificate could not be read".into(),
    }
}

fn presented(c: &CertSummary) -> String {
    format!(
        "subject {}, issuer {}, valid {} to {}",
        c.subject,
        c.issuer,
        date(c.not_before),
        date(c.not_after)
    )
}

/// One failure explained: (kind, detail, remedy).
fn explain(f: &HandshakeFailure, s: Option<&ServerTls>) -> (&'static str, String, String) {
    let ca_file = s
        .and_then(|s| s.client_ca_file.clone())
        .unwrap_or_else(|| "(none configured)".into());
    if let Some(c) = &f.presented {
        if c.not_after < f.unix_s {
            return (
                "tls-client-cert-expired",
                format!(
                    "the client's certificate expired on {} (subject {}, issuer {})",
                    date(c.not_after),
                    c.subject,
                    c.issuer
                ),
                "renew the client's certificate (on Linux, the one tlshd.conf names)".into(),
            );
        }
        if c.not_before > f.unix_s {
            return (
                "tls-client-cert-not-yet-valid",
                format!(
                    "the client's certificate is not valid before {} (subject {})",
                    date(c.not_before),
                    c.subject
                ),
                "check the clocks of the client and of the CA that issued it".into(),
            );
        }
        if f.reason == "unknown-ca" {
            let known = s.map(|s| s.client_cas.join("; ")).unwrap_or_default();
            return (
                "tls-client-cert-unknown-ca",
                format!(
                    "the client's certificate (subject {}) was issued by {}, which is not in the configured client CA {ca_file} (it holds: {known})",
                    c.subject, c.issuer
                ),
                format!(
                    "give the client a certificate issued by a CA in {ca_file}, or add its issuer ({}) to that file and reload",
                    c.issuer
                ),
            );
        }
        if f.reason != "timeout" {
            return (
                "tls-client-cert-refused",
                format!(
                    "the client's certificate was refused ({}: {}); it presented {}",
                    f.reason,
                    f.error,
                    presented(c)
                ),
                format!("give the client a certificate for TLS client authentication issued by a CA in {ca_file}"),
            );
        }
    }
    match (f.reason.as_str(), f.alert.as_deref()) {
        ("alert-received", Some(a)) => {
            let distrust = matches!(
                a,
                "BadCertificate" | "UnknownCA" | "CertificateUnknown" | "UnsupportedCertificate"
                    | "CertificateExpired" | "AccessDenied"
            );
            if distrust {
                (
                    "tls-client-distrusts-us",
                    format!(
                        "the client aborted the handshake with the alert {a}: it does not accept our certificate; {}",
                        ours(s)
                    ),
                    "the client must mount by a name or IP address our certificate names, and trust the CA that issued it (on Linux, tlshd.conf's x509.truststore)".into(),
                )
            } else {
                (
                    "tls-client-aborted",
                    format!("the client aborted the handshake with the alert {a}"),
                    "see the client's log (tlshd on Linux: journalctl -u tlshd)".into(),
                )
            }
        }
        ("timeout", _) => (
            "tls-handshake-timeout",
            "the TLS handshake did not finish in time after the client asked for TLS".into(),
            "the client stopped answering mid-handshake: on Linux check that tlshd is running (systemctl status tlshd), and that nothing between client and server holds TLS records back".into(),
        ),
        ("incompatible" | "no-alpn", _) => (
            "tls-incompatible",
            format!("the client cannot speak TLS as RFC 9289 asks ({}: {})", f.reason, f.error),
            "the client must offer TLS 1.3 and the ALPN protocol \"sunrpc\" (ktls-utils' tlshd does)".into(),
        ),
        (r, _) => (
            "tls-handshake-failed",
            format!("a TLS handshake failed ({r}: {})", f.error),
            "see the server's log for this client (\"TLS handshake failed\")".into(),
        ),
    }
}

/// The TLS findings of the window ending with `b`.
pub fn diagnose(a: &Snapshot, b: &Snapshot) -> Vec<Finding> {
    let end = (b.unix_ms / 1000) as i64;
    let since = ((a.unix_ms / 1000) as i64).min(end - LOOKBACK_S);
    let s = b.tls.server.as_ref();
    let mut out: Vec<Finding> = Vec::new();
    let mut counts: Vec<(usize, u64, i64)> = Vec::new();
    for f in b.tls.failures.iter().filter(|f| f.unix_s >= since) {
        let (kind, detail, remedy) = explain(f, s);
        let subject = format!("client {}", client_of(&f.peer));
        match out
            .iter()
            .position(|o| o.kind == kind && o.subject == subject && o.detail == detail)
        {
            Some(i) => {
                let c = counts.iter_mut().find(|c| c.0 == i).unwrap();
                c.1 += 1;
                c.2 = f.unix_s;
            }
            None => {
                counts.push((out.len(), 1, f.unix_s));
                out.push(Finding {
                    kind,
                    subject,
                    detail,
                    remedy,
                });
            }
        }
    }
    for (i, n, last) in counts {
        out[i].detail += &format!(" ({n} time(s), last at {})", date(last));
    }
    for r in b.tls.refusals.iter().filter(|r| r.unix_s >= since) {
        let wants = r.wants.join(" or ");
        let (kind, detail, remedy) = if r.had == "tls" && r.wants == ["mtls"] {
            (
                "tls-no-client-cert",
                format!(
                    "the client sent no certificate but export {} requires mtls",
                    r.export
                ),
                format!(
                    "give the client a certificate issued by a CA in {} and mount with -o xprtsec=mtls",
                    s.and_then(|s| s.client_ca_file.clone())
                        .unwrap_or_else(|| "the client CA (none is configured!)".into())
                ),
            )
        } else if r.had == "none" {
            (
                "tls-required",
                format!(
                    "the client did not use TLS but export {} requires {wants}",
                    r.export
                ),
                format!("mount with -o xprtsec={}", r.wants[0]),
            )
        } else {
            (
                "tls-wrong-xprtsec",
                format!(
                    "the client came over {} but export {} requires {wants}",
                    r.had, r.export
                ),
                format!("mount with -o xprtsec={}", r.wants[0]),
            )
        };
        out.push(Finding {
            kind,
            subject: format!("client {}", r.client),
            detail: format!(
                "{detail} ({} call(s) refused, last at {})",
                r.count,
                date(r.unix_s)
            ),
            remedy,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc::tls_events::{Refusal, TlsEventsSnap};

    fn cert(subject: &str, issuer: &str, nb: i64, na: i64) -> CertSummary {
        CertSummary {
            subject: subject.into(),
            issuer: issuer.into(),
            not_before: nb,
            not_after: na,
            sans: vec![],
        }
    }

    fn failure(reason: &str, alert: Option<&str>, p: Option<CertSummary>) -> HandshakeFailure {
        HandshakeFailure {
            unix_s: 2_000_000,
            peer: "10.0.0.9:811".into(),
            reason: reason.into(),
            alert: alert.map(Into::into),
            error: "e".into(),
            presented: p,
        }
    }

    #[test]
    fn explains_each_kind() {
        let server = ServerTls {
            cert_file: "/etc/s.pem".into(),
            cert: Some(CertSummary {
                sans: vec!["DNS:nfs.example".into(), "IP:10.0.0.1".into()],
                ..cert("CN=nfs.example", "CN=CA", 0, 2_100_000)
            }),
            client_ca_file: Some("/etc/clients.pem".into()),
            client_cas: vec!["CN=Clients CA".into()],
        };
        let b = Snapshot {
            unix_ms: 2_000_010_000,
            tls: TlsEventsSnap {
                server: Some(server),
                failures: vec![
                    failure(
                        "expired-certificate",
                        None,
                        Some(cert("CN=old", "CN=Clients CA", 0, 1_000_000)),
                    ),
                    failure(
                        "expired-certificate",
                        None,
                        Some(cert("CN=old", "CN=Clients CA", 0, 1_000_000)),
                    ),
                    failure(
                        "unknown-ca",
                        None,
                        Some(cert("CN=rogue", "CN=Elsewhere", 0, 3_000_000)),
                    ),
                    failure("alert-received", Some("UnknownCA"), None),
                    failure("timeout", None, None),
                ],
                refusals: vec![Refusal {
                    unix_s: 2_000_000,
                    client: "10.0.0.9".into(),
                    export: "/srv".into(),
                    had: "tls".into(),
                    wants: vec!["mtls".into()],
                    count: 3,
                }],
            },
            ..Default::default()
        };
        let a = Snapshot {
            unix_ms: 2_000_005_000,
            ..Default::default()
        };
        let f = diagnose(&a, &b);
        let kinds: Vec<_> = f.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                "tls-client-cert-expired",
                "tls-client-cert-unknown-ca",
                "tls-client-distrusts-us",
                "tls-handshake-timeout",
                "tls-no-client-cert"
            ]
        );
        assert_eq!(f[0].subject, "client 10.0.0.9");
        assert!(f[0].detail.starts_with("the client's certificate expired on 1970-01-12 13:46:40 UTC (subject CN=old, issuer CN=Clients CA) (2 time(s)"), "{}", f[0].detail);
        assert!(f[1].detail.contains("issued by CN=Elsewhere, which is not in the configured client CA /etc/clients.pem (it holds: CN=Clients CA)"), "{}", f[1].detail);
        assert!(
            f[2].detail.contains("alert UnknownCA")
                && f[2]
                    .detail
                    .contains("names DNS:nfs.example, IP:10.0.0.1 and expires on"),
            "{}",
            f[2].detail
        );
        assert!(
            f[4].detail.starts_with(
                "the client sent no certificate but export /srv requires mtls (3 call(s)"
            ),
            "{}",
            f[4].detail
        );
        // Long ago: not reported.
        let late = Snapshot {
            unix_ms: b.unix_ms + 2 * LOOKBACK_S as u64 * 1000,
            ..b.clone()
        };
        let a2 = Snapshot {
            unix_ms: late.unix_ms - 5000,
            ..Default::default()
        };
        assert!(diagnose(&a2, &late).is_empty());
    }
}
