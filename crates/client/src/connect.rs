//! Connections for the tools and `tarn mount` (one per server, version and identity,
//! shared by every path on it) and the wording of their errors.
//!
//! Without `vers=` the tools try NFSv4.2, then 4.1, then 4.0, then 3, as
//! mount.nfs does: a minor version the server does not have
//! (NFS4ERR_MINOR_VERS_MISMATCH) moves on to the next, a server that
//! answers NFSv4 with "no such program or version", or has no minor
//! version we speak, is asked for NFSv3.

use crate::nfs3::{Nfs3, Nfs3Options};
use crate::nfs4::{GssService, Nfs4Conn, Security, Session, SessionOptions};
use crate::nfs40::{Client40, Options40};
use crate::remote::{Attr, Error, Fh, FileType, Kind, Remote};
use crate::url::{NfsUrl, Sec, Vers};
use proto::nfs4::Nfsstat4;
use rpc::client::ClientError;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

/// What an export's refusal of our flavor or transport may mean.
const PROTECTION_HINT: &str = "the export may require another sec= or RPC-with-TLS \
     (xprtsec=tls, or xprtsec=mtls with a client certificate)";

/// "nfs://h/x: no such file or directory (NFS4ERR_NOENT)".
pub fn nfs_err(what: &(impl Display + ?Sized), e: impl Into<Error>) -> String {
    use proto::rpc::AuthStat::{RPCSEC_GSS_CREDPROBLEM, RPCSEC_GSS_CTXPROBLEM};
    use rpc::msg::ReplyStatus;
    let e = e.into();
    if let Some(ClientError::Rpc(ReplyStatus::AuthError(
        RPCSEC_GSS_CREDPROBLEM | RPCSEC_GSS_CTXPROBLEM,
    ))) = e.rpc()
    {
        // Kerberos: the server no longer takes our context (expired).
        return format!(
            "{what}: refused, the Kerberos credential has expired or was rejected ({e}); run kinit"
        );
    }
    match (e.status_text(), e.rpc()) {
        (Some(t), _) if export_refused(&e) => format!("{what}: {t}; {PROTECTION_HINT}"),
        (Some(t), _) => format!("{what}: {t}"),
        // NFSv3 calls the export's sec= or xprtsec= does not take (MOUNT
        // itself answers plain connections, as mountd does).
        (
            None,
            Some(ClientError::Rpc(ReplyStatus::AuthError(proto::rpc::AuthStat::AUTH_TOOWEAK))),
        ) => {
            format!("{what}: refused as too weak (AUTH_TOOWEAK); {PROTECTION_HINT}")
        }
        (None, Some(ClientError::Rpc(ReplyStatus::ProgMismatch(lo, hi)))) => format!(
            "{what}: the server does not speak this version of the program \
             (it speaks versions {lo} to {hi}; for NFS, vers=3 or no vers=)"
        ),
        _ => format!("{what}: {e}"),
    }
}

/// Whether `e` is an export refusing how we came: NFSv4 WRONGSEC, or
/// MOUNT's ACCES (a server gives them for a flavor it does not take and
/// for a connection without the TLS the export requires alike).
fn export_refused(e: &Error) -> bool {
    match e {
        Error::V4(e) => e.status() == Some(Nfsstat4::NFS4ERR_WRONGSEC),
        Error::V3(crate::nfs3::Error::Mount { status, .. }) => {
            *status == proto::mount::Mountstat3::MNT3ERR_ACCES
        }
        _ => false,
    }
}

/// The error of an operation on `what` that failed with `k`, worded
/// with the status of the version in use.
pub fn status_err(what: &(impl Display + ?Sized), r: &Remote, k: Kind) -> String {
    use proto::nfs3::Nfsstat3 as S3;
    use proto::nfs4::Nfsstat4 as S4;
    let (s3, s4) = match k {
        Kind::NoEnt => (S3::NFS3ERR_NOENT, S4::NFS4ERR_NOENT),
        Kind::Exist => (S3::NFS3ERR_EXIST, S4::NFS4ERR_EXIST),
        Kind::NotDir => (S3::NFS3ERR_NOTDIR, S4::NFS4ERR_NOTDIR),
        Kind::IsDir => (S3::NFS3ERR_ISDIR, S4::NFS4ERR_ISDIR),
        Kind::NotEmpty => (S3::NFS3ERR_NOTEMPTY, S4::NFS4ERR_NOTEMPTY),
        Kind::NotSupp => (S3::NFS3ERR_NOTSUPP, S4::NFS4ERR_NOTSUPP),
        Kind::XDev => (S3::NFS3ERR_XDEV, S4::NFS4ERR_XDEV),
        Kind::Access => (S3::NFS3ERR_ACCES, S4::NFS4ERR_ACCESS),
        Kind::Perm | Kind::Other => (S3::NFS3ERR_PERM, S4::NFS4ERR_PERM),
    };
    if r.v3().is_some() {
        format!("{what}: {} ({s3:?})", crate::nfs3::describe(s3))
    } else {
        format!("{what}: {} ({s4:?})", crate::nfs4::describe(s4))
    }
}

#[derive(Default)]
pub struct Client {
    remotes: Vec<(NfsUrl, Arc<Remote>)>,
}

/// The caller's own uid and gid: what a URL without uid=/gid= acts as
/// (/proc/self is owned by the process's effective ids).
fn own_ids() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((65534, 65534))
}

/// This host's name (AUTH_SYS machine name, NLM caller name).
pub fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "tarn-client".into())
}

impl Client {
    /// The connection for `url`'s server, set up on first use.
    pub async fn remote(&mut self, url: &NfsUrl) -> Result<Arc<Remote>, String> {
        if let Some((_, r)) = self.remotes.iter().find(|(u, _)| u.same_server(url)) {
            return Ok(r.clone());
        }
        let r = Arc::new(connect(url).await?);
        if let Some(s) = r.v4() {
            // Any call renews the lease; this covers a tool idle on its local
            // side (a slow disk, a full pipe) for longer than the lease.
            s.spawn_renewal(Duration::from_secs(15));
        }
        self.remotes.push((url.clone(), r.clone()));
        Ok(r)
    }

    /// The tool argument `arg` parsed, its server's connection, and the
    /// handle and attributes of what it names; errors name the argument.
    pub async fn resolve(&mut self, arg: &str) -> Result<(NfsUrl, Arc<Remote>, Fh, Attr), String> {
        let url = parse(arg)?;
        let r = self.remote(&url).await?;
        let (fh, a) = r
            .lookup_path_attr(&url.path)
            .await
            .map_err(|e| nfs_err(&url, e))?;
        Ok((url, r, fh, a))
    }

    /// Ends every session and mount (the server then forgets this client
    /// at once instead of at lease expiry). Failures change nothing for the user.
    pub async fn close(&mut self) {
        for (_, r) in self.remotes.drain(..) {
            r.close_all().await;
        }
    }
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether an NFSv4 attempt failed in a way that says "try NFSv3".
fn no_v4(e: &crate::nfs4::Error) -> bool {
    use rpc::msg::ReplyStatus;
    match e {
        crate::nfs4::Error::Rpc(ClientError::Rpc(st)) => matches!(
            st,
            ReplyStatus::ProgMismatch(..)
                | ReplyStatus::Accepted(
                    proto::rpc::AcceptStat::PROG_UNAVAIL | proto::rpc::AcceptStat::PROG_MISMATCH
                )
        ),
        _ => e.status() == Some(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH),
    }
}

/// A connection to `url`'s server with the URL's version, security and
/// transport options (what the tools use): no back channel, so no
/// delegations.
pub async fn connect(url: &NfsUrl) -> Result<Remote, String> {
    connect_with(url, false).await
}

/// [`connect`], with `callbacks` a back channel on an NFSv4.1/4.2 session
/// (what `tarn mount` asks for: a long-lived client the server may give
/// delegations to and recall them from).
pub async fn connect_with(url: &NfsUrl, callbacks: bool) -> Result<Remote, String> {
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
    let minors: &[u32] = match url.vers {
        Some(Vers::V3) => &[],
        Some(Vers::V4(m)) => &[m],
        Some(Vers::V4Any) => &[2, 1, 0],
        None => &[2, 1, 0],
    };
    let mut last = None;
    for &minor in minors {
        let conn = match connect_any(&server, &addrs, &security, url).await {
            Ok(c) => c,
            Err((msg, Some(e))) if url.vers.is_none() && no_v4(&e) => {
                last = Some(msg);
                break;
            }
            Err((msg, _)) => return Err(msg),
        };
        if minor == 0 {
            // NFSv4.0 renews its own lease (RENEW every lease/3).
            match Client40::establish(conn, &Options40::default()).await {
                Ok(c) => return Remote::from_v40(c).await.map_err(|e| nfs_err(&server, e)),
                Err(e) if no_v4(&e) => last = Some(nfs_err(&server, e)),
                Err(e) => return Err(nfs_err(&server, e)),
            }
            continue;
        }
        let o = SessionOptions {
            minorversion: minor,
            // A tool lives for one command: a delegation would only have
            // to be returned at exit, and a back channel kept served.
            callbacks,
            // A server in its grace period after a restart: wait, as a
            // mount would.
            grace_retry_for: Duration::from_secs(300),
            ..SessionOptions::default()
        };
        match Session::establish(conn, &o).await {
            Ok(s) => {
                return Remote::from_v4(Arc::new(s))
                    .await
                    .map_err(|e| nfs_err(&server, e))
            }
            Err(e) if no_v4(&e) => last = Some(nfs_err(&server, e)),
            Err(e) => return Err(nfs_err(&server, e)),
        }
    }
    if url.vers.is_some_and(|v| v != Vers::V3) {
        return Err(last.expect("tried a version"));
    }
    let opts = Nfs3Options {
        security,
        sys_ids: (uid, gid),
        machine: machine_name(),
        mount_port: url.mountport,
        transport: channel_options(url)?,
    };
    let mut why = String::new();
    for &addr in &addrs {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            Nfs3::connect(addr, opts.clone(), &url.path),
        )
        .await
        {
            Err(_) => why = format!("no answer in {CONNECT_TIMEOUT:?}"),
            Ok(Err(crate::nfs3::Error::Rpc(ClientError::Io(e)))) => why = e.to_string(),
            Ok(Err(e @ crate::nfs3::Error::Setup(_))) => return Err(format!("{server}: {e}")),
            Ok(Err(e)) => return Err(nfs_err(&format!("{server} (NFSv3)"), e)),
            Ok(Ok(c)) => return Ok(Remote::from_v3(Arc::new(c))),
        }
    }
    match last {
        Some(v4) => Err(format!("{v4}; NFSv3: cannot connect: {why}")),
        None => Err(format!("{server}: cannot connect: {why}")),
    }
}

/// A connection to the first of `addrs` that answers (a name such as
/// localhost may resolve to ::1 before 127.0.0.1). A failure that came
/// from the server carries its error.
async fn connect_any(
    server: &str,
    addrs: &[std::net::SocketAddr],
    security: &Security,
    url: &NfsUrl,
) -> Result<Nfs4Conn, (String, Option<crate::nfs4::Error>)> {
    let mut last = String::new();
    let opts = channel_options(url).map_err(|e| (e, None))?;
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
            Ok(Err(crate::nfs4::Error::Rpc(ClientError::Io(e)))) => last = e.to_string(),
            // Connected but refused (Kerberos, RPC): no use trying another address.
            Ok(Err(e)) => return Err((format!("{server}: cannot connect: {e}"), Some(e))),
            Ok(Ok(c)) => return Ok(c),
        }
    }
    Err((format!("{server}: cannot connect: {last}"), None))
}

/// The URL's transport keys (nconnect=, timeo=, retrans=, hard/soft,
/// xprtsec= and the TLS files).
fn channel_options(url: &NfsUrl) -> Result<rpc::client::ChannelOptions, String> {
    let t = url.transport;
    Ok(rpc::client::ChannelOptions {
        nconnect: t.nconnect as usize,
        timeo: Duration::from_millis(t.timeo as u64 * 100),
        retrans: t.retrans,
        hard: t.hard,
        server: url.host.clone(),
        tls: tls_client(url)?,
        ..Default::default()
    })
}

/// The TLS client the URL asks for (files from the URL, else TARN_TLS_CA,
/// TARN_TLS_CERT, TARN_TLS_KEY). The server's certificate must name the
/// URL's host (a DNS name, or an IP address SAN for an address).
fn tls_client(url: &NfsUrl) -> Result<Option<rpc::tls::TlsClient>, String> {
    let Some(t) = &url.tls else {
        return Ok(None);
    };
    let pick = |v: &Option<String>, env: &str| {
        v.clone()
            .or_else(|| std::env::var(env).ok().filter(|s| !s.is_empty()))
            .map(std::path::PathBuf::from)
    };
    let o = rpc::tls::TlsClientOptions {
        ca: pick(&t.ca, "TARN_TLS_CA"),
        cert: if t.mtls {
            pick(&t.cert, "TARN_TLS_CERT")
        } else {
            t.cert.clone().map(Into::into)
        },
        key: if t.mtls {
            pick(&t.key, "TARN_TLS_KEY")
        } else {
            t.key.clone().map(Into::into)
        },
        insecure: t.insecure,
    };
    if t.mtls && (o.cert.is_none() || o.key.is_none()) {
        return Err(format!(
            "{url}: xprtsec=mtls needs a client certificate and key (tls-cert=, tls-key= or TARN_TLS_CERT, TARN_TLS_KEY)"
        ));
    }
    rpc::tls::TlsClient::new(&url.host, &o)
        .map(Some)
        .map_err(|e| format!("{url}: {e}"))
}

/// The handle of `url`'s parent directory and `url`'s last name; errors
/// name `url` itself, as coreutils name the argument they were given.
pub async fn resolve_parent(r: &Remote, url: &NfsUrl) -> Result<(Fh, String), String> {
    let (parent, name) = url
        .split_last()
        .ok_or_else(|| format!("{url}: not possible on the root"))?;
    let fh = r
        .lookup_path(&parent.path)
        .await
        .map_err(|e| nfs_err(url, e))?;
    Ok((fh, name))
}

pub fn is_dir(a: &Attr) -> bool {
    a.ftype == Some(FileType::Directory)
}

/// Parses a URL argument; the error already names it.
pub fn parse(s: &str) -> Result<NfsUrl, String> {
    NfsUrl::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc::msg::ReplyStatus;

    #[test]
    fn which_nfsv4_failures_mean_try_nfsv3() {
        let rpc = |st| crate::nfs4::Error::Rpc(ClientError::Rpc(st));
        let nfs = |status| {
            crate::nfs4::Error::Nfs(crate::nfs4::Nfs4Error {
                op: proto::nfs4::NfsOpnum4::OP_CREATE_SESSION,
                status,
            })
        };
        assert!(no_v4(&rpc(ReplyStatus::ProgMismatch(2, 3))));
        assert!(no_v4(&rpc(ReplyStatus::Accepted(
            proto::rpc::AcceptStat::PROG_UNAVAIL
        ))));
        assert!(no_v4(&nfs(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH)));
        // Refusals that NFSv3 would meet too are the answer.
        assert!(!no_v4(&rpc(ReplyStatus::AuthError(
            proto::rpc::AuthStat::AUTH_BADCRED
        ))));
        assert!(!no_v4(&nfs(Nfsstat4::NFS4ERR_ACCESS)));
        assert!(!no_v4(&crate::nfs4::Error::Rpc(ClientError::Closed)));
    }
}
