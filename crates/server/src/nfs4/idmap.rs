//! NFSv4 owner / owner_group strings and the numeric ids behind them.
//!
//! NFSv4 names owners by string ("alice@example.com"), not by number. The
//! Linux client with AUTH_SYS sends and expects plain numbers ("1000") by
//! default, so numbers always work in both directions; names are only sent
//! when the export asks for them and only for ids that have an entry.
//!
//! Names come from the system's name service ([`crate::nss`]: files, LDAP,
//! SSSD), cached with a TTL, so directory users map like local ones and new
//! accounts are seen without a restart. Tests give fixed tables instead.

use std::collections::HashMap;
use std::io::Write;

use bytes::{Bytes, BytesMut};
use proto::nfs4::Nfsstat4;

/// One direction of one table: id → "name@domain", name → id.
#[derive(Debug, Default)]
struct Table {
    /// Pre-built "name@domain" strings: handing one out is a refcount bump,
    /// so encoding an owner never allocates.
    by_id: HashMap<u32, Bytes>,
    by_name: HashMap<Box<[u8]>, u32>,
}

impl Table {
    /// Parses colon-separated `name:passwd:id:...` lines (the layout of both
    /// passwd and group). Comments, blank lines, NIS `+`/`-` lines and lines
    /// without a numeric id are skipped; the first entry for a name or an id
    /// wins, as with getpwnam/getpwuid.
    fn parse(text: &str, domain: &str) -> Table {
        let mut t = Table::default();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') || line.starts_with(['+', '-']) {
                continue;
            }
            let mut fields = line.split(':');
            let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let Ok(id) = id.parse::<u32>() else { continue };
            if name.is_empty() {
                continue;
            }
            t.by_name.entry(name.as_bytes().into()).or_insert(id);
            t.by_id
                .entry(id)
                .or_insert_with(|| Bytes::from(format!("{name}@{domain}")));
        }
        t
    }
}

/// Where names come from.
enum Accounts {
    System(&'static crate::nss::Nss),
    Tables { users: Table, groups: Table },
}

/// Maps uids/gids to NFSv4 owner strings and back for one server.
pub struct IdMap {
    domain: String,
    use_names: bool,
    accounts: Accounts,
}

impl std::fmt::Debug for IdMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdMap")
            .field("domain", &self.domain)
            .field("use_names", &self.use_names)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Kind {
    User,
    Group,
}

impl IdMap {
    /// Names from the system's name service; an id or a name it does not
    /// know is sent and accepted as a number.
    pub fn new(domain: &str, use_names: bool) -> IdMap {
        IdMap {
            domain: domain.to_string(),
            use_names,
            accounts: Accounts::System(crate::nss::Nss::system()),
        }
    }

    /// Builds the map from passwd- and group-format text (for tests, and for
    /// callers that get the tables elsewhere).
    pub fn from_tables(domain: &str, use_names: bool, passwd: &str, group: &str) -> IdMap {
        IdMap {
            domain: domain.to_string(),
            use_names,
            accounts: Accounts::Tables {
                users: Table::parse(passwd, domain),
                groups: Table::parse(group, domain),
            },
        }
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// "name@domain" if names are in use and the uid has an entry, else "1000".
    pub fn owner(&self, uid: u32) -> Bytes {
        self.string(Kind::User, uid)
    }

    pub fn group(&self, gid: u32) -> Bytes {
        self.string(Kind::Group, gid)
    }

    /// The owner string for `uid`, as XDR (length, bytes, padding), written
    /// straight into `out` without a temporary.
    pub fn pack_owner(&self, uid: u32, out: &mut BytesMut) {
        self.pack(Kind::User, uid, out)
    }

    pub fn pack_group(&self, gid: u32, out: &mut BytesMut) {
        self.pack(Kind::Group, gid, out)
    }

    /// Accepts "1000", "name@domain" (domain compared case-insensitively) and
    /// a bare "name"; anything else is NFS4ERR_BADOWNER.
    pub fn uid(&self, s: &[u8]) -> Result<u32, Nfsstat4> {
        self.id(Kind::User, s)
    }

    pub fn gid(&self, s: &[u8]) -> Result<u32, Nfsstat4> {
        self.id(Kind::Group, s)
    }

    /// "name@domain" for `id`, if names are in use and it has one.
    fn named(&self, kind: Kind, id: u32) -> Option<Bytes> {
        if !self.use_names {
            return None;
        }
        match (&self.accounts, kind) {
            (Accounts::Tables { users, .. }, Kind::User) => users.by_id.get(&id).cloned(),
            (Accounts::Tables { groups, .. }, Kind::Group) => groups.by_id.get(&id).cloned(),
            (Accounts::System(nss), Kind::User) => nss
                .user_by_uid(id)
                .map(|u| Bytes::from(format!("{}@{}", u.name, self.domain))),
            (Accounts::System(nss), Kind::Group) => nss
                .group_by_gid(id)
                .map(|g| Bytes::from(format!("{}@{}", g.name, self.domain))),
        }
    }

    /// The id named `name` (without the domain).
    fn by_name(&self, kind: Kind, name: &[u8]) -> Option<u32> {
        match (&self.accounts, kind) {
            (Accounts::Tables { users, .. }, Kind::User) => users.by_name.get(name).copied(),
            (Accounts::Tables { groups, .. }, Kind::Group) => groups.by_name.get(name).copied(),
            (Accounts::System(nss), kind) => {
                let name = std::str::from_utf8(name).ok()?;
                match kind {
                    Kind::User => nss.user_by_name(name).map(|u| u.uid),
                    Kind::Group => nss.group_by_name(name).map(|g| g.gid),
                }
            }
        }
    }

    fn string(&self, kind: Kind, id: u32) -> Bytes {
        match self.named(kind, id) {
            Some(b) => b,
            None => Bytes::from(id.to_string()),
        }
    }

    fn pack(&self, kind: Kind, id: u32, out: &mut BytesMut) {
        match self.named(kind, id) {
            Some(b) => xdr::pack_opaque(&b, out),
            None => {
                // A u32 has at most 10 digits: format on the stack.
                let mut buf = [0u8; 10];
                let mut w = &mut buf[..];
                let _ = write!(w, "{id}");
                let n = 10 - w.len();
                xdr::pack_opaque(&buf[..n], out);
            }
        }
    }

    fn id(&self, kind: Kind, s: &[u8]) -> Result<u32, Nfsstat4> {
        if let Some(id) = numeric(s) {
            return Ok(id);
        }
        let name = match s.iter().rposition(|&b| b == b'@') {
            Some(at) => {
                if !s[at + 1..].eq_ignore_ascii_case(self.domain.as_bytes()) {
                    return Err(Nfsstat4::NFS4ERR_BADOWNER);
                }
                &s[..at]
            }
            None => s,
        };
        if let Some(id) = self.by_name(kind, name) {
            return Ok(id);
        }
        // "1000@domain" is what some idmappers send for an id without a name.
        numeric(name).ok_or(Nfsstat4::NFS4ERR_BADOWNER)
    }
}

/// A decimal u32 with nothing else around it ("", "+1", " 1", "1x" are not).
fn numeric(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > 10 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "\
# comment
root:x:0:0:root:/root:/bin/bash
alice:x:1000:1000:Alice:/home/alice:/bin/sh
bob:x:1001:1001::/home/bob:/bin/sh
alice2:x:1000:1000:dup uid:/:/bin/sh
+nisuser::::::
broken line
weird:x:notanumber:0::/:/bin/sh
";
    const GROUP: &str = "root:x:0:\nstaff:x:50:alice,bob\nalice:x:1000:\n";

    fn map(use_names: bool) -> IdMap {
        IdMap::from_tables("Example.COM", use_names, PASSWD, GROUP)
    }

    #[test]
    fn owner_strings() {
        let m = map(true);
        assert_eq!(&m.owner(1000)[..], b"alice@Example.COM");
        assert_eq!(&m.owner(0)[..], b"root@Example.COM");
        // No entry: a number even with names on.
        assert_eq!(&m.owner(4242)[..], b"4242");
        assert_eq!(&m.group(50)[..], b"staff@Example.COM");
        assert_eq!(&m.group(7)[..], b"7");
        let m = map(false);
        assert_eq!(&m.owner(1000)[..], b"1000");
        assert_eq!(&m.group(50)[..], b"50");
        assert_eq!(&m.owner(u32::MAX)[..], b"4294967295");
    }

    #[test]
    fn pack_matches_string() {
        for use_names in [false, true] {
            let m = map(use_names);
            for id in [0, 7, 50, 1000, 1001, 4242, u32::MAX] {
                let mut out = BytesMut::new();
                m.pack_owner(id, &mut out);
                assert_eq!(out.freeze(), xdr::to_bytes(&m.owner(id)));
                let mut out = BytesMut::new();
                m.pack_group(id, &mut out);
                assert_eq!(out.freeze(), xdr::to_bytes(&m.group(id)));
            }
        }
    }

    #[test]
    fn parse_owner_strings() {
        for use_names in [false, true] {
            // Accepting names does not depend on sending them.
            let m = map(use_names);
            assert_eq!(m.uid(b"1000"), Ok(1000));
            assert_eq!(m.uid(b"0"), Ok(0));
            assert_eq!(m.uid(b"4294967295"), Ok(u32::MAX));
            assert_eq!(m.uid(b"alice@example.com"), Ok(1000));
            assert_eq!(m.uid(b"alice@EXAMPLE.com"), Ok(1000));
            assert_eq!(m.uid(b"bob"), Ok(1001));
            assert_eq!(m.uid(b"alice2"), Ok(1000));
            assert_eq!(m.uid(b"4242@example.com"), Ok(4242));
            assert_eq!(m.gid(b"staff@example.com"), Ok(50));
            assert_eq!(m.gid(b"staff"), Ok(50));
            assert_eq!(m.gid(b"50"), Ok(50));
        }
    }

    #[test]
    fn system_accounts_come_from_the_name_service() {
        let m = IdMap::new("example.com", true);
        assert_eq!(&m.owner(0)[..], b"root@example.com");
        assert_eq!(m.uid(b"root@example.com"), Ok(0));
        assert_eq!(m.uid(b"root"), Ok(0));
        assert_eq!(
            m.uid(b"no-such-user-tarn-test"),
            Err(Nfsstat4::NFS4ERR_BADOWNER)
        );
        assert_eq!(&m.owner(4_000_000_123)[..], b"4000000123");
        assert_eq!(&IdMap::new("example.com", false).owner(0)[..], b"0");
    }

    #[test]
    fn bad_owner_strings() {
        let m = map(true);
        let bad: &[&[u8]] = &[
            b"",
            b"@",
            b"nobody",
            b"alice@other.org",
            b"alice@",
            b"@example.com",
            b"4294967296",
            b"-1",
            b"+1",
            b" 1000",
            b"1000 ",
            b"weird",
            b"nisuser",
            b"+nisuser",
            b"\xff\xfe",
            b"staff", // a group, not a user
        ];
        for s in bad {
            assert_eq!(
                m.uid(s),
                Err(Nfsstat4::NFS4ERR_BADOWNER),
                "{:?}",
                String::from_utf8_lossy(s)
            );
        }
        assert_eq!(m.gid(b"bob"), Err(Nfsstat4::NFS4ERR_BADOWNER));
    }
}
