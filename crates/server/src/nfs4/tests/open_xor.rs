//! RFC 9754 OPEN_XOR_DELEGATION: a client asks for a delegation instead
//! of an open stateid, and when it gets one keeps no open (so it sends no
//! CLOSE), as the Linux 7.x client does against knfsd.

use super::*;

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const XOR: u32 = OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION;

/// `s` opens "f" for reading, wanting a delegation instead of an open:
/// it gets the delegation alone (its stateid), the open stateid all zeros.
async fn read_deleg_alone(fx: &Fx, s: &Sess) -> (Opened, Stateid4) {
    let o = open_ok(fx, s, "f", "o", READ | XOR).await;
    let deleg = read_deleg(&o);
    assert_ne!(o.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    assert_eq!(o.stateid.other, [0; 12], "no open stateid");
    (o, deleg)
}

#[tokio::test]
async fn a_delegation_instead_of_an_open_needs_no_close() {
    let fx = Fx::new(cfg(60, 0));
    let (a, _fake) = fx.client_with_back("a").await;
    let (o, deleg) = read_deleg_alone(&fx, &a).await;
    // Only the delegation is on record, and it reads.
    assert_eq!(fx.n.state.counts().2, 0, "no open stateid");
    assert_eq!(fx.n.state.delegations(), 1);
    let r = fx
        .call(&a, vec![putfh(&o.fh), read_op(&deleg, 0, 10)])
        .await;
    assert_eq!(r.status, NFS4_OK);
    // DELEGRETURN ends it all: nothing left for a CLOSE.
    let r = fx
        .call(&a, vec![putfh(&o.fh), delegreturn_op(&deleg)])
        .await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(fx.n.state.delegations(), 0);
}

#[tokio::test]
async fn an_open_stateid_when_no_delegation_or_an_open_already_there() {
    let fx = Fx::new(cfg(60, 0));
    // No back channel, so no delegation: an ordinary open.
    let plain = fx.client("plain").await;
    let o = open_ok(&fx, &plain, "f1", "o", READ | XOR).await;
    assert_eq!(o.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    assert_ne!(o.stateid.other, [0; 12]);
    // The owner's existing open stays what it is.
    let (a, _fake) = fx.client_with_back("a").await;
    let first = open_ok(&fx, &a, "f2", "o", READ | WANT_NO).await;
    let again = open_ok(&fx, &a, "f2", "o", READ | XOR).await;
    assert_eq!(again.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    assert_eq!(again.stateid.other, first.stateid.other);
    // Without the wish, as before.
    let o = open_ok(&fx, &a, "f3", "o", READ).await;
    read_deleg(&o);
    assert_eq!(o.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
}

#[tokio::test]
async fn a_delegation_only_holder_is_recalled_and_reopens_under_it() {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake) = fx.client_with_back("a").await;
    let (o, deleg) = read_deleg_alone(&fx, &a).await;
    // Another client's write open recalls the delegation (DELAY meanwhile).
    let b = fx.client("b").await;
    let r = fx
        .call(
            &b,
            open_ops(&b, "f", "w", OPEN4_SHARE_ACCESS_WRITE, DENY_NONE),
        )
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalls(&fake).len(), 1);
    // The holder turns its local open into a real one under the
    // delegation, then returns it.
    let r = fx
        .call(&a, vec![putfh(&o.fh), open_under(&a, "o", &deleg)])
        .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    let r = fx
        .call(&a, vec![putfh(&o.fh), delegreturn_op(&deleg)])
        .await;
    assert_eq!(r.status, NFS4_OK);
    let r = fx
        .call(
            &b,
            open_ops(&b, "f", "w", OPEN4_SHARE_ACCESS_WRITE, DENY_NONE),
        )
        .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
}

#[tokio::test]
async fn a_write_delegation_alone_writes_and_reads() {
    let fx = Fx::with_delegations(cfg(60, 0), crate::export::Delegations::ReadWrite);
    let (a, _fake) = fx.client_with_back("a").await;
    let o = open_ok(&fx, &a, "f", "o", BOTH | XOR).await;
    let deleg = match &o.delegation {
        OpenDelegation4::OPEN_DELEGATE_WRITE(d) => d.stateid.clone(),
        other => panic!("no write delegation: {other:?}"),
    };
    assert_ne!(o.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    let data = Bytes::from_static(b"written under the delegation alone");
    let r = fx
        .call(
            &a,
            vec![
                putfh(&o.fh),
                write_op(&deleg, 0, StableHow4::FILE_SYNC4, data.clone()),
                read_op(&deleg, 0, 64),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    match r.resarray.last() {
        Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) => assert_eq!(ok.data, data),
        other => panic!("{other:?}"),
    }
    let r = fx
        .call(&a, vec![putfh(&o.fh), delegreturn_op(&deleg)])
        .await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(fx.n.state.counts().2, 0);
}
