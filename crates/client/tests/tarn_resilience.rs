//! A session over a reconnecting channel against a real `tarn serve`,
//! through an in-test TCP proxy that can cut a connection at a chosen
//! moment and can be pointed at a restarted server:
//!
//! - a reply lost with its connection: the COMPOUND is sent again on a
//!   new connection, bound to the session first, and the server answers
//!   it from its slot (a REMOVE is not run twice);
//! - a server killed and started again: the session is made anew, the open
//!   file and its lock are reclaimed, and the stateids the caller holds
//!   keep working.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_resilience

mod harness;
use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use rpc::client::ChannelOptions;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use test_support::proxy::Proxy;

async fn proxy(target: SocketAddr) -> Proxy {
    Proxy::start(target).await
}

async fn channel_session(addr: SocketAddr) -> Arc<Session> {
    channel_session_with(addr, 1, false).await
}

async fn channel_session_with(addr: SocketAddr, nconnect: usize, callbacks: bool) -> Arc<Session> {
    let o = SessionOptions {
        callbacks,
        ..SessionOptions::default()
    };
    reconnecting_session(addr, nconnect, &o).await
}

/// A proxy to `addr` and a session through it ([`channel_session_with`]).
async fn through_proxy(
    addr: SocketAddr,
    nconnect: usize,
    callbacks: bool,
) -> (Proxy, Arc<Session>) {
    let p = proxy(addr).await;
    let s = channel_session_with(p.addr, nconnect, callbacks).await;
    (p, s)
}

async fn root(s: &Session) -> NfsFh4 {
    s.lookup_path("/").await.unwrap()
}

/// Creates `name` in `dir`: an OPEN that makes it, and its CLOSE.
async fn create_closed(s: &Session, dir: &NfsFh4, name: &str) {
    let (sid, fh) = s
        .open(dir, name, Some(0o644), OPEN4_SHARE_ACCESS_WRITE)
        .await
        .unwrap();
    s.close(&fh, &sid).await.unwrap();
}

/// Creates "gone" in the export's root and REMOVEs it through `p` cut:
/// the REMOVE runs and its reply is lost with the connection, so it must
/// be answered on the next one (`how`). The root's handle.
async fn remove_across_a_cut(p: &Proxy, s: &Session, how: &str) -> NfsFh4 {
    let dir = root(s).await;
    create_closed(s, &dir, "gone").await;
    p.cut.store(true, Ordering::SeqCst);
    s.remove(&dir, "gone").await.expect(how);
    dir
}

#[test]
fn a_lost_reply_is_answered_from_the_slot_after_a_reconnect() {
    with_export(|addr, export| async move {
        let (p, s) = through_proxy(addr, 1, false).await;
        let dir = remove_across_a_cut(&p, &s, "REMOVE answered from the slot").await;
        assert!(!export.join("gone").exists());
        let ch = s.conn().channel().unwrap();
        assert_eq!(ch.reconnects(), 1);
        assert_eq!(ch.retransmits(), 1);
        assert_eq!(p.accepted.load(Ordering::SeqCst), 2);
        assert_eq!(s.recoveries(), 0, "the same session");
        // And a REMOVE of what is gone says so: the cache answered once.
        assert_eq!(err(s.remove(&dir, "gone").await), Nfsstat4::NFS4ERR_NOENT);
    });
}

#[test]
fn a_recall_reaches_the_client_over_a_replaced_connection() {
    with_server(|addr| async move {
        let (p, a) = through_proxy(addr, 1, true).await;
        assert!(a.back_channel().is_some());
        let dir = root(&a).await;
        create_closed(&a, &dir, "f").await;
        // The connection carrying both channels goes; its replacement is
        // bound to the session for both.
        p.cut.store(true, Ordering::SeqCst);
        a.lookup_path("/f").await.unwrap();
        assert_eq!(a.conn().channel().unwrap().reconnects(), 1);

        let (sid, fh) = a
            .open(&dir, "f", None, OPEN4_SHARE_ACCESS_READ)
            .await
            .unwrap();
        assert!(a.delegations().get(&fh).is_some(), "a read delegation");
        let b = session(addr).await;
        let t0 = std::time::Instant::now();
        let (bsid, bfh) = b
            .open(&dir, "f", None, OPEN4_SHARE_ACCESS_WRITE)
            .await
            .expect("B's OPEN once A returned the delegation");
        assert_eq!(a.delegations().recalls_received(), 1, "CB_RECALL reached A");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "returned, not revoked"
        );
        b.close(&bfh, &bsid).await.unwrap();
        a.close(&fh, &sid).await.unwrap();
    });
}

#[test]
fn nconnect_spreads_a_session_over_its_connections() {
    with_export(|addr, export| async move {
        let (p, s) = through_proxy(addr, 4, false).await;
        assert_eq!(p.accepted.load(Ordering::SeqCst), 4);
        let dir = root(&s).await;
        let (sid, fh) = s
            .open(&dir, "f", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let data = bytes::Bytes::from(vec![7u8; 1 << 20]);
        let mut writes = tokio::task::JoinSet::new();
        for i in 0..16u64 {
            let (s, sid, fh, data) = (s.clone(), sid.clone(), fh.clone(), data.clone());
            writes.spawn(async move {
                s.write(&sid, &fh, i << 20, data, StableHow4::UNSTABLE4)
                    .await
                    .unwrap();
            });
        }
        writes.join_all().await;
        // One connection lost: the others go on, it is replaced.
        p.cut.store(true, Ordering::SeqCst);
        let mut reads = tokio::task::JoinSet::new();
        for i in 0..16u64 {
            let (s, sid, fh) = (s.clone(), sid.clone(), fh.clone());
            reads.spawn(async move { s.read(&sid, &fh, i << 20, 1 << 20).await.unwrap().data });
        }
        for d in reads.join_all().await {
            assert_eq!(d, data);
        }
        assert_eq!(p.accepted.load(Ordering::SeqCst), 5);
        s.close(&fh, &sid).await.unwrap();
        assert_eq!(std::fs::metadata(export.join("f")).unwrap().len(), 16 << 20);
    });
}

#[test]
fn open_and_lock_are_reclaimed_after_a_server_restart() {
    let mut t = Tarn::start(&["--grace", "10"]);
    // One runtime for the whole test: the proxy and the session live in it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let p = rt.block_on(proxy(t.addr));
    let s = rt.block_on(channel_session(p.addr));
    let (dir, sid, fh, lsid) = rt.block_on(async {
        let dir = root(&s).await;
        let (sid, fh, lsid) = kept_and_locked(&s, &dir, "lock granted").await;
        (dir, sid, fh, lsid)
    });
    assert_eq!(s.state_book().opens.len(), 1);
    assert_eq!(s.state_book().locks.len(), 1);

    t.restart(&["--grace", "10"]);
    *p.target.lock().unwrap() = t.addr;
    rt.block_on(async {
        // The caller's stateid still works: the session recovers first.
        write_sync(&s, &sid, &fh, 6, b" after")
            .await
            .expect("WRITE after the restart");
        assert_eq!(s.recoveries(), 1);
        assert_ne!(s.state_book().opens[0].stateid.other, sid.other);

        // Another client finds the lock held (reclaimed, not lost). New
        // locks wait out the whole grace period (NLM clients may still be
        // reclaiming), so it waits before it asks.
        let o = SessionOptions {
            grace_retry_for: Duration::from_secs(60),
            ..SessionOptions::default()
        };
        let other = session_with(t.addr, &o).await;
        let (osid, ofh) = other
            .open(&dir, "kept", None, OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let oowner = other.new_owner("lock");
        let locker = other.new_lock_owner(&osid, &oowner);
        let r = other
            .lock(&ofh, locker, NfsLockType4::WRITE_LT, 0, 10)
            .await
            .unwrap();
        assert!(r.is_err(), "the lock was reclaimed: {r:?}");
        other.close(&ofh, &osid).await.unwrap();

        s.locku(&fh, &lsid, NfsLockType4::WRITE_LT, 0, 100)
            .await
            .expect("LOCKU with the old lock stateid");
        s.close(&fh, &sid)
            .await
            .expect("CLOSE with the old stateid");
    });
    assert_eq!(
        std::fs::read(t.export.join("kept")).unwrap(),
        b"before after"
    );
}

#[test]
fn a_krb5i_call_resent_after_a_lost_reply_carries_a_new_gss_sequence_number() {
    let (_env, kdc) = kdc_with_ticket("resend", "10m");
    let kt = kdc.keytab.display().to_string();
    let t = Tarn::start(&["--sec", "krb5i", "--keytab", &kt]);
    run(async {
        let p = proxy(t.addr).await;
        let opts = ChannelOptions {
            min_backoff: Duration::from_millis(20),
            ..Default::default()
        };
        let conn = Nfs4Conn::connect_gss_channel(
            p.addr,
            GssService::Integrity,
            "nfs@localhost",
            RenewPolicy::default(),
            opts,
        )
        .await
        .expect("connect");
        let o = SessionOptions {
            callbacks: false,
            ..SessionOptions::default()
        };
        let s = Session::establish(conn, &o).await.expect("session");
        // The server would drop a sequence number it has seen: the resent
        // call is answered only because it carries a new one.
        let dir = remove_across_a_cut(&p, &s, "REMOVE resent under krb5i").await;
        let ch = s.conn().channel().unwrap();
        assert_eq!((ch.reconnects(), ch.retransmits()), (1, 1));
        assert_eq!(err(s.remove(&dir, "gone").await), Nfsstat4::NFS4ERR_NOENT);
    });
}
