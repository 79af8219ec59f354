//! The NFSv4 pseudo filesystem joining several exports (RFC 8881 §7):
//! PUTROOTFH lands in a pseudo directory, LOOKUP crosses into exports and
//! LOOKUPP back out, each export has its own fsid, export roots report the
//! fileid of the directory they are mounted on, and pseudo directories are
//! read-only.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_pseudo

mod harness;

use client::nfs4::attr::decode;
use harness::*;
use proto::nfs4::*;

const BITS: [u32; 4] = [
    FATTR4_TYPE,
    FATTR4_FSID,
    FATTR4_FILEID,
    FATTR4_MOUNTED_ON_FILEID,
];

#[test]
fn pseudo_root_joins_exports() {
    let t = Tarn::start_exports(&[("a", "/data/a"), ("b", "/data/b"), ("c", "/c")]);
    run(async {
        let s = session(t.addr).await;
        let root = s.lookup_path("/").await.unwrap();
        let ra = decode(&s.getattr(&root, &BITS).await.unwrap()).unwrap();
        assert_eq!(ra.ftype, Some(NfsFtype4::NF4DIR));
        // The pseudo root lists what leads to exports.
        let mut names = readdir_names(&s, &root).await;
        names.sort();
        assert_eq!(names, ["c", "data"]);
        let data = s.lookup(&root, "data").await.unwrap();
        let a = s.lookup(&data, "a").await.unwrap();
        let b = s.lookup_path("/data/b").await.unwrap();
        let c = s.lookup_path("/c").await.unwrap();
        let (fa, fb, fc, fd) = (
            decode(&s.getattr(&a, &BITS).await.unwrap()).unwrap(),
            decode(&s.getattr(&b, &BITS).await.unwrap()).unwrap(),
            decode(&s.getattr(&c, &BITS).await.unwrap()).unwrap(),
            decode(&s.getattr(&data, &BITS).await.unwrap()).unwrap(),
        );
        // Distinct fsids: each export, and the pseudo filesystem.
        let fsids = [fa.fsid, fb.fsid, fc.fsid, fd.fsid];
        for i in 0..4 {
            for j in i + 1..4 {
                assert_ne!(fsids[i], fsids[j], "fsids {i} and {j} differ");
            }
        }
        // An export root reports the pseudo directory entry it is mounted on.
        assert!(fa.mounted_on_fileid.is_some());
        assert_ne!(fa.mounted_on_fileid, fa.fileid);
        // Files in export a are not visible in b; LOOKUPP leads back out.
        let (_, f) = s.open(&a, "in-a", Some(0o644), 3).await.unwrap();
        assert_eq!(err(s.lookup(&b, "in-a").await), Nfsstat4::NFS4ERR_NOENT);
        // LOOKUPP of a file is NOTDIR (RFC 8881 §18.14.3).
        let r = s.call(vec![putfh(&f), NfsArgop4::OP_LOOKUPP]).await;
        assert_eq!(err(r), Nfsstat4::NFS4ERR_NOTDIR);
        let up = s
            .call(vec![
                putfh(&a),
                NfsArgop4::OP_LOOKUPP,
                NfsArgop4::OP_GETFH,
                NfsArgop4::OP_LOOKUPP,
                NfsArgop4::OP_GETFH,
            ])
            .await
            .unwrap();
        let NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh)) = &up[2] else {
            panic!("{up:?}")
        };
        assert_eq!(fh.object, data, "LOOKUPP from export a's root is /data");
        let NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh)) = &up[4] else {
            panic!("{up:?}")
        };
        assert_eq!(fh.object, root, "and from /data the root");
        // Pseudo directories cannot change.
        assert_eq!(
            err(s.mkdir(&data, "new", 0o755).await),
            Nfsstat4::NFS4ERR_ROFS
        );
        assert_eq!(
            err(s.lookup(&root, "nonesuch").await),
            Nfsstat4::NFS4ERR_NOENT
        );
        s.destroy().await.ok();
    });
}
