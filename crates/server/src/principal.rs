//! Kerberos principal → local uid/gid, once per GSS context:
//! `user@REALM` is the local user of that name (passwd and group files),
//! machine principals (`nfs/host@REALM`, `host/...`, `root/...`) are uid 0
//! (then squashed per export like any root), anything else is anonymous.

use rpc::gss::Ids;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct PrincipalMap {
    pub passwd: PathBuf,
    pub group: PathBuf,
    /// What machine principals map to (default root, squashed per export;
    /// Linux nfsd maps them to nobody instead: set None for that).
    pub machine: Option<Ids>,
}

impl Default for PrincipalMap {
    fn default() -> Self {
        PrincipalMap {
            passwd: "/etc/passwd".into(),
            group: "/etc/group".into(),
            machine: Some(Ids {
                uid: 0,
                gid: 0,
                gids: vec![],
            }),
        }
    }
}

impl PrincipalMap {
    pub fn map(&self, principal: &str) -> Option<Ids> {
        let (name, _realm) = principal.rsplit_once('@').unwrap_or((principal, ""));
        if let Some((primary, _host)) = name.split_once('/') {
            return match primary {
                "nfs" | "host" | "root" => self.machine.clone(),
                _ => None,
            };
        }
        let passwd = std::fs::read_to_string(&self.passwd).ok()?;
        let group = std::fs::read_to_string(&self.group).unwrap_or_default();
        lookup(&passwd, &group, name)
    }
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
    }
}
