//! Finding and using the MOUNT protocol (RFC 1813 appendix I): MNT, UMNT
//! and EXPORT, the portmapper's GETPORT (RFC 1833 §3, version 2, TCP) to
//! find MOUNT or NLM on servers that do not serve them on the NFS port,
//! and the choice of the security flavor from MNT's list.

use super::error::{Error, Result};
use bytes::Bytes;
use proto::mount::*;
use proto::pmap::{Mapping, IPPROTO_TCP, PMAPPROC_GETPORT, PMAP_PORT, PMAP_PROG, PMAP_VERS};
use rpc::client::{ClientError, RpcClient};
use rpc::msg::ReplyStatus;
use std::net::SocketAddr;
use std::time::Duration;
use xdr::Unpack;

/// RPCSEC_GSS pseudo-flavors in MNT's list (RFC 2623 §2.2): Kerberos 5
/// authentication only, with integrity, with privacy.
pub const KRB5: i32 = 390003;
pub const KRB5I: i32 = 390004;
pub const KRB5P: i32 = 390005;
pub const AUTH_SYS: i32 = 1;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A flavor's name as `sec=` spells it.
pub fn flavor_name(f: i32) -> String {
    match f {
        0 => "none".into(),
        AUTH_SYS => "sys".into(),
        KRB5 => "krb5".into(),
        KRB5I => "krb5i".into(),
        KRB5P => "krb5p".into(),
        n => format!("flavor {n}"),
    }
}

/// Whether MNT's `offered` list lets the caller use `wanted`. An empty
/// list means AUTH_SYS (servers before RFC 2623 sent none).
pub fn check_flavor(path: &str, wanted: i32, offered: &[i32]) -> Result<()> {
    if offered.contains(&wanted) || (offered.is_empty() && wanted == AUTH_SYS) {
        return Ok(());
    }
    let names: Vec<String> = offered.iter().map(|f| flavor_name(*f)).collect();
    Err(Error::Setup(format!(
        "{path}: the server does not offer sec={} for this export (it offers sec={})",
        flavor_name(wanted),
        names.join(",")
    )))
}

/// A TCP connection to `addr`, from a reserved source port when the
/// process may bind one ([`rpc::client::tcp_reserved`]).
pub async fn tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    rpc::client::tcp_reserved(addr).await
}

/// An RPC client over [`tcp`], given up after [`CONNECT_TIMEOUT`].
pub async fn connect(addr: SocketAddr, cred: proto::rpc::OpaqueAuth) -> Result<RpcClient> {
    match tokio::time::timeout(CONNECT_TIMEOUT, tcp(addr)).await {
        Ok(Ok(s)) => Ok(RpcClient::from_stream(s, cred)?),
        Ok(Err(e)) => Err(ClientError::Io(e).into()),
        Err(_) => Err(Error::Setup(format!(
            "{addr}: no answer in {CONNECT_TIMEOUT:?}"
        ))),
    }
}

/// [`connect`] with RPC-with-TLS started when `tls` is given.
pub async fn connect_tls(
    addr: SocketAddr,
    cred: proto::rpc::OpaqueAuth,
    tls: Option<&rpc::tls::TlsClient>,
) -> Result<RpcClient> {
    let Some(t) = tls else {
        return connect(addr, cred).await;
    };
    let r = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let s = tcp(addr).await.map_err(ClientError::Io)?;
        RpcClient::from_stream_tls(s, cred, t).await
    })
    .await;
    match r {
        Ok(r) => Ok(r?),
        Err(_) => Err(Error::Setup(format!(
            "{addr}: no answer in {CONNECT_TIMEOUT:?}"
        ))),
    }
}

/// The TCP port `prog`/`vers` is registered at with the portmapper on
/// `host` (port 111). None: not registered.
pub async fn getport(host: std::net::IpAddr, prog: u32, vers: u32) -> Result<Option<u16>> {
    let pm = connect(
        SocketAddr::new(host, PMAP_PORT as u16),
        rpc::client::auth_none(),
    )
    .await
    .map_err(|e| Error::Setup(format!("portmapper at {host}:{PMAP_PORT}: {e}")))?;
    let m = Mapping {
        prog,
        vers,
        prot: IPPROTO_TCP,
        port: 0,
    };
    let mut d = pm.call(PMAP_PROG, PMAP_VERS, PMAPPROC_GETPORT, &m).await?;
    let port = d.u32()?;
    Ok(u16::try_from(port).ok().filter(|p| *p != 0))
}

/// A call without arguments (NULL, EXPORT); a decoder at its results.
pub async fn call_void(
    c: &RpcClient,
    prog: u32,
    vers: u32,
    proc_: u32,
) -> std::result::Result<xdr::Decoder, ClientError> {
    rpc::client::results(c.call_raw(prog, vers, proc_, &[]).await?)
}

/// Whether an RPC error says "no such program (version) here".
pub fn unavailable(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Rpc(ReplyStatus::Accepted(
            proto::rpc::AcceptStat::PROG_UNAVAIL | proto::rpc::AcceptStat::PROG_MISMATCH
        )) | ClientError::Rpc(ReplyStatus::ProgMismatch(..))
    )
}

/// A connection to `prog`/`vers` on the server: on the NFS port first
/// (Tarn serves MOUNT and NLM there), checked with a NULL call, else
/// where the portmapper says.
pub async fn locate(
    nfs: SocketAddr,
    prog: u32,
    vers: u32,
    cred: proto::rpc::OpaqueAuth,
) -> Result<RpcClient> {
    locate_tls(nfs, prog, vers, cred, None).await
}

/// [`locate`] over RPC-with-TLS when `tls` is given (the portmapper is
/// asked in the clear, as the Linux client does).
pub async fn locate_tls(
    nfs: SocketAddr,
    prog: u32,
    vers: u32,
    cred: proto::rpc::OpaqueAuth,
    tls: Option<&rpc::tls::TlsClient>,
) -> Result<RpcClient> {
    let first = match connect_tls(nfs, cred.clone(), tls).await {
        Ok(c) => match call_void(&c, prog, vers, 0).await {
            Ok(_) => return Ok(c),
            Err(e) if unavailable(&e) => format!("not on port {}", nfs.port()),
            Err(e) => return Err(e.into()),
        },
        // The server refused our TLS (or we its): elsewhere would not do.
        Err(Error::Rpc(e)) if e.is_final() => return Err(e.into()),
        Err(e) => e.to_string(),
    };
    let name = match prog {
        MOUNT_PROGRAM => "MOUNT",
        proto::nlm4::NLM_PROG => "NLM (lock manager)",
        _ => "the program",
    };
    let port = getport(nfs.ip(), prog, vers).await.map_err(|e| {
        Error::Setup(format!(
            "{}: cannot find {name} version {vers} ({first}; {e})",
            nfs.ip()
        ))
    })?;
    let Some(port) = port else {
        return Err(Error::Setup(format!(
            "{}: {name} version {vers} is not served ({first}, and not registered with the portmapper)",
            nfs.ip()
        )));
    };
    connect_tls(SocketAddr::new(nfs.ip(), port), cred, tls).await
}

/// MNT: the export's root handle and the flavors it takes.
pub async fn mnt(c: &RpcClient, path: &str) -> Result<(Bytes, Vec<i32>)> {
    let arg = Dirpath(Bytes::copy_from_slice(path.as_bytes()));
    let mut d = c
        .call(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT, &arg)
        .await?;
    match Mountres3::unpack(&mut d)? {
        Mountres3::MNT3_OK(ok) => Ok((ok.fhandle.0, ok.auth_flavors)),
        Mountres3::Default(status) => Err(Error::Mount {
            path: path.to_string(),
            status,
        }),
    }
}

/// UMNT: the server forgets the mount in its list (advisory).
pub async fn umnt(c: &RpcClient, path: &str) -> Result<()> {
    let arg = Dirpath(Bytes::copy_from_slice(path.as_bytes()));
    c.call(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_UMNT, &arg)
        .await?;
    Ok(())
}

/// EXPORT: the exported paths.
pub async fn exports(c: &RpcClient) -> Result<Vec<String>> {
    let mut d = call_void(c, MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_EXPORT).await?;
    let ex = Exports::unpack(&mut d)?;
    Ok(ex
        .0
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.ex_dir.0).into_owned())
        .collect())
}

/// The export holding `path`: the longest of `exports` that is `path` or
/// one of its ancestors, compared by whole components.
pub fn export_for<'a>(path: &str, exports: &'a [String]) -> Option<&'a str> {
    exports
        .iter()
        .filter(|e| under(path, e))
        .max_by_key(|e| e.trim_end_matches('/').len())
        .map(|e| e.as_str())
}

/// Whether `path` is `dir` or below it.
pub fn under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    dir.is_empty()
        || path == dir
        || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// `path`'s ancestors from itself up to "/": the exports to try by MNT
/// when EXPORT does not answer.
pub fn ancestors(path: &str) -> Vec<String> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    (0..=comps.len())
        .rev()
        .map(|n| format!("/{}", comps[..n].join("/")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use proto::rpc::AcceptStat;
    use rpc::record::{self, Assembler};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What a fake server answers (prog, proc) with: a u32 result, or a refusal.
    type Answer = fn(u32, u32) -> std::result::Result<Option<u32>, AcceptStat>;

    /// Serves RPC calls on `l` by `answer`, counting them.
    fn fake(l: TcpListener, answer: Answer, calls: Arc<AtomicU32>) {
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let calls = calls.clone();
                tokio::spawn(async move {
                    let (mut rd, mut wr) = s.into_split();
                    let mut asm = Assembler::new(1 << 20);
                    let mut buf = BytesMut::new();
                    loop {
                        while let Ok(Some(rec)) = asm.next(&mut buf) {
                            let c = rpc::msg::decode_call(rec).unwrap();
                            calls.fetch_add(1, Ordering::Relaxed);
                            let mut out = BytesMut::new();
                            record::begin(&mut out);
                            match answer(c.prog, c.proc_) {
                                Ok(v) => {
                                    rpc::msg::success_header(c.xid, &mut out);
                                    if let Some(v) = v {
                                        out.put_u32(v);
                                    }
                                }
                                Err(st) => rpc::msg::accepted_error(c.xid, st, &mut out),
                            }
                            record::finish(&mut out);
                            wr.write_all(&out).await.unwrap();
                        }
                        if rd.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                            return;
                        }
                    }
                });
            }
        });
    }

    /// As root the source port is reserved; otherwise any port will do.
    #[tokio::test]
    async fn root_connects_from_a_reserved_port() {
        use std::os::unix::fs::MetadataExt;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let s = tcp(addr).await.unwrap();
        let port = s.local_addr().unwrap().port();
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            assert!(rpc::client::RESERVED.contains(&port), "{port}");
        }
        let (peer, _) = l.accept().await.unwrap();
        assert_eq!(peer.peer_addr().unwrap().port(), port);
    }

    /// MOUNT not on the NFS port: found through the portmapper on port
    /// 111 of the same host (a loopback address of its own, so a real
    /// rpcbind is not in the way; skipped where port 111 cannot be bound).
    #[tokio::test]
    async fn mount_is_found_through_the_portmapper() {
        let host: std::net::IpAddr = "127.0.0.29".parse().unwrap();
        let Ok(pm) = TcpListener::bind((host, PMAP_PORT as u16)).await else {
            eprintln!("skipped: cannot bind {host}:{PMAP_PORT}");
            return;
        };
        let nfs = TcpListener::bind((host, 0)).await.unwrap();
        let mnt = TcpListener::bind((host, 0)).await.unwrap();
        let nfs_addr = nfs.local_addr().unwrap();
        let mnt_port = mnt.local_addr().unwrap().port();
        static MNT_PORT: AtomicU32 = AtomicU32::new(0);
        MNT_PORT.store(mnt_port as u32, Ordering::Relaxed);
        let (on_nfs, on_pm, on_mnt) = (Arc::default(), Arc::default(), Arc::default());
        fake(
            nfs,
            |prog, _| match prog {
                MOUNT_PROGRAM => Err(AcceptStat::PROG_UNAVAIL),
                _ => Ok(None),
            },
            Arc::clone(&on_nfs),
        );
        fake(
            pm,
            |prog, proc_| match (prog, proc_) {
                (PMAP_PROG, PMAPPROC_GETPORT) => Ok(Some(MNT_PORT.load(Ordering::Relaxed))),
                _ => Err(AcceptStat::PROC_UNAVAIL),
            },
            Arc::clone(&on_pm),
        );
        fake(mnt, |_, _| Ok(None), Arc::clone(&on_mnt));
        let c = locate(nfs_addr, MOUNT_PROGRAM, MOUNT_V3, rpc::client::auth_none())
            .await
            .unwrap();
        call_void(&c, MOUNT_PROGRAM, MOUNT_V3, 0).await.unwrap();
        let n = |a: &Arc<AtomicU32>| a.load(Ordering::Relaxed);
        assert_eq!((n(&on_nfs), n(&on_pm), n(&on_mnt)), (1, 1, 1));

        // Nothing registered either: the error says where it looked.
        MNT_PORT.store(0, Ordering::Relaxed);
        let e = locate(nfs_addr, MOUNT_PROGRAM, MOUNT_V3, rpc::client::auth_none())
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{host}: MOUNT version 3 is not served (not on port {}, and not registered with the portmapper)",
                nfs_addr.port()
            )
        );
    }

    #[test]
    fn the_longest_enclosing_export_wins() {
        let ex: Vec<String> = ["/", "/srv", "/srv/data", "/srv/database"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(export_for("/srv/data/x/y", &ex), Some("/srv/data"));
        assert_eq!(export_for("/srv/database", &ex), Some("/srv/database"));
        assert_eq!(export_for("/srv/dat", &ex), Some("/srv"));
        assert_eq!(export_for("/home", &ex), Some("/"));
        assert_eq!(export_for("/home", &ex[1..]), None);
        assert!(under("/a/b", "/a/"));
        assert!(!under("/ab", "/a"));
    }

    #[test]
    fn ancestors_go_up_to_the_root() {
        assert_eq!(ancestors("/a/b"), vec!["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/"), vec!["/"]);
    }

    #[test]
    fn flavors() {
        assert!(check_flavor("/x", AUTH_SYS, &[]).is_ok());
        assert!(check_flavor("/x", KRB5P, &[KRB5P, AUTH_SYS]).is_ok());
        let e = check_flavor("/x", AUTH_SYS, &[KRB5I, KRB5P]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/x: the server does not offer sec=sys for this export (it offers sec=krb5i,krb5p)"
        );
    }
}
