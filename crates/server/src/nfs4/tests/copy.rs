//! NFSv4.2 server-side copy in process: COPY's ranges (count 0 to the
//! end, past the end, one file's overlapping ranges), its bound per call,
//! its stateid and filehandle errors; CLONE (NOTSUPP on MemFs, which
//! shares no storage); IO_ADVISE (MemFs takes no hint); OFFLOAD_STATUS
//! and OFFLOAD_CANCEL for copies that never ran in the background.
//! Asynchronous COPY (with a small threshold and chunk so the tests stay
//! small): the callback stateid, CB_OFFLOAD over a scripted back channel,
//! OFFLOAD_STATUS when the callback is lost or there is no back channel,
//! OFFLOAD_CANCEL mid-copy, the fallback to a synchronous copy at the
//! bounds.

use super::super::copy::COPY_MAX;
use super::*;

/// Writes `data` at `offset` in WRITEs the fixture's session takes.
async fn fill(fx: &Fx, s: &Sess, o: &Opened, offset: u64, data: &[u8]) {
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        let r = call42(
            fx,
            s,
            vec![
                putfh(&o.fh),
                write_op(
                    &o.stateid,
                    offset + (i * CHUNK) as u64,
                    StableHow4::FILE_SYNC4,
                    Bytes::copy_from_slice(chunk),
                ),
            ],
        )
        .await;
        assert_eq!(r.status, NFS4_OK);
    }
}

const CHUNK: usize = 256 << 10;

/// The whole file, READ by READ.
async fn contents(fx: &Fx, s: &Sess, o: &Opened) -> Vec<u8> {
    let mut all = Vec::new();
    loop {
        let r = call42(
            fx,
            s,
            vec![
                putfh(&o.fh),
                read_op(&o.stateid, all.len() as u64, CHUNK as u32),
            ],
        )
        .await;
        let Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) = r.resarray.last() else {
            panic!("READ: {:?}", statuses(&r));
        };
        all.extend_from_slice(&ok.data);
        if ok.eof {
            return all;
        }
    }
}

/// COPY as Linux sends it: asynchronous if the server likes.
fn copy_op(src: &Stateid4, dst: &Stateid4, src_off: u64, dst_off: u64, count: u64) -> NfsArgop4 {
    NfsArgop4::OP_COPY(Copy4args {
        ca_src_stateid: src.clone(),
        ca_dst_stateid: dst.clone(),
        ca_src_offset: src_off,
        ca_dst_offset: dst_off,
        ca_count: count,
        ca_consecutive: true,
        ca_synchronous: false,
        ca_source_server: vec![],
    })
}

/// COPY `op` made one that must be done before the reply.
fn synchronous(mut op: NfsArgop4) -> NfsArgop4 {
    if let NfsArgop4::OP_COPY(a) = &mut op {
        a.ca_synchronous = true;
    }
    op
}

fn clone_op(src: &Stateid4, dst: &Stateid4, src_off: u64, dst_off: u64, count: u64) -> NfsArgop4 {
    NfsArgop4::OP_CLONE(Clone4args {
        cl_src_stateid: src.clone(),
        cl_dst_stateid: dst.clone(),
        cl_src_offset: src_off,
        cl_dst_offset: dst_off,
        cl_count: count,
    })
}

/// PUTFH src, SAVEFH, PUTFH dst, `op`: the last result.
async fn from_to(fx: &Fx, s: &Sess, src: &Opened, dst: &Opened, op: NfsArgop4) -> Compound4res {
    call42(
        fx,
        s,
        vec![putfh(&src.fh), NfsArgop4::OP_SAVEFH, putfh(&dst.fh), op],
    )
    .await
}

/// COPY's result: the count copied, or the status.
async fn copied(
    fx: &Fx,
    s: &Sess,
    src: &Opened,
    dst: &Opened,
    src_off: u64,
    dst_off: u64,
    count: u64,
) -> Result<u64, Nfsstat4> {
    let op = copy_op(&src.stateid, &dst.stateid, src_off, dst_off, count);
    copied_by(fx, s, src, dst, op).await
}

/// COPY `op`'s result, checked as [`copied`] does.
async fn copied_by(
    fx: &Fx,
    s: &Sess,
    src: &Opened,
    dst: &Opened,
    op: NfsArgop4,
) -> Result<u64, Nfsstat4> {
    let r = from_to(fx, s, src, dst, op).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) => {
            // Always done at once, whatever the client asked for: no
            // callback to wait for, and a COMMIT makes it durable.
            assert!(ok.cr_response.wr_callback_id.is_empty());
            assert!(ok.cr_requirements.cr_synchronous);
            assert_eq!(ok.cr_response.wr_committed, StableHow4::UNSTABLE4);
            assert_eq!(ok.cr_response.wr_writeverf, fx.n.write_verf.get());
            Ok(ok.cr_response.wr_count)
        }
        _ => Err(r.status),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn two_files(fx: &Fx) -> (Sess, Opened, Opened) {
    let s = fx.client("c").await;
    let (a, b) = two_files_of(fx, &s).await;
    (s, a, b)
}

/// A server (90 s leases, no grace) with [`two_files`] open.
async fn with_two_files() -> (Fx, Sess, Opened, Opened) {
    let fx = Fx::new(cfg(90, 0));
    let (s, a, b) = two_files(&fx).await;
    (fx, s, a, b)
}

#[tokio::test]
async fn copy_copies_ranges_and_count_zero_means_to_the_end() {
    let (fx, s, a, b) = with_two_files().await;
    let src = pattern(100_000, 7);
    fill(&fx, &s, &a, 0, &src).await;
    // A middle range to a place past the destination's end: the gap
    // reads as zeros.
    assert_eq!(copied(&fx, &s, &a, &b, 1000, 500, 5000).await, Ok(5000));
    let got = contents(&fx, &s, &b).await;
    assert_eq!(got.len(), 5500);
    assert!(got[..500].iter().all(|&x| x == 0));
    assert_eq!(got[500..], src[1000..6000]);
    // Count 0: from the offset to the source's end, over what was there.
    assert_eq!(copied(&fx, &s, &a, &b, 90_000, 0, 0).await, Ok(10_000));
    assert_eq!(contents(&fx, &s, &b).await, src[90_000..]);
    // The whole file, then COMMIT in the same COMPOUND as Linux sends it.
    let r = call42(
        &fx,
        &s,
        vec![
            putfh(&a.fh),
            NfsArgop4::OP_SAVEFH,
            putfh(&b.fh),
            copy_op(&a.stateid, &b.stateid, 0, 0, 0),
            NfsArgop4::OP_COMMIT(Commit4args {
                offset: 0,
                count: 0,
            }),
        ],
    )
    .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    assert_eq!(contents(&fx, &s, &b).await, src);
}

#[tokio::test]
async fn copy_past_the_source_end_is_inval() {
    let (fx, s, a, b) = with_two_files().await;
    fill(&fx, &s, &a, 0, &pattern(1000, 1)).await;
    // At the end: nothing to copy, and that is no error.
    assert_eq!(copied(&fx, &s, &a, &b, 1000, 0, 0).await, Ok(0));
    // RFC 7862 §15.2.3: a source range beyond the end is INVAL.
    assert_eq!(
        copied(&fx, &s, &a, &b, 1001, 0, 0).await,
        Err(NFS4ERR_INVAL)
    );
    assert_eq!(
        copied(&fx, &s, &a, &b, 500, 0, 501).await,
        Err(NFS4ERR_INVAL)
    );
    assert_eq!(
        copied(&fx, &s, &a, &b, 0, u64::MAX, 10).await,
        Err(NFS4ERR_FBIG)
    );
    assert_eq!(contents(&fx, &s, &b).await, b"");
}

#[tokio::test]
async fn copy_is_bounded_per_call_and_continues() {
    let (fx, s, a, b) = with_two_files().await;
    let len = COPY_MAX as usize + 300_000;
    let src = pattern(len, 3);
    fill(&fx, &s, &a, 0, &src).await;
    // A short count, which the client continues from. (Asked for
    // asynchronously, this much would run in the background: see the
    // asynchronous tests below.)
    let op = synchronous(copy_op(&a.stateid, &b.stateid, 0, 0, 0));
    assert_eq!(copied_by(&fx, &s, &a, &b, op).await, Ok(COPY_MAX));
    assert_eq!(
        copied(&fx, &s, &a, &b, COPY_MAX, COPY_MAX, 0).await,
        Ok(300_000)
    );
    assert!(contents(&fx, &s, &b).await == src);
}

#[tokio::test]
async fn copy_within_one_file_refuses_overlapping_ranges() {
    let (fx, s, a, _) = with_two_files().await;
    let src = pattern(8192, 9);
    fill(&fx, &s, &a, 0, &src).await;
    assert_eq!(
        copied(&fx, &s, &a, &a, 0, 100, 4096).await,
        Err(NFS4ERR_INVAL)
    );
    assert_eq!(
        copied(&fx, &s, &a, &a, 100, 0, 0).await,
        Err(NFS4ERR_INVAL),
        "count 0 runs to the end, over the destination"
    );
    // Side by side is fine.
    assert_eq!(copied(&fx, &s, &a, &a, 0, 8192, 8192).await, Ok(8192));
    let got = contents(&fx, &s, &a).await;
    assert_eq!(got[..8192], src);
    assert_eq!(got[8192..], src);
}

#[tokio::test]
async fn copy_checks_stateids_and_filehandles() {
    let (fx, s, a, b) = with_two_files().await;
    fill(&fx, &s, &a, 0, b"source bytes").await;
    let ro = fx
        .open(&s, "b", "r", OPEN4_SHARE_ACCESS_READ, DENY_NONE)
        .await
        .unwrap();
    // The destination is written: a read-only open's stateid may not.
    let r = from_to(&fx, &s, &a, &ro, copy_op(&a.stateid, &ro.stateid, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4ERR_OPENMODE);
    // Each stateid is checked against its own file.
    let r = from_to(&fx, &s, &a, &b, copy_op(&b.stateid, &b.stateid, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    let mut bad = a.stateid.clone();
    bad.other[0] ^= 0xff;
    let r = from_to(&fx, &s, &a, &b, copy_op(&bad, &b.stateid, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    // The anonymous stateid reads and writes as READ's and WRITE's would.
    let anon = super::super::compound::ANONYMOUS;
    let r = from_to(&fx, &s, &a, &b, copy_op(&anon, &anon, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(contents(&fx, &s, &b).await, b"source bytes");
    // No saved filehandle (the source), no current one (the destination).
    let r = call42(&fx, &s, vec![putfh(&b.fh), copy_op(&anon, &anon, 0, 0, 0)]).await;
    assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
    let r = call42(&fx, &s, vec![copy_op(&anon, &anon, 0, 0, 0)]).await;
    assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
    // A directory is no source.
    let r = call42(
        &fx,
        &s,
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_SAVEFH,
            putfh(&b.fh),
            copy_op(&anon, &anon, 0, 0, 0),
        ],
    )
    .await;
    assert_eq!(r.status, NFS4ERR_ISDIR);
    // The source on another server: not offered.
    let mut op = copy_op(&a.stateid, &b.stateid, 0, 0, 0);
    if let NfsArgop4::OP_COPY(c) = &mut op {
        c.ca_source_server = vec![Netloc4::NL4_NAME(name("elsewhere"))];
    }
    let r = from_to(&fx, &s, &a, &b, op).await;
    assert_eq!(r.status, NFS4ERR_NOTSUPP);
}

#[tokio::test]
async fn clone_is_notsupp_where_nothing_shares_storage() {
    let (fx, s, a, b) = with_two_files().await;
    fill(&fx, &s, &a, 0, &pattern(8192, 2)).await;
    let r = from_to(&fx, &s, &a, &b, clone_op(&a.stateid, &b.stateid, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4ERR_NOTSUPP);
    assert_eq!(statuses(&r).last(), Some(&(OP_CLONE, NFS4ERR_NOTSUPP)));
    // Range and stateid errors come first, as for COPY.
    let op = clone_op(&a.stateid, &b.stateid, 0, 0, 9000);
    let r = from_to(&fx, &s, &a, &b, op).await;
    assert_eq!(r.status, NFS4ERR_INVAL);
    let op = clone_op(&a.stateid, &a.stateid, 0, 10, 100);
    let r = from_to(&fx, &s, &a, &a, op).await;
    assert_eq!(r.status, NFS4ERR_INVAL);
    let r = from_to(&fx, &s, &a, &b, clone_op(&b.stateid, &b.stateid, 0, 0, 0)).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
}

/// IO_ADVISE of the whole file through `sid`: sequential, will need.
fn advise(sid: &Stateid4) -> NfsArgop4 {
    use IoAdviseType4::*;
    NfsArgop4::OP_IO_ADVISE(IoAdvise4args {
        iaa_stateid: sid.clone(),
        iaa_offset: 0,
        iaa_count: 0,
        iaa_hints: vec![(1 << IO_ADVISE4_SEQUENTIAL as u32) | (1 << IO_ADVISE4_WILLNEED as u32)],
    })
}

#[tokio::test]
async fn io_advise_answers_the_hints_taken() {
    let (fx, s, a, _) = with_two_files().await;
    // MemFs has no cache to advise: accepted, no hint taken.
    let r = call42(&fx, &s, vec![putfh(&a.fh), advise(&a.stateid)]).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_IO_ADVISE(IoAdvise4res::NFS4_OK(ok))) => {
            assert!(ok.ior_hints.iter().all(|&w| w == 0), "{:?}", ok.ior_hints)
        }
        _ => panic!("{:?}", statuses(&r)),
    }
    let mut bad = a.stateid.clone();
    bad.other[0] ^= 0xff;
    let r = call42(&fx, &s, vec![putfh(&a.fh), advise(&bad)]).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    let r = call42(&fx, &s, vec![advise(&a.stateid)]).await;
    assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
}

#[tokio::test]
async fn offload_status_and_cancel_know_no_copy() {
    let (fx, s, a, _) = with_two_files().await;
    let ops = |sid: &Stateid4| {
        [
            NfsArgop4::OP_OFFLOAD_STATUS(OffloadStatus4args {
                osa_stateid: sid.clone(),
            }),
            NfsArgop4::OP_OFFLOAD_CANCEL(OffloadCancel4args {
                oca_stateid: sid.clone(),
            }),
        ]
    };
    for op in ops(&a.stateid) {
        let r = call42(&fx, &s, vec![putfh(&a.fh), op.clone()]).await;
        assert_eq!(r.status, NFS4ERR_BAD_STATEID);
        assert_eq!(r.resarray.len(), 3, "a well-formed answer");
        let r = call42(&fx, &s, vec![op]).await;
        assert_eq!(r.status, NFS4ERR_NOFILEHANDLE);
    }
}

#[tokio::test]
async fn copy_ops_are_illegal_before_minor_version_2() {
    let (fx, s, a, b) = with_two_files().await;
    for op in [
        copy_op(&a.stateid, &b.stateid, 0, 0, 0),
        clone_op(&a.stateid, &b.stateid, 0, 0, 0),
    ] {
        let r = fx
            .call(
                &s,
                vec![putfh(&a.fh), NfsArgop4::OP_SAVEFH, putfh(&b.fh), op],
            )
            .await;
        assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
    }
}

// ---- asynchronous COPY ----------------------------------------------------

const KIB: u64 = 1 << 10;

/// A server whose COPY goes to the background past 64 KiB, in 16 KiB
/// steps, with `per_client` copies a client may run.
fn async_fx(per_client: usize) -> Fx {
    Fx::new(Nfs4Config {
        copy: super::super::copy::CopyConfig {
            async_min: 64 * KIB,
            chunk: 16 * KIB,
            limits: crate::nfs4::state::copy::CopyLimits {
                per_client,
                ..Default::default()
            },
        },
        ..cfg(90, 0)
    })
}

/// COPY asked asynchronously and answered so: the callback stateid.
async fn started(fx: &Fx, s: &Sess, src: &Opened, dst: &Opened, count: u64) -> Stateid4 {
    let op = copy_op(&src.stateid, &dst.stateid, 0, 0, count);
    let r = from_to(fx, s, src, dst, op).await;
    let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("COPY: {:?}", statuses(&r));
    };
    assert!(!ok.cr_requirements.cr_synchronous);
    assert_eq!(ok.cr_response.wr_count, 0);
    assert_eq!(ok.cr_response.wr_writeverf, fx.n.write_verf.get());
    assert_eq!(ok.cr_response.wr_callback_id.len(), 1);
    ok.cr_response.wr_callback_id[0].clone()
}

fn offload_status(sid: &Stateid4) -> NfsArgop4 {
    NfsArgop4::OP_OFFLOAD_STATUS(OffloadStatus4args {
        osa_stateid: sid.clone(),
    })
}

fn offload_cancel(sid: &Stateid4) -> NfsArgop4 {
    NfsArgop4::OP_OFFLOAD_CANCEL(OffloadCancel4args {
        oca_stateid: sid.clone(),
    })
}

/// OFFLOAD_STATUS on the destination: (bytes copied, completion).
async fn status_of(
    fx: &Fx,
    s: &Sess,
    dst: &Opened,
    sid: &Stateid4,
) -> Result<(u64, Vec<Nfsstat4>), Nfsstat4> {
    let r = call42(fx, s, vec![putfh(&dst.fh), offload_status(sid)]).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_OFFLOAD_STATUS(OffloadStatus4res::NFS4_OK(ok))) => {
            Ok((ok.osr_count, ok.osr_complete.clone()))
        }
        _ => Err(r.status),
    }
}

/// Polls OFFLOAD_STATUS until the copy is done, as a client without a
/// back channel does: (bytes copied, status).
async fn wait_done(fx: &Fx, s: &Sess, dst: &Opened, sid: &Stateid4) -> (u64, Nfsstat4) {
    let mut last = 0;
    for _ in 0..5000 {
        let (n, done) = status_of(fx, s, dst, sid).await.expect("OFFLOAD_STATUS");
        assert!(n >= last, "progress never goes back");
        last = n;
        if let [status] = done[..] {
            return (n, status);
        }
        tokio::time::sleep(millis(1)).await;
    }
    panic!("the copy never finished ({last} bytes)");
}

/// The CB_OFFLOADs the client received.
fn offloads(fake: &FakeBack) -> Vec<CbOffload4args> {
    fake.compounds()
        .into_iter()
        .flat_map(|c| c.argarray)
        .filter_map(|op| match op {
            NfsCbArgop4::OP_CB_OFFLOAD(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// [`async_fx`] (4 copies a client) counting into metrics of its own.
fn metered_async_fx() -> (Fx, Arc<metrics::Metrics>) {
    let mut fx = async_fx(4);
    let m = metrics::Metrics::new(true);
    fx.n.metrics = Some(m.clone());
    (fx, m)
}

async fn two_files_of(fx: &Fx, s: &Sess) -> (Opened, Opened) {
    let a = fx.open(s, "a", "o", BOTH, DENY_NONE).await.unwrap();
    let b = fx.open(s, "b", "o", BOTH, DENY_NONE).await.unwrap();
    (a, b)
}

#[tokio::test]
async fn async_copy_runs_in_the_background_and_calls_back_with_the_count() {
    let (fx, m) = metered_async_fx();
    let (s, fake) = fx.client_with_back("c").await;
    let (a, b) = two_files_of(&fx, &s).await;
    let src = pattern(300_000, 4);
    fill(&fx, &s, &a, 0, &src).await;
    // Up to 64 KiB is still copied at once, whatever the client asked.
    assert_eq!(copied(&fx, &s, &a, &b, 0, 0, 64 * KIB).await, Ok(64 * KIB));
    let sid = started(&fx, &s, &a, &b, 0).await;
    assert_eq!(wait_done(&fx, &s, &b, &sid).await, (300_000, NFS4_OK));
    let mut cb = offloads(&fake);
    // (Up to 10 s, as a loaded machine may be slow to run the callback.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cb.is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(millis(1)).await;
        cb = offloads(&fake);
    }
    assert_eq!(cb.len(), 1, "one CB_OFFLOAD");
    assert_eq!(cb[0].coa_stateid, sid);
    assert_eq!(cb[0].coa_fh, b.fh);
    match &cb[0].coa_offload_info {
        OffloadInfo4::NFS4_OK(w) => {
            assert_eq!(w.wr_count, 300_000);
            // Flushed before it was reported: no COMMIT needed.
            assert_eq!(w.wr_committed, StableHow4::FILE_SYNC4);
            assert_eq!(w.wr_writeverf, fx.n.write_verf.get());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(contents(&fx, &s, &b).await, src);
    // The result stays until the client forgets it; then it is unknown.
    assert_eq!(
        status_of(&fx, &s, &b, &sid).await,
        Ok((300_000, vec![NFS4_OK]))
    );
    let r = call42(&fx, &s, vec![putfh(&b.fh), offload_cancel(&sid)]).await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(status_of(&fx, &s, &b, &sid).await, Err(NFS4ERR_BAD_STATEID));
    assert_eq!(fx.n.state.copies_running(), 0);
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(m.server.copies_async_started.load(relaxed), 1);
    assert_eq!(m.server.copies_async_completed.load(relaxed), 1);
    assert_eq!(m.server.copies_async_cancelled.load(relaxed), 0);
    assert_eq!(m.server.copy_async_bytes.load(relaxed), 300_000);
}

#[tokio::test]
async fn offload_status_answers_when_the_callback_is_lost_or_impossible() {
    for answer in [Answer::Ignore, Answer::Closed] {
        let fx = async_fx(4);
        let (s, fake) = fx.client_with_back("c").await;
        let (a, b) = two_files_of(&fx, &s).await;
        let src = pattern(200_000, 8);
        fill(&fx, &s, &a, 0, &src).await;
        fake.answer(answer);
        let sid = started(&fx, &s, &a, &b, 0).await;
        assert_eq!(wait_done(&fx, &s, &b, &sid).await, (200_000, NFS4_OK));
        // However the callback fared, the answer is still there a while later.
        tokio::time::sleep(millis(20)).await;
        assert_eq!(
            status_of(&fx, &s, &b, &sid).await,
            Ok((200_000, vec![NFS4_OK])),
            "{answer:?}"
        );
        fake.answer(Answer::Ok);
        assert_eq!(contents(&fx, &s, &b).await, src);
    }
    // And for a client that never had a back channel.
    let fx = async_fx(4);
    let (s, a, b) = two_files(&fx).await;
    fill(&fx, &s, &a, 0, &pattern(100_000, 2)).await;
    let sid = started(&fx, &s, &a, &b, 0).await;
    assert_eq!(wait_done(&fx, &s, &b, &sid).await, (100_000, NFS4_OK));
    // Another client cannot see it.
    let other = fx.client("other").await;
    assert_eq!(
        status_of(&fx, &other, &b, &sid).await,
        Err(NFS4ERR_BAD_STATEID)
    );
}

#[tokio::test]
async fn offload_cancel_stops_a_copy_mid_way() {
    let (fx, m) = metered_async_fx();
    let (s, fake) = fx.client_with_back("c").await;
    let (a, b) = two_files_of(&fx, &s).await;
    let len = 4 << 20;
    fill(&fx, &s, &a, 0, &pattern(len, 6)).await;
    let sid = started(&fx, &s, &a, &b, 0).await;
    // Wait for some progress, then cancel.
    let mut seen = 0;
    for _ in 0..5000 {
        seen = status_of(&fx, &s, &b, &sid).await.unwrap().0;
        if seen > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(seen > 0 && seen < len as u64, "mid-copy: {seen}");
    let r = call42(&fx, &s, vec![putfh(&b.fh), offload_cancel(&sid)]).await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    assert_eq!(status_of(&fx, &s, &b, &sid).await, Err(NFS4ERR_BAD_STATEID));
    let r = call42(&fx, &s, vec![putfh(&b.fh), offload_cancel(&sid)]).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID, "forgotten");
    assert_eq!(fx.n.state.copies_running(), 0);
    // The copy stops at its next step: the file stops growing well short
    // of the whole, and no CB_OFFLOAD comes.
    tokio::time::sleep(millis(50)).await;
    let got = contents(&fx, &s, &b).await.len();
    tokio::time::sleep(millis(50)).await;
    assert_eq!(contents(&fx, &s, &b).await.len(), got);
    assert!(got < len, "stopped at {got} of {len}");
    assert!(offloads(&fake).is_empty());
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(m.server.copies_async_cancelled.load(relaxed), 1);
    assert_eq!(m.server.copies_async_completed.load(relaxed), 0);
}

#[tokio::test]
async fn past_the_bound_an_async_copy_is_done_at_once() {
    let fx = async_fx(1);
    let (s, a, b) = two_files(&fx).await;
    let c = fx.open(&s, "c", "o", BOTH, DENY_NONE).await.unwrap();
    let len = 2 << 20;
    let src = pattern(len, 5);
    fill(&fx, &s, &a, 0, &src).await;
    let sid = started(&fx, &s, &a, &b, 0).await;
    // The client's one background copy still runs: this one is done
    // synchronously, whole (less than one synchronous call's bound).
    assert_eq!(copied(&fx, &s, &a, &c, 0, 0, 0).await, Ok(len as u64));
    assert_eq!(wait_done(&fx, &s, &b, &sid).await, (len as u64, NFS4_OK));
    assert_eq!(contents(&fx, &s, &b).await, src);
    assert_eq!(contents(&fx, &s, &c).await, src);
    // Finished, it no longer counts: the next one runs in the background.
    started(&fx, &s, &a, &c, 0).await;
}

#[tokio::test]
async fn a_lapsed_clients_copies_are_cancelled() {
    let fx = async_fx(4);
    let (s, a, b) = two_files(&fx).await;
    fill(&fx, &s, &a, 0, &pattern(4 << 20, 1)).await;
    let sid = started(&fx, &s, &a, &b, 0).await;
    assert_eq!(fx.n.state.copies_running(), 1);
    fx.advance(secs(91));
    fx.reap().await;
    assert_eq!(fx.n.state.copies_running(), 0);
    assert_eq!(
        fx.n.state.copy_status(s.clientid, &sid),
        Err(NFS4ERR_BAD_STATEID)
    );
}

#[tokio::test]
async fn a_delegation_granted_mid_copy_is_recalled_before_the_next_step() {
    let fx = async_fx(4);
    // The copier writes with the anonymous stateid: it holds no open of
    // the destination, so another client may be given a read delegation
    // on it while the copy runs.
    let s = fx.client("copier").await;
    let a = fx.open(&s, "a", "o", BOTH, DENY_NONE).await.unwrap();
    // Large enough (2,048 steps of 16 KiB) that the copy is still running
    // when the reader's OPEN is granted its delegation: at 4 MiB it had
    // sometimes finished first, and nothing was left to recall.
    let len = 32 << 20;
    let src = pattern(len, 12);
    fill(&fx, &s, &a, 0, &src).await;
    let b = fx.open(&s, "b", "o", BOTH, DENY_NONE).await.unwrap();
    let r = call42(&fx, &s, vec![putfh(&b.fh), close_op(0, &b.stateid)]).await;
    assert_eq!(r.status, NFS4_OK);
    let anon = super::super::compound::ANONYMOUS;
    let op = copy_op(&a.stateid, &anon, 0, 0, 0);
    let r = from_to(&fx, &s, &a, &b, op).await;
    let Some(NfsResop4::OP_COPY(Copy4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("COPY: {:?}", statuses(&r));
    };
    let sid = ok.cr_response.wr_callback_id[0].clone();
    let (reader, fake) = fx.client_with_back("reader").await;
    let o = fx
        .open(&reader, "b", "r", OPEN4_SHARE_ACCESS_READ, DENY_NONE)
        .await
        .unwrap();
    let OpenDelegation4::OPEN_DELEGATE_READ(d) = &o.delegation else {
        panic!("no delegation: {:?}", o.delegation);
    };
    let recalled = || {
        fake.compounds()
            .iter()
            .flat_map(|c| c.argarray.iter())
            .any(|op| matches!(op, NfsCbArgop4::OP_CB_RECALL(r) if r.stateid == d.stateid))
    };
    // (Up to 10 s: the copy's next step runs on the blocking pool, which
    // a loaded machine may not schedule within the first second.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !recalled() && std::time::Instant::now() < deadline {
        tokio::time::sleep(millis(1)).await;
    }
    assert!(recalled(), "CB_RECALL before the copy writes on");
    // The copy waits while the delegation is out.
    tokio::time::sleep(millis(30)).await;
    let (held, done) = status_of(&fx, &s, &b, &sid).await.unwrap();
    assert!(done.is_empty());
    tokio::time::sleep(millis(250)).await;
    assert_eq!(status_of(&fx, &s, &b, &sid).await, Ok((held, vec![])));
    let r = fx
        .call(&reader, vec![putfh(&o.fh), delegreturn_op(&d.stateid)])
        .await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(wait_done(&fx, &s, &b, &sid).await, (len as u64, NFS4_OK));
    let closed = Opened {
        stateid: anon,
        ..b.clone()
    };
    assert_eq!(contents(&fx, &s, &closed).await, src);
}
