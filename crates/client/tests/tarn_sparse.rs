//! NFSv4.2 sparse files against a real `tarn serve` over real sparse files
//! (the export is under /var/tmp): READ_PLUS rebuilds exactly READ's bytes
//! where the local backend finds holes (with the page cache warm, so the
//! inline read and its retry on the blocking pool both run), SEEK finds
//! the holes the filesystem has, and DEALLOCATE punches one.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_sparse

mod harness;

use bytes::Bytes;
use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use std::io::{Seek, SeekFrom, Write};
use Nfsstat4::*;

const MIB: u64 = 1 << 20;
const ANON: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

/// A file of `size` bytes under the export holding `data` at each offset,
/// holes elsewhere.
fn sparse_file(t: &Tarn, name: &str, size: u64, data: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let path = t.export.join(name);
    let mut f = std::fs::File::create(&path).unwrap();
    let mut want = vec![0u8; size as usize];
    for (at, d) in data {
        f.seek(SeekFrom::Start(*at)).unwrap();
        f.write_all(d).unwrap();
        want[*at as usize..*at as usize + d.len()].copy_from_slice(d);
    }
    f.set_len(size).unwrap();
    f.sync_all().unwrap();
    chmod(&path, 0o666);
    want
}

fn noise(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

async fn read(s: &Session, fh: &NfsFh4, offset: u64, count: u32) -> (Vec<u8>, bool) {
    let op = NfsArgop4::OP_READ(Read4args {
        stateid: ANON,
        offset,
        count,
    });
    let r = s.call_raw(vec![putfh(fh), op]).await.unwrap();
    match r.resarray.last() {
        Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) => (ok.data.to_vec(), ok.eof),
        _ => panic!("READ: {:?}", statuses(&r)),
    }
}

/// READ_PLUS rebuilt as a client does: bytes, eof, hole segments.
async fn read_plus(s: &Session, fh: &NfsFh4, offset: u64, count: u32) -> (Vec<u8>, bool, usize) {
    let op = NfsArgop4::OP_READ_PLUS(ReadPlus4args {
        rpa_stateid: ANON,
        rpa_offset: offset,
        rpa_count: count,
    });
    let r = s.call_raw(vec![putfh(fh), op]).await.unwrap();
    let Some(NfsResop4::OP_READ_PLUS(ReadPlus4res::NFS4_OK(res))) = r.resarray.last() else {
        panic!("READ_PLUS: {:?}", statuses(&r));
    };
    let (mut bytes, mut holes) = (Vec::new(), 0);
    for c in &res.rpr_contents {
        match c {
            ReadPlusContent::NFS4_CONTENT_DATA(d) => {
                assert_eq!(d.d_offset, offset + bytes.len() as u64);
                bytes.extend_from_slice(&d.d_data);
            }
            ReadPlusContent::NFS4_CONTENT_HOLE(h) => {
                assert_eq!(h.di_offset, offset + bytes.len() as u64);
                holes += 1;
                bytes.resize(bytes.len() + h.di_length as usize, 0);
            }
            ReadPlusContent::Default(c) => panic!("content {c:?}"),
        }
    }
    (bytes, res.rpr_eof, holes)
}

async fn seek(
    s: &Session,
    fh: &NfsFh4,
    offset: u64,
    what: DataContent4,
) -> std::result::Result<(u64, bool), Nfsstat4> {
    let op = NfsArgop4::OP_SEEK(Seek4args {
        sa_stateid: ANON,
        sa_offset: offset,
        sa_what: what,
    });
    let r = s.call_raw(vec![putfh(fh), op]).await.unwrap();
    match r.resarray.last() {
        Some(NfsResop4::OP_SEEK(Seek4res::NFS4_OK(ok))) => Ok((ok.sr_offset, ok.sr_eof)),
        _ => Err(r.status),
    }
}

fn v42() -> SessionOptions {
    SessionOptions {
        minorversion: 2,
        ..SessionOptions::default()
    }
}

#[test]
fn read_plus_over_real_holes_is_reads_bytes() {
    let t = Tarn::start(&[]);
    let size = 3 * MIB + 123;
    let want = sparse_file(
        &t,
        "sparse",
        size,
        &[
            (0, noise(100, 1)),
            (MIB + 7, noise(70_000, 2)),
            (2 * MIB, noise(4096, 3)),
        ],
    );
    run(async {
        let s = session_with(t.addr, &v42()).await;
        let fh = s.lookup_path("/sparse").await.unwrap();
        let mut holes = 0;
        for offset in [
            0,
            1,
            4096,
            5000,
            MIB,
            MIB + 8,
            2 * MIB - 1,
            2 * MIB + 4096,
            size - 1,
            size,
            size + 9,
        ] {
            for count in [0, 1, 4096, 65_536, 300_000, 1 << 20] {
                let r = read(&s, &fh, offset, count).await;
                let end = (offset + count as u64).min(size).max(offset.min(size));
                assert_eq!(r.0, want[offset.min(size) as usize..end as usize]);
                let (got, eof, h) = read_plus(&s, &fh, offset, count).await;
                assert_eq!((got, eof), r, "offset {offset} count {count}");
                holes += h;
            }
        }
        assert!(holes > 0, "no READ_PLUS answered with a hole");
        // The whole file in 1 MiB pieces: holes between the data.
        let mut all = Vec::new();
        let mut at = 0;
        loop {
            let (got, eof, _) = read_plus(&s, &fh, at, 1 << 20).await;
            at += got.len() as u64;
            all.extend(got);
            if eof {
                break;
            }
        }
        assert!(all == want, "READ_PLUS pieces differ from the file");
    });
}

#[test]
fn seek_and_deallocate_on_a_real_file() {
    use DataContent4::{NFS4_CONTENT_DATA as DATA, NFS4_CONTENT_HOLE as HOLE};
    let t = Tarn::start(&[]);
    let size = 4 * MIB;
    let mut want = sparse_file(&t, "f", size, &[(MIB, noise(2 * MIB as usize, 4))]);
    run(async {
        let s = session_with(t.addr, &v42()).await;
        let fh = s.lookup_path("/f").await.unwrap();
        assert_eq!(seek(&s, &fh, 0, DATA).await.unwrap(), (MIB, false));
        assert_eq!(seek(&s, &fh, 0, HOLE).await.unwrap(), (0, false));
        assert_eq!(seek(&s, &fh, MIB, HOLE).await.unwrap(), (3 * MIB, false));
        assert_eq!(seek(&s, &fh, 3 * MIB, DATA).await, Err(NFS4ERR_NXIO));
        assert_eq!(seek(&s, &fh, size, HOLE).await, Err(NFS4ERR_NXIO));
        // Punch 64 KiB in the middle of the data, through an open for writing.
        let root = s.lookup_path("/").await.unwrap();
        let o = s
            .open_with(
                &StateOwner4 {
                    clientid: s.clientid(),
                    owner: Bytes::from_static(b"w"),
                },
                &root,
                "f",
                Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                OPEN4_SHARE_ACCESS_WRITE,
                OPEN4_SHARE_DENY_NONE,
            )
            .await
            .unwrap();
        let punch = NfsArgop4::OP_DEALLOCATE(Deallocate4args {
            da_stateid: o.stateid.clone(),
            da_offset: 2 * MIB,
            da_length: 65_536,
        });
        let r = s.call_raw(vec![putfh(&fh), punch]).await.unwrap();
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        want[2 * MIB as usize..2 * MIB as usize + 65_536].fill(0);
        assert_eq!(std::fs::read(t.export.join("f")).unwrap(), want);
        assert_eq!(
            seek(&s, &fh, MIB, HOLE).await.unwrap(),
            (2 * MIB, false),
            "the punched range is a hole"
        );
        let (got, _, holes) = read_plus(&s, &fh, MIB, 2 * MIB as u32).await;
        assert_eq!(got, want[MIB as usize..2 * MIB as usize]);
        assert_eq!(holes, 0, "no hole in [1 MiB, 2 MiB)");
        let (got, _, holes) = read_plus(&s, &fh, 2 * MIB, MIB as u32).await;
        assert_eq!(got, want[2 * MIB as usize..3 * MIB as usize]);
        assert_eq!(holes, 1);
        s.close(&o.fh, &o.stateid).await.unwrap();
    });
}

/// `Remote`'s NFSv4.2 calls on a real file: ALLOCATE raises the size,
/// DEALLOCATE punches a hole, SEEK finds data and says NXIO past it, COPY
/// copies (committed when UNSTABLE); over an NFSv4.1 session each is
/// NOTSUPP without a call (a 4.1 server answers OP_ILLEGAL).
#[test]
fn remote_allocate_deallocate_seek_copy() {
    use client::remote::{Kind, Remote};
    let t = Tarn::start(&[]);
    let mut want = sparse_file(&t, "g", MIB, &[(0, noise(MIB as usize, 6))]);
    sparse_file(&t, "h", 0, &[]);
    run(async {
        let r = Remote::from_v4(session_with(t.addr, &v42()).await)
            .await
            .unwrap();
        assert!(r.has_v42());
        let open = |name: &'static str| {
            let r = &r;
            async move {
                let fh = r.lookup_path(name).await.unwrap();
                r.open_fh(&fh, true, true, false).await.unwrap().unwrap().0
            }
        };
        let g = open("/g").await;
        r.allocate(&g, MIB / 2, 2 * MIB).await.unwrap();
        assert_eq!(r.stat(&g.fh).await.unwrap().size, Some(5 * MIB / 2));
        want.resize(5 * MIB as usize / 2, 0);
        r.deallocate(&g, 65_536, 65_536).await.unwrap();
        want[65_536..131_072].fill(0);
        assert_eq!(std::fs::read(t.export.join("g")).unwrap(), want);
        assert_eq!(r.seek(&g, 4096, false).await.unwrap(), 4096);
        let past = r.seek(&g, 5 * MIB / 2, false).await.unwrap_err();
        assert_eq!(past.errno(), libc::ENXIO);
        let h = open("/h").await;
        let mut done = 0;
        while done < MIB {
            let c = r.copy(&g, &h, 1000 + done, done, MIB - done).await.unwrap();
            assert!(c.count > 0);
            if c.unstable {
                assert_eq!(r.commit(&h.fh).await.unwrap(), c.verf);
            }
            done += c.count;
        }
        assert_eq!(
            std::fs::read(t.export.join("h")).unwrap(),
            want[1000..1000 + MIB as usize]
        );
        r.close(&g).await.unwrap();
        r.close(&h).await.unwrap();

        let r41 = Remote::from_v4(session_with(t.addr, &SessionOptions::default()).await)
            .await
            .unwrap();
        assert!(!r41.has_v42());
        let fh = r41.lookup_path("/g").await.unwrap();
        let g = client::remote::OpenFile { fh, stateid: None };
        assert!(r41.allocate(&g, 0, 1).await.unwrap_err().is(Kind::NotSupp));
        assert!(r41
            .deallocate(&g, 0, 1)
            .await
            .unwrap_err()
            .is(Kind::NotSupp));
        assert!(r41.seek(&g, 0, true).await.unwrap_err().is(Kind::NotSupp));
        let e = r41.copy(&g, &g, 0, 1, 1).await.unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP);
    });
}
