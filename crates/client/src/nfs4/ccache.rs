//! Finding a local user's Kerberos credential cache, as rpc.gssd does for
//! the Linux kernel: the calling process's KRB5CCNAME (from
//! /proc/PID/environ, readable when the mount runs as root), else the
//! default for the uid, `FILE:/tmp/krb5cc_UID`.
//!
//! Only file caches (`FILE:path`, a bare path, and the primary cache of a
//! `DIR:` collection) are supported: KEYRING and KCM caches are reached
//! through the kernel's keyrings or sssd's socket as the user, which a
//! process acting for many users cannot do without changing identity.
//!
//! The mount reads the file itself and checks that the caller owns it (a
//! regular file, not through a symlink): otherwise any user could point
//! KRB5CCNAME at another user's cache and borrow their identity, as the
//! mount runs with the privilege to read every cache. What MIT then opens
//! is a private copy (mode 0600 in a directory only we can enter), so the
//! file checked is the file used.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The value of KRB5CCNAME in a process environment as
/// /proc/PID/environ holds it (NUL-separated `NAME=value`).
pub fn krb5ccname_in(environ: &[u8]) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"KRB5CCNAME="))
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The default credential cache of `uid` when its process names none
/// (MIT's built-in default; sites that configure another in krb5.conf
/// have their users' processes name it in KRB5CCNAME anyway).
pub fn default_for(uid: u32) -> String {
    format!("FILE:/tmp/krb5cc_{uid}")
}

/// The credential cache process `pid` names, if it names one and its
/// environment can be read.
pub fn of_process(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    krb5ccname_in(&env)
}

/// Where a cache name points, for the kinds we can read.
#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    File(PathBuf),
    /// A `DIR:` collection: its primary cache is named in `primary`.
    Dir(PathBuf),
    /// KEYRING:, KCM:, MEMORY:, API: ...: named here.
    Unsupported(String),
}

pub fn kind(name: &str) -> Kind {
    if let Some(p) = name.strip_prefix("FILE:") {
        return Kind::File(PathBuf::from(p));
    }
    if let Some(p) = name.strip_prefix("DIR:") {
        // DIR::path names one cache of the collection directly.
        return match p.strip_prefix(':') {
            Some(f) => Kind::File(PathBuf::from(f)),
            None => Kind::Dir(PathBuf::from(p)),
        };
    }
    if name.starts_with('/') {
        return Kind::File(PathBuf::from(name));
    }
    let ty = name.split(':').next().unwrap_or(name);
    Kind::Unsupported(ty.to_string())
}

/// Whether a cache file with these properties may stand for `uid`.
pub fn acceptable(file_uid: u32, is_regular: bool, uid: u32) -> Result<(), String> {
    if !is_regular {
        return Err("not a regular file".into());
    }
    if file_uid != uid {
        return Err(format!("owned by uid {file_uid}, not by the caller"));
    }
    Ok(())
}

/// Reads `path` if it is a regular file (not reached through a final
/// symlink) that `uid` owns.
fn read_owned(path: &Path, uid: u32) -> Result<Vec<u8>, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let m = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    acceptable(m.uid(), m.file_type().is_file(), uid)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut b = Vec::new();
    f.take(16 << 20)
        .read_to_end(&mut b)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(b)
}

/// The contents of `uid`'s cache named `name`, checked as above.
pub fn read_for(name: &str, uid: u32) -> Result<Vec<u8>, String> {
    match kind(name) {
        Kind::File(p) => read_owned(&p, uid),
        Kind::Dir(d) => {
            // The collection's directory must be the user's too: `primary`
            // names a file in it.
            let primary = read_owned(&d.join("primary"), uid)?;
            let n = String::from_utf8_lossy(&primary).trim().to_string();
            if n.is_empty() || n.contains('/') {
                return Err(format!("{}: bad primary {n:?}", d.display()));
            }
            read_owned(&d.join(n), uid)
        }
        Kind::Unsupported(t) => Err(format!(
            "{t} credential caches are not supported for other users (only FILE and DIR)"
        )),
    }
}

/// A private directory for the copies of users' caches, made once per
/// process: mode 0700 under the temporary directory.
pub fn private_dir() -> std::io::Result<PathBuf> {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(d) = DIR.get() {
        return Ok(d.clone());
    }
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let d = base.join(format!("tarn-ccache-{}-{nanos:x}", std::process::id()));
    // Fails if it exists: nobody can have prepared it for us.
    std::fs::DirBuilder::new().mode(0o700).create(&d)?;
    Ok(DIR.get_or_init(|| d).clone())
}

/// A private copy of a user's cache; removed on drop.
pub struct Copy {
    path: PathBuf,
}

impl Copy {
    /// Copies `uid`'s cache `name` (checked by [`read_for`]); `tag` makes
    /// the file name unique among copies alive at once.
    pub fn of(name: &str, uid: u32, tag: u64) -> Result<Copy, String> {
        let data = read_for(name, uid)?;
        let dir = private_dir().map_err(|e| format!("a private directory: {e}"))?;
        let path = dir.join(format!("uid{uid}-{tag}"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let c = Copy { path };
        f.write_all(&data)
            .map_err(|e| format!("{}: {e}", c.path.display()))?;
        Ok(c)
    }

    /// The name to hand MIT.
    pub fn name(&self) -> String {
        format!("FILE:{}", self.path.display())
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn krb5ccname_is_found_among_the_variables() {
        let env = b"HOME=/home/a\0KRB5CCNAME=FILE:/tmp/cc-a\0PATH=/bin\0";
        assert_eq!(krb5ccname_in(env).as_deref(), Some("FILE:/tmp/cc-a"));
        assert_eq!(krb5ccname_in(b"HOME=/\0XKRB5CCNAME=x\0"), None);
        assert_eq!(krb5ccname_in(b"KRB5CCNAME=\0"), None);
        assert_eq!(krb5ccname_in(b""), None);
    }

    #[test]
    fn cache_kinds() {
        assert_eq!(kind("FILE:/tmp/x"), Kind::File("/tmp/x".into()));
        assert_eq!(kind("/tmp/x"), Kind::File("/tmp/x".into()));
        assert_eq!(kind("DIR:/run/u/k"), Kind::Dir("/run/u/k".into()));
        assert_eq!(
            kind("DIR::/run/u/k/tkt1"),
            Kind::File("/run/u/k/tkt1".into())
        );
        assert_eq!(
            kind("KEYRING:persistent:1000"),
            Kind::Unsupported("KEYRING".into())
        );
        assert_eq!(kind("KCM:"), Kind::Unsupported("KCM".into()));
        assert_eq!(default_for(1000), "FILE:/tmp/krb5cc_1000");
    }

    #[test]
    fn only_the_callers_own_regular_file_will_do() {
        assert!(acceptable(1000, true, 1000).is_ok());
        assert!(acceptable(0, true, 1000).is_err(), "root's cache");
        assert!(acceptable(1001, true, 1000).is_err(), "another user's");
        assert!(acceptable(1000, false, 1000).is_err());
    }

    #[test]
    fn files_are_read_only_when_owned_and_not_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let me = std::fs::metadata(d.path()).unwrap().uid();
        let f = d.path().join("cc");
        std::fs::write(&f, b"tickets").unwrap();
        let name = format!("FILE:{}", f.display());
        assert_eq!(read_for(&name, me).unwrap(), b"tickets");
        assert!(read_for(&name, me + 1).is_err());
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert!(read_for(&format!("FILE:{}", l.display()), me).is_err());
        // A DIR collection's primary cache.
        std::fs::write(d.path().join("primary"), b"cc\n").unwrap();
        assert_eq!(
            read_for(&format!("DIR:{}", d.path().display()), me).unwrap(),
            b"tickets"
        );
        let c = Copy::of(&name, me, 1).unwrap();
        let p = c.name().strip_prefix("FILE:").unwrap().to_string();
        assert_eq!(std::fs::read(&p).unwrap(), b"tickets");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        drop(c);
        assert!(!Path::new(&p).exists());
    }
}
