//! The server's configuration: from the command line alone (one export) or
//! from a TOML file. Errors name the file, the line and what was expected.
//! The reference is docs/configuration.md and the pages it links (a test
//! below checks that they name every key); the sketch here is the common
//! part.
//!
//! ```toml
//! listen = "0.0.0.0:2049"        # optional
//! state_dir = "/var/lib/tarn"    # optional: where the file-handle key lives
//!
//! [[export]]                     # the simple form: one set of options
//! path = "/srv/data"             # the directory
//! pseudo = "/data"               # what clients mount (default: path)
//! clients = ["10.0.0.0/8", "::1"]
//! read_only = false
//! squash = "root"                # "root" (default), "all" or "none"
//! anonuid = 65534
//! anongid = 65534
//! secure = false                 # true: AUTH_SYS calls only from ports below 1024
//! sec = ["krb5p", "sys"]         # accepted flavors: sys (default), krb5, krb5i, krb5p
//! delegations = "read-write"     # NFSv4 delegations: "none", "read", "read-write" (default;
//!                                #   "read" on cephfs:// exports, where write ones are never granted)
//!
//! [[export]]                     # the rule form: first matching rule wins
//! path = "/srv/home"
//! rules = [
//!   { client = "10.1.0.0/16", options = ["rw", "no_root_squash"] },
//!   { client = "build.example.com", options = ["rw"] },
//!   { client = "*.example.com", options = ["ro", "all_squash"], anonuid = 1000, anongid = 1000 },
//! ]
//! # client: an address, a CIDR, a host name, *.domain, or * (everyone).
//! # options: rw or ro (the default, as in exports(5)); root_squash (the
//! # default), no_root_squash or all_squash; insecure (the default, unlike
//! # exports(5)) or secure. Clients no rule matches get nothing.
//!
//! [auth_cache]                   # optional; applied again on SIGHUP
//! ttl_seconds = 300              # decisions; host-name lookups (at start only)
//! negative_ttl_seconds = 30      # refusals expire sooner
//! max_clients = 1048576          # addresses cached (LRU beyond)
//! max_creds_per_client = 64      # credentials per address
//!
//! [nfs4]                         # optional
//! lease_seconds = 90             # how long a silent client keeps its state
//! grace_seconds = 90             # after a restart, time for clients to reclaim
//! idmap_domain = "example.com"   # owner strings are user@idmap_domain
//! id_names = false               # send names instead of numeric ids
//!
//! [limits]                       # optional: resource bounds (docs/limits.md)
//! max_connections = 4096         # open connections, all clients
//! max_connections_per_client = 256   # per client address
//! max_calls_per_connection = 128 # executing at once; then the connection is not read
//! drc_entries_per_client = 1024  # duplicate request cache
//! drc_max_bytes = 67108864       # duplicate request cache, all clients
//! max_nfs4_clients = 8192        # EXCHANGE_ID/SETCLIENTID refused beyond
//! max_opens_per_client = 65536   # OPEN refused beyond
//! max_locks_per_client = 65536   # LOCK (new lock owner or file) refused beyond
//! max_delegations = 65536        # default: 4 per MiB of RAM; none granted beyond
//! max_session_slots = 128        # NFSv4.1 slots (and slot-cache entries) per session
//! max_courteous_clients = 1024   # lapsed clients whose state is kept
//! max_gss_contexts = 16384       # least recently used evicted beyond
//!
//! [cluster]                      # optional: several heads (docs/cluster.md)
//! etcd = ["http://127.0.0.1:2379"]   # the recovery store's endpoints (http only)
//! node = "head1"                 # this head's name, unique in the cluster
//! name = "tarn"                  # the cluster: keys live under /tarn/<name>/
//! lease_seconds = 10             # a head silent this long is taken as failed
//! service_names = ["10.0.0.10"]  # what NFSv3 clients mount (floating addresses, DNS names):
//!                                # SM_NOTIFY names the server so (default: its own address)
//!
//! [gss]                          # optional: Kerberos (RPCSEC_GSS)
//! keytab = "/etc/krb5.keytab"    # nfs/<host> key (--keytab wins, then this, then KRB5_KTNAME)
//! machine_principals = "root"    # nfs/, host/, root/ principals: "root" (uid 0, then
//!                                # squashed per export) or "anonymous" (as Linux nfsd)
//! local_realms = ["EXAMPLE.COM"] # realms whose user@REALM are local users (default:
//!                                # krb5.conf's default_realm); others are anonymous
//! [gss.principals]               # exact principals, checked first
//! "alice@PARTNER.ORG" = "alice"  # a local user,
//! "backup/h1@EXAMPLE.COM" = "2000:2000:10,20"   # uid:gid[:gids],
//! "guest@EXAMPLE.COM" = "anonymous"             # or the export's anonymous ids
//! ```

use serde::Deserialize;
use server::export::{Cidr, ClientSpec, Flavor, Rule, Squash};
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub path: PathBuf,
    pub pseudo: String,
    /// First match wins.
    pub rules: Vec<Rule>,
    /// Accepted security flavors, in preference order.
    pub sec: Vec<Flavor>,
    /// NFSv4 delegations allowed (default: read-write).
    pub delegations: server::export::Delegations,
    /// Connection protections accepted (RPC-with-TLS): none, tls, mtls.
    pub xprtsec: Vec<rpc::tls::XprtSec>,
    /// A CephFS export (`path = "cephfs://..."`): where it is and how to
    /// reach it; None for a local directory.
    pub ceph: Option<vfs::cephfs::CephConfig>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub exports: Vec<ExportConfig>,
    pub nfs4: server::nfs4::Nfs4Config,
    pub auth_cache: server::auth_cache::CacheConfig,
    pub gss: GssSettings,
    pub limits: Limits,
    /// The `[tls]` section: server certificate, key, client CA.
    pub tls: Option<rpc::tls::TlsFiles>,
    /// `[[tls.identity]]`: client certificates mapped to users, in order.
    pub tls_identities: Vec<rpc::tls_identity::IdentityRule>,
    /// `[tls] ktls`: kernel TLS offload (default auto).
    pub tls_ktls: Option<rpc::ktls_offload::KtlsMode>,
    /// `[cluster]`: recovery records and grace shared through etcd.
    pub cluster: Option<ClusterConfig>,
}

/// The `[cluster]` section.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `host:port` of each etcd endpoint (from `http://host:port`).
    pub etcd: Vec<String>,
    pub node: String,
    pub name: String,
    pub lease: std::time::Duration,
    /// The names NFSv3 clients know the server by (the service addresses
    /// that move between heads, or their DNS names): SM_NOTIFY carries each
    /// as its mon_name, since a client's statd only takes a notice that
    /// names a server it monitors. Empty: the head's own address.
    pub service_names: Vec<String>,
}

/// The `[limits]` section: every resource bound in one place. The NFSv4
/// ones (clients, opens, locks, delegations, slots, courtesy) are copied
/// into [`server::nfs4::Nfs4Config`] when the server starts.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub max_calls_per_connection: usize,
    pub drc_entries_per_client: usize,
    pub drc_max_bytes: usize,
    pub max_gss_contexts: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let rpc = rpc::ServerConfig::default();
        Limits {
            max_connections: rpc.max_connections,
            max_connections_per_client: rpc.max_connections_per_client,
            max_calls_per_connection: rpc.max_in_flight,
            drc_entries_per_client: rpc.drc_per_client,
            drc_max_bytes: rpc.drc_max_bytes,
            max_gss_contexts: rpc::gss::GssConfig::default().max_contexts,
        }
    }
}

/// The `[gss]` section.
#[derive(Debug, Clone, Default)]
pub struct GssSettings {
    pub keytab: Option<PathBuf>,
    /// `machine_principals = "anonymous"`.
    pub machines_anonymous: bool,
    /// None: krb5.conf's default_realm, read when the server starts.
    pub local_realms: Option<Vec<String>>,
    pub principals: std::collections::HashMap<String, server::principal::MapTo>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    state_dir: Option<PathBuf>,
    #[serde(default)]
    export: Vec<RawExport>,
    nfs4: Option<RawNfs4>,
    auth_cache: Option<RawAuthCache>,
    gss: Option<RawGss>,
    limits: Option<RawLimits>,
    tls: Option<Spanned<RawTls>>,
    cluster: Option<Spanned<RawCluster>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    etcd: Option<Vec<Spanned<String>>>,
    node: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    lease_seconds: Option<Spanned<u64>>,
    service_names: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    /// "auto" or "off".
    ktls: Option<Spanned<String>>,
    #[serde(default)]
    identity: Vec<Spanned<RawIdentity>>,
}

/// `[[tls.identity]]`: a client certificate mapped to a user.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    #[serde(rename = "match")]
    matches: Spanned<String>,
    uid: u32,
    gid: u32,
    #[serde(default)]
    gids: Vec<u32>,
}

/// What `[tls]` gives: the files, the identity rules, the kTLS mode.
type TlsSection = (
    Option<rpc::tls::TlsFiles>,
    Vec<rpc::tls_identity::IdentityRule>,
    Option<rpc::ktls_offload::KtlsMode>,
);

/// One `[limits]` key: (value, name, lowest, highest, where it goes).
type LimitSlot<'a> = (&'a Option<Spanned<i64>>, &'a str, i64, i64, &'a mut usize);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_connections: Option<Spanned<i64>>,
    max_connections_per_client: Option<Spanned<i64>>,
    max_calls_per_connection: Option<Spanned<i64>>,
    drc_entries_per_client: Option<Spanned<i64>>,
    drc_max_bytes: Option<Spanned<i64>>,
    max_nfs4_clients: Option<Spanned<i64>>,
    max_opens_per_client: Option<Spanned<i64>>,
    max_locks_per_client: Option<Spanned<i64>>,
    max_delegations: Option<Spanned<i64>>,
    max_session_slots: Option<Spanned<i64>>,
    max_courteous_clients: Option<Spanned<i64>>,
    max_gss_contexts: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGss {
    keytab: Option<PathBuf>,
    machine_principals: Option<Spanned<String>>,
    local_realms: Option<Vec<String>>,
    #[serde(default)]
    principals: std::collections::HashMap<String, Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuthCache {
    ttl_seconds: Option<Spanned<u64>>,
    negative_ttl_seconds: Option<Spanned<u64>>,
    max_clients: Option<Spanned<usize>>,
    max_creds_per_client: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNfs4 {
    lease_seconds: Option<Spanned<u64>>,
    grace_seconds: Option<u64>,
    idmap_domain: Option<String>,
    id_names: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    path: Spanned<String>,
    pseudo: Option<Spanned<String>>,
    clients: Option<Vec<Spanned<String>>>,
    read_only: Option<Spanned<bool>>,
    squash: Option<Spanned<String>>,
    anonuid: Option<u32>,
    anongid: Option<u32>,
    rules: Option<Spanned<Vec<Spanned<RawRule>>>>,
    sec: Option<Spanned<Vec<Spanned<String>>>>,
    delegations: Option<Spanned<String>>,
    secure: Option<bool>,
    xprtsec: Option<Spanned<Vec<Spanned<String>>>>,
    ceph_conf: Option<Spanned<String>>,
    ceph_keyring: Option<Spanned<String>>,
    ceph_open_files: Option<Spanned<u64>>,
    ceph_open_idle_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    client: Spanned<String>,
    #[serde(default)]
    options: Vec<Spanned<String>>,
    anonuid: Option<u32>,
    anongid: Option<u32>,
}

/// The file being parsed, for errors that name its file and line.
struct Src<'a> {
    file: &'a dyn std::fmt::Display,
    text: &'a str,
}

impl Src<'_> {
    /// `FILE:LINE: what`, LINE being where `span` starts.
    fn err(&self, span: &std::ops::Range<usize>, what: impl std::fmt::Display) -> String {
        format!("{}:{}: {what}", self.file, line_of(self.text, span.start))
    }
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset.min(src.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// Parses a configuration file's text; `file` is used in error messages.
pub fn parse(file: &Path, src: &str) -> Result<Config, String> {
    let f = file.display();
    let raw: RawConfig = toml::from_str(src).map_err(|e| {
        let line = e.span().map(|s| line_of(src, s.start)).unwrap_or(0);
        format!("{f}:{line}: {}", e.message())
    })?;
    if raw.export.is_empty() {
        return Err(format!("{f}:1: expected at least one [[export]] table"));
    }
    let cx = Src {
        file: &f,
        text: src,
    };
    let mut exports = Vec::new();
    for e in raw.export {
        exports.push(export(&cx, e)?);
    }
    let mut nfs4 = nfs4_section(&cx, raw.nfs4)?;
    let auth_cache = auth_cache_section(&cx, raw.auth_cache)?;
    let limits = limits_section(&cx, raw.limits, &mut nfs4)?;
    let gss = gss_section(&cx, raw.gss)?;
    let (tls, tls_identities, tls_ktls) = tls_section(&cx, raw.tls)?;
    let cluster = cluster_section(&cx, raw.cluster)?;
    Ok(Config {
        cluster,
        listen: raw.listen,
        state_dir: raw.state_dir,
        exports,
        nfs4,
        auth_cache,
        gss,
        limits,
        tls,
        tls_identities,
        tls_ktls,
    })
}

/// One `[[export]]` table.
fn export(cx: &Src, e: RawExport) -> Result<ExportConfig, String> {
    let path = PathBuf::from(e.path.get_ref());
    let ceph = if e.path.get_ref().starts_with("cephfs://") {
        let mut c = vfs::cephfs::CephConfig::parse_url(e.path.get_ref())
            .map_err(|m| cx.err(&e.path.span(), m))?;
        c.conf = e.ceph_conf.as_ref().map(|s| s.get_ref().clone());
        c.keyring = e.ceph_keyring.as_ref().map(|s| s.get_ref().clone());
        if let Some(n) = &e.ceph_open_files {
            if *n.get_ref() == 0 {
                return Err(cx.err(
                    &n.span(),
                    "ceph_open_files must be at least 1 (files kept open between READs and WRITEs)",
                ));
            }
            c.open_files = Some(*n.get_ref() as usize);
        }
        c.open_idle = e
            .ceph_open_idle_ms
            .as_ref()
            .map(|m| std::time::Duration::from_millis(*m.get_ref()));
        Some(c)
    } else {
        if !path.is_absolute() {
            return Err(cx.err(
                &e.path.span(),
                format!(
                    "export path {:?} must be absolute (or a cephfs:// URL)",
                    e.path.get_ref()
                ),
            ));
        }
        if let Some(s) = e.ceph_conf.as_ref().or(e.ceph_keyring.as_ref()) {
            return Err(cx.err(
                &s.span(),
                "ceph_conf and ceph_keyring belong to a cephfs:// export",
            ));
        }
        if let Some(n) = e.ceph_open_files.as_ref().or(e.ceph_open_idle_ms.as_ref()) {
            return Err(cx.err(
                &n.span(),
                "ceph_open_files and ceph_open_idle_ms belong to a cephfs:// export",
            ));
        }
        None
    };
    let pseudo = match &e.pseudo {
        Some(p) if !p.get_ref().starts_with('/') => {
            return Err(cx.err(
                &p.span(),
                format!("pseudo path {:?} must start with '/'", p.get_ref()),
            ))
        }
        Some(p) => p.get_ref().clone(),
        // A CephFS export is mounted as its path within the file system.
        None => match &ceph {
            Some(c) => c.path.clone(),
            None => e.path.get_ref().clone(),
        },
    };
    let (anon_uid, anon_gid) = (e.anonuid.unwrap_or(65534), e.anongid.unwrap_or(65534));
    let rules = export_rules(cx, &e, anon_uid, anon_gid)?;
    let sec = match &e.sec {
        None => vec![Flavor::Sys],
        Some(list) => choice_list(cx, list, "sec", "\"sys\", \"krb5\", \"krb5i\", \"krb5p\"")?,
    };
    let delegations = match &e.delegations {
        None => default_delegations(ceph.is_some()),
        Some(d) => d
            .get_ref()
            .parse()
            .map_err(|m| cx.err(&d.span(), format!("delegations = {m}")))?,
    };
    let xprtsec = match &e.xprtsec {
        None => rpc::tls::XprtSec::ALL.to_vec(),
        Some(list) => choice_list(cx, list, "xprtsec", "\"none\", \"tls\", \"mtls\"")?,
    };
    Ok(ExportConfig {
        path,
        pseudo,
        rules,
        sec,
        delegations,
        xprtsec,
        ceph,
    })
}

/// A non-empty list of names (`sec`, `xprtsec`), each parsed, in the
/// order given and without repeats; `choices` is what an empty one gets told.
fn choice_list<T: std::str::FromStr<Err = String> + PartialEq>(
    cx: &Src,
    list: &Spanned<Vec<Spanned<String>>>,
    key: &str,
    choices: &str,
) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    for x in list.get_ref() {
        let x = x
            .get_ref()
            .parse::<T>()
            .map_err(|m| cx.err(&x.span(), format!("{key} {m}")))?;
        if !v.contains(&x) {
            v.push(x);
        }
    }
    if v.is_empty() {
        return Err(cx.err(
            &list.span(),
            format!("{key} = []: expected at least one of {choices}"),
        ));
    }
    Ok(v)
}

/// An export's client rules: the simple form (clients, squash,
/// read_only) or `rules = [...]`, not both.
fn export_rules(
    cx: &Src,
    e: &RawExport,
    anon_uid: u32,
    anon_gid: u32,
) -> Result<Vec<Rule>, String> {
    match (&e.clients, &e.rules) {
        (Some(_), Some(r)) => Err(cx.err(
            &r.span(),
            "expected either clients = [...] (one set of options) or rules = [...], not both",
        )),
        (None, None) => Err(cx.err(
            &e.path.span(),
            format!(
                "export {:?} has no clients: expected clients = [...] or rules = [...]",
                e.path.get_ref()
            ),
        )),
        (Some(clients), None) => {
            let squash = match e.squash.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
                None | Some(("root", _)) => Squash::Root,
                Some(("all", _)) => Squash::All,
                Some(("none", _)) => Squash::None,
                Some((other, span)) => {
                    return Err(cx.err(
                        &span,
                        format!("squash = {other:?}: expected \"root\", \"all\" or \"none\""),
                    ))
                }
            };
            let rw = !e.read_only.as_ref().is_some_and(|r| *r.get_ref());
            let mut rules = Vec::new();
            for c in clients {
                let cidr = c
                    .get_ref()
                    .parse::<Cidr>()
                    .map_err(|m| cx.err(&c.span(), m))?;
                rules.push(Rule {
                    client: ClientSpec::Net(cidr),
                    rw,
                    squash,
                    anon_uid,
                    anon_gid,
                    secure: e.secure.unwrap_or(false),
                });
            }
            Ok(rules)
        }
        (None, Some(raw)) => {
            if let Some(s) = &e.squash {
                return Err(cx.err(
                    &s.span(),
                    "squash belongs to the simple form: with rules, give root_squash, no_root_squash or all_squash in each rule's options",
                ));
            }
            if let Some(r) = &e.read_only {
                return Err(cx.err(
                    &r.span(),
                    "read_only belongs to the simple form: with rules, give rw or ro in each rule's options",
                ));
            }
            let mut rules = Vec::new();
            for r in raw.get_ref() {
                rules.push(rule(cx, r, anon_uid, anon_gid)?);
            }
            Ok(rules)
        }
    }
}

/// `[nfs4]`.
fn nfs4_section(cx: &Src, raw: Option<RawNfs4>) -> Result<server::nfs4::Nfs4Config, String> {
    let mut nfs4 = server::nfs4::Nfs4Config::default();
    if let Some(n) = raw {
        if let Some(l) = n.lease_seconds {
            if !(1..=3600).contains(l.get_ref()) {
                return Err(cx.err(&l.span(), "lease_seconds must be 1..=3600"));
            }
            nfs4.lease = std::time::Duration::from_secs(*l.get_ref());
        }
        if let Some(g) = n.grace_seconds {
            nfs4.grace = std::time::Duration::from_secs(g);
        }
        if let Some(d) = n.idmap_domain {
            nfs4.domain = d;
        }
        if let Some(b) = n.id_names {
            nfs4.id_names = b;
        }
    }
    Ok(nfs4)
}

/// `[auth_cache]`.
fn auth_cache_section(
    cx: &Src,
    raw: Option<RawAuthCache>,
) -> Result<server::auth_cache::CacheConfig, String> {
    let mut auth_cache = server::auth_cache::CacheConfig::default();
    if let Some(a) = raw {
        let secs = |v: &Option<Spanned<u64>>, name: &str, d: std::time::Duration| match v {
            Some(v) if !(1..=86400).contains(v.get_ref()) => {
                Err(cx.err(&v.span(), format!("{name} must be 1..=86400")))
            }
            Some(v) => Ok(std::time::Duration::from_secs(*v.get_ref())),
            None => Ok(d),
        };
        auth_cache.ttl = secs(&a.ttl_seconds, "ttl_seconds", auth_cache.ttl)?;
        auth_cache.negative_ttl = secs(
            &a.negative_ttl_seconds,
            "negative_ttl_seconds",
            auth_cache.negative_ttl,
        )?;
        for (v, name, slot) in [
            (&a.max_clients, "max_clients", &mut auth_cache.max_clients),
            (
                &a.max_creds_per_client,
                "max_creds_per_client",
                &mut auth_cache.max_creds_per_client,
            ),
        ] {
            if let Some(v) = v {
                if *v.get_ref() == 0 {
                    return Err(cx.err(&v.span(), format!("{name} must be at least 1")));
                }
                *slot = *v.get_ref();
            }
        }
    }
    Ok(auth_cache)
}

/// `[limits]`: the server's own, and the NFSv4 state's bounds in `nfs4`.
fn limits_section(
    cx: &Src,
    raw: Option<RawLimits>,
    nfs4: &mut server::nfs4::Nfs4Config,
) -> Result<Limits, String> {
    let mut limits = Limits::default();
    if let Some(l) = raw {
        // Each bound: (value, key, lowest, highest, where it goes).
        let mut slots: Vec<LimitSlot<'_>> = vec![
            (
                &l.max_connections,
                "max_connections",
                1,
                1 << 20,
                &mut limits.max_connections,
            ),
            (
                &l.max_connections_per_client,
                "max_connections_per_client",
                1,
                1 << 20,
                &mut limits.max_connections_per_client,
            ),
            (
                &l.max_calls_per_connection,
                "max_calls_per_connection",
                1,
                65536,
                &mut limits.max_calls_per_connection,
            ),
            (
                &l.drc_entries_per_client,
                "drc_entries_per_client",
                1,
                1 << 20,
                &mut limits.drc_entries_per_client,
            ),
            (
                &l.drc_max_bytes,
                "drc_max_bytes",
                1 << 16,
                1 << 40,
                &mut limits.drc_max_bytes,
            ),
            (
                &l.max_nfs4_clients,
                "max_nfs4_clients",
                1,
                1 << 24,
                &mut nfs4.limits.max_clients,
            ),
            (
                &l.max_opens_per_client,
                "max_opens_per_client",
                1,
                1 << 24,
                &mut nfs4.limits.max_opens_per_client,
            ),
            (
                &l.max_locks_per_client,
                "max_locks_per_client",
                1,
                1 << 24,
                &mut nfs4.limits.max_locks_per_client,
            ),
            (
                &l.max_delegations,
                "max_delegations",
                0,
                1 << 24,
                &mut nfs4.max_delegations,
            ),
            (
                &l.max_courteous_clients,
                "max_courteous_clients",
                0,
                1 << 24,
                &mut nfs4.courtesy.max_clients,
            ),
            (
                &l.max_gss_contexts,
                "max_gss_contexts",
                16,
                1 << 24,
                &mut limits.max_gss_contexts,
            ),
        ];
        for (v, name, lo, hi, slot) in slots.iter_mut() {
            if let Some(v) = v {
                let n = *v.get_ref();
                if n < *lo || n > *hi {
                    return Err(cx.err(
                        &v.span(),
                        format!("{name} = {n}: expected a number from {lo} to {hi}"),
                    ));
                }
                **slot = n as usize;
            }
        }
        if let Some(v) = &l.max_session_slots {
            let n = *v.get_ref();
            if !(1..=1024).contains(&n) {
                return Err(cx.err(
                    &v.span(),
                    format!("max_session_slots = {n}: expected a number from 1 to 1024"),
                ));
            }
            nfs4.max_slots = n as u32;
        }
    }
    Ok(limits)
}

/// `[gss]`: Kerberos.
fn gss_section(cx: &Src, raw: Option<RawGss>) -> Result<GssSettings, String> {
    let mut gss = GssSettings::default();
    if let Some(g) = raw {
        gss.keytab = g.keytab;
        gss.local_realms = g.local_realms;
        if let Some(m) = g.machine_principals {
            gss.machines_anonymous = match m.get_ref().as_str() {
                "root" => false,
                "anonymous" => true,
                other => {
                    return Err(cx.err(
                        &m.span(),
                        format!("machine_principals {other:?}: expected \"root\" or \"anonymous\""),
                    ))
                }
            };
        }
        for (principal, to) in g.principals {
            if !principal.contains('@') {
                return Err(cx.err(
                    &to.span(),
                    format!("principal {principal:?}: expected name@REALM"),
                ));
            }
            let to = server::principal::MapTo::parse(to.get_ref())
                .map_err(|e| cx.err(&to.span(), format!("{principal}: {e}")))?;
            gss.principals.insert(principal, to);
        }
    }
    Ok(gss)
}

/// `[tls]` and its `[[tls.identity]]` rules.
fn tls_section(cx: &Src, raw: Option<Spanned<RawTls>>) -> Result<TlsSection, String> {
    let mut tls_identities = Vec::new();
    let mut tls_ktls = None;
    let tls = match raw {
        None => None,
        Some(t) => {
            let span = t.span();
            let t = t.into_inner();
            if let Some(k) = &t.ktls {
                tls_ktls = Some(
                    k.get_ref()
                        .parse()
                        .map_err(|e| cx.err(&k.span(), format!("[tls] ktls = {e}")))?,
                );
            }
            for i in t.identity {
                let i = i.into_inner();
                let m = i.matches;
                tls_identities.push(rpc::tls_identity::IdentityRule {
                    matches: m
                        .get_ref()
                        .parse()
                        .map_err(|e| cx.err(&m.span(), format!("[[tls.identity]] match = {e}")))?,
                    text: m.into_inner(),
                    uid: i.uid,
                    gid: i.gid,
                    gids: i.gids,
                });
            }
            if !tls_identities.is_empty() && t.client_ca.is_none() {
                return Err(cx.err(
                    &span,
                    "[[tls.identity]] maps client certificates, but no client_ca is configured to verify them by",
                ));
            }
            match (t.cert, t.key) {
                (Some(cert), Some(key)) => Some(rpc::tls::TlsFiles {
                    cert,
                    key,
                    client_ca: t.client_ca,
                }),
                _ => {
                    return Err(cx.err(
                        &span,
                        "[tls] expected both cert = \"FILE\" and key = \"FILE\"",
                    ))
                }
            }
        }
    };
    Ok((tls, tls_identities, tls_ktls))
}

/// `[cluster]`: etcd and this head's name.
fn cluster_section(
    cx: &Src,
    raw: Option<Spanned<RawCluster>>,
) -> Result<Option<ClusterConfig>, String> {
    Ok(match raw {
        None => None,
        Some(c) => {
            let span = c.span();
            let c = c.into_inner();
            let etcd = match c.etcd {
                Some(e) if !e.is_empty() => e,
                _ => {
                    return Err(cx.err(
                        &span,
                        "[cluster] expected etcd = [\"http://host:port\", ...]",
                    ))
                }
            };
            let mut endpoints = Vec::new();
            for u in etcd {
                let hp = u
                    .get_ref()
                    .strip_prefix("http://")
                    .map(|r| r.trim_end_matches('/'))
                    .filter(|r| !r.is_empty() && !r.contains('/') && r.contains(':'));
                match hp {
                    Some(hp) => endpoints.push(hp.to_string()),
                    None => {
                        return Err(cx.err(
                            &u.span(),
                            format!(
                                "etcd endpoint {:?}: expected http://host:port (TLS to etcd is not supported)",
                                u.get_ref()
                            ),
                        ))
                    }
                }
            }
            let word = |v: Option<Spanned<String>>, what: &str, default: Option<&str>| {
                let ok = |w: &str| {
                    !w.is_empty()
                        && w.len() <= 64
                        && w.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                };
                match (v, default) {
                    (Some(v), _) if ok(v.get_ref()) => Ok(v.into_inner()),
                    (Some(v), _) => Err(cx.err(
                        &v.span(),
                        format!(
                            "{what} = {:?}: expected 1 to 64 letters, digits, '.', '_' or '-'",
                            v.get_ref()
                        ),
                    )),
                    (None, Some(d)) => Ok(d.to_string()),
                    (None, None) => Err(cx.err(
                        &span,
                        format!(
                        "[cluster] expected {what} = \"...\" (this head's name, unique in the cluster)"
                    ),
                    )),
                }
            };
            let node = word(c.node, "node", None)?;
            let name = word(c.name, "name", Some("tarn"))?;
            let lease = match c.lease_seconds {
                Some(l) if !(2..=600).contains(l.get_ref()) => {
                    return Err(cx.err(&l.span(), "lease_seconds must be 2..=600"))
                }
                Some(l) => *l.get_ref(),
                None => 10,
            };
            let mut service_names = Vec::new();
            for n in c.service_names.unwrap_or_default() {
                // SM_MAXSTRLEN; a name with spaces or controls is a typo.
                let ok = |w: &str| {
                    !w.is_empty() && w.len() <= 1024 && w.bytes().all(|b| b.is_ascii_graphic())
                };
                if !ok(n.get_ref()) {
                    return Err(cx.err(
                        &n.span(),
                        format!(
                            "service_names entry {:?}: expected a host name or address",
                            n.get_ref()
                        ),
                    ));
                }
                service_names.push(n.into_inner());
            }
            Some(ClusterConfig {
                etcd: endpoints,
                node,
                name,
                lease: std::time::Duration::from_secs(lease),
                service_names,
            })
        }
    })
}

fn rule(cx: &Src, r: &Spanned<RawRule>, anon_uid: u32, anon_gid: u32) -> Result<Rule, String> {
    let raw = r.get_ref();
    let client = raw
        .client
        .get_ref()
        .parse::<ClientSpec>()
        .map_err(|m| cx.err(&raw.client.span(), m))?;
    let mut rule = Rule {
        client,
        rw: false,
        squash: Squash::Root,
        anon_uid: raw.anonuid.unwrap_or(anon_uid),
        anon_gid: raw.anongid.unwrap_or(anon_gid),
        secure: false,
    };
    let (mut access, mut squash, mut port): (Option<&str>, Option<&str>, Option<&str>) =
        (None, None, None);
    for o in &raw.options {
        let o_str = o.get_ref().as_str();
        let (slot, what) = match o_str {
            "rw" | "ro" => (&mut access, "rw or ro"),
            "root_squash" | "no_root_squash" | "all_squash" => (&mut squash, "squash option"),
            "secure" | "insecure" => (&mut port, "secure or insecure"),
            other => {
                return Err(cx.err(
                    &o.span(),
                    format!("option {other:?}: expected rw, ro, root_squash, no_root_squash, all_squash, secure or insecure"),
                ))
            }
        };
        if let Some(prev) = slot.replace(o_str) {
            if prev != o_str {
                return Err(cx.err(
                    &o.span(),
                    format!("option {o_str:?} contradicts {prev:?}: expected one {what} per rule"),
                ));
            }
        }
    }
    rule.rw = access == Some("rw");
    rule.secure = port == Some("secure");
    rule.squash = match squash {
        Some("no_root_squash") => Squash::None,
        Some("all_squash") => Squash::All,
        _ => Squash::Root,
    };
    Ok(rule)
}

/// The human summary `tarn check-config` prints for one export.
/// What `[gss]` does to Kerberos principals, for check-config; empty when absent.
pub fn explain_gss(g: &GssSettings) -> String {
    if g.keytab.is_none()
        && !g.machines_anonymous
        && g.local_realms.is_none()
        && g.principals.is_empty()
    {
        return String::new();
    }
    let mut s = String::from("kerberos principals:\n");
    if let Some(k) = &g.keytab {
        s += &format!("  keytab {}\n", k.display());
    }
    let mut names: Vec<_> = g.principals.iter().collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    for (p, to) in names {
        s += &format!("  {p} -> {to:?}\n");
    }
    match &g.local_realms {
        Some(r) => s += &format!("  user@REALM is the local user for realms {r:?}; other realms are anonymous\n"),
        None => s += "  user@REALM is the local user for krb5.conf's default_realm; other realms are anonymous\n",
    }
    s += if g.machines_anonymous {
        "  machine principals (nfs/, host/, root/) are anonymous\n"
    } else {
        "  machine principals (nfs/, host/, root/) are root, then squashed per export\n"
    };
    s
}

pub fn explain(e: &ExportConfig) -> String {
    let mut s = if e.pseudo == e.path.to_string_lossy() {
        format!("{}:\n", e.path.display())
    } else {
        format!("{} (mounted as {}):\n", e.path.display(), e.pseudo)
    };
    if let Some(c) = &e.ceph {
        s.push_str(&format!(
            "  CephFS {} of {} as client.{}, config {}, keyring {}\n",
            c.path,
            c.fs_name.as_deref().unwrap_or("the default file system"),
            c.id.as_deref().unwrap_or("admin"),
            c.conf.as_deref().unwrap_or("from CEPH_CONF or /etc/ceph"),
            c.keyring.as_deref().unwrap_or("from the Ceph config"),
        ));
    }
    for r in &e.rules {
        s.push_str(&format!(
            "  {:<24} {}\n",
            r.client.to_string(),
            r.describe()
        ));
    }
    if !e.rules.iter().any(|r| r.client == ClientSpec::Any) {
        s.push_str(&format!("  {:<24} no access\n", "anyone else"));
    }
    s
}

pub fn load(file: &Path) -> Result<Config, String> {
    let src = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    parse(file, &src)
}

/// An export's delegations when it names none: read-write, and read on a
/// CephFS export (each read delegation is backed by one of CephFS's, which
/// another head's or CephFS client's conflicting open recalls; write
/// delegations are never granted there).
pub fn default_delegations(cephfs: bool) -> server::export::Delegations {
    if cephfs {
        server::export::Delegations::Read
    } else {
        Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `src` as t.toml, which must be accepted.
    fn ok(src: &str) -> Config {
        parse(Path::new("t.toml"), src).unwrap()
    }

    /// Parses `src` as t.toml, which must be refused: the message.
    fn err(src: &str) -> String {
        parse(Path::new("t.toml"), src).unwrap_err()
    }

    /// `src` is refused with a message naming t.toml, `line` and `what`.
    fn refused_at(src: &str, line: usize, what: &str) {
        let e = err(src);
        assert!(
            e.starts_with(&format!("t.toml:{line}: ")) && e.contains(what),
            "{e}"
        );
    }

    /// One export of /srv to no one (lines 1-3), then `rest`.
    fn srv(rest: &str) -> String {
        format!("[[export]]\npath = \"/srv\"\nclients = []\n{rest}")
    }

    #[test]
    fn good_config() {
        let c = ok(
            "listen = \"127.0.0.1:3049\"\n[[export]]\npath = \"/srv\"\npseudo = \"/\"\nclients = [\"10.0.0.0/8\"]\nsquash = \"none\"\n",
        );
        assert_eq!(c.exports[0].rules[0].squash, Squash::None);
        assert_eq!(c.listen.as_deref(), Some("127.0.0.1:3049"));
    }

    #[test]
    fn cluster_section() {
        let c = ok(&srv(
            "[cluster]\netcd = [\"http://127.0.0.1:2379\", \"http://[::1]:2379/\"]\nnode = \"head1\"\n",
        ));
        let cl = c.cluster.unwrap();
        assert_eq!(cl.etcd, ["127.0.0.1:2379", "[::1]:2379"]);
        assert_eq!((cl.node.as_str(), cl.name.as_str()), ("head1", "tarn"));
        assert_eq!(cl.lease, std::time::Duration::from_secs(10));
        assert!(cl.service_names.is_empty());
        let c = ok(&srv(
            "[cluster]\netcd = [\"http://e:2379\"]\nnode = \"a\"\nservice_names = [\"10.0.0.10\", \"nfs.example.com\"]\n",
        ));
        assert_eq!(
            c.cluster.unwrap().service_names,
            ["10.0.0.10", "nfs.example.com"]
        );
        for (body, line, what) in [
            (
                "[cluster]\netcd = [\"http://e:2379\"]\nnode = \"a\"\nservice_names = [\"a b\"]\n",
                7,
                "service_names",
            ),
            ("[cluster]\nnode = \"a\"\n", 4, "etcd"),
            (
                "[cluster]\netcd = [\"https://e:2379\"]\nnode = \"a\"\n",
                5,
                "http://host:port",
            ),
            ("[cluster]\netcd = [\"http://e:2379\"]\n", 4, "node"),
            (
                "[cluster]\netcd = [\"http://e:2379\"]\nnode = \"a/b\"\n",
                6,
                "node",
            ),
            (
                "[cluster]\netcd = [\"http://e:2379\"]\nnode = \"a\"\nlease_seconds = 1\n",
                7,
                "lease_seconds",
            ),
        ] {
            refused_at(&srv(body), line, what);
        }
    }

    #[test]
    fn cephfs_export() {
        let c = ok(
            "[[export]]\npath = \"cephfs://nfs@cephfs/shared\"\nceph_conf = \"/etc/ceph/c.conf\"\nceph_keyring = \"/k\"\nclients = []\n",
        );
        let e = &c.exports[0];
        let ceph = e.ceph.as_ref().unwrap();
        assert_eq!(ceph.id.as_deref(), Some("nfs"));
        assert_eq!(ceph.fs_name.as_deref(), Some("cephfs"));
        assert_eq!(ceph.conf.as_deref(), Some("/etc/ceph/c.conf"));
        assert_eq!(ceph.keyring.as_deref(), Some("/k"));
        assert_eq!(
            e.pseudo, "/shared",
            "mounted as its path in the file system"
        );
        assert!(explain(e).contains("CephFS /shared of cephfs as client.nfs"));
        refused_at(
            "[[export]]\npath = \"/srv\"\nceph_conf = \"/c\"\nclients = []\n",
            3,
            "cephfs://",
        );
        refused_at(
            "[[export]]\npath = \"cephfs://client.x@/\"\nclients = []\n",
            2,
            "",
        );
        let c = ok(
            "[[export]]\npath = \"cephfs:///\"\nceph_open_files = 100\nceph_open_idle_ms = 250\nclients = []\n",
        );
        let ceph = c.exports[0].ceph.as_ref().unwrap();
        assert_eq!(ceph.open_files, Some(100));
        assert_eq!(ceph.open_idle, Some(std::time::Duration::from_millis(250)));
        refused_at(
            "[[export]]\npath = \"cephfs:///\"\nceph_open_files = 0\nclients = []\n",
            3,
            "at least 1",
        );
        refused_at(
            "[[export]]\npath = \"/srv\"\nceph_open_idle_ms = 9\nclients = []\n",
            3,
            "cephfs://",
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        for (src, line, what) in [
            (
                "[[export]]\npath = \"/srv\"\nclients = [\n  \"10.0.0.0/8\",\n  \"banana\"]\n",
                5,
                "",
            ),
            (
                "[[export]]\npath = \"/srv\"\nclients = []\nsquash = \"some\"\n",
                4,
                "expected",
            ),
            ("[[export]]\npath = \"srv\"\nclients = []\n", 2, "absolute"),
            (
                "[[export]]\npath = \"/srv\"\nclients = []\ncolour = 1\n",
                4,
                "",
            ),
        ] {
            refused_at(src, line, what);
        }
    }

    #[test]
    fn rule_form() {
        let c = ok(
            "[[export]]\npath = \"/srv\"\nanonuid = 7\nrules = [\n  { client = \"h.example.com\", options = [\"rw\", \"all_squash\"] },\n  { client = \"*\", anongid = 9 },\n]\n",
        );
        let r = &c.exports[0].rules;
        assert_eq!(r[0].client, ClientSpec::Host("h.example.com".into()));
        assert!(r[0].rw);
        assert_eq!((r[0].squash, r[0].anon_uid), (Squash::All, 7));
        assert!(!r[1].rw, "ro unless rw is given, as in exports(5)");
        assert_eq!(
            (r[1].squash, r[1].anon_uid, r[1].anon_gid),
            (Squash::Root, 7, 9)
        );
        refused_at(
            "[[export]]\npath = \"/srv\"\nrules = [\n  { client = \"*\", options = [\"rw\",\n \"ro\"] },\n]\n",
            5,
            "contradicts",
        );
        refused_at(
            "[[export]]\npath = \"/srv\"\nsquash = \"all\"\nrules = []\n",
            3,
            "simple form",
        );
        let c = ok(&srv("[auth_cache]\nttl_seconds = 60\nmax_clients = 10\n"));
        assert_eq!(c.auth_cache.ttl, std::time::Duration::from_secs(60));
        assert_eq!(c.auth_cache.max_clients, 10);
        refused_at(&srv("[auth_cache]\nmax_creds_per_client = 0\n"), 5, "");
        refused_at("[[export]]\npath = \"/srv\"\n", 2, "no clients");
    }

    #[test]
    fn limits_section() {
        let c = ok(&srv(
            "[limits]\nmax_connections = 10\nmax_connections_per_client = 2\nmax_nfs4_clients = 5\nmax_opens_per_client = 7\nmax_locks_per_client = 8\nmax_delegations = 0\nmax_session_slots = 16\ndrc_max_bytes = 1048576\nmax_gss_contexts = 64\n",
        ));
        assert_eq!(
            (
                c.limits.max_connections,
                c.limits.max_connections_per_client
            ),
            (10, 2)
        );
        assert_eq!(c.limits.drc_max_bytes, 1 << 20);
        assert_eq!(c.limits.max_gss_contexts, 64);
        assert_eq!(c.nfs4.limits.max_clients, 5);
        assert_eq!(c.nfs4.limits.max_opens_per_client, 7);
        assert_eq!(c.nfs4.limits.max_locks_per_client, 8);
        assert_eq!(c.nfs4.max_delegations, 0);
        assert_eq!(c.nfs4.max_slots, 16);
        // Defaults where not given.
        let d = ok(&srv(""));
        assert_eq!(d.limits.max_connections, 4096);
        assert_eq!(d.limits.max_calls_per_connection, 128);
        // Errors name the file, the line and what was expected.
        assert_eq!(
            err(&srv("[limits]\n\nmax_connections = 0\n")),
            "t.toml:6: max_connections = 0: expected a number from 1 to 1048576"
        );
        refused_at(&srv("[limits]\nmax_conections = 1\n"), 5, "max_conections");
    }

    #[test]
    fn sec_list() {
        let c = ok(&srv("sec = [\"krb5p\", \"sys\"]\n"));
        assert_eq!(c.exports[0].sec, vec![Flavor::Krb5p, Flavor::Sys]);
        refused_at(&srv("sec = [\n \"krb5p\",\n \"krb6\"]\n"), 6, "krb5i");
    }

    #[test]
    fn delegations_per_export() {
        use server::export::Delegations;
        let c = ok(&srv(""));
        assert_eq!(c.exports[0].delegations, Delegations::ReadWrite);
        for (v, want) in [
            ("none", Delegations::None),
            ("read", Delegations::Read),
            ("read-write", Delegations::ReadWrite),
        ] {
            let c = ok(&srv(&format!("delegations = \"{v}\"\n")));
            assert_eq!(c.exports[0].delegations, want);
        }
        let e = err(&srv("delegations = \"all\"\n"));
        assert!(
            e.starts_with("t.toml:4: delegations = ") && e.contains("read-write"),
            "{e}"
        );
    }

    #[test]
    fn gss_section() {
        let src = "[[export]]\npath = \"/srv\"\nclients = []\n\n[gss]\nmachine_principals = \"anonymous\"\n\
                   local_realms = [\"EXAMPLE.COM\"]\n[gss.principals]\n\"a@P.ORG\" = \"alice\"\n\
                   \"b/h@EXAMPLE.COM\" = \"5:6:7\"\n";
        let c = ok(src);
        assert!(c.gss.machines_anonymous);
        assert_eq!(c.gss.local_realms, Some(vec!["EXAMPLE.COM".to_string()]));
        assert_eq!(
            c.gss.principals["a@P.ORG"],
            server::principal::MapTo::User("alice".into())
        );
        assert!(explain_gss(&c.gss).contains("b/h@EXAMPLE.COM -> Ids"));
        let e = err(&src.replace("5:6:7", "5:x"));
        assert!(e.starts_with("t.toml:10: b/h@EXAMPLE.COM: "), "{e}");
        refused_at(&src.replace("\"anonymous\"", "\"nobody\""), 6, "\"root\"");
        let e = err(&src.replace("a@P.ORG", "alice"));
        assert!(e.contains("expected name@REALM"), "{e}");
    }

    #[test]
    fn xprtsec_and_tls_section() {
        let tls = "[tls]\ncert = \"/s.pem\"\nkey = \"/s.key\"\n";
        let c = ok(&format!("{tls}{}", srv("xprtsec = [\"tls\", \"mtls\"]\n")));
        use rpc::tls::XprtSec;
        assert_eq!(c.exports[0].xprtsec, vec![XprtSec::Tls, XprtSec::Mtls]);
        assert_eq!(c.tls.unwrap().cert, PathBuf::from("/s.pem"));
        assert_eq!(c.tls_ktls, None);
        let c = ok(&format!("{tls}ktls = \"off\"\n{}", srv("")));
        assert_eq!(c.tls_ktls, Some(rpc::ktls_offload::KtlsMode::Off));
        refused_at(
            &format!("{tls}ktls = \"on\"\n{}", srv("")),
            4,
            "expected \"auto\" or \"off\"",
        );
        let c = ok(&srv(""));
        assert_eq!(c.exports[0].xprtsec, XprtSec::ALL.to_vec());
        refused_at(
            &srv("xprtsec = [\n \"tls\",\n \"ssl\"]\n"),
            6,
            "\"ssl\": expected \"none\", \"tls\" or \"mtls\"",
        );
        let e = err(&format!("[tls]\ncert = \"/s.pem\"\n{}", srv("")));
        assert!(
            e.starts_with("t.toml:") && e.contains("expected both cert"),
            "{e}"
        );
    }

    #[test]
    fn tls_identity_map() {
        let head = "[tls]\ncert = \"/s.pem\"\nkey = \"/s.key\"\nclient_ca = \"/ca.pem\"\n";
        let c = ok(&format!(
            "{head}[[tls.identity]]\nmatch = \"CN=nfsguest\"\nuid = 1234\ngid = 100\ngids = [5]\n[[tls.identity]]\nmatch = \"san:dns:h1.example\"\nuid = 0\ngid = 0\n{}",
            srv("")
        ));
        assert_eq!(c.tls_identities.len(), 2);
        assert_eq!(c.tls_identities[0].text, "CN=nfsguest");
        assert_eq!(
            (c.tls_identities[0].uid, c.tls_identities[0].gid),
            (1234, 100)
        );
        assert_eq!(c.tls_identities[0].gids, vec![5]);
        assert!(c.tls_identities[1].gids.is_empty());
        let e = err(&format!(
            "{head}[[tls.identity]]\nmatch = \"san:foo:x\"\nuid = 1\ngid = 1\n{}",
            srv("")
        ));
        assert!(e.starts_with("t.toml:6: [[tls.identity]] match = "), "{e}");
        let e = err(&format!(
            "[tls]\ncert = \"/s.pem\"\nkey = \"/s.key\"\n[[tls.identity]]\nmatch = \"CN=a\"\nuid = 1\ngid = 1\n{}",
            srv("")
        ));
        assert!(e.contains("no client_ca"), "{e}");
    }

    /// Takes a struct's key names from its Deserialize impl: serde hands
    /// them to `deserialize_struct`, renames applied.
    struct KeyNames<'a>(&'a mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for KeyNames<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a table"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("names taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }

    fn keys<T: Deserialize<'static>>() -> &'static [&'static str] {
        let mut f: &'static [&'static str] = &[];
        let _ = T::deserialize(KeyNames(&mut f));
        assert!(!f.is_empty(), "{}: no keys", std::any::type_name::<T>());
        f
    }

    /// A key is documented where a page shows it set (`key = ` at a line's
    /// start or in an inline table, or as a table header, `[t.key]` for a
    /// sub-table) or names it (`` `key` ``).
    fn documented(page: &str, key: &str) -> bool {
        page.contains(&format!("`{key}`"))
            || page.contains(&format!("{{ {key} = "))
            || page.contains(&format!(", {key} = "))
            || page.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with(&format!("{key} ="))
                    || l.starts_with(&format!("[{key}]"))
                    || l.starts_with(&format!("[[{key}]]"))
                    || (l.starts_with('[') && l.contains(&format!(".{key}]")))
            })
    }

    /// The configuration reference (docs/configuration.md and the pages it
    /// sends each table to) names every key the parser takes, and its
    /// example parses: a key added, renamed or removed in one place and
    /// not the other fails here.
    #[test]
    fn the_reference_in_docs_names_every_key_and_its_example_parses() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let page = |name: &str| {
            std::fs::read_to_string(docs.join(name)).unwrap_or_else(|e| panic!("docs/{name}: {e}"))
        };
        let tables: [(&str, &[&str], &[&str]); 10] = [
            ("top level", keys::<RawConfig>(), &["configuration.md"]),
            (
                "[[export]]",
                keys::<RawExport>(),
                &["configuration.md", "exports-and-security.md", "cluster.md"],
            ),
            (
                "[[export]] rules",
                keys::<RawRule>(),
                &["configuration.md", "exports-and-security.md"],
            ),
            ("[nfs4]", keys::<RawNfs4>(), &["configuration.md"]),
            (
                "[auth_cache]",
                keys::<RawAuthCache>(),
                &["configuration.md"],
            ),
            ("[limits]", keys::<RawLimits>(), &["limits.md"]),
            ("[gss]", keys::<RawGss>(), &["kerberos.md"]),
            ("[tls]", keys::<RawTls>(), &["tls.md"]),
            ("[[tls.identity]]", keys::<RawIdentity>(), &["tls.md"]),
            ("[cluster]", keys::<RawCluster>(), &["cluster.md"]),
        ];
        let mut missing = Vec::new();
        for (table, names, pages) in tables {
            let texts: Vec<String> = pages.iter().map(|p| page(p)).collect();
            for k in names {
                if !texts.iter().any(|t| documented(t, k)) {
                    missing.push(format!("{table} {k} (in none of {pages:?})"));
                }
            }
        }
        assert!(missing.is_empty(), "undocumented keys: {missing:#?}");

        let reference = page("configuration.md");
        let start = reference.find("```toml\n").expect("a TOML example") + 8;
        let end = start + reference[start..].find("```").expect("its end");
        let c = parse(Path::new("docs/configuration.md"), &reference[start..end])
            .unwrap_or_else(|e| panic!("the reference's example: {e}"));
        assert_eq!(c.exports.len(), 2);
    }
}
