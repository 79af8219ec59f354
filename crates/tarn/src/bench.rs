//! `tarn bench`: drives a running NFSv3 server over loopback with many calls
//! in flight and prints ops/s, MB/s, p50/p99 latency and (given the server's
//! PID) the server's CPU time per operation, per workload and in-flight level.
//! `--json` prints one JSON object per phase instead; `--compare` turns two
//! such outputs into one side-by-side table (scripts/compare-ganesha.sh).
//! A measurement tool, not a test: numbers go into closing notes.

mod compare;
mod copy;
mod nfs4;

use bytes::Bytes;
use proto::mount::{Dirpath, Mountres3, MOUNTPROC3_MNT, MOUNT_PROGRAM};
use proto::nfs3::*;
use rpc::client::gss::GssClient;
use rpc::client::{auth_sys, ClientError, RpcClient};
use rpc::gss::GssService;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use xdr::{Pack, Unpack};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The server to measure.
    #[arg(long, default_value = "127.0.0.1:2049")]
    server: SocketAddr,
    /// Where the MOUNT program listens, if not on --server (Ganesha: MNT_Port).
    #[arg(long)]
    mount_server: Option<SocketAddr>,
    /// The export to mount.
    #[arg(long, default_value = "/")]
    export: String,
    /// Workloads: null, getattr, lookup, access, readdirplus (whole listing of a
    /// --dir-entries directory), create (CREATE+WRITE 4 KiB+COMMIT of --files
    /// files), read4k, write4k (random in --file-size), read1m, write1m (sequential);
    /// NFSv4.1: v4getattr, v4open-read-close (OPEN, READ 4 KiB, CLOSE counted as one).
    #[arg(
        long,
        default_value = "null,getattr,lookup,access,readdirplus,create,read4k,write4k,read1m,write1m"
    )]
    ops: String,
    /// Calls in flight, one run per value (readdirplus: concurrent listings;
    /// create: files being created at once).
    #[arg(long, default_value = "1,64")]
    inflight: String,
    /// Seconds per run (create: at most 5x this, then it reports what it did).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// TCP connections the calls are spread over.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// AUTH_SYS uid and gid to call as (the bench creates files: pick a user that may).
    #[arg(long, default_value_t = 1000)]
    uid: u32,
    #[arg(long, default_value_t = 1000)]
    gid: u32,
    /// Size of the data file for read4k/write4k/read1m/write1m (K, M, G suffixes).
    #[arg(long, default_value = "1G")]
    file_size: String,
    /// Entries in the directory listed by readdirplus (created once, reused).
    #[arg(long, default_value_t = 50_000)]
    dir_entries: u64,
    /// Files per create run.
    #[arg(long, default_value_t = 10_000)]
    files: u64,
    /// The server's PID: report its CPU time (from /proc/PID/stat) per operation.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Print one JSON object per run (one line each) instead of the table.
    #[arg(long)]
    json: bool,
    /// A name for the server, carried into the JSON output.
    #[arg(long, default_value = "server")]
    label: String,
    /// Leave the bench's files and directories on the server.
    #[arg(long)]
    keep: bool,
    /// Security flavors, one run each (the same workloads and in-flight levels):
    /// any of sys, krb5, krb5i, krb5p, and tls (AUTH_SYS inside RPC-with-TLS,
    /// RFC 9289: needs --tls-ca or --tls-insecure); rows after sys say their
    /// throughput as a share of sys, a tls row also as a multiple of krb5p
    /// when that ran first. A context per connection, made with the caller's
    /// credential cache (kinit first).
    #[arg(long, default_value = "sys")]
    sec: String,
    /// --sec tls: the CA the server's certificate must chain to (it must
    /// name --server's address, or --tls-name).
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// --sec tls: a client certificate and its key (mTLS).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// --sec tls: the name the server's certificate must carry (default:
    /// --server's IP address).
    #[arg(long)]
    tls_name: Option<String>,
    /// --sec tls: do not verify the server's certificate.
    #[arg(long)]
    tls_insecure: bool,
    /// The GSS target service for krb5*: service@host.
    #[arg(long, default_value = "nfs@localhost")]
    gss_target: String,
    /// The server's --metrics address: the GSS calls it dropped (by reason) are
    /// printed after the runs.
    #[arg(long)]
    server_metrics: Option<SocketAddr>,
    /// Print the side-by-side table of two `--json` outputs (LABEL=FILE, twice:
    /// the first is the one measured, the second the reference) and exit.
    #[arg(long, num_args = 1)]
    compare: Vec<String>,
    /// Instead of the workloads: copy a file of this size (K, M, G) on the
    /// server by NFSv4.2 COPY (synchronous, then asynchronous) and by
    /// READ+WRITE through this client, and print the time and the bytes on
    /// the wire of each, and their ratio.
    #[arg(long)]
    copy: Option<String>,
}

const DATA_FILE: &[u8] = b"tarn-bench.dat";

struct Fixture {
    root: NfsFh3,
    file: NfsFh3,
    file_size: u64,
    listdir: Option<NfsFh3>,
}

/// One connection the bench calls over: AUTH_SYS, or an RPCSEC_GSS context
/// (one per connection) under one service: krb5, krb5i or krb5p.
pub(crate) enum Conn {
    Sys(RpcClient),
    Gss(Box<GssClient>, GssService),
}

impl Conn {
    async fn call<A: Pack>(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &A,
    ) -> Result<xdr::Decoder, ClientError> {
        match self {
            Conn::Sys(c) => c.call(prog, vers, proc_, args).await,
            // The context was made for NFSv3 (MOUNT goes over AUTH_SYS, as with real clients).
            Conn::Gss(g, svc) => g.call(*svc, proc_, &xdr::to_bytes(args)).await,
        }
    }

    async fn call_raw(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &[u8],
    ) -> Result<(), ClientError> {
        match self {
            Conn::Sys(c) => c.call_raw(prog, vers, proc_, args).await.map(drop),
            Conn::Gss(g, svc) => g.call(*svc, proc_, args).await.map(drop),
        }
    }
}

/// What a --sec name asks for: RPC-with-TLS or not, and the GSS service
/// (None: AUTH_SYS).
#[derive(Clone, Copy)]
struct Flavor {
    tls: bool,
    gss: Option<GssService>,
}

fn parse_flavor(s: &str) -> Result<Flavor, String> {
    let gss = |gss| Flavor { tls: false, gss };
    Ok(match s {
        "sys" => gss(None),
        "tls" => Flavor {
            tls: true,
            gss: None,
        },
        "krb5" => gss(Some(GssService::None)),
        "krb5i" => gss(Some(GssService::Integrity)),
        "krb5p" => gss(Some(GssService::Privacy)),
        o => {
            return Err(format!(
                "--sec {o:?}: expected sys, tls, krb5, krb5i or krb5p"
            ))
        }
    })
}

/// The TLS client settings of --sec tls (made once: every connection shares them).
fn tls_client(a: &BenchArgs) -> Result<rpc::tls::TlsClient, String> {
    let name = a
        .tls_name
        .clone()
        .unwrap_or_else(|| a.server.ip().to_string());
    rpc::tls::TlsClient::new(
        &name,
        &rpc::tls::TlsClientOptions {
            ca: a.tls_ca.clone(),
            cert: a.tls_cert.clone(),
            key: a.tls_key.clone(),
            insecure: a.tls_insecure,
        },
    )
}

/// `connections` connections under one flavor.
async fn connect(a: &BenchArgs, flavor: Flavor) -> Result<Vec<Arc<Conn>>, String> {
    let tls = flavor.tls.then(|| tls_client(a)).transpose()?;
    let mut v = Vec::new();
    for _ in 0..a.connections.max(1) {
        let cred = auth_sys(a.uid, a.gid, &[], "tarn-bench");
        let c = match &tls {
            None => RpcClient::connect(a.server, cred).await,
            Some(t) => match tokio::net::TcpStream::connect(a.server).await {
                Ok(s) => RpcClient::from_stream_tls(s, cred, t).await,
                Err(e) => Err(e.into()),
            },
        }
        .map_err(|e| format!("{}: {e}", a.server))?;
        v.push(Arc::new(match flavor.gss {
            None => Conn::Sys(c),
            Some(svc) => Conn::Gss(
                Box::new(
                    GssClient::establish(c, NFS_PROGRAM, 3, &a.gss_target)
                        .await
                        .map_err(|e| format!("RPCSEC_GSS context with {}: {e}", a.gss_target))?,
                ),
                svc,
            ),
        }));
    }
    Ok(v)
}

/// The server's `tarn_gss_dropped_calls_total` samples, summed per reason,
/// from its Prometheus endpoint.
fn gss_drops(metrics: SocketAddr) -> Result<Vec<(String, f64)>, String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).map_err(|e| format!("{metrics}: {e}"))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: tarn\r\n\r\n")
        .map_err(err)?;
    let mut body = String::new();
    s.read_to_string(&mut body).map_err(err)?;
    let mut by: Vec<(String, f64)> = Vec::new();
    for l in body
        .lines()
        .filter(|l| l.starts_with("tarn_gss_dropped_calls_total{"))
    {
        let reason = l
            .split("reason=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("?");
        let v: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        match by.iter_mut().find(|(r, _)| r == reason) {
            Some(e) => e.1 += v,
            None => by.push((reason.to_string(), v)),
        }
    }
    Ok(by)
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// One NFSv3 call, decoded.
async fn nfs<A: Pack, R: Unpack>(c: &Conn, proc_: u32, args: &A) -> Result<R, String> {
    let mut d = c.call(NFS_PROGRAM, 3, proc_, args).await.map_err(err)?;
    R::unpack(&mut d).map_err(err)
}

fn sattr(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        uid: None,
        gid: None,
        size: None,
        atime: SetAtime::Default(TimeHow::DONT_CHANGE),
        mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
    }
}

fn dirop(dir: &NfsFh3, name: &[u8]) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name),
    }
}

async fn create(c: &Conn, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, String> {
    let a = Create3args {
        r#where: dirop(dir, name),
        how: Createhow3::UNCHECKED(sattr(0o644)),
    };
    match nfs(c, NFSPROC3_CREATE, &a).await? {
        Create3res::NFS3_OK(ok) => match ok.obj {
            Some(fh) => Ok(fh),
            None => lookup(c, dir, name).await,
        },
        Create3res::Default(s, _) => Err(format!(
            "CREATE {} failed: {s:?} (is the export writable by --uid?)",
            String::from_utf8_lossy(name)
        )),
    }
}

async fn lookup(c: &Conn, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, String> {
    let a = Lookup3args {
        what: dirop(dir, name),
    };
    match nfs(c, NFSPROC3_LOOKUP, &a).await? {
        Lookup3res::NFS3_OK(ok) => Ok(ok.object),
        Lookup3res::Default(s, _) => {
            Err(format!("LOOKUP {}: {s:?}", String::from_utf8_lossy(name)))
        }
    }
}

/// MKDIR, or the existing directory's handle.
async fn mkdir(c: &Conn, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, String> {
    let a = Mkdir3args {
        r#where: dirop(dir, name),
        attributes: sattr(0o755),
    };
    match nfs(c, NFSPROC3_MKDIR, &a).await? {
        Mkdir3res::NFS3_OK(Mkdir3resok { obj: Some(fh), .. }) => Ok(fh),
        Mkdir3res::NFS3_OK(_) | Mkdir3res::Default(Nfsstat3::NFS3ERR_EXIST, _) => {
            lookup(c, dir, name).await
        }
        Mkdir3res::Default(s, _) => Err(format!("MKDIR {}: {s:?}", String::from_utf8_lossy(name))),
    }
}

async fn remove(c: &Conn, dir: &NfsFh3, name: &[u8], rmdir: bool) {
    let object = dirop(dir, name);
    if rmdir {
        let _ = c
            .call(NFS_PROGRAM, 3, NFSPROC3_RMDIR, &Rmdir3args { object })
            .await;
    } else {
        let _ = c
            .call(NFS_PROGRAM, 3, NFSPROC3_REMOVE, &Remove3args { object })
            .await;
    }
}

async fn write(
    c: &Conn,
    file: &NfsFh3,
    offset: u64,
    data: Bytes,
    stable: StableHow,
) -> Result<u64, String> {
    let w = Write3args {
        file: file.clone(),
        offset,
        count: data.len() as u32,
        stable,
        data,
    };
    match nfs(c, NFSPROC3_WRITE, &w).await? {
        Write3res::NFS3_OK(ok) => Ok(ok.count as u64),
        Write3res::Default(s, _) => Err(format!("WRITE: {s:?}")),
    }
}

async fn commit(c: &Conn, file: &NfsFh3) -> Result<(), String> {
    let a = Commit3args {
        file: file.clone(),
        offset: 0,
        count: 0,
    };
    match nfs(c, NFSPROC3_COMMIT, &a).await? {
        Commit3res::NFS3_OK(_) => Ok(()),
        Commit3res::Default(s, _) => Err(format!("COMMIT: {s:?}")),
    }
}

async fn getattr(c: &Conn, fh: &NfsFh3) -> Result<Fattr3, String> {
    let a = Getattr3args { object: fh.clone() };
    match nfs(c, NFSPROC3_GETATTR, &a).await? {
        Getattr3res::NFS3_OK(ok) => Ok(ok.obj_attributes),
        Getattr3res::Default(s) => Err(format!("GETATTR: {s:?}")),
    }
}

/// Runs `worker(w)` for each w in 0..n at once, each on a task of its
/// own, and waits for them all: their results, in order (the first
/// error, in that order, if any).
async fn workers<T, Fut>(n: usize, worker: impl Fn(usize) -> Fut) -> Result<Vec<T>, String>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, String>> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|w| tokio::spawn(worker(w))).collect();
    let mut results = Vec::with_capacity(n);
    for t in tasks {
        results.push(t.await.map_err(err)??);
    }
    Ok(results)
}

/// Runs `f(client, i)` for i in 0..count with `inflight` calls at once.
async fn par<F, Fut>(clients: &[Arc<Conn>], inflight: usize, count: u64, f: F) -> Result<(), String>
where
    F: Fn(Arc<Conn>, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let f = Arc::new(f);
    workers(inflight.max(1), |w| {
        let (c, next, f) = (clients[w % clients.len()].clone(), next.clone(), f.clone());
        async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<_, String>(());
                }
                f(c.clone(), i).await?;
            }
        }
    })
    .await?;
    Ok(())
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&s[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .map(|n| n * mult)
        .map_err(|_| format!("bad size {s:?}"))
}

fn entry_name(i: u64) -> String {
    format!("e{i:06}")
}

/// One whole listing with READDIRPLUS (64 KiB replies); returns (entries, calls).
/// Stops early, with what it has, once `deadline` passes.
async fn list_dir(
    c: &Conn,
    dir: &NfsFh3,
    deadline: Option<Instant>,
) -> Result<(u64, u64, bool), String> {
    let (mut cookie, mut verf, mut entries, mut calls) = (0u64, [0u8; 8], 0u64, 0u64);
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok((entries, calls, false));
        }
        let a = Readdirplus3args {
            dir: dir.clone(),
            cookie,
            cookieverf: verf,
            dircount: 16 << 10,
            maxcount: 64 << 10,
        };
        calls += 1;
        match nfs(c, NFSPROC3_READDIRPLUS, &a).await? {
            Readdirplus3res::NFS3_OK(ok) => {
                verf = ok.cookieverf;
                entries += ok.reply.entries.len() as u64;
                if let Some(e) = ok.reply.entries.last() {
                    cookie = e.cookie;
                }
                if ok.reply.eof {
                    return Ok((entries, calls, true));
                }
                if ok.reply.entries.is_empty() {
                    return Err("READDIRPLUS: no entries and no eof".into());
                }
            }
            Readdirplus3res::Default(s, _) => return Err(format!("READDIRPLUS: {s:?}")),
        }
    }
}

async fn setup(clients: &[Arc<Conn>], a: &BenchArgs, ops: &[&str]) -> Result<Fixture, String> {
    let c0 = &clients[0];
    let mc;
    let mc_ref = match a.mount_server {
        Some(addr) if addr != a.server => {
            mc = Conn::Sys(
                RpcClient::connect(addr, auth_sys(a.uid, a.gid, &[], "tarn-bench"))
                    .await
                    .map_err(|e| format!("{addr}: {e}"))?,
            );
            &mc
        }
        _ => c0.as_ref(),
    };
    let mut d = mc_ref
        .call(
            MOUNT_PROGRAM,
            3,
            MOUNTPROC3_MNT,
            &Dirpath(Bytes::copy_from_slice(a.export.as_bytes())),
        )
        .await
        .map_err(err)?;
    let root = match Mountres3::unpack(&mut d).map_err(err)? {
        Mountres3::MNT3_OK(ok) => NfsFh3 { data: ok.fhandle.0 },
        Mountres3::Default(s) => return Err(format!("MNT {}: {s:?}", a.export)),
    };
    let file_size = parse_size(&a.file_size)?.max(1 << 20) & !4095;
    let file = create(c0, &root, DATA_FILE).await?;
    let needs_data = ops
        .iter()
        .any(|o| o.starts_with("read") || o.starts_with("write") || *o == "v4open-read-close");
    if needs_data {
        let have = getattr(c0, &file).await?.size;
        let chunk = Bytes::from(vec![0x5au8; 1 << 20]);
        let n = file_size.div_ceil(1 << 20);
        let (fh, fs) = (file.clone(), file_size);
        if have < file_size {
            eprintln!("tarn bench: writing the {} MiB data file", file_size >> 20);
            par(clients, 16, n, move |c, i| {
                let (fh, chunk) = (fh.clone(), chunk.clone());
                async move {
                    let len = (fs - (i << 20)).min(1 << 20) as usize;
                    write(&c, &fh, i << 20, chunk.slice(..len), StableHow::UNSTABLE).await?;
                    Ok(())
                }
            })
            .await?;
            commit(c0, &file).await?;
        } else {
            // Reused from an earlier run (--keep): read it once to warm the page cache.
            par(clients, 16, n, move |c, i| {
                let fh = fh.clone();
                async move {
                    let a = Read3args {
                        file: fh,
                        offset: i << 20,
                        count: 1 << 20,
                    };
                    let _: Read3res = nfs(&c, NFSPROC3_READ, &a).await?;
                    Ok(())
                }
            })
            .await?;
        }
    }
    let mut listdir = None;
    if ops.contains(&"readdirplus") {
        let name = format!("tarn-bench-ls-{}", a.dir_entries);
        let dir = mkdir(c0, &root, name.as_bytes()).await?;
        let (have, _, _) = list_dir(c0, &dir, None).await?;
        if have < a.dir_entries {
            eprintln!("tarn bench: creating {} entries in {name}", a.dir_entries);
            let d2 = dir.clone();
            par(clients, 64, a.dir_entries, move |c, i| {
                let d2 = d2.clone();
                async move {
                    create(&c, &d2, entry_name(i).as_bytes()).await?;
                    Ok(())
                }
            })
            .await?;
            list_dir(c0, &dir, None).await?;
        }
        listdir = Some(dir);
    }
    Ok(Fixture {
        root,
        file,
        file_size,
        listdir,
    })
}

/// One call of a simple operation; returns the payload bytes moved.
async fn one(c: &Conn, op: &str, fx: &Fixture, i: u64, wbuf: &Bytes) -> Result<u64, String> {
    let blocks = fx.file_size / 4096;
    let mbs = (fx.file_size >> 20).max(1);
    let off4k = (i.wrapping_mul(2654435761) % blocks) * 4096;
    let off1m = (i % mbs) << 20;
    Ok(match op {
        "null" => {
            c.call_raw(NFS_PROGRAM, 3, NFSPROC3_NULL, &[])
                .await
                .map_err(err)?;
            0
        }
        "getattr" => {
            getattr(c, &fx.file).await?;
            0
        }
        "lookup" => {
            lookup(c, &fx.root, DATA_FILE).await?;
            0
        }
        "access" => {
            let a = Access3args {
                object: fx.file.clone(),
                access: 0x3f,
            };
            if let Access3res::Default(s, _) = nfs(c, NFSPROC3_ACCESS, &a).await? {
                return Err(format!("ACCESS: {s:?}"));
            }
            0
        }
        "read4k" | "read1m" => {
            let (offset, count) = if op == "read4k" {
                (off4k, 4096)
            } else {
                (off1m, 1 << 20)
            };
            let a = Read3args {
                file: fx.file.clone(),
                offset,
                count,
            };
            match nfs(c, NFSPROC3_READ, &a).await? {
                Read3res::NFS3_OK(ok) => ok.data.len() as u64,
                Read3res::Default(s, _) => return Err(format!("READ: {s:?}")),
            }
        }
        "write4k" | "write1m" => {
            let (offset, data) = if op == "write4k" {
                (off4k, wbuf.slice(..4096))
            } else {
                (off1m, wbuf.clone())
            };
            write(c, &fx.file, offset, data, StableHow::UNSTABLE).await?
        }
        other => return Err(format!("unknown operation {other:?}")),
    })
}

/// What one run (one workload at one in-flight level) measured.
pub(crate) struct Phase {
    op: String,
    /// Security flavor: sys, krb5, krb5i, krb5p.
    sec: String,
    inflight: usize,
    secs: f64,
    /// Operations done: calls, files (create) or whole listings (readdirplus,
    /// fractional: entries / directory size).
    ops: f64,
    bytes: u64,
    calls: u64,
    entries: u64,
    /// Per call, per file (create) or per complete listing (readdirplus).
    lat_us: Vec<u64>,
    cpu_secs: Option<f64>,
    /// This process's CPU time over the run (the client's side of the cost).
    client_cpu_secs: Option<f64>,
}

impl Phase {
    fn new(op: &str, inflight: usize) -> Self {
        Phase {
            op: op.to_string(),
            sec: "sys".to_string(),
            inflight,
            secs: 0.0,
            ops: 0.0,
            bytes: 0,
            calls: 0,
            entries: 0,
            lat_us: Vec::new(),
            cpu_secs: None,
            client_cpu_secs: None,
        }
    }
}

fn micros(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

async fn run_simple(
    clients: &[Arc<Conn>],
    fx: &Arc<Fixture>,
    op: &str,
    inflight: usize,
    secs: f64,
) -> Result<Phase, String> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let wbuf = Bytes::from(vec![0xa5u8; 1 << 20]);
    let results = workers(inflight, |w| {
        let (c, fx, wbuf) = (clients[w % clients.len()].clone(), fx.clone(), wbuf.clone());
        let op = op.to_string();
        async move {
            let (mut n, mut bytes, mut lat) = (0u64, 0u64, Vec::with_capacity(1 << 16));
            let mut i = w as u64 * 1_000_003;
            while Instant::now() < deadline {
                let t = Instant::now();
                bytes += one(&c, &op, &fx, i, &wbuf).await?;
                lat.push(micros(t));
                n += 1;
                i += 1;
            }
            Ok::<_, String>((n, bytes, lat))
        }
    })
    .await?;
    let mut r = Phase::new(op, inflight);
    for (n, b, l) in results {
        r.calls += n;
        r.bytes += b;
        r.lat_us.extend(l);
    }
    r.ops = r.calls as f64;
    r.secs = start.elapsed().as_secs_f64();
    Ok(r)
}

/// `inflight` clients each listing the directory again and again until the
/// time is up (a listing cut by the deadline counts by its entries).
async fn run_listing(
    clients: &[Arc<Conn>],
    dir: &NfsFh3,
    dir_entries: u64,
    inflight: usize,
    secs: f64,
) -> Result<Phase, String> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let results = workers(inflight, |w| {
        let (c, dir) = (clients[w % clients.len()].clone(), dir.clone());
        async move {
            let (mut entries, mut calls, mut lat) = (0u64, 0u64, Vec::new());
            while Instant::now() < deadline {
                let t = Instant::now();
                let (e, n, complete) = list_dir(&c, &dir, Some(deadline)).await?;
                entries += e;
                calls += n;
                if complete {
                    lat.push(micros(t));
                }
            }
            Ok::<_, String>((entries, calls, lat))
        }
    })
    .await?;
    let mut r = Phase::new("readdirplus", inflight);
    for (e, n, l) in results {
        r.entries += e;
        r.calls += n;
        r.lat_us.extend(l);
    }
    r.secs = start.elapsed().as_secs_f64();
    // "." and ".." come with the listing on most servers: count whole listings by size.
    r.ops = r.entries as f64 / dir_entries.max(1) as f64;
    if r.lat_us.is_empty() && r.ops > 0.0 {
        // No listing finished in time: report the mean time one would take.
        r.lat_us
            .push((r.secs * inflight as f64 / r.ops * 1e6) as u64);
    }
    Ok(r)
}

/// Files created, written (4 KiB, UNSTABLE) and committed, as a Linux client
/// closing a new file does, in a fresh directory per run.
async fn run_create(
    clients: &[Arc<Conn>],
    fx: &Arc<Fixture>,
    files: u64,
    inflight: usize,
    secs: f64,
    made: &mut Vec<(Vec<u8>, u64)>,
) -> Result<Phase, String> {
    let name = format!("tarn-bench-create-{}-{}", std::process::id(), made.len()).into_bytes();
    let dir = mkdir(&clients[0], &fx.root, &name).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs * 5.0);
    let next = Arc::new(AtomicU64::new(0));
    let data = Bytes::from(vec![0x3cu8; 4096]);
    let results = workers(inflight, |w| {
        let (c, dir, next, data) = (
            clients[w % clients.len()].clone(),
            dir.clone(),
            next.clone(),
            data.clone(),
        );
        async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files {
                    break;
                }
                let t = Instant::now();
                let fh = create(&c, &dir, format!("f{i:06}").as_bytes()).await?;
                write(&c, &fh, 0, data.clone(), StableHow::UNSTABLE).await?;
                commit(&c, &fh).await?;
                lat.push(micros(t));
            }
            Ok::<_, String>(lat)
        }
    })
    .await?;
    let mut r = Phase::new("create", inflight);
    r.lat_us.extend(results.into_iter().flatten());
    r.secs = start.elapsed().as_secs_f64();
    r.ops = r.lat_us.len() as f64;
    r.calls = r.lat_us.len() as u64 * 3;
    r.bytes = r.lat_us.len() as u64 * 4096;
    let started = next.load(Ordering::Relaxed).min(files);
    made.push((name, started));
    Ok(r)
}

pub(crate) fn pct(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// utime + stime of a process, in seconds.
#[allow(unsafe_code)]
fn cpu_secs(pid: u32) -> Result<f64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(11) + ticks(12)) as f64 / hz)
}

pub fn main(a: BenchArgs) -> ExitCode {
    if !a.compare.is_empty() {
        return match compare::print(&a.compare) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tarn bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let r = match &a.copy {
        Some(size) => rt.block_on(async {
            let size = parse_size(size)?;
            copy::run(a.server, &a.export, a.uid, a.gid, size, a.keep).await
        }),
        None => rt.block_on(bench(a)),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarn bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn unit(op: &str) -> &'static str {
    match op {
        "readdirplus" => "listing",
        "create" => "file",
        _ => "call",
    }
}

fn fmt_us(us: u64) -> String {
    if us >= 100_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else if us >= 10_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        us.to_string()
    }
}

/// One line of `tarn bench --json`; `tarn bench --compare` reads them back.
/// Absent numbers (no CPU figure, a rate over zero seconds) are null.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub(crate) struct Row {
    pub label: String,
    pub sec: String,
    pub op: String,
    pub unit: String,
    pub inflight: u64,
    pub connections: u64,
    pub secs: Option<f64>,
    pub ops: Option<f64>,
    pub ops_per_s: Option<f64>,
    pub mb_per_s: Option<f64>,
    pub calls: u64,
    pub entries: u64,
    pub entries_per_s: Option<f64>,
    pub dir_entries: u64,
    /// readdirplus: seconds per whole listing.
    pub listing_s: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub server_cpu_s: Option<f64>,
    pub server_cpu_us_per_op: Option<f64>,
    /// Server CPU seconds per MiB of payload moved (READ/WRITE workloads).
    pub server_cpu_s_per_mib: Option<f64>,
    /// The bench's own CPU seconds per MiB moved.
    pub client_cpu_s_per_mib: Option<f64>,
}

fn json_line(a: &BenchArgs, r: &Phase, dir_entries: u64) -> String {
    // Three decimals are plenty and keep the lines short.
    let num = |v: f64| v.is_finite().then(|| (v * 1e3).round() / 1e3);
    // Six decimals: a MiB costs milliseconds.
    let per_mib = |c: Option<f64>| {
        c.filter(|_| r.bytes > 0)
            .map(|c| c * (1u64 << 20) as f64 / r.bytes as f64)
            .filter(|v| v.is_finite())
            .map(|v| (v * 1e6).round() / 1e6)
    };
    let row = Row {
        label: a.label.clone(),
        sec: r.sec.clone(),
        op: r.op.clone(),
        unit: unit(&r.op).into(),
        inflight: r.inflight as u64,
        connections: a.connections.max(1) as u64,
        secs: num(r.secs),
        ops: num(r.ops),
        ops_per_s: num(r.ops / r.secs),
        mb_per_s: num(r.bytes as f64 / r.secs / 1e6),
        calls: r.calls,
        entries: r.entries,
        entries_per_s: num(r.entries as f64 / r.secs),
        dir_entries,
        listing_s: (r.op == "readdirplus" && r.ops > 0.0)
            .then(|| num(r.secs * r.inflight as f64 / r.ops))
            .flatten(),
        p50_us: Some(pct(&r.lat_us, 0.5) as f64),
        p99_us: Some(pct(&r.lat_us, 0.99) as f64),
        server_cpu_s: r.cpu_secs.and_then(num),
        server_cpu_us_per_op: r
            .cpu_secs
            .filter(|_| r.ops > 0.0)
            .and_then(|c| num(c * 1e6 / r.ops)),
        server_cpu_s_per_mib: per_mib(r.cpu_secs),
        client_cpu_s_per_mib: per_mib(r.client_cpu_secs),
    };
    serde_json::to_string(&row).expect("a bench row serializes")
}

/// One workload at one in-flight level over `clients`, with the server's CPU time.
async fn run_one(
    a: &BenchArgs,
    op: &str,
    n: usize,
    clients: &[Arc<Conn>],
    fx: &Arc<Fixture>,
    fx4: Option<&Arc<nfs4::Fixture4>>,
    made: &mut Vec<(Vec<u8>, u64)>,
) -> Result<Phase, String> {
    let cpu0 = a.server_pid.map(cpu_secs).transpose()?;
    let me0 = cpu_secs(std::process::id()).ok();
    let mut r = match op {
        "readdirplus" => {
            let dir = fx.listdir.as_ref().ok_or("no listing directory")?;
            run_listing(clients, dir, a.dir_entries, n, a.seconds).await?
        }
        "create" => run_create(clients, fx, a.files, n, a.seconds, made).await?,
        o if nfs4::OPS.contains(&o) => {
            let fx4 = fx4.expect("set up when an NFSv4 op is asked for");
            nfs4::run(fx4, o, n, a.seconds, fx.file_size).await?
        }
        _ => run_simple(clients, fx, op, n, a.seconds).await?,
    };
    if let (Some(pid), Some(c0)) = (a.server_pid, cpu0) {
        r.cpu_secs = Some(cpu_secs(pid)? - c0);
    }
    if let Some(m0) = me0 {
        r.client_cpu_secs = cpu_secs(std::process::id()).ok().map(|m| m - m0);
    }
    Ok(r)
}

/// Every operation named is a workload this bench has.
fn check_ops(ops: &[&str]) -> Result<(), String> {
    for op in ops {
        if ![
            "null",
            "getattr",
            "lookup",
            "access",
            "readdirplus",
            "create",
            "read4k",
            "write4k",
            "read1m",
            "write1m",
        ]
        .contains(op)
            && !nfs4::OPS.contains(op)
        {
            return Err(format!("unknown operation {op:?}"));
        }
    }
    Ok(())
}

/// One row of the table: rates, latency percentiles, CPU per op, and a
/// note (per-op meaning, share of sys and of krb5p, CPU per MiB moved).
fn print_row(
    op: &str,
    sec: &str,
    n: usize,
    r: &Phase,
    rate: f64,
    sys_rate: Option<f64>,
    krb5p_rate: Option<f64>,
) {
    let mut note = match op {
        "readdirplus" => format!(
            "{:.3} s/listing, {:.0} entries/s, per listing",
            r.secs * n as f64 / r.ops.max(1e-9),
            r.entries as f64 / r.secs
        ),
        "create" => format!("{} files, per file", r.ops),
        "v4open-read-close" => "3 COMPOUNDs per op".to_string(),
        _ => String::new(),
    };
    if let (Some(k), "tls") = (krb5p_rate, sec) {
        note = format!("{:.1}x krb5p {note}", rate / k.max(1e-9));
    }
    if let (Some(s), false) = (sys_rate, sec == "sys") {
        note = format!("{:.0}% of sys {note}", 100.0 * rate / s.max(1e-9));
    }
    // The cost of moving data: CPU per MiB of payload, the
    // server's (given its PID) and this client's.
    if r.bytes >= 1 << 20 {
        let mib = r.bytes as f64 / (1u64 << 20) as f64;
        let ms = |c: Option<f64>| {
            c.map(|c| format!("{:.2}", c * 1e3 / mib))
                .unwrap_or_else(|| "-".into())
        };
        note = format!(
            "cpu ms/MiB server {} client {} {note}",
            ms(r.cpu_secs),
            ms(r.client_cpu_secs)
        );
    }
    println!(
        "{:<11} {:<5} {:>8} {:>11.1} {:>9.1} {:>9} {:>9} {:>11}  {note}",
        op,
        sec,
        n,
        rate,
        r.bytes as f64 / r.secs / 1e6,
        fmt_us(pct(&r.lat_us, 0.5)),
        fmt_us(pct(&r.lat_us, 0.99)),
        r.cpu_secs
            .filter(|_| r.ops > 0.0)
            .map(|c| format!("{:.1}", c * 1e6 / r.ops))
            .unwrap_or_else(|| "-".into()),
    );
}

async fn bench(a: BenchArgs) -> Result<(), String> {
    let ops: Vec<&str> = a
        .ops
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    check_ops(&ops)?;
    let levels: Vec<usize> = a
        .inflight
        .split(',')
        .map(|s| s.trim().parse().map_err(|_| format!("--inflight {s:?}")))
        .collect::<Result<_, _>>()?;
    if let Some(pid) = a.server_pid {
        cpu_secs(pid)?;
    }
    let mut flavors = Vec::new();
    for f in a.sec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        flavors.push((f.to_string(), parse_flavor(f)?));
    }
    if flavors.iter().any(|f| f.1.gss.is_some() || f.1.tls)
        && ops.iter().any(|o| nfs4::OPS.contains(o))
    {
        return Err("--sec krb5*/tls: the NFSv4 workloads run with AUTH_SYS only".into());
    }
    // Set-up and clean-up go over AUTH_SYS: without TLS, unless TLS is all
    // that was asked for (an export may take nothing else).
    let setup_flavor = Flavor {
        tls: flavors.iter().all(|f| f.1.tls),
        gss: None,
    };
    let clients = connect(&a, setup_flavor).await?;
    let fx = Arc::new(setup(&clients, &a, &ops).await?);
    let mut conns = Vec::new();
    for (name, f) in &flavors {
        let c = if f.gss.is_none() && f.tls == setup_flavor.tls {
            clients.clone()
        } else {
            connect(&a, *f).await?
        };
        conns.push((name.as_str(), c));
    }
    // The NFSv4 session is made when its first workload comes: set up
    // earlier, its lease could run out during the NFSv3 runs (Ganesha then
    // answers NFS4ERR_EXPIRED).
    let mut fx4: Option<Arc<nfs4::Fixture4>> = None;
    let header = format!(
        "tarn bench: server {} export {} connections {} {:.1}s per run, file {} MiB, {} entries, {} files{}",
        a.server,
        a.export,
        clients.len(),
        a.seconds,
        fx.file_size >> 20,
        a.dir_entries,
        a.files,
        a.server_pid
            .map(|p| format!(", server pid {p}"))
            .unwrap_or_default()
    );
    if a.json {
        eprintln!("{header}");
    } else {
        println!("{header}");
        println!(
            "{:<11} {:<5} {:>8} {:>11} {:>9} {:>9} {:>9} {:>11}  note",
            "op", "sec", "inflight", "ops/s", "MB/s", "p50(us)", "p99(us)", "cpu us/op"
        );
    }
    let mut made = Vec::new();
    for op in &ops {
        if nfs4::OPS.contains(op) && fx4.is_none() {
            fx4 = Some(Arc::new(
                nfs4::setup(a.server, &a.export, a.uid, a.gid).await?,
            ));
        }
        for &n in &levels {
            let n = n.max(1);
            let (mut sys_rate, mut krb5p_rate) = (None, None);
            for (sec, clients) in &conns {
                let mut r = run_one(&a, op, n, clients, &fx, fx4.as_ref(), &mut made).await?;
                r.sec = sec.to_string();
                r.lat_us.sort_unstable();
                let rate = r.ops / r.secs;
                match *sec {
                    "sys" => sys_rate = Some(rate),
                    "krb5p" => krb5p_rate = Some(rate),
                    _ => {}
                }
                if a.json {
                    println!("{}", json_line(&a, &r, a.dir_entries));
                    continue;
                }
                print_row(op, sec, n, &r, rate, sys_rate, krb5p_rate);
            }
        }
    }
    if let Some(m) = a.server_metrics {
        let drops = gss_drops(m)?;
        let total: f64 = drops.iter().map(|d| d.1).sum();
        let by: Vec<String> = drops.iter().map(|(r, v)| format!("{r} {v}")).collect();
        println!("GSS calls the server dropped: {total} ({})", by.join(", "));
    }
    if let Some(fx4) = fx4 {
        fx4.close().await;
    }
    if !a.keep {
        cleanup(&clients, &fx, &a, made).await;
    }
    Ok(())
}

async fn cleanup(clients: &[Arc<Conn>], fx: &Fixture, a: &BenchArgs, made: Vec<(Vec<u8>, u64)>) {
    let c0 = &clients[0];
    for (name, n) in made {
        if let Ok(dir) = lookup(c0, &fx.root, &name).await {
            let _ = par(clients, 64, n, move |c, i| {
                let dir = dir.clone();
                async move {
                    remove(&c, &dir, format!("f{i:06}").as_bytes(), false).await;
                    Ok(())
                }
            })
            .await;
        }
        remove(c0, &fx.root, &name, true).await;
    }
    if let Some(dir) = &fx.listdir {
        let dir = dir.clone();
        let _ = par(clients, 64, a.dir_entries, move |c, i| {
            let dir = dir.clone();
            async move {
                remove(&c, &dir, entry_name(i).as_bytes(), false).await;
                Ok(())
            }
        })
        .await;
        let name = format!("tarn-bench-ls-{}", a.dir_entries);
        remove(c0, &fx.root, name.as_bytes(), true).await;
    }
    remove(c0, &fx.root, DATA_FILE, false).await;
}
