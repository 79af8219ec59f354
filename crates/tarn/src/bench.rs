//! `tarn bench`: drives a running NFSv3 server over loopback with many calls
//! in flight and prints ops/s, MB/s and p50/p99 latency per operation.
//! A measurement tool, not a test: numbers go into closing notes.

use bytes::Bytes;
use proto::mount::{Dirpath, Mountres3, MOUNTPROC3_MNT, MOUNT_PROGRAM};
use proto::nfs3::*;
use rpc::client::{auth_sys, RpcClient};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xdr::Unpack;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The server to measure.
    #[arg(long, default_value = "127.0.0.1:2049")]
    server: SocketAddr,
    /// The export to mount.
    #[arg(long, default_value = "/")]
    export: String,
    /// Operations: null, getattr, lookup, access, read4k, write4k, read1m, write1m.
    #[arg(long, default_value = "null,getattr,lookup,read4k,write4k,read1m")]
    ops: String,
    /// Calls in flight, one run per value.
    #[arg(long, default_value = "1,32")]
    inflight: String,
    /// Seconds per run.
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
}

const FILE_SIZE: u64 = 64 << 20;

struct Fixture {
    root: NfsFh3,
    file: NfsFh3,
}

fn bail<T>(what: &str, st: Nfsstat3) -> Result<T, String> {
    Err(format!("{what} failed: {st:?}"))
}

async fn setup(c: &RpcClient, export: &str) -> Result<Fixture, String> {
    let mut d = c
        .call(
            MOUNT_PROGRAM,
            3,
            MOUNTPROC3_MNT,
            &Dirpath(Bytes::copy_from_slice(export.as_bytes())),
        )
        .await
        .map_err(|e| e.to_string())?;
    let root = match Mountres3::unpack(&mut d).map_err(|e| e.to_string())? {
        Mountres3::MNT3_OK(ok) => NfsFh3 { data: ok.fhandle.0 },
        Mountres3::Default(s) => return Err(format!("MNT {export}: {s:?}")),
    };
    let name = Bytes::from_static(b"tarn-bench.dat");
    let how = Createhow3::UNCHECKED(Sattr3 {
        mode: Some(0o644),
        uid: None,
        gid: None,
        size: None,
        atime: SetAtime::Default(TimeHow::DONT_CHANGE),
        mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
    });
    let args = Create3args {
        r#where: Diropargs3 {
            dir: root.clone(),
            name: name.clone(),
        },
        how,
    };
    let mut d = c
        .call(NFS_PROGRAM, 3, NFSPROC3_CREATE, &args)
        .await
        .map_err(|e| e.to_string())?;
    let file = match Create3res::unpack(&mut d).map_err(|e| e.to_string())? {
        Create3res::NFS3_OK(ok) => ok.obj.ok_or("CREATE returned no handle")?,
        Create3res::Default(s, _) => {
            return bail(
                "CREATE tarn-bench.dat (is the export writable by --uid?)",
                s,
            )
        }
    };
    // Fill the file so that reads hit data, 1 MiB at a time.
    let chunk = Bytes::from(vec![0x5au8; 1 << 20]);
    for i in 0..(FILE_SIZE >> 20) {
        let w = Write3args {
            file: file.clone(),
            offset: i << 20,
            count: 1 << 20,
            stable: StableHow::UNSTABLE,
            data: chunk.clone(),
        };
        let mut d = c
            .call(NFS_PROGRAM, 3, NFSPROC3_WRITE, &w)
            .await
            .map_err(|e| e.to_string())?;
        if let Write3res::Default(s, _) = Write3res::unpack(&mut d).map_err(|e| e.to_string())? {
            return bail("WRITE", s);
        }
    }
    let cm = Commit3args {
        file: file.clone(),
        offset: 0,
        count: 0,
    };
    c.call(NFS_PROGRAM, 3, NFSPROC3_COMMIT, &cm)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Fixture { root, file })
}

/// One call of an operation; returns the payload bytes moved.
async fn one(c: &RpcClient, op: &str, fx: &Fixture, i: u64, wbuf: &Bytes) -> Result<u64, String> {
    let e = |e: rpc::client::ClientError| e.to_string();
    let off4k = (i.wrapping_mul(2654435761) % (FILE_SIZE / 4096)) * 4096;
    let off1m = (i % (FILE_SIZE >> 20)) << 20;
    Ok(match op {
        "null" => {
            c.call_raw(NFS_PROGRAM, 3, NFSPROC3_NULL, &[])
                .await
                .map_err(e)?;
            0
        }
        "getattr" => {
            let mut d = c
                .call(
                    NFS_PROGRAM,
                    3,
                    NFSPROC3_GETATTR,
                    &Getattr3args {
                        object: fx.file.clone(),
                    },
                )
                .await
                .map_err(e)?;
            if let Getattr3res::Default(s) =
                Getattr3res::unpack(&mut d).map_err(|e| e.to_string())?
            {
                return bail("GETATTR", s);
            }
            0
        }
        "lookup" => {
            let a = Lookup3args {
                what: Diropargs3 {
                    dir: fx.root.clone(),
                    name: Bytes::from_static(b"tarn-bench.dat"),
                },
            };
            let mut d = c
                .call(NFS_PROGRAM, 3, NFSPROC3_LOOKUP, &a)
                .await
                .map_err(e)?;
            if let Lookup3res::Default(s, _) =
                Lookup3res::unpack(&mut d).map_err(|e| e.to_string())?
            {
                return bail("LOOKUP", s);
            }
            0
        }
        "access" => {
            let mut d = c
                .call(
                    NFS_PROGRAM,
                    3,
                    NFSPROC3_ACCESS,
                    &Access3args {
                        object: fx.file.clone(),
                        access: 0x3f,
                    },
                )
                .await
                .map_err(e)?;
            if let Access3res::Default(s, _) =
                Access3res::unpack(&mut d).map_err(|e| e.to_string())?
            {
                return bail("ACCESS", s);
            }
            0
        }
        "read4k" | "read1m" => {
            let (offset, count) = if op == "read4k" {
                (off4k, 4096)
            } else {
                (off1m, 1 << 20)
            };
            let mut d = c
                .call(
                    NFS_PROGRAM,
                    3,
                    NFSPROC3_READ,
                    &Read3args {
                        file: fx.file.clone(),
                        offset,
                        count,
                    },
                )
                .await
                .map_err(e)?;
            match Read3res::unpack(&mut d).map_err(|e| e.to_string())? {
                Read3res::NFS3_OK(ok) => ok.data.len() as u64,
                Read3res::Default(s, _) => return bail("READ", s),
            }
        }
        "write4k" | "write1m" => {
            let (offset, data) = if op == "write4k" {
                (off4k, wbuf.slice(..4096))
            } else {
                (off1m, wbuf.clone())
            };
            let n = data.len() as u64;
            let w = Write3args {
                file: fx.file.clone(),
                offset,
                count: n as u32,
                stable: StableHow::UNSTABLE,
                data,
            };
            let mut d = c
                .call(NFS_PROGRAM, 3, NFSPROC3_WRITE, &w)
                .await
                .map_err(e)?;
            match Write3res::unpack(&mut d).map_err(|e| e.to_string())? {
                Write3res::NFS3_OK(ok) => ok.count as u64,
                Write3res::Default(s, _) => return bail("WRITE", s),
            }
        }
        other => return Err(format!("unknown operation {other:?}")),
    })
}

struct RunResult {
    ops: u64,
    bytes: u64,
    secs: f64,
    lat_us: Vec<u32>,
}

async fn run(
    clients: &[Arc<RpcClient>],
    fx: &Arc<Fixture>,
    op: &str,
    inflight: usize,
    secs: f64,
) -> Result<RunResult, String> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let wbuf = Bytes::from(vec![0xa5u8; 1 << 20]);
    let mut tasks = Vec::new();
    for w in 0..inflight {
        let c = clients[w % clients.len()].clone();
        let fx = fx.clone();
        let op = op.to_string();
        let wbuf = wbuf.clone();
        tasks.push(tokio::spawn(async move {
            let (mut n, mut bytes, mut lat) = (0u64, 0u64, Vec::with_capacity(1 << 16));
            let mut i = w as u64 * 1_000_003;
            while Instant::now() < deadline {
                let t = Instant::now();
                bytes += one(&c, &op, &fx, i, &wbuf).await?;
                lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                n += 1;
                i += 1;
            }
            Ok::<_, String>((n, bytes, lat))
        }));
    }
    let mut r = RunResult {
        ops: 0,
        bytes: 0,
        secs: 0.0,
        lat_us: Vec::new(),
    };
    for t in tasks {
        let (n, b, l) = t.await.map_err(|e| e.to_string())??;
        r.ops += n;
        r.bytes += b;
        r.lat_us.extend(l);
    }
    r.secs = start.elapsed().as_secs_f64();
    r.lat_us.sort_unstable();
    Ok(r)
}

fn pct(v: &[u32], p: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn main(a: BenchArgs) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match rt.block_on(bench(a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tarn bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(a: BenchArgs) -> Result<(), String> {
    let mut clients = Vec::new();
    for _ in 0..a.connections.max(1) {
        let c = RpcClient::connect(a.server, auth_sys(a.uid, a.gid, &[], "tarn-bench"))
            .await
            .map_err(|e| format!("{}: {e}", a.server))?;
        clients.push(Arc::new(c));
    }
    let fx = Arc::new(setup(&clients[0], &a.export).await?);
    let levels: Vec<usize> = a
        .inflight
        .split(',')
        .map(|s| s.trim().parse().map_err(|_| format!("--inflight {s:?}")))
        .collect::<Result<_, _>>()?;
    println!(
        "tarn bench: server {} export {} connections {} {:.1}s per run",
        a.server,
        a.export,
        clients.len(),
        a.seconds
    );
    println!(
        "{:<9} {:>8} {:>11} {:>9} {:>9} {:>9}",
        "op", "inflight", "ops/s", "MB/s", "p50(us)", "p99(us)"
    );
    for op in a.ops.split(',').map(str::trim) {
        for &n in &levels {
            let r = run(&clients, &fx, op, n, a.seconds).await?;
            println!(
                "{:<9} {:>8} {:>11.0} {:>9.1} {:>9} {:>9}",
                op,
                n,
                r.ops as f64 / r.secs,
                r.bytes as f64 / r.secs / 1e6,
                pct(&r.lat_us, 0.5),
                pct(&r.lat_us, 0.99)
            );
        }
    }
    let rm = Remove3args {
        object: Diropargs3 {
            dir: fx.root.clone(),
            name: Bytes::from_static(b"tarn-bench.dat"),
        },
    };
    let _ = clients[0].call(NFS_PROGRAM, 3, NFSPROC3_REMOVE, &rm).await;
    Ok(())
}
