//! NFSv4.2 server-side copy against a real `tarn serve` over real files
//! (the export is under /var/tmp): COPY of a file larger than one call
//! copies (16 MiB), continued from the short count as a client loops,
//! with COMMIT in the same COMPOUND as Linux sends it, the checksums of
//! source and copy equal; CLONE is NOTSUPP where the filesystem shares no
//! extents (ext4) and clones where it does; IO_ADVISE takes the hints
//! posix_fadvise knows. An asynchronous COPY of 64 MiB, followed with
//! OFFLOAD_STATUS (this client has no back channel for CB_OFFLOAD) until
//! it is complete, the checksums equal; OFFLOAD_CANCEL of a finished copy
//! and of one under way.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_copy

mod harness;

use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use sha2::{Digest, Sha256};
use Nfsstat4::*;

const MIB: u64 = 1 << 20;
const ANON: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

fn v42() -> SessionOptions {
    SessionOptions {
        minorversion: 2,
        ..SessionOptions::default()
    }
}

/// A file under the export that anyone may read and write.
fn file(t: &Tarn, name: &str, data: &[u8]) {
    let path = t.export.join(name);
    std::fs::write(&path, data).unwrap();
    chmod(&path, 0o666);
}

/// The copies' source file, `src` holding `data`, and their empty
/// destination `dst`.
fn src_and_empty_dst(t: &Tarn, data: &[u8]) {
    file(t, "src", data);
    file(t, "dst", b"");
}

/// The handles of `/src` and `/dst`.
async fn src_and_dst(s: &Session) -> (NfsFh4, NfsFh4) {
    let src = s.lookup_path("/src").await.unwrap();
    (src, s.lookup_path("/dst").await.unwrap())
}

fn noise(len: usize, seed: u8) -> Vec<u8> {
    let mut x = seed as u64 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sha256(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

#[test]
fn copy_of_a_large_file_loops_on_short_counts_and_matches() {
    let t = Tarn::start(&[]);
    let size = 20 * MIB + 12_345;
    let data = noise(size as usize, 5);
    src_and_empty_dst(&t, &data);
    run(async {
        let s = session_with(t.addr, &v42()).await;
        let (src, dst) = src_and_dst(&s).await;
        let mut at = 0;
        let mut calls = Vec::new();
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
            let commit = NfsArgop4::OP_COMMIT(Commit4args {
                offset: 0,
                count: 0,
            });
            let r = s
                .call_raw(vec![
                    putfh(&src),
                    NfsArgop4::OP_SAVEFH,
                    putfh(&dst),
                    copy,
                    commit,
                ])
                .await
                .unwrap();
            assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
            let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.get(4) else {
                unreachable!()
            };
            assert!(ok.cr_requirements.cr_synchronous);
            assert!(ok.cr_response.wr_callback_id.is_empty());
            let n = ok.cr_response.wr_count;
            assert!(n > 0, "no progress at {at}");
            calls.push(n);
            at += n;
        }
        assert_eq!(calls, [16 * MIB, 4 * MIB + 12_345], "bounded per call");
        // Past the end: INVAL, as RFC 7862 §15.2.3 says.
        let past = NfsArgop4::OP_COPY(Copy4args {
            ca_src_stateid: ANON,
            ca_dst_stateid: ANON,
            ca_src_offset: size + 1,
            ca_dst_offset: 0,
            ca_count: 0,
            ca_consecutive: true,
            ca_synchronous: true,
            ca_source_server: vec![],
        });
        let r = s
            .call_raw(vec![putfh(&src), NfsArgop4::OP_SAVEFH, putfh(&dst), past])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_INVAL);
    });
    let copy = std::fs::read(t.export.join("dst")).unwrap();
    assert_eq!(copy.len(), data.len());
    assert_eq!(sha256(&copy), sha256(&data));
}

#[test]
fn clone_where_the_filesystem_can_and_io_advise() {
    let t = Tarn::start(&[]);
    let data = noise(256 << 10, 9);
    src_and_empty_dst(&t, &data);
    run(async {
        let s = session_with(t.addr, &v42()).await;
        let (src, dst) = src_and_dst(&s).await;
        let clone = NfsArgop4::OP_CLONE(Clone4args {
            cl_src_stateid: ANON,
            cl_dst_stateid: ANON,
            cl_src_offset: 0,
            cl_dst_offset: 0,
            cl_count: 0,
        });
        let r = s
            .call_raw(vec![putfh(&src), NfsArgop4::OP_SAVEFH, putfh(&dst), clone])
            .await
            .unwrap();
        let reflinks = std::fs::read(t.export.join("dst")).unwrap() == data;
        if reflinks {
            assert_eq!(r.status, NFS4_OK);
        } else {
            // ext4 and the like: a clean NOTSUPP, the file untouched.
            assert_eq!(r.status, NFS4ERR_NOTSUPP, "{:?}", statuses(&r));
            assert_eq!(std::fs::metadata(t.export.join("dst")).unwrap().len(), 0);
        }
        use IoAdviseType4::*;
        let asked = (1 << IO_ADVISE4_SEQUENTIAL as u32)
            | (1 << IO_ADVISE4_WILLNEED as u32)
            | (1 << IO_ADVISE4_READ as u32);
        let advise = NfsArgop4::OP_IO_ADVISE(IoAdvise4args {
            iaa_stateid: ANON,
            iaa_offset: 0,
            iaa_count: 0,
            iaa_hints: vec![asked],
        });
        let r = s.call_raw(vec![putfh(&src), advise]).await.unwrap();
        let Some(NfsResop4::OP_IO_ADVISE(IoAdvise4res::NFS4_OK(ok))) = r.resarray.last() else {
            panic!("IO_ADVISE: {:?}", statuses(&r));
        };
        // posix_fadvise has SEQUENTIAL and WILLNEED, not READ.
        assert_eq!(
            ok.ior_hints,
            [(1 << IO_ADVISE4_SEQUENTIAL as u32) | (1 << IO_ADVISE4_WILLNEED as u32)]
        );
    });
}

/// PUTFH src, SAVEFH, PUTFH dst, COPY of everything, asynchronous if the
/// server likes: the callback stateid.
async fn copy_async(s: &Session, src: &NfsFh4, dst: &NfsFh4) -> Stateid4 {
    let copy = NfsArgop4::OP_COPY(Copy4args {
        ca_src_stateid: ANON,
        ca_dst_stateid: ANON,
        ca_src_offset: 0,
        ca_dst_offset: 0,
        ca_count: 0,
        ca_consecutive: true,
        ca_synchronous: false,
        ca_source_server: vec![],
    });
    let r = s
        .call_raw(vec![putfh(src), NfsArgop4::OP_SAVEFH, putfh(dst), copy])
        .await
        .unwrap();
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.last() else {
        unreachable!()
    };
    assert!(!ok.cr_requirements.cr_synchronous, "runs in the background");
    assert_eq!(ok.cr_response.wr_callback_id.len(), 1);
    ok.cr_response.wr_callback_id[0].clone()
}

/// OFFLOAD_STATUS: (bytes copied, completion), or the status.
async fn offload_status(
    s: &Session,
    dst: &NfsFh4,
    sid: &Stateid4,
) -> std::result::Result<(u64, Vec<Nfsstat4>), Nfsstat4> {
    let op = NfsArgop4::OP_OFFLOAD_STATUS(OffloadStatus4args {
        osa_stateid: sid.clone(),
    });
    let r = s.call_raw(vec![putfh(dst), op]).await.unwrap();
    match r.resarray.last() {
        Some(NfsResop4::OP_OFFLOAD_STATUS(OffloadStatus4res::NFS4_OK(ok))) => {
            Ok((ok.osr_count, ok.osr_complete.clone()))
        }
        _ => Err(r.status),
    }
}

async fn offload_cancel(s: &Session, dst: &NfsFh4, sid: &Stateid4) -> Nfsstat4 {
    let op = NfsArgop4::OP_OFFLOAD_CANCEL(OffloadCancel4args {
        oca_stateid: sid.clone(),
    });
    s.call_raw(vec![putfh(dst), op]).await.unwrap().status
}

#[test]
fn async_copy_polled_with_offload_status_and_cancelled() {
    let t = Tarn::start(&[]);
    let size = 64 * MIB;
    let data = noise(size as usize, 11);
    src_and_empty_dst(&t, &data);
    file(&t, "dst2", b"");
    run(async {
        let s = session_with(t.addr, &v42()).await;
        let (src, dst) = src_and_dst(&s).await;
        let dst2 = s.lookup_path("/dst2").await.unwrap();
        let sid = copy_async(&s, &src, &dst).await;
        let started = std::time::Instant::now();
        let mut last = 0;
        let (count, status) = loop {
            let (n, done) = offload_status(&s, &dst, &sid)
                .await
                .expect("OFFLOAD_STATUS");
            assert!(n >= last && n <= size, "progress {last} then {n}");
            last = n;
            if let [status] = done[..] {
                break (n, status);
            }
            assert!(started.elapsed().as_secs() < 120, "copy never finished");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!((count, status), (size, NFS4_OK));
        // Kept until forgotten: OFFLOAD_CANCEL of a finished copy forgets it.
        assert_eq!(
            offload_status(&s, &dst, &sid).await,
            Ok((size, vec![NFS4_OK]))
        );
        assert_eq!(offload_cancel(&s, &dst, &sid).await, NFS4_OK);
        assert_eq!(
            offload_status(&s, &dst, &sid).await,
            Err(NFS4ERR_BAD_STATEID)
        );
        assert_eq!(offload_cancel(&s, &dst, &sid).await, NFS4ERR_BAD_STATEID);
        // A copy cancelled at once stops at its next step, short of the end.
        let sid = copy_async(&s, &src, &dst2).await;
        assert_eq!(offload_cancel(&s, &dst2, &sid).await, NFS4_OK);
        assert_eq!(
            offload_status(&s, &dst2, &sid).await,
            Err(NFS4ERR_BAD_STATEID)
        );
    });
    let copy = std::fs::read(t.export.join("dst")).unwrap();
    assert_eq!(copy.len(), data.len());
    assert_eq!(sha256(&copy), sha256(&data));
    // The cancelled copy's file stops growing, short of the whole.
    let len = || std::fs::metadata(t.export.join("dst2")).unwrap().len();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let stopped = len();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(len(), stopped);
    assert!(stopped < size, "cancelled copy ran to the end");
}
