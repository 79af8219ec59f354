//! Delegations end to end: Tarn's client against a real `tarn serve`,
//! over the NFSv4.1 back channel of the client's own connection.
//!
//! - A read delegation lets the client answer `stat` itself: 10,000 stats
//!   cost the server a handful of GETATTRs (read from its metrics endpoint).
//! - Another client's write open recalls it: that client gets
//!   NFS4ERR_DELAY, the holder gets CB_RECALL, returns the delegation, the
//!   writer proceeds and the former holder sees its data.
//! - A holder that ignores CB_RECALL loses the delegation after a lease;
//!   the writer proceeds, the holder's SEQUENCE says
//!   SEQ4_STATUS_RECALLABLE_STATE_REVOKED and TEST_STATEID/FREE_STATEID
//!   clear it.
//! - A process on the server writing the file directly recalls it too
//!   (the server's fanotify group; as root only).
//! - Write delegations and CB_GETATTR.
//! - OPEN by handle, and the hook that runs before a DELEGRETURN.
//!
//!   cargo build -p tarn && TARN_BIN=... cargo test -p client --test tarn_deleg -- --nocapture

mod harness;

use bytes::Bytes;
use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use std::time::{Duration, Instant};

/// A server with its metrics endpoint; (server, metrics address).
fn start(extra: &[&str]) -> (Tarn, String) {
    let maddr = format!("127.0.0.1:{}", testkdc::free_port());
    let mut args = vec!["--metrics", maddr.as_str()];
    args.extend_from_slice(extra);
    (Tarn::start(&args), maddr)
}

/// The server's count of NFSv4 GETATTR operations, from /metrics.
fn getattrs(maddr: &str) -> u64 {
    op_count(maddr, "GETATTR")
}

/// The server's count of one NFSv4 operation, from /metrics.
fn op_count(maddr: &str, op: &str) -> u64 {
    metrics(maddr)
        .lines()
        .filter(|l| {
            l.starts_with("tarn_op_calls_total{")
                && l.contains("program=\"nfs4op\"")
                && l.contains(&format!("op=\"{op}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Creates `name` in the export root holding `data`, through a client of
/// its own that closes it and goes away.
async fn make_file(addr: std::net::SocketAddr, name: &str, data: &[u8]) {
    let w = session(addr).await;
    let root = w.lookup_path("/").await.unwrap();
    let (sid, fh) = w
        .open(&root, name, Some(0o666), OPEN4_SHARE_ACCESS_BOTH)
        .await
        .unwrap();
    w.write(
        &sid,
        &fh,
        0,
        Bytes::copy_from_slice(data),
        StableHow4::FILE_SYNC4,
    )
    .await
    .unwrap();
    w.close(&fh, &sid).await.unwrap();
    w.destroy().await.unwrap();
}

/// OPEN for reading; the handle, open stateid and what was delegated.
async fn open_read(s: &Session, name: &str) -> (NfsFh4, Stateid4, Option<Delegation>) {
    let root = s.lookup_path("/").await.unwrap();
    let (sid, fh) = s
        .open(&root, name, None, OPEN4_SHARE_ACCESS_READ)
        .await
        .unwrap();
    let d = s.delegations().get(&fh);
    (fh, sid, d)
}

/// A client that sees NFS4ERR_DELAY itself instead of retrying.
fn no_retry() -> SessionOptions {
    SessionOptions {
        delay_retry_for: Duration::ZERO,
        ..SessionOptions::default()
    }
}

/// OPEN for writing by a client that does not retry: the first answer,
/// then retries until it succeeds; (first error if any, stateid, handle).
async fn open_write_counting_delays(
    b: &Session,
    name: &str,
) -> (Option<Nfsstat4>, Stateid4, NfsFh4) {
    let root = b.lookup_path("/").await.unwrap();
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match b.open(&root, name, None, OPEN4_SHARE_ACCESS_WRITE).await {
            Ok((sid, fh)) => return (first, sid, fh),
            Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_DELAY) => {
                first.get_or_insert(Nfsstat4::NFS4ERR_DELAY);
                assert!(Instant::now() < deadline, "still NFS4ERR_DELAY after 60 s");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("OPEN for write: {e}"),
        }
    }
}

#[test]
fn read_delegation_answers_stat_locally() {
    let (t, maddr) = start(&[]);
    run(async {
        make_file(t.addr, "f", b"hello").await;
        let a = session(t.addr).await;
        assert!(a.back_channel().is_some(), "the session has a back channel");
        let (fh, _, d) = open_read(&a, "f").await;
        let d = d.expect("a read delegation on a read-only open");
        assert_eq!(d.kind, DelegKind::Read);
        let before = getattrs(&maddr);
        let t0 = Instant::now();
        let mut last = None;
        for _ in 0..10_000 {
            let st = a.stat(&fh).await.unwrap();
            assert_eq!(st.size, Some(5));
            last = Some(st);
        }
        let took = t0.elapsed();
        let after = getattrs(&maddr);
        println!(
            "10000 stats under a read delegation: {:?} ({:.2} µs each), server GETATTRs {} -> {}",
            took,
            took.as_secs_f64() * 1e6 / 10_000.0,
            before,
            after
        );
        assert!(after - before <= 3, "GETATTRs {before} -> {after}");
        assert_eq!(last.unwrap().ftype, Some(NfsFtype4::NF4REG));
        // Without a delegation every stat is a GETATTR.
        let b = session_with(
            t.addr,
            &SessionOptions {
                callbacks: false,
                ..SessionOptions::default()
            },
        )
        .await;
        let (fh_b, _, d) = open_read(&b, "f").await;
        assert!(d.is_none(), "no back channel, no delegation");
        let before = getattrs(&maddr);
        for _ in 0..20 {
            b.stat(&fh_b).await.unwrap();
        }
        assert_eq!(getattrs(&maddr) - before, 20);
    });
}

/// A client that opened `name` (made holding `data`) for reading and
/// holds a read delegation of it, under which it knows the size: its
/// session, the file's handle and the open's stateid.
async fn delegated_reader(
    addr: std::net::SocketAddr,
    name: &str,
    data: &[u8],
) -> (std::sync::Arc<Session>, NfsFh4, Stateid4) {
    make_file(addr, name, data).await;
    let a = session(addr).await;
    let (fh, open_a, d) = open_read(&a, name).await;
    d.expect("a read delegation");
    assert_eq!(a.stat(&fh).await.unwrap().size, Some(data.len() as u64));
    (a, fh, open_a)
}

#[test]
fn conflicting_open_recalls_and_the_holder_returns() {
    let (t, maddr) = start(&[]);
    run(async {
        let (a, fh, open_a) = delegated_reader(t.addr, "f", b"old data").await;

        let b = session_with(t.addr, &no_retry()).await;
        let t0 = Instant::now();
        let (first, sid_b, fh_b) = open_write_counting_delays(&b, "f").await;
        println!(
            "B's OPEN for write: first {first:?}, done after {:?}",
            t0.elapsed()
        );
        assert_eq!(
            first,
            Some(Nfsstat4::NFS4ERR_DELAY),
            "the delegation stands in the way until returned"
        );
        assert_eq!(a.delegations().recalls_received(), 1, "CB_RECALL reached A");
        assert!(a.delegations().is_empty(), "A gave it back");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "returned, not revoked"
        );

        write_sync(&b, &sid_b, &fh_b, 0, b"new data from B")
            .await
            .unwrap();
        let before = getattrs(&maddr);
        let st = a.stat(&fh).await.unwrap();
        assert_eq!(getattrs(&maddr), before + 1, "A's stat went to the server");
        assert_eq!(st.size, Some(15));
        let r = a.read(&open_a, &fh, 0, 100).await.unwrap();
        assert_eq!(&r.data[..], b"new data from B");
        b.close(&fh_b, &sid_b).await.unwrap();
        a.close(&fh, &open_a).await.unwrap();
        a.destroy().await.unwrap();
        b.destroy().await.unwrap();
    });
}

#[test]
fn a_local_change_on_the_server_recalls_the_delegation() {
    // The server hears of local changes through fanotify, which needs root.
    if effective_uid() != 0 {
        eprintln!("skipped: the server follows local changes only as root (fanotify)");
        return;
    }
    let (t, maddr) = start(&[]);
    run(async {
        let (a, fh, open_a) = delegated_reader(t.addr, "f", b"old").await;
        // A process on the server (this test) writes the file directly.
        let t0 = Instant::now();
        std::fs::write(t.export.join("f"), b"changed locally").unwrap();
        while a.delegations().recalls_received() == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no CB_RECALL 10 s after a local write"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!("local write to CB_RECALL: {:?}", t0.elapsed());
        while !a.delegations().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before = getattrs(&maddr);
        assert_eq!(a.stat(&fh).await.unwrap().size, Some(15));
        assert_eq!(getattrs(&maddr), before + 1, "A's stat went to the server");
        let r = a.read(&open_a, &fh, 0, 100).await.unwrap();
        assert_eq!(&r.data[..], b"changed locally");
        // Opened again at once: no new delegation on a file just recalled.
        let (_, open2, again) = open_read(&a, "f").await;
        assert!(again.is_none(), "no delegation right after a recall");
        a.close(&fh, &open2).await.unwrap();
        a.destroy().await.unwrap();
    });
}

/// The effective uid, from /proc.
fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// A client that holds a read delegation of `name` (made holding
/// `data`) and will not return it when recalled, renewing its lease every
/// `renew_ms`: its session, the renewal, the file's handle and the
/// delegation's stateid.
async fn deaf_reader(
    addr: std::net::SocketAddr,
    name: &str,
    data: &[u8],
    renew_ms: u64,
) -> (
    std::sync::Arc<Session>,
    tokio::task::JoinHandle<()>,
    NfsFh4,
    Stateid4,
) {
    make_file(addr, name, data).await;
    let a = session(addr).await;
    a.delegations().set_ignore_recalls(true);
    let renew = a.spawn_renewal(Duration::from_millis(renew_ms));
    let (fh, _, d) = open_read(&a, name).await;
    let deleg = d.expect("a read delegation").stateid;
    (a, renew, fh, deleg)
}

/// Whether a renewal (SEQUENCE) of `s` reports
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED; and all its status flags.
async fn revoked_flag(s: &Session) -> (bool, u32) {
    let flags = s.renew().await.unwrap();
    (flags & SEQ4_STATUS_RECALLABLE_STATE_REVOKED != 0, flags)
}

/// TEST_STATEID of `sid` alone: its status, as a list of one.
async fn test_stateid(s: &Session, sid: &Stateid4) -> Vec<Nfsstat4> {
    s.test_stateids(std::slice::from_ref(sid)).await.unwrap()
}

#[test]
fn ignored_recall_is_revoked_after_a_lease() {
    const LEASE: u64 = 3;
    let (t, _) = start(&["--lease-time", "3"]);
    run(async {
        let (a, _renew, fh, deleg) = deaf_reader(t.addr, "f", b"x", 500).await;

        let b = session_with(t.addr, &no_retry()).await;
        let _renew_b = b.spawn_renewal(Duration::from_millis(500));
        let t0 = Instant::now();
        let (first, sid_b, fh_b) = open_write_counting_delays(&b, "f").await;
        let waited = t0.elapsed();
        println!("B's OPEN for write proceeded after {waited:?} (lease {LEASE} s)");
        assert_eq!(first, Some(Nfsstat4::NFS4ERR_DELAY));
        assert!(
            waited >= Duration::from_secs(LEASE) - Duration::from_millis(200),
            "revoked only after a lease: {waited:?}"
        );
        assert_eq!(a.delegations().recalls_received(), 1);
        assert!(a.delegations().get(&fh).is_some(), "A kept it, as told");
        write_sync(&b, &sid_b, &fh_b, 0, b"B was here")
            .await
            .unwrap();

        let (revoked, flags) = revoked_flag(&a).await;
        assert!(revoked, "flags {flags:#x}");
        assert_eq!(
            test_stateid(&a, &deleg).await,
            [Nfsstat4::NFS4ERR_DELEG_REVOKED]
        );
        // stat sees the flag, frees the revoked delegation and asks the server.
        let st = a.stat(&fh).await.unwrap();
        assert_eq!(st.size, Some(10), "B's data, not A's stale cache");
        assert!(a.delegations().is_empty());
        let (revoked, flags) = revoked_flag(&a).await;
        assert!(!revoked, "freed: flags {flags:#x}");
        assert_eq!(
            test_stateid(&a, &deleg).await,
            [Nfsstat4::NFS4ERR_BAD_STATEID],
            "gone after FREE_STATEID"
        );
        b.close(&fh_b, &sid_b).await.unwrap();
    });
}

#[test]
fn free_stateid_of_a_revoked_delegation_by_hand() {
    let (t, _) = start(&["--lease-time", "2"]);
    run(async {
        let (a, _renew, fh, deleg) = deaf_reader(t.addr, "g", b"y", 400).await;
        let b = session(t.addr).await;
        let _renew_b = b.spawn_renewal(Duration::from_millis(400));
        let root = b.lookup_path("/").await.unwrap();
        // B's own retries carry it past the revocation.
        let (sid_b, fh_b) = b
            .open(&root, "g", None, OPEN4_SHARE_ACCESS_WRITE)
            .await
            .unwrap();
        assert!(revoked_flag(&a).await.0);
        a.free_stateid(&deleg).await.unwrap();
        assert!(!revoked_flag(&a).await.0);
        // A DELEGRETURN now is too late; the client forgets it either way.
        assert!(a.delegreturn(&fh).await.unwrap());
        b.close(&fh_b, &sid_b).await.unwrap();
    });
}

#[test]
fn write_delegation_answers_cb_getattr_and_flushes_on_recall() {
    with_server(|addr| async move {
        make_file(addr, "w", b"").await;
        let a = session(addr).await;
        let root = a.lookup_path("/").await.unwrap();
        let owner = a.open_owner();
        let o = a
            .open_with(
                &owner,
                &root,
                "w",
                Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
                OPEN4_SHARE_DENY_NONE,
            )
            .await
            .unwrap();
        let d = a.delegations().get(&o.fh).expect("a write delegation");
        assert_eq!(d.kind, DelegKind::Write);
        let change0 = a.stat(&o.fh).await.unwrap().change.unwrap();
        write_at(
            &a,
            &o.stateid,
            &o.fh,
            0,
            b"written under a write delegation",
            StableHow4::UNSTABLE4,
        )
        .await
        .unwrap();
        let local = a.stat(&o.fh).await.unwrap();
        assert_eq!(local.size, Some(32), "A's own size");
        assert!(local.change.unwrap() > change0);

        // B asks the server, which asks A (CB_GETATTR).
        let b = session(addr).await;
        let fh_b = b.lookup(&root, "w").await.unwrap();
        let seen = b.attrs(&fh_b, &[FATTR4_SIZE, FATTR4_CHANGE]).await.unwrap();
        assert_eq!(seen.size, Some(32), "the size A reported");

        // B opens for reading: A flushes (COMMIT), returns, B reads A's data.
        let (sid_b, fh_b) = b
            .open(&root, "w", None, OPEN4_SHARE_ACCESS_READ)
            .await
            .unwrap();
        assert!(a.delegations().is_empty());
        let r = b.read(&sid_b, &fh_b, 0, 100).await.unwrap();
        assert_eq!(&r.data[..], b"written under a write delegation");
    });
}

/// OPEN by handle (CLAIM_FH) with a GETATTR in the same COMPOUND gets a
/// write delegation with its attributes; on recall the before-return hook
/// runs before the DELEGRETURN, and what it writes then (data a layer
/// above had buffered) is what the recalling client reads.
#[test]
fn open_by_handle_and_the_hook_before_return() {
    with_server(|addr| async move {
        make_file(addr, "h", b"").await;
        let a = std::sync::Arc::new(session(addr).await);
        let root = a.lookup_path("/").await.unwrap();
        let fh = a.lookup(&root, "h").await.unwrap();
        let owner = a.new_owner("open");
        let (o, attrs) = a
            .open_fh(&owner, &fh, OPEN4_SHARE_ACCESS_BOTH, Some(&[FATTR4_SIZE]))
            .await
            .unwrap();
        assert_eq!(attrs.unwrap().size, Some(0));
        let d = a.delegations().get(&fh).expect("a write delegation");
        assert_eq!(d.kind, DelegKind::Write);
        // The hook writes (FILE_SYNC) with the open stateid and says all
        // is stable; it sees the delegation already out of the table.
        let (a2, sid, fh2) = (a.clone(), o.stateid.clone(), fh.clone());
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let c2 = calls.clone();
        a.delegations()
            .set_before_return(Some(std::sync::Arc::new(move |f: NfsFh4| {
                let (a, sid, fh, calls) = (a2.clone(), sid.clone(), fh2.clone(), c2.clone());
                Box::pin(async move {
                    assert_eq!(f, fh);
                    assert!(a.delegations().get(&fh).is_none());
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    write_sync(&a, &sid, &fh, 0, b"buffered above")
                        .await
                        .is_ok()
                })
            })));
        let b = session(addr).await;
        let (sid_b, fh_b) = b
            .open(&root, "h", None, OPEN4_SHARE_ACCESS_READ)
            .await
            .unwrap();
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        // B may proceed before A has read its DELEGRETURN's reply.
        let t0 = Instant::now();
        while a.delegations().returned() == 0 && t0.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(a.delegations().returned(), 1);
        assert_eq!(a.delegations().recalls_received(), 1);
        let r = b.read(&sid_b, &fh_b, 0, 100).await.unwrap();
        assert_eq!(&r.data[..], b"buffered above");
        // The hook holds the session: break the cycle.
        a.delegations().set_before_return(None);
    });
}
