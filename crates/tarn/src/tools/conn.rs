//! Sessions for the tools (one per server and identity, shared by every
//! path on it) and the wording of their errors.

use super::url::NfsUrl;
use client::nfs4::{describe, Error, Nfs4Conn, Session, SessionOptions};
use proto::nfs4::{NfsFh4, NfsFtype4, Nfsstat4};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

/// "nfs://h/x: no such file or directory (NFS4ERR_NOENT)".
pub fn nfs_err(what: &(impl Display + ?Sized), e: Error) -> String {
    match e.status() {
        Some(st) => format!("{what}: {} ({st:?})", describe(st)),
        None => format!("{what}: {e}"),
    }
}

/// The error of an operation on `what` that the server answered with `st`.
pub fn status_err(what: &(impl Display + ?Sized), st: Nfsstat4) -> String {
    format!("{what}: {} ({st:?})", describe(st))
}

#[derive(Default)]
pub struct Client {
    sessions: Vec<(NfsUrl, Arc<Session>)>,
}

/// The caller's own uid and gid: what a URL without uid=/gid= acts as
/// (/proc/self is owned by the process's effective ids).
fn own_ids() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((65534, 65534))
}

impl Client {
    /// The session for `url`'s server, set up on first use.
    pub async fn session(&mut self, url: &NfsUrl) -> Result<Arc<Session>, String> {
        if let Some((_, s)) = self.sessions.iter().find(|(u, _)| u.same_server(url)) {
            return Ok(s.clone());
        }
        let s = Arc::new(connect(url).await?);
        // Any call renews the lease; this covers a tool idle on its local
        // side (a slow disk, a full pipe) for longer than the lease.
        s.spawn_renewal(Duration::from_secs(15));
        self.sessions.push((url.clone(), s.clone()));
        Ok(s)
    }

    /// Ends every session (the server then forgets this client at once
    /// instead of at lease expiry). Failures change nothing for the user.
    pub async fn close(&mut self) {
        for (_, s) in self.sessions.drain(..) {
            let _ = s.destroy().await;
        }
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

async fn connect(url: &NfsUrl) -> Result<Session, String> {
    let server = format!("nfs://{}", url.authority());
    let addr = tokio::net::lookup_host(url.authority())
        .await
        .map_err(|e| format!("{server}: cannot resolve host: {e}"))?
        .next()
        .ok_or_else(|| format!("{server}: host has no address"))?;
    let (my_uid, my_gid) = own_ids();
    let (uid, gid) = (url.uid.unwrap_or(my_uid), url.gid.unwrap_or(my_gid));
    let minors: &[u32] = match url.minor {
        Some(m) => &[m],
        None => &[2, 1],
    };
    let mut last = None;
    for &minor in minors {
        // A host that drops SYNs would otherwise hold the tool for the
        // kernel's connect timeout (minutes).
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, Nfs4Conn::connect(addr, uid, gid))
            .await
            .map_err(|_| format!("{server}: cannot connect: no answer in {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| format!("{server}: cannot connect: {e}"))?;
        let o = SessionOptions {
            minorversion: minor,
            // A tool lives for one command: a delegation would only have
            // to be returned at exit, and a back channel kept served.
            callbacks: false,
            ..SessionOptions::default()
        };
        match Session::establish(conn, &o).await {
            Ok(s) => return Ok(s),
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH) => {
                last = Some(e);
            }
            Err(e) => return Err(nfs_err(&server, e)),
        }
    }
    Err(nfs_err(&server, last.expect("tried a version")))
}

/// A path's handle on its server, or an error naming the URL.
pub async fn resolve(s: &Session, url: &NfsUrl) -> Result<NfsFh4, String> {
    s.lookup_path(&url.path).await.map_err(|e| nfs_err(url, e))
}

/// The handle of `url`'s parent directory and `url`'s last name; errors
/// name `url` itself, as coreutils name the argument they were given.
pub async fn resolve_parent(s: &Session, url: &NfsUrl) -> Result<(NfsFh4, String), String> {
    let (parent, name) = url
        .split_last()
        .ok_or_else(|| format!("{url}: not possible on the root"))?;
    let fh = s
        .lookup_path(&parent.path)
        .await
        .map_err(|e| nfs_err(url, e))?;
    Ok((fh, name))
}

pub fn is_dir(t: Option<NfsFtype4>) -> bool {
    t == Some(NfsFtype4::NF4DIR)
}

/// Parses a URL argument; the error already names it.
pub fn parse(s: &str) -> Result<NfsUrl, String> {
    NfsUrl::parse(s)
}
