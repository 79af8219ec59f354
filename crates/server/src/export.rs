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

/// Which clients a rule is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSpec {
    /// `*`: everyone.
    Any,
    /// An address or a CIDR range.
    Net(Cidr),
    /// A host name (lower case), matched by its addresses (forward lookup).
    Host(String),
    /// `*.example.com`: stored as the suffix `.example.com` (lower case),
    /// matched against the client's forward-confirmed reverse name.
    Domain(String),
}

impl std::str::FromStr for ClientSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "*" {
            return Ok(ClientSpec::Any);
        }
        if let Some(d) = s.strip_prefix("*.") {
            if valid_host(d) {
                return Ok(ClientSpec::Domain(format!(".{}", d.to_ascii_lowercase())));
            }
        } else if let Ok(c) = s.parse::<Cidr>() {
            return Ok(ClientSpec::Net(c));
        } else if s.contains('/') || s.parse::<std::net::Ipv4Addr>().is_ok() {
            // Looks like a network: report the CIDR error, not a host-name one.
            return Err(s.parse::<Cidr>().unwrap_err());
        } else if valid_host(s) && !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Ok(ClientSpec::Host(
                s.trim_end_matches('.').to_ascii_lowercase(),
            ));
        }
        Err(format!(
            "{s:?}: expected an address, a CIDR like 10.0.0.0/8, a host name, *.domain or *"
        ))
    }
}

fn valid_host(s: &str) -> bool {
    let s = s.trim_end_matches('.');
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl std::fmt::Display for ClientSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientSpec::Any => f.write_str("*"),
            ClientSpec::Net(c) => {
                let full = if c.addr.is_ipv4() { 32 } else { 128 };
                if c.prefix == full {
                    write!(f, "{}", c.addr)
                } else {
                    write!(f, "{}/{}", c.addr, c.prefix)
                }
            }
            ClientSpec::Host(h) => f.write_str(h),
            ClientSpec::Domain(d) => write!(f, "*{d}"),
        }
    }
}

/// One client rule of an export: who, and with what options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub client: ClientSpec,
    pub rw: bool,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
    /// exports(5) `secure`: AUTH_SYS and AUTH_NONE calls must come from a
    /// reserved source port (below 1024). Off by default in Tarn (see
    /// docs/limits.md: Tarn and its tests run unprivileged).
    pub secure: bool,
}

impl Rule {
    /// A rule with the defaults: read-write is opt-in elsewhere, so the
    /// caller says which; root squashed to 65534.
    pub fn new(client: ClientSpec, rw: bool) -> Rule {
        Rule {
            client,
            rw,
            squash: Squash::Root,
            anon_uid: 65534,
            anon_gid: 65534,
            secure: false,
        }
    }

    /// The credential the backend acts with for this caller.
    pub fn map(&self, auth: &Auth) -> Cred {
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

    /// "rw, root squashed to 65534:65534" and the like.
    pub fn describe(&self) -> String {
        let ids = format!("{}:{}", self.anon_uid, self.anon_gid);
        let sq = match self.squash {
            Squash::Root => format!("root squashed to {ids}"),
            Squash::All => format!("everyone squashed to {ids}"),
            Squash::None => "root stays root (no_root_squash)".into(),
        };
        let port = if self.secure {
            ", reserved source ports only (secure)"
        } else {
            ""
        };
        format!("{}, {sq}{port}", if self.rw { "rw" } else { "ro" })
    }
}

pub struct Export {
    /// Carried in every file handle of this export; stable across reloads.
    pub id: u32,
    /// The directory as the operator named it (absolute); also accepted by MNT.
    pub path: PathBuf,
    /// The path clients mount (`/` for the default export).
    pub pseudo: String,
    pub backend: Arc<dyn Backend>,
    /// First match wins; no match, no access.
    pub rules: Vec<Rule>,
    /// Flavors callers may use, in preference order (default: sys).
    pub sec: Vec<Flavor>,
    /// Which NFSv4 delegations clients of this export may be given.
    pub delegations: Delegations,
    /// How connections must be protected to use this export (RPC-with-TLS,
    /// knfsd's `xprtsec=`); default: any of none, tls, mtls.
    pub xprtsec: Vec<rpc::tls::XprtSec>,
}

/// The NFSv4 delegations an export allows (`delegations = "none" | "read"
/// | "read-write"`). Both kinds by default, as Linux's server (6.6 and
/// later) grants them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delegations {
    None,
    Read,
    #[default]
    ReadWrite,
}

impl Delegations {
    /// Whether read delegations may be granted.
    pub fn read(self) -> bool {
        self != Delegations::None
    }

    /// Whether write delegations may be granted too.
    pub fn write(self) -> bool {
        self == Delegations::ReadWrite
    }
}

impl std::str::FromStr for Delegations {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Delegations::None),
            "read" => Ok(Delegations::Read),
            "read-write" => Ok(Delegations::ReadWrite),
            other => Err(format!(
                "{other:?}: expected \"none\", \"read\" or \"read-write\""
            )),
        }
    }
}

impl std::fmt::Display for Delegations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Delegations::None => "none",
            Delegations::Read => "read",
            Delegations::ReadWrite => "read-write",
        })
    }
}

impl Export {
    /// The simple form: these networks, all with the same options.
    pub fn simple(
        path: impl Into<PathBuf>,
        pseudo: impl Into<String>,
        backend: Arc<dyn Backend>,
        clients: &[Cidr],
        read_only: bool,
        squash: Squash,
    ) -> Export {
        Export {
            id: 0,
            path: path.into(),
            pseudo: pseudo.into(),
            backend,
            rules: clients
                .iter()
                .map(|c| Rule {
                    squash,
                    ..Rule::new(ClientSpec::Net(*c), !read_only)
                })
                .collect(),
            sec: vec![Flavor::Sys],
            delegations: Delegations::default(),
            xprtsec: rpc::tls::XprtSec::ALL.to_vec(),
        }
    }

    /// Whether the call's security flavor is one this export accepts.
    pub fn permits(&self, auth: &Auth) -> bool {
        self.sec.contains(&Flavor::of(auth))
    }

    /// Whether a connection protected as `x` may use this export.
    pub fn permits_xprt(&self, x: rpc::tls::XprtSec) -> bool {
        self.xprtsec.contains(&x)
    }

    /// Notes, for `tarn doctor`, a call refused for its connection's
    /// protection (when that is why).
    pub fn note_xprt_refusal(&self, ctx: &rpc::CallContext) {
        if !self.permits_xprt(ctx.xprtsec) {
            rpc::tls_events::global().refused(
                ctx.peer.ip(),
                &self.path.display().to_string(),
                ctx.xprtsec,
                &self.xprtsec,
            );
        }
    }

    /// Both: the call's flavor and its connection's protection.
    pub fn permits_call(&self, ctx: &rpc::CallContext) -> bool {
        self.permits(&ctx.auth) && self.permits_xprt(ctx.xprtsec)
    }

    /// Host names the rules name, to look up ahead of need.
    pub fn host_names(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().filter_map(|r| match &r.client {
            ClientSpec::Host(h) => Some(h.as_str()),
            _ => None,
        })
    }
}

/// Export ids by directory, for good: an export keeps its id across
/// reloads and restarts (the map lives in the state directory), so its
/// handles stay valid; a directory never exported before gets the next
/// number, and no number is ever given to another directory, so a removed
/// export's handles answer STALE instead of reaching a newcomer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExportIds {
    by_path: std::collections::BTreeMap<PathBuf, u32>,
}

impl ExportIds {
    /// The id of `path`, assigning the next one if it has none.
    pub fn id(&mut self, path: &std::path::Path) -> u32 {
        if let Some(&id) = self.by_path.get(path) {
            return id;
        }
        let id = self.by_path.values().max().map_or(0, |m| m + 1);
        self.by_path.insert(path.to_path_buf(), id);
        id
    }

    /// Reads the file form: one `ID PATH` per line.
    pub fn parse(text: &str) -> Result<ExportIds, String> {
        let mut by_path = std::collections::BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (id, path) = line
                .split_once(' ')
                .and_then(|(i, p)| Some((i.parse::<u32>().ok()?, p)))
                .ok_or_else(|| format!("line {}: expected `ID PATH`", n + 1))?;
            if by_path.values().any(|&v| v == id) {
                return Err(format!("line {}: id {id} given twice", n + 1));
            }
            by_path.insert(PathBuf::from(path), id);
        }
        Ok(ExportIds { by_path })
    }

    pub fn render(&self) -> String {
        let mut v: Vec<_> = self.by_path.iter().collect();
        v.sort_by_key(|(_, id)| **id);
        v.iter()
            .map(|(p, id)| format!("{id} {}\n", p.display()))
            .collect()
    }
}

/// All exports, indexed by id. Ids are never reused within a process:
/// a removed export's handles must answer STALE, not reach a newcomer.
#[derive(Default)]
pub struct Exports {
    list: Vec<Option<Arc<Export>>>,
    /// Flavors every export accepts (bit per [`Flavor`]): calls with one of
    /// these skip the per-export flavor check.
    everywhere: u8,
    /// Connection protections every export accepts (bit per XprtSec).
    xprt_everywhere: u8,
}

impl Exports {
    /// Numbers exports in order, from 0.
    pub fn new(list: Vec<Export>) -> Self {
        let list = list
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.id = i as u32;
                Some(Arc::new(e))
            })
            .collect();
        Exports::finish(list)
    }

    fn finish(list: Vec<Option<Arc<Export>>>) -> Exports {
        let everywhere = Flavor::ALL
            .into_iter()
            .filter(|f| list.iter().flatten().all(|e| e.sec.contains(f)))
            .fold(0, |m, f| m | f.bit());
        let xprt_everywhere = rpc::tls::XprtSec::ALL
            .into_iter()
            .filter(|x| list.iter().flatten().all(|e| e.xprtsec.contains(x)))
            .fold(0, |m, x| m | (1u8 << x as u8));
        Exports {
            list,
            everywhere,
            xprt_everywhere,
        }
    }

    /// Whether every export accepts this call's flavor.
    #[inline]
    pub fn flavor_everywhere(&self, auth: &Auth) -> bool {
        self.everywhere & Flavor::of(auth).bit() != 0
    }

    /// Whether every export accepts this call's flavor and its
    /// connection's protection (no per-export check needed).
    #[inline]
    pub fn call_everywhere(&self, ctx: &rpc::CallContext) -> bool {
        self.flavor_everywhere(&ctx.auth) && self.xprt_everywhere & (1u8 << ctx.xprtsec as u8) != 0
    }

    /// Exports numbered by `ids` (see [`ExportIds`]).
    pub fn with_ids(list: Vec<Export>, ids: &mut ExportIds) -> Self {
        let mut out: Vec<Option<Arc<Export>>> = Vec::new();
        for mut e in list {
            e.id = ids.id(&e.path);
            let i = e.id as usize;
            if out.len() <= i {
                out.resize(i + 1, None);
            }
            out[i] = Some(Arc::new(e));
        }
        Exports::finish(out)
    }

    /// The export of this directory, if any.
    pub fn by_path(&self, path: &std::path::Path) -> Option<&Arc<Export>> {
        self.iter().find(|e| e.path == path)
    }

    pub fn get(&self, id: u32) -> Option<&Arc<Export>> {
        self.list.get(id as usize).and_then(|e| e.as_ref())
    }

    /// One more than the highest id ever given (the length of per-export tables).
    pub fn id_limit(&self) -> u32 {
        self.list.len() as u32
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.list.iter().flatten()
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
        for e in self.iter() {
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
        Export::simple(
            path,
            pseudo,
            Arc::new(vfs::memory::MemFs::new()),
            &[],
            false,
            Squash::Root,
        )
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
        let e = Rule::new(ClientSpec::Any, true);
        let root = Auth::Sys(rpc::AuthSys {
            stamp: 0,
            machinename: Default::default(),
            uid: 0,
            gid: 0,
            gids: vec![0, 5],
        });
        assert_eq!(
            e.map(&root),
            Cred {
                uid: 65534,
                gid: 65534,
                gids: vec![65534, 5]
            }
        );
        assert_eq!(e.map(&Auth::None).uid, 65534);
    }

    #[test]
    fn client_specs() {
        let p = |s: &str| s.parse::<ClientSpec>();
        assert_eq!(p("*"), Ok(ClientSpec::Any));
        assert_eq!(
            p("10.1.2.3"),
            Ok(ClientSpec::Net("10.1.2.3/32".parse().unwrap()))
        );
        assert_eq!(
            p("Client.Example.com"),
            Ok(ClientSpec::Host("client.example.com".into()))
        );
        assert_eq!(
            p("*.Example.com"),
            Ok(ClientSpec::Domain(".example.com".into()))
        );
        assert!(p("10.0.0.0/40").unwrap_err().contains("prefix"));
        assert!(p("a*.example.com").is_err());
        assert!(p("bad_name").is_err());
        assert!(
            p("1.2.3").is_err(),
            "digits and dots are an address, not a name"
        );
        for s in ["*", "10.0.0.0/8", "::1", "h.example.com", "*.example.com"] {
            assert_eq!(p(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn ids_stay_with_their_directory_and_are_never_reused() {
        let mut ids = ExportIds::default();
        let ex = Exports::with_ids(vec![export("/a", "/a"), export("/b", "/b")], &mut ids);
        assert_eq!(
            (ex.get(0).unwrap().path.to_str(), ex.id_limit()),
            (Some("/a"), 2)
        );
        let r = Exports::with_ids(vec![export("/c", "/c"), export("/b", "/b")], &mut ids);
        assert_eq!(r.by_path("/b".as_ref()).unwrap().id, 1);
        assert_eq!(r.by_path("/c".as_ref()).unwrap().id, 2);
        assert!(r.get(0).is_none(), "removed: its handles go stale");
        // Through the state file (a restart), a comeback gets its old id.
        let mut again = ExportIds::parse(&ids.render()).unwrap();
        assert_eq!(again, ids);
        let r2 = Exports::with_ids(vec![export("/a", "/a"), export("/d", "/d")], &mut again);
        assert_eq!(r2.by_path("/a".as_ref()).unwrap().id, 0);
        assert_eq!(r2.by_path("/d".as_ref()).unwrap().id, 3);
        assert!(ExportIds::parse("0 /a\n0 /b\n").is_err());
        assert!(ExportIds::parse("x /a\n").is_err());
    }
}
