//! Writes the seed corpus (fuzz/corpus/TARGET/seed-*): typical calls
//! encoded with the protocol types, as clients send them. Run from fuzz/:
//! `cargo run --example seeds`. The seeds are committed; rerun after a
//! wire type changes.

use bytes::{BufMut, Bytes, BytesMut};
use proto::gss::*;
use proto::mount::Dirpath;
use proto::nfs3::*;
use proto::nfs4::*;
use proto::nlm4::*;
use proto::nsm::*;
use proto::rpc::{OpaqueAuth, RPCSEC_GSS};
use rpc::client::{auth_none, auth_sys};
use rpc::gss::{GssCred, GssService};
use std::path::Path;
use xdr::Pack;

fn write(target: &str, name: &str, data: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{}", name.replace("::", "-"))), data).unwrap();
}

fn call(xid: u32, prog: u32, vers: u32, proc_: u32, cred: &OpaqueAuth, args: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    rpc::msg::encode_call(xid, prog, vers, proc_, cred, &mut b);
    b.put_slice(args);
    b.to_vec()
}

fn gss_cred(proc_: RpcGssProcT, seq: u32, service: GssService, handle: &[u8]) -> OpaqueAuth {
    GssCred {
        proc_,
        seq,
        service,
        handle: Bytes::copy_from_slice(handle),
    }
    .encode()
}

fn fh3() -> NfsFh3 {
    NfsFh3 {
        data: Bytes::from_static(&[1; 32]),
    }
}

fn name(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

fn with_sel(sel: u8, b: &[u8]) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(b);
    v
}

fn compound(minor: u32, ops: Vec<NfsArgop4>) -> Bytes {
    xdr::to_bytes(&Compound4args {
        tag: Bytes::new(),
        minorversion: minor,
        argarray: ops,
    })
}

fn sequence(seq: u32) -> NfsArgop4 {
    NfsArgop4::OP_SEQUENCE(Sequence4args {
        // The compound_exec target writes its session's id over this.
        sa_sessionid: [0; 16],
        sa_sequenceid: seq,
        sa_slotid: 0,
        sa_highest_slotid: 0,
        sa_cachethis: false,
    })
}

/// The current stateid (RFC 8881 §16.2.3.1.2): the one the last OPEN set.
fn current() -> Stateid4 {
    Stateid4 {
        seqid: 1,
        other: [0; 12],
    }
}

fn open_create(file: &'static str) -> NfsArgop4 {
    NfsArgop4::OP_OPEN(Open4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: StateOwner4 {
            clientid: 0,
            owner: name("owner"),
        },
        openhow: Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(Fattr4 {
            attrmask: vec![],
            attr_vals: Bytes::new(),
        })),
        claim: OpenClaim4::CLAIM_NULL(name(file)),
    })
}

fn getattr() -> NfsArgop4 {
    // type, change, size, fileid, mode, owner.
    NfsArgop4::OP_GETATTR(Getattr4args {
        attr_request: vec![(1 << 1) | (1 << 3) | (1 << 4), (1 << 1) | (1 << 4)],
    })
}

fn main() {
    let sys = auth_sys(1000, 1000, &[4, 24, 27], "client.example");
    let getattr3 = xdr::to_bytes(&Getattr3args { object: fh3() });
    let mnt = xdr::to_bytes(&Dirpath(name("/export")));

    // Record marking: a NULL call as one fragment, as two, and two records
    // back to back (the first byte chooses how the stream is cut).
    let null = call(1, 100003, 3, 0, &auth_none(), &[]);
    let mark = |data: &[u8], last: bool| {
        let mut v = ((data.len() as u32) | if last { 0x8000_0000 } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(data);
        v
    };
    write(
        "record",
        "one-fragment",
        &[&[7u8][..], &mark(&null, true)].concat(),
    );
    let (a, b) = null.split_at(10);
    write(
        "record",
        "two-fragments",
        &[&[3u8][..], &mark(a, false), &mark(b, true)].concat(),
    );
    let g = call(2, 100003, 3, 1, &sys, &getattr3);
    write(
        "record",
        "two-records",
        &[&[60u8][..], &mark(&null, true), &mark(&g, true)].concat(),
    );
    // The same streams for the whole pipeline (no cut byte).
    write("pipeline", "one-fragment", &mark(&null, true));
    write(
        "pipeline",
        "two-fragments",
        &[mark(a, false), mark(b, true)].concat(),
    );
    write(
        "pipeline",
        "two-records",
        &[mark(&null, true), mark(&g, true)].concat(),
    );

    // Call headers with every flavor.
    write("rpc_call", "null-auth-none", &null);
    write("rpc_call", "getattr-auth-sys", &g);
    write(
        "rpc_call",
        "mnt-auth-sys",
        &call(3, 100005, 3, 1, &sys, &mnt),
    );
    let init = xdr::to_bytes(&RpcGssInitArg {
        gss_token: Bytes::from_static(&[0x60, 0x82, 0x02, 0x00, 0x06, 0x09, 0x2a, 0x86, 0x48]),
    });
    let c = gss_cred(RpcGssProcT::RPCSEC_GSS_INIT, 0, GssService::None, b"");
    write("rpc_call", "gss-init", &call(4, 100003, 4, 0, &c, &init));
    let c = gss_cred(
        RpcGssProcT::RPCSEC_GSS_DATA,
        5,
        GssService::Integrity,
        &[0, 0, 0, 1, 0, 0, 0, 2],
    );
    let mut integ = BytesMut::new();
    RpcGssIntegData {
        databody_integ: Bytes::from([&5u32.to_be_bytes()[..], &getattr3].concat()),
        checksum: Bytes::from_static(&[0x04, 0x04, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff]),
    }
    .pack(&mut integ);
    let mut rec = BytesMut::new();
    rpc::msg::encode_call_head(6, 100003, 3, 1, &c, &mut rec);
    OpaqueAuth {
        flavor: RPCSEC_GSS,
        body: Bytes::from_static(&[
            0x04, 0x04, 0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1,
        ]),
    }
    .pack(&mut rec);
    rec.put_slice(&integ);
    write("rpc_call", "gss-data-krb5i", &rec);
    let c = gss_cred(
        RpcGssProcT::RPCSEC_GSS_DATA,
        6,
        GssService::Privacy,
        &[0, 0, 0, 1, 0, 0, 0, 2],
    );
    let mut rec = BytesMut::new();
    rpc::msg::encode_call_head(7, 100003, 4, 1, &c, &mut rec);
    OpaqueAuth {
        flavor: RPCSEC_GSS,
        body: Bytes::from_static(&[0x04, 0x04, 0, 0]),
    }
    .pack(&mut rec);
    RpcGssPrivData {
        databody_priv: Bytes::from_static(&[0x05, 0x04, 0x06, 0xff, 0, 0x10, 0, 0x1c]),
    }
    .pack(&mut rec);
    write("rpc_call", "gss-data-krb5p", &rec);

    // RFC 4121 tokens as an initiator makes them, for two enctypes (the
    // target's first byte picks the key: even = no acceptor subkey).
    for (sel, e) in [
        (0u8, krb5::Enctype::Aes128CtsHmacSha1),
        (6, krb5::Enctype::Aes256CtsHmacSha384),
    ] {
        let key = krb5::Key::new(e, &vec![0x5a; e.key_len()]).unwrap();
        let ini = krb5::Cfx::new(krb5::Role::Initiator, &key, None, 7);
        write(
            "gss_token",
            &format!("wrap-sealed-{sel}"),
            &with_sel(sel | 0x80, &ini.wrap(true, &getattr3)),
        );
        write(
            "gss_token",
            &format!("wrap-integ-{sel}"),
            &with_sel(sel, &ini.wrap(false, &getattr3)),
        );
        write(
            "gss_token",
            &format!("mic-{sel}"),
            &with_sel(sel, &ini.get_mic(&[b"the message"])),
        );
    }

    // MOUNT, NFSv3, NLM and NSM arguments.
    let sel = |n: &str| tarn_fuzz::proto_args::selector(n);
    let stateless = |n: &str, b: Bytes| write("proto_args", n, &with_sel(sel(n), &b));
    stateless("mount::Dirpath", mnt.clone());
    stateless("Getattr3args", getattr3.clone());
    stateless(
        "Lookup3args",
        xdr::to_bytes(&Lookup3args {
            what: Diropargs3 {
                dir: fh3(),
                name: name("file.txt"),
            },
        }),
    );
    stateless(
        "Read3args",
        xdr::to_bytes(&Read3args {
            file: fh3(),
            offset: 4096,
            count: 65536,
        }),
    );
    stateless(
        "Write3args",
        xdr::to_bytes(&Write3args {
            file: fh3(),
            offset: 0,
            count: 5,
            stable: StableHow::UNSTABLE,
            data: name("hello"),
        }),
    );
    stateless(
        "Create3args",
        xdr::to_bytes(&Create3args {
            r#where: Diropargs3 {
                dir: fh3(),
                name: name("new"),
            },
            how: Createhow3::GUARDED(Sattr3 {
                mode: Some(0o644),
                uid: None,
                gid: None,
                size: None,
                atime: SetAtime::Default(TimeHow::SET_TO_SERVER_TIME),
                mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
            }),
        }),
    );
    stateless(
        "Readdirplus3args",
        xdr::to_bytes(&Readdirplus3args {
            dir: fh3(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 4096,
            maxcount: 32768,
        }),
    );
    let lock = Nlm4Lock {
        caller_name: name("client"),
        fh: Netobj(Bytes::from_static(&[1; 32])),
        oh: Netobj(name("owner@client")),
        svid: 42,
        l_offset: 0,
        l_len: 100,
    };
    stateless(
        "Nlm4Lockargs",
        xdr::to_bytes(&Nlm4Lockargs {
            cookie: Netobj(Bytes::from_static(&[1, 2, 3, 4])),
            block: true,
            exclusive: true,
            alock: lock.clone(),
            reclaim: false,
            state: 3,
        }),
    );
    stateless(
        "Nlm4Testargs",
        xdr::to_bytes(&Nlm4Testargs {
            cookie: Netobj(Bytes::new()),
            exclusive: false,
            alock: lock,
        }),
    );
    stateless(
        "Mon",
        xdr::to_bytes(&Mon {
            mon_id: MonId {
                mon_name: name("client"),
                my_id: MyId {
                    my_name: name("localhost"),
                    my_prog: 100021,
                    my_vers: 4,
                    my_proc: 16,
                },
            },
            r#priv: [0; 16],
        }),
    );
    stateless(
        "StatChge",
        xdr::to_bytes(&StatChge {
            mon_name: name("client"),
            state: 5,
        }),
    );

    // NFSv4 COMPOUNDs.
    let open = compound(
        1,
        vec![
            sequence(2),
            NfsArgop4::OP_PUTROOTFH,
            open_create("f"),
            getattr(),
        ],
    );
    let v40 = compound(
        0,
        vec![
            NfsArgop4::OP_PUTROOTFH,
            getattr(),
            NfsArgop4::OP_READDIR(Readdir4args {
                cookie: 0,
                cookieverf: [0; 8],
                dircount: 1024,
                maxcount: 4096,
                attr_request: vec![1 << 3],
            }),
        ],
    );
    let io = compound(
        1,
        vec![
            sequence(2),
            NfsArgop4::OP_PUTROOTFH,
            open_create("g"),
            NfsArgop4::OP_WRITE(Write4args {
                stateid: current(),
                offset: 0,
                stable: StableHow4::FILE_SYNC4,
                data: name("hello"),
            }),
            NfsArgop4::OP_READ(Read4args {
                stateid: current(),
                offset: 0,
                count: 4096,
            }),
            NfsArgop4::OP_LOCK(Lock4args {
                locktype: NfsLockType4::WRITE_LT,
                reclaim: false,
                offset: 0,
                length: 10,
                locker: Locker4::TRUE(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: current(),
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid: 0,
                        owner: name("locker"),
                    },
                }),
            }),
            NfsArgop4::OP_CLOSE(Close4args {
                seqid: 0,
                open_stateid: current(),
            }),
        ],
    );
    let dirs = compound(
        1,
        vec![
            sequence(3),
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_CREATE(Create4args {
                objtype: Createtype4::NF4DIR,
                objname: name("d"),
                createattrs: Fattr4 {
                    attrmask: vec![],
                    attr_vals: Bytes::new(),
                },
            }),
            NfsArgop4::OP_PUTROOTFH,
            NfsArgop4::OP_SAVEFH,
            NfsArgop4::OP_LOOKUP(Lookup4args { objname: name("d") }),
            NfsArgop4::OP_LOOKUPP,
            NfsArgop4::OP_RENAME(Rename4args {
                oldname: name("g"),
                newname: name("h"),
            }),
            NfsArgop4::OP_REMOVE(Remove4args { target: name("h") }),
        ],
    );
    for (n, c) in [("open", &open), ("v40-readdir", &v40), ("io", &io)] {
        write("compound_decode", n, &with_sel(0, c));
        write("compound_exec", n, &with_sel(0, c));
    }
    // Two COMPOUNDs on one server: the second sees what the first made.
    write(
        "compound_exec",
        "io-then-dirs",
        &[&[0u8][..], &io, b"#CMP", &dirs].concat(),
    );
    write("compound_exec", "root-open", &with_sel(1, &open));

    nfs3_seeds();
}

/// MOUNT and NFSv3 sessions for nfs3_exec: handles are the ones a fresh
/// fuzz server gives (its key is fixed), found by running the calls once.
fn nfs3_seeds() {
    let n = tarn_fuzz::nfs3::server();
    let root = NfsFh3 {
        data: tarn_fuzz::nfs3::root_handle(&n),
    };
    let call = |opt: u8, proc_: u32, args: Bytes| [&[opt, proc_ as u8][..], &args].concat();
    let sattr = || Sattr3 {
        mode: Some(0o644),
        uid: None,
        gid: None,
        size: None,
        atime: SetAtime::Default(TimeHow::DONT_CHANGE),
        mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
    };
    let create = call(
        0,
        NFSPROC3_CREATE,
        xdr::to_bytes(&Create3args {
            r#where: Diropargs3 {
                dir: root.clone(),
                name: name("f"),
            },
            how: Createhow3::UNCHECKED(sattr()),
        }),
    );
    // The new file's handle, as the server makes it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let f = rt.block_on(async {
        let ctx = rpc::CallContext::new(
            1,
            NFS_PROGRAM,
            3,
            NFSPROC3_CREATE,
            rpc::Auth::Sys(rpc::AuthSys {
                stamp: 0,
                machinename: name("fuzz"),
                uid: 1000,
                gid: 1000,
                gids: vec![],
            }),
            "127.0.0.1:900".parse().unwrap(),
            1,
            std::sync::Arc::new(rpc::observe::NoStats),
        );
        let mut out = BytesMut::new();
        n.dispatch(
            &ctx,
            xdr::Decoder::new(Bytes::copy_from_slice(&create[2..])),
            &mut out,
        )
        .await
        .unwrap();
        match xdr::from_bytes::<Create3res>(out.freeze()).unwrap() {
            Create3res::NFS3_OK(ok) => ok.obj.unwrap(),
            r => panic!("CREATE: {r:?}"),
        }
    });
    let sep = b"#CALL".to_vec();
    let join = |calls: &[Vec<u8>]| calls.join(&sep[..]);
    let mnt = call(2, 1, xdr::to_bytes(&Dirpath(name("/"))));
    let getattr = call(
        0,
        NFSPROC3_GETATTR,
        xdr::to_bytes(&Getattr3args {
            object: root.clone(),
        }),
    );
    write("nfs3_exec", "mnt-getattr", &join(&[mnt, getattr]));
    let w = call(
        0,
        NFSPROC3_WRITE,
        xdr::to_bytes(&Write3args {
            file: f.clone(),
            offset: 0,
            count: 5,
            stable: StableHow::UNSTABLE,
            data: name("hello"),
        }),
    );
    let r = call(
        0,
        NFSPROC3_READ,
        xdr::to_bytes(&Read3args {
            file: f.clone(),
            offset: 0,
            count: 4096,
        }),
    );
    let commit = call(
        0,
        NFSPROC3_COMMIT,
        xdr::to_bytes(&Commit3args {
            file: f.clone(),
            offset: 0,
            count: 0,
        }),
    );
    write(
        "nfs3_exec",
        "create-write-read-commit",
        &join(&[create.clone(), w, r, commit]),
    );
    let rd = call(
        0,
        NFSPROC3_READDIR,
        xdr::to_bytes(&Readdir3args {
            dir: root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: 4096,
        }),
    );
    let rdp = call(
        0,
        NFSPROC3_READDIRPLUS,
        xdr::to_bytes(&Readdirplus3args {
            dir: root.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: 1024,
            maxcount: 8192,
        }),
    );
    let mkdir = call(
        1,
        NFSPROC3_MKDIR,
        xdr::to_bytes(&Mkdir3args {
            r#where: Diropargs3 {
                dir: root.clone(),
                name: name("d"),
            },
            attributes: sattr(),
        }),
    );
    let rename = call(
        0,
        NFSPROC3_RENAME,
        xdr::to_bytes(&Rename3args {
            from: Diropargs3 {
                dir: root.clone(),
                name: name("f"),
            },
            to: Diropargs3 {
                dir: root.clone(),
                name: name("g"),
            },
        }),
    );
    let remove = call(
        0,
        NFSPROC3_REMOVE,
        xdr::to_bytes(&Remove3args {
            object: Diropargs3 {
                dir: root.clone(),
                name: name("g"),
            },
        }),
    );
    write(
        "nfs3_exec",
        "dir-ops",
        &join(&[create, mkdir, rd, rdp, rename, remove]),
    );
}
