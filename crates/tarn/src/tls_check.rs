//! `tarn check-config` for the TLS material: the files load, the key is the
//! certificate's, the chain is in order and in date, the client CA parses;
//! and exports that ask for TLS can get it. Time is passed in.

use crate::config::ExportConfig;
use rpc::tls::{TlsFiles, XprtSec};
use rpc::x509;
use std::path::Path;

/// A certificate expiring sooner than this is warned about.
pub const EXPIRY_WARNING_SECS: i64 = 30 * 86_400;

#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// What was checked and found good, for the operator.
    pub notes: Vec<String>,
}

/// Checks `files` (None: no TLS configured) against the exports, at `now`
/// (Unix seconds).
pub fn check(files: Option<&TlsFiles>, exports: &[ExportConfig], now: i64) -> Report {
    let mut r = Report::default();
    let Some(files) = files else {
        for e in exports
            .iter()
            .filter(|e| !e.xprtsec.contains(&XprtSec::None))
        {
            r.warnings.push(format!(
                "export {} requires {} but no certificate is configured ([tls] cert and key): the server will not start",
                e.path.display(),
                names(&e.xprtsec)
            ));
        }
        return r;
    };
    server_cert(files, now, &mut r);
    match &files.client_ca {
        Some(ca) => client_ca(ca, now, &mut r),
        None => {
            for e in exports.iter().filter(|e| e.xprtsec == [XprtSec::Mtls]) {
                r.warnings.push(format!(
                    "export {} requires mtls but no client CA is configured ([tls] client_ca): no client can use it",
                    e.path.display()
                ));
            }
        }
    }
    r
}

fn names(x: &[XprtSec]) -> String {
    x.iter().map(|x| x.name()).collect::<Vec<_>>().join(" or ")
}

/// Validity of one certificate: errors when out of date, a warning when
/// close to its end.
fn dates(what: &str, c: &x509::Cert<'_>, now: i64, r: &mut Report) {
    if now > c.not_after {
        r.errors.push(format!(
            "{what} expired on {} (subject {}): expected a certificate valid now",
            x509::fmt_time(c.not_after),
            c.subject_string()
        ));
    } else if now < c.not_before {
        r.errors.push(format!(
            "{what} is not valid before {} (subject {}): expected a certificate valid now (is the clock right?)",
            x509::fmt_time(c.not_before),
            c.subject_string()
        ));
    } else if c.not_after - now < EXPIRY_WARNING_SECS {
        r.warnings.push(format!(
            "{what} expires on {}, in {} day(s) (subject {})",
            x509::fmt_time(c.not_after),
            (c.not_after - now) / 86_400,
            c.subject_string()
        ));
    }
}

fn server_cert(files: &TlsFiles, now: i64, r: &mut Report) {
    let cf = files.cert.display();
    let certs = match rpc::tls::load_certs(&files.cert) {
        Ok(c) => c,
        Err(e) => {
            r.errors.push(format!(
                "{e}: expected the server's certificate chain in PEM"
            ));
            return key_only(files, r);
        }
    };
    let parsed: Vec<_> = certs.iter().map(|c| x509::parse(c)).collect();
    for (i, p) in parsed.iter().enumerate() {
        if p.is_none() {
            r.errors.push(format!(
                "{cf}: certificate {} of {} is not an X.509 certificate this server can read",
                i + 1,
                certs.len()
            ));
        }
    }
    let key = match rpc::tls::load_key(&files.key) {
        Ok(k) => Some(k),
        Err(e) => {
            r.errors.push(format!(
                "{e}: expected the server's private key in PEM (PKCS#8, PKCS#1 or SEC1)"
            ));
            None
        }
    };
    if let Some(key) = key {
        let provider = rustls::crypto::ring::default_provider();
        match provider.key_provider.load_private_key(key) {
            Err(e) => r.errors.push(format!(
                "{}: {e}: expected an RSA, ECDSA or Ed25519 private key",
                files.key.display()
            )),
            Ok(signer) => {
                let ck = rustls::sign::CertifiedKey::new(certs.clone(), signer);
                if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
                    ck.keys_match()
                {
                    r.errors.push(format!(
                        "{}: this key is not the one of the certificate {cf} begins with: expected the private key of {}",
                        files.key.display(),
                        parsed[0].as_ref().map(|c| c.subject_string()).unwrap_or_default()
                    ));
                }
            }
        }
    }
    let Some(Some(leaf)) = parsed.first() else {
        return;
    };
    dates(&format!("{cf}: the server certificate"), leaf, now, r);
    for (i, pair) in parsed.windows(2).enumerate() {
        let (Some(child), Some(parent)) = (&pair[0], &pair[1]) else {
            continue;
        };
        if !child.signed_by(parent) {
            r.errors.push(format!(
                "{cf}: certificate {} (subject {}, issuer {}) was not issued by certificate {} (subject {}): expected the chain in order, the server's certificate first, each followed by its issuer",
                i + 1,
                child.subject_string(),
                child.issuer_string(),
                i + 2,
                parent.subject_string()
            ));
        }
        dates(
            &format!("{cf}: certificate {} of the chain", i + 2),
            parent,
            now,
            r,
        );
    }
    let sans: Vec<_> = leaf.sans.iter().map(|s| s.to_string()).collect();
    if sans.is_empty() {
        r.warnings.push(format!(
            "{cf}: the server certificate has no subjectAltName: clients verify the name they mount by against its DNS and IP SANs, so none will accept it"
        ));
    }
    r.notes.push(format!(
        "TLS: server certificate {} ({}), valid until {}",
        leaf.subject_string(),
        if sans.is_empty() {
            "no subjectAltName".into()
        } else {
            sans.join(", ")
        },
        x509::fmt_time(leaf.not_after)
    ));
}

/// The key file alone, when the certificate did not load.
fn key_only(files: &TlsFiles, r: &mut Report) {
    if let Err(e) = rpc::tls::load_key(&files.key) {
        r.errors.push(format!(
            "{e}: expected the server's private key in PEM (PKCS#8, PKCS#1 or SEC1)"
        ));
    }
}

fn client_ca(ca: &Path, now: i64, r: &mut Report) {
    let certs = match rpc::tls::load_certs(ca) {
        Ok(c) => c,
        Err(e) => {
            r.errors.push(format!(
                "{e}: expected the CA certificate(s) client certificates chain to, in PEM"
            ));
            return;
        }
    };
    for (i, c) in certs.iter().enumerate() {
        let mut roots = rustls::RootCertStore::empty();
        match (x509::parse(c), roots.add(c.clone())) {
            (Some(p), Ok(())) => {
                dates(
                    &format!("{}: client CA certificate {}", ca.display(), i + 1),
                    &p,
                    now,
                    r,
                );
                r.notes.push(format!(
                    "TLS: client certificates must chain to {} (valid until {})",
                    p.subject_string(),
                    x509::fmt_time(p.not_after)
                ));
            }
            (_, Err(e)) => r.errors.push(format!(
                "{}: certificate {} of {}: {e}: expected CA certificates",
                ca.display(),
                i + 1,
                certs.len()
            )),
            (None, Ok(())) => r.errors.push(format!(
                "{}: certificate {} of {} is not an X.509 certificate this server can read",
                ca.display(),
                i + 1,
                certs.len()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::pki::{openssl, signed_by, EC_KEY};

    /// ca (self-signed), int (by ca), leaf (by int, for `days`), other.key.
    fn pki(dir: &Path, days: &str) {
        let ec = EC_KEY;
        let mut a = vec!["req", "-x509"];
        a.extend(ec);
        a.extend([
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "400", "-subj", "/CN=Root",
        ]);
        openssl(dir, &a);
        std::fs::write(dir.join("ca.ext"), "basicConstraints=critical,CA:TRUE\n").unwrap();
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=DNS:nfs.example,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        for (name, subj, by, ext, d) in [
            ("int", "/CN=Intermediate", "ca", "ca.ext", "400"),
            ("leaf", "/CN=nfs.example", "int", "leaf.ext", days),
        ] {
            signed_by(
                dir,
                name,
                subj,
                by,
                &["-set_serial", "7", "-days", d, "-extfile", ext],
            );
        }
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "other.key",
            ],
        );
        let cat = |parts: &[&str], to: &str| {
            let s: String = parts
                .iter()
                .map(|p| std::fs::read_to_string(dir.join(p)).unwrap())
                .collect();
            std::fs::write(dir.join(to), s).unwrap();
        };
        cat(&["leaf.pem", "int.pem"], "chain.pem");
        cat(&["int.pem", "leaf.pem"], "backwards.pem");
    }

    fn files(dir: &Path, cert: &str, key: &str, ca: Option<&str>) -> TlsFiles {
        TlsFiles {
            cert: dir.join(cert),
            key: dir.join(key),
            client_ca: ca.map(|c| dir.join(c)),
        }
    }

    fn export(x: &[XprtSec]) -> ExportConfig {
        let c = crate::config::parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = []\n",
        )
        .unwrap();
        let mut e = c.exports[0].clone();
        e.xprtsec = x.to_vec();
        e
    }

    #[test]
    fn good_chain_and_problems() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        pki(d, "100");
        let now = x509::unix_now();
        let r = check(
            Some(&files(d, "chain.pem", "leaf.key", Some("ca.pem"))),
            &[],
            now,
        );
        assert!(r.errors.is_empty() && r.warnings.is_empty(), "{r:?}");
        assert!(
            r.notes[0].contains("CN=nfs.example (DNS:nfs.example, IP:127.0.0.1)"),
            "{r:?}"
        );

        // The key of another certificate.
        let r = check(Some(&files(d, "chain.pem", "other.key", None)), &[], now);
        assert_eq!(r.errors.len(), 1, "{r:?}");
        assert!(r.errors[0].contains("other.key: this key is not the one of the certificate"));
        assert!(r.errors[0].contains("chain.pem"));

        // Chain out of order (the key then does not match either).
        let r = check(Some(&files(d, "backwards.pem", "leaf.key", None)), &[], now);
        assert!(
            r.errors.iter().any(|e| e.contains("backwards.pem: certificate 1 (subject CN=Intermediate, issuer CN=Root) was not issued by certificate 2 (subject CN=nfs.example)")),
            "{r:?}"
        );

        // Time: expired, not yet valid, close to its end.
        let der = rpc::tls::load_certs(&d.join("leaf.pem")).unwrap().remove(0);
        let c = x509::parse(&der).unwrap();

        // A signature is checked, not just the names: one flipped bit of
        // it and the issuer no longer signed the leaf.
        let chain = rpc::tls::load_certs(&d.join("chain.pem")).unwrap();
        let issuer = x509::parse(&chain[1]).unwrap();
        assert!(c.signed_by(&issuer));
        let mut forged = der.to_vec();
        *forged.last_mut().unwrap() ^= 1;
        let f = x509::parse(&forged).unwrap();
        assert_eq!(f.subject, c.subject);
        assert!(!f.signed_by(&issuer));
        let f = files(d, "chain.pem", "leaf.key", None);
        let r = check(Some(&f), &[], c.not_after + 1);
        assert!(
            r.errors
                .iter()
                .any(|e| e.contains("the server certificate expired on")),
            "{r:?}"
        );
        let r = check(Some(&f), &[], c.not_before - 1);
        assert!(
            r.errors.iter().any(|e| e.contains("is not valid before")),
            "{r:?}"
        );
        let r = check(Some(&f), &[], c.not_after - 5 * 86_400 - 10);
        assert!(
            r.errors.is_empty()
                && r.warnings[0].contains("expires on")
                && r.warnings[0].contains("in 5 day(s)"),
            "{r:?}"
        );

        // Files that are not what they should be.
        std::fs::write(d.join("junk.pem"), "hello\n").unwrap();
        let r = check(
            Some(&files(d, "junk.pem", "junk.pem", Some("junk.pem"))),
            &[],
            now,
        );
        assert_eq!(r.errors.len(), 3, "{r:?}");
        assert!(r.errors[0].contains(
            "junk.pem: no PEM \"CERTIFICATE\" block found: expected the server's certificate chain"
        ));
        assert!(r.errors[1].contains("junk.pem: no PEM private key found: expected"));
        assert!(r.errors[2].contains("expected the CA certificate(s)"));
        let r = check(Some(&files(d, "missing.pem", "leaf.key", None)), &[], now);
        assert!(r.errors[0].contains("missing.pem: No such file"), "{r:?}");
    }

    #[test]
    fn exports_that_cannot_get_tls() {
        let x = [
            export(&[XprtSec::Tls, XprtSec::Mtls]),
            export(&[XprtSec::Mtls]),
        ];
        let r = check(None, &x, 0);
        assert_eq!(r.warnings.len(), 2, "{r:?}");
        assert!(r.warnings[0]
            .contains("export /srv requires tls or mtls but no certificate is configured"));
        let t = tempfile::tempdir().unwrap();
        pki(t.path(), "100");
        let r = check(
            Some(&files(t.path(), "chain.pem", "leaf.key", None)),
            &x,
            x509::unix_now(),
        );
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(r.warnings[0].contains("export /srv requires mtls but no client CA is configured"));
    }
}
