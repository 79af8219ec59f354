//! Directory delegations (GET_DIR_DELEGATION), recall only: when one is
//! granted and when GDD4_UNAVAIL answers instead; the recall and
//! NFS4ERR_DELAY (NFS3ERR_JUKEBOX) before another client's or NFSv3's
//! change of the directory's entries or attributes; none for the holder's
//! own changes or for readers; DELEGRETURN and revocation.

use super::*;
use crate::nfs3::Nfs3;
use crate::test_util::{dirop, sattr};
use proto::nfs3;

/// The export root, where the tests' delegated directory is.
fn root() -> Vec<NfsArgop4> {
    vec![NfsArgop4::OP_PUTROOTFH]
}

/// The handle GETFH answered last in `r`.
fn last_fh(r: &Compound4res) -> NfsFh4 {
    r.resarray
        .iter()
        .rev()
        .find_map(|op| match op {
            NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => Some(ok.object.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no GETFH in {:?}", statuses(r)))
}

/// GET_DIR_DELEGATION by `s` on the directory `at` makes current: the
/// non-fatal answer.
async fn ask(fx: &Fx, s: &Sess, at: Vec<NfsArgop4>) -> GetDirDelegation4resNonFatal {
    let mut ops = at;
    ops.push(get_dir_delegation_op());
    let r = fx.call(s, ops).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_GET_DIR_DELEGATION(GetDirDelegation4res::NFS4_OK(nf))) => nf.clone(),
        _ => panic!("GET_DIR_DELEGATION: {:?}", statuses(&r)),
    }
}

/// [`ask`], which must grant one with no notifications: its stateid.
async fn dir_delegated(fx: &Fx, s: &Sess, at: Vec<NfsArgop4>) -> Stateid4 {
    match ask(fx, s, at).await {
        GetDirDelegation4resNonFatal::GDD4_OK(ok) => {
            assert_eq!(ok.gddr_notification, Vec::<u32>::new());
            assert_eq!(ok.gddr_child_attributes, Vec::<u32>::new());
            assert_eq!(ok.gddr_dir_attributes, Vec::<u32>::new());
            ok.gddr_stateid
        }
        r => panic!("no directory delegation: {r:?}"),
    }
}

const UNAVAIL: GetDirDelegation4resNonFatal = GetDirDelegation4resNonFatal::GDD4_UNAVAIL(false);

/// What a test's directory holds: the root (delegated), a directory `e`
/// beside, a file `f` in the root and a file `g` in `e`, all made by the
/// holder A before it asked.
struct Tree {
    root: NfsFh4,
    e: NfsFh4,
    g: NfsFh4,
}

/// A (with a back channel) makes the [`Tree`] and holds a delegation on
/// its root; B is another client, without one.
async fn holder_and_other(fx: &Fx) -> (Sess, Arc<FakeBack>, Sess, Tree, Stateid4) {
    let (a, fake) = fx.client_with_back("a").await;
    let b = fx.client("b").await;
    open_ok(fx, &a, "f", "o", BOTH).await;
    let r = fx
        .call(
            &a,
            vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("e"), NfsArgop4::OP_GETFH],
        )
        .await;
    let e = last_fh(&r);
    let owner = owner(a.clientid, "o");
    let r = fx
        .call(
            &a,
            vec![
                putfh(&e),
                open_named(0, owner, BOTH, create(), "g"),
                NfsArgop4::OP_GETFH,
            ],
        )
        .await;
    let g = last_fh(&r);
    let r = fx
        .call(&a, vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH])
        .await;
    let root = last_fh(&r);
    let sid = dir_delegated(fx, &a, self::root()).await;
    (a, fake, b, Tree { root, e, g }, sid)
}

#[tokio::test]
async fn a_directory_delegation_is_granted_until_returned() {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake, _b, t, sid) = holder_and_other(&fx).await;
    assert_eq!(fx.n.state.delegations(), 1);
    assert_eq!(fx.tested(&a, std::slice::from_ref(&sid)).await, [NFS4_OK]);
    // One per client and directory.
    assert_eq!(ask(&fx, &a, root()).await, UNAVAIL);
    // Not a stateid for I/O.
    let o = open_ok(&fx, &a, "f", "o2", OPEN4_SHARE_ACCESS_READ).await;
    let r = fx.call(&a, vec![putfh(&o.fh), read_op(&sid, 0, 1)]).await;
    assert_eq!(r.status, NFS4ERR_BAD_STATEID);
    // A file is no directory.
    let r = fx
        .call(&a, vec![putfh(&t.g), get_dir_delegation_op()])
        .await;
    assert_eq!(r.status, NFS4ERR_NOTDIR);
    assert_eq!(delegreturn(&fx, &a, &t.root, &sid).await, NFS4_OK);
    // The read delegation on f stays.
    assert_eq!(fx.n.state.delegations(), 1);
    assert_eq!(
        delegreturn(&fx, &a, &t.root, &sid).await,
        NFS4ERR_BAD_STATEID
    );
    // Returned unasked: no recall, and it may be had again at once.
    assert!(recalls(&fake).is_empty());
    dir_delegated(&fx, &a, root()).await;
}

#[tokio::test]
async fn who_gets_none_is_told_unavailable() {
    // No back channel.
    let fx = Fx::new(cfg(60, 0));
    let plain = fx.client("plain").await;
    assert_eq!(ask(&fx, &plain, root()).await, UNAVAIL);
    // An export that grants no delegations.
    let fx = Fx::with_delegations(cfg(60, 0), crate::export::Delegations::None);
    let (a, _fa) = fx.client_with_back("a").await;
    assert_eq!(ask(&fx, &a, root()).await, UNAVAIL);
    // The bound on delegations, file ones counting.
    let fx = capped_delegations(1);
    let (a, _fa) = fx.client_with_back("a").await;
    read_deleg(&open_ok(&fx, &a, "f", "o", OPEN4_SHARE_ACCESS_READ).await);
    assert_eq!(ask(&fx, &a, root()).await, UNAVAIL);
    assert_eq!(fx.n.state.delegations(), 1);
}

/// B's `ops` on the [`Tree`] A holds a delegation on: NFS4ERR_DELAY and a
/// recall of it, then once A returned it the same ops succeed.
async fn recall_before(op_name: &str, ops: impl Fn(&Fx, &Sess, &Tree) -> Vec<NfsArgop4>) {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake, b, t, sid) = holder_and_other(&fx).await;
    let r = fx.call(&b, ops(&fx, &b, &t)).await;
    assert_eq!(r.status, NFS4ERR_DELAY, "{op_name}: {:?}", statuses(&r));
    settle().await;
    assert_eq!(recalls(&fake), [(sid.clone(), t.root.clone())], "{op_name}");
    // Still out: DELAY again, no second recall.
    let r = fx.call(&b, ops(&fx, &b, &t)).await;
    assert_eq!(r.status, NFS4ERR_DELAY, "{op_name} again");
    settle().await;
    assert_eq!(recalls(&fake).len(), 1, "{op_name}");
    assert_eq!(delegreturn(&fx, &a, &t.root, &sid).await, NFS4_OK);
    let r = fx.call(&b, ops(&fx, &b, &t)).await;
    assert_eq!(
        r.status,
        NFS4_OK,
        "{op_name} after the return: {:?}",
        statuses(&r)
    );
    // Recalled a moment ago: none again for a while.
    assert_eq!(ask(&fx, &a, root()).await, UNAVAIL, "{op_name}");
}

#[tokio::test]
async fn another_clients_changes_of_the_entries_recall_first() {
    recall_before("OPEN(create)", |_, b, _| {
        open_ops(b, "new", "o", BOTH, DENY_NONE)
    })
    .await;
    recall_before("CREATE", |_, _, _| {
        vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("m")]
    })
    .await;
    recall_before("REMOVE", |_, _, _| {
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_REMOVE(Remove4args { target: name("f") }),
        ]
    })
    .await;
    let rename = |from: &NfsFh4, old: &str, to: &NfsFh4, new: &str| {
        vec![
            putfh(from),
            NfsArgop4::OP_SAVEFH,
            putfh(to),
            NfsArgop4::OP_RENAME(Rename4args {
                oldname: name(old),
                newname: name(new),
            }),
        ]
    };
    recall_before("RENAME out of", |_, _, t| rename(&t.root, "f", &t.e, "f")).await;
    recall_before("RENAME into", |_, _, t| rename(&t.e, "g", &t.root, "g")).await;
    recall_before("LINK into", |_, _, t| {
        vec![
            putfh(&t.g),
            NfsArgop4::OP_SAVEFH,
            putfh(&t.root),
            NfsArgop4::OP_LINK(Link4args { newname: name("h") }),
        ]
    })
    .await;
    // time_modify set to the server's time (a writer may).
    recall_before("SETATTR of the directory", |_, _, t| {
        vec![
            putfh(&t.root),
            NfsArgop4::OP_SETATTR(Setattr4args {
                stateid: Stateid4 {
                    seqid: 0,
                    other: [0; 12],
                },
                obj_attributes: Fattr4 {
                    attrmask: vec![0, 1 << (FATTR4_TIME_MODIFY_SET - 32)],
                    attr_vals: Bytes::from_static(&[0; 4]),
                },
            }),
        ]
    })
    .await;
}

#[tokio::test]
async fn the_holders_own_changes_and_readers_recall_nothing() {
    let fx = Fx::new(cfg(60, 0));
    let (a, fake, b, t, sid) = holder_and_other(&fx).await;
    // The holder creates, renames, links and removes in its directory.
    open_ok(&fx, &a, "mine", "o", BOTH).await;
    for ops in [
        vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("m")],
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_RENAME(Rename4args {
                oldname: name("mine"),
                newname: name("mine2"),
            }),
        ],
        vec![
            putfh(&t.g),
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_LINK(Link4args { newname: name("h") }),
        ],
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_REMOVE(Remove4args { target: name("h") }),
        ],
    ] {
        let r = fx.call(&a, ops).await;
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    }
    // Another client looks, reads and opens existing files.
    let r = fx
        .call(
            &b,
            vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_GETATTR(Getattr4args {
                    attr_request: vec![1 << FATTR4_CHANGE | 1 << FATTR4_SIZE],
                }),
                NfsArgop4::OP_LOOKUP(Lookup4args { objname: name("f") }),
            ],
        )
        .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    open_ok(&fx, &b, "f", "r", BOTH).await;
    // A change in another directory is none of its business.
    let r = fx.call(&b, vec![putfh(&t.e), mkdir_op("x")]).await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    settle().await;
    assert!(recalls(&fake).is_empty());
    assert_eq!(fx.tested(&a, &[sid]).await, [NFS4_OK]);
}

#[tokio::test]
async fn a_holder_that_does_not_return_it_loses_it() {
    let fx = Fx::new(cfg(20, 0));
    let (a, fake, b, t, sid) = holder_and_other(&fx).await;
    fake.answer(Answer::Ignore);
    let create = || vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("m")];
    assert_eq!(fx.call(&b, create()).await.status, NFS4ERR_DELAY);
    fx.pass(secs(10), &[&a, &b]).await;
    assert_eq!(fx.call(&b, create()).await.status, NFS4ERR_DELAY);
    fx.pass(secs(10), &[&a, &b]).await;
    // A lease after the recall: revoked, and the change goes ahead.
    assert_eq!(fx.n.state.delegations(), 0);
    assert_eq!(fx.call(&b, create()).await.status, NFS4_OK);
    assert_deleg_revoked(&fx, &a, &sid).await;
    assert_eq!(
        delegreturn(&fx, &a, &t.root, &sid).await,
        NFS4ERR_DELEG_REVOKED
    );
    assert_eq!(fx.call(&a, vec![free_stateid(&sid)]).await.status, NFS4_OK);
}

#[tokio::test]
async fn a_lapsed_holders_delegation_gives_way_at_once() {
    let fx = Fx::new(cfg(20, 0));
    let (_a, fake, b, _t, _sid) = holder_and_other(&fx).await;
    fx.pass(secs(25), &[&b]).await;
    let r = fx
        .call(&b, vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("m")])
        .await;
    assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
    settle().await;
    assert!(recalls(&fake).is_empty());
    assert_eq!(fx.n.state.delegations(), 0);
}

/// An NFSv3 server beside the NFSv4 one, over the same export and handle
/// key, asking it to recall as `tarn serve` wires them.
fn nfs3_beside(fx: &Fx) -> Nfs3 {
    let mut n = Nfs3::new(fx.live.clone(), fx.key.clone(), Pool::new(2));
    n.recall = Some(fx.n.recaller());
    n
}

/// An NFSv3 call of procedure `proc_` with arguments `args` (XDR): the
/// status its reply starts with.
async fn nfs3_status(n: &Nfs3, proc_: u32, args: &Bytes) -> nfs3::Nfsstat3 {
    let ctx = call_ctx(
        1,
        (nfs3::NFS_PROGRAM, 3, proc_),
        user_1000(),
        "127.0.0.1:900",
    );
    let mut out = BytesMut::new();
    n.dispatch(&ctx, Decoder::new(args.clone()), &mut out)
        .await
        .unwrap();
    xdr::from_bytes(out.freeze().slice(..4)).unwrap()
}

/// The NFSv3 handle of an NFSv4 one.
fn fh3(fh: &NfsFh4) -> nfs3::NfsFh3 {
    nfs3::NfsFh3 { data: fh.0.clone() }
}

#[tokio::test]
async fn nfsv3_changes_of_the_entries_recall_first() {
    use nfs3::*;
    type Call = fn(&Tree) -> (u32, Bytes);
    let calls: [(&str, Call); 5] = [
        ("CREATE", |t| {
            let how = Createhow3::GUARDED(sattr(Some(0o644)));
            let args = Create3args {
                r#where: dirop(&fh3(&t.root), "new"),
                how,
            };
            (NFSPROC3_CREATE, xdr::to_bytes(&args))
        }),
        ("MKDIR", |t| {
            let args = Mkdir3args {
                r#where: dirop(&fh3(&t.root), "m"),
                attributes: sattr(Some(0o755)),
            };
            (NFSPROC3_MKDIR, xdr::to_bytes(&args))
        }),
        ("REMOVE", |t| {
            let args = Remove3args {
                object: dirop(&fh3(&t.root), "f"),
            };
            (NFSPROC3_REMOVE, xdr::to_bytes(&args))
        }),
        ("RENAME into", |t| {
            let args = Rename3args {
                from: dirop(&fh3(&t.e), "g"),
                to: dirop(&fh3(&t.root), "g"),
            };
            (NFSPROC3_RENAME, xdr::to_bytes(&args))
        }),
        ("LINK", |t| {
            let args = Link3args {
                file: fh3(&t.g),
                link: dirop(&fh3(&t.root), "h"),
            };
            (NFSPROC3_LINK, xdr::to_bytes(&args))
        }),
    ];
    for (what, call) in calls {
        let fx = Fx::new(cfg(60, 0));
        let (a, fake, _b, t, sid) = holder_and_other(&fx).await;
        let held = (&a, &*fake, &t.root, &sid);
        nfs3_waits_for_the_recall(&fx, call(&t), held, what).await;
    }
}

/// NFSv3 call `(proc_, args)` answers NFS3ERR_JUKEBOX and recalls `sid`
/// (on `fh`) from `a`; once it is returned, the call succeeds.
async fn nfs3_waits_for_the_recall(
    fx: &Fx,
    (proc_, args): (u32, Bytes),
    (a, fake, fh, sid): (&Sess, &FakeBack, &NfsFh4, &Stateid4),
    what: &str,
) {
    let n3 = nfs3_beside(fx);
    let status = nfs3_status(&n3, proc_, &args).await;
    assert_eq!(status, nfs3::Nfsstat3::NFS3ERR_JUKEBOX, "{what}");
    settle().await;
    assert_eq!(recalls(fake), [(sid.clone(), fh.clone())], "{what}");
    assert_eq!(delegreturn(fx, a, fh, sid).await, NFS4_OK);
    let status = nfs3_status(&n3, proc_, &args).await;
    assert_eq!(status, nfs3::Nfsstat3::NFS3_OK, "{what}");
}

/// An NFSv3 REMOVE or RENAME of a file an NFSv4 client holds a read
/// delegation on recalls it first (NFS3ERR_JUKEBOX meanwhile), as the
/// NFSv4 operations do: the holder would otherwise keep serving the
/// removed or replaced file's data from its cache.
#[tokio::test]
async fn nfsv3_removal_of_a_delegated_file_recalls_it() {
    use nfs3::*;
    type Call = fn(&NfsFh4) -> (u32, Bytes);
    let calls: [(&str, Call); 3] = [
        ("REMOVE", |root| {
            let args = Remove3args {
                object: dirop(&fh3(root), "v"),
            };
            (NFSPROC3_REMOVE, xdr::to_bytes(&args))
        }),
        ("RENAME from", |root| {
            let args = Rename3args {
                from: dirop(&fh3(root), "v"),
                to: dirop(&fh3(root), "w"),
            };
            (NFSPROC3_RENAME, xdr::to_bytes(&args))
        }),
        ("RENAME over", |root| {
            let args = Rename3args {
                from: dirop(&fh3(root), "f"),
                to: dirop(&fh3(root), "v"),
            };
            (NFSPROC3_RENAME, xdr::to_bytes(&args))
        }),
    ];
    for (what, call) in calls {
        let fx = Fx::new(cfg(60, 0));
        let (a, fake) = fx.client_with_back("a").await;
        let b = fx.client("b").await;
        for name in ["f", "v"] {
            let made = open_ok(&fx, &b, name, "o", BOTH).await;
            let r = fx
                .call(&b, vec![putfh(&made.fh), close_op(0, &made.stateid)])
                .await;
            assert_eq!(r.status, NFS4_OK);
        }
        let o = open_ok(&fx, &a, "v", "o", OPEN4_SHARE_ACCESS_READ).await;
        let sid = read_deleg(&o);
        let r = fx
            .call(&a, vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH])
            .await;
        let root = last_fh(&r);
        let held = (&a, &*fake, &o.fh, &sid);
        nfs3_waits_for_the_recall(&fx, call(&root), held, what).await;
    }
}
