//! Just enough of X.509 (RFC 5280) to explain certificates to an operator:
//! names, validity, subjectAltNames, and whether one certificate was signed
//! by another. Pure code on DER bytes; verification proper is rustls's.

use std::net::IpAddr;

/// One DER element: tag, contents, the whole element, what follows it.
type Element<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// The DER element at the start of `d`.
fn der(d: &[u8]) -> Option<Element<'_>> {
    let all = d;
    let (&tag, d) = d.split_first()?;
    let (&l0, mut d) = d.split_first()?;
    let len = if l0 < 0x80 {
        l0 as usize
    } else {
        let n = (l0 & 0x7f) as usize;
        if n == 0 || n > 4 || d.len() < n {
            return None;
        }
        let v = d[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        d = &d[n..];
        v
    };
    if d.len() < len {
        return None;
    }
    let head = all.len() - d.len();
    Some((tag, &d[..len], &all[..head + len], &d[len..]))
}

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
#[derive(Clone, Debug)]
pub struct Cert<'a> {
    /// The signed part, header included.
    pub tbs: &'a [u8],
    /// Issuer and subject Names, whole DER elements (compared bytewise).
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    /// Validity, seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// SubjectPublicKeyInfo: algorithm (contents) and key bits.
    pub spki_alg: &'a [u8],
    pub spki_key: &'a [u8],
    /// signatureAlgorithm (contents) and signature bits.
    pub sig_alg: &'a [u8],
    pub signature: &'a [u8],
    pub sans: Vec<San>,
}

/// BIT STRING contents without the unused-bits octet (always 0 here).
fn bits(c: &[u8]) -> Option<&[u8]> {
    match c.split_first()? {
        (0, rest) => Some(rest),
        _ => None,
    }
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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

/// UTCTime (tag 0x17) or GeneralizedTime (0x18), "Z" form, as Unix seconds.
fn time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (y, rest) = match tag {
        0x17 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 => (s.get(..4)?.parse().ok()?, &s[4..]),
        _ => return None,
    };
    if rest.len() != 10 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |i: usize| -> u32 { rest[i..i + 2].parse().unwrap_or(0) };
    let (mo, d, h, mi, se) = (n(0), n(2), n(4), n(6), n(8));
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + (h * 3600 + mi * 60 + se) as i64)
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

/// The GeneralNames of a subjectAltName extension value.
fn sans(v: &[u8]) -> Option<Vec<San>> {
    let (_, mut names, _, _) = der(v)?;
    let mut out = Vec::new();
    while !names.is_empty() {
        let (tag, c, _, r) = der(names)?;
        names = r;
        let s = || String::from_utf8_lossy(c).into_owned();
        out.push(match tag {
            0x81 => San::Email(s()),
            0x82 => San::Dns(s()),
            0x86 => San::Uri(s()),
            0x87 => match c.len() {
                4 => San::Ip(IpAddr::from(<[u8; 4]>::try_from(c).ok()?)),
                16 => San::Ip(IpAddr::from(<[u8; 16]>::try_from(c).ok()?)),
                _ => continue,
            },
            _ => continue,
        });
    }
    Some(out)
}

/// Parses a DER certificate (None if it is not one).
pub fn parse(cert: &[u8]) -> Option<Cert<'_>> {
    let (_, c, _, _) = der(cert)?;
    let (_, tbs_c, tbs, r) = der(c)?;
    let (_, sig_alg, _, r) = der(r)?;
    let (_, sig, _, _) = der(r)?;
    let mut rest = tbs_c;
    let (tag, _, _, r) = der(rest)?;
    if tag == 0xa0 {
        rest = r; // version
    }
    let (_, _, _, r) = der(rest)?; // serial
    let (_, _, _, r) = der(r)?; // signature algorithm
    let (_, _, issuer, r) = der(r)?;
    let (_, validity, _, r) = der(r)?;
    let (_, _, subject, r) = der(r)?;
    let (_, spki, _, mut r) = der(r)?;
    let (t1, v1, _, vr) = der(validity)?;
    let (t2, v2, _, _) = der(vr)?;
    let (_, spki_alg, _, kr) = der(spki)?;
    let (_, key, _, _) = der(kr)?;
    let mut alt = Vec::new();
    while !r.is_empty() {
        let (tag, c, _, rr) = der(r)?;
        r = rr;
        if tag != 0xa3 {
            continue; // issuer/subject unique IDs
        }
        let (_, mut exts, _, _) = der(c)?;
        while !exts.is_empty() {
            let (_, ext, _, er) = der(exts)?;
            exts = er;
            let (_, oid, _, mut e) = der(ext)?;
            if oid != [0x55, 0x1d, 0x11] {
                continue;
            }
            let (tag, _, _, e2) = der(e)?;
            if tag == 0x01 {
                e = e2; // critical
            }
            let (_, value, _, _) = der(e)?;
            alt = sans(value)?;
        }
    }
    Some(Cert {
        tbs,
        issuer,
        subject,
        not_before: time(t1, v1)?,
        not_after: time(t2, v2)?,
        spki_alg,
        spki_key: bits(key)?,
        sig_alg,
        signature: bits(sig)?,
        sans: alt,
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
    fn go(name: &[u8]) -> Option<Vec<(String, String)>> {
        let (_, mut name, _, _) = der(name)?;
        let mut parts = Vec::new();
        while !name.is_empty() {
            let (_, mut set, _, r) = der(name)?;
            name = r;
            while !set.is_empty() {
                let (_, atv, _, sr) = der(set)?;
                set = sr;
                let (_, oid, _, r) = der(atv)?;
                let (_, val, _, _) = der(r)?;
                let key = match oid {
                    [0x55, 0x04, 0x03] => "CN".to_string(),
                    [0x55, 0x04, 0x0a] => "O".into(),
                    [0x55, 0x04, 0x0b] => "OU".into(),
                    [0x55, 0x04, 0x06] => "C".into(),
                    [0x55, 0x04, 0x07] => "L".into(),
                    [0x55, 0x04, 0x08] => "ST".into(),
                    [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
                    o => oid_string(o),
                };
                parts.push((key, String::from_utf8_lossy(val).into_owned()));
            }
        }
        Some(parts)
    }
    go(name)
}

fn oid_string(o: &[u8]) -> String {
    let mut out = Vec::new();
    let mut v: u64 = 0;
    for (i, &b) in o.iter().enumerate() {
        v = (v << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            if out.is_empty() && i < o.len() {
                let first = (v / 40).min(2);
                out.push(first.to_string());
                out.push((v - first * 40).to_string());
            } else {
                out.push(v.to_string());
            }
            v = 0;
        }
    }
    out.join(".")
}

impl Cert<'_> {
    pub fn subject_string(&self) -> String {
        name_string(self.subject)
    }

    pub fn issuer_string(&self) -> String {
        name_string(self.issuer)
    }

    /// Whether `issuer`'s key signed this certificate (and the names chain),
    /// with the algorithms rustls's provider verifies.
    pub fn signed_by(&self, issuer: &Cert<'_>) -> bool {
        if self.issuer != issuer.subject {
            return false;
        }
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .all
            .iter()
            .filter(|a| {
                a.signature_alg_id().as_ref() == self.sig_alg
                    && a.public_key_alg_id().as_ref() == issuer.spki_alg
            })
            .any(|a| {
                a.verify_signature(issuer.spki_key, self.tbs, self.signature)
                    .is_ok()
            })
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
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"261124234255Z"), Some(1_795_563_775));
        assert_eq!(time(0x18, b"20261124234255Z"), Some(1_795_563_775));
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x17, b"2611242342Z"), None);
        assert_eq!(fmt_time(1_795_563_775), "2026-11-24 23:42:55 UTC");
        assert_eq!(fmt_time(0), "1970-01-01 00:00:00 UTC");
        for d in [-800_000i64, -1, 0, 59, 11_016, 20_781, 2_000_000] {
            let (y, m, dd) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, dd), d);
        }
    }

    #[test]
    fn oids() {
        assert_eq!(
            oid_string(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]),
            "1.2.840.113549"
        );
        assert_eq!(oid_string(&[0x55, 0x04, 0x03]), "2.5.4.3");
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(parse(b"").is_none());
        assert!(parse(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_none());
        assert!(parse(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_none());
    }
}
