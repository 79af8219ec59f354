//! The client library's namespace and attribute operations against a real
//! `tarn serve` (what the `tarn` tools are built on): RENAME within and
//! across directories, over an existing file, of a missing name; SETATTR
//! of mode and times (client's and server's); READDIR with chosen
//! attributes; lookup with attributes in one COMPOUND; space and file counts.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_namespace

mod harness;

use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use std::os::unix::fs::MetadataExt;

#[test]
fn rename_moves_and_replaces_and_reports_missing_names() {
    let t = Tarn::start(&[]);
    std::fs::create_dir(t.export.join("d")).unwrap();
    chmod(t.export.join("d"), 0o777);
    std::fs::write(t.export.join("a"), b"a").unwrap();
    std::fs::write(t.export.join("b"), b"b").unwrap();
    run(async {
        let s = session(t.addr).await;
        let root = s.lookup_path("/").await.unwrap();
        let d = s.lookup_path("/d").await.unwrap();
        let r = s.rename(&root, "a", &root, "a2").await.unwrap();
        assert!(r.source_cinfo.after != r.source_cinfo.before);
        s.rename(&root, "a2", &d, "moved").await.unwrap();
        assert_eq!(std::fs::read(t.export.join("d/moved")).unwrap(), b"a");
        // Over an existing file: it is replaced.
        s.rename(&d, "moved", &root, "b").await.unwrap();
        assert_eq!(std::fs::read(t.export.join("b")).unwrap(), b"a");
        assert!(!t.export.join("a").exists() && !t.export.join("d/moved").exists());
        assert_eq!(
            err(s.rename(&root, "nothing", &root, "x").await),
            Nfsstat4::NFS4ERR_NOENT
        );
    });
}

#[test]
fn setattr_sets_mode_and_times() {
    let t = Tarn::start(&[]);
    let p = t.export.join("f");
    std::fs::write(&p, b"data").unwrap();
    chmod(&p, 0o666);
    // Owned by the caller, as SETATTR of times to a given value requires.
    std::os::unix::fs::chown(&p, Some(UID), Some(GID)).unwrap();
    run(async {
        let s = session(t.addr).await;
        let fh = s.lookup_path("/f").await.unwrap();
        let when = Nfstime4 {
            seconds: 1_234_567_890,
            nseconds: 987_654_321,
        };
        let set = SetAttrs {
            mode: Some(0o604),
            atime: Some(Settime4::SET_TO_CLIENT_TIME4(when.clone())),
            mtime: Some(Settime4::SET_TO_CLIENT_TIME4(when.clone())),
            ..Default::default()
        };
        let done = s.setattr(&fh, &ANON_STATEID, &set).await.unwrap();
        assert_eq!(
            attr::bits(&done),
            [FATTR4_MODE, FATTR4_TIME_ACCESS_SET, FATTR4_TIME_MODIFY_SET]
        );
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o604);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_234_567_890, 987_654_321));
        assert_eq!((m.atime(), m.atime_nsec()), (1_234_567_890, 987_654_321));
        let a = s.attrs(&fh, &[FATTR4_TIME_MODIFY]).await.unwrap();
        assert_eq!(a.time_modify, Some(when));

        // The server's own time.
        let set = SetAttrs {
            mtime: Some(Settime4::Default(TimeHow4::SET_TO_SERVER_TIME4)),
            ..Default::default()
        };
        s.setattr(&fh, &ANON_STATEID, &set).await.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let m = std::fs::metadata(&p).unwrap();
        assert!(
            (m.mtime() - now).abs() < 60,
            "mtime {} now {now}",
            m.mtime()
        );
        // Size through SETATTR needs the open's stateid or the anonymous one.
        let set = SetAttrs {
            size: Some(2),
            ..Default::default()
        };
        s.setattr(&fh, &ANON_STATEID, &set).await.unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"da");
    });
}

#[test]
fn readdir_with_and_lookup_with_attributes() {
    let t = Tarn::start(&[]);
    std::fs::create_dir_all(t.export.join("d/sub")).unwrap();
    std::fs::write(t.export.join("d/f"), vec![1u8; 1234]).unwrap();
    chmod(t.export.join("d/f"), 0o640);
    run(async {
        let s = session(t.addr).await;
        let (fh, a) = s
            .lookup_path_attrs("/d/f", &[FATTR4_TYPE, FATTR4_SIZE, FATTR4_MODE])
            .await
            .unwrap();
        assert_eq!(fh, s.lookup_path("/d/f").await.unwrap());
        assert_eq!(
            (a.ftype, a.size, a.mode),
            (Some(NfsFtype4::NF4REG), Some(1234), Some(0o640))
        );
        assert_eq!(
            err(s.lookup_path_attrs("/d/none", &[FATTR4_TYPE]).await),
            Nfsstat4::NFS4ERR_NOENT
        );

        let d = s.lookup_path("/d").await.unwrap();
        let mut es = s
            .readdir_with(
                &d,
                &[FATTR4_TYPE, FATTR4_SIZE, FATTR4_MODE, FATTR4_TIME_MODIFY],
            )
            .await
            .unwrap();
        es.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(es.len(), 2);
        assert_eq!(es[0].name, "f");
        assert_eq!(
            (es[0].attrs.ftype, es[0].attrs.size, es[0].attrs.mode),
            (Some(NfsFtype4::NF4REG), Some(1234), Some(0o640))
        );
        assert!(es[0].attrs.time_modify.is_some());
        assert_eq!(es[1].attrs.ftype, Some(NfsFtype4::NF4DIR));
        // The old form still gives type and file ID.
        let old = s.readdir(&d).await.unwrap();
        assert!(old.iter().all(|e| e.attrs.fileid.is_some()));

        let root = s.lookup_path("/").await.unwrap();
        let a = s.attrs(&root, client::nfs4::attr::FSSTAT).await.unwrap();
        let (total, free, avail) = (
            a.space_total.unwrap(),
            a.space_free.unwrap(),
            a.space_avail.unwrap(),
        );
        assert!(total > 0 && free <= total && avail <= free, "{a:?}");
        assert!(a.files_total.unwrap() >= a.files_free.unwrap());
    });
}
