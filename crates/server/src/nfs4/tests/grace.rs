//! Grace after a restart and the RECLAIM_COMPLETE rules (RFC 8881 §8.4.2,
//! §18.51.3), on the manual clock. The restart is in-process ([`Fx::restart`]):
//! same files, handle key and recovery record, new client table.

use super::*;
use NfsLockType4::*;

/// A client that held an open and a lock on `f` before the server died;
/// the handle of `f`.
async fn client_with_state(fx: &Fx, owner_name: &str, verifier: u64) -> NfsFh4 {
    let a = fx.reclaiming_client(owner_name, verifier).await;
    assert_eq!(fx.call(&a, vec![reclaim_complete()]).await.status, NFS4_OK);
    let oa = fx.open(&a, "f", "open-a", BOTH, DENY_NONE).await.unwrap();
    fx.new_write_lock(&a, &oa.fh, &oa.stateid, (0, 10), "lock-a")
        .await
        .expect("LOCK");
    oa.fh
}

/// A server on which `owner_name` (with `verifier`) held an open and a
/// lock, restarted with a grace period of `grace_secs` seconds; the
/// handle of the file it held.
async fn restarted_after(owner_name: &str, verifier: u64, grace_secs: u64) -> (Fx, NfsFh4) {
    let mut fx = Fx::new(Nfs4Config::default());
    let fh = client_with_state(&fx, owner_name, verifier).await;
    fx.restart(cfg(90, grace_secs));
    (fx, fh)
}

/// A new OPEN (of "g" by "open-n") of the client that came after the restart.
async fn open_g(fx: &Fx, n: &Sess) -> Result<Opened, Nfsstat4> {
    fx.open(n, "g", "open-n", BOTH, DENY_NONE).await
}

/// A new OPEN (of "h" by "open-h") of the client that survived.
async fn open_h(fx: &Fx, s: &Sess) -> Result<Opened, Nfsstat4> {
    fx.open(s, "h", "open-h", BOTH, DENY_NONE).await
}

/// PUTFH and LOCK of 10 bytes from `offset` for a new lock owner from
/// open `open_sid`, reclaiming or not.
fn write_lock(
    fh: &NfsFh4,
    open_sid: &Stateid4,
    lock_owner: StateOwner4,
    reclaim: bool,
    offset: u64,
) -> Vec<NfsArgop4> {
    let locker = new_lock_owner(open_sid, lock_owner);
    vec![putfh(fh), lock_args(WRITE_LT, reclaim, offset, 10, locker)]
}

fn close(fh: &NfsFh4, sid: &Stateid4) -> Vec<NfsArgop4> {
    vec![putfh(fh), close_op(0, sid)]
}

fn reclaim_open(clientid: u64) -> NfsArgop4 {
    open_args(
        0,
        owner(clientid, "open-a"),
        BOTH,
        DENY_NONE,
        nocreate(),
        claim_previous(),
    )
}

/// Was `grace_ends_when_its_time_is_up` end to end (grace 2 s, sleep 2.3 s).
#[tokio::test]
async fn grace_ends_when_its_time_is_up() {
    let (fx, _) = restarted_after("gone-for-good", 7, 2).await;
    let n = fx.client("n").await;
    assert_eq!(open_g(&fx, &n).await.unwrap_err(), NFS4ERR_GRACE);
    // The recorded client never comes back.
    fx.pass(millis(2300), &[&n]).await;
    let og = open_g(&fx, &n)
        .await
        .expect("normal OPEN after the grace period");
    assert_eq!(
        fx.call(&n, close(&og.fh, &og.stateid)).await.status,
        NFS4_OK
    );
}

/// Grace lasts its length to the millisecond, and a recorded client that
/// comes back after it may no longer reclaim.
#[tokio::test]
async fn grace_lasts_its_length_then_reclaims_get_no_grace() {
    let (fx, fh) = restarted_after("late", 7, 5).await;
    let n = fx.client("n").await;
    fx.advance(millis(4999));
    assert_eq!(open_g(&fx, &n).await.unwrap_err(), NFS4ERR_GRACE);
    fx.advance(millis(1));
    open_g(&fx, &n).await.expect("OPEN once grace is over");
    let a = fx.reclaiming_client("late", 7).await;
    let r = fx
        .call(&a, vec![putfh(&fh), reclaim_open(a.clientid)])
        .await;
    assert_eq!(r.status, NFS4ERR_NO_GRACE, "{:?}", statuses(&r));
}

/// The in-process twin of `reclaim_after_restart_in_grace` (which stays
/// end to end for the real restart): who may reclaim, what is refused
/// while grace lasts, and RECLAIM_COMPLETE of the last recorded client
/// ending it at once.
#[tokio::test]
async fn reclaim_in_grace_and_refusals() {
    let (fx, fh) = restarted_after("reclaimer", 0x1234, 5).await;

    // A new client may not create state during grace.
    let n = fx.client("n").await;
    assert_eq!(open_g(&fx, &n).await.unwrap_err(), NFS4ERR_GRACE);
    // A client the server never recorded cannot reclaim (RECLAIM_BAD, or
    // NO_GRACE: both are right, RFC 8881 §18.16.3 / §15.1.9).
    let u = fx.reclaiming_client("unknown", 1).await;
    let r = fx
        .call(&u, vec![putfh(&fh), reclaim_open(u.clientid)])
        .await;
    assert!(
        matches!(r.status, NFS4ERR_RECLAIM_BAD | NFS4ERR_NO_GRACE),
        "{:?}",
        r.status
    );
    // The recorded client, same owner and verifier, reclaims its open and lock.
    let a = fx.reclaiming_client("reclaimer", 0x1234).await;
    let r = fx
        .call(&a, vec![putfh(&fh), reclaim_open(a.clientid)])
        .await;
    let NfsResop4::OP_OPEN(Open4res::NFS4_OK(o)) = &r.resarray[2] else {
        panic!("OPEN CLAIM_PREVIOUS: {:?}", statuses(&r))
    };
    let r = fx
        .call(
            &a,
            write_lock(&fh, &o.stateid, owner(a.clientid, "lock-a"), true, 0),
        )
        .await;
    assert_eq!(r.status, NFS4_OK, "LOCK reclaim: {:?}", statuses(&r));
    // Not a reclaim: still refused while grace lasts.
    let r = fx
        .call(
            &a,
            vec![
                putfh(&fh),
                open_args(
                    0,
                    owner(a.clientid, "other"),
                    BOTH,
                    DENY_NONE,
                    nocreate(),
                    OpenClaim4::CLAIM_FH,
                ),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_GRACE);
    // A reclaim LOCK with reclaim false is new state too.
    let r = fx
        .call(
            &a,
            write_lock(&fh, &o.stateid, owner(a.clientid, "lock-a2"), false, 20),
        )
        .await;
    assert_eq!(r.status, NFS4ERR_GRACE);

    // The last recorded client is done: grace ends at once.
    assert_eq!(fx.call(&a, vec![reclaim_complete()]).await.status, NFS4_OK);
    assert_eq!(
        fx.call(&a, vec![reclaim_complete()]).await.status,
        NFS4ERR_COMPLETE_ALREADY
    );
    // Its own reclaims are over too (RFC 8881 §18.51.3).
    let r = fx
        .call(&a, vec![putfh(&fh), reclaim_open(a.clientid)])
        .await;
    assert_eq!(r.status, NFS4ERR_NO_GRACE);
    let og = open_g(&fx, &n).await.expect("normal OPEN after grace");
    assert_eq!(
        fx.call(&n, close(&og.fh, &og.stateid)).await.status,
        NFS4_OK
    );
    // The reclaimed lock holds against the new client.
    fx.open(&n, "f", "open-n", BOTH, DENY_NONE).await.unwrap();
    let r = fx
        .call(
            &n,
            vec![
                putfh(&fh),
                NfsArgop4::OP_LOCKT(Lockt4args {
                    locktype: WRITE_LT,
                    offset: 5,
                    length: 1,
                    owner: owner(n.clientid, "lock-n"),
                }),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_DENIED, "the reclaimed lock is held");
    // And reclaiming is over for everyone.
    let r = fx
        .call(&u, vec![putfh(&fh), reclaim_open(u.clientid)])
        .await;
    assert_eq!(r.status, NFS4ERR_NO_GRACE);
}

/// RFC 8881 §18.51.3: a client with a new client ID gets GRACE for new
/// locking state until its RECLAIM_COMPLETE, even when the server is not
/// in a grace period; §16.2.3.1.2: PUTFH makes the current stateid all
/// zeros. Was `reclaim_complete_before_new_state_and_current_stateid_after_putfh`
/// end to end.
#[tokio::test]
async fn reclaim_complete_before_new_state_and_current_stateid_after_putfh() {
    let fx = Fx::new(Nfs4Config::default());
    let s = fx.reclaiming_client("fresh", 1).await;
    assert_eq!(
        fx.open(&s, "f", "open-a", BOTH, DENY_NONE)
            .await
            .unwrap_err(),
        NFS4ERR_GRACE
    );
    assert_eq!(fx.call(&s, vec![reclaim_complete()]).await.status, NFS4_OK);
    let o = fx
        .open(&s, "f", "open-a", BOTH, DENY_NONE)
        .await
        .expect("OPEN after RECLAIM_COMPLETE");
    // PUTFH, CLOSE(current stateid): the current stateid is (0, 0) there,
    // which names no open.
    let current = Stateid4 {
        seqid: 1,
        other: [0; 12],
    };
    let r = fx.call(&s, close(&o.fh, &current)).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    assert_eq!(
        fx.call(&s, close(&o.fh, &o.stateid)).await.status,
        NFS4_OK,
        "CLOSE by its stateid"
    );
}

/// Without a recorded client there is no grace period at all.
#[tokio::test]
async fn no_grace_without_recorded_clients() {
    let mut fx = Fx::new(Nfs4Config::default());
    fx.restart(cfg(90, 90));
    let n = fx.client("n").await;
    open_g(&fx, &n).await.expect("OPEN at once");
}

/// After a restart with NFSv4 state to reclaim, once every recorded client
/// has reclaimed, new OPENs go ahead but new LOCKs wait for the end of the
/// server's grace period, shared with NLM, whose clients may still be
/// reclaiming (the crash cycles found an NFSv4 client granted a range an
/// NLM client held before the crash and had yet to reclaim).
#[tokio::test]
async fn new_locks_wait_for_the_shared_grace_after_nfsv4_reclaims() {
    let (fx, fh) = restarted_after("reclaimer", 0x1234, 5).await;
    let a = fx.reclaiming_client("reclaimer", 0x1234).await;
    assert_eq!(fx.call(&a, vec![reclaim_complete()]).await.status, NFS4_OK);
    let n = fx.client("n").await;
    let o = fx
        .open(&n, "f", "open-n", BOTH, DENY_NONE)
        .await
        .expect("OPEN: NFSv4's own grace is over");
    let lock = || write_lock(&fh, &o.stateid, owner(n.clientid, "lock-n"), false, 100);
    assert_eq!(fx.call(&n, lock()).await.status, NFS4ERR_GRACE);
    fx.advance(millis(4999));
    assert_eq!(fx.call(&n, lock()).await.status, NFS4ERR_GRACE);
    fx.advance(millis(1));
    assert_eq!(fx.call(&n, lock()).await.status, NFS4_OK);
}

/// A surviving cluster head re-enters grace when another head fails: the
/// failed head's client reclaims here; this head's own established state
/// keeps working; new opens and locks wait (NFS4ERR_GRACE) until the
/// cluster-wide grace is lifted; reclaims wait (NFS4ERR_DELAY) until
/// every head enforces the grace.
#[tokio::test]
async fn a_surviving_head_reenters_grace_for_a_failed_heads_clients() {
    use crate::nfs4::clock::Clock;
    use crate::nfs4::state::ClusterHold;
    let fx = Fx::new(Nfs4Config::default());
    let s = fx.client("survivor").await;
    let os = fx.open(&s, "f", "open-s", BOTH, DENY_NONE).await.unwrap();
    let ls = fx
        .new_write_lock(&s, &os.fh, &os.stateid, (0, 10), "lock-s")
        .await
        .expect("LOCK");
    let og = fx.open(&s, "g", "open-g", BOTH, DENY_NONE).await.unwrap();
    assert_eq!(
        fx.call(&s, close(&og.fh, &og.stateid)).await.status,
        NFS4_OK
    );

    // Another head failed: its client "moved" may reclaim here.
    let now = fx.clock.now();
    fx.n.state
        .join_grace([name("moved")].into(), Grace::new(now, secs(90)));
    fx.n.state.set_cluster_grace(Some(ClusterHold::Starting));
    assert!(!fx.n.state.local_recovery_done(now));

    // Reclaims wait until every head enforces the grace.
    let m = fx.reclaiming_client("moved", 9).await;
    let r = fx
        .call(&m, vec![putfh(&og.fh), reclaim_open(m.clientid)])
        .await;
    assert_eq!(r.status, NFS4ERR_DELAY, "{:?}", statuses(&r));
    fx.n.state.set_cluster_grace(Some(ClusterHold::Reclaiming));
    let r = fx
        .call(&m, vec![putfh(&og.fh), reclaim_open(m.clientid)])
        .await;
    assert_eq!(r.status, NFS4_OK, "reclaim here: {:?}", statuses(&r));

    // Established state works: the lock is released, the open closed.
    let r = fx
        .call(&s, vec![putfh(&os.fh), locku_op(WRITE_LT, 0, &ls, 0, 10)])
        .await;
    assert_eq!(r.status, NFS4_OK, "LOCKU in grace: {:?}", statuses(&r));
    // New state waits.
    assert_eq!(open_h(&fx, &s).await.unwrap_err(), NFS4ERR_GRACE);
    assert_eq!(
        fx.new_write_lock(&s, &os.fh, &os.stateid, (0, 10), "lock-s2")
            .await
            .unwrap_err(),
        NFS4ERR_GRACE
    );
    assert_eq!(
        fx.call(&s, close(&os.fh, &os.stateid)).await.status,
        NFS4_OK
    );

    // The moved client is done: this head's recovery is over, but the
    // cluster's grace holds until it is lifted.
    assert_eq!(fx.call(&m, vec![reclaim_complete()]).await.status, NFS4_OK);
    assert!(fx.n.state.local_recovery_done(fx.clock.now()));
    assert!(fx.n.state.reclaimed_here(&name("moved")));
    assert_eq!(open_h(&fx, &s).await.unwrap_err(), NFS4ERR_GRACE);
    fx.n.state.set_cluster_grace(None);
    open_h(&fx, &s).await.expect("OPEN after the cluster grace");
}
