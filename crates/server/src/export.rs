//! Exports: a directory (a backend), who may reach it, and how their
//! credentials are mapped (root squashing).

use rpc::gss::GssService;
use rpc::Auth;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use vfs::{Backend, Cred};

/// An address range: `10.0.0.0/8`, `::1/128`, or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?}: expected an IP address or CIDR like 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        // IPv4 clients on a dual-stack socket appear as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// How callers' identities are mapped before they reach the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Squash {
    /// uid 0 and gid 0 become the anonymous ids (the default).
    Root,
    /// Everyone becomes the anonymous ids.
    All,
    /// Identities pass unchanged.
    None,
}

/// A security flavor an export may require (`sec=` in exports(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// AUTH_SYS (and AUTH_NONE, which maps to the anonymous ids).
    Sys,
    /// RPCSEC_GSS with Kerberos: header checksum only.
    Krb5,
    /// ... and integrity of arguments and results.
    Krb5i,
    /// ... and privacy (encryption).
    Krb5p,
}

impl Flavor {
    pub const ALL: [Flavor; 4] = [Flavor::Sys, Flavor::Krb5, Flavor::Krb5i, Flavor::Krb5p];

    /// The flavor a call arrived with.
    pub fn of(auth: &Auth) -> Flavor {
        match auth {
            Auth::None | Auth::Sys(_) => Flavor::Sys,
            Auth::Gss(g) => match g.service {
                GssService::None => Flavor::Krb5,
                GssService::Integrity => Flavor::Krb5i,
                GssService::Privacy => Flavor::Krb5p,
            },
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Flavor::Sys => "sys",
            Flavor::Krb5 => "krb5",
            Flavor::Krb5i => "krb5i",
            Flavor::Krb5p => "krb5p",
        }
    }

    /// The number MOUNT's auth_flavors carries (RFC 2623 pseudo-flavors).
    pub fn pseudo_flavor(self) -> u32 {
        match self {
            Flavor::Sys => proto::rpc::AUTH_SYS,
            Flavor::Krb5 => proto::gss::RPCSEC_GSS_KRB5,
            Flavor::Krb5i => proto::gss::RPCSEC_GSS_KRB5I,
            Flavor::Krb5p => proto::gss::RPCSEC_GSS_KRB5P,
        }
    }

    /// The GSS service of a Kerberos flavor.
    pub fn gss_service(self) -> Option<GssService> {
        match self {
            Flavor::Sys => None,
            Flavor::Krb5 => Some(GssService::None),
            Flavor::Krb5i => Some(GssService::Integrity),
            Flavor::Krb5p => Some(GssService::Privacy),
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl std::str::FromStr for Flavor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Flavor::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("{s:?}: expected sys, krb5, krb5i or krb5p"))
    }
}

/// Parses `krb5p,krb5i,sys` (order kept: it is the preference order
/// MOUNT and SECINFO report).
pub fn parse_sec(list: &str) -> Result<Vec<Flavor>, String> {
    let mut v: Vec<Flavor> = Vec::new();
    for f in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let f: Flavor = f.parse()?;
        if !v.contains(&f) {
            v.push(f);
        }
    }
    if v.is_empty() {
        return Err("expected at least one of sys, krb5, krb5i, krb5p".into());
    }
    Ok(v)
}

pub struct Export {
    /// Index in [`Exports`]; carried in every file handle of this export.
    pub id: u32,
    /// The directory as the operator named it (absolute); also accepted by MNT.
    pub path: PathBuf,
    /// The path clients mount (`/` for the default export).
    pub pseudo: String,
    pub backend: Arc<dyn Backend>,
    pub clients: Vec<Cidr>,
    pub read_only: bool,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
    /// Flavors callers may use, in preference order (default: sys).
    pub sec: Vec<Flavor>,
}

impl Export {
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.clients.iter().any(|c| c.contains(ip))
    }

    /// Whether the call's security flavor is one this export accepts.
    pub fn permits(&self, auth: &Auth) -> bool {
        self.sec.contains(&Flavor::of(auth))
    }

    /// The credential the backend acts with for this caller.
    pub fn cred_for(&self, auth: &Auth) -> Cred {
        let anon = Cred {
            uid: self.anon_uid,
            gid: self.anon_gid,
            gids: Vec::new(),
        };
        let (uid, gid, gids) = match auth {
            Auth::Sys(s) => (s.uid, s.gid, &s.gids),
            // A Kerberos principal carries the ids it mapped to when its
            // context was established (unknown principals: anonymous).
            Auth::Gss(g) => match &g.ids {
                Some(i) => (i.uid, i.gid, &i.gids),
                None => return anon,
            },
            Auth::None => return anon,
        };
        match self.squash {
            Squash::All => anon,
            Squash::None => Cred {
                uid,
                gid,
                gids: gids.clone(),
            },
            Squash::Root => Cred {
                uid: if uid == 0 { self.anon_uid } else { uid },
                gid: if gid == 0 { self.anon_gid } else { gid },
                gids: gids
                    .iter()
                    .map(|&g| if g == 0 { self.anon_gid } else { g })
                    .collect(),
            },
        }
    }
}

/// All exports, indexed by id.
#[derive(Default)]
pub struct Exports {
    list: Vec<Arc<Export>>,
    /// Flavors every export accepts (bit per [`Flavor`]): calls with one of
    /// these skip the per-export flavor check.
    everywhere: u8,
}

impl Exports {
    pub fn new(list: Vec<Export>) -> Self {
        let list = list
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.id = i as u32;
                Arc::new(e)
            })
            .collect::<Vec<Arc<Export>>>();
        let everywhere = Flavor::ALL
            .into_iter()
            .filter(|f| list.iter().all(|e| e.sec.contains(f)))
            .fold(0, |m, f| m | f.bit());
        Exports { list, everywhere }
    }

    /// Whether every export accepts this call's flavor.
    #[inline]
    pub fn flavor_everywhere(&self, auth: &Auth) -> bool {
        self.everywhere & Flavor::of(auth).bit() != 0
    }

    pub fn get(&self, id: u32) -> Option<&Arc<Export>> {
        self.list.get(id as usize)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.list.iter()
    }

    /// The export a MNT path lies in (by its pseudo path or its real
    /// directory, the longest match winning), and the components of the
    /// path below the export's root.
    pub fn by_mount_path<'p>(&self, path: &'p [u8]) -> Option<(&Arc<Export>, Vec<&'p [u8]>)> {
        let comps = |p: &'p [u8]| -> Vec<&'p [u8]> {
            p.split(|&b| b == b'/')
                .filter(|c| !c.is_empty() && *c != b".")
                .collect()
        };
        let want = comps(path);
        let mut best: Option<(&Arc<Export>, usize)> = None;
        for e in &self.list {
            for root in [e.pseudo.as_bytes(), e.path.as_os_str().as_encoded_bytes()] {
                let r: Vec<&[u8]> = root
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .collect();
                if want.len() >= r.len()
                    && want[..r.len()] == r[..]
                    && best.is_none_or(|(_, n)| r.len() > n)
                {
                    best = Some((e, r.len()));
                }
            }
        }
        best.map(|(e, n)| (e, want[n..].to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matching() {
        let c: Cidr = "10.77.0.0/24".parse().unwrap();
        assert!(c.contains("10.77.0.2".parse().unwrap()));
        assert!(!c.contains("10.77.1.2".parse().unwrap()));
        assert!(c.contains("::ffff:10.77.0.9".parse().unwrap()));
        let l: Cidr = "::1".parse().unwrap();
        assert!(l.contains("::1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense".parse::<Cidr>().is_err());
    }

    fn export(path: &str, pseudo: &str) -> Export {
        Export {
            id: 0,
            path: path.into(),
            pseudo: pseudo.into(),
            backend: Arc::new(vfs::memory::MemFs::new()),
            clients: vec![],
            read_only: false,
            squash: Squash::Root,
            anon_uid: 65534,
            anon_gid: 65534,
            sec: vec![crate::export::Flavor::Sys],
        }
    }

    #[test]
    fn mount_paths() {
        let ex = Exports::new(vec![export("/srv/a", "/"), export("/srv/b", "/b")]);
        let (e, rest) = ex.by_mount_path(b"/").unwrap();
        assert_eq!((e.id, rest.len()), (0, 0));
        let (e, rest) = ex.by_mount_path(b"/b/x/y/").unwrap();
        assert_eq!((e.id, rest), (1, vec![&b"x"[..], &b"y"[..]]));
        let (e, rest) = ex.by_mount_path(b"/srv/a/sub").unwrap();
        assert_eq!((e.id, rest), (0, vec![&b"sub"[..]]));
        assert_eq!(
            ex.by_mount_path(b"/c").unwrap().1,
            vec![&b"c"[..]],
            "below the root export"
        );
    }

    #[test]
    fn root_is_squashed_by_default() {
        let e = export("/x", "/");
        let root = Auth::Sys(rpc::AuthSys {
            stamp: 0,
            machinename: Default::default(),
            uid: 0,
            gid: 0,
            gids: vec![0, 5],
        });
        assert_eq!(
            e.cred_for(&root),
            Cred {
                uid: 65534,
                gid: 65534,
                gids: vec![65534, 5]
            }
        );
        assert_eq!(e.cred_for(&Auth::None).uid, 65534);
    }

    fn gss(principal: &str, ids: Option<(u32, u32)>, service: GssService) -> Auth {
        Auth::Gss(rpc::AuthGss {
            principal: principal.into(),
            service,
            ids: ids.map(|(uid, gid)| rpc::gss::Ids {
                uid,
                gid,
                gids: vec![],
            }),
        })
    }

    #[test]
    fn gss_ids_are_squashed_and_flavors_enforced() {
        let mut e = export("/x", "/");
        e.sec = parse_sec("krb5p,sys").unwrap();
        let user = gss("alice@R", Some((1000, 100)), GssService::Privacy);
        assert_eq!(e.cred_for(&user).uid, 1000);
        let machine = gss("nfs/h@R", Some((0, 0)), GssService::Privacy);
        assert_eq!(e.cred_for(&machine).uid, 65534, "root squashed");
        assert_eq!(
            e.cred_for(&gss("x@R", None, GssService::Privacy)).uid,
            65534
        );
        assert!(e.permits(&user) && e.permits(&Auth::None));
        assert!(!e.permits(&gss("alice@R", None, GssService::Integrity)));
        assert!(parse_sec("krb5,nope").is_err());
        let ex = Exports::new(vec![e, export("/y", "/y")]);
        assert!(ex.flavor_everywhere(&Auth::None));
        assert!(!ex.flavor_everywhere(&user));
    }
}
