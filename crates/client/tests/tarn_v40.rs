//! The NFSv4.0 client library against a real `tarn serve`: SETCLIENTID,
//! OPEN with OPEN_CONFIRM and the open owner's seqids, WRITE (UNSTABLE)
//! with COMMIT's verifier and READ back, locks of two owners in conflict
//! (LOCK, LOCKT, LOCKU), READDIR of 700 entries over many pages, the
//! namespace operations (CREATE of a directory and a symbolic link, LINK,
//! RENAME, REMOVE, SETATTR), and the [`Remote`] facade over 4.0.
//!
//!   cargo build -p tarn && TARN_BIN=... cargo test -p client --test tarn_v40

mod harness;

use bytes::Bytes;
use client::nfs4::{plain, ANON_STATEID};
use client::nfs40::{Client40, Options40};
use client::remote::{Remote, SetAttr, Stable};
use harness::*;
use proto::nfs4::*;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

/// LOCK by `c`'s own open owner, under its open `f`, for lock owner `l`.
async fn lock40(
    c: &Client40,
    f: &client::nfs40::Open40,
    l: &client::nfs40::LockOwner,
    locktype: NfsLockType4,
    offset: u64,
    length: u64,
) -> client::nfs4::Result<Result<Stateid4, Lock4denied>> {
    c.lock(c.open_owner(), f, l, locktype, offset, length).await
}

/// [`client`], and the export's root handle.
async fn client_and_root(t: &Tarn) -> (Arc<Client40>, NfsFh4) {
    let c = client(t).await;
    let root = plain::lookup_path(&*c, "/").await.unwrap();
    (c, root)
}

async fn client(t: &Tarn) -> Arc<Client40> {
    Client40::establish(conn(t.addr).await, &Options40::default())
        .await
        .expect("SETCLIENTID")
}

#[test]
fn open_write_commit_read_close() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let c = client(&t).await;
        assert!(c.lease().as_secs() > 0);
        let root = plain::lookup_path(&*c, "/").await.unwrap();
        // A new owner's first OPEN is confirmed: seqid 0 for OPEN, 1 for
        // OPEN_CONFIRM; the second OPEN needs none.
        let f = c
            .open(&root, "f", Some(0o640), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        assert_ne!(
            f.res.rflags & OPEN4_RESULT_CONFIRM,
            0,
            "first open confirmed"
        );
        assert_eq!(c.open_owner().next_seqid().await, 2);
        let g = c
            .open(&root, "g", Some(0o600), OPEN4_SHARE_ACCESS_READ)
            .await
            .unwrap();
        assert_eq!(g.res.rflags & OPEN4_RESULT_CONFIRM, 0);
        assert_eq!(c.open_owner().next_seqid().await, 3);

        let chunk = |i: u8| Bytes::from(vec![i; 100_000]);
        let mut verfs = vec![];
        for i in 0..3u8 {
            let w = plain::write(
                &*c,
                &f.stateid,
                &f.fh,
                i as u64 * 100_000,
                chunk(i + 1),
                StableHow4::UNSTABLE4,
            )
            .await
            .unwrap();
            assert_eq!(w.count, 100_000);
            verfs.push(w.writeverf);
        }
        let v = plain::commit(&*c, &f.fh, 0, 0).await.unwrap();
        assert!(verfs.iter().all(|w| *w == v), "one verifier");
        // Back under the open stateid, and the anonymous one.
        let r = plain::read(&*c, &f.stateid, &f.fh, 100_000, 100_000)
            .await
            .unwrap();
        assert_eq!(r.data, chunk(2));
        let r = plain::read(&*c, &ANON_STATEID, &f.fh, 250_000, 100_000)
            .await
            .unwrap();
        assert!(r.eof);
        assert_eq!(r.data, Bytes::from(vec![3u8; 50_000]));
        c.close(&f.fh, &f.stateid).await.unwrap();
        c.close(&g.fh, &g.stateid).await.unwrap();
        assert_eq!(c.open_owner().next_seqid().await, 5);
        // Closed: the stateid is gone, and the seqid did not move.
        let e = err(c.close(&f.fh, &f.stateid).await);
        assert!(
            matches!(
                e,
                Nfsstat4::NFS4ERR_BAD_STATEID | Nfsstat4::NFS4ERR_OLD_STATEID
            ),
            "{e:?}"
        );
        assert_eq!(c.open_owner().next_seqid().await, 5);

        let on_disk = t.export.join("f");
        assert_eq!(std::fs::metadata(&on_disk).unwrap().len(), 300_000);
        assert_eq!(std::fs::metadata(&on_disk).unwrap().mode() & 0o777, 0o640);
        c.renew().await.unwrap();
    });
}

#[test]
fn two_owners_lock_in_conflict() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let (a, b) = (client(&t).await, client(&t).await);
        let root = plain::lookup_path(&*a, "/").await.unwrap();
        let fa = a
            .open(&root, "locked", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let fb = b
            .open(&root, "locked", None, OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let la = a.new_lock_owner();
        let got = lock40(&a, &fa, &la, NfsLockType4::WRITE_LT, 0, 100)
            .await
            .unwrap()
            .expect("granted");
        assert_eq!(la.stateid().await, Some(got));
        // Another client's owner: denied, told who holds what.
        let lb = b.new_lock_owner();
        let denied = lock40(&b, &fb, &lb, NfsLockType4::WRITE_LT, 50, 10)
            .await
            .unwrap()
            .expect_err("conflict");
        assert_eq!((denied.offset, denied.length), (0, 100));
        assert_eq!(denied.owner.owner, la.owner.owner);
        let t1 = b
            .lockt(&fb.fh, NfsLockType4::READ_LT, 0, 1, &lb.owner)
            .await
            .unwrap();
        assert!(t1.is_some(), "LOCKT sees the lock");
        // A second lock owner of the same client conflicts too.
        let la2 = a.new_lock_owner();
        assert!(lock40(&a, &fa, &la2, NfsLockType4::READ_LT, 0, 1)
            .await
            .unwrap()
            .is_err());
        // The holder extends its lock (its lock stateid, its own seqid),
        // then releases all of it.
        lock40(&a, &fa, &la, NfsLockType4::WRITE_LT, 100, 100)
            .await
            .unwrap()
            .expect("its own range");
        assert_eq!(
            err(a.release_lock_owner(&la).await),
            Nfsstat4::NFS4ERR_LOCKS_HELD
        );
        a.locku(&fa.fh, &la, NfsLockType4::WRITE_LT, 0, 200)
            .await
            .unwrap();
        a.release_lock_owner(&la).await.unwrap();
        let lb2 = b.new_lock_owner();
        lock40(&b, &fb, &lb2, NfsLockType4::WRITE_LT, 50, 10)
            .await
            .unwrap()
            .expect("free now");
        b.locku(&fb.fh, &lb2, NfsLockType4::WRITE_LT, 50, 10)
            .await
            .unwrap();
        a.close(&fa.fh, &fa.stateid).await.unwrap();
        b.close(&fb.fh, &fb.stateid).await.unwrap();
    });
}

#[test]
fn readdir_of_700_entries() {
    let t = Tarn::start(&["--grace", "0"]);
    let dir = t.export.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..700 {
        std::fs::write(dir.join(format!("entry-with-a-longish-name-{i:04}")), b"x").unwrap();
    }
    run(async {
        let c = client(&t).await;
        let d = plain::lookup_path(&*c, "/many").await.unwrap();
        let es = plain::readdir_with(&*c, &d, &[FATTR4_TYPE, FATTR4_FILEID, FATTR4_SIZE])
            .await
            .unwrap();
        let mut names: Vec<_> = es.iter().map(|e| e.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 700);
        assert!(es.iter().all(|e| e.attrs.size == Some(1)));
    });
}

#[test]
fn namespace_operations() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let (c, root) = client_and_root(&t).await;
        let d = plain::mkdir(&*c, &root, "d", 0o750).await.unwrap();
        // Made by the client, so its own to link (protected_hardlinks).
        let o = c
            .open(&root, "f", Some(0o644), OPEN4_SHARE_ACCESS_WRITE)
            .await
            .unwrap();
        plain::write(
            &*c,
            &o.stateid,
            &o.fh,
            0,
            Bytes::from_static(b"data"),
            StableHow4::FILE_SYNC4,
        )
        .await
        .unwrap();
        c.close(&o.fh, &o.stateid).await.unwrap();
        let f = plain::lookup(&*c, &root, "f").await.unwrap();
        let l = plain::symlink(&*c, &d, "l", "../f").await.unwrap();
        assert_eq!(plain::readlink(&*c, &l).await.unwrap(), "../f");
        plain::link(&*c, &f, &d, "hard").await.unwrap();
        let a = plain::attrs(&*c, &f, &[FATTR4_NUMLINKS]).await.unwrap();
        assert_eq!(a.numlinks, Some(2));
        plain::rename(&*c, &d, "hard", &root, "moved")
            .await
            .unwrap();
        assert_eq!(std::fs::read(t.export.join("moved")).unwrap(), b"data");
        plain::remove(&*c, &root, "moved").await.unwrap();
        assert_eq!(
            err(plain::lookup(&*c, &root, "moved").await),
            Nfsstat4::NFS4ERR_NOENT
        );
        assert_eq!(
            err(plain::remove(&*c, &root, "d").await),
            Nfsstat4::NFS4ERR_NOTEMPTY
        );
        let set = client::nfs4::SetAttrs::mode(0o600);
        plain::setattr(&*c, &f, &ANON_STATEID, &set).await.unwrap();
        let m = std::fs::metadata(t.export.join("f")).unwrap().mode();
        assert_eq!(m & 0o777, 0o600);
        let mut names: Vec<_> = plain::readdir_with(&*c, &d, &[FATTR4_TYPE])
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.attrs.ftype))
            .collect();
        names.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(names, vec![("l".to_string(), Some(NfsFtype4::NF4LNK))]);
        plain::remove(&*c, &d, "l").await.unwrap();
        plain::remove(&*c, &root, "d").await.unwrap();
        assert!(!t.export.join("d").exists());
    });
}

#[test]
fn remote_over_v40() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let r = Remote::from_v40(client(&t).await).await.unwrap();
        assert_eq!(r.version(), "4.0");
        assert!(r.v40().is_some() && r.v4().is_none());
        assert!(r.wsize() >= 4096 && r.rsize() >= 4096);
        let root = r.lookup_path("/").await.unwrap();
        let f = r.open_write(&root, "w", 0o644, true).await.unwrap();
        let w = r
            .write(&f, 0, Bytes::from_static(b"hello"), Stable::Unstable)
            .await
            .unwrap();
        assert_eq!(r.commit(&f.fh).await.unwrap(), w.verf);
        r.close(&f).await.unwrap();
        let (data, eof) = r.read(&f.fh, 0, 100).await.unwrap();
        assert_eq!((&data[..], eof), (&b"hello"[..], true));
        let set = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        r.setattr(&f.fh, &set).await.unwrap();
        assert_eq!(r.stat(&f.fh).await.unwrap().mode, Some(0o600));
        let range = client::remote::Range { offset: 0, len: 0 };
        let held = r
            .lock(&f.fh, (&root, "w"), range, true, false)
            .await
            .unwrap()
            .expect("free");
        // Another client is refused while it is held.
        let other = Remote::from_v40(client(&t).await).await.unwrap();
        assert!(other
            .lock(&f.fh, (&root, "w"), range, true, false)
            .await
            .unwrap()
            .is_none());
        r.unlock(held).await.unwrap();
        let again = other
            .lock(&f.fh, (&root, "w"), range, false, false)
            .await
            .unwrap()
            .expect("released");
        other.unlock(again).await.unwrap();
        let fs = r.fsstat(&root).await.unwrap();
        assert!(fs.total > 0);
        assert_eq!(r.readdir(&root).await.unwrap().len(), 1);
        r.close_all().await;
    });
}

/// During the server's grace period OPEN gets NFS4ERR_GRACE: the client
/// sends it again, each time with the next seqid (GRACE moved it on),
/// until the grace period is over.
#[test]
fn grace_is_waited_out_with_the_next_seqid() {
    // A client on record (its state confirmed), then a restart: the
    // server has someone to wait for, so grace lasts.
    let mut t = Tarn::start(&["--grace", "0"]);
    run(async {
        let (c, root) = client_and_root(&t).await;
        c.open(&root, "kept", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
    });
    t.restart(&["--grace", "3"]);
    run(async {
        let (c, root) = client_and_root(&t).await;
        let t0 = std::time::Instant::now();
        let f = c
            .open(&root, "late", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        assert!(t0.elapsed() > std::time::Duration::from_secs(1), "waited");
        let n = c.open_owner().next_seqid().await;
        assert!(n > 2, "GRACE answers moved the seqid on: {n}");
        c.close(&f.fh, &f.stateid).await.unwrap();
        assert_eq!(c.open_owner().next_seqid().await, n + 1);
    });
}

/// A seqid the server does not expect: NFS4ERR_BAD_SEQID is reported and
/// the owner's seqid stays where it was.
#[test]
fn bad_seqid_is_reported_and_does_not_advance() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let (c, root) = client_and_root(&t).await;
        let f = c
            .open(&root, "f", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let n = c.open_owner().next_seqid().await;
        // Someone else (here: raw COMPOUNDs) moves the owner's seqid on
        // twice behind the client's back.
        for seqid in [n, n + 1] {
            let r = c
                .conn()
                .compound(
                    0,
                    vec![
                        putfh(&root),
                        NfsArgop4::OP_OPEN(Open4args {
                            seqid,
                            share_access: OPEN4_SHARE_ACCESS_READ,
                            share_deny: OPEN4_SHARE_DENY_NONE,
                            owner: c.open_owner().owner.clone(),
                            openhow: Openflag4::Default(Opentype4::OPEN4_NOCREATE),
                            claim: OpenClaim4::CLAIM_NULL(name("f")),
                        }),
                    ],
                )
                .await
                .unwrap();
            assert_eq!(r.status, Nfsstat4::NFS4_OK);
        }
        assert_eq!(
            err(c.close(&f.fh, &f.stateid).await),
            Nfsstat4::NFS4ERR_BAD_SEQID
        );
        assert_eq!(c.open_owner().next_seqid().await, n, "not advanced");
    });
}
