//! The NFSv4.0 callback path against a real `tarn serve`: the test acts
//! as a 4.0 client with its own callback service (a TCP listener that
//! answers CB_NULL and CB_COMPOUND), gets a read delegation, and a second
//! client's write open makes the server recall it (CB_RECALL carrying the
//! client's callback_ident) while that open gets NFS4ERR_DELAY until
//! DELEGRETURN. Then the callback connection is closed by the client and
//! the next recall comes on a connection the server opens again.

mod harness;

use bytes::{BufMut, Bytes, BytesMut};
use client::nfs4::Nfs4Conn;
use harness::*;
use proto::nfs4::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const CB_PROG: u32 = 0x4000_0123;
const IDENT: u32 = 42;

/// What the callback service saw.
#[derive(Debug)]
enum Cb {
    Null { prog: u32 },
    Compound { args: CbCompound4args, conn: usize },
}

async fn read_record(s: &mut TcpStream) -> Option<Bytes> {
    let mut rec = BytesMut::new();
    loop {
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark).await.ok()?;
        let m = u32::from_be_bytes(mark);
        let mut frag = vec![0u8; (m & 0x7fff_ffff) as usize];
        s.read_exact(&mut frag).await.ok()?;
        rec.extend_from_slice(&frag);
        if m & 0x8000_0000 != 0 {
            return Some(rec.freeze());
        }
    }
}

/// A callback service: answers CB_NULL, and CB_COMPOUND with NFS4_OK for
/// each operation; reports each call. With `close_after_compound`, a
/// connection is closed after its first CB_COMPOUND's reply (a client
/// dropping its end).
async fn callback_service(
    close_after_compound: bool,
) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Cb>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut s, _)) = l.accept().await {
            n += 1;
            let (tx, conn) = (tx.clone(), n);
            tokio::spawn(async move {
                while let Some(rec) = read_record(&mut s).await {
                    let call = rpc::msg::decode_call(rec).expect("an RPC call");
                    let mut out = BytesMut::new();
                    rpc::record::begin(&mut out);
                    rpc::msg::success_header(call.xid, &mut out);
                    let done = match call.proc_ {
                        0 => {
                            let _ = tx.send(Cb::Null { prog: call.prog });
                            false
                        }
                        _ => {
                            let args: CbCompound4args =
                                xdr::from_bytes(call.args.rest()).expect("CB_COMPOUND args");
                            let resarray = args
                                .argarray
                                .iter()
                                .map(|op| match op {
                                    NfsCbArgop4::OP_CB_RECALL(_) => {
                                        NfsCbResop4::OP_CB_RECALL(CbRecall4res {
                                            status: Nfsstat4::NFS4_OK,
                                        })
                                    }
                                    _ => NfsCbResop4::OP_CB_ILLEGAL(CbIllegal4res {
                                        status: Nfsstat4::NFS4ERR_OP_ILLEGAL,
                                    }),
                                })
                                .collect();
                            out.put_slice(&xdr::to_bytes(&CbCompound4res {
                                status: Nfsstat4::NFS4_OK,
                                tag: args.tag.clone(),
                                resarray,
                            }));
                            let _ = tx.send(Cb::Compound { args, conn });
                            close_after_compound
                        }
                    };
                    rpc::record::finish(&mut out);
                    if s.write_all(&out).await.is_err() || done {
                        break;
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn uaddr(a: std::net::SocketAddr) -> String {
    format!("{}.{}.{}", a.ip(), a.port() >> 8, a.port() & 0xff)
}

/// SETCLIENTID (naming `cb` as the callback, or none) and its CONFIRM.
async fn client40(c: &Nfs4Conn, id: &str, cb: Option<std::net::SocketAddr>) -> u64 {
    let r = c
        .compound(
            0,
            vec![NfsArgop4::OP_SETCLIENTID(Setclientid4args {
                client: NfsClientId4 {
                    verifier: [1; 8],
                    id: name(id),
                },
                callback: CbClient4 {
                    cb_program: CB_PROG,
                    cb_location: Netaddr4 {
                        na_r_netid: name("tcp"),
                        na_r_addr: name(&cb.map_or("0.0.0.0.0.0".into(), uaddr)),
                    },
                },
                callback_ident: IDENT,
            })],
        )
        .await
        .unwrap();
    let (clientid, setclientid_confirm) = match &r.resarray[..] {
        [NfsResop4::OP_SETCLIENTID(Setclientid4res::NFS4_OK(ok))] => {
            (ok.clientid, ok.setclientid_confirm)
        }
        _ => panic!("SETCLIENTID: {:?}", statuses(&r)),
    };
    let r = c
        .compound(
            0,
            vec![NfsArgop4::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
                clientid,
                setclientid_confirm,
            })],
        )
        .await
        .unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "CONFIRM: {:?}", statuses(&r));
    clientid
}

/// One 4.0 open owner: its seqid.
struct Owner {
    clientid: u64,
    name: &'static str,
    seqid: u32,
    /// The file OPEN names.
    file: &'static str,
}

/// An OPEN's result.
struct Opened {
    fh: NfsFh4,
    stateid: Stateid4,
    delegation: OpenDelegation4,
}

impl Owner {
    fn new(clientid: u64, name: &'static str) -> Owner {
        Owner {
            clientid,
            name,
            seqid: 1,
            file: "f",
        }
    }

    fn next(&mut self) -> u32 {
        self.seqid += 1;
        self.seqid - 1
    }

    /// OPEN `self.file` (creating it), with OPEN_CONFIRM if asked; Err(status).
    async fn open(&mut self, c: &Nfs4Conn, access: u32) -> Result<Opened, Nfsstat4> {
        let seqid = self.next();
        let r = c
            .compound(
                0,
                vec![
                    NfsArgop4::OP_PUTROOTFH,
                    NfsArgop4::OP_OPEN(Open4args {
                        seqid,
                        share_access: access,
                        share_deny: OPEN4_SHARE_DENY_NONE,
                        owner: StateOwner4 {
                            clientid: self.clientid,
                            owner: name(self.name),
                        },
                        openhow: Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(Fattr4 {
                            attrmask: vec![],
                            attr_vals: Bytes::new(),
                        })),
                        claim: OpenClaim4::CLAIM_NULL(name(self.file)),
                    }),
                    NfsArgop4::OP_GETFH,
                ],
            )
            .await
            .unwrap();
        let (ok, fh) = match &r.resarray[..] {
            [_, NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)), NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh))] => {
                (ok.clone(), fh.object.clone())
            }
            _ => return Err(r.status),
        };
        let mut stateid = ok.stateid.clone();
        if ok.rflags & OPEN4_RESULT_CONFIRM != 0 {
            let seqid = self.next();
            let r = c
                .compound(
                    0,
                    vec![
                        putfh(&fh),
                        NfsArgop4::OP_OPEN_CONFIRM(OpenConfirm4args {
                            open_stateid: stateid.clone(),
                            seqid,
                        }),
                    ],
                )
                .await
                .unwrap();
            match &r.resarray[..] {
                [_, NfsResop4::OP_OPEN_CONFIRM(OpenConfirm4res::NFS4_OK(ok))] => {
                    stateid = ok.open_stateid.clone()
                }
                _ => panic!("OPEN_CONFIRM: {:?}", statuses(&r)),
            }
        }
        Ok(Opened {
            fh,
            stateid,
            delegation: ok.delegation,
        })
    }

    async fn close(&mut self, c: &Nfs4Conn, o: &Opened) {
        let seqid = self.next();
        let r = c
            .compound(
                0,
                vec![
                    putfh(&o.fh),
                    NfsArgop4::OP_CLOSE(Close4args {
                        seqid,
                        open_stateid: o.stateid.clone(),
                    }),
                ],
            )
            .await
            .unwrap();
        assert_eq!(r.status, Nfsstat4::NFS4_OK, "CLOSE: {:?}", statuses(&r));
    }
}

async fn next_cb(rx: &mut mpsc::UnboundedReceiver<Cb>) -> Cb {
    tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("a callback in time")
        .expect("callback service running")
}

/// A read delegation for `a` on `o.file` (the owner's first open is confirmed
/// first: knfsd and Tarn give unconfirmed 4.0 owners none).
async fn read_delegation(c: &Nfs4Conn, o: &mut Owner) -> (Opened, Stateid4) {
    for _ in 0..2 {
        let op = o.open(c, OPEN4_SHARE_ACCESS_READ).await.expect("OPEN");
        if let OpenDelegation4::OPEN_DELEGATE_READ(d) = &op.delegation {
            let sid = d.stateid.clone();
            return (op, sid);
        }
    }
    panic!("no read delegation for a 4.0 client with a callback path")
}

/// The writer's OPEN: NFS4ERR_DELAY while the recall is out, then OK
/// once the holder returned the delegation (`ret` does it).
async fn recalled_then_open(
    holder: &Nfs4Conn,
    writer: &Nfs4Conn,
    w: &mut Owner,
    rx: &mut mpsc::UnboundedReceiver<Cb>,
    fh: &NfsFh4,
    sid: &Stateid4,
) -> (Opened, usize) {
    assert_eq!(
        w.open(writer, OPEN4_SHARE_ACCESS_WRITE).await.err(),
        Some(Nfsstat4::NFS4ERR_DELAY),
        "the conflicting open waits for the recall"
    );
    let conn = match next_cb(rx).await {
        Cb::Compound { args, conn } => {
            assert_eq!(args.minorversion, 0);
            assert_eq!(args.callback_ident, IDENT, "SETCLIENTID's callback_ident");
            match &args.argarray[..] {
                [NfsCbArgop4::OP_CB_RECALL(r)] => {
                    assert_eq!(&r.stateid, sid);
                    assert_eq!(&r.fh, fh);
                }
                other => panic!("CB_RECALL alone (no CB_SEQUENCE in 4.0): {other:?}"),
            }
            conn
        }
        other => panic!("expected CB_COMPOUND, got {other:?}"),
    };
    let r = holder
        .compound(
            0,
            vec![
                putfh(fh),
                NfsArgop4::OP_DELEGRETURN(Delegreturn4args {
                    deleg_stateid: sid.clone(),
                }),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        r.status,
        Nfsstat4::NFS4_OK,
        "DELEGRETURN: {:?}",
        statuses(&r)
    );
    let opened = w
        .open(writer, OPEN4_SHARE_ACCESS_WRITE)
        .await
        .expect("the writer proceeds after DELEGRETURN");
    (opened, conn)
}

#[test]
fn nfs40_read_delegation_recalled_over_the_callback_path() {
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let (cb, mut rx) = callback_service(true).await;
        let holder = conn(t.addr).await;
        let writer = conn(t.addr).await;
        let a = client40(&holder, "cb40-holder", Some(cb)).await;
        match next_cb(&mut rx).await {
            Cb::Null { prog } => assert_eq!(prog, CB_PROG, "CB_NULL to the client's program"),
            other => panic!("expected the CB_NULL probe, got {other:?}"),
        }
        let b = client40(&writer, "cb40-writer", None).await;
        let (mut ao, mut wo) = (Owner::new(a, "reader"), Owner::new(b, "writer"));
        let (_, sid) = read_delegation(&holder, &mut ao).await;
        let fh = {
            let r = holder
                .compound(
                    0,
                    vec![
                        NfsArgop4::OP_PUTROOTFH,
                        NfsArgop4::OP_LOOKUP(Lookup4args { objname: name("f") }),
                        NfsArgop4::OP_GETFH,
                    ],
                )
                .await
                .unwrap();
            match &r.resarray[..] {
                [_, _, NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh))] => fh.object.clone(),
                _ => panic!("LOOKUP: {:?}", statuses(&r)),
            }
        };
        let (w, first) = recalled_then_open(&holder, &writer, &mut wo, &mut rx, &fh, &sid).await;

        // The callback service closed its end after the CB_COMPOUND: the
        // next recall comes on a connection the server opens again.
        wo.close(&writer, &w).await;
        // Another file: none is granted on "f" for a while after its recall.
        (ao.file, wo.file) = ("g", "g");
        let (g, sid) = read_delegation(&holder, &mut ao).await;
        let (_, second) = recalled_then_open(&holder, &writer, &mut wo, &mut rx, &g.fh, &sid).await;
        assert_ne!(first, second, "a new callback connection");
    });
    let log = t.log();
    assert!(log.contains("NFSv4.0 callback path up"), "{log}");
}
