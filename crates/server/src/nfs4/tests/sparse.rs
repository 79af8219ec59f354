//! NFSv4.2 sparse files in process: SEEK, ALLOCATE, DEALLOCATE, READ_PLUS
//! (whose bytes must be READ's, holes or not), their minor-version gate,
//! and NFS4ERR_NOTSUPP in a well-formed reply for every operation Tarn
//! knows but does not implement. MemFs's holes are its all-zero 4 KiB
//! blocks (see `vfs::memory`).

use super::*;

const PAGE: u64 = 4096;

fn write(sid: &Stateid4, offset: u64, data: &[u8]) -> NfsArgop4 {
    write_op(
        sid,
        offset,
        StableHow4::FILE_SYNC4,
        Bytes::copy_from_slice(data),
    )
}

fn seek(sid: &Stateid4, offset: u64, what: DataContent4) -> NfsArgop4 {
    NfsArgop4::OP_SEEK(Seek4args {
        sa_stateid: sid.clone(),
        sa_offset: offset,
        sa_what: what,
    })
}

fn read_plus(sid: &Stateid4, offset: u64, count: u32) -> NfsArgop4 {
    NfsArgop4::OP_READ_PLUS(ReadPlus4args {
        rpa_stateid: sid.clone(),
        rpa_offset: offset,
        rpa_count: count,
    })
}

fn set_size(sid: &Stateid4, size: u64) -> NfsArgop4 {
    NfsArgop4::OP_SETATTR(Setattr4args {
        stateid: sid.clone(),
        obj_attributes: Fattr4 {
            attrmask: vec![1 << FATTR4_SIZE],
            attr_vals: Bytes::copy_from_slice(&size.to_be_bytes()),
        },
    })
}

/// The status of `op` on the root directory (where a file is wanted).
async fn on_root(fx: &Fx, s: &Sess, op: NfsArgop4) -> Nfsstat4 {
    call42(fx, s, vec![NfsArgop4::OP_PUTROOTFH, op])
        .await
        .status
}

/// A session, and `file` open for reading and writing.
async fn opened_file(fx: &Fx, file: &str) -> (Sess, Opened) {
    let s = fx.client("c").await;
    let o = fx.open(&s, file, "o", BOTH, DENY_NONE).await.unwrap();
    (s, o)
}

async fn ok(fx: &Fx, s: &Sess, ops: Vec<NfsArgop4>) -> Compound4res {
    let r = call42(fx, s, ops).await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    r
}

/// READ's data and eof.
async fn read(fx: &Fx, s: &Sess, o: &Opened, offset: u64, count: u32) -> (Vec<u8>, bool) {
    let op = read_op(&o.stateid, offset, count);
    let r = ok(fx, s, vec![putfh(&o.fh), op]).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) => (ok.data.to_vec(), ok.eof),
        _ => unreachable!(),
    }
}

/// READ_PLUS's answer as the client rebuilds it: the bytes and eof, and
/// how many hole segments there were. Checks that the segments cover the
/// range from `offset` in order with no gap or overlap.
async fn read_plus_rebuilt(
    fx: &Fx,
    s: &Sess,
    o: &Opened,
    offset: u64,
    count: u32,
) -> (Vec<u8>, bool, usize) {
    let r = ok(
        fx,
        s,
        vec![putfh(&o.fh), read_plus(&o.stateid, offset, count)],
    )
    .await;
    let Some(NfsResop4::OP_READ_PLUS(ReadPlus4res::NFS4_OK(res))) = r.resarray.last() else {
        unreachable!()
    };
    let mut bytes = Vec::new();
    let mut holes = 0;
    for c in &res.rpr_contents {
        let (at, len) = match c {
            ReadPlusContent::NFS4_CONTENT_DATA(d) => {
                assert!(!d.d_data.is_empty(), "empty data segment");
                (d.d_offset, d.d_data.len() as u64)
            }
            ReadPlusContent::NFS4_CONTENT_HOLE(h) => {
                assert!(h.di_length > 0, "empty hole segment");
                holes += 1;
                (h.di_offset, h.di_length)
            }
            ReadPlusContent::Default(c) => panic!("content {c:?}"),
        };
        assert_eq!(at, offset + bytes.len() as u64, "segments in order");
        match c {
            ReadPlusContent::NFS4_CONTENT_DATA(d) => bytes.extend_from_slice(&d.d_data),
            _ => bytes.resize(bytes.len() + len as usize, 0),
        }
    }
    assert!(bytes.len() <= count as usize, "more than asked for");
    (bytes, res.rpr_eof, holes)
}

#[tokio::test]
async fn read_plus_gives_reads_bytes_with_holes_at_eof_and_past_it() {
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "sparse").await;
    // Data, holes, data not aligned to blocks, and a last partial block.
    let size = 12 * PAGE + 123;
    ok(
        &fx,
        &s,
        vec![
            putfh(&o.fh),
            write(&o.stateid, 0, &[b'a'; 100]),
            write(&o.stateid, 5 * PAGE + 7, &[b'b'; 5000]),
            write(&o.stateid, size - 1, b"z"),
        ],
    )
    .await;
    let mut saw_holes = 0;
    let offsets = [
        0,
        1,
        100,
        PAGE,
        PAGE + 1,
        5 * PAGE,
        5 * PAGE + 8,
        7 * PAGE,
        size - 1,
    ];
    let counts = [0, 1, 100, 4096, 5000, 3 * 4096 + 5, 1 << 20];
    for &offset in offsets
        .iter()
        .chain(&[size, size + 1, size + PAGE, u64::MAX - 1])
    {
        for &count in &counts {
            let want = read(&fx, &s, &o, offset, count).await;
            let (got, eof, holes) = read_plus_rebuilt(&fx, &s, &o, offset, count).await;
            assert_eq!((got, eof), want, "offset {offset} count {count}");
            saw_holes += holes;
        }
    }
    assert!(saw_holes > 0, "no READ_PLUS answered with a hole");
    // The whole file: data, a hole, data, a hole, data.
    let (_, eof, holes) = read_plus_rebuilt(&fx, &s, &o, 0, 1 << 20).await;
    assert!(eof);
    assert_eq!(holes, 2);

    // A file that ends in a hole, and one made of nothing but a hole.
    let size = 3 * PAGE + 10;
    ok(&fx, &s, vec![putfh(&o.fh), set_size(&o.stateid, size)]).await;
    let (s2, e) = (
        &s,
        fx.open(&s, "empty", "o", BOTH, DENY_NONE).await.unwrap(),
    );
    ok(&fx, s2, vec![putfh(&e.fh), set_size(&e.stateid, 2 * PAGE)]).await;
    for f in [&o, &e] {
        for (offset, count) in [(0, 1 << 20), (50, 3 * 4096), (PAGE, 10), (2 * PAGE, 8)] {
            let want = read(&fx, &s, f, offset, count).await;
            let (got, eof, _) = read_plus_rebuilt(&fx, &s, f, offset, count).await;
            assert_eq!((got, eof), want, "offset {offset} count {count}");
        }
    }
    let (got, eof, holes) = read_plus_rebuilt(&fx, &s, &e, 0, 1 << 20).await;
    assert_eq!((got.len(), eof, holes), (2 * PAGE as usize, true, 1));
}

#[tokio::test]
async fn read_plus_errors_as_read_does() {
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "f").await;
    // A made-up stateid, and a directory.
    let mut bad = o.stateid.clone();
    bad.other[0] ^= 0xff;
    let r = call42(&fx, &s, vec![putfh(&o.fh), read_plus(&bad, 0, 10)]).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    let anon = super::super::compound::ANONYMOUS;
    assert_eq!(
        on_root(&fx, &s, read_plus(&anon, 0, 10)).await,
        NFS4ERR_ISDIR
    );
    let r = call42(&fx, &s, vec![read_plus(&anon, 0, 10)]).await;
    assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
}

#[tokio::test]
async fn seek_finds_data_and_holes() {
    use DataContent4::{NFS4_CONTENT_DATA as DATA, NFS4_CONTENT_HOLE as HOLE};
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "f").await;
    let size = 8 * PAGE;
    ok(
        &fx,
        &s,
        vec![
            putfh(&o.fh),
            write(&o.stateid, 10, b"x"),
            write(&o.stateid, 4 * PAGE, &[b'y'; 4096]),
            set_size(&o.stateid, size),
        ],
    )
    .await;
    let at = |offset, what| {
        let (fx, s, o) = (&fx, &s, &o);
        async move {
            let r = call42(fx, s, vec![putfh(&o.fh), seek(&o.stateid, offset, what)]).await;
            match r.resarray.last() {
                Some(NfsResop4::OP_SEEK(Seek4res::NFS4_OK(ok))) => Ok((ok.sr_offset, ok.sr_eof)),
                _ => Err(r.status),
            }
        }
    };
    assert_eq!(at(0, DATA).await, Ok((0, false)));
    assert_eq!(at(5, DATA).await, Ok((5, false)));
    assert_eq!(at(0, HOLE).await, Ok((PAGE, false)));
    assert_eq!(at(PAGE, DATA).await, Ok((4 * PAGE, false)));
    assert_eq!(at(4 * PAGE + 1, HOLE).await, Ok((5 * PAGE, false)));
    // The file ends in a hole: no data after it (NXIO, as lseek says),
    // and the hole there is the end's.
    assert_eq!(at(5 * PAGE, DATA).await, Err(NFS4ERR_NXIO));
    assert_eq!(at(5 * PAGE, HOLE).await, Ok((5 * PAGE, false)));
    // At or past the end: NXIO (RFC 7862 §15.11.3).
    assert_eq!(at(size, HOLE).await, Err(NFS4ERR_NXIO));
    assert_eq!(at(u64::MAX, DATA).await, Err(NFS4ERR_NXIO));
    // With the data ending the file, the implicit hole at the end is eof.
    ok(&fx, &s, vec![putfh(&o.fh), write(&o.stateid, size, b"end")]).await;
    assert_eq!(at(size, HOLE).await, Ok((size + 3, true)));
    // A write-only open may not read, so may not SEEK either.
    let w = fx
        .open(&s, "f", "w", OPEN4_SHARE_ACCESS_WRITE, DENY_NONE)
        .await
        .unwrap();
    let r = call42(&fx, &s, vec![putfh(&w.fh), seek(&w.stateid, 0, DATA)]).await;
    assert_eq!(r.status, NFS4_OK, "a write open reads as READ allows");
}

#[tokio::test]
async fn allocate_and_deallocate_change_space_under_write_state() {
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "f").await;
    ok(
        &fx,
        &s,
        vec![putfh(&o.fh), write(&o.stateid, 0, &[b'q'; 3 * 4096])],
    )
    .await;
    // DEALLOCATE: zeros, the size kept; READ and READ_PLUS agree.
    ok(
        &fx,
        &s,
        vec![putfh(&o.fh), deallocate_op(&o.stateid, 100, PAGE)],
    )
    .await;
    let (data, eof) = read(&fx, &s, &o, 0, 1 << 20).await;
    assert!(eof);
    assert_eq!(data.len(), 3 * PAGE as usize);
    assert!(data[..100].iter().all(|&b| b == b'q'));
    assert!(data[100..100 + PAGE as usize].iter().all(|&b| b == 0));
    assert!(data[100 + PAGE as usize..].iter().all(|&b| b == b'q'));
    let (got, _, _) = read_plus_rebuilt(&fx, &s, &o, 0, 1 << 20).await;
    assert_eq!(got, data);
    // ALLOCATE past the end: the file grows, with zeros.
    ok(
        &fx,
        &s,
        vec![putfh(&o.fh), allocate_op(&o.stateid, 3 * PAGE, PAGE)],
    )
    .await;
    let (data, _) = read(&fx, &s, &o, 3 * PAGE, 1 << 20).await;
    assert_eq!(data, vec![0; PAGE as usize]);
    // Zero lengths and ranges past the largest file.
    for (op, want) in [
        (allocate_op(&o.stateid, 0, 0), NFS4ERR_INVAL),
        (deallocate_op(&o.stateid, 0, 0), NFS4ERR_INVAL),
        (allocate_op(&o.stateid, u64::MAX, 2), NFS4ERR_FBIG),
        (deallocate_op(&o.stateid, 1 << 63, 1), NFS4ERR_FBIG),
    ] {
        let r = call42(&fx, &s, vec![putfh(&o.fh), op]).await;
        assert_eq!(r.status, want);
    }
    // A read-only open may not change the file; a directory is not one.
    let ro = fx
        .open(&s, "f", "r", OPEN4_SHARE_ACCESS_READ, DENY_NONE)
        .await
        .unwrap();
    for op in [
        allocate_op(&ro.stateid, 0, 1),
        deallocate_op(&ro.stateid, 0, 1),
    ] {
        let r = call42(&fx, &s, vec![putfh(&ro.fh), op]).await;
        assert_eq!(r.status, NFS4ERR_OPENMODE);
    }
    let anon = super::super::compound::ANONYMOUS;
    assert_eq!(
        on_root(&fx, &s, allocate_op(&anon, 0, 1)).await,
        NFS4ERR_ISDIR
    );
    // The anonymous stateid writes as WRITE's would.
    let r = call42(&fx, &s, vec![putfh(&o.fh), allocate_op(&anon, 0, 1)]).await;
    assert_eq!(r.status, NFS4_OK);
}

#[tokio::test]
async fn sparse_ops_are_illegal_before_minor_version_2() {
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "f").await;
    for op in [
        seek(&o.stateid, 0, DataContent4::NFS4_CONTENT_DATA),
        read_plus(&o.stateid, 0, 1),
        allocate_op(&o.stateid, 0, 1),
        deallocate_op(&o.stateid, 0, 1),
    ] {
        let r = fx.call(&s, vec![putfh(&o.fh), op.clone()]).await;
        assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
        assert_eq!(statuses(&r).last(), Some(&(OP_ILLEGAL, NFS4ERR_OP_ILLEGAL)));
        let r = fx.compound(0, vec![putfh(&o.fh), op]).await;
        assert_eq!(statuses(&r).last().unwrap().1, NFS4ERR_OP_ILLEGAL);
    }
}

/// Operations of minor versions 1 and 2 that Tarn decodes but does not
/// carry out: NFS4ERR_NOTSUPP, in a reply that decodes, the COMPOUND
/// stopping there. (GET_DIR_DELEGATION, which Linux 6.19 sends and which
/// failed its mounts as OP_ILLEGAL, is implemented now: `dir_deleg.rs`.)
#[tokio::test]
async fn known_but_unimplemented_ops_are_notsupp() {
    use NfsArgop4 as A;
    let fx = Fx::new(cfg(90, 0));
    let (s, o) = opened_file(&fx, "f").await;
    let sid = o.stateid.clone();
    let ops = [
        A::OP_WANT_DELEGATION(WantDelegation4args {
            wda_want: WANT_READ,
            wda_claim: DelegClaim4::CLAIM_FH,
        }),
        A::OP_GETDEVICELIST(Getdevicelist4args {
            gdla_layout_type: Layouttype4::LAYOUT4_NFSV4_1_FILES,
            gdla_maxdevices: 1,
            gdla_cookie: 0,
            gdla_cookieverf: [0; 8],
        }),
        A::OP_SET_SSV(SetSsv4args {
            ssa_ssv: Bytes::from_static(b"ssv"),
            ssa_digest: Bytes::new(),
        }),
        A::OP_DELEGPURGE(Delegpurge4args {
            clientid: s.clientid,
        }),
        A::OP_OPENATTR(Openattr4args { createdir: false }),
        A::OP_COPY_NOTIFY(CopyNotify4args {
            cna_src_stateid: sid.clone(),
            cna_destination_server: Netloc4::NL4_NAME(name("elsewhere")),
        }),
        A::OP_WRITE_SAME(WriteSame4args {
            wsa_stateid: sid.clone(),
            wsa_stable: StableHow4::UNSTABLE4,
            wsa_adb: AppDataBlock4 {
                adb_offset: 0,
                adb_block_size: 4,
                adb_block_count: 1,
                adb_reloff_blocknum: 0,
                adb_block_num: 0,
                adb_reloff_pattern: 0,
                adb_pattern: Bytes::from_static(b"abcd"),
            },
        }),
        // NFSv4.0 only: RFC 8881 §18 has a 4.1 server answer NOTSUPP.
        A::OP_OPEN_CONFIRM(OpenConfirm4args {
            open_stateid: sid.clone(),
            seqid: 1,
        }),
        A::OP_RENEW(Renew4args {
            clientid: s.clientid,
        }),
        setclientid_op("v40", 7, 0x4000_0000, ("tcp", "127.0.0.1.0.0"), 1),
        A::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
            clientid: s.clientid,
            setclientid_confirm: [0; 8],
        }),
        A::OP_RELEASE_LOCKOWNER(ReleaseLockowner4args {
            lock_owner: owner(s.clientid, "o"),
        }),
    ];
    for op in ops {
        let num = xdr::to_bytes(&op)[..4]
            .try_into()
            .map(u32::from_be_bytes)
            .unwrap();
        // 4.1 operations in 4.1 and 4.2; 4.2 ones in 4.2 only.
        let minors: &[u32] = if num <= OP_RECLAIM_COMPLETE {
            &[1, 2]
        } else {
            &[2]
        };
        for &minor in minors {
            let all = vec![
                fx.sequence(&s),
                putfh(&o.fh),
                op.clone(),
                NfsArgop4::OP_GETFH,
            ];
            let r = fx.compound(minor, all).await;
            assert_eq!(r.status, NFS4ERR_NOTSUPP, "op {num} minor {minor}");
            assert_eq!(r.resarray.len(), 3, "op {num} minor {minor}: stops there");
            assert_eq!(statuses(&r)[2], (num, NFS4ERR_NOTSUPP));
        }
    }
    // Still serving this session.
    assert_eq!(fx.renew(&s).await, Ok(0));
}
