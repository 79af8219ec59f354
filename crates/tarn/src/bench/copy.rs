//! `tarn bench --copy SIZE`: one file copied on the server two ways over
//! NFSv4.2, timed, with the bytes each way puts on the wire: server-side
//! COPY (the calls a client loops on, one at a time, as Linux sends them,
//! then COMMIT), asynchronous COPY (one call, the server copying in the
//! background, followed with OFFLOAD_STATUS every 10 ms since this client
//! takes no CB_OFFLOAD, then COMMIT), and READ + WRITE of 1 MiB pieces through this client
//! (several pieces in flight, as readahead and writeback would have, then
//! COMMIT). Bytes on the wire are the XDR of each COMPOUND's operations
//! and results; RPC and record headers (about 100 bytes a call) are left
//! out. The source is written first (non-zero bytes, committed), so both
//! ways read it from the server's page cache.

use super::err;
use bytes::Bytes;
use client::nfs4::{Nfs4Conn, Session, SessionOptions};
use proto::nfs4::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use xdr::Pack;

const SRC: &str = "tarn-bench-copy.src";
const DST_COPY: &str = "tarn-bench-copy.copy";
const DST_ASYNC: &str = "tarn-bench-copy.async";
const DST_RW: &str = "tarn-bench-copy.rw";
const PIECE: u64 = 1 << 20;
/// READ+WRITE pieces in flight.
const INFLIGHT: u64 = 8;

const ANON: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

/// What a way of copying cost.
struct Cost {
    secs: f64,
    calls: u64,
    wire: u64,
}

fn xdr_len<T: Pack>(v: &T) -> u64 {
    xdr::to_bytes(v).len() as u64
}

/// Sends `ops` after SEQUENCE; the results, with the XDR bytes both ways
/// added to `wire`.
async fn call(s: &Session, ops: Vec<NfsArgop4>, wire: &AtomicU64) -> Result<Compound4res, String> {
    let sent: u64 = ops.iter().map(xdr_len).sum();
    let r = s.call_raw(ops).await.map_err(err)?;
    let got: u64 = r.resarray.iter().map(xdr_len).sum();
    wire.fetch_add(sent + got, Ordering::Relaxed);
    if r.status != Nfsstat4::NFS4_OK {
        return Err(format!("COMPOUND failed: {:?}", r.status));
    }
    Ok(r)
}

fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() })
}

fn commit() -> NfsArgop4 {
    NfsArgop4::OP_COMMIT(Commit4args {
        offset: 0,
        count: 0,
    })
}

/// An empty file `name` in `dir` (created, or cut to nothing), anyone may
/// write.
async fn empty_file(s: &Session, dir: &NfsFh4, name: &str) -> Result<NfsFh4, String> {
    let owner = s.new_owner("copy-bench");
    let mode = Fattr4 {
        attrmask: vec![1 << FATTR4_SIZE, 1 << (FATTR4_MODE - 32)],
        attr_vals: {
            let mut b = bytes::BytesMut::new();
            0u64.pack(&mut b);
            0o666u32.pack(&mut b);
            b.freeze()
        },
    };
    let o = s
        .open_with(
            &owner,
            dir,
            name,
            Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(mode)),
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        )
        .await
        .map_err(err)?;
    s.close(&o.fh, &o.stateid).await.map_err(err)?;
    Ok(o.fh)
}

/// READ+WRITE of `size` bytes from `src` to `dst` in 1 MiB pieces.
async fn read_write(
    s: &Arc<Session>,
    src: &NfsFh4,
    dst: &NfsFh4,
    size: u64,
) -> Result<Cost, String> {
    let wire = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..INFLIGHT {
        let (s, src, dst, wire, calls) = (
            s.clone(),
            src.clone(),
            dst.clone(),
            wire.clone(),
            calls.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut at = w * PIECE;
            while at < size {
                let read = NfsArgop4::OP_READ(Read4args {
                    stateid: ANON,
                    offset: at,
                    count: PIECE.min(size - at) as u32,
                });
                let r = call(&s, vec![putfh(&src), read], &wire).await?;
                let Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) = r.resarray.last() else {
                    return Err("READ failed".to_string());
                };
                let write = NfsArgop4::OP_WRITE(Write4args {
                    stateid: ANON,
                    offset: at,
                    stable: StableHow4::UNSTABLE4,
                    data: ok.data.clone(),
                });
                call(&s, vec![putfh(&dst), write], &wire).await?;
                calls.fetch_add(2, Ordering::Relaxed);
                at += INFLIGHT * PIECE;
            }
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await.map_err(err)??;
    }
    call(s, vec![putfh(dst), commit()], &wire).await?;
    Ok(Cost {
        secs: t.elapsed().as_secs_f64(),
        calls: calls.load(Ordering::Relaxed) + 1,
        wire: wire.load(Ordering::Relaxed),
    })
}

/// COPY calls until the whole file is copied (the server may copy less
/// than asked each time), then COMMIT.
async fn server_copy(s: &Session, src: &NfsFh4, dst: &NfsFh4, size: u64) -> Result<Cost, String> {
    let wire = AtomicU64::new(0);
    let t = Instant::now();
    let calls = server_copy_from(s, src, dst, 0, size, &wire).await?;
    call(s, vec![putfh(dst), commit()], &wire).await?;
    Ok(Cost {
        secs: t.elapsed().as_secs_f64(),
        calls: calls + 1,
        wire: wire.load(Ordering::Relaxed),
    })
}

/// Synchronous COPY calls from `at` to `size`: how many.
async fn server_copy_from(
    s: &Session,
    src: &NfsFh4,
    dst: &NfsFh4,
    mut at: u64,
    size: u64,
    wire: &AtomicU64,
) -> Result<u64, String> {
    let mut calls = 0;
    while at < size {
        let copy = NfsArgop4::OP_COPY(Copy4args {
            ca_src_stateid: ANON,
            ca_dst_stateid: ANON,
            ca_src_offset: at,
            ca_dst_offset: at,
            ca_count: size - at,
            ca_consecutive: true,
            ca_synchronous: true,
            ca_source_server: vec![],
        });
        let r = call(
            s,
            vec![putfh(src), NfsArgop4::OP_SAVEFH, putfh(dst), copy],
            wire,
        )
        .await?;
        let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.last() else {
            return Err("COPY failed".into());
        };
        if ok.cr_response.wr_count == 0 {
            return Err(format!("COPY made no progress at {at}"));
        }
        at += ok.cr_response.wr_count;
        calls += 1;
    }
    Ok(calls)
}

/// One asynchronous COPY of everything, OFFLOAD_STATUS until it is
/// complete, then COMMIT. A server that copies at once instead (a small
/// file, or its bound on background copies reached) is followed on
/// synchronously.
async fn server_copy_async(
    s: &Session,
    src: &NfsFh4,
    dst: &NfsFh4,
    size: u64,
) -> Result<Cost, String> {
    let wire = AtomicU64::new(0);
    let t = Instant::now();
    let copy = NfsArgop4::OP_COPY(Copy4args {
        ca_src_stateid: ANON,
        ca_dst_stateid: ANON,
        ca_src_offset: 0,
        ca_dst_offset: 0,
        ca_count: size,
        ca_consecutive: true,
        ca_synchronous: false,
        ca_source_server: vec![],
    });
    let r = call(
        s,
        vec![putfh(src), NfsArgop4::OP_SAVEFH, putfh(dst), copy],
        &wire,
    )
    .await?;
    let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.last() else {
        return Err("COPY failed".into());
    };
    let mut calls = 1;
    match ok.cr_response.wr_callback_id.first() {
        None => {
            let done = ok.cr_response.wr_count;
            if done < size {
                // Copied at once and short: the rest as a looping client would.
                let rest = server_copy_from(s, src, dst, done, size, &wire).await?;
                calls += rest;
            }
        }
        Some(sid) => loop {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let status = NfsArgop4::OP_OFFLOAD_STATUS(OffloadStatus4args {
                osa_stateid: sid.clone(),
            });
            let r = call(s, vec![putfh(dst), status], &wire).await?;
            calls += 1;
            let Some(NfsResop4::OP_OFFLOAD_STATUS(OffloadStatus4res::NFS4_OK(st))) =
                r.resarray.last()
            else {
                return Err("OFFLOAD_STATUS failed".into());
            };
            match st.osr_complete.first() {
                None => {}
                Some(Nfsstat4::NFS4_OK) if st.osr_count == size => break,
                Some(s) => {
                    return Err(format!(
                        "asynchronous COPY ended with {s:?} after {} bytes",
                        st.osr_count
                    ))
                }
            }
        },
    }
    call(s, vec![putfh(dst), commit()], &wire).await?;
    Ok(Cost {
        secs: t.elapsed().as_secs_f64(),
        calls: calls + 1,
        wire: wire.load(Ordering::Relaxed),
    })
}

pub async fn run(
    server: SocketAddr,
    export: &str,
    uid: u32,
    gid: u32,
    size: u64,
    keep: bool,
) -> Result<(), String> {
    let conn = Nfs4Conn::connect(server, uid, gid).await.map_err(err)?;
    let opts = SessionOptions {
        minorversion: 2,
        ..SessionOptions::default()
    };
    let s = Arc::new(Session::establish(conn, &opts).await.map_err(err)?);
    let root = s.lookup_path(export).await.map_err(err)?;
    let src = empty_file(&s, &root, SRC).await?;
    eprintln!("tarn bench: writing the {} MiB source", size >> 20);
    let piece: Bytes = (0..PIECE).map(|i| (i % 251) as u8 | 1).collect();
    let wire = AtomicU64::new(0);
    let mut at = 0;
    while at < size {
        let n = PIECE.min(size - at) as usize;
        let write = NfsArgop4::OP_WRITE(Write4args {
            stateid: ANON,
            offset: at,
            stable: StableHow4::UNSTABLE4,
            data: piece.slice(..n),
        });
        call(&s, vec![putfh(&src), write], &wire).await?;
        at += n as u64;
    }
    call(&s, vec![putfh(&src), commit()], &wire).await?;
    let dst_copy = empty_file(&s, &root, DST_COPY).await?;
    let dst_async = empty_file(&s, &root, DST_ASYNC).await?;
    let dst_rw = empty_file(&s, &root, DST_RW).await?;
    let c = server_copy(&s, &src, &dst_copy, size).await?;
    let a = server_copy_async(&s, &src, &dst_async, size).await?;
    let rw = read_write(&s, &src, &dst_rw, size).await?;
    let mib = size as f64 / (1 << 20) as f64;
    let line = |name: &str, k: &Cost| {
        println!(
            "{name:<22} {:>8.2} s {:>9.1} MiB/s {:>7} calls {:>14} bytes on the wire",
            k.secs,
            mib / k.secs,
            k.calls,
            k.wire
        )
    };
    println!("copy of a {mib:.0} MiB file on the server, NFSv4.2 (COMMIT included):");
    line("server-side COPY", &c);
    line("COPY, asynchronous", &a);
    line("READ+WRITE (client)", &rw);
    println!(
        "COPY: {:.1}x faster, {:.0}x fewer bytes on the wire",
        rw.secs / c.secs,
        rw.wire as f64 / c.wire.max(1) as f64
    );
    if !keep {
        for name in [SRC, DST_COPY, DST_ASYNC, DST_RW] {
            let remove = NfsArgop4::OP_REMOVE(Remove4args {
                target: Bytes::from(name),
            });
            let _ = s.call_raw(vec![putfh(&root), remove]).await;
        }
    }
    let _ = s.destroy().await;
    Ok(())
}
