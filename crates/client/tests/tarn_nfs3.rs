//! The NFSv3 client library against a real `tarn serve`: the procedures
//! (CREATE in its three modes, WRITE stable and not with COMMIT's
//! verifier, READ to the end, SETATTR, ACCESS, LINK, SYMLINK/READLINK,
//! RENAME, RMDIR of a full directory, READDIRPLUS over many pages, FSSTAT
//! and FSINFO's sizes), NLM locks between two owners, and exports chosen
//! by the path (the longest enclosing one, mounted on first use).
//!
//!   cargo build -p tarn && TARN_BIN=... cargo test -p client --test tarn_nfs3

mod harness;

use bytes::Bytes;
use client::nfs3::*;
use client::nfs4::Security;
use harness::*;
use proto::nfs3::*;
use std::os::unix::fs::MetadataExt;

fn opts() -> Nfs3Options {
    Nfs3Options {
        security: Security::Sys { uid: UID, gid: GID },
        sys_ids: (UID, GID),
        machine: "tarn-nfs3-test".into(),
        mount_port: None,
        transport: Default::default(),
    }
}

fn status<T: std::fmt::Debug>(r: Result<T>) -> Nfsstat3 {
    r.expect_err("should fail").status().expect("an NFS status")
}

fn sattr(mode: u32) -> Sattr3 {
    ops::sattr_mode(mode)
}

#[test]
fn procedures() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let c = Nfs3::connect(t.addr, opts(), "/").await.unwrap();
        assert_eq!(c.mounted(), vec!["/".to_string()]);
        assert!(c.rsize() >= 4096 && c.rsize() <= MAX_IO, "{}", c.rsize());
        assert!(c.wsize() >= 4096 && c.wsize() <= MAX_IO, "{}", c.wsize());
        let root = c.lookup_path("/").await.unwrap();

        // CREATE: guarded fails on an existing name, unchecked does not;
        // exclusive is idempotent for its verifier only.
        let f = c
            .create(&root, "f", Createhow3::GUARDED(sattr(0o640)))
            .await
            .unwrap();
        assert_eq!(
            status(
                c.create(&root, "f", Createhow3::GUARDED(sattr(0o640)))
                    .await
            ),
            Nfsstat3::NFS3ERR_EXIST
        );
        let again = c
            .create(&root, "f", Createhow3::UNCHECKED(sattr(0o600)))
            .await
            .unwrap();
        assert_eq!(again, f);
        // EXCLUSIVE: the verifier sits in the times until the client sets
        // them (done by `create`); after that the name simply exists.
        let x = c
            .create(&root, "x", Createhow3::EXCLUSIVE(*b"verifier"))
            .await
            .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32;
        let mtime = c.getattr(&x).await.unwrap().mtime.seconds;
        assert!(
            mtime.abs_diff(now) < 60,
            "times set after the create: {mtime}"
        );
        assert_eq!(
            status(
                c.create(&root, "x", Createhow3::EXCLUSIVE(*b"another!"))
                    .await
            ),
            Nfsstat3::NFS3ERR_EXIST
        );
        assert_eq!(
            std::fs::metadata(t.export.join("f")).unwrap().mode() & 0o777,
            0o640
        );

        // WRITE: UNSTABLE with the verifier COMMIT returns; FILE_SYNC.
        let chunk = Bytes::from(vec![b'a'; 100_000]);
        let mut verfs = vec![];
        for i in 0..3u64 {
            let w = c
                .write(&f, i * 100_000, chunk.clone(), StableHow::UNSTABLE)
                .await
                .unwrap();
            assert_eq!(w.count, 100_000);
            verfs.push(w.verf);
        }
        let v = c.commit(&f, 0, 0).await.unwrap();
        assert!(verfs.iter().all(|w| *w == v));
        let w = c
            .write(
                &f,
                300_000,
                Bytes::from_static(b"end"),
                StableHow::FILE_SYNC,
            )
            .await
            .unwrap();
        assert_eq!(w.committed, StableHow::FILE_SYNC);
        let r = c.read(&f, 299_998, 100).await.unwrap();
        assert_eq!((&r.data[..], r.eof), (&b"aaend"[..], true));
        assert_eq!(c.getattr(&f).await.unwrap().size, 300_003);
        let after = c
            .setattr(
                &f,
                Sattr3 {
                    size: Some(5),
                    ..ops::sattr_none()
                },
            )
            .await
            .unwrap();
        assert_eq!(after.map(|a| a.size), Some(5));
        let bits = ACCESS3_READ | ACCESS3_MODIFY;
        assert_eq!(c.access(&f, bits).await.unwrap() & bits, bits);

        // LINK, SYMLINK and READLINK, RENAME.
        c.link(&f, &root, "f2").await.unwrap();
        assert_eq!(c.getattr(&f).await.unwrap().nlink, 2);
        let l = c.symlink(&root, "l", "f").await.unwrap();
        assert_eq!(&c.readlink(&l).await.unwrap()[..], b"f");
        assert_eq!(c.getattr(&l).await.unwrap().r#type, Ftype3::NF3LNK);
        c.rename(&root, "f2", &root, "f3").await.unwrap();
        assert_eq!(status(c.lookup(&root, "f2").await), Nfsstat3::NFS3ERR_NOENT);

        // A directory of many entries: READDIRPLUS pages through it.
        let d = c.mkdir(&root, "d", 0o755).await.unwrap();
        for i in 0..700 {
            c.create(
                &d,
                &format!("entry-with-a-longish-name-{i:04}"),
                Createhow3::UNCHECKED(sattr(0o644)),
            )
            .await
            .unwrap();
        }
        let list = c.readdir(&d).await.unwrap();
        assert_eq!(list.len(), 700);
        assert!(list.iter().all(|e| e.attrs.is_some() && e.fh.is_some()));
        let mut names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 700, "no entry twice");
        assert_eq!(
            status(c.rmdir(&root, "d").await),
            Nfsstat3::NFS3ERR_NOTEMPTY
        );
        assert_eq!(
            status(c.remove(&root, "nothing").await),
            Nfsstat3::NFS3ERR_NOENT
        );

        let fs = c.fsstat(&root).await.unwrap();
        assert!(fs.tbytes > 0 && fs.abytes <= fs.tbytes);
        let e = c.lookup_path("/d/missing").await.unwrap_err();
        assert_eq!(describe(e.status().unwrap()), "no such file or directory");
    });
}

#[test]
fn nlm_locks_between_two_owners() {
    let t = Tarn::start(&["--grace", "0"]);
    std::fs::write(t.export.join("lk"), b"").unwrap();
    run(async {
        let c = Nfs3::connect(t.addr, opts(), "/").await.unwrap();
        let fh = c.lookup_path("/lk").await.unwrap();
        let a = LockOwner {
            oh: Bytes::from_static(b"owner-a"),
            svid: 1,
        };
        let b = LockOwner {
            oh: Bytes::from_static(b"owner-b"),
            svid: 2,
        };
        let range = |exclusive, offset| LockRange {
            offset,
            len: 10,
            exclusive,
        };
        assert!(c.nlm_lock(&fh, &a, range(true, 0), false).await.unwrap());
        assert!(!c.nlm_lock(&fh, &b, range(false, 5), false).await.unwrap());
        assert!(c.nlm_lock(&fh, &b, range(true, 10), false).await.unwrap());
        let h = c.nlm_test(&fh, &b, range(true, 0)).await.unwrap().unwrap();
        assert!(h.exclusive);
        assert_eq!((h.svid, h.l_offset, h.l_len), (1, 0, 10));
        // b waits for a's lock; a releases it.
        let waiting = c.nlm_lock(&fh, &b, range(true, 0), true);
        let release = async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            c.nlm_unlock(&fh, &a, range(true, 0)).await.unwrap();
        };
        let (got, ()) = tokio::join!(waiting, release);
        assert!(got.unwrap());
        assert!(c
            .nlm_test(&fh, &a, range(false, 0))
            .await
            .unwrap()
            .is_some());
        c.nlm_unlock(&fh, &b, range(true, 0)).await.unwrap();
        c.nlm_unlock(&fh, &b, range(true, 10)).await.unwrap();
        assert!(c.nlm_test(&fh, &a, range(true, 0)).await.unwrap().is_none());
    });
}

#[test]
fn the_longest_enclosing_export_is_mounted_on_first_use() {
    let t = Tarn::start_exports(&[("one", "/alpha"), ("two", "/beta/gamma")]);
    let two = t.export.parent().unwrap().join("two");
    std::fs::create_dir(two.join("sub")).unwrap();
    std::fs::write(two.join("sub/f"), b"in two").unwrap();
    std::fs::write(t.export.join("g"), b"in one").unwrap();
    run(async {
        let c = Nfs3::connect(t.addr, opts(), "/beta/gamma/sub/f")
            .await
            .unwrap();
        assert_eq!(c.mounted(), vec!["/beta/gamma".to_string()]);
        let f = c.lookup_path("/beta/gamma/sub/f").await.unwrap();
        assert_eq!(&c.read(&f, 0, 100).await.unwrap().data[..], b"in two");
        let g = c.lookup_path("/alpha/g").await.unwrap();
        assert_eq!(&c.read(&g, 0, 100).await.unwrap().data[..], b"in one");
        assert_eq!(
            c.mounted(),
            vec!["/beta/gamma".to_string(), "/alpha".to_string()]
        );
        let e = c.lookup_path("/elsewhere/x").await.unwrap_err().to_string();
        assert!(e.contains("not under any export"), "{e}");
        c.unmount_all().await;
        assert!(c.mounted().is_empty());
    });
}

/// Directory handles are remembered for paths through them; one gone
/// stale (the directory replaced behind the client's back) is looked up
/// again, and a RENAME through the client forgets them.
#[test]
fn remembered_directories_go_when_stale_or_renamed() {
    let t = Tarn::start(&[]);
    std::fs::create_dir_all(t.export.join("a/b")).unwrap();
    std::fs::write(t.export.join("a/b/f"), b"first").unwrap();
    chmod(t.export.join("a"), 0o777);
    run(async {
        let c = Nfs3::connect(t.addr, opts(), "/").await.unwrap();
        let f = c.lookup_path("/a/b/f").await.unwrap();
        assert_eq!(&c.read(&f, 0, 10).await.unwrap().data[..], b"first");
        // Replaced on the server: /a/b is another directory now.
        std::fs::remove_dir_all(t.export.join("a/b")).unwrap();
        std::fs::create_dir(t.export.join("a/b")).unwrap();
        std::fs::write(t.export.join("a/b/f"), b"second").unwrap();
        let f = c.lookup_path("/a/b/f").await.unwrap();
        assert_eq!(&c.read(&f, 0, 10).await.unwrap().data[..], b"second");
        // Renamed through the client: the old path is gone at once.
        let a = c.lookup_path("/a").await.unwrap();
        c.rename(&a, "b", &a, "c").await.unwrap();
        assert_eq!(
            status(c.lookup_path("/a/b/f").await),
            Nfsstat3::NFS3ERR_NOENT
        );
        assert!(c.lookup_path("/a/c/f").await.is_ok());
    });
}
