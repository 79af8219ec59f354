//! The security suite in one place, against a real `tarn serve` with three
//! exports: each hostile call is refused with the right error, the refusal
//! is logged (with the call's xid), and the server keeps serving a good
//! client (NULL and GETATTR) afterwards.
//!
//! - handles with one bit flipped, cut short or padded (BADHANDLE), of a
//!   removed file (STALE), and of an export the caller is not allowed on
//!   (ACCES), over NFSv3 and NFSv4;
//! - `..` from an export's root stays at the root (NFSv3), and NFSv4's
//!   LOOKUPP climbs only the pseudo filesystem, never the server's tree;
//! - a symlink pointing outside the export is returned as text, never
//!   followed by the server;
//! - AUTH_SYS uid 0 on a root-squashed export creates files owned by
//!   nobody (and by root where the export says no_root_squash);
//! - AUTH_SYS with 17 groups or a 256-byte machine name is AUTH_BADCRED;
//! - a client address no export lists gets MNT3ERR_ACCES, NFS3ERR_ACCES
//!   and NFS4ERR_ACCESS... as below;
//! - a krb5p call whose sealed body was changed is GARBAGE_ARGS.
//!
//! - an AUTH_SYS call from a source port of 1024 or more on a `secure`
//!   export gets MNT3ERR_ACCES, NFS3ERR_PERM or NFS4ERR_PERM (as mountd and
//!   Linux's server answer), and `tarn import-exports` carries exports(5)'s
//!   secure (its default) and insecure over.

mod common;
use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use proto::nfs4::{self as v4, NfsArgop4, NfsResop4};
use proto::rpc::{AcceptStat, AuthStat, AuthsysParms, OpaqueAuth, AUTH_SYS};
use rpc::client::{auth_none, auth_sys};
use rpc::msg::{decode_reply, ReplyStatus};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use xdr::Unpack;

/// A server from a TOML config: `a` (pseudo `/`, root squashed), `b`
/// (`/b`, no_root_squash), both for 127.0.0.1; `c` (`/c`) only for 127.0.0.3.
struct Srv {
    child: Child,
    addr: SocketAddr,
    a: PathBuf,
    b: PathBuf,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Srv {
    fn start(extra: &[&str]) -> Srv {
        Self::start_with("{ client = \"127.0.0.1\", options = [\"rw\"] }", extra)
    }

    /// The same, with these rules for export `a`.
    fn start_with(a_rules: &str, extra: &[&str]) -> Srv {
        let (tmp, a, state) = temp_export();
        let (b, c) = (tmp.path().join("b"), tmp.path().join("c"));
        // Mount points in `a` for NFSv4's pseudo filesystem.
        std::fs::create_dir_all(a.join("b")).unwrap();
        std::fs::create_dir_all(a.join("c")).unwrap();
        for d in [&b, &c] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
        }
        let port = free_port();
        let file = tmp.path().join("exports.toml");
        std::fs::write(
            &file,
            format!(
                "[[export]]\npath = \"{}\"\npseudo = \"/\"\nrules = [ {a_rules} ]\n\n\
                 [[export]]\npath = \"{}\"\npseudo = \"/b\"\nrules = [ {{ client = \"127.0.0.1\", options = [\"rw\", \"no_root_squash\"] }} ]\n\n\
                 [[export]]\npath = \"{}\"\npseudo = \"/c\"\nrules = [ {{ client = \"127.0.0.3\", options = [\"rw\"] }} ]\n",
                a.display(),
                b.display(),
                c.display()
            ),
        )
        .unwrap();
        let log = state.join("server.log");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
        cmd.args(["serve", "--config", file.to_str().unwrap()])
            .args(["--listen", &addr.to_string()])
            .args([
                "--state-dir",
                state.to_str().unwrap(),
                "--log-level",
                "debug",
            ])
            .args(extra);
        let child = spawn_serving_drained(&mut cmd, &log, "tarn serve");
        Srv {
            child,
            addr,
            a,
            b,
            log,
            _tmp: tmp,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server logged something about the call with this xid.
    fn logged(&self, xid: u32, what: &str) {
        let want = format!("xid={xid}");
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(5) {
            if self.log_text().lines().any(|l| l.contains(&want)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("{what}: nothing logged for xid {xid}:\n{}", self.log_text());
    }

    /// Client `c` is refused: its MNT answers MNT3ERR_ACCES, logged with
    /// `mnt_logged`; its NFSv3 GETATTR of `root` (XID `xid`) answers
    /// `v3`, logged (the check says `what`).
    fn refuses_mnt_and_v3(
        &self,
        c: &mut TcpStream,
        root: &NfsFh3,
        mnt_logged: &str,
        xid: u32,
        v3: Nfsstat3,
        what: &str,
    ) {
        assert_eq!(mnt(c, "/"), Err(proto::mount::Mountstat3::MNT3ERR_ACCES));
        assert!(
            self.log_text().contains(mnt_logged),
            "MNT refusal logged ({mnt_logged})"
        );
        assert_eq!(getattr3(c, xid, &root.data), Err(v3));
        self.logged(xid, what);
    }

    /// A new connection and the handle its MNT of `path` got.
    fn mounted(&self, path: &str) -> (TcpStream, NfsFh3) {
        let mut c = TcpStream::connect(self.addr).unwrap();
        let fh = mnt(&mut c, path).unwrap();
        (c, fh)
    }

    /// A good client is still served: NULL, then GETATTR of export a's root.
    fn still_serves(&self) {
        let mut c = TcpStream::connect(self.addr).unwrap();
        let r = raw_call(
            &mut c,
            &call_record(1, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
        )
        .expect("NULL answered");
        assert_eq!(
            decode_reply(r.into()).unwrap().1,
            ReplyStatus::Success,
            "NULL"
        );
        let root = mnt(&mut c, "/").expect("MNT /");
        let g: Getattr3res = nfs3(&mut c, 2, NFSPROC3_GETATTR, &Getattr3args { object: root });
        assert!(matches!(g, Getattr3res::NFS3_OK(_)), "GETATTR: {g:?}");
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_secs(10) {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn user() -> OpaqueAuth {
    auth_sys(1000, 1000, &[], "client")
}

/// A call's RPC-level status and its results.
fn rpc_call(
    c: &mut TcpStream,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    args: &[u8],
) -> (ReplyStatus, xdr::Decoder) {
    let r = raw_call(c, &call_record(xid, prog, vers, proc_, cred, args)).expect("a reply");
    let (x, st, d) = decode_reply(r.into()).unwrap();
    assert_eq!(x, xid);
    (st, d)
}

fn mnt_as(
    c: &mut TcpStream,
    path: &str,
    cred: &OpaqueAuth,
) -> Result<NfsFh3, proto::mount::Mountstat3> {
    let args = xdr::to_bytes(&proto::mount::Dirpath(Bytes::copy_from_slice(
        path.as_bytes(),
    )));
    static XID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x4d4e_5400);
    let xid = XID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (st, mut d) = rpc_call(c, xid, proto::mount::MOUNT_PROGRAM, 3, 1, cred, &args);
    assert_eq!(st, ReplyStatus::Success);
    match proto::mount::Mountres3::unpack(&mut d).unwrap() {
        proto::mount::Mountres3::MNT3_OK(ok) => Ok(NfsFh3 { data: ok.fhandle.0 }),
        proto::mount::Mountres3::Default(s) => Err(s),
    }
}

fn mnt(c: &mut TcpStream, path: &str) -> Result<NfsFh3, proto::mount::Mountstat3> {
    mnt_as(c, path, &user())
}

fn nfs3_as<A: xdr::Pack, R: Unpack>(
    c: &mut TcpStream,
    xid: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    a: &A,
) -> R {
    let (st, mut d) = rpc_call(c, xid, NFS_PROGRAM, 3, proc_, cred, &xdr::to_bytes(a));
    assert_eq!(st, ReplyStatus::Success, "xid {xid}");
    R::unpack(&mut d).unwrap()
}

fn nfs3<A: xdr::Pack, R: Unpack>(c: &mut TcpStream, xid: u32, proc_: u32, a: &A) -> R {
    nfs3_as(c, xid, proc_, &user(), a)
}

fn getattr3(c: &mut TcpStream, xid: u32, fh: &[u8]) -> Result<Fattr3, Nfsstat3> {
    let g: Getattr3res = nfs3(
        c,
        xid,
        NFSPROC3_GETATTR,
        &Getattr3args {
            object: NfsFh3 {
                data: Bytes::copy_from_slice(fh),
            },
        },
    );
    match g {
        Getattr3res::NFS3_OK(ok) => Ok(ok.obj_attributes),
        Getattr3res::Default(s) => Err(s),
    }
}

fn lookup3(
    c: &mut TcpStream,
    xid: u32,
    dir: &NfsFh3,
    name: &str,
) -> Result<Lookup3resok, Nfsstat3> {
    let l: Lookup3res = nfs3(
        c,
        xid,
        NFSPROC3_LOOKUP,
        &Lookup3args {
            what: Diropargs3 {
                dir: dir.clone(),
                name: Bytes::copy_from_slice(name.as_bytes()),
            },
        },
    );
    match l {
        Lookup3res::NFS3_OK(ok) => Ok(ok),
        Lookup3res::Default(s, _) => Err(s),
    }
}

/// An NFSv4.0 COMPOUND (no state needed for what this suite does): the
/// overall status and the results.
fn compound(c: &mut TcpStream, xid: u32, ops: Vec<NfsArgop4>) -> (v4::Nfsstat4, Vec<NfsResop4>) {
    let args = xdr::to_bytes(&v4::Compound4args {
        tag: Bytes::new(),
        minorversion: 0,
        argarray: ops,
    });
    let (st, mut d) = rpc_call(c, xid, v4::NFS4_PROGRAM, 4, 1, &user(), &args);
    assert_eq!(st, ReplyStatus::Success, "xid {xid}");
    let r = v4::Compound4res::unpack(&mut d).unwrap();
    (r.status, r.resarray)
}

fn putfh(fh: &[u8]) -> NfsArgop4 {
    NfsArgop4::OP_PUTFH(v4::Putfh4args {
        object: v4::NfsFh4(Bytes::copy_from_slice(fh)),
    })
}

fn getfh_of(res: &[NfsResop4]) -> Bytes {
    res.iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::OP_GETFH(v4::Getfh4res::NFS4_OK(ok)) => Some(ok.object.0.clone()),
            _ => None,
        })
        .expect("a GETFH result")
}

fn v4_lookup(name: &str) -> NfsArgop4 {
    NfsArgop4::OP_LOOKUP(v4::Lookup4args {
        objname: Bytes::copy_from_slice(name.as_bytes()),
    })
}

fn v4_getattr() -> NfsArgop4 {
    NfsArgop4::OP_GETATTR(v4::Getattr4args {
        attr_request: vec![1 << v4::FATTR4_TYPE],
    })
}

#[test]
fn forged_stale_and_foreign_handles() {
    let s = Srv::start(&[]);
    let (mut c, root) = s.mounted("/");
    std::fs::write(s.a.join("f"), b"data").unwrap();
    let f = lookup3(&mut c, 1, &root, "f").unwrap().object;

    let good = f.data.to_vec();
    // Stale: the file is removed behind the server's back. Tarn's handles
    // are persistent, so NFSv4's FHEXPIRED never applies.
    std::fs::remove_file(s.a.join("f")).unwrap();
    assert_eq!(
        getattr3(&mut c, 0x0f15_0000, &good),
        Err(Nfsstat3::NFS3ERR_STALE)
    );
    let (st, _) = compound(&mut c, 0x0f15_0001, vec![putfh(&good), v4_getattr()]);
    assert_eq!(st, v4::Nfsstat4::NFS4ERR_STALE);
    s.logged(0x0f15_0000, "a stale NFSv3 handle");

    // A genuine handle of export c, which only 127.0.0.3 may use: from
    // 127.0.0.1 it is refused, though the handle itself is valid.
    let mut c3 = connect_from(s.addr, "127.0.0.3");
    let c_root = mnt(&mut c3, "/c").expect("127.0.0.3 mounts /c");
    assert!(getattr3(&mut c3, 0x0f16_0000, &c_root.data).is_ok());
    assert_eq!(
        getattr3(&mut c, 0x0f16_0001, &c_root.data),
        Err(Nfsstat3::NFS3ERR_ACCES)
    );
    s.logged(0x0f16_0001, "another export's handle");
    let (st, _) = compound(&mut c, 0x0f16_0002, vec![putfh(&c_root.data), v4_getattr()]);
    assert_eq!(
        st,
        v4::Nfsstat4::NFS4ERR_ACCESS,
        "v4: another export's handle"
    );
    assert_eq!(
        mnt(&mut c, "/c"),
        Err(proto::mount::Mountstat3::MNT3ERR_ACCES)
    );
    // Export b's handle with export a's id in it (a handle moved to
    // another export) is a forgery like any other.
    let b_root = mnt(&mut c, "/b").unwrap();
    let mut moved = b_root.data.to_vec();
    moved[1..5].copy_from_slice(&root.data[1..5]);
    if moved != b_root.data.to_vec() {
        assert_eq!(
            getattr3(&mut c, 0x0f17_0000, &moved),
            Err(Nfsstat3::NFS3ERR_BADHANDLE)
        );
    }

    // Every single-bit change of a valid handle, over NFSv3 and NFSv4.
    let mut xid = 0x0f11_0000;
    for bit in 0..good.len() * 8 {
        let mut h = good.clone();
        h[bit / 8] ^= 1 << (bit % 8);
        xid += 1;
        assert_eq!(
            getattr3(&mut c, xid, &h),
            Err(Nfsstat3::NFS3ERR_BADHANDLE),
            "bit {bit}"
        );
        xid += 1;
        let (st, _) = compound(&mut c, xid, vec![putfh(&h), v4_getattr()]);
        assert_eq!(st, v4::Nfsstat4::NFS4ERR_BADHANDLE, "v4, bit {bit}");
    }
    // Logged (the first ones: a client's log lines are rate-limited, so
    // one client cannot flood the log).
    s.logged(0x0f11_0001, "a forged NFSv3 handle");
    s.logged(0x0f11_0002, "a forged NFSv4 handle");
    // Cut short, one byte more, empty, and over the 64/128-byte limits.
    for (i, h) in [
        good[..good.len() - 1].to_vec(),
        [good.clone(), vec![0]].concat(),
        vec![],
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            getattr3(&mut c, 0x0f12_0000 + i as u32, h),
            Err(Nfsstat3::NFS3ERR_BADHANDLE),
            "handle {h:02x?}"
        );
        let (st, _) = compound(&mut c, 0x0f13_0000 + i as u32, vec![putfh(h), v4_getattr()]);
        assert_eq!(st, v4::Nfsstat4::NFS4ERR_BADHANDLE, "v4 handle {h:02x?}");
    }
    let (st, _) = compound(&mut c, 0x0f14_0000, vec![putfh(&[7; 129]), v4_getattr()]);
    // Over NFS4_FHSIZE the argument itself does not decode.
    assert!(
        matches!(
            st,
            v4::Nfsstat4::NFS4ERR_BADXDR | v4::Nfsstat4::NFS4ERR_BADHANDLE
        ),
        "a 129-byte NFSv4 handle: {st:?}"
    );

    s.still_serves();
}

#[test]
fn dotdot_and_symlinks_stay_inside_the_export() {
    let s = Srv::start(&[]);
    let (mut c, b_root) = s.mounted("/b");
    // NFSv3: `..` of an export's root is that root, not the directory above it.
    let up = lookup3(&mut c, 0x0d07_0001, &b_root, "..").unwrap();
    assert_eq!(up.object, b_root, "`..` of export b's root");
    let up2 = lookup3(&mut c, 0x0d07_0002, &up.object, "..").unwrap();
    assert_eq!(up2.object, b_root);
    // NFSv4: LOOKUPP from b's root climbs the pseudo filesystem to the
    // root export `a` (b's real parent directory is the test's temp dir,
    // which holds a, b and c side by side), and no further.
    let a_root = mnt(&mut c, "/").unwrap();
    let (st, res) = compound(
        &mut c,
        0x0d07_0003,
        vec![
            putfh(&b_root.data),
            NfsArgop4::OP_LOOKUPP,
            NfsArgop4::OP_GETFH,
        ],
    );
    assert_eq!(st, v4::Nfsstat4::NFS4_OK);
    let parent = getfh_of(&res);
    assert_ne!(parent, b_root.data);
    let (st, res) = compound(
        &mut c,
        0x0d07_0004,
        vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH],
    );
    assert_eq!(st, v4::Nfsstat4::NFS4_OK);
    assert_eq!(parent, getfh_of(&res), "LOOKUPP from /b is the pseudo root");
    let _ = a_root;
    let (st, _) = compound(
        &mut c,
        0x0d07_0005,
        vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_LOOKUPP],
    );
    assert_eq!(st, v4::Nfsstat4::NFS4ERR_NOENT, "LOOKUPP from the root");
    s.logged(0x0d07_0005, "LOOKUPP above the root");
    // `..` is no name in NFSv4.
    let (st, _) = compound(
        &mut c,
        0x0d07_0006,
        vec![putfh(&b_root.data), v4_lookup("..")],
    );
    assert_eq!(st, v4::Nfsstat4::NFS4ERR_BADNAME, "LOOKUP .. over NFSv4");

    // Symlinks out of the export: absolute and relative.
    std::fs::write(s.a.join("secret-outside"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc", s.b.join("abs")).unwrap();
    std::os::unix::fs::symlink("../", s.b.join("rel")).unwrap();
    for (i, (name, target)) in [("abs", "/etc"), ("rel", "../")].into_iter().enumerate() {
        let i = i as u32 * 16;
        let l = lookup3(&mut c, 0x5e01_0000 + i, &b_root, name).unwrap();
        assert_eq!(l.obj_attributes.unwrap().r#type, Ftype3::NF3LNK, "{name}");
        let r: Readlink3res = nfs3(
            &mut c,
            0x5e01_0001 + i,
            NFSPROC3_READLINK,
            &Readlink3args {
                symlink: l.object.clone(),
            },
        );
        let Readlink3res::NFS3_OK(ok) = r else {
            panic!("READLINK {name}: {r:?}")
        };
        assert_eq!(&ok.data[..], target.as_bytes(), "READLINK gives the text");
        // A LOOKUP under the link is not resolved by the server.
        let under = if name == "abs" {
            "passwd"
        } else {
            "secret-outside"
        };
        assert_eq!(
            lookup3(&mut c, 0x5e01_0002 + i, &l.object, under).map(|_| ()),
            Err(Nfsstat3::NFS3ERR_NOTDIR),
            "LOOKUP through {name}"
        );
        let (st, res) = compound(
            &mut c,
            0x5e01_0003 + i,
            vec![putfh(&b_root.data), v4_lookup(name), NfsArgop4::OP_READLINK],
        );
        assert_eq!(st, v4::Nfsstat4::NFS4_OK, "v4 READLINK {name}");
        assert!(
            matches!(res.last(), Some(NfsResop4::OP_READLINK(v4::Readlink4res::NFS4_OK(ok))) if &ok.link[..] == target.as_bytes()),
            "{res:?}"
        );
        let (st, _) = compound(
            &mut c,
            0x5e01_0004 + i,
            vec![putfh(&b_root.data), v4_lookup(name), v4_lookup(under)],
        );
        assert!(
            matches!(st, v4::Nfsstat4::NFS4ERR_SYMLINK),
            "v4 LOOKUP through {name}: {st:?}"
        );
        s.logged(0x5e01_0002 + i, "LOOKUP through a symlink");
    }
    s.still_serves();
}

#[test]
fn root_is_squashed_where_the_export_says_so() {
    use std::os::unix::fs::MetadataExt;
    // Owners other than its own are given only by a server running as root
    // (as the test command runs).
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("skipped: the server must run as root to give files other owners");
        return;
    }
    let s = Srv::start(&[]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    let root = auth_sys(0, 0, &[0], "client");
    let create = |c: &mut TcpStream, xid, dir: &NfsFh3, name: &'static str| -> Create3res {
        nfs3_as(c, xid, NFSPROC3_CREATE, &root, &create3_args(dir, name))
    };
    let a_root = mnt_as(&mut c, "/", &root).unwrap();
    let r = create(&mut c, 0x5a0_0001, &a_root, "by-root");
    assert!(matches!(r, Create3res::NFS3_OK(_)), "{r:?}");
    let m = std::fs::metadata(s.a.join("by-root")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (65534, 65534),
        "root squashed to nobody"
    );
    // Squashed root cannot claim ownership back either.
    let f = lookup3(&mut c, 0x5a0_0003, &a_root, "by-root")
        .unwrap()
        .object;
    let set: Setattr3res = nfs3_as(
        &mut c,
        0x5a0_0002,
        NFSPROC3_SETATTR,
        &root,
        &Setattr3args {
            object: f,
            new_attributes: Sattr3 {
                mode: None,
                uid: Some(0),
                gid: None,
                size: None,
                atime: SetAtime::Default(TimeHow::DONT_CHANGE),
                mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
            },
            guard: None,
        },
    );
    assert!(
        matches!(set, Setattr3res::Default(Nfsstat3::NFS3ERR_PERM, _)),
        "chown to root by squashed root: {set:?}"
    );
    s.logged(0x5a0_0002, "chown by squashed root");
    assert_eq!(std::fs::metadata(s.a.join("by-root")).unwrap().uid(), 65534);
    // Export b says no_root_squash.
    let b_root = mnt_as(&mut c, "/b", &root).unwrap();
    let r = create(&mut c, 0x5a0_0004, &b_root, "by-root");
    assert!(matches!(r, Create3res::NFS3_OK(_)), "{r:?}");
    assert_eq!(std::fs::metadata(s.b.join("by-root")).unwrap().uid(), 0);
    s.still_serves();
}

fn sys_cred(ngids: usize, machine: usize) -> OpaqueAuth {
    OpaqueAuth {
        flavor: AUTH_SYS,
        body: xdr::to_bytes(&AuthsysParms {
            stamp: 1,
            machinename: Bytes::from(vec![b'm'; machine]),
            uid: 1000,
            gid: 1000,
            gids: (1..=ngids as u32).collect(),
        }),
    }
}

#[test]
fn malformed_auth_sys_is_badcred() {
    let s = Srv::start(&[]);
    let (mut c, root) = s.mounted("/");
    let ga = xdr::to_bytes(&Getattr3args {
        object: root.clone(),
    });
    // At the limits: served.
    let (st, _) = rpc_call(
        &mut c,
        0xbadc_0001,
        NFS_PROGRAM,
        3,
        1,
        &sys_cred(16, 255),
        &ga,
    );
    assert_eq!(st, ReplyStatus::Success, "16 groups, 255-byte name");
    for (xid, cred) in [
        (0xbadc_0002, sys_cred(17, 8)),
        (0xbadc_0003, sys_cred(0, 256)),
    ] {
        let (st, _) = rpc_call(&mut c, xid, NFS_PROGRAM, 3, 1, &cred, &ga);
        assert_eq!(
            st,
            ReplyStatus::AuthError(AuthStat::AUTH_BADCRED),
            "xid {xid:#x}"
        );
        s.logged(xid, "AUTH_BADCRED");
        // Over NFSv4 and MOUNT too.
        let (st, _) = rpc_call(&mut c, xid + 16, v4::NFS4_PROGRAM, 4, 0, &cred, &[]);
        assert_eq!(st, ReplyStatus::AuthError(AuthStat::AUTH_BADCRED));
        let (st, _) = rpc_call(
            &mut c,
            xid + 32,
            proto::mount::MOUNT_PROGRAM,
            3,
            0,
            &cred,
            &[],
        );
        assert_eq!(st, ReplyStatus::AuthError(AuthStat::AUTH_BADCRED));
    }
    // A credential body longer than RFC 5531's 400 bytes.
    let long = OpaqueAuth {
        flavor: AUTH_SYS,
        body: Bytes::from(vec![0u8; 404]),
    };
    let (st, _) = rpc_call(&mut c, 0xbadc_0004, NFS_PROGRAM, 3, 0, &long, &[]);
    assert_eq!(st, ReplyStatus::AuthError(AuthStat::AUTH_BADCRED));
    // The same connection is still served.
    let (st, _) = rpc_call(&mut c, 0xbadc_0005, NFS_PROGRAM, 3, 1, &user(), &ga);
    assert_eq!(st, ReplyStatus::Success);
    s.still_serves();
}

#[test]
fn unlisted_client_address_is_refused() {
    let s = Srv::start(&[]);
    let (_good, root) = s.mounted("/");
    let mut bad = connect_from(s.addr, "127.0.0.9");
    s.refuses_mnt_and_v3(
        &mut bad,
        &root,
        "MNT refused",
        0xacce_0001,
        Nfsstat3::NFS3ERR_ACCES,
        "NFSv3 from an unlisted address",
    );
    // NFSv4: the root export's handle, and the pseudo root it is mounted at.
    let (st, _) = compound(&mut bad, 0xacce_0002, vec![putfh(&root.data), v4_getattr()]);
    assert_eq!(
        st,
        v4::Nfsstat4::NFS4ERR_ACCESS,
        "v4 PUTFH from an unlisted address"
    );
    let (st, res) = compound(
        &mut bad,
        0xacce_0003,
        vec![NfsArgop4::OP_PUTROOTFH, v4_getattr(), v4_lookup("b")],
    );
    // The root export is `a`, which this client may not use: PUTROOTFH
    // finds it, reading it is refused.
    assert_eq!(st, v4::Nfsstat4::NFS4ERR_ACCESS, "{res:?}");
    assert!(matches!(
        &res[..],
        [
            NfsResop4::OP_PUTROOTFH(_),
            NfsResop4::OP_GETATTR(v4::Getattr4res::Default(v4::Nfsstat4::NFS4ERR_ACCESS))
        ]
    ));
    s.logged(0xacce_0002, "NFSv4 from an unlisted address");
    // The client's calls that need no export still work, and so does everyone else.
    let (st, _) = rpc_call(&mut bad, 0xacce_0004, NFS_PROGRAM, 3, 0, &auth_none(), &[]);
    assert_eq!(st, ReplyStatus::Success);
    s.still_serves();
}

#[test]
fn krb5p_call_with_a_changed_body_is_garbage_args() {
    use rpc::client::gss::GssClient;
    use rpc::client::RpcClient;
    use rpc::gss::GssService;
    let kdc = kdc_with_ticket("long", "10m");
    let (_tmp, export, state) = temp_export();
    let s = launch_sec(&kdc, &export, &state, "krb5p,sys", &[]);
    let (mut c, root) = mounted_root(&s);
    let ga = xdr::to_bytes(&Getattr3args {
        object: root.clone(),
    });
    let rt = current_thread_runtime();
    rt.block_on(async {
        let rpc = RpcClient::connect(s.addr, auth_none()).await.unwrap();
        let g = GssClient::establish(rpc, NFS_PROGRAM, 3, "nfs@localhost")
            .await
            .expect("a krb5 context");
        // One byte changed anywhere in the sealed body (checksum, header or
        // ciphertext) and the call is GARBAGE_ARGS. Its header is genuine,
        // so its sequence number counts as used (RFC 2203 §5.3.3.1, as in
        // Linux): each try is a new call.
        for back in [1, 20, 40] {
            let b = g.build(GssService::Privacy, NFSPROC3_GETATTR, &ga).unwrap();
            let n = b.record.len();
            let mut rec = b.record.to_vec();
            rec[n - back] ^= 0x01;
            let rep =
                g.rpc.send_record(b.xid, &rec).await.unwrap_or_else(|e| {
                    panic!("byte {back} from the end: {e:?}\n{}", s.log_text())
                });
            let (_, st, _) = decode_reply(rep).unwrap();
            assert_eq!(
                st,
                ReplyStatus::Accepted(AcceptStat::GARBAGE_ARGS),
                "byte {back} from the end"
            );
        }
        // The same context still works.
        let b = g.build(GssService::Privacy, NFSPROC3_GETATTR, &ga).unwrap();
        let rep = g.send(&b).await.unwrap();
        let mut d = g.open_reply(&b, rep).unwrap();
        assert!(matches!(
            Getattr3res::unpack(&mut d).unwrap(),
            Getattr3res::NFS3_OK(_)
        ));
    });
    let log = s.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("GARBAGE_ARGS") || l.contains("garbage")),
        "the refusal is logged:\n{log}"
    );
    // A good AUTH_SYS client is served.
    let r = raw_call(
        &mut c,
        &call_record(9, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .unwrap();
    assert_eq!(decode_reply(r.into()).unwrap().1, ReplyStatus::Success);
    let g: Getattr3res = nfs_call(&mut c, 10, NFSPROC3_GETATTR, &Getattr3args { object: root });
    assert!(matches!(g, Getattr3res::NFS3_OK(_)));
}

#[test]
fn secure_refuses_unprivileged_source_ports() {
    // Export `a`: insecure for 127.0.0.1 (where the handle comes from),
    // `secure` for 127.0.0.2.
    let s = Srv::start_with(
        "{ client = \"127.0.0.1\", options = [\"rw\"] }, { client = \"127.0.0.2\", options = [\"rw\", \"secure\"] }",
        &[],
    );
    let (_good, root) = s.mounted("/");
    let mut high = connect_from_port(s.addr, "127.0.0.2", 0).unwrap();
    // MOUNT: MNT3ERR_ACCES, as mountd answers an "illegal port".
    // NFSv3 and NFSv4: PERM, as Linux's server answers.
    s.refuses_mnt_and_v3(
        &mut high,
        &root,
        "unprivileged source port",
        0x5ec0_0001,
        Nfsstat3::NFS3ERR_PERM,
        "NFSv3 from an unprivileged port",
    );
    let (st, _) = compound(
        &mut high,
        0x5ec0_0002,
        vec![putfh(&root.data), v4_getattr()],
    );
    assert_eq!(st, v4::Nfsstat4::NFS4ERR_PERM);
    s.logged(0x5ec0_0002, "NFSv4 from an unprivileged port");
    // Calls that touch no export are answered.
    let (st, _) = rpc_call(&mut high, 0x5ec0_0003, NFS_PROGRAM, 3, 0, &auth_none(), &[]);
    assert_eq!(st, ReplyStatus::Success);
    // From a reserved port (when this test may bind one) the same client is served.
    match (600..1000).find_map(|p| connect_from_port(s.addr, "127.0.0.2", p)) {
        Some(mut low) => {
            assert!(mnt(&mut low, "/").is_ok());
            assert!(getattr3(&mut low, 0x5ec0_0004, &root.data).is_ok());
            let (st, _) = compound(&mut low, 0x5ec0_0005, vec![putfh(&root.data), v4_getattr()]);
            assert_eq!(st, v4::Nfsstat4::NFS4_OK);
        }
        None => eprintln!("no reserved port could be bound: the served case is not checked"),
    }
    s.still_serves();
}

#[test]
fn import_maps_secure_and_insecure() {
    // exports(5)'s default is secure: the import writes it out; insecure
    // leaves it off (Tarn's own default).
    let (_tmp, f) = temp_file(
        "exports",
        "/srv 127.0.0.1(rw) 10.0.0.0/8(rw,insecure) 10.1.0.0/16(ro,secure)\n",
    );
    let out = tarn_output(&["import-exports", f.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "{ client = \"127.0.0.1\", options = [\"rw\", \"root_squash\", \"secure\"] }"
        ) && text.contains("{ client = \"10.0.0.0/8\", options = [\"rw\", \"root_squash\"] }")
            && text.contains(
                "{ client = \"10.1.0.0/16\", options = [\"ro\", \"root_squash\", \"secure\"] }"
            ),
        "{text}"
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
