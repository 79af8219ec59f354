//! change_info of the operations that change a directory's names: atomic
//! (the namespace lock brackets each change), and consecutive changes
//! chain, one's `after` the next one's `before`, as a client that keeps
//! its caches on an atomic change_info relies on.

use super::*;

fn cinfo_of(r: &Compound4res) -> Vec<ChangeInfo4> {
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{:?}", statuses(r));
    match r.resarray.last().unwrap() {
        NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => vec![ok.cinfo.clone()],
        NfsResop4::OP_CREATE(Create4res::NFS4_OK(ok)) => vec![ok.cinfo.clone()],
        NfsResop4::OP_REMOVE(Remove4res::NFS4_OK(ok)) => vec![ok.cinfo.clone()],
        NfsResop4::OP_LINK(Link4res::NFS4_OK(ok)) => vec![ok.cinfo.clone()],
        // Within one directory: source and target are the same change.
        NfsResop4::OP_RENAME(Rename4res::NFS4_OK(ok)) => {
            assert_eq!(ok.source_cinfo, ok.target_cinfo);
            vec![ok.source_cinfo.clone()]
        }
        other => panic!("no change_info in {other:?}"),
    }
}

#[tokio::test]
async fn namespace_changes_report_atomic_chained_change_info() {
    let fx = Fx::new(cfg(90, 0));
    let s = fx.client("c").await;
    let owner = owner(s.clientid, "o");
    let steps: Vec<(&str, Vec<NfsArgop4>)> = vec![
        (
            "OPEN(create)",
            vec![
                NfsArgop4::OP_PUTROOTFH,
                open_named(0, owner, BOTH, create(), "a"),
            ],
        ),
        ("CREATE", vec![NfsArgop4::OP_PUTROOTFH, mkdir_op("d")]),
        (
            "RENAME",
            vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_SAVEFH,
                NfsArgop4::OP_RENAME(Rename4args {
                    oldname: name("a"),
                    newname: name("b"),
                }),
            ],
        ),
        (
            "REMOVE",
            vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_REMOVE(Remove4args { target: name("b") }),
            ],
        ),
    ];
    let mut last: Option<u64> = None;
    for (what, ops) in steps {
        let r = fx.call(&s, ops).await;
        for ci in cinfo_of(&r) {
            assert!(ci.atomic, "{what}: {ci:?}");
            assert_ne!(ci.before, ci.after, "{what}: the directory changed");
            if let Some(prev) = last {
                assert_eq!(ci.before, prev, "{what}: nothing changed in between");
            }
            last = Some(ci.after);
        }
    }
}
