//! Exports: a directory (a backend), who may reach it, and how their
//! credentials are mapped (root squashing).

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
}

impl Export {
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.clients.iter().any(|c| c.contains(ip))
    }

    /// The credential the backend acts with for this caller.
    pub fn cred_for(&self, auth: &Auth) -> Cred {
        let anon = Cred {
            uid: self.anon_uid,
            gid: self.anon_gid,
            gids: Vec::new(),
        };
        let Auth::Sys(s) = auth else { return anon };
        match self.squash {
            Squash::All => anon,
            Squash::None => Cred {
                uid: s.uid,
                gid: s.gid,
                gids: s.gids.clone(),
            },
            Squash::Root => Cred {
                uid: if s.uid == 0 { self.anon_uid } else { s.uid },
                gid: if s.gid == 0 { self.anon_gid } else { s.gid },
                gids: s
                    .gids
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
            .collect();
        Exports { list }
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
}
