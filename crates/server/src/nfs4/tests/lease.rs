//! Leases on the manual clock (NFSv4.1): expiry revokes state for a
//! conflicting client and says so in SEQUENCE's flags, a lapsed client is
//! kept (courteous) until someone needs its state, renewal by SEQUENCE
//! keeps a lease alive, and a client silent for ten leases is forgotten.
//! Moved from `crates/client/tests/tarn_errors.rs`, which slept through
//! real leases.

use super::*;
use NfsLockType4::*;

/// SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED (RFC 8881 §18.46.3).
const ALL_STATE_REVOKED: u32 = 0x8;

/// A (holding a WRITE lock on `f`, bytes 0..10) and B (an open on `f`,
/// its lock refused because of A's): the starting point of each test.
struct Two {
    a: Sess,
    b: Sess,
    oa: Opened,
    ob: Opened,
    la: Stateid4,
}

async fn a_locks_b_is_refused(fx: &Fx) -> Two {
    let a = fx.client("a").await;
    let b = fx.client("b").await;
    let oa = fx.open(&a, "f", "open-a", BOTH, DENY_NONE).await.unwrap();
    let ob = fx.open(&b, "f", "open-b", BOTH, DENY_NONE).await.unwrap();
    let la = fx
        .new_write_lock(&a, &oa.fh, &oa.stateid, (0, 10), "lock-a")
        .await
        .expect("A's LOCK");
    let d = fx
        .new_write_lock(&b, &ob.fh, &ob.stateid, (0, 10), "lock-b")
        .await;
    assert_eq!(d, Err(NFS4ERR_DENIED), "A still holds it");
    Two { a, b, oa, ob, la }
}

/// [`a_locks_b_is_refused`] on a server with a 2 s lease (90 s grace).
async fn a_locked_b_refused() -> (Fx, Two) {
    let fx = Fx::new(cfg(2, 90));
    let t = a_locks_b_is_refused(&fx).await;
    (fx, t)
}

async fn b_locks(fx: &Fx, t: &Two) -> Result<Stateid4, Nfsstat4> {
    fx.new_write_lock(&t.b, &t.ob.fh, &t.ob.stateid, (0, 10), "lock-b")
        .await
}

/// Was `expired_lease_revokes_locks_and_says_so` end to end (lease 2 s,
/// sleep 3 s, then B polled its LOCK).
#[tokio::test]
async fn expired_lease_revokes_locks_and_says_so() {
    let (fx, t) = a_locked_b_refused().await;
    // A goes silent for a lease and a half; B keeps renewing.
    fx.pass(secs(3), &[&t.b]).await;
    b_locks(&fx, &t)
        .await
        .expect("B's LOCK succeeds once A's lease ran out");
    // A keeps its session; its next SEQUENCE says all its state was
    // revoked, and its stateids test EXPIRED until freed.
    assert_eq!(
        fx.renew(&t.a).await.unwrap() & ALL_STATE_REVOKED,
        ALL_STATE_REVOKED
    );
    assert_eq!(
        fx.tested(&t.a, std::slice::from_ref(&t.oa.stateid)).await,
        [NFS4ERR_EXPIRED]
    );
    let r = fx.call(&t.a, vec![free_stateid(&t.oa.stateid)]).await;
    assert_eq!(r.status, NFS4_OK, "FREE_STATEID: {:?}", statuses(&r));
    // The lock stateid too; once all is freed the flag clears.
    assert_eq!(
        fx.tested(&t.a, std::slice::from_ref(&t.la)).await,
        [NFS4ERR_EXPIRED]
    );
    let r = fx.call(&t.a, vec![free_stateid(&t.la)]).await;
    assert_eq!(r.status, NFS4_OK, "FREE_STATEID: {:?}", statuses(&r));
    assert_eq!(fx.renew(&t.a).await.unwrap() & ALL_STATE_REVOKED, 0);
}

/// A lapsed client is kept, courteous, while nobody needs its state; back
/// before a conflict, it finds everything as it left it.
#[tokio::test]
async fn courteous_client_keeps_its_state_until_a_conflict() {
    let (fx, t) = a_locked_b_refused().await;
    fx.pass(secs(60), &[&t.b]).await;
    assert_eq!(fx.n.state.courteous_clients(), 1, "A is courteous");
    assert_eq!(fx.renew(&t.a).await.unwrap() & ALL_STATE_REVOKED, 0);
    fx.reap().await;
    assert_eq!(fx.n.state.courteous_clients(), 0, "A is active again");
    assert_eq!(
        fx.tested(&t.a, &[t.oa.stateid.clone(), t.la.clone()]).await,
        [NFS4_OK, NFS4_OK]
    );
    assert_eq!(
        b_locks(&fx, &t).await,
        Err(NFS4ERR_DENIED),
        "A's lock holds"
    );
}

/// Courteous, but only up to the bound: past `Courtesy::max_age` the
/// state goes without a conflict.
#[tokio::test]
async fn courtesy_ends_after_its_bound() {
    let mut c = cfg(2, 90);
    c.courtesy.max_age = secs(10);
    let fx = Fx::new(c);
    let t = a_locks_b_is_refused(&fx).await;
    fx.pass(secs(8), &[&t.b]).await;
    assert_eq!(fx.n.state.courteous_clients(), 1);
    fx.pass(secs(5), &[&t.b]).await;
    assert_eq!(fx.n.state.courteous_clients(), 0);
    assert_eq!(
        fx.renew(&t.a).await.unwrap() & ALL_STATE_REVOKED,
        ALL_STATE_REVOKED
    );
    b_locks(&fx, &t)
        .await
        .expect("A's lock went with the courtesy bound");
}

/// A SEQUENCE just before the lease runs out starts it again: the state
/// survives a conflict at a time past the first lease.
#[tokio::test]
async fn lease_renewed_by_sequence_just_before_expiry_survives() {
    let (fx, t) = a_locked_b_refused().await;
    for _ in 0..5 {
        fx.pass(millis(1990), &[&t.b]).await;
        assert_eq!(fx.renew(&t.a).await, Ok(0), "A renews in time");
    }
    // Ten seconds after A's LOCK, five leases: still A's.
    assert_eq!(b_locks(&fx, &t).await, Err(NFS4ERR_DENIED));
    assert_eq!(fx.n.state.courteous_clients(), 0);
    // A lease and a bit of silence later, it is not.
    fx.pass(millis(2010), &[&t.b]).await;
    b_locks(&fx, &t).await.expect("A lapsed");
}

/// Any SEQUENCE renews, whatever the COMPOUND does after it.
#[tokio::test]
async fn lease_is_renewed_by_any_compound_with_sequence() {
    let (fx, t) = a_locked_b_refused().await;
    for _ in 0..4 {
        fx.pass(millis(1500), &[&t.b]).await;
        let r = fx
            .call(&t.a, vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH])
            .await;
        assert_eq!(r.status, NFS4_OK);
    }
    assert_eq!(b_locks(&fx, &t).await, Err(NFS4ERR_DENIED));
}

/// A client without state silent for ten leases is forgotten: its session
/// goes (BADSESSION) and its client id with it (STALE_CLIENTID for
/// CREATE_SESSION; EXCHANGE_ID starts afresh).
#[tokio::test]
async fn silent_client_without_state_is_forgotten_after_ten_leases() {
    let fx = Fx::new(cfg(2, 90));
    let s = fx.client("quiet").await;
    fx.pass(secs(19), &[]).await;
    assert_eq!(
        fx.renew(&s).await,
        Ok(0),
        "nine and a half leases: still known"
    );
    fx.pass(secs(21), &[]).await;
    assert_eq!(fx.renew(&s).await, Err(NFS4ERR_BADSESSION));
    let r = fx
        .compound(
            1,
            vec![create_session_op(
                s.clientid,
                2,
                0,
                vec![CallbackSecParms4::AUTH_NONE],
            )],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_STALE_CLIENTID);
    let ex = fx.exchange_id("quiet", 1).await;
    assert_ne!(ex.eir_clientid, s.clientid, "a new client id");
}

/// An unconfirmed EXCHANGE_ID is dropped after a lease: its client id
/// cannot be confirmed any more.
#[tokio::test]
async fn unconfirmed_client_is_dropped_after_a_lease() {
    let fx = Fx::new(cfg(2, 90));
    let ex = fx.exchange_id("never-confirmed", 1).await;
    fx.pass(secs(3), &[]).await;
    let r = fx
        .compound(
            1,
            vec![create_session_op(
                ex.eir_clientid,
                ex.eir_sequenceid,
                0,
                vec![CallbackSecParms4::AUTH_NONE],
            )],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_STALE_CLIENTID);
}

/// An OPEN whose share reservation conflicts with a lapsed client's open
/// takes that client's state too, as a LOCK does; before the lease runs
/// out it is refused.
#[tokio::test]
async fn conflicting_open_takes_a_lapsed_clients_share_reservation() {
    let fx = Fx::new(cfg(2, 90));
    let a = fx.client("a").await;
    let b = fx.client("b").await;
    fx.open(&a, "f", "open-a", BOTH, OPEN4_SHARE_DENY_WRITE)
        .await
        .unwrap();
    assert_eq!(
        fx.open(&b, "f", "open-b", BOTH, DENY_NONE)
            .await
            .unwrap_err(),
        NFS4ERR_SHARE_DENIED
    );
    fx.pass(millis(1900), &[&b]).await;
    assert_eq!(
        fx.open(&b, "f", "open-b", BOTH, DENY_NONE)
            .await
            .unwrap_err(),
        NFS4ERR_SHARE_DENIED,
        "A's lease has not run out"
    );
    fx.pass(millis(200), &[&b]).await;
    fx.open(&b, "f", "open-b", BOTH, DENY_NONE)
        .await
        .expect("A's reservation went with its lease");
    assert_eq!(
        fx.renew(&a).await.unwrap() & ALL_STATE_REVOKED,
        ALL_STATE_REVOKED
    );
}

/// LOCKT is a conflict too: it frees a lapsed holder's range and then
/// reports no lock.
#[tokio::test]
async fn lockt_against_a_lapsed_holder_frees_the_range() {
    let (fx, t) = a_locked_b_refused().await;
    let lockt = || {
        fx.call(
            &t.b,
            vec![
                putfh(&t.ob.fh),
                NfsArgop4::OP_LOCKT(Lockt4args {
                    locktype: WRITE_LT,
                    offset: 5,
                    length: 1,
                    owner: owner(t.b.clientid, "lock-b"),
                }),
            ],
        )
    };
    assert_eq!(lockt().await.status, NFS4ERR_DENIED);
    fx.pass(secs(3), &[&t.b]).await;
    assert_eq!(lockt().await.status, NFS4_OK);
    assert_eq!(
        fx.tested(&t.a, std::slice::from_ref(&t.la)).await,
        [NFS4ERR_EXPIRED]
    );
}
