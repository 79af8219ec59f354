//! Sessions for the tools (one per server and identity, shared by every
//! path on it) and the wording of their errors.

use super::url::{NfsUrl, Sec};
use client::nfs4::{describe, Error, GssService, Nfs4Conn, Security, Session, SessionOptions};
use proto::nfs4::{NfsFh4, NfsFtype4, Nfsstat4};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

/// "nfs://h/x: no such file or directory (NFS4ERR_NOENT)".
pub fn nfs_err(what: &(impl Display + ?Sized), e: Error) -> String {
    use proto::rpc::AuthStat::{RPCSEC_GSS_CREDPROBLEM, RPCSEC_GSS_CTXPROBLEM};
    use rpc::{client::ClientError, msg::ReplyStatus};
    if let Error::Rpc(ClientError::Rpc(ReplyStatus::AuthError(
        RPCSEC_GSS_CREDPROBLEM | RPCSEC_GSS_CTXPROBLEM,
    ))) = e
    {
        // Kerberos: the server no longer takes our context (expired).
        return format!(
            "{what}: refused, the Kerberos credential has expired or was rejected ({e}); run kinit"
        );
    }
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
    let addrs: Vec<_> = tokio::net::lookup_host(url.authority())
        .await
        .map_err(|e| format!("{server}: cannot resolve host: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{server}: host has no address"));
    }
    let (my_uid, my_gid) = own_ids();
    let (uid, gid) = (url.uid.unwrap_or(my_uid), url.gid.unwrap_or(my_gid));
    // Kerberos names the server by the host as written (nfs@host), as
    // with `mount -o sec=krb5 host:/...` when rdns is off.
    let security = match url.sec {
        Sec::Sys => Security::Sys { uid, gid },
        Sec::Krb5 => Security::krb5(GssService::None, &url.host),
        Sec::Krb5i => Security::krb5(GssService::Integrity, &url.host),
        Sec::Krb5p => Security::krb5(GssService::Privacy, &url.host),
    };
    let minors: &[u32] = match url.minor {
        Some(m) => &[m],
        None => &[2, 1],
    };
    let mut last = None;
    for &minor in minors {
        let conn = connect_any(&server, &addrs, &security, url).await?;
        let o = SessionOptions {
            minorversion: minor,
            // A tool lives for one command: a delegation would only have
            // to be returned at exit, and a back channel kept served.
            callbacks: false,
            // A server in its grace period after a restart: wait, as a
            // mount would.
            grace_retry_for: Duration::from_secs(300),
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

/// A connection to the first of `addrs` that answers (a name such as
/// localhost may resolve to ::1 before 127.0.0.1).
async fn connect_any(
    server: &str,
    addrs: &[std::net::SocketAddr],
    security: &Security,
    url: &NfsUrl,
) -> Result<Nfs4Conn, String> {
    let mut last = String::new();
    let t = url.transport;
    let opts = rpc::client::ChannelOptions {
        nconnect: t.nconnect as usize,
        timeo: Duration::from_millis(t.timeo as u64 * 100),
        retrans: t.retrans,
        hard: t.hard,
        server: url.host.clone(),
        ..Default::default()
    };
    for &addr in addrs {
        // Over a channel that reconnects and resends.
        let conn = async {
            match security {
                Security::Sys { uid, gid } => {
                    Nfs4Conn::connect_channel(addr, *uid, *gid, opts.clone()).await
                }
                Security::Krb5 {
                    service,
                    target,
                    renew,
                } => {
                    Nfs4Conn::connect_gss_channel(addr, *service, target, *renew, opts.clone())
                        .await
                }
            }
        };
        // A host that drops SYNs would otherwise hold the tool for the
        // kernel's connect timeout (minutes).
        match tokio::time::timeout(CONNECT_TIMEOUT, conn).await {
            Err(_) => last = format!("no answer in {CONNECT_TIMEOUT:?}"),
            Ok(Err(Error::Rpc(rpc::client::ClientError::Io(e)))) => last = e.to_string(),
            // Connected but refused (Kerberos, RPC): no use trying another address.
            Ok(Err(e)) => return Err(format!("{server}: cannot connect: {e}")),
            Ok(Ok(c)) => return Ok(c),
        }
    }
    Err(format!("{server}: cannot connect: {last}"))
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
