//! Read delegations: when OPEN grants one, the recall (CB_RECALL) and
//! NFS4ERR_DELAY before another client's conflicting OPEN, WRITE,
//! SETATTR(size), REMOVE, RENAME or LINK, DELEGRETURN, revocation after an
//! unanswered recall (manual clock), and opens under a delegation.

use super::*;

const READ: u32 = OPEN4_SHARE_ACCESS_READ;
const ANON: Stateid4 = Stateid4 {
    seqid: 0,
    other: [0; 12],
};

async fn open_as(fx: &Fx, s: &Sess, file: &str, owner: &str, access: u32) -> Compound4res {
    fx.call(s, open_ops(s, file, owner, access, DENY_NONE))
        .await
}

/// `s` opens f for reading (owner o) and gets a read delegation: the open
/// and the delegation's stateid.
async fn read_delegated(fx: &Fx, s: &Sess) -> (Opened, Stateid4) {
    with_deleg(open_ok(fx, s, "f", "o", READ).await, read_deleg)
}

#[tokio::test]
async fn a_read_open_gets_a_read_delegation_until_returned() {
    let fx = Fx::new(cfg(60, 0));
    let (a, _fake) = fx.client_with_back("a").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    assert_eq!(fx.n.state.delegations(), 1);
    // The delegation's stateid reads.
    let r = fx.call(&a, vec![putfh(&o.fh), read_op(&sid, 0, 10)]).await;
    assert_eq!(r.status, NFS4_OK);
    assert_eq!(fx.tested(&a, std::slice::from_ref(&sid)).await, [NFS4_OK]);
    // A second open of the file by the holder gets no second delegation.
    let again = open_ok(&fx, &a, "f", "o2", READ).await;
    assert_eq!(again.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    assert_eq!(fx.n.state.delegations(), 0);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4ERR_BAD_STATEID);
}

#[tokio::test]
async fn who_gets_no_delegation_and_why() {
    let fx = Fx::new(cfg(60, 0));
    // No back channel: none, and told so only if it asked.
    let plain = fx.client("plain").await;
    let o = open_ok(&fx, &plain, "f1", "o", READ).await;
    assert_eq!(o.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    let o = open_ok(&fx, &plain, "f1", "o", READ | WANT_READ).await;
    assert_eq!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::WND4_CONTENTION(false))
    );
    let (a, _fa) = fx.client_with_back("a").await;
    // Not wanted.
    let o = open_ok(&fx, &a, "f2", "o", READ | WANT_NO).await;
    assert_eq!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::Default(
            WhyNoDelegation4::WND4_NOT_WANTED
        ))
    );
    // A write open gets none (no write delegations yet).
    let o = open_ok(&fx, &a, "f3", "o", BOTH).await;
    assert_eq!(o.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    // Another client has the file open for writing.
    open_ok(&fx, &plain, "f4", "w", OPEN4_SHARE_ACCESS_WRITE).await;
    let o = open_ok(&fx, &a, "f4", "o", READ | WANT_READ).await;
    assert_eq!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::WND4_CONTENTION(false))
    );
    // NFSv4.0 clients have no callback path here.
    let id = fx.client40("v40").await;
    let r = fx.open40_first(id, READ, create(), "f5").await;
    match &r.resarray[1] {
        NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => {
            assert_eq!(ok.delegation, OpenDelegation4::OPEN_DELEGATE_NONE)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn past_the_bound_no_delegation_is_granted() {
    let fx = capped_delegations(1);
    let (a, _fa) = fx.client_with_back("a").await;
    read_deleg(&open_ok(&fx, &a, "f1", "o", READ).await);
    let o = open_ok(&fx, &a, "f2", "o", READ | WANT_READ).await;
    assert_eq!(
        o.delegation,
        OpenDelegation4::OPEN_DELEGATE_NONE_EXT(OpenNoneDelegation4::WND4_RESOURCE(false))
    );
}

#[tokio::test]
async fn a_conflicting_open_waits_for_the_recall_and_the_return() {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake) = fx.client_with_back("a").await;
    let (b, _fb) = fx.client_with_back("b").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    // Readers share: B's read open of another file A reads gets its own.
    read_deleg(&open_ok(&fx, &a, "g", "o", READ).await);
    read_deleg(&open_ok(&fx, &b, "g", "r", READ).await);
    // The holder's own write open is no conflict, but then nobody else
    // is given a delegation on the file.
    open_ok(&fx, &a, "f", "w", BOTH).await;
    let r = open_ok(&fx, &b, "f", "r", READ).await;
    assert_eq!(r.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    let r = open_as(&fx, &b, "f", "w", BOTH).await;
    assert_eq!(r.status, NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalls(&fake), [(sid.clone(), o.fh.clone())]);
    // Still outstanding: DELAY again, and no second recall.
    assert_eq!(open_as(&fx, &b, "f", "w", BOTH).await.status, NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalls(&fake).len(), 1);
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    let w = open_ok(&fx, &b, "f", "w", BOTH).await;
    assert_eq!(w.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    // A writer of a file both read breaks both delegations.
    let c = fx.client("c").await;
    assert_eq!(open_as(&fx, &c, "g", "w", BOTH).await.status, NFS4ERR_DELAY);
    settle().await;
    assert_eq!(recalls(&fake).len(), 2);
}

/// A's delegation on a fresh file `f`, B's `op` refused with DELAY and a
/// recall sent, then A returns it and B's `op` succeeds.
async fn recall_before(op_name: &str, ops: impl Fn(&NfsFh4) -> Vec<NfsArgop4>) {
    recall_before_in(1, op_name, ops).await
}

/// [`recall_before`] with B's COMPOUNDs in minor version `minor`.
async fn recall_before_in(minor: u32, op_name: &str, ops: impl Fn(&NfsFh4) -> Vec<NfsArgop4>) {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    let call = |ops: Vec<NfsArgop4>| {
        let mut all = vec![fx.sequence(&b)];
        all.extend(ops);
        fx.compound(minor, all)
    };
    let r = call(ops(&o.fh)).await;
    assert_eq!(r.status, NFS4ERR_DELAY, "{op_name}: {:?}", statuses(&r));
    settle().await;
    assert_eq!(recalls(&fake).len(), 1, "{op_name} recalls");
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    let r = call(ops(&o.fh)).await;
    assert_eq!(
        r.status,
        NFS4_OK,
        "{op_name} after the return: {:?}",
        statuses(&r)
    );
}

#[tokio::test]
async fn write_setattr_remove_rename_and_link_recall_first() {
    recall_before("WRITE", |fh| {
        vec![
            putfh(fh),
            write_op(&ANON, 0, StableHow4::UNSTABLE4, name("x")),
        ]
    })
    .await;
    recall_before("SETATTR", |fh| {
        vec![
            putfh(fh),
            NfsArgop4::OP_SETATTR(Setattr4args {
                stateid: ANON,
                obj_attributes: Fattr4 {
                    attrmask: vec![1 << FATTR4_SIZE],
                    attr_vals: Bytes::from_static(&[0; 8]),
                },
            }),
        ]
    })
    .await;
    recall_before("REMOVE", |_| {
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_REMOVE(Remove4args { target: name("f") }),
        ]
    })
    .await;
    recall_before("RENAME", |_| {
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_RENAME(Rename4args {
                oldname: name("f"),
                newname: name("g"),
            }),
        ]
    })
    .await;
    recall_before("LINK", |fh| {
        vec![
            putfh(fh),
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_LINK(Link4args { newname: name("h") }),
        ]
    })
    .await;
}

/// The NFSv4.2 operations that change a file recall a delegation on it
/// first, as WRITE does: ALLOCATE, DEALLOCATE, COPY and CLONE into it,
/// SETXATTR and REMOVEXATTR (its change attribute moves).
#[tokio::test]
async fn nfsv42_changes_recall_first() {
    recall_before_in(2, "ALLOCATE", |fh| {
        vec![putfh(fh), allocate_op(&ANON, 0, 4096)]
    })
    .await;
    recall_before_in(2, "DEALLOCATE", |fh| {
        vec![putfh(fh), deallocate_op(&ANON, 0, 4096)]
    })
    .await;
    recall_before_in(2, "COPY", |fh| {
        vec![
            putfh(fh),
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_COPY(Copy4args {
                ca_src_stateid: ANON,
                ca_dst_stateid: ANON,
                ca_src_offset: 0,
                ca_dst_offset: 0,
                ca_count: 0,
                ca_consecutive: true,
                ca_synchronous: true,
                ca_source_server: vec![],
            }),
        ]
    })
    .await;
    recall_before_in(2, "SETXATTR", |fh| {
        vec![
            putfh(fh),
            NfsArgop4::OP_SETXATTR(Setxattr4args {
                sxa_option: SetxattrOption4::SETXATTR4_EITHER,
                sxa_key: name("k"),
                sxa_value: Bytes::from_static(b"v"),
            }),
        ]
    })
    .await;
}

#[tokio::test]
async fn an_unanswered_recall_is_revoked_after_a_lease() {
    let fx = Fx::new(cfg(20, 0));
    let (a, fake) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    fake.answer(Answer::Ignore);
    assert_eq!(open_as(&fx, &b, "f", "w", BOTH).await.status, NFS4ERR_DELAY);
    fx.pass(secs(10), &[&a, &b]).await;
    assert_eq!(open_as(&fx, &b, "f", "w", BOTH).await.status, NFS4ERR_DELAY);
    fx.pass(secs(10), &[&a, &b]).await;
    // A lease after the recall, the lease timer revoked it.
    assert_eq!(fx.n.state.delegations(), 0);
    open_ok(&fx, &b, "f", "w", BOTH).await;
    assert_deleg_revoked(&fx, &a, &sid).await;
    let r = fx.call(&a, vec![putfh(&o.fh), read_op(&sid, 0, 1)]).await;
    assert_eq!(r.status, NFS4ERR_DELEG_REVOKED);
    assert_eq!(
        delegreturn(&fx, &a, &o.fh, &sid).await,
        NFS4ERR_DELEG_REVOKED
    );
    let r = fx.call(&a, vec![free_stateid(&sid)]).await;
    assert_eq!(r.status, NFS4_OK);
    let revoked = crate::nfs4::state::deleg::SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
    assert_eq!(fx.renew(&a).await.unwrap() & revoked, 0);
    assert_eq!(fx.tested(&a, &[sid]).await, [NFS4ERR_BAD_STATEID]);
}

#[tokio::test]
async fn a_lapsed_holder_loses_its_delegation_at_once() {
    let fx = Fx::new(cfg(20, 0));
    let (a, _fake) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    read_deleg(&open_ok(&fx, &a, "f", "o", READ).await);
    // A goes silent; B stays.
    fx.pass(secs(25), &[&b]).await;
    open_ok(&fx, &b, "f", "w", BOTH).await;
}

#[tokio::test]
async fn opens_under_a_delegation() {
    let fx = Fx::new(cfg(60, 0));
    let (a, _fake) = fx.client_with_back("a").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    let claim = |claim| {
        open_args(
            0,
            owner(a.clientid, "local"),
            READ,
            DENY_NONE,
            nocreate(),
            claim,
        )
    };
    let r = fx
        .call(
            &a,
            vec![
                putfh(&o.fh),
                claim(OpenClaim4::CLAIM_DELEG_CUR_FH(sid.clone())),
                NfsArgop4::OP_GETFH,
            ],
        )
        .await;
    let under = opened(&r, 2).unwrap_or_else(|| panic!("{:?}", statuses(&r)));
    assert_eq!(under.delegation, OpenDelegation4::OPEN_DELEGATE_NONE);
    let r = fx
        .call(
            &a,
            vec![
                NfsArgop4::OP_PUTROOTFH,
                claim(OpenClaim4::CLAIM_DELEGATE_CUR(OpenClaimDelegateCur4 {
                    delegate_stateid: sid.clone(),
                    file: name("f"),
                })),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4_OK);
    // Not a delegation, or another client's: refused.
    let b_sess = fx.client("b").await;
    let r = fx
        .call(&b_sess, vec![putfh(&o.fh), open_under(&b_sess, "x", &sid)])
        .await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    let r = fx
        .call(
            &a,
            vec![
                putfh(&o.fh),
                claim(OpenClaim4::CLAIM_DELEG_CUR_FH(o.stateid.clone())),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
}

#[tokio::test]
async fn a_client_expired_for_real_has_its_delegation_revoked_with_the_rest() {
    let fx = Fx::new(Nfs4Config {
        courtesy: crate::nfs4::state::Courtesy {
            max_age: secs(20),
            max_clients: 8,
        },
        ..cfg(10, 0)
    });
    let (a, _fake) = fx.client_with_back("a").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    fx.pass(secs(40), &[]).await;
    assert_eq!(fx.n.state.delegations(), 0);
    const EXPIRED_ALL_STATE_REVOKED: u32 = 0x8;
    let flags = fx.renew(&a).await.unwrap();
    assert_eq!(flags & EXPIRED_ALL_STATE_REVOKED, EXPIRED_ALL_STATE_REVOKED);
    assert_eq!(
        fx.tested(&a, &[sid.clone(), o.stateid.clone()]).await,
        [NFS4ERR_EXPIRED, NFS4ERR_EXPIRED]
    );
    for s in [&sid, &o.stateid] {
        assert_eq!(fx.call(&a, vec![free_stateid(s)]).await.status, NFS4_OK);
    }
    assert_eq!(fx.renew(&a).await.unwrap() & EXPIRED_ALL_STATE_REVOKED, 0);
}

/// NFSv3 and NLM ask the NFSv4 server's recaller before changing or
/// locking a file (`Nfs3::recall`): a delegation on it is recalled and
/// they hear "again later" until it is returned; files without one cost
/// nothing.
#[tokio::test]
async fn other_protocols_recall_through_the_recaller() {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake) = fx.client_with_back("a").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    let recall = fx.n.recaller();
    let (export, fid) = fx.n.key.open(&o.fh.0).unwrap();
    // Another file: nothing to recall.
    let (_, g) =
        fx.n.key
            .open(&open_ok(&fx, &a, "g", "o2", BOTH).await.fh.0)
            .unwrap();
    assert!(!recall(export, &g));
    assert!(recall(export, &fid), "a recall is under way");
    settle().await;
    assert_eq!(recalls(&fake).len(), 1);
    assert!(recall(export, &fid), "still out");
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    assert!(!recall(export, &fid), "returned: the change may go ahead");
}

/// A server over a file system that shares delegations (CephFS played by
/// `vfs::faulty`), its sweeper running and hooked to the file system's
/// recalls.
async fn backed_fx() -> (Fx, Arc<vfs::faulty::Faulty>) {
    let fs = Arc::new(vfs::faulty::Faulty::sharing_delegations(Arc::new(
        vfs::memory::MemFs::new(),
    )));
    let backend: Arc<dyn vfs::Backend> = fs.clone();
    let fx = Fx::with_export(cfg(60, 0), |e| e.backend = backend);
    fx.n.spawn_backend_delegations();
    // Its first tick hooks the export.
    settle().await;
    (fx, fs)
}

/// Waits (up to 5 s) for the sweeper, which gives back on a thread pool.
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(millis(5)).await;
    }
    panic!("{what}: not after 5 s");
}

/// A recall the file system sends while the server is still granting
/// (between the file system's delegation and the state core's) is not
/// lost: no NFS delegation is granted on it and the file system's is
/// given back, where before the NFS one stood unrecalled while the file
/// system's was held for the waiter until its deadline.
#[tokio::test]
async fn backed_a_recall_while_granting_grants_nothing_and_gives_back() {
    let (fx, fs) = backed_fx().await;
    let (a, fake) = fx.client_with_back("a").await;
    let o = open_ok(&fx, &a, "contested-f", "o", READ).await;
    assert!(
        !matches!(o.delegation, OpenDelegation4::OPEN_DELEGATE_READ(_)),
        "{:?}",
        o.delegation
    );
    let (_, fid) = fx.n.key.open(&o.fh.0).unwrap();
    until("given back", || !fs.delegated(&fid)).await;
    assert_eq!(fx.n.state.delegations(), 0);
    assert!(recalls(&fake).is_empty());
    // An uncontested file is delegated, backed by the file system's.
    let g = open_ok(&fx, &a, "g", "o", READ).await;
    let sid = read_deleg(&g);
    let (_, gfid) = fx.n.key.open(&g.fh.0).unwrap();
    assert!(fs.delegated(&gfid));
    assert_eq!(delegreturn(&fx, &a, &g.fh, &sid).await, NFS4_OK);
    until("given back once returned", || !fs.delegated(&gfid)).await;
}

/// A file the file system recalls: the holder is recalled, nobody gets a
/// new delegation on it meanwhile, and the file system's goes back once
/// the holder returns its own; after that (and the state core's pause
/// after a recall) the file can be delegated again.
#[tokio::test]
async fn backed_a_recalled_file_gets_no_new_delegation_until_given_back() {
    let (fx, fs) = backed_fx().await;
    let (a, fake) = fx.client_with_back("a").await;
    let (b, fb) = fx.client_with_back("b").await;
    let (o, sid) = read_delegated(&fx, &a).await;
    let (_, fid) = fx.n.key.open(&o.fh.0).unwrap();
    assert!(fs.want_elsewhere(&fid), "delegated in the file system");
    until("A recalled", || recalls(&fake).len() == 1).await;
    let r = open_ok(&fx, &b, "f", "r", READ).await;
    assert!(
        !matches!(r.delegation, OpenDelegation4::OPEN_DELEGATE_READ(_)),
        "a delegation on a recalled file: {:?}",
        r.delegation
    );
    assert!(fs.delegated(&fid), "held until A returns");
    assert_eq!(delegreturn(&fx, &a, &o.fh, &sid).await, NFS4_OK);
    until("given back", || !fs.delegated(&fid)).await;
    // Past the state core's own pause after a recall.
    fx.pass(secs(61), &[&a, &b]).await;
    let again = open_ok(&fx, &b, "f", "r2", READ).await;
    read_deleg(&again);
    assert!(fs.delegated(&fid));
    assert!(recalls(&fb).is_empty());
}
