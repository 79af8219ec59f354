//! NFSv4.0: SETCLIENTID / SETCLIENTID_CONFIRM, RENEW and the lease, OPEN
//! and the open/lock owner seqid rules of RFC 7530 §9.1.7 (a
//! retransmission gets the same reply, a seqid out of order gets
//! NFS4ERR_BAD_SEQID). The seqid test was `nfs40_client_open_and_seqid_rules`
//! in `crates/client/tests/tarn_v40.rs`.

use super::*;

async fn c40(fx: &Fx, ops: Vec<NfsArgop4>) -> (Bytes, Compound4res) {
    let raw = fx.raw(0, ops).await;
    let r = Compound4res::unpack(&mut Decoder::new(raw.clone())).unwrap();
    (raw, r)
}

fn open(clientid: u64, owner: &str, seqid: u32, file: &str) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::OP_PUTROOTFH,
        open_named(seqid, super::owner(clientid, owner), BOTH, create(), file),
        NfsArgop4::OP_GETFH,
    ]
}

fn open_confirm(fh: &NfsFh4, sid: &Stateid4, seqid: u32) -> Vec<NfsArgop4> {
    vec![
        putfh(fh),
        NfsArgop4::OP_OPEN_CONFIRM(OpenConfirm4args {
            open_stateid: sid.clone(),
            seqid,
        }),
    ]
}

fn lock_new_owner(fh: &NfsFh4, clientid: u64, open_seqid: u32, sid: &Stateid4) -> Vec<NfsArgop4> {
    vec![
        putfh(fh),
        lock_args(
            NfsLockType4::WRITE_LT,
            false,
            0,
            10,
            Locker4::TRUE(OpenToLockOwner4 {
                open_seqid,
                open_stateid: sid.clone(),
                lock_seqid: 0,
                lock_owner: owner(clientid, "lock-1"),
            }),
        ),
    ]
}

#[tokio::test]
async fn nfs40_client_open_and_seqid_rules() {
    let fx = Fx::new(Nfs4Config::default());
    let id = fx.client40("v40-client").await;
    assert_eq!(fx.renew40(id).await, NFS4_OK, "RENEW");
    // A SETCLIENTID_CONFIRM with the wrong verifier is refused.
    assert_eq!(fx.confirm(id, [0xee; 8]).await, NFS4ERR_STALE_CLIENTID);

    // First OPEN of a new owner: any seqid starts it, and the server asks
    // for OPEN_CONFIRM (RFC 7530 §16.18.5).
    let (_, r) = c40(&fx, open(id, "owner-1", 10, "f")).await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    let first = opened(&r, 1).unwrap();
    assert_eq!(first.rflags & 0x2, 0x2, "OPEN4_RESULT_CONFIRM set");
    let (sid, fh) = (first.stateid.clone(), first.fh.clone());

    // The same seqid again is a retransmission: the OPEN's reply again
    // (same stateid seqid, not bumped by a second execution).
    let (_, r) = c40(&fx, open(id, "owner-1", 10, "f")).await;
    let again = opened(&r, 1).unwrap_or_else(|| panic!("{:?}", statuses(&r)));
    assert_eq!(again.stateid, sid, "replayed, not executed twice");
    // Out of order: BAD_SEQID.
    let (_, r) = c40(&fx, open(id, "owner-1", 12, "f")).await;
    assert_eq!(
        statuses(&r)[1],
        (NfsOpnum4::OP_OPEN as u32, NFS4ERR_BAD_SEQID)
    );
    // In order: executes (same owner, same file: the stateid's seqid moves on).
    let (_, r) = c40(&fx, open(id, "owner-1", 11, "f")).await;
    let next = opened(&r, 1).unwrap_or_else(|| panic!("{:?}", statuses(&r)));
    assert_eq!(
        (next.stateid.other, next.stateid.seqid),
        (sid.other, sid.seqid + 1)
    );
    // OPEN_CONFIRM (the owner's seqid 12) moves the stateid on once more.
    let (_, r) = c40(&fx, open_confirm(&fh, &next.stateid, 12)).await;
    let NfsResop4::OP_OPEN_CONFIRM(OpenConfirm4res::NFS4_OK(confirmed)) = &r.resarray[1] else {
        panic!("{:?}", statuses(&r))
    };
    assert_eq!(
        (confirmed.open_stateid.other, confirmed.open_stateid.seqid),
        (sid.other, sid.seqid + 2)
    );
    let osid = confirmed.open_stateid.clone();

    // LOCK with a new lock owner, sequenced by the open owner's seqid 13.
    let (_, r) = c40(&fx, lock_new_owner(&fh, id, 13, &osid)).await;
    let NfsResop4::OP_LOCK(Lock4res::NFS4_OK(l)) = &r.resarray[1] else {
        panic!("{:?}", statuses(&r))
    };
    let lsid = l.lock_stateid.clone();
    // LOCKU by the lock owner (its seqid 1 follows lock_seqid 0).
    let (_, r) = c40(
        &fx,
        vec![
            putfh(&fh),
            locku_op(NfsLockType4::WRITE_LT, 1, &lsid, 0, 10),
        ],
    )
    .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    // CLOSE with the open owner's next seqid (14), then a stale retry of
    // it is a replay: the same reply bytes.
    let close = |seqid: u32| {
        vec![
            putfh(&fh),
            NfsArgop4::OP_CLOSE(Close4args {
                seqid,
                open_stateid: osid.clone(),
            }),
        ]
    };
    let (a, r) = c40(&fx, close(14)).await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    let (b, _) = c40(&fx, close(14)).await;
    assert_eq!(a, b, "a retransmitted CLOSE gets the same reply");
}

/// A 4.0 client holding a lock, and its open stateid.
async fn client40_with_lock(fx: &Fx, name: &str) -> (u64, NfsFh4, Stateid4, Stateid4) {
    let id = fx.client40(name).await;
    let (_, r) = c40(fx, open(id, "owner-1", 1, "f")).await;
    let o = opened(&r, 1).unwrap_or_else(|| panic!("{:?}", statuses(&r)));
    let (_, r) = c40(fx, open_confirm(&o.fh, &o.stateid, 2)).await;
    let NfsResop4::OP_OPEN_CONFIRM(OpenConfirm4res::NFS4_OK(c)) = &r.resarray[1] else {
        panic!("{:?}", statuses(&r))
    };
    let (_, r) = c40(fx, lock_new_owner(&o.fh, id, 3, &c.open_stateid)).await;
    let NfsResop4::OP_LOCK(Lock4res::NFS4_OK(l)) = &r.resarray[1] else {
        panic!("{:?}", statuses(&r))
    };
    (id, o.fh, c.open_stateid.clone(), l.lock_stateid.clone())
}

/// An NFSv4.1 client's LOCK on the same bytes.
async fn other_locks(fx: &Fx, b: &Sess) -> Result<Stateid4, Nfsstat4> {
    let ob = fx.open(b, "f", "open-b", BOTH, DENY_NONE).await.unwrap();
    fx.new_write_lock(b, &ob.fh, &ob.stateid, (0, 10), "lock-b")
        .await
}

/// RENEW keeps a 4.0 lease; without it the lease runs out, a conflict
/// takes the client's state, and the client and its stateids answer
/// NFS4ERR_EXPIRED (RFC 7530 §9.6.3).
#[tokio::test]
async fn renew_keeps_the_lease_and_its_end_expires_the_client() {
    let fx = Fx::new(cfg(2, 90));
    let (id, fh, osid, _) = client40_with_lock(&fx, "renewer").await;
    let b = fx.client("b").await;
    assert_eq!(other_locks(&fx, &b).await, Err(NFS4ERR_DENIED));
    for _ in 0..4 {
        fx.pass(millis(1500), &[&b]).await;
        assert_eq!(fx.renew40(id).await, NFS4_OK);
    }
    assert_eq!(
        other_locks(&fx, &b).await,
        Err(NFS4ERR_DENIED),
        "six seconds on, RENEW kept the lock"
    );
    fx.pass(secs(3), &[&b]).await;
    other_locks(&fx, &b).await.expect("the 4.0 client lapsed");
    assert_eq!(fx.renew40(id).await, NFS4ERR_EXPIRED);
    let r = fx.compound(0, vec![putfh(&fh), read_op(&osid, 0, 1)]).await;
    assert_eq!(r.status, NFS4ERR_EXPIRED, "{:?}", statuses(&r));
}

/// A 4.0 stateful operation renews the lease as RENEW does (RFC 7530 §9.6).
#[tokio::test]
async fn stateful_operation_renews_a_40_lease() {
    let fx = Fx::new(cfg(2, 90));
    let (id, fh, osid, _) = client40_with_lock(&fx, "busy").await;
    let b = fx.client("b").await;
    for _ in 0..4 {
        fx.pass(millis(1500), &[&b]).await;
        let r = fx.compound(0, vec![putfh(&fh), read_op(&osid, 0, 1)]).await;
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    }
    assert_eq!(other_locks(&fx, &b).await, Err(NFS4ERR_DENIED));
    assert_eq!(fx.renew40(id).await, NFS4_OK);
}

/// A SETCLIENTID not confirmed within a lease is dropped.
#[tokio::test]
async fn unconfirmed_setclientid_is_dropped_after_a_lease() {
    let fx = Fx::new(cfg(2, 90));
    let (id, v) = fx.setclientid("slow").await;
    assert_eq!(
        fx.renew40(id).await,
        NFS4ERR_STALE_CLIENTID,
        "not confirmed yet"
    );
    fx.pass(secs(3), &[]).await;
    assert_eq!(fx.confirm(id, v).await, NFS4ERR_STALE_CLIENTID);
}

/// After a restart the previous instance's client ids and stateids are
/// stale (RFC 7530 §9.1.4.3, §9.6.3): the client learns to recover, not
/// that it sent garbage.
#[tokio::test]
async fn ids_of_a_previous_instance_are_stale() {
    let mut fx = Fx::new(cfg(2, 90));
    let (id, fh, osid, _) = client40_with_lock(&fx, "before").await;
    fx.restart(cfg(2, 90));
    assert_eq!(fx.renew40(id).await, NFS4ERR_STALE_CLIENTID);
    let r = fx.compound(0, vec![putfh(&fh), read_op(&osid, 0, 1)]).await;
    assert_eq!(r.status, NFS4ERR_STALE_STATEID, "{:?}", statuses(&r));
}
