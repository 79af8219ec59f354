//! What an operator is told about certificates: names, validity,
//! subjectAltNames, and whether one certificate was signed by another.
//! Parsing is x509-parser's (client certificates from failed handshakes
//! are untrusted input); verification proper stays rustls's.

use std::net::IpAddr;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate, X509Name};

/// A subjectAltName entry (the kinds a client or server is named by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Ip(IpAddr),
    Uri(String),
    Email(String),
}

impl std::fmt::Display for San {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            San::Dns(s) => write!(f, "DNS:{s}"),
            San::Ip(a) => write!(f, "IP:{a}"),
            San::Uri(s) => write!(f, "URI:{s}"),
            San::Email(s) => write!(f, "email:{s}"),
        }
    }
}

/// The parts of a certificate this server looks at, borrowed from its DER.
pub struct Cert<'a> {
    /// Issuer and subject Names, whole DER elements (compared bytewise).
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    /// Validity, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    pub sans: Vec<San>,
    parsed: X509Certificate<'a>,
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Unix seconds as "2026-11-24 23:42:55 UTC".
pub fn fmt_time(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(86_400));
    let s = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Parses a DER certificate (None if it is not one, or has bytes after it).
pub fn parse(der: &[u8]) -> Option<Cert<'_>> {
    let (rest, c) = X509Certificate::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let mut sans = Vec::new();
    if let Ok(Some(ext)) = c.subject_alternative_name() {
        for n in &ext.value.general_names {
            sans.push(match n {
                GeneralName::RFC822Name(s) => San::Email(s.to_string()),
                GeneralName::DNSName(s) => San::Dns(s.to_string()),
                GeneralName::URI(s) => San::Uri(s.to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => San::Ip(IpAddr::from(<[u8; 4]>::try_from(*b).ok()?)),
                    16 => San::Ip(IpAddr::from(<[u8; 16]>::try_from(*b).ok()?)),
                    _ => continue,
                },
                _ => continue,
            });
        }
    }
    Some(Cert {
        issuer: c.tbs_certificate.issuer.as_raw(),
        subject: c.tbs_certificate.subject.as_raw(),
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
        sans,
        parsed: c,
    })
}

/// A Name (whole element) as "CN=...,O=..." with the attributes known by
/// name; others show as their dotted OID.
pub fn name_string(name: &[u8]) -> String {
    match name_attrs(name) {
        Some(a) => a
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        None => "?".into(),
    }
}

/// A Name's attributes in order, as (short name or OID, value).
pub fn name_attrs(name: &[u8]) -> Option<Vec<(String, String)>> {
    let (_, name) = X509Name::from_der(name).ok()?;
    let mut parts = Vec::new();
    for rdn in name.iter_rdn() {
        for atv in rdn.iter() {
            let oid = atv.attr_type().to_id_string();
            let key = match oid.as_str() {
                "2.5.4.3" => "CN".to_string(),
                "2.5.4.10" => "O".into(),
                "2.5.4.11" => "OU".into(),
                "2.5.4.6" => "C".into(),
                "2.5.4.7" => "L".into(),
                "2.5.4.8" => "ST".into(),
                "0.9.2342.19200300.100.1.25" => "DC".into(),
                _ => oid,
            };
            let value = match atv.as_str() {
                Ok(v) => v.to_string(),
                Err(_) => String::from_utf8_lossy(atv.attr_value().data).into_owned(),
            };
            parts.push((key, value));
        }
    }
    Some(parts)
}

impl Cert<'_> {
    pub fn subject_string(&self) -> String {
        name_string(self.subject)
    }

    pub fn issuer_string(&self) -> String {
        name_string(self.issuer)
    }

    /// Whether `issuer`'s key signed this certificate (and the names chain).
    pub fn signed_by(&self, issuer: &Cert<'_>) -> bool {
        self.issuer == issuer.subject
            && self
                .parsed
                .verify_signature(Some(issuer.parsed.public_key()))
                .is_ok()
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(fmt_time(1_795_563_775), "2026-11-24 23:42:55 UTC");
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(fmt_time(2_524_607_999), "2049-12-31 23:59:59 UTC");
        assert_eq!(fmt_time(-86_400), "1969-12-31 00:00:00 UTC");
        assert_eq!(fmt_time(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(parse(b"").is_none());
        assert!(parse(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_none());
        assert!(parse(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
        assert!(name_attrs(b"\x30").is_none());
    }
}
