//! What `tarn serve` is configured from: the command line or a file, the
//! state directory, the exports and their stable ids.

use super::LOG;
use crate::config::{self, Config, ExportConfig};
use crate::{exports_file, INJECT_FAULTS};
use server::export::{parse_sec, Cidr, ClientSpec, Export, ExportIds, Exports, Flavor, Rule};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tracing::warn;

pub(crate) fn describe(e: &ExportConfig) -> String {
    let rules: Vec<String> = e
        .rules
        .iter()
        .map(|r| format!("{}: {}", r.client, r.describe()))
        .collect();
    let sec: Vec<&str> = e.sec.iter().map(|f| f.name()).collect();
    format!(
        "{} as {} (sec={}) to {}",
        e.path.display(),
        e.pseudo,
        sec.join(","),
        if rules.is_empty() {
            "nobody".into()
        } else {
            rules.join("; ")
        }
    )
}

pub(crate) fn default_state_dir() -> PathBuf {
    if effective_uid() == 0 {
        PathBuf::from("/var/lib/tarn")
    } else {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        home.join(".local/state/tarn")
    }
}

pub(crate) fn effective_uid() -> u32 {
    // std has no geteuid; /proc/self/status's Uid line has (real, effective, ...).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

pub(crate) fn build_config(
    dir: Option<PathBuf>,
    listen: String,
    allow: Vec<String>,
    config: Option<&ConfigSource>,
    state_dir: Option<PathBuf>,
    sec: Option<String>,
) -> Result<(Config, SocketAddr, PathBuf), String> {
    let (cfg, state_dir) = match config {
        Some(source) => {
            if dir.is_some() {
                return Err("give either DIR or --config/--exports, not both".into());
            }
            if sec.is_some() {
                return Err(
                    "--sec is for the default export: with --config, set `sec` per export (with --exports, sec= per client)".into(),
                );
            }
            let c = source.load()?;
            let sd = state_dir
                .or(c.state_dir.clone())
                .unwrap_or_else(|| match source {
                    ConfigSource::Toml(file) => {
                        file.parent().unwrap_or(Path::new(".")).to_path_buf()
                    }
                    // /etc is no place for state.
                    ConfigSource::Exports(_) => default_state_dir(),
                });
            (c, sd)
        }
        None => {
            let dir = dir.unwrap_or_else(|| PathBuf::from("export"));
            // `tarn serve cephfs://[id@][fs]/dir`: that directory of a
            // CephFS (ceph.conf and keyring from CEPH_CONF / CEPH_ARGS or
            // /etc/ceph, as every Ceph tool finds them).
            let ceph = match dir.to_str() {
                Some(u) if u.starts_with("cephfs://") => {
                    Some(vfs::cephfs::CephConfig::parse_url(u).map_err(|m| format!("{u}: {m}"))?)
                }
                _ => None,
            };
            if ceph.is_none() && !dir.exists() {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let path = match ceph {
                Some(_) => dir.clone(),
                None => dir
                    .canonicalize()
                    .map_err(|e| format!("{}: {e}", dir.display()))?,
            };
            let mut clients: Vec<Cidr> =
                vec!["127.0.0.1/32".parse().unwrap(), "::1/128".parse().unwrap()];
            for a in &allow {
                clients.push(a.parse::<Cidr>().map_err(|e| format!("--allow {e}"))?);
            }
            let e = ExportConfig {
                path,
                pseudo: "/".into(),
                rules: clients
                    .into_iter()
                    .map(|c| Rule::new(ClientSpec::Net(c), true))
                    .collect(),
                sec: match &sec {
                    Some(s) => parse_sec(s).map_err(|e| format!("--sec {e}"))?,
                    None => vec![Flavor::Sys],
                },
                delegations: config::default_delegations(ceph.is_some()),
                xprtsec: rpc::tls::XprtSec::ALL.to_vec(),
                ceph,
            };
            (
                Config {
                    listen: None,
                    state_dir: None,
                    exports: vec![e],
                    nfs4: Default::default(),
                    auth_cache: Default::default(),
                    gss: Default::default(),
                    limits: Default::default(),
                    tls: None,
                    tls_identities: Vec::new(),
                    cluster: None,
                    tls_ktls: None,
                },
                state_dir.unwrap_or_else(default_state_dir),
            )
        }
    };
    let listen = cfg.listen.clone().unwrap_or(listen);
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| format!("--listen {listen:?}: expected ADDR:PORT such as 127.0.0.1:2049"))?;
    Ok((cfg, addr, state_dir))
}

/// Where the exports come from; read again on reload.
#[derive(Clone, Debug)]
pub(crate) enum ConfigSource {
    Toml(PathBuf),
    /// An exports(5) file, converted by exports_file.
    Exports(PathBuf),
}

impl ConfigSource {
    pub(crate) fn file(&self) -> &Path {
        match self {
            ConfigSource::Toml(f) | ConfigSource::Exports(f) => f,
        }
    }

    /// Loads the configuration; an exports file's warnings are logged.
    pub(crate) fn load(&self) -> Result<Config, String> {
        match self {
            ConfigSource::Toml(f) => config::load(f),
            ConfigSource::Exports(f) => {
                let (c, warnings) = exports_file::load(f)?;
                for w in warnings {
                    warn!(target: LOG, file = %f.display(), line = w.line, "{}", w.msg);
                }
                Ok(c)
            }
        }
    }
}

pub(crate) fn build_exports(cfg: &Config, old: Option<&Exports>) -> Result<Vec<Export>, String> {
    let mut exports = Vec::new();
    for e in &cfg.exports {
        let backend: Arc<dyn vfs::Backend> = match old.and_then(|o| o.by_path(&e.path)) {
            Some(o) => o.backend.clone(),
            None => {
                let fs: Arc<dyn vfs::Backend> = match &e.ceph {
                    Some(c) => Arc::new(
                        vfs::cephfs::CephFs::new(c)
                            .map_err(|err| format!("cannot export {}: {err}", e.path.display()))?,
                    ),
                    None => Arc::new(
                        vfs::local::LocalFs::new(&e.path)
                            .map_err(|err| format!("cannot export {}: {err}", e.path.display()))?,
                    ),
                };
                if INJECT_FAULTS.load(std::sync::atomic::Ordering::Relaxed) {
                    warn!(target: LOG, export = %e.path.display(), "debug fault injection: files named eio-* fail with EIO, edquot-* run out of quota");
                    Arc::new(vfs::faulty::Faulty::new(fs))
                } else {
                    fs
                }
            }
        };
        exports.push(Export {
            id: 0,
            path: e.path.clone(),
            pseudo: e.pseudo.clone(),
            backend,
            rules: e.rules.clone(),
            sec: e.sec.clone(),
            delegations: e.delegations,
            xprtsec: e.xprtsec.clone(),
        });
    }
    Ok(exports)
}

/// This head's name for its CephFS sessions, made once and kept in the
/// state directory, so a restart ends the session a crash left
/// (vfs::cephfs::set_head_id). Only made when a CephFS export is served at
/// startup: one added by a reload mounts without it.
pub(crate) fn ceph_head_id(state_dir: &Path) -> Result<String, String> {
    let path = state_dir.join("ceph-head-id");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/uuid")
                .map(|u| u.trim().to_string())
                .map_err(|e| format!("a name for this head: {e}"))?;
            vfs::durable::replace(&path, id.as_bytes())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(id)
        }
    }
}

/// SIGHUP: re-read the exports. Connections stay; each call after the swap
/// sees the new rules with an empty auth cache. A bad file changes nothing.
/// (listen, state_dir and [nfs4] need a restart: they are logged, not applied.)
/// The export-id map of the state directory (none yet: an empty map, so a
/// first start numbers exports in file order, as before the map existed).
pub(crate) fn load_ids(path: &Path) -> Result<ExportIds, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => ExportIds::parse(&t).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ExportIds::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Replaces the map whole and durably: a crash leaves the old one or the
/// new one, and clients' handles depend on it.
pub(crate) fn save_ids(path: &Path, ids: &ExportIds) -> Result<(), String> {
    vfs::durable::replace(path, ids.render().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}
