//! The server's configuration: from the command line alone (one export) or
//! from a TOML file. Errors name the file, the line and what was expected.
//!
//! ```toml
//! listen = "0.0.0.0:2049"        # optional
//! state_dir = "/var/lib/tarn"    # optional: where the file-handle key lives
//!
//! [[export]]
//! path = "/srv/data"             # the directory
//! pseudo = "/data"               # what clients mount (default: path)
//! clients = ["10.0.0.0/8", "::1"]
//! read_only = false
//! squash = "root"                # "root" (default), "all" or "none"
//! anonuid = 65534
//! anongid = 65534
//! sec = ["krb5p", "sys"]         # accepted flavors: sys (default), krb5, krb5i, krb5p
//!
//! [nfs4]                         # optional
//! lease_seconds = 90             # how long a silent client keeps its state
//! grace_seconds = 90             # after a restart, time for clients to reclaim
//! idmap_domain = "example.com"   # owner strings are user@idmap_domain
//! id_names = false               # send names instead of numeric ids
//! ```

use serde::Deserialize;
use server::export::{Cidr, Flavor, Squash};
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub path: PathBuf,
    pub pseudo: String,
    pub clients: Vec<Cidr>,
    pub read_only: bool,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
    pub sec: Vec<Flavor>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub exports: Vec<ExportConfig>,
    pub nfs4: server::nfs4::Nfs4Config,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    state_dir: Option<PathBuf>,
    #[serde(default)]
    export: Vec<RawExport>,
    nfs4: Option<RawNfs4>,
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
    clients: Vec<Spanned<String>>,
    #[serde(default)]
    read_only: bool,
    squash: Option<Spanned<String>>,
    anonuid: Option<u32>,
    anongid: Option<u32>,
    sec: Option<Spanned<Vec<Spanned<String>>>>,
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
    let at = |s: &std::ops::Range<usize>| line_of(src, s.start);
    if raw.export.is_empty() {
        return Err(format!("{f}:1: expected at least one [[export]] table"));
    }
    let mut exports = Vec::new();
    for e in raw.export {
        let path = PathBuf::from(e.path.get_ref());
        if !path.is_absolute() {
            return Err(format!(
                "{f}:{}: export path {:?} must be absolute",
                at(&e.path.span()),
                e.path.get_ref()
            ));
        }
        let pseudo = match &e.pseudo {
            Some(p) if !p.get_ref().starts_with('/') => {
                return Err(format!(
                    "{f}:{}: pseudo path {:?} must start with '/'",
                    at(&p.span()),
                    p.get_ref()
                ))
            }
            Some(p) => p.get_ref().clone(),
            None => e.path.get_ref().clone(),
        };
        let mut clients = Vec::new();
        for c in &e.clients {
            clients.push(
                c.get_ref()
                    .parse::<Cidr>()
                    .map_err(|m| format!("{f}:{}: {m}", at(&c.span())))?,
            );
        }
        let squash = match e.squash.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
            None | Some(("root", _)) => Squash::Root,
            Some(("all", _)) => Squash::All,
            Some(("none", _)) => Squash::None,
            Some((other, span)) => {
                return Err(format!(
                    "{f}:{}: squash = {other:?}: expected \"root\", \"all\" or \"none\"",
                    at(&span)
                ))
            }
        };
        let sec = match &e.sec {
            None => vec![Flavor::Sys],
            Some(list) => {
                let mut v = Vec::new();
                for fl in list.get_ref() {
                    let flavor = fl
                        .get_ref()
                        .parse::<Flavor>()
                        .map_err(|m| format!("{f}:{}: sec {m}", at(&fl.span())))?;
                    if !v.contains(&flavor) {
                        v.push(flavor);
                    }
                }
                if v.is_empty() {
                    return Err(format!(
                        "{f}:{}: sec = []: expected at least one of \"sys\", \"krb5\", \"krb5i\", \"krb5p\"",
                        at(&list.span())
                    ));
                }
                v
            }
        };
        exports.push(ExportConfig {
            sec,
            path,
            pseudo,
            clients,
            read_only: e.read_only,
            squash,
            anon_uid: e.anonuid.unwrap_or(65534),
            anon_gid: e.anongid.unwrap_or(65534),
        });
    }
    let mut nfs4 = server::nfs4::Nfs4Config::default();
    if let Some(n) = raw.nfs4 {
        if let Some(l) = n.lease_seconds {
            if !(1..=3600).contains(l.get_ref()) {
                return Err(format!(
                    "{f}:{}: lease_seconds must be 1..=3600",
                    at(&l.span())
                ));
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
    Ok(Config {
        listen: raw.listen,
        state_dir: raw.state_dir,
        exports,
        nfs4,
    })
}

pub fn load(file: &Path) -> Result<Config, String> {
    let src = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    parse(file, &src)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_config() {
        let c = parse(
            Path::new("t.toml"),
            "listen = \"127.0.0.1:3049\"\n[[export]]\npath = \"/srv\"\npseudo = \"/\"\nclients = [\"10.0.0.0/8\"]\nsquash = \"none\"\n",
        )
        .unwrap();
        assert_eq!(c.exports[0].squash, Squash::None);
        assert_eq!(c.listen.as_deref(), Some("127.0.0.1:3049"));
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = [\n  \"10.0.0.0/8\",\n  \"banana\"]\n",
        )
        .unwrap_err();
        assert!(e.starts_with("t.toml:5: "), "{e}");
        let e = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = []\nsquash = \"some\"\n",
        )
        .unwrap_err();
        assert!(e.starts_with("t.toml:4: ") && e.contains("expected"), "{e}");
        let e = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"srv\"\nclients = []\n",
        )
        .unwrap_err();
        assert!(e.starts_with("t.toml:2: ") && e.contains("absolute"), "{e}");
        let e = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = []\ncolour = 1\n",
        )
        .unwrap_err();
        assert!(e.starts_with("t.toml:4: "), "{e}");
        let e = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = []\nsec = [\n \"krb5p\",\n \"krb6\"]\n",
        )
        .unwrap_err();
        assert!(e.starts_with("t.toml:6: ") && e.contains("krb5i"), "{e}");
    }

    #[test]
    fn sec_list() {
        let c = parse(
            Path::new("t.toml"),
            "[[export]]\npath = \"/srv\"\nclients = []\nsec = [\"krb5p\", \"sys\"]\n",
        )
        .unwrap();
        assert_eq!(c.exports[0].sec, vec![Flavor::Krb5p, Flavor::Sys]);
    }
}
