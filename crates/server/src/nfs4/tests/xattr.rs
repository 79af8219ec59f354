//! NFSv4.2 extended attributes in process (RFC 8276): GETXATTR, SETXATTR,
//! LISTXATTRS and REMOVEXATTR with their errors, LISTXATTRS paging by
//! cookie and maxcount, change_info, permissions and read-only exports,
//! the xattr ACCESS bits, the xattr_support attribute, and the gate that
//! keeps all of it to minor version 2.

use super::*;
use crate::auth_cache::CacheConfig;
use vfs::{CreateHow, Cred, SetAttr};

fn get(key: &str) -> NfsArgop4 {
    NfsArgop4::OP_GETXATTR(Getxattr4args {
        gxa_name: name(key),
    })
}

fn set(how: SetxattrOption4, key: &str, value: &[u8]) -> NfsArgop4 {
    NfsArgop4::OP_SETXATTR(Setxattr4args {
        sxa_option: how,
        sxa_key: name(key),
        sxa_value: Bytes::copy_from_slice(value),
    })
}

fn remove(key: &str) -> NfsArgop4 {
    NfsArgop4::OP_REMOVEXATTR(Removexattr4args {
        rxa_name: name(key),
    })
}

fn list(cookie: u64, maxcount: u32) -> NfsArgop4 {
    NfsArgop4::OP_LISTXATTRS(Listxattrs4args {
        lxa_cookie: cookie,
        lxa_maxcount: maxcount,
    })
}

fn access(bits: u32) -> NfsArgop4 {
    NfsArgop4::OP_ACCESS(Access4args { access: bits })
}

use SetxattrOption4::{
    SETXATTR4_CREATE as CREATE, SETXATTR4_EITHER as EITHER, SETXATTR4_REPLACE as REPLACE,
};

/// The status of `op` on `fh` in minor version 2.
async fn status(fx: &Fx, s: &Sess, fh: &NfsFh4, op: NfsArgop4) -> Nfsstat4 {
    call42(fx, s, vec![putfh(fh), op]).await.status
}

async fn value(fx: &Fx, s: &Sess, fh: &NfsFh4, key: &str) -> Result<Bytes, Nfsstat4> {
    let r = call42(fx, s, vec![putfh(fh), get(key)]).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_GETXATTR(Getxattr4res::NFS4_OK(v))) => Ok(v.clone()),
        _ => Err(r.status),
    }
}

async fn listed(
    fx: &Fx,
    s: &Sess,
    fh: &NfsFh4,
    cookie: u64,
    max: u32,
) -> Result<Listxattrs4resok, Nfsstat4> {
    let r = call42(fx, s, vec![putfh(fh), list(cookie, max)]).await;
    match r.resarray.last() {
        Some(NfsResop4::OP_LISTXATTRS(Listxattrs4res::NFS4_OK(ok))) => Ok(ok.clone()),
        _ => Err(r.status),
    }
}

/// A session and a file it created (so the caller, uid 1000, owns it).
async fn file(fx: &Fx, file: &str) -> (Sess, NfsFh4) {
    let s = fx.client("c").await;
    let o = fx.open(&s, file, "o", BOTH, DENY_NONE).await.unwrap();
    (s, o.fh)
}

#[tokio::test]
async fn set_get_remove_with_the_options_errors() {
    let fx = Fx::new(cfg(90, 0));
    let (s, fh) = file(&fx, "f").await;
    assert_eq!(value(&fx, &s, &fh, "a").await, Err(NFS4ERR_NOXATTR));
    assert_eq!(
        status(&fx, &s, &fh, set(REPLACE, "a", b"1")).await,
        NFS4ERR_NOXATTR
    );
    assert_eq!(status(&fx, &s, &fh, set(CREATE, "a", b"1")).await, NFS4_OK);
    assert_eq!(
        status(&fx, &s, &fh, set(CREATE, "a", b"2")).await,
        NFS4ERR_EXIST
    );
    assert_eq!(value(&fx, &s, &fh, "a").await.unwrap(), &b"1"[..]);
    assert_eq!(status(&fx, &s, &fh, set(REPLACE, "a", b"2")).await, NFS4_OK);
    assert_eq!(value(&fx, &s, &fh, "a").await.unwrap(), &b"2"[..]);
    assert_eq!(status(&fx, &s, &fh, set(EITHER, "a", b"")).await, NFS4_OK);
    assert_eq!(value(&fx, &s, &fh, "a").await.unwrap(), &b""[..]);
    assert_eq!(status(&fx, &s, &fh, set(EITHER, "b", b"3")).await, NFS4_OK);
    assert_eq!(status(&fx, &s, &fh, remove("a")).await, NFS4_OK);
    assert_eq!(status(&fx, &s, &fh, remove("a")).await, NFS4ERR_NOXATTR);
    assert_eq!(value(&fx, &s, &fh, "a").await, Err(NFS4ERR_NOXATTR));
    assert_eq!(value(&fx, &s, &fh, "b").await.unwrap(), &b"3"[..]);
    // Names as pynfs sends them, "user." included, are just names.
    assert_eq!(
        status(&fx, &s, &fh, set(CREATE, "user.x", b"4")).await,
        NFS4_OK
    );
    assert_eq!(value(&fx, &s, &fh, "user.x").await.unwrap(), &b"4"[..]);
    // Bounds: an empty name, a name past XATTR_NAME_MAX with "user.", a
    // value past XATTR_SIZE_MAX.
    assert_eq!(
        status(&fx, &s, &fh, set(EITHER, "", b"v")).await,
        NFS4ERR_INVAL
    );
    let long = "n".repeat(vfs::XATTR_NAME_MAX - 4);
    assert_eq!(
        status(&fx, &s, &fh, set(EITHER, &long, b"v")).await,
        NFS4ERR_NAMETOOLONG
    );
    let big = vec![7; vfs::XATTR_SIZE_MAX + 1];
    assert_eq!(
        status(&fx, &s, &fh, set(EITHER, "big", &big)).await,
        NFS4ERR_XATTR2BIG
    );
    let most = vec![7; vfs::XATTR_SIZE_MAX];
    assert_eq!(
        status(&fx, &s, &fh, set(EITHER, "big", &most)).await,
        NFS4_OK
    );
    assert_eq!(
        value(&fx, &s, &fh, "big").await.unwrap().len(),
        vfs::XATTR_SIZE_MAX
    );
}

#[tokio::test]
async fn set_and_remove_report_the_change_attribute() {
    let fx = Fx::new(cfg(90, 0));
    let (s, fh) = file(&fx, "f").await;
    let change = || async {
        let r = call42(
            &fx,
            &s,
            vec![
                putfh(&fh),
                NfsArgop4::OP_GETATTR(Getattr4args {
                    attr_request: vec![1 << FATTR4_CHANGE],
                }),
            ],
        )
        .await;
        match r.resarray.last() {
            Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) => {
                u64::from_be_bytes(ok.obj_attributes.attr_vals[..8].try_into().unwrap())
            }
            _ => panic!("GETATTR: {:?}", statuses(&r)),
        }
    };
    let before = change().await;
    std::thread::sleep(Duration::from_millis(2));
    let r = call42(&fx, &s, vec![putfh(&fh), set(EITHER, "a", b"1")]).await;
    let Some(NfsResop4::OP_SETXATTR(Setxattr4res::NFS4_OK(ci))) = r.resarray.last() else {
        panic!("SETXATTR: {:?}", statuses(&r));
    };
    assert_eq!(ci.before, before);
    assert!(ci.after > ci.before);
    assert_eq!(ci.after, change().await);
    std::thread::sleep(Duration::from_millis(2));
    let r = call42(&fx, &s, vec![putfh(&fh), remove("a")]).await;
    let Some(NfsResop4::OP_REMOVEXATTR(Removexattr4res::NFS4_OK(ri))) = r.resarray.last() else {
        panic!("REMOVEXATTR: {:?}", statuses(&r));
    };
    assert_eq!(ri.before, ci.after);
    assert!(ri.after > ri.before);
}

#[tokio::test]
async fn listxattrs_pages_by_cookie_within_maxcount() {
    let fx = Fx::new(cfg(90, 0));
    let (s, fh) = file(&fx, "f").await;
    let empty = listed(&fx, &s, &fh, 0, 8192).await.unwrap();
    assert!(empty.lxr_names.is_empty() && empty.lxr_eof);
    let names: Vec<String> = (0..6).map(|i| format!("attr{i}")).collect();
    for n in &names {
        assert_eq!(status(&fx, &s, &fh, set(CREATE, n, b"v")).await, NFS4_OK);
    }
    let all = listed(&fx, &s, &fh, 0, 8192).await.unwrap();
    assert!(all.lxr_eof);
    let got: Vec<&[u8]> = all.lxr_names.iter().map(|n| &n[..]).collect();
    let want: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    assert_eq!(got, want);
    // Cookie (8) + count (4) + eof (4) + two names of 4 + 8 bytes each.
    let (mut cookie, mut seen) = (0, Vec::new());
    loop {
        let page = listed(&fx, &s, &fh, cookie, 16 + 2 * 12).await.unwrap();
        assert!(page.lxr_names.len() <= 2);
        seen.extend(page.lxr_names.iter().cloned());
        cookie = page.lxr_cookie;
        if page.lxr_eof {
            break;
        }
    }
    assert_eq!(seen, all.lxr_names);
    assert_eq!(
        listed(&fx, &s, &fh, 0, 16 + 11).await.unwrap_err(),
        NFS4ERR_TOOSMALL
    );
    assert_eq!(
        listed(&fx, &s, &fh, 7, 8192).await.unwrap_err(),
        NFS4ERR_BAD_COOKIE
    );
}

#[tokio::test]
async fn permissions_read_only_exports_and_access_bits() {
    let fx = Fx::new(cfg(90, 0));
    let (s, mine) = file(&fx, "mine").await;
    // A file root made, readable by all: the caller (uid 1000) may read
    // its attributes but not change them.
    let backend = fx
        .live
        .load_full()
        .exports
        .iter()
        .next()
        .unwrap()
        .backend
        .clone();
    let (theirs_fid, _) = backend
        .create(
            &Cred::root(),
            &backend.root(),
            b"theirs",
            &CreateHow::Guarded(SetAttr::mode(0o644)),
        )
        .unwrap();
    backend
        .setxattr(
            &Cred::root(),
            &theirs_fid,
            b"a",
            b"root's",
            vfs::XattrSet::Either,
        )
        .unwrap();
    let r = call42(
        &fx,
        &s,
        vec![
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_LOOKUP(Lookup4args {
                objname: name("theirs"),
            }),
            NfsArgop4::OP_GETFH,
        ],
    )
    .await;
    let Some(NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(g))) = r.resarray.last() else {
        panic!("{:?}", statuses(&r));
    };
    let theirs = g.object.clone();
    assert_eq!(value(&fx, &s, &theirs, "a").await.unwrap(), &b"root's"[..]);
    assert_eq!(
        listed(&fx, &s, &theirs, 0, 8192)
            .await
            .unwrap()
            .lxr_names
            .len(),
        1
    );
    assert_eq!(
        status(&fx, &s, &theirs, set(EITHER, "a", b"x")).await,
        NFS4ERR_ACCESS
    );
    assert_eq!(status(&fx, &s, &theirs, remove("a")).await, NFS4ERR_ACCESS);

    let xa = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;
    let granted = |fh: NfsFh4, minor: u32| {
        let fx = &fx;
        let s = &s;
        async move {
            let ops = vec![fx.sequence(s), putfh(&fh), access(ACCESS4_READ | xa)];
            let r = fx.compound(minor, ops).await;
            match r.resarray.last() {
                Some(NfsResop4::OP_ACCESS(Access4res::NFS4_OK(ok))) => (ok.supported, ok.access),
                _ => panic!("ACCESS: {:?}", statuses(&r)),
            }
        }
    };
    let all = ACCESS4_READ | xa;
    assert_eq!(granted(mine.clone(), 2).await, (all, all));
    assert_eq!(
        granted(theirs.clone(), 2).await,
        (all, ACCESS4_READ | ACCESS4_XAREAD | ACCESS4_XALIST)
    );
    // Before 4.2 the xattr bits mean nothing.
    assert_eq!(granted(mine.clone(), 1).await, (ACCESS4_READ, ACCESS4_READ));

    // The same export, now read-only: reading still works, changing is ROFS.
    let snap = fx.live.load_full();
    let export = snap.exports.iter().next().unwrap();
    fx.live.replace(
        Exports::new(vec![Export::simple(
            export.path.clone(),
            export.pseudo.clone(),
            export.backend.clone(),
            &["127.0.0.1/32".parse::<Cidr>().unwrap()],
            true,
            Squash::Root,
        )]),
        CacheConfig::default(),
    );
    assert_eq!(
        status(&fx, &s, &mine, set(EITHER, "a", b"x")).await,
        NFS4ERR_ROFS
    );
    assert_eq!(status(&fx, &s, &theirs, remove("a")).await, NFS4ERR_ROFS);
    assert_eq!(value(&fx, &s, &theirs, "a").await.unwrap(), &b"root's"[..]);
    assert_eq!(
        granted(mine.clone(), 2).await,
        (all, ACCESS4_READ | ACCESS4_XAREAD | ACCESS4_XALIST)
    );
}

#[tokio::test]
async fn xattrs_are_minor_version_2_only() {
    let fx = Fx::new(cfg(90, 0));
    let (s, fh) = file(&fx, "f").await;
    for op in [get("a"), set(EITHER, "a", b"v"), list(0, 8192), remove("a")] {
        let r = fx.call(&s, vec![putfh(&fh), op.clone()]).await;
        assert_eq!(statuses(&r).last(), Some(&(OP_ILLEGAL, NFS4ERR_OP_ILLEGAL)));
        let r = fx.compound(0, vec![putfh(&fh), op]).await;
        assert_eq!(statuses(&r).last().unwrap().1, NFS4ERR_OP_ILLEGAL);
    }
    // xattr_support: listed and true in 4.2, unknown before.
    let bit = FATTR4_XATTR_SUPPORT;
    let request = vec![1 << FATTR4_SUPPORTED_ATTRS, 0, 1 << (bit - 64)];
    let getattr = NfsArgop4::OP_GETATTR(Getattr4args {
        attr_request: request,
    });
    let r = call42(&fx, &s, vec![putfh(&fh), getattr.clone()]).await;
    let Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("{:?}", statuses(&r));
    };
    let a = &ok.obj_attributes;
    assert!(attr::bitmap_has(&a.attrmask, bit));
    let vals = &a.attr_vals;
    assert_eq!(
        &vals[vals.len() - 4..],
        &[0, 0, 0, 1],
        "xattr_support is true"
    );
    assert!(attr::bitmap_has(&attr::supported_attrs(2), bit));
    assert!(!attr::bitmap_has(&attr::supported_attrs(1), bit));
    let r = fx.call(&s, vec![putfh(&fh), getattr]).await;
    let Some(NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok))) = r.resarray.last() else {
        panic!("{:?}", statuses(&r));
    };
    assert!(!attr::bitmap_has(&ok.obj_attributes.attrmask, bit));
}
