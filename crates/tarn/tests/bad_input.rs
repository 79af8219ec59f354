//! Malformed and hostile input over raw TCP: each gets the right RPC answer
//! (or the connection is closed) and the server keeps serving everyone else.

mod common;
use common::*;
use proto::nfs3::*;
use proto::rpc::*;
use rpc::client::{auth_none, auth_sys};
use rpc::msg::{decode_reply, ReplyStatus};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn null_works(s: &TestServer) {
    assert_eq!(null_on_new_connection(s), (77, ReplyStatus::Success));
}

fn status_of(s: &TestServer, rec: &[u8]) -> ReplyStatus {
    let mut c = TcpStream::connect(s.addr).unwrap();
    let r = raw_call(&mut c, rec).expect("a reply");
    decode_reply(r.into()).unwrap().1
}

/// True if the server closed the connection (read returns 0 or an error) within the timeout.
fn closed(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 64];
    loop {
        match c.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue, // an error reply first is fine
        }
    }
}

#[test]
fn rpc_level_errors_get_the_right_replies() {
    let s = TestServer::start();
    assert_eq!(
        status_of(&s, &call_record(1, 123456, 1, 0, &auth_none(), &[])),
        ReplyStatus::Accepted(AcceptStat::PROG_UNAVAIL)
    );
    assert_eq!(
        status_of(&s, &call_record(2, NFS_PROGRAM, 5, 0, &auth_none(), &[])),
        ReplyStatus::ProgMismatch(3, 4)
    );
    assert_eq!(
        status_of(&s, &call_record(3, NFS_PROGRAM, 3, 99, &auth_none(), &[])),
        ReplyStatus::Accepted(AcceptStat::PROC_UNAVAIL)
    );
    // GETATTR whose arguments stop short.
    assert_eq!(
        status_of(
            &s,
            &call_record(4, NFS_PROGRAM, 3, 1, &auth_none(), &[0, 0, 0, 64])
        ),
        ReplyStatus::Accepted(AcceptStat::GARBAGE_ARGS)
    );
    // RPC version 3.
    let mut rec = call_record(5, NFS_PROGRAM, 3, 0, &auth_none(), &[]);
    rec[12..16].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(status_of(&s, &rec), ReplyStatus::RpcMismatch(2, 2));
    // AUTH_SYS with 17 gids.
    let gids: Vec<u32> = (1..=17).collect();
    let p = AuthsysParms {
        stamp: 0,
        machinename: bytes::Bytes::from_static(b"h"),
        uid: 1,
        gid: 1,
        gids,
    };
    let cred = OpaqueAuth {
        flavor: AUTH_SYS,
        body: xdr::to_bytes(&p),
    };
    assert_eq!(
        status_of(&s, &call_record(6, NFS_PROGRAM, 3, 0, &cred, &[])),
        ReplyStatus::AuthError(AuthStat::AUTH_BADCRED)
    );
    // An unknown flavor.
    let cred = OpaqueAuth {
        flavor: 390003,
        body: bytes::Bytes::new(),
    };
    assert_eq!(
        status_of(&s, &call_record(7, NFS_PROGRAM, 3, 0, &cred, &[])),
        ReplyStatus::AuthError(AuthStat::AUTH_BADCRED)
    );
    // MOUNT is served on the same port; NULL answers for it too.
    assert_eq!(
        status_of(
            &s,
            &call_record(8, proto::mount::MOUNT_PROGRAM, 3, 0, &auth_none(), &[])
        ),
        ReplyStatus::Success
    );
    null_works(&s);
}

#[test]
fn garbage_truncation_and_huge_fragments_do_not_hurt_others() {
    let mut s = TestServer::start();
    // A bystander connection stays open through everything below.
    let mut bystander = TcpStream::connect(s.addr).unwrap();
    // Random bytes.
    use rand::RngCore;
    for _ in 0..20 {
        let mut junk = vec![0u8; 1 + (rand::random::<usize>() % 4000)];
        rand::thread_rng().fill_bytes(&mut junk);
        let mut c = TcpStream::connect(s.addr).unwrap();
        let _ = c.write_all(&junk);
        drop(c);
    }
    // A 2 GiB fragment length: the connection is closed, nothing is allocated.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(&0xffff_fff0u32.to_be_bytes()).unwrap();
    c.write_all(&[0u8; 64]).unwrap();
    assert!(closed(&mut c), "a 2 GiB fragment must close the connection");
    // A truncated record: header promises 100 bytes, 40 arrive, the client goes away.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(&(0x8000_0000u32 | 100).to_be_bytes()).unwrap();
    c.write_all(&[1u8; 40]).unwrap();
    drop(c);
    // A record too short to hold an xid, and a REPLY sent to the server: dropped, connection lives.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(&[0x80, 0, 0, 2, 1, 2]).unwrap();
    let mut reply_msg = call_record(9, NFS_PROGRAM, 3, 0, &auth_none(), &[]);
    reply_msg[8..12].copy_from_slice(&1u32.to_be_bytes());
    c.write_all(&reply_msg).unwrap();
    let r = raw_call(
        &mut c,
        &call_record(10, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .expect("still served");
    assert_eq!(decode_reply(r.into()).unwrap().0, 10);
    // Everyone else is still served, including the bystander.
    null_works(&s);
    let r = raw_call(
        &mut bystander,
        &call_record(11, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .expect("bystander served");
    assert_eq!(decode_reply(r.into()).unwrap().0, 11);
    assert!(s.alive());
}

#[test]
fn forged_and_stale_handles() {
    let s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    std::fs::write(s.export.join("f"), b"data").unwrap();
    let l: Lookup3res = nfs_lookup(&mut c, 1, &root, "f");
    let Lookup3res::NFS3_OK(ok) = l else {
        panic!("lookup: {l:?}")
    };
    // Forged: flip one byte of a valid handle.
    let mut forged = ok.object.data.to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let g: Getattr3res = nfs_call(
        &mut c,
        2,
        NFSPROC3_GETATTR,
        &Getattr3args {
            object: NfsFh3 {
                data: forged.into(),
            },
        },
    );
    assert_eq!(g, Getattr3res::Default(Nfsstat3::NFS3ERR_BADHANDLE));
    // Stale: the file is removed behind the server's back.
    std::fs::remove_file(s.export.join("f")).unwrap();
    let g: Getattr3res = nfs_getattr(&mut c, 3, &ok.object);
    assert_eq!(g, Getattr3res::Default(Nfsstat3::NFS3ERR_STALE));
    // `..` at the export root stays at the root.
    let l: Lookup3res = nfs_lookup(&mut c, 4, &root, "..");
    let Lookup3res::NFS3_OK(up) = l else {
        panic!("lookup ..: {l:?}")
    };
    assert_eq!(up.object, root, "`..` of the export root is the root");
    // A symlink pointing out of the export is returned as a symlink, never followed.
    std::os::unix::fs::symlink("/etc", s.export.join("out")).unwrap();
    let l: Lookup3res = nfs_lookup(&mut c, 5, &root, "out");
    let Lookup3res::NFS3_OK(sl) = l else {
        panic!("lookup out: {l:?}")
    };
    assert_eq!(sl.obj_attributes.unwrap().r#type, Ftype3::NF3LNK);
    let l: Lookup3res = nfs_call(
        &mut c,
        6,
        NFSPROC3_LOOKUP,
        &Lookup3args {
            what: Diropargs3 {
                dir: sl.object.clone(),
                name: bytes::Bytes::from_static(b"passwd"),
            },
        },
    );
    assert!(
        matches!(l, Lookup3res::Default(Nfsstat3::NFS3ERR_NOTDIR, _)),
        "lookup through a symlink: {l:?}"
    );
}

#[test]
fn retransmitted_remove_gets_the_original_reply() {
    let s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    std::fs::write(s.export.join("victim"), b"x").unwrap();
    let args = xdr::to_bytes(&Remove3args {
        object: Diropargs3 {
            dir: root,
            name: bytes::Bytes::from_static(b"victim"),
        },
    });
    // The REMOVE's record with XID `xid`.
    let record = |xid| {
        call_record(
            xid,
            NFS_PROGRAM,
            3,
            NFSPROC3_REMOVE,
            &auth_sys(1000, 1000, &[], "t"),
            &args,
        )
    };
    let rec = record(4242);
    let decode = |r: Vec<u8>| -> Remove3res {
        let (_, _, mut d) = decode_reply(r.into()).unwrap();
        <Remove3res as xdr::Unpack>::unpack(&mut d).unwrap()
    };
    let first = decode(raw_call(&mut c, &rec).unwrap());
    assert!(matches!(first, Remove3res::NFS3_OK(_)), "{first:?}");
    assert!(!s.export.join("victim").exists());
    // Same xid again, on a new connection as after a reconnect: the original OK, not NOENT.
    let mut c2 = TcpStream::connect(s.addr).unwrap();
    let again = decode(raw_call(&mut c2, &rec).unwrap());
    assert_eq!(again, first);
    // A new xid is a new call: now NOENT.
    let rec2 = record(4243);
    assert!(matches!(
        decode(raw_call(&mut c2, &rec2).unwrap()),
        Remove3res::Default(Nfsstat3::NFS3ERR_NOENT, _)
    ));
}
