//! Write delegations (RFC 8881 §10.4): when OPEN grants one and when not
//! (the export, the client's wish, other users of the file); the recall
//! and NFS4ERR_DELAY before another client's READ, read OPEN or LOCK;
//! CB_GETATTR before another client's GETATTR of size or change, answered
//! and unanswered; CB_RECALL_ANY past the high-water mark; delegations
//! reclaimed with CLAIM_PREVIOUS after a restart.

use super::*;
use crate::export::Delegations;

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const WRITE: u32 = OPEN4_SHARE_ACCESS_WRITE;
const ANON: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

fn rw_fx(cfg: Nfs4Config) -> Fx {
    Fx::with_delegations(cfg, Delegations::ReadWrite)
}

/// `s` opens f for reading and writing (owner o) and gets a write
/// delegation: the open and the delegation's stateid.
async fn write_delegated(fx: &Fx, s: &Sess) -> (Opened, Stateid4) {
    with_deleg(open_ok(fx, s, "f", "o", BOTH).await, write_deleg)
}

fn write_deleg(o: &Opened) -> Stateid4 {
    match &o.delegation {
        OpenDelegation4::OPEN_DELEGATE_WRITE(d) => {
            assert!(!d.recall);
            assert_eq!(d.space_limit, NfsSpaceLimit4::NFS_LIMIT_SIZE(u64::MAX));
            assert_eq!(d.permissions.access_mask, 0);
            d.stateid.clone()
        }
        other => panic!("no write delegation: {other:?}"),
    }
}

/// Client a (with a back channel) holding a write delegation on "f",
/// opened for both by its owner "o"; client b, with no back channel:
/// (server, a, a's back channel, b, a's open, the delegation).
async fn a_holds_a_write_delegation() -> (Fx, Sess, Arc<FakeBack>, Sess, Opened, Stateid4) {
    let fx = rw_fx(cfg(60, 0));
    let (a, fa) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    let (o, sid) = write_delegated(&fx, &a).await;
    (fx, a, fa, b, o, sid)
}

fn contention() -> OpenDelegation4 {
    OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::WND4_CONTENTION(false))
}

fn cb_ops(fake: &FakeBack) -> Vec<NfsCbArgop4> {
    fake.compounds()
        .into_iter()
        .flat_map(|c| c.argarray.into_iter())
        .filter(|op| !matches!(op, NfsCbArgop4::OP_CB_SEQUENCE(_)))
        .collect()
}

/// The stateid of each CB_RECALL the client received.
fn recalled(fake: &FakeBack) -> Vec<Stateid4> {
    recalls(fake).into_iter().map(|(sid, _)| sid).collect()
}

fn read(fh: &NfsFh4, sid: &Stateid4) -> Vec<NfsArgop4> {
    vec![putfh(fh), read_op(sid, 0, 10)]
}

fn write(fh: &NfsFh4, sid: &Stateid4, data: &'static [u8]) -> Vec<NfsArgop4> {
    vec![
        putfh(fh),
        write_op(sid, 0, StableHow4::FILE_SYNC4, Bytes::from_static(data)),
    ]
}

/// GETATTR of change and size: Ok((change, size)) or the status.
async fn change_size(fx: &Fx, s: &Sess, fh: &NfsFh4) -> Result<(u64, u64), Nfsstat4> {
    let mut bits = Vec::new();
    attr::bitmap_set(&mut bits, FATTR4_CHANGE);
    attr::bitmap_set(&mut bits, FATTR4_SIZE);
    let r = fx
        .call(
            s,
            vec![
                putfh(fh),
                NfsArgop4::OP_GETATTR(Getattr4args { attr_request: bits }),
            ],
        )
        .await;
    match r.resarray.last() {
        Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) => {
            Ok(attr::decode_change_size(&ok.obj_attributes).expect("change and size"))
        }
        _ => Err(r.status),
    }
}

#[tokio::test]
async fn a_write_open_gets_a_write_delegation_it_writes_under() {
    let fx = rw_fx(cfg(60, 0));
    let (a, _fa) = fx.client_with_back("a").await;
    let (o, sid) = write_delegated(&fx, &a).await;
    // The delegation's stateid writes and reads.
    assert_eq!(
        fx.call(&a, write(&o.fh, &sid, b"hello")).await.status,
        NFS4_OK
    );
    assert_eq!(fx.call(&a, read(&o.fh, &sid)).await.status, NFS4_OK);
    // The holder's own GETATTR asks nobody.
    assert_eq!(change_size(&fx, &a, &o.fh).await.unwrap().1, 5);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    assert_eq!(fx.n.state.delegations(), 0);
    // A write-only open gets one too (the opener may read the file).
    let o = open_ok(&fx, &a, "g", "o", WRITE | WANT_ANY).await;
    write_deleg(&o);
    // Asked for explicitly.
    let o = open_ok(&fx, &a, "h", "o", BOTH | WANT_WRITE).await;
    write_deleg(&o);
}

#[tokio::test]
async fn who_gets_no_write_delegation_and_why() {
    // An export allowing read delegations only: a write open gets none.
    let fx = Fx::new(cfg(60, 0));
    let (a, _fa) = fx.client_with_back("a").await;
    let o = open_ok(&fx, &a, "f", "o", BOTH).await;
    assert_eq!(o.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    let o = open_ok(&fx, &a, "f", "o", BOTH | WANT_WRITE).await;
    assert_eq!(o.delegation, contention());

    let fx = rw_fx(cfg(60, 0));
    let (a, _fa) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    // A write open that asked for a read delegation gets none.
    let o = open_ok(&fx, &a, "f1", "o", BOTH | WANT_READ).await;
    assert_eq!(o.delegation, contention());
    // A read open that asked for a write delegation gets no read one.
    let o = open_ok(&fx, &a, "f2", "o", READ | WANT_WRITE).await;
    assert_eq!(o.delegation, contention());
    // Any delegation: a read open gets a read one.
    let o = open_ok(&fx, &a, "f3", "o", READ | WANT_ANY).await;
    assert!(matches!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_READ(_)
    ));
    // The holder of a read delegation asking for a write one: no upgrade.
    let o = open_ok(&fx, &a, "f3", "o2", BOTH | WANT_WRITE).await;
    assert_eq!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::Default(
            WhyNoDelegation4::WND4_NOT_SUPP_UPGRADE
        ))
    );
    // Another client has the file open, even only for reading.
    open_ok(&fx, &b, "f4", "r", READ).await;
    let o = open_ok(&fx, &a, "f4", "o", BOTH | WANT_WRITE).await;
    assert_eq!(o.delegation, contention());
}

#[tokio::test]
async fn another_clients_read_or_read_open_recalls_a_write_delegation() {
    let (fx, a, fa, b, o, sid) = a_holds_a_write_delegation().await;
    // A READ with the anonymous stateid: recall, DELAY until returned.
    assert_eq!(fx.call(&b, read(&o.fh, &ANON)).await.status, NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalled(&fa), std::slice::from_ref(&sid));
    // A read OPEN waits too; the recall is not sent twice.
    assert_eq!(
        fx.open(&b, "f", "r", READ, DENY_NONE).await.unwrap_err(),
        NFS4ERR_DELAY
    );
    settle().await;
    assert_eq!(recalled(&fa).len(), 1);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    assert_eq!(fx.call(&b, read(&o.fh, &ANON)).await.status, NFS4_OK);
    open_ok(&fx, &b, "f", "r", READ).await;
    // Now b uses the file: a's next write open gets no write delegation.
    let again = open_ok(&fx, &a, "f", "o2", BOTH).await;
    assert_eq!(again.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
}

#[tokio::test]
async fn another_clients_lock_recalls_a_write_delegation() {
    let (fx, _, fa, b, o, sid) = a_holds_a_write_delegation().await;
    // b could not have the file open without recalling the delegation
    // already; whatever stateid its LOCK names, the recall comes first.
    let r = fx.new_write_lock(&b, &o.fh, &ANON, (0, 1), "l").await;
    assert_eq!(r.unwrap_err(), NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalled(&fa), [sid]);
}

#[tokio::test]
async fn a_read_delegation_stands_when_another_client_reads() {
    let fx = rw_fx(cfg(60, 0));
    let (a, fa) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    let o = open_ok(&fx, &a, "f", "o", READ).await;
    assert!(matches!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_READ(_)
    ));
    assert_eq!(fx.call(&b, read(&o.fh, &ANON)).await.status, NFS4_OK);
    open_ok(&fx, &b, "f", "r", READ).await;
    settle().await;
    assert!(recalled(&fa).is_empty());
}

#[tokio::test]
async fn cb_getattr_asks_the_holder_before_another_clients_getattr() {
    let (fx, a, fa, b, o, sid) = a_holds_a_write_delegation().await;
    let (change0, size0) = change_size(&fx, &a, &o.fh).await.unwrap();
    // Unmodified: the holder says what the server has; the answer is the
    // server's.
    *fa.getattr.lock().unwrap() = Some((change0, size0));
    assert_eq!(change_size(&fx, &b, &o.fh).await, Ok((change0, size0)));
    assert!(matches!(
        cb_ops(&fa).last(),
        Some(NfsCbArgop4::OP_CB_GETATTR(_))
    ));
    // Modified in its cache: its size, and a change attribute that moved.
    *fa.getattr.lock().unwrap() = Some((change0 + 1, 5));
    let (change1, size1) = change_size(&fx, &b, &o.fh).await.unwrap();
    assert_eq!(size1, 5);
    assert!(change1 > change0, "{change1} > {change0}");
    // Asked again with nothing new: the same answer.
    assert_eq!(change_size(&fx, &b, &o.fh).await, Ok((change1, 5)));
    // Modified once more: the change attribute moves again.
    *fa.getattr.lock().unwrap() = Some((change0 + 2, 7));
    let (change2, size2) = change_size(&fx, &b, &o.fh).await.unwrap();
    assert_eq!(size2, 7);
    assert!(change2 > change1);
    assert!(recalled(&fa).is_empty());
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
}

#[tokio::test]
async fn an_unanswered_cb_getattr_recalls_the_delegation() {
    let (fx, a, fa, b, o, sid) = a_holds_a_write_delegation().await;
    // The holder refuses CB_GETATTR: recalled, DELAY.
    *fa.getattr.lock().unwrap() = None;
    assert_eq!(change_size(&fx, &b, &o.fh).await, Err(NFS4ERR_DELAY));
    settle().await;
    assert_eq!(recalled(&fa), std::slice::from_ref(&sid));
    // Still DELAY while the recall is outstanding, no new CB_GETATTR.
    let before = cb_ops(&fa).len();
    assert_eq!(change_size(&fx, &b, &o.fh).await, Err(NFS4ERR_DELAY));
    settle().await;
    assert_eq!(cb_ops(&fa).len(), before);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    assert!(change_size(&fx, &b, &o.fh).await.is_ok());
    // No reply at all (the call times out) does the same.
    let o = open_ok(&fx, &a, "g", "o", BOTH).await;
    let sid = write_deleg(&o);
    fa.answer(Answer::Ignore);
    assert_eq!(change_size(&fx, &b, &o.fh).await, Err(NFS4ERR_DELAY));
    settle().await;
    assert!(recalled(&fa).contains(&sid));
}

#[tokio::test]
async fn recall_any_goes_to_the_big_holder_past_the_mark() {
    let fx = capped_delegations(10);
    let (a, fa) = fx.client_with_back("a").await;
    let (b, fb) = fx.client_with_back("b").await;
    open_ok(&fx, &b, "b0", "o", READ).await;
    for i in 0..7 {
        open_ok(&fx, &a, &format!("a{i}"), "o", READ).await;
    }
    settle().await;
    let any = |f: &FakeBack| {
        cb_ops(f)
            .into_iter()
            .filter_map(|op| match op {
                NfsCbArgop4::OP_CB_RECALL_ANY(r) => Some(r),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Eight of ten: under the mark.
    assert!(any(&fa).is_empty());
    // The ninth passes it: a, holding eight, is asked to keep four read
    // delegations; b, holding one, is left alone.
    open_ok(&fx, &a, "a7", "o", READ).await;
    settle().await;
    let r = any(&fa);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].craa_objects_to_keep, 4);
    assert_eq!(r[0].craa_type_mask, vec![1]);
    assert!(any(&fb).is_empty());
    // Answered, so the lease timer's walk asks again while still over.
    fx.reap().await;
    settle().await;
    assert_eq!(any(&fa).len(), 2);
}

/// A client that held `f` open with a delegation of `kind` when the
/// server died comes back during grace, with a back channel.
async fn reclaiming_with_back(fx: &Fx, owner: &str) -> (Sess, Arc<FakeBack>) {
    let r = fx.session_with_back(owner).await;
    settle().await;
    r
}

async fn reclaim(fx: &Fx, s: &Sess, fh: &NfsFh4, access: u32, t: OpenDelegationType4) -> Opened {
    let r = fx
        .call(
            s,
            vec![
                putfh(fh),
                open_args(
                    0,
                    owner(s.clientid, "o"),
                    access,
                    DENY_NONE,
                    nocreate(),
                    OpenClaim4::CLAIM_PREVIOUS(t),
                ),
                NfsArgop4::OP_GETFH,
            ],
        )
        .await;
    opened(&r, 2).unwrap_or_else(|| panic!("reclaim: {:?}", statuses(&r)))
}

#[tokio::test]
async fn delegations_are_reclaimed_after_a_restart() {
    let mut fx = rw_fx(cfg(60, 0));
    let (a, _fa) = fx.client_with_back("a").await;
    let (b, _fb) = fx.client_with_back("b").await;
    let of = open_ok(&fx, &a, "f", "o", BOTH).await;
    write_deleg(&of);
    let og = open_ok(&fx, &a, "g", "o", READ).await;
    let oh = open_ok(&fx, &b, "h", "o", READ).await;
    fx.restart(cfg(60, 30));
    let (a, _fa) = reclaiming_with_back(&fx, "a").await;
    let (b, _fb) = reclaiming_with_back(&fx, "b").await;
    // The write delegation comes back as it was.
    let r = reclaim(
        &fx,
        &a,
        &of.fh,
        BOTH,
        OpenDelegationType4::OPEN_DELEGATE_WRITE,
    )
    .await;
    write_deleg(&r);
    // So does a read one.
    let r = reclaim(
        &fx,
        &a,
        &og.fh,
        READ,
        OpenDelegationType4::OPEN_DELEGATE_READ,
    )
    .await;
    match r.delegation {
        OpenDelegation4::OPEN_DELEGATE_READ(d) => assert!(!d.recall),
        other => panic!("{other:?}"),
    }
    // A reclaim that now conflicts (b reclaimed a write open of h, then a
    // asks for a write delegation there) is given pre-recalled.
    reclaim(
        &fx,
        &b,
        &oh.fh,
        BOTH,
        OpenDelegationType4::OPEN_DELEGATE_NONE,
    )
    .await;
    let r = reclaim(
        &fx,
        &a,
        &oh.fh,
        BOTH,
        OpenDelegationType4::OPEN_DELEGATE_WRITE,
    )
    .await;
    match r.delegation {
        OpenDelegation4::OPEN_DELEGATE_WRITE(d) => assert!(d.recall),
        other => panic!("{other:?}"),
    }
    // A delegation given pre-recalled and never returned is revoked after
    // a lease.
    assert_eq!(fx.n.state.delegations(), 3);
    fx.pass(secs(61), &[&a, &b]).await;
    assert_eq!(fx.n.state.delegations(), 2);
}

#[tokio::test]
async fn claim_delegate_prev_is_not_supported() {
    let fx = rw_fx(cfg(60, 0));
    let (a, _fa) = fx.client_with_back("a").await;
    let r = fx
        .call(
            &a,
            vec![
                NfsArgop4::OP_PUTROOTFH,
                open_args(
                    0,
                    owner(a.clientid, "o"),
                    READ,
                    DENY_NONE,
                    nocreate(),
                    OpenClaim4::CLAIM_DELEGATE_PREV(name("f")),
                ),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_NOTSUPP);
}

#[tokio::test]
async fn an_nfsv40_clients_read_open_recalls_a_write_delegation() {
    let fx = rw_fx(cfg(60, 0));
    let (a, fa) = fx.client_with_back("a").await;
    let (_, sid) = write_delegated(&fx, &a).await;
    let id = fx.client40("v40").await;
    let r = fx.open40_first(id, READ, nocreate(), "f").await;
    assert_eq!(r.status, NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalled(&fa), std::slice::from_ref(&sid));
}
