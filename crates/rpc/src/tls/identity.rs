//! mTLS identity mapping: a verified client certificate whose subject or
//! subjectAltName matches a configured rule makes the AUTH_SYS calls of
//! its connection run as the rule's user (the credential's uid and groups
//! are replaced, as all_squash does with the anonymous ids). Unmapped
//! certificates authenticate the host only; RPCSEC_GSS keeps its identity.

use super::x509::San;
use crate::auth::Auth;
use std::net::IpAddr;

/// What a rule matches in a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdMatch {
    /// Subject attributes ("CN=nfsguest", "CN=h1,O=Acme"): every one given
    /// must be in the subject, with that value.
    Subject(Vec<(String, String)>),
    /// A subjectAltName ("san:dns:NAME", case-insensitive; "san:ip:ADDR",
    /// "san:uri:URI", "san:email:ADDR").
    San(San),
}

impl std::str::FromStr for IdMatch {
    type Err = String;
    fn from_str(s: &str) -> Result<IdMatch, String> {
        if let Some(rest) = s.strip_prefix("san:") {
            let (kind, v) = rest.split_once(':').ok_or_else(|| {
                format!("{s:?}: expected san:dns:NAME, san:ip:ADDR, san:uri:URI or san:email:ADDR")
            })?;
            if v.is_empty() {
                return Err(format!("{s:?}: nothing after san:{kind}:"));
            }
            return Ok(IdMatch::San(match kind {
                "dns" => San::Dns(v.to_ascii_lowercase()),
                "ip" => San::Ip(
                    v.parse::<IpAddr>()
                        .map_err(|e| format!("{s:?}: {v:?}: {e}"))?,
                ),
                "uri" => San::Uri(v.into()),
                "email" => San::Email(v.into()),
                k => {
                    return Err(format!(
                        "{s:?}: {k:?}: expected san:dns:, san:ip:, san:uri: or san:email:"
                    ))
                }
            }));
        }
        let mut attrs = Vec::new();
        for part in s.split(',') {
            let (k, v) = part.trim().split_once('=').ok_or_else(|| {
                format!("{s:?}: expected subject attributes like \"CN=name\" or \"CN=name,O=org\", or san:dns:NAME")
            })?;
            let k = k.trim().to_ascii_uppercase();
            if k.is_empty() || v.trim().is_empty() {
                return Err(format!("{s:?}: empty attribute in {part:?}"));
            }
            attrs.push((k, v.trim().to_string()));
        }
        Ok(IdMatch::Subject(attrs))
    }
}

impl IdMatch {
    fn matches(&self, c: &super::x509::Cert<'_>) -> bool {
        match self {
            IdMatch::Subject(want) => {
                let have = super::x509::name_attrs(c.subject).unwrap_or_default();
                want.iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            }
            IdMatch::San(San::Dns(d)) => c
                .sans
                .iter()
                .any(|s| matches!(s, San::Dns(h) if h.eq_ignore_ascii_case(d))),
            IdMatch::San(want) => c.sans.contains(want),
        }
    }
}

/// One `[[tls.identity]]` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityRule {
    /// The text of `match`, for logs.
    pub text: String,
    pub matches: IdMatch,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// The identity a connection's certificate maps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsIdentity {
    /// The certificate's subject and the rule that matched, for logs.
    pub subject: String,
    pub rule: String,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// The first rule the (verified) certificate `der` matches.
pub fn map(rules: &[IdentityRule], der: &[u8]) -> Option<TlsIdentity> {
    if rules.is_empty() {
        return None;
    }
    let c = super::x509::parse(der)?;
    let r = rules.iter().find(|r| r.matches.matches(&c))?;
    Some(TlsIdentity {
        subject: c.subject_string(),
        rule: r.text.clone(),
        uid: r.uid,
        gid: r.gid,
        gids: r.gids.clone(),
    })
}

impl TlsIdentity {
    /// An AUTH_SYS credential runs as this identity; others are left alone.
    pub fn apply(&self, auth: &mut Auth) {
        if let Auth::Sys(s) = auth {
            s.uid = self.uid;
            s.gid = self.gid;
            s.gids.clone_from(&self.gids);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_match() {
        assert_eq!(
            "CN=nfsguest".parse::<IdMatch>(),
            Ok(IdMatch::Subject(vec![("CN".into(), "nfsguest".into())]))
        );
        assert_eq!(
            "cn=a, O=Acme Inc".parse::<IdMatch>(),
            Ok(IdMatch::Subject(vec![
                ("CN".into(), "a".into()),
                ("O".into(), "Acme Inc".into())
            ]))
        );
        assert_eq!(
            "san:dns:Host.Example".parse::<IdMatch>(),
            Ok(IdMatch::San(San::Dns("host.example".into())))
        );
        assert_eq!(
            "san:ip:10.0.0.5".parse::<IdMatch>(),
            Ok(IdMatch::San(San::Ip("10.0.0.5".parse().unwrap())))
        );
        assert_eq!(
            "san:uri:spiffe://x/y".parse::<IdMatch>(),
            Ok(IdMatch::San(San::Uri("spiffe://x/y".into())))
        );
        for bad in ["nfsguest", "san:dns:", "san:ip:host", "san:foo:x", "CN="] {
            assert!(bad.parse::<IdMatch>().is_err(), "{bad}");
        }
    }

    #[test]
    fn apply_replaces_auth_sys_only() {
        let id = TlsIdentity {
            subject: "CN=a".into(),
            rule: "CN=a".into(),
            uid: 1234,
            gid: 100,
            gids: vec![5, 6],
        };
        let mut a = Auth::Sys(crate::auth::AuthSys {
            stamp: 1,
            machinename: bytes::Bytes::from_static(b"h"),
            uid: 0,
            gid: 0,
            gids: vec![0, 1, 2],
        });
        id.apply(&mut a);
        let Auth::Sys(s) = a else { panic!() };
        assert_eq!((s.uid, s.gid, s.gids), (1234, 100, vec![5, 6]));
        let mut n = Auth::None;
        id.apply(&mut n);
        assert_eq!(n, Auth::None);
    }
}
