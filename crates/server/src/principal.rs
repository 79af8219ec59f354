//! Kerberos principal → local uid/gid, once per GSS context, in this order:
//! 1. the static map (`[gss.principals]`): a principal named there becomes
//!    the local user, the ids, or anonymous it names;
//! 2. principals of a realm that is not local (`local_realms`, by default
//!    krb5.conf's default_realm) are anonymous: a trusted foreign realm's
//!    `alice` is not our alice;
//! 3. machine principals (`nfs/host@REALM`, `host/...`, `root/...`) map to
//!    `machine` (uid 0 by default, then squashed per export like any root;
//!    Linux nfsd maps them to nobody instead — `machine_principals`);
//! 4. `user@REALM` is the local user of that name, as the system's name
//!    service knows it (files, LDAP, SSSD: [`crate::nss`]), with the groups
//!    getgrouplist(3) gives; anything else is anonymous.

use rpc::gss::Ids;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What a statically mapped principal becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapTo {
    /// A local user, looked up when a context is made.
    User(String),
    Ids(Ids),
    Anonymous,
}

impl MapTo {
    /// `name`, `uid:gid`, `uid:gid:g1,g2`, or `anonymous`.
    pub fn parse(s: &str) -> Result<MapTo, String> {
        let bad = || format!("{s:?}: expected a user name, uid:gid[:gid,gid...] or \"anonymous\"");
        if s == "anonymous" {
            return Ok(MapTo::Anonymous);
        }
        if !s.contains(':') {
            let ok = !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            return ok.then(|| MapTo::User(s.to_string())).ok_or_else(bad);
        }
        let mut f = s.splitn(3, ':');
        let uid = f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        let gid = f.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
        let gids = match f.next() {
            None | Some("") => vec![],
            Some(g) => g
                .split(',')
                .map(|v| v.parse().map_err(|_| bad()))
                .collect::<Result<Vec<u32>, _>>()?,
        };
        if gids.len() > 16 {
            return Err(format!("{s:?}: at most 16 supplementary gids"));
        }
        Ok(MapTo::Ids(Ids { uid, gid, gids }))
    }
}

#[derive(Debug, Clone)]
pub struct PrincipalMap {
    /// passwd(5) and group(5) files to read users from instead of the name
    /// service (tests).
    pub files: Option<(PathBuf, PathBuf)>,
    /// What machine principals map to (default root, squashed per export;
    /// Linux nfsd maps them to nobody instead: set None for that).
    pub machine: Option<Ids>,
    /// Realms whose principals are local users and machines; empty: any.
    pub local_realms: Vec<String>,
    /// Exact principals (`name@REALM`) and what they map to; checked first.
    pub principals: HashMap<String, MapTo>,
}

impl Default for PrincipalMap {
    fn default() -> Self {
        PrincipalMap {
            files: None,
            machine: Some(Ids {
                uid: 0,
                gid: 0,
                gids: vec![],
            }),
            local_realms: vec![],
            principals: HashMap::new(),
        }
    }
}

impl PrincipalMap {
    pub fn map(&self, principal: &str) -> Option<Ids> {
        if let Some(to) = self.principals.get(principal) {
            return match to {
                MapTo::User(u) => self.user(u),
                MapTo::Ids(ids) => Some(ids.clone()),
                MapTo::Anonymous => None,
            };
        }
        let (name, realm) = principal.rsplit_once('@').unwrap_or((principal, ""));
        if !self.local_realms.is_empty() && !self.local_realms.iter().any(|r| r == realm) {
            return None;
        }
        if let Some((primary, _host)) = name.split_once('/') {
            return match primary {
                "nfs" | "host" | "root" => self.machine.clone(),
                _ => None,
            };
        }
        self.user(name)
    }

    fn user(&self, name: &str) -> Option<Ids> {
        let Some((passwd, group)) = &self.files else {
            return system_user(crate::nss::Nss::system(), name);
        };
        let passwd = std::fs::read_to_string(passwd).ok()?;
        let group = std::fs::read_to_string(group).unwrap_or_default();
        lookup(&passwd, &group, name)
    }
}

/// The `default_realm` of the first krb5.conf(5) file that names one:
/// `KRB5_CONFIG` (colon-separated), else /etc/krb5.conf. Only the plain
/// `[libdefaults]` form is read; `include` directives are not followed.
pub fn default_realm() -> Option<String> {
    let files = std::env::var("KRB5_CONFIG").unwrap_or_else(|_| "/etc/krb5.conf".into());
    files
        .split(':')
        .filter_map(|f| std::fs::read_to_string(Path::new(f)).ok())
        .find_map(|text| default_realm_in(&text))
}

fn default_realm_in(text: &str) -> Option<String> {
    let mut in_libdefaults = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_libdefaults = line == "[libdefaults]";
        } else if in_libdefaults {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == "default_realm" && !v.trim().is_empty() {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

/// The user `name` from the name service, with its other groups (at most
/// 16, as AUTH_SYS carries).
pub fn system_user(nss: &crate::nss::Nss, name: &str) -> Option<Ids> {
    let u = nss.user_by_name(name)?;
    let gids = nss
        .groups_of(&u.name, u.gid)
        .into_iter()
        .filter(|&g| g != u.gid)
        .take(16)
        .collect();
    Some(Ids {
        uid: u.uid,
        gid: u.gid,
        gids,
    })
}

/// The user `name` in passwd(5) text, with the groups that list it in group(5) text.
pub fn lookup(passwd: &str, group: &str, name: &str) -> Option<Ids> {
    let (uid, gid) = passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })?;
    let gids = group
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[3].split(',').any(|m| m == name)).then(|| f[2].parse().ok())?
        })
        .take(16)
        .collect();
    Some(Ids { uid, gid, gids })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_machines_and_strangers() {
        let p = "root:x:0:0::/root:/bin/sh\nalice:x:1000:100::/home/alice:/bin/sh\n";
        let g = "users:x:100:\nwheel:x:10:bob,alice\n";
        assert_eq!(
            lookup(p, g, "alice"),
            Some(Ids {
                uid: 1000,
                gid: 100,
                gids: vec![10]
            })
        );
        assert_eq!(lookup(p, g, "mallory"), None);
        let m = PrincipalMap::default();
        assert_eq!(m.map("nfs/client.example@EXAMPLE").unwrap().uid, 0);
        assert_eq!(m.map("HTTP/web@EXAMPLE"), None);
        assert_eq!(m.map("root@EXAMPLE").map(|i| i.uid), Some(0));
        // From the name service: root and nobody exist on every system.
        let nobody = crate::nss::Nss::system().user_by_name("nobody").unwrap();
        assert_eq!(m.map("nobody@EXAMPLE").map(|i| i.uid), Some(nobody.uid));
        assert_eq!(m.map("no-such-user-tarn-test@EXAMPLE"), None);
    }

    #[test]
    fn foreign_realms_and_the_static_map() {
        let dir = tempfile::tempdir().unwrap();
        let (pw, gr) = (dir.path().join("passwd"), dir.path().join("group"));
        std::fs::write(
            &pw,
            "alice:x:1000:100::/:/bin/sh\nbob:x:1001:100::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(&gr, "users:x:100:\n").unwrap();
        let mut m = PrincipalMap {
            files: Some((pw, gr)),
            machine: None,
            local_realms: vec!["EXAMPLE.COM".into()],
            ..Default::default()
        };
        assert_eq!(m.map("alice@EXAMPLE.COM").unwrap().uid, 1000);
        // Same name, another realm: not our alice.
        assert_eq!(m.map("alice@EVIL.ORG"), None);
        // Machines map to nobody here (knfsd's choice).
        assert_eq!(m.map("nfs/c1.example.com@EXAMPLE.COM"), None);
        m.principals
            .insert("alice@PARTNER.ORG".into(), MapTo::User("bob".into()));
        m.principals.insert(
            "backup/h1@EXAMPLE.COM".into(),
            MapTo::parse("2000:20:21,22").unwrap(),
        );
        m.principals
            .insert("alice@EXAMPLE.COM".into(), MapTo::Anonymous);
        assert_eq!(m.map("alice@PARTNER.ORG").unwrap().uid, 1001);
        assert_eq!(
            m.map("backup/h1@EXAMPLE.COM"),
            Some(Ids {
                uid: 2000,
                gid: 20,
                gids: vec![21, 22]
            })
        );
        assert_eq!(m.map("alice@EXAMPLE.COM"), None);
    }

    #[test]
    fn map_targets_and_default_realm() {
        assert_eq!(MapTo::parse("anonymous"), Ok(MapTo::Anonymous));
        assert_eq!(MapTo::parse("web-svc"), Ok(MapTo::User("web-svc".into())));
        assert!(MapTo::parse("1:x").is_err());
        assert!(MapTo::parse("").is_err());
        assert!(MapTo::parse("a b").is_err());
        let conf = "[libdefaults]\n  dns_lookup_kdc = false\n  default_realm = EXAMPLE.COM\n[realms]\n default_realm = NO\n";
        assert_eq!(default_realm_in(conf).as_deref(), Some("EXAMPLE.COM"));
        assert_eq!(default_realm_in("[realms]\ndefault_realm = X\n"), None);
    }
}
