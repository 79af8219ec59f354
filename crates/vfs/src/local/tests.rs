use super::*;
use crate::nowait;
use crate::prelude::*;
use crate::HandleKey;
use std::collections::HashSet;
use std::os::unix::fs::{symlink, PermissionsExt};

fn root() -> Cred {
    Cred::root()
}

fn user() -> Cred {
    Cred::user(1000, 1000)
}

/// A temp dir on a filesystem with file handles (/tmp, else /var/tmp).
fn tmp() -> tempfile::TempDir {
    for base in [
        "/tmp",
        "/var/tmp",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target"),
    ] {
        if let Ok(d) = tempfile::Builder::new().prefix("vfs-test").tempdir_in(base) {
            if LocalFs::new(d.path()).is_ok() {
                return d;
            }
        }
    }
    panic!("no temp filesystem supports name_to_handle_at")
}

fn setup() -> (tempfile::TempDir, LocalFs) {
    fs_over(tmp())
}

/// A backend over `d`, made world-writable like /tmp so unprivileged
/// callers can create in tests.
fn fs_over(d: tempfile::TempDir) -> (tempfile::TempDir, LocalFs) {
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let fs = LocalFs::new(d.path()).unwrap();
    (d, fs)
}

fn running_as_root() -> bool {
    sys::geteuid() == 0
}

/// `setup`'s backend and its root, for a test of credential switching,
/// which needs root: None (the test passes) when not running as root.
fn as_root(
    setup: fn() -> (tempfile::TempDir, LocalFs),
) -> Option<(tempfile::TempDir, LocalFs, Fid)> {
    if !running_as_root() {
        return None;
    }
    let (d, fs) = setup();
    let r = fs.root();
    Some((d, fs, r))
}

fn guarded(mode: u32) -> CreateHow {
    CreateHow::Guarded(SetAttr::mode(mode))
}

/// A file `name` in `dir`, created by root with `mode` and holding `data`.
fn root_file(fs: &LocalFs, dir: &Fid, name: &[u8], mode: u32, data: &[u8]) -> Fid {
    let (f, _) = fs.create(&root(), dir, name, &guarded(mode)).unwrap();
    fs.write(&root(), &f, 0, data, Stable::Unstable).unwrap();
    f
}

#[test]
fn create_write_read_commit() {
    let (_d, fs) = setup();
    let r = fs.root();
    let (f, a) = fs.create(&root(), &r, b"file", &guarded(0o640)).unwrap();
    assert_eq!(a.ftype, FileType::Regular);
    assert_eq!(a.mode, 0o640);
    assert_eq!(
        fs.write(&root(), &f, 0, b"hello world", Stable::FileSync)
            .unwrap(),
        (11, Stable::FileSync)
    );
    fs.write(&root(), &f, 11, b"!", Stable::Unstable).unwrap();
    fs.commit(&f).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(fs.read(&root(), &f, 0, &mut buf).unwrap(), (12, true));
    assert_eq!(&buf[..12], b"hello world!");
    assert_eq!(fs.read(&root(), &f, 6, &mut buf[..3]).unwrap(), (3, false));
    assert_eq!(&buf[..3], b"wor");
    assert_eq!(fs.read(&root(), &f, 100, &mut buf).unwrap(), (0, true));
    assert_eq!(fs.getattr(&f).unwrap().size, 12);
    let a = fs
        .setattr(
            &root(),
            &f,
            &SetAttr {
                size: Some(5),
                mtime: SetTime::ClientTime(Timespec {
                    secs: 1_000_000,
                    nsecs: 5,
                }),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(a.mtime.secs, 1_000_000);
    assert_eq!(
        fs.create(&root(), &r, b"file", &guarded(0o644)),
        Err(FsError::Exist)
    );
    // Unchecked on an existing file returns it, applying only the size.
    let (f2, a2) = fs
        .create(
            &root(),
            &r,
            b"file",
            &CreateHow::Unchecked(SetAttr {
                size: Some(0),
                mode: Some(0o777),
                ..SetAttr::default()
            }),
        )
        .unwrap();
    assert_eq!(f2, f);
    assert_eq!((a2.size, a2.mode), (0, 0o640));
    let st = fs.fsstat(&r).unwrap();
    assert!(st.total_bytes > 0);
    fs.sync_all().unwrap();
}

#[test]
fn exclusive_create() {
    let (_d, fs) = setup();
    let r = fs.root();
    let v = CreateHow::Exclusive(*b"\x01\x02\x03\x04\x05\x06\x07\x08");
    let (f, a) = fs.create(&root(), &r, b"x", &v).unwrap();
    assert_eq!(a.mtime.secs, 0x01020304);
    assert_eq!(a.atime.secs, 0x05060708);
    assert_eq!(fs.create(&root(), &r, b"x", &v).unwrap().0, f);
    assert_eq!(
        fs.create(&root(), &r, b"x", &CreateHow::Exclusive([9; 8])),
        Err(FsError::Exist)
    );
}

#[test]
fn readdir_10k_paged() {
    let (d, fs) = setup();
    let r = fs.root();
    let (sub, _) = fs
        .mkdir(&root(), &r, b"big", &SetAttr::mode(0o755))
        .unwrap();
    for i in 0..10_000 {
        std::fs::File::create(d.path().join(format!("big/entry-{i}"))).unwrap();
    }
    let mut seen = HashSet::new();
    let mut cookie = 0;
    let mut pages = 0;
    loop {
        let p = fs
            .readdir(&root(), &sub, cookie, [0; 8], 100, false)
            .unwrap();
        assert!(p.entries.len() <= 100);
        pages += 1;
        for e in &p.entries {
            assert!(seen.insert(e.name.clone()), "duplicate {:?}", e.name);
            cookie = e.cookie;
        }
        if p.eof {
            break;
        }
        assert!(!p.entries.is_empty());
    }
    assert_eq!(seen.len(), 10_002);
    assert!(seen.contains(b".".as_slice()) && seen.contains(b"..".as_slice()));
    for i in 0..10_000 {
        assert!(seen.contains(format!("entry-{i}").as_bytes()));
    }
    assert!(pages >= 100);
}

#[test]
fn readdir_plus_and_dots() {
    let (_d, fs) = setup();
    let r = fs.root();
    let (f, _) = fs.create(&root(), &r, b"a", &guarded(0o644)).unwrap();
    let p = fs.readdir(&root(), &r, 0, [0; 8], 1000, true).unwrap();
    assert!(p.eof);
    let root_attr = fs.getattr(&r).unwrap();
    let mut names = HashSet::new();
    for e in &p.entries {
        names.insert(e.name.clone());
        let (fid, attr) = e.plus.clone().expect("plus attrs");
        assert_eq!(attr.fileid, e.fileid);
        match &e.name[..] {
            b"." | b".." => {
                assert_eq!(fid, r);
                assert_eq!(e.fileid, root_attr.fileid);
            }
            b"a" => assert_eq!(fid, f),
            _ => {}
        }
    }
    assert_eq!(names.len(), 3);
}

#[test]
fn namespace_ops() {
    let (_d, fs) = setup();
    let r = fs.root();
    let (dir, _) = fs.mkdir(&root(), &r, b"d", &SetAttr::mode(0o750)).unwrap();
    assert_eq!(fs.getattr(&dir).unwrap().mode, 0o750);
    let (f, _) = fs.create(&root(), &dir, b"f", &guarded(0o644)).unwrap();
    // rename across directories keeps the fid.
    fs.rename(&root(), &dir, b"f", &r, b"g").unwrap();
    assert_eq!(fs.lookup(&root(), &r, b"g").unwrap().0, f);
    assert_eq!(fs.lookup(&root(), &dir, b"f"), Err(FsError::NoEnt));
    // link
    fs.link(&root(), &f, &dir, b"h").unwrap();
    assert_eq!(fs.getattr(&f).unwrap().nlink, 2);
    assert_eq!(fs.link(&root(), &dir, &r, b"dl"), Err(FsError::IsDir));
    // symlink
    let (s, sa) = fs
        .symlink(&root(), &r, b"s", b"d/h", &SetAttr::default())
        .unwrap();
    assert_eq!(sa.ftype, FileType::Symlink);
    assert_eq!(fs.readlink(&root(), &s).unwrap(), b"d/h");
    assert_eq!(fs.readlink(&root(), &f), Err(FsError::Inval));
    // mknod fifo
    let (p, pa) = fs
        .mknod(
            &root(),
            &r,
            b"p",
            FileType::Fifo,
            (0, 0),
            &SetAttr::mode(0o600),
        )
        .unwrap();
    assert_eq!((pa.ftype, pa.mode), (FileType::Fifo, 0o600));
    let mut b = [0u8; 4];
    assert_eq!(fs.read(&root(), &p, 0, &mut b), Err(FsError::Inval));
    assert_eq!(fs.read(&root(), &dir, 0, &mut b), Err(FsError::IsDir));
    // remove / rmdir
    assert_eq!(fs.rmdir(&root(), &r, b"d"), Err(FsError::NotEmpty));
    assert_eq!(fs.remove(&root(), &r, b"d"), Err(FsError::IsDir));
    assert_eq!(fs.rmdir(&root(), &r, b"g"), Err(FsError::NotDir));
    fs.remove(&root(), &dir, b"h").unwrap();
    fs.rmdir(&root(), &r, b"d").unwrap();
    assert_eq!(fs.getattr(&dir), Err(FsError::Stale));
    fs.remove(&root(), &r, b"s").unwrap();
    fs.remove(&root(), &r, b"p").unwrap();
    // bad names
    assert_eq!(
        fs.create(&root(), &r, b"a/b", &guarded(0o644)),
        Err(FsError::Inval)
    );
    assert_eq!(fs.lookup(&root(), &r, b"a\0b"), Err(FsError::Inval));
    assert_eq!(
        fs.mkdir(&root(), &r, b"..", &SetAttr::default()),
        Err(FsError::Exist)
    );
    assert_eq!(fs.rmdir(&root(), &r, b".."), Err(FsError::NotEmpty));
    assert_eq!(fs.lookup(&root(), &r, b".").unwrap().0, r);
}

#[test]
fn stale_after_delete() {
    let (_d, fs) = setup();
    let r = fs.root();
    let f = root_file(&fs, &r, b"f", 0o644, b"x"); // now cached
    assert_eq!(fs.cache.len(), 1);
    fs.remove(&root(), &r, b"f").unwrap();
    assert_eq!(fs.getattr(&f), Err(FsError::Stale));
    let mut b = [0u8; 1];
    assert_eq!(fs.read(&root(), &f, 0, &mut b), Err(FsError::Stale));
    assert_eq!(fs.cache.len(), 0);
    // A new file with the same name gets a different fid.
    let (f2, _) = fs.create(&root(), &r, b"f", &guarded(0o644)).unwrap();
    assert_ne!(f, f2);
}

#[test]
fn fid_survives_restart() {
    let (d, fs) = setup();
    let r = fs.root();
    let (dir, _) = fs.mkdir(&root(), &r, b"d", &SetAttr::mode(0o755)).unwrap();
    let (f, _) = fs.create(&root(), &dir, b"f", &guarded(0o644)).unwrap();
    fs.write(&root(), &f, 0, b"persist", Stable::FileSync)
        .unwrap();
    let key = HandleKey::from_bytes(&[3; 32]);
    let h = key.seal(7, &f);
    drop(fs);
    let fs = LocalFs::new(d.path()).unwrap();
    assert_eq!(fs.root(), r);
    let (export, fid) = key.open(h.as_bytes()).unwrap();
    assert_eq!((export, fid), (7, f));
    let mut b = [0u8; 16];
    assert_eq!(fs.read(&root(), &fid, 0, &mut b).unwrap(), (7, true));
    assert_eq!(&b[..7], b"persist");
    assert_eq!(
        fs.lookup(&root(), &fid_parent(&fs, &dir), b"d").unwrap().0,
        dir
    );
}

fn fid_parent(fs: &LocalFs, dir: &Fid) -> Fid {
    fs.lookup(&root(), dir, b"..").unwrap().0
}

#[test]
fn dotdot_at_root_stays() {
    let (_d, fs) = setup();
    let r = fs.root();
    let (fid, a) = fs.lookup(&root(), &r, b"..").unwrap();
    assert_eq!(fid, r);
    assert_eq!(a.fileid, fs.getattr(&r).unwrap().fileid);
    let (sub, _) = fs
        .mkdir(&root(), &r, b"sub", &SetAttr::mode(0o755))
        .unwrap();
    assert_eq!(fs.lookup(&root(), &sub, b"..").unwrap().0, r);
    assert_eq!(fs.lookup(&root(), &sub, b".").unwrap().0, sub);
}

#[test]
fn symlink_out_is_not_followed() {
    let (d, fs) = setup();
    let r = fs.root();
    let outside = tmp();
    std::fs::write(outside.path().join("secret"), b"secret").unwrap();
    symlink(outside.path(), d.path().join("out")).unwrap();
    symlink("/etc/passwd", d.path().join("pw")).unwrap();
    let (l, a) = fs.lookup(&root(), &r, b"out").unwrap();
    assert_eq!(a.ftype, FileType::Symlink);
    assert_eq!(
        fs.readlink(&root(), &l).unwrap(),
        outside.path().as_os_str().as_bytes()
    );
    // Using the symlink as a directory fails instead of following it.
    assert_eq!(fs.lookup(&root(), &l, b"secret"), Err(FsError::NotDir));
    assert_eq!(
        fs.create(&root(), &l, b"x", &guarded(0o644)),
        Err(FsError::NotDir)
    );
    let (pw, _) = fs.lookup(&root(), &r, b"pw").unwrap();
    let mut b = [0u8; 16];
    assert_eq!(fs.read(&root(), &pw, 0, &mut b), Err(FsError::Inval));
    // Creating over a symlink name doesn't write through it.
    assert_eq!(
        fs.create(
            &root(),
            &r,
            b"pw",
            &CreateHow::Unchecked(SetAttr::default())
        ),
        Err(FsError::Exist)
    );
    // setattr on a symlink changes the link, not its target.
    let before = std::fs::metadata(outside.path()).unwrap().permissions();
    fs.setattr(&root(), &l, &SetAttr::mode(0o700)).unwrap();
    assert_eq!(
        std::fs::metadata(outside.path()).unwrap().permissions(),
        before
    );
}

#[test]
fn forged_handle_is_rejected() {
    let (_d, fs) = setup();
    let key = HandleKey::from_bytes(&[5; 32]);
    let r = fs.root();
    // A real kernel handle for something outside the export, wrapped without
    // the key: rejected before any syscall.
    let outside = tmp();
    let dirfd = sys::open_path(
        &sys::cstr(outside.path().as_os_str().as_bytes()).unwrap(),
        libc::O_PATH,
    )
    .unwrap();
    let kh = sys::name_to_handle(dirfd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH).unwrap();
    let out_fid = encode_fid(&kh).unwrap();
    let mut forged = key.seal(1, &r).as_bytes().to_vec();
    forged.truncate(5);
    forged.extend_from_slice(out_fid.as_bytes());
    forged.extend_from_slice(&[0u8; 16]);
    assert_eq!(key.open(&forged), Err(FsError::BadHandle));
    // A fid that isn't a valid kernel handle: Stale/BadHandle, no panic.
    let junk = Fid::new(&[1, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    assert!(matches!(
        fs.getattr(&junk),
        Err(FsError::Stale) | Err(FsError::BadHandle)
    ));
    assert_eq!(fs.getattr(&Fid::new(&[]).unwrap()), Err(FsError::BadHandle));
}

#[test]
fn permissions_as_caller() {
    if !running_as_root() {
        eprintln!("skipping: needs root to switch credentials");
        return;
    }
    let (_d, fs) = setup();
    let r = fs.root();
    let secret = root_file(&fs, &r, b"secret", 0o600, b"top");
    let mut b = [0u8; 8];
    assert_eq!(fs.read(&user(), &secret, 0, &mut b), Err(FsError::Acces));
    assert_eq!(
        fs.write(&user(), &secret, 0, b"x", Stable::Unstable),
        Err(FsError::Acces)
    );
    let squashed = Cred::user(65534, 65534);
    assert_eq!(fs.read(&squashed, &secret, 0, &mut b), Err(FsError::Acces));
    assert_eq!(
        fs.access(&user(), &secret, Access::ALL).unwrap(),
        Access::empty()
    );
    assert_eq!(
        fs.setattr(&user(), &secret, &SetAttr::mode(0o666)),
        Err(FsError::Perm)
    );
    // Root (unsquashed) still can.
    assert_eq!(fs.read(&root(), &secret, 0, &mut b).unwrap(), (3, true));

    let (d, _) = fs
        .mkdir(&root(), &r, b"rootdir", &SetAttr::mode(0o755))
        .unwrap();
    for c in [user(), squashed.clone()] {
        assert_eq!(
            fs.create(&c, &d, b"x", &guarded(0o644)),
            Err(FsError::Acces)
        );
        assert_eq!(
            fs.mkdir(&c, &d, b"x", &SetAttr::default()),
            Err(FsError::Acces)
        );
        assert_eq!(
            fs.access(&c, &d, Access::ALL).unwrap(),
            Access::READ | Access::LOOKUP
        );
    }
    // Group membership via supplementary groups counts.
    let (g, _) = fs
        .mkdir(&root(), &r, b"grp", &SetAttr::mode(0o770))
        .unwrap();
    fs.setattr(
        &root(),
        &g,
        &SetAttr {
            gid: Some(4242),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(
        fs.create(&user(), &g, b"x", &guarded(0o644)),
        Err(FsError::Acces)
    );
    let member = Cred {
        uid: 1000,
        gid: 1000,
        gids: vec![4242],
    };
    let (f, a) = fs.create(&member, &g, b"x", &guarded(0o644)).unwrap();
    assert_eq!((a.uid, a.gid), (1000, 1000)); // no setgid dir: caller's fsgid
                                              // Owner may write their own file even when it is read-only (NFS semantics).
    fs.setattr(&member, &f, &SetAttr::mode(0o444)).unwrap();
    fs.write(&member, &f, 0, b"mine", Stable::Unstable).unwrap();

    // Sticky /tmp-like dir: can't remove someone else's file.
    let (t, _) = fs
        .mkdir(&root(), &r, b"sticky", &SetAttr::mode(0o1777))
        .unwrap();
    fs.create(&user(), &t, b"u", &guarded(0o644)).unwrap();
    assert_eq!(
        fs.remove(&Cred::user(1001, 1001), &t, b"u"),
        Err(FsError::Perm)
    );
    fs.remove(&user(), &t, b"u").unwrap();

    // The thread is root again afterwards.
    assert_eq!(sys::set_thread_fsuid(u32::MAX), 0);
    assert_eq!(fs.read(&root(), &secret, 0, &mut b).unwrap(), (3, true));
}

#[test]
fn fd_cache_is_bounded() {
    // One entry per shard: 16 in all, each shard an LRU of its own.
    let c = FdCache::new(16);
    let (_d, fs) = setup();
    let r = fs.root();
    let mut fids = Vec::new();
    for i in 0..200 {
        let name = format!("f{i}");
        fids.push(
            fs.create(&root(), &r, name.as_bytes(), &guarded(0o644))
                .unwrap()
                .0,
        );
    }
    for f in &fids {
        let (d, _) = fs.data_fd(f).unwrap();
        c.insert(*f, d);
    }
    assert!(c.len() <= 16, "bounded: {}", c.len());
    assert!(c.get(fids.last().unwrap()).is_some(), "the newest is kept");
    // The first fid shares its shard with later ones: it was evicted.
    let later_same_shard = fids[1..]
        .iter()
        .any(|f| std::ptr::eq(c.shard(f), c.shard(&fids[0])));
    assert!(
        later_same_shard && c.get(&fids[0]).is_none(),
        "the oldest of a shard is evicted"
    );
}

#[test]
fn removing_a_file_closes_its_cached_descriptors() {
    let (_d, fs) = setup();
    let r = fs.root();
    let fid = root_file(&fs, &r, b"big", 0o644, b"data");
    fs.getattr(&fid).unwrap();
    assert!(fs.paths.get(&fid).is_some() && fs.cache.get(&fid).is_some());
    fs.remove(&root(), &r, b"big").unwrap();
    assert!(
        fs.paths.get(&fid).is_none() && fs.cache.get(&fid).is_none(),
        "no descriptor keeps the space allocated"
    );
    assert_eq!(fs.getattr(&fid), Err(FsError::Stale));
    assert_eq!(
        nowait::attempt(|| fs.getattr(&fid)),
        None,
        "not cached: the server takes the slow path"
    );
}

#[test]
fn credential_switch_is_per_thread() {
    let Some((_d, fs, r)) = as_root(setup) else {
        return;
    };
    let f = root_file(&fs, &r, b"s", 0o600, b"abc");
    // Root and user calls interleave on different threads; if the switch
    // leaked across threads, root reads would fail or user reads succeed.
    std::thread::scope(|s| {
        for t in 0..4 {
            let fs = &fs;
            s.spawn(move || {
                let mut b = [0u8; 4];
                for _ in 0..300 {
                    if t % 2 == 0 {
                        assert_eq!(fs.read(&root(), &f, 0, &mut b).unwrap(), (3, true));
                    } else {
                        assert_eq!(fs.read(&user(), &f, 0, &mut b), Err(FsError::Acces));
                    }
                }
            });
        }
    });
}

#[test]
fn nowait_mode_does_only_what_cannot_block() {
    let (_d, fs) = setup();
    let r = fs.root();
    let fid = root_file(&fs, &r, b"f", 0o644, b"cached data");
    // Cached descriptor, dentry and page: all inline.
    assert!(nowait::attempt(|| fs.getattr(&fid)).unwrap().is_ok());
    let got =
        nowait::attempt(|| fs.lookup(&root(), &r, b"f")).expect("a cached name needs no disk");
    assert_eq!(got.unwrap().0, fid);
    let mut buf = [0u8; 64];
    assert_eq!(
        nowait::attempt(|| fs.read(&root(), &fid, 0, &mut buf)).unwrap(),
        Ok((11, true))
    );
    assert!(nowait::attempt(|| fs.access(&Cred::user(1000, 1000), &fid, Access::READ)).is_some());
    // Whatever may block is refused, with no side effect.
    assert_eq!(
        nowait::attempt(|| fs.write(&root(), &fid, 0, b"x", Stable::Unstable)),
        None
    );
    assert_eq!(nowait::attempt(|| fs.remove(&root(), &r, b"f")), None);
    assert!(fs.getattr(&fid).is_ok(), "still there");
    assert_eq!(
        nowait::attempt(|| fs.readdir(&root(), &r, 0, [0; 8], 10, false)),
        None
    );
    // A handle not seen since the restart needs open_by_handle_at: pool.
    let fresh = LocalFs::new(_d.path()).unwrap();
    assert_eq!(nowait::attempt(|| fresh.getattr(&fid)), None);
    assert!(fresh.getattr(&fid).is_ok());
}

#[test]
fn readdir_plus_skips_attributes_when_the_name_changed_under_it() {
    let (_d, fs) = setup();
    let r = fs.root();
    let (fid, attr) = fs.create(&root(), &r, b"f", &guarded(0o644)).unwrap();
    let (dfd, dst) = fs.open_dir(&r).unwrap();
    let got = fs.readdir_plus(dfd.as_fd(), &dst, &r, c"f", attr.fileid);
    assert_eq!(got.map(|(f, a)| (f, a.fileid)), Some((fid, attr.fileid)));
    // The dirent said another inode: the name was replaced meanwhile.
    assert_eq!(
        fs.readdir_plus(dfd.as_fd(), &dst, &r, c"f", attr.fileid + 1),
        None
    );
    assert_eq!(fs.readdir_plus(dfd.as_fd(), &dst, &r, c"gone", 5), None);
}

#[test]
fn remembered_access_follows_permission_changes() {
    if !running_as_root() {
        return;
    }
    let (_d, mut fs) = setup();
    let r = fs.root();
    let mut b = [0u8; 8];
    // Production settings first: a file changed moments ago is never
    // remembered, so a chmod right after a read is obeyed.
    let f = root_file(&fs, &r, b"f", 0o644, b"abc");
    assert_eq!(fs.read(&user(), &f, 0, &mut b).unwrap(), (3, true));
    fs.setattr(&root(), &f, &SetAttr::mode(0o600)).unwrap();
    assert_eq!(fs.read(&user(), &f, 0, &mut b), Err(FsError::Acces));

    // Now remember every decision at once: each change must still be seen.
    // (The sleeps put each change on a later ctime tick.)
    fs.perms = perm::PermCache::with_racy(1024, 0);
    let tick = || std::thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(fs.read(&user(), &f, 0, &mut b), Err(FsError::Acces));
    tick();
    fs.setattr(&root(), &f, &SetAttr::mode(0o644)).unwrap();
    assert_eq!(fs.read(&user(), &f, 0, &mut b).unwrap(), (3, true));
    assert_eq!(fs.access(&user(), &f, Access::ALL).unwrap(), Access::READ);
    tick();
    fs.setattr(&root(), &f, &SetAttr::mode(0o600)).unwrap();
    assert_eq!(fs.read(&user(), &f, 0, &mut b), Err(FsError::Acces));
    assert_eq!(
        fs.access(&user(), &f, Access::ALL).unwrap(),
        Access::empty()
    );
    tick();
    let to_user = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    fs.setattr(&root(), &f, &to_user).unwrap();
    assert_eq!(
        fs.access(&user(), &f, Access::READ | Access::MODIFY)
            .unwrap(),
        Access::READ | Access::MODIFY
    );
    fs.write(&user(), &f, 0, b"x", Stable::Unstable).unwrap();

    // Search permission on a directory gates LOOKUP.
    let (d, _) = fs.mkdir(&root(), &r, b"d", &SetAttr::mode(0o755)).unwrap();
    fs.create(&root(), &d, b"in", &guarded(0o644)).unwrap();
    assert!(fs.lookup(&user(), &d, b"in").is_ok());
    assert!(fs.lookup(&user(), &d, b"..").is_ok());
    tick();
    fs.setattr(&root(), &d, &SetAttr::mode(0o700)).unwrap();
    assert_eq!(
        fs.lookup(&user(), &d, b"in").map(|_| ()),
        Err(FsError::Acces)
    );
    assert_eq!(
        fs.lookup(&user(), &d, b"..").map(|_| ()),
        Err(FsError::Acces)
    );
    assert!(fs.lookup(&root(), &d, b"in").is_ok());

    // Other callers, even the same user with other groups, are asked anew.
    let (g, _) = fs.mkdir(&root(), &r, b"g", &SetAttr::mode(0o750)).unwrap();
    let grp = SetAttr {
        gid: Some(4242),
        ..SetAttr::default()
    };
    fs.setattr(&root(), &g, &grp).unwrap();
    tick();
    assert_eq!(
        fs.access(&user(), &g, Access::LOOKUP).unwrap(),
        Access::empty()
    );
    let member = Cred {
        uid: 1000,
        gid: 1000,
        gids: vec![4242],
    };
    assert_eq!(
        fs.access(&member, &g, Access::LOOKUP).unwrap(),
        Access::LOOKUP
    );
    assert_eq!(
        fs.access(&user(), &g, Access::LOOKUP).unwrap(),
        Access::empty()
    );
}

#[test]
fn writes_clear_suid_as_the_caller_would() {
    if !running_as_root() {
        return;
    }
    let (_d, mut fs) = setup();
    fs.perms = perm::PermCache::with_racy(1024, 0);
    let r = fs.root();
    // What a local write by uid 1000 (outside the file's group) does to
    // these bits on this kernel: since Linux 6.2 it also drops a setgid
    // without group-exec, as it did not before.
    let local_write = |mode: u32| -> u32 {
        let p = _d.path().join(format!("ref{mode:o}"));
        std::fs::write(&p, b"").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        let ok = std::process::Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", "--clear-groups", "sh", "-c"])
            .arg(format!("printf x >> '{}'", p.display()))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "setpriv (util-linux) writes as uid 1000");
        std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777
    };
    for mode in [0o4777, 0o2777, 0o2767] {
        let after = local_write(mode);
        let name = format!("s{mode:o}");
        let (f, _) = fs
            .create(&root(), &r, name.as_bytes(), &guarded(0o644))
            .unwrap();
        fs.setattr(&root(), &f, &SetAttr::mode(mode)).unwrap();
        // Twice: the second write finds its permission remembered.
        for _ in 0..2 {
            fs.write(&user(), &f, 0, b"x", Stable::Unstable).unwrap();
            assert_eq!(fs.getattr(&f).unwrap().mode & 0o7777, after, "{mode:o}");
        }
        // Root's own writes keep the bits (CAP_FSETID), as with a local write.
        fs.setattr(&root(), &f, &SetAttr::mode(mode)).unwrap();
        fs.write(&root(), &f, 0, b"y", Stable::Unstable).unwrap();
        assert_eq!(fs.getattr(&f).unwrap().mode & 0o7777, mode, "{mode:o}");
    }
}

#[test]
fn splice_read_moves_file_pages_into_a_pipe() {
    use std::os::fd::AsFd;
    let (_d, fs) = setup();
    let r = fs.root();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let f = root_file(&fs, &r, b"f", 0o644, &data);
    // Pipes of the default 16 pages (64 KiB).
    let pipe = || std::io::pipe().unwrap();
    // (bytes spliced, eof, what the pipe then holds)
    let splice = |off: u64, count: usize| {
        let (mut rd, wr) = pipe();
        let (n, eof) = fs
            .splice_read(&root(), &f, off, count, wr.as_fd())
            .unwrap()
            .unwrap();
        let mut v = vec![0u8; n];
        std::io::Read::read_exact(&mut rd, &mut v).unwrap();
        (n, eof, v)
    };
    // Aligned and whole: all of it, and eof at the end.
    let (n, eof, got) = splice(4096, 8192);
    assert_eq!((n, eof), (8192, false));
    assert_eq!(got, &data[4096..12288]);
    let (n, eof, got) = splice(290_000, 1 << 20);
    assert_eq!((n, eof), (10_000, true));
    assert_eq!(got, &data[290_000..]);
    // From inside a page, more than the pipe's pages span: a short read
    // of what fitted, not an error.
    let (n, eof, got) = splice(100, 64 << 10);
    assert!(!eof && n > 0 && n < 64 << 10, "{n}");
    assert_eq!(got, &data[100..100 + n]);
    // Past the end, and refused.
    let (_rd, wr) = pipe();
    assert_eq!(
        fs.splice_read(&root(), &f, 400_000, 10, wr.as_fd())
            .unwrap(),
        Ok((0, true))
    );
    if running_as_root() {
        let s = root_file(&fs, &r, b"s", 0o600, b"x");
        assert_eq!(
            fs.splice_read(&user(), &s, 0, 4, wr.as_fd()).unwrap(),
            Err(FsError::Acces)
        );
    }
}

#[test]
fn read_append_fills_only_what_it_read() {
    let (_d, fs) = setup();
    let r = fs.root();
    let f = root_file(&fs, &r, b"f", 0o644, b"0123456789");
    let mut buf = bytes::BytesMut::from(&b"head"[..]);
    assert_eq!(
        fs.read_append(&root(), &f, 2, 4, &mut buf).unwrap(),
        (4, false)
    );
    assert_eq!(&buf[..], b"head2345");
    // Room for XDR's padding after a short read is already there.
    let mut odd = bytes::BytesMut::new();
    fs.read_append(&root(), &f, 0, 5, &mut odd).unwrap();
    assert!(odd.capacity() >= 8, "{}", odd.capacity());
    // Past the end: what there is, and eof.
    assert_eq!(
        fs.read_append(&root(), &f, 8, 1 << 20, &mut buf).unwrap(),
        (2, true)
    );
    assert_eq!(&buf[..], b"head234589");
    assert_eq!(
        fs.read_append(&root(), &f, 50, 4, &mut buf).unwrap(),
        (0, true)
    );
    // A refused read leaves the buffer as it was.
    if running_as_root() {
        let s = root_file(&fs, &r, b"s", 0o600, b"x");
        assert_eq!(
            fs.read_append(&user(), &s, 0, 4, &mut buf),
            Err(FsError::Acces)
        );
        assert_eq!(&buf[..], b"head234589");
    }
}

/// Handle and attributes of `path` straight from the kernel, past every
/// cache of the backend.
fn fresh(path: &std::path::Path) -> (Fid, Attr) {
    let at = sys::open_path(c"/", libc::O_PATH).unwrap();
    let rel = sys::cstr(&path.as_os_str().as_bytes()[1..]).unwrap();
    let kh = sys::name_to_handle(at.as_fd(), &rel, 0).unwrap();
    let st = sys::lstatat(at.as_fd(), &rel).unwrap();
    (encode_fid(&kh).unwrap(), to_attr(&st))
}

/// Every entry of a READDIRPLUS listing of `dir` (at `path`), and a LOOKUP
/// of each, checked against the kernel: same handle, same attributes but
/// for the access time.
fn assert_listing_fresh(fs: &LocalFs, dir: &Fid, path: &std::path::Path) -> usize {
    let p = fs.readdir(&root(), dir, 0, [0; 8], 100_000, true).unwrap();
    assert!(p.eof);
    let mut n = 0;
    for e in &p.entries {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let name = String::from_utf8_lossy(&e.name);
        let (want_fid, want) = fresh(&path.join(&*name));
        let (fid, mut attr) = e
            .plus
            .clone()
            .unwrap_or_else(|| panic!("{name}: no attributes"));
        attr.atime = want.atime;
        assert_eq!(fid, want_fid, "{name}: listed handle");
        assert_eq!(attr, want, "{name}: listed attributes");
        let (fid, mut attr) = fs.lookup(&root(), dir, &e.name).unwrap();
        attr.atime = want.atime;
        assert_eq!(fid, want_fid, "{name}: looked-up handle");
        assert_eq!(attr, want, "{name}: looked-up attributes");
        n += 1;
    }
    n
}

#[test]
fn listed_and_looked_up_attributes_follow_every_change() {
    let (d, fs) = setup();
    if !fs.changes.following() {
        eprintln!("skipped: listings are not kept here (needs root and fanotify)");
        return;
    }
    let r = fs.root();
    let p = |s: &str| d.path().join(s);
    std::fs::create_dir(p("d")).unwrap();
    std::fs::create_dir(p("other")).unwrap();
    for n in ["a", "b", "c", "t"] {
        std::fs::write(p(&format!("d/{n}")), n).unwrap();
    }
    std::fs::create_dir(p("d/sub")).unwrap();
    let (dir, _) = fs.lookup(&root(), &r, b"d").unwrap();
    assert_eq!(assert_listing_fresh(&fs, &dir, &p("d")), 5);
    let served = fs.listings.served();
    assert_eq!(assert_listing_fresh(&fs, &dir, &p("d")), 5);
    assert_eq!(
        fs.listings.served(),
        served + 1,
        "the second listing is served from memory"
    );

    // Each change, made locally or through the backend, shows at once.
    type Change<'a> = Box<dyn Fn() + 'a>;
    let changes: Vec<(&str, Change)> = vec![
        (
            "append",
            Box::new(|| std::fs::write(p("d/a"), "longer").unwrap()),
        ),
        (
            "chmod",
            Box::new(|| {
                std::fs::set_permissions(p("d/b"), std::fs::Permissions::from_mode(0o600)).unwrap()
            }),
        ),
        (
            "rename",
            Box::new(|| std::fs::rename(p("d/c"), p("d/c2")).unwrap()),
        ),
        (
            "entry in a subdirectory",
            Box::new(|| std::fs::write(p("d/sub/x"), "x").unwrap()),
        ),
        (
            "hard link elsewhere",
            Box::new(|| std::fs::hard_link(p("d/a"), p("other/a")).unwrap()),
        ),
        (
            "write through the other link",
            Box::new(|| std::fs::write(p("other/a"), "through the other name").unwrap()),
        ),
        (
            "truncate",
            Box::new(|| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(p("d/t"))
                    .unwrap()
                    .set_len(1)
                    .unwrap()
            }),
        ),
        (
            "times",
            Box::new(|| {
                let f = std::fs::File::options().write(true).open(p("d/t")).unwrap();
                f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
                    .unwrap()
            }),
        ),
        (
            "replace by a new file",
            Box::new(|| {
                std::fs::remove_file(p("d/b")).unwrap();
                std::fs::write(p("d/b"), "new b").unwrap();
            }),
        ),
        (
            "rename over",
            Box::new(|| {
                std::fs::write(p("other/n"), "newer").unwrap();
                std::fs::rename(p("other/n"), p("d/t")).unwrap();
            }),
        ),
        (
            "write through the backend",
            Box::new(|| {
                let (f, _) = fs.lookup(&root(), &dir, b"a").unwrap();
                fs.write(&root(), &f, 100, b"x", Stable::Unstable).unwrap();
            }),
        ),
    ];
    for (what, change) in changes {
        // Served from the cache first, so the change has something to undo.
        assert_listing_fresh(&fs, &dir, &p("d"));
        change();
        eprintln!("after {what}");
        assert_listing_fresh(&fs, &dir, &p("d"));
    }
}

/// A backend over a fresh directory in /var/tmp (a disk filesystem with
/// real sparse files, where /tmp may be a tmpfs).
fn setup_on_disk() -> (tempfile::TempDir, LocalFs) {
    on_disk("vfs-sparse")
}

/// [`setup_on_disk`] with the directory's name starting with `prefix`.
pub(super) fn on_disk(prefix: &str) -> (tempfile::TempDir, LocalFs) {
    fs_over(
        tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/var/tmp")
            .unwrap(),
    )
}

const MIB: u64 = 1 << 20;

#[test]
fn seek_finds_data_and_holes_of_a_sparse_file() {
    let (d, fs) = setup_on_disk();
    let r = fs.root();
    // 4 KiB of data, a hole to 1 MiB, 4 KiB of data, the implicit hole.
    let f = root_file(&fs, &r, b"sparse", 0o644, &[b'a'; 4096]);
    fs.write(&root(), &f, MIB, &[b'b'; 4096], Stable::FileSync)
        .unwrap();
    let size = MIB + 4096;
    let meta = std::fs::metadata(d.path().join("sparse")).unwrap();
    assert_eq!(meta.len(), size);
    // The filesystem under /var/tmp must keep the hole for this test to mean anything.
    assert!(std::os::unix::fs::MetadataExt::blocks(&meta) * 512 < MIB);
    let seek = |off, what| fs.seek(&root(), &f, off, what);
    assert_eq!(seek(0, SeekWhat::Data), Ok(0));
    assert_eq!(seek(100, SeekWhat::Data), Ok(100));
    assert_eq!(seek(0, SeekWhat::Hole), Ok(4096));
    assert_eq!(seek(4096, SeekWhat::Hole), Ok(4096));
    assert_eq!(seek(4096, SeekWhat::Data), Ok(MIB));
    assert_eq!(seek(MIB - 1, SeekWhat::Data), Ok(MIB));
    assert_eq!(seek(MIB, SeekWhat::Hole), Ok(size));
    assert_eq!(seek(size - 1, SeekWhat::Data), Ok(size - 1));
    // At or past the end there is nothing, not even the implicit hole.
    assert_eq!(seek(size, SeekWhat::Data), Err(FsError::NxIo));
    assert_eq!(seek(size, SeekWhat::Hole), Err(FsError::NxIo));
    assert_eq!(seek(u64::MAX, SeekWhat::Data), Err(FsError::NxIo));
    // A file that ends in a hole: no data after the last byte written.
    fs.setattr(
        &root(),
        &f,
        &SetAttr {
            size: Some(3 * MIB),
            ..SetAttr::default()
        },
    )
    .unwrap();
    assert_eq!(seek(MIB + 4096, SeekWhat::Data), Err(FsError::NxIo));
    assert_eq!(seek(MIB + 4096, SeekWhat::Hole), Ok(MIB + 4096));
}

#[test]
fn allocate_extends_and_deallocate_punches_a_hole() {
    let (_d, fs) = setup_on_disk();
    let r = fs.root();
    let f = root_file(&fs, &r, b"f", 0o666, &[b'x'; 3 * 4096]);
    // Punch the middle block: zeros there, a hole, the size unchanged.
    fs.deallocate(&root(), &f, 4096, 4096).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 3 * 4096);
    let mut buf = vec![0u8; 3 * 4096];
    assert_eq!(fs.read(&root(), &f, 0, &mut buf).unwrap(), (3 * 4096, true));
    assert!(buf[..4096].iter().all(|&b| b == b'x'));
    assert!(buf[4096..8192].iter().all(|&b| b == 0));
    assert!(buf[8192..].iter().all(|&b| b == b'x'));
    assert_eq!(fs.seek(&root(), &f, 0, SeekWhat::Hole), Ok(4096));
    assert_eq!(fs.seek(&root(), &f, 4096, SeekWhat::Data), Ok(8192));
    // Past the end: nothing to free, the size stays.
    fs.deallocate(&root(), &f, 10 * 4096, 4096).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 3 * 4096);
    // ALLOCATE past the end extends the file with zeros.
    fs.allocate(&root(), &f, 3 * 4096, 2 * 4096).unwrap();
    let a = fs.getattr(&f).unwrap();
    assert_eq!(a.size, 5 * 4096);
    let mut tail = vec![1u8; 2 * 4096];
    assert_eq!(
        fs.read(&root(), &f, 3 * 4096, &mut tail).unwrap(),
        (2 * 4096, true)
    );
    assert!(tail.iter().all(|&b| b == 0));
    // Inside the file it changes nothing.
    fs.allocate(&root(), &f, 0, 4096).unwrap();
    assert_eq!(fs.getattr(&f).unwrap().size, 5 * 4096);
    // A zero length is EINVAL, as fallocate(2) says.
    assert_eq!(fs.allocate(&root(), &f, 0, 0), Err(FsError::Inval));
    // A directory is not a file to allocate in.
    assert_eq!(fs.seek(&root(), &r, 0, SeekWhat::Data), Err(FsError::IsDir));
}

#[test]
fn allocate_and_deallocate_need_write_permission() {
    let Some((_d, fs, r)) = as_root(setup_on_disk) else {
        return;
    };
    let f = root_file(&fs, &r, b"ro", 0o644, &[b'x'; 8192]);
    assert_eq!(fs.allocate(&user(), &f, 0, 16384), Err(FsError::Acces));
    assert_eq!(fs.deallocate(&user(), &f, 0, 4096), Err(FsError::Acces));
    assert_eq!(fs.getattr(&f).unwrap().size, 8192);
    // Reading is allowed, so SEEK is too; not with no permission at all.
    assert_eq!(fs.seek(&user(), &f, 0, SeekWhat::Hole), Ok(8192));
    let g = root_file(&fs, &r, b"none", 0o600, b"x");
    assert_eq!(fs.seek(&user(), &g, 0, SeekWhat::Data), Err(FsError::Acces));
    // The owner may.
    let (h, _) = fs.create(&user(), &r, b"mine", &guarded(0o444)).unwrap();
    fs.allocate(&user(), &h, 0, 4096).unwrap();
    fs.deallocate(&user(), &h, 0, 4096).unwrap();
    assert_eq!(fs.getattr(&h).unwrap().size, 4096);
}

#[test]
fn copy_range_copies_between_files_and_stops_at_the_end() {
    let (_d, fs) = setup_on_disk();
    let r = fs.root();
    let data: Vec<u8> = (0..3 * MIB).map(|i| (i % 251) as u8).collect();
    let src = root_file(&fs, &r, b"src", 0o644, &data);
    let (dst, _) = fs.create(&root(), &r, b"dst", &guarded(0o644)).unwrap();
    // A range into the middle of an empty file: zeros before it.
    assert_eq!(fs.copy_range(&root(), &src, 100, &dst, 4096, MIB), Ok(MIB));
    let mut buf = vec![1u8; (MIB + 4096) as usize];
    assert_eq!(fs.read(&root(), &dst, 0, &mut buf).unwrap().0, buf.len());
    assert!(buf[..4096].iter().all(|&b| b == 0));
    assert_eq!(buf[4096..], data[100..100 + MIB as usize]);
    // More than is left: a short count; at the end, none.
    assert_eq!(
        fs.copy_range(&root(), &src, 2 * MIB, &dst, 0, 5 * MIB),
        Ok(MIB)
    );
    assert_eq!(fs.copy_range(&root(), &src, 3 * MIB, &dst, 0, 10), Ok(0));
    // Within one file: apart is fine, overlapping is not.
    assert_eq!(
        fs.copy_range(&root(), &src, 0, &src, 3 * MIB, 4096),
        Ok(4096)
    );
    assert_eq!(
        fs.copy_range(&root(), &src, 0, &src, 100, 4096),
        Err(FsError::Inval)
    );
    let mut tail = vec![0u8; 4096];
    fs.read(&root(), &src, 3 * MIB, &mut tail).unwrap();
    assert_eq!(tail, data[..4096]);
    // Directories are no files.
    assert_eq!(
        fs.copy_range(&root(), &r, 0, &dst, 0, 1),
        Err(FsError::IsDir)
    );
}

#[test]
fn copy_range_reads_as_read_and_writes_as_write() {
    let Some((_d, fs, r)) = as_root(setup_on_disk) else {
        return;
    };
    let readable = root_file(&fs, &r, b"readable", 0o644, b"data");
    let secret = root_file(&fs, &r, b"secret", 0o600, b"data");
    let (mine, _) = fs.create(&user(), &r, b"mine", &guarded(0o644)).unwrap();
    assert_eq!(fs.copy_range(&user(), &readable, 0, &mine, 0, 4), Ok(4));
    assert_eq!(
        fs.copy_range(&user(), &secret, 0, &mine, 0, 4),
        Err(FsError::Acces)
    );
    assert_eq!(
        fs.copy_range(&user(), &mine, 0, &readable, 0, 4),
        Err(FsError::Acces)
    );
    assert_eq!(
        fs.clone_range(&user(), &mine, 0, &readable, 0, 0),
        Err(FsError::Acces)
    );
}

/// /var/tmp is ext4 here, which shares no extents: CLONE is NotSupp and
/// says so cleanly. On a filesystem with reflinks the clone happens: set
/// TARN_REFLINK_DIR to a directory on one (XFS made with `-m reflink=1` on
/// a loop device, btrfs) and this test insists on it.
#[test]
fn clone_range_is_notsupp_without_reflinks() {
    let reflinks = std::env::var_os("TARN_REFLINK_DIR");
    let d = tempfile::Builder::new()
        .prefix("vfs-clone")
        .tempdir_in(reflinks.as_deref().unwrap_or("/var/tmp".as_ref()))
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let fs = LocalFs::new(d.path()).unwrap();
    let r = fs.root();
    let data: Vec<u8> = (0..256u32 << 10).map(|i| (i % 253) as u8).collect();
    let src = root_file(&fs, &r, b"src", 0o644, &data);
    let (dst, _) = fs.create(&root(), &r, b"dst", &guarded(0o644)).unwrap();
    match fs.clone_range(&root(), &src, 0, &dst, 0, 0) {
        Err(FsError::NotSupp) if reflinks.is_none() => {
            assert_eq!(fs.getattr(&dst).unwrap().size, 0)
        }
        Ok(()) => assert_eq!(std::fs::read(d.path().join("dst")).unwrap(), data),
        other => panic!("clone: {other:?}"),
    }
    if reflinks.is_some() {
        // A block-aligned range into the middle of another file.
        fs.clone_range(&root(), &src, 4096, &dst, 65536, 8192)
            .unwrap();
        let got = std::fs::read(d.path().join("dst")).unwrap();
        assert_eq!(got[65536..65536 + 8192], data[4096..4096 + 8192]);
        assert_eq!(got[..65536], data[..65536]);
    }
    // One file's overlapping ranges are refused before the filesystem is asked.
    assert_eq!(
        fs.clone_range(&root(), &src, 0, &src, 4096, 8192),
        Err(FsError::Inval)
    );
}

#[test]
fn advise_passes_hints_to_the_page_cache() {
    let (_d, fs) = setup_on_disk();
    let r = fs.root();
    let f = root_file(&fs, &r, b"f", 0o644, &[1; 8192]);
    for a in [
        Advice::Normal,
        Advice::Sequential,
        Advice::Random,
        Advice::WillNeed,
        Advice::DontNeed,
        Advice::NoReuse,
    ] {
        assert_eq!(fs.advise(&root(), &f, 0, 0, a), Ok(()), "{a:?}");
    }
    assert_eq!(
        fs.advise(&root(), &r, 0, 0, Advice::WillNeed),
        Err(FsError::IsDir)
    );
}

/// A backend in /var/tmp whose filesystem takes user xattrs, or None (with
/// a message) where it does not.
fn setup_xattrs() -> Option<(tempfile::TempDir, LocalFs)> {
    let (d, fs) = setup_on_disk();
    if !fs.xattr_support() {
        eprintln!("skipping: the filesystem of /var/tmp has no user xattrs");
        return None;
    }
    Some((d, fs))
}

#[test]
fn user_xattrs_round_trip_under_the_user_prefix() {
    let Some((d, fs)) = setup_xattrs() else {
        return;
    };
    let r = fs.root();
    let f = root_file(&fs, &r, b"x", 0o644, b"data");
    assert_eq!(fs.getxattr(&root(), &f, b"a"), Err(FsError::NoXattr));
    assert_eq!(fs.listxattrs(&root(), &f).unwrap(), Vec::<Vec<u8>>::new());
    let before = fs.getattr(&f).unwrap().ctime;
    fs.setxattr(&root(), &f, b"a", b"one", XattrSet::Create)
        .unwrap();
    assert_ne!(fs.getattr(&f).unwrap().ctime, before, "ctime moves");
    // On disk the NFS name `a` is `user.a`.
    let p = sys::cstr(d.path().join("x").as_os_str().as_bytes()).unwrap();
    let fd = sys::open_path(&p, libc::O_PATH).unwrap();
    let mut v = [0u8; 8];
    let n = sys::getxattr_fd(fd.as_fd(), c"user.a", &mut v).unwrap();
    assert_eq!(&v[..n], b"one");
    assert_eq!(fs.getxattr(&root(), &f, b"a").unwrap(), b"one");
    assert_eq!(
        fs.setxattr(&root(), &f, b"a", b"two", XattrSet::Create),
        Err(FsError::Exist)
    );
    assert_eq!(
        fs.setxattr(&root(), &f, b"b", b"two", XattrSet::Replace),
        Err(FsError::NoXattr)
    );
    fs.setxattr(&root(), &f, b"a", b"two", XattrSet::Replace)
        .unwrap();
    fs.setxattr(&root(), &f, b"b", b"", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&root(), &f, b"a").unwrap(), b"two");
    assert_eq!(fs.getxattr(&root(), &f, b"b").unwrap(), b"");
    assert_eq!(
        fs.listxattrs(&root(), &f).unwrap(),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    fs.removexattr(&root(), &f, b"a").unwrap();
    assert_eq!(fs.removexattr(&root(), &f, b"a"), Err(FsError::NoXattr));
    assert_eq!(fs.listxattrs(&root(), &f).unwrap(), vec![b"b".to_vec()]);
    // Directories carry them too.
    fs.setxattr(&root(), &r, b"d", b"dir", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&root(), &r, b"d").unwrap(), b"dir");
}

#[test]
fn xattr_names_and_values_are_bounded() {
    let Some((_d, fs)) = setup_xattrs() else {
        return;
    };
    let f = root_file(&fs, &fs.root(), b"x", 0o644, b"");
    let set = |name: &[u8], value: &[u8]| fs.setxattr(&root(), &f, name, value, XattrSet::Either);
    assert_eq!(set(b"", b"v"), Err(FsError::Inval));
    assert_eq!(set(b"a\0b", b"v"), Err(FsError::Inval));
    let longest = vec![b'n'; crate::XATTR_NAME_MAX - 5];
    set(&longest, b"v").unwrap();
    assert_eq!(fs.getxattr(&root(), &f, &longest).unwrap(), b"v");
    let mut too_long = longest.clone();
    too_long.push(b'n');
    assert_eq!(set(&too_long, b"v"), Err(FsError::NameTooLong));
    assert_eq!(
        set(b"big", &vec![0; crate::XATTR_SIZE_MAX + 1]),
        Err(FsError::XattrTooBig)
    );
    // Symlinks carry no user xattrs, and are never followed to find some.
    let (l, _) = fs
        .symlink(&root(), &fs.root(), b"l", b"x", &SetAttr::default())
        .unwrap();
    assert_eq!(fs.getxattr(&root(), &l, b"longest"), Err(FsError::NoXattr));
    assert_eq!(
        fs.setxattr(&root(), &l, b"n", b"v", XattrSet::Either),
        Err(FsError::Perm)
    );
    assert_eq!(fs.listxattrs(&root(), &l).unwrap(), Vec::<Vec<u8>>::new());
}

#[test]
fn xattrs_are_checked_as_the_caller() {
    if !running_as_root() {
        eprintln!("skipping: needs root to switch credentials");
        return;
    }
    let Some((_d, fs)) = setup_xattrs() else {
        return;
    };
    let r = fs.root();
    let readable = root_file(&fs, &r, b"ro", 0o644, b"");
    fs.setxattr(&root(), &readable, b"a", b"v", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&user(), &readable, b"a").unwrap(), b"v");
    assert_eq!(
        fs.listxattrs(&user(), &readable).unwrap(),
        vec![b"a".to_vec()]
    );
    assert_eq!(
        fs.setxattr(&user(), &readable, b"a", b"w", XattrSet::Either),
        Err(FsError::Acces)
    );
    assert_eq!(
        fs.removexattr(&user(), &readable, b"a"),
        Err(FsError::Acces)
    );
    let secret = root_file(&fs, &r, b"secret", 0o600, b"");
    fs.setxattr(&root(), &secret, b"a", b"v", XattrSet::Either)
        .unwrap();
    assert_eq!(fs.getxattr(&user(), &secret, b"a"), Err(FsError::Acces));
    assert_eq!(fs.listxattrs(&user(), &secret), Err(FsError::Acces));
    let open = root_file(&fs, &r, b"open", 0o666, b"");
    fs.setxattr(&user(), &open, b"a", b"mine", XattrSet::Either)
        .unwrap();
    fs.removexattr(&user(), &open, b"a").unwrap();
    // The thread is root again afterwards.
    assert_eq!(sys::set_thread_fsuid(u32::MAX), 0);
}

#[test]
fn acting_for_a_user_drops_cap_sys_resource_and_root_gets_it_back() {
    use rustix::thread::{capabilities, CapabilitySet};
    if !running_as_root()
        || !capabilities(None)
            .unwrap()
            .permitted
            .contains(CapabilitySet::SYS_RESOURCE)
    {
        return;
    }
    let (_d, fs) = setup();
    let has = || {
        capabilities(None)
            .unwrap()
            .effective
            .contains(CapabilitySet::SYS_RESOURCE)
    };
    // On a thread of its own, so the test harness's thread is untouched.
    std::thread::scope(|s| {
        s.spawn(|| {
            {
                let _g = fs.as_user(&user()).unwrap();
                assert!(!has(), "quotas would not hold for the user");
                // The filesystem capabilities went with the fsuid, and stay gone.
                assert!(!capabilities(None)
                    .unwrap()
                    .effective
                    .contains(CapabilitySet::DAC_OVERRIDE));
            }
            // Root's fs capabilities are back with its fsuid.
            assert!(capabilities(None)
                .unwrap()
                .effective
                .contains(CapabilitySet::DAC_OVERRIDE));
            let _g = fs.as_user(&root()).unwrap();
            assert!(has());
        });
    });
}
