//! MOUNT v3 on the NFS port: MNT of the root, of a subdirectory and of the
//! real path; NOENT and ACCES; EXPORT, DUMP, UMNT; and NFS calls from a client
//! the export does not allow.

mod common;
use bytes::Bytes;
use common::*;
use proto::mount::*;
use proto::nfs3::*;
use rpc::client::auth_sys;
use rpc::msg::{decode_reply, ReplyStatus};
use std::net::TcpStream;
use xdr::Unpack;

fn mount_call(c: &mut TcpStream, proc_: u32, args: &[u8]) -> xdr::Decoder {
    let r = raw_call(
        c,
        &call_record(
            9,
            MOUNT_PROGRAM,
            3,
            proc_,
            &auth_sys(1000, 1000, &[], "t"),
            args,
        ),
    )
    .unwrap();
    let (_, st, d) = decode_reply(r.into()).unwrap();
    assert_eq!(st, ReplyStatus::Success);
    d
}

fn mnt(c: &mut TcpStream, path: &str) -> Mountres3 {
    let mut d = mount_call(
        c,
        MOUNTPROC3_MNT,
        &xdr::to_bytes(&Dirpath(Bytes::copy_from_slice(path.as_bytes()))),
    );
    Mountres3::unpack(&mut d).unwrap()
}

/// A connection from 127.0.0.2, which the default export does not allow.
fn connect_from_127_0_0_2(s: &TestServer) -> TcpStream {
    connect_from(s.addr, "127.0.0.2")
}

#[test]
fn mnt_export_dump_umnt() {
    let s = TestServer::start();
    std::fs::create_dir_all(s.export.join("a/b")).unwrap();
    std::fs::write(s.export.join("file"), b"").unwrap();
    let (mut c, root) = mounted_root(&s);
    // The real path names the same export.
    let Mountres3::MNT3_OK(real) = mnt(&mut c, s.export.to_str().unwrap()) else {
        panic!("MNT of the real path")
    };
    assert_eq!(real.fhandle.0, root.data);
    assert_eq!(real.auth_flavors, vec![proto::rpc::AUTH_SYS as i32]);
    // A subdirectory: its handle works for NFS.
    let Mountres3::MNT3_OK(sub) = mnt(&mut c, "/a/b") else {
        panic!("MNT /a/b")
    };
    let g: Getattr3res = nfs_call(
        &mut c,
        1,
        NFSPROC3_GETATTR,
        &Getattr3args {
            object: NfsFh3 {
                data: sub.fhandle.0.clone(),
            },
        },
    );
    let Getattr3res::NFS3_OK(ok) = g else {
        panic!("GETATTR: {g:?}")
    };
    assert_eq!(ok.obj_attributes.r#type, Ftype3::NF3DIR);
    assert_eq!(
        mnt(&mut c, "/nope"),
        Mountres3::Default(Mountstat3::MNT3ERR_NOENT)
    );
    assert_eq!(
        mnt(&mut c, "/file"),
        Mountres3::Default(Mountstat3::MNT3ERR_NOTDIR)
    );
    let mut d = mount_call(&mut c, MOUNTPROC3_EXPORT, &[]);
    let ex = Exports::unpack(&mut d).unwrap();
    assert_eq!(ex.0.len(), 1);
    assert_eq!(&ex.0[0].ex_dir.0[..], b"/");
    let mut d = mount_call(&mut c, MOUNTPROC3_DUMP, &[]);
    let dump = Mountlist::unpack(&mut d).unwrap();
    assert!(
        dump.0
            .iter()
            .any(|m| &m.ml_directory.0[..] == b"/a/b" && &m.ml_hostname.0[..] == b"127.0.0.1"),
        "{dump:?}"
    );
    mount_call(
        &mut c,
        MOUNTPROC3_UMNT,
        &xdr::to_bytes(&Dirpath(Bytes::from_static(b"/a/b"))),
    );
    let mut d = mount_call(&mut c, MOUNTPROC3_DUMP, &[]);
    assert!(!Mountlist::unpack(&mut d)
        .unwrap()
        .0
        .iter()
        .any(|m| &m.ml_directory.0[..] == b"/a/b"));
    mount_call(&mut c, MOUNTPROC3_UMNTALL, &[]);
    let mut d = mount_call(&mut c, MOUNTPROC3_DUMP, &[]);
    assert!(Mountlist::unpack(&mut d).unwrap().0.is_empty());
}

#[test]
fn clients_outside_the_export_get_acces() {
    let s = TestServer::start();
    let (_ok_client, root) = mounted_root(&s);
    let mut other = connect_from_127_0_0_2(&s);
    assert_eq!(
        mnt(&mut other, "/"),
        Mountres3::Default(Mountstat3::MNT3ERR_ACCES)
    );
    // A handle obtained elsewhere does not help.
    let g: Getattr3res = nfs_call(
        &mut other,
        2,
        NFSPROC3_GETATTR,
        &Getattr3args { object: root },
    );
    assert_eq!(g, Getattr3res::Default(Nfsstat3::NFS3ERR_ACCES));
}
