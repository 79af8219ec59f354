//! NFSv4.0 against a real `tarn serve`: SETCLIENTID / SETCLIENTID_CONFIRM,
//! RENEW, OPEN without OPEN_CONFIRM, and the open/lock owner seqid rules of
//! RFC 7530 §9.1.7 (a retransmission gets the same reply, a seqid out of
//! order gets NFS4ERR_BAD_SEQID).
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_v40

mod harness;

use bytes::Bytes;
use harness::*;
use proto::nfs4::*;
use Nfsstat4::*;

async fn c40(conn: &client::nfs4::Nfs4Conn, ops: Vec<NfsArgop4>) -> (Bytes, Compound4res) {
    let raw = send_raw(conn, &encode("v40", 0, ops)).await;
    let r = decode(&raw);
    (raw, r)
}

async fn setclientid(conn: &client::nfs4::Nfs4Conn, id: &str) -> u64 {
    let (_, r) = c40(
        conn,
        vec![NfsArgop4::OP_SETCLIENTID(Setclientid4args {
            client: NfsClientId4 {
                verifier: [7; 8],
                id: name(id),
            },
            callback: CbClient4 {
                cb_program: 0x4000_0000,
                cb_location: Netaddr4 {
                    na_r_netid: name("tcp"),
                    na_r_addr: name("127.0.0.1.0.0"),
                },
            },
            callback_ident: 1,
        })],
    )
    .await;
    let NfsResop4::OP_SETCLIENTID(Setclientid4res::NFS4_OK(ok)) = &r.resarray[0] else {
        panic!("SETCLIENTID: {:?}", statuses(&r))
    };
    let (_, r) = c40(
        conn,
        vec![NfsArgop4::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
            clientid: ok.clientid,
            setclientid_confirm: ok.setclientid_confirm,
        })],
    )
    .await;
    assert_eq!(r.status, NFS4_OK, "SETCLIENTID_CONFIRM");
    ok.clientid
}

fn open(clientid: u64, owner: &str, seqid: u32, file: &str) -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::OP_PUTROOTFH,
        NfsArgop4::OP_OPEN(Open4args {
            seqid,
            share_access: 3,
            share_deny: 0,
            owner: StateOwner4 {
                clientid,
                owner: name(owner),
            },
            openhow: Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(Fattr4 {
                attrmask: vec![],
                attr_vals: Bytes::new(),
            })),
            claim: OpenClaim4::CLAIM_NULL(name(file)),
        }),
        NfsArgop4::OP_GETFH,
    ]
}

#[test]
fn nfs40_client_open_and_seqid_rules() {
    let t = Tarn::start(&[]);
    run(async {
        let conn = conn(t.addr).await;
        let id = setclientid(&conn, "v40-client").await;
        let (_, r) = c40(
            &conn,
            vec![NfsArgop4::OP_RENEW(Renew4args { clientid: id })],
        )
        .await;
        assert_eq!(r.status, NFS4_OK, "RENEW");
        // A SETCLIENTID_CONFIRM with the wrong verifier is refused.
        let (_, r) = c40(
            &conn,
            vec![NfsArgop4::OP_SETCLIENTID_CONFIRM(SetclientidConfirm4args {
                clientid: id,
                setclientid_confirm: [0xee; 8],
            })],
        )
        .await;
        assert_eq!(r.status, NFS4ERR_STALE_CLIENTID);

        // First OPEN of a new owner: any seqid starts it, and the server
        // asks for OPEN_CONFIRM (RFC 7530 §16.18.5).
        let (first, r) = c40(&conn, open(id, "owner-1", 10, "f")).await;
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        let NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) = &r.resarray[1] else {
            panic!()
        };
        assert_eq!(ok.rflags & 0x2, 0x2, "OPEN4_RESULT_CONFIRM set");
        let sid = ok.stateid.clone();
        let NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(fh)) = &r.resarray[2] else {
            panic!()
        };
        let fh = fh.object.clone();

        // The same seqid again is a retransmission: the OPEN's reply again
        // (same stateid seqid, not bumped by a second execution).
        let (_, r) = c40(&conn, open(id, "owner-1", 10, "f")).await;
        let NfsResop4::OP_OPEN(Open4res::NFS4_OK(again)) = &r.resarray[1] else {
            panic!("{:?}", statuses(&r))
        };
        assert_eq!(again.stateid, sid, "replayed, not executed twice");
        let _ = first;
        // Out of order: BAD_SEQID.
        let (_, r) = c40(&conn, open(id, "owner-1", 12, "f")).await;
        assert_eq!(statuses(&r)[1], (NfsOpnum4::OP_OPEN, NFS4ERR_BAD_SEQID));
        // In order: executes (same owner, same file: the stateid's seqid moves on).
        let (_, r) = c40(&conn, open(id, "owner-1", 11, "f")).await;
        let NfsResop4::OP_OPEN(Open4res::NFS4_OK(next)) = &r.resarray[1] else {
            panic!("{:?}", statuses(&r))
        };
        assert_eq!(
            (next.stateid.other, next.stateid.seqid),
            (sid.other, sid.seqid + 1)
        );
        // OPEN_CONFIRM (the owner's seqid 12) moves the stateid on once more.
        let (_, r) = c40(
            &conn,
            vec![
                putfh(&fh),
                NfsArgop4::OP_OPEN_CONFIRM(OpenConfirm4args {
                    open_stateid: next.stateid.clone(),
                    seqid: 12,
                }),
            ],
        )
        .await;
        let NfsResop4::OP_OPEN_CONFIRM(OpenConfirm4res::NFS4_OK(confirmed)) = &r.resarray[1] else {
            panic!("{:?}", statuses(&r))
        };
        assert_eq!(
            (confirmed.open_stateid.other, confirmed.open_stateid.seqid),
            (sid.other, sid.seqid + 2)
        );
        let next = Open4resok {
            stateid: confirmed.open_stateid.clone(),
            ..next.clone()
        };

        // LOCK with a new lock owner, sequenced by the open owner's seqid 13.
        let lock = |open_seqid: u32, sid: Stateid4| {
            vec![
                putfh(&fh),
                NfsArgop4::OP_LOCK(Lock4args {
                    locktype: NfsLockType4::WRITE_LT,
                    reclaim: false,
                    offset: 0,
                    length: 10,
                    locker: Locker4::TRUE(OpenToLockOwner4 {
                        open_seqid,
                        open_stateid: sid,
                        lock_seqid: 0,
                        lock_owner: StateOwner4 {
                            clientid: id,
                            owner: name("lock-1"),
                        },
                    }),
                }),
            ]
        };
        let (_, r) = c40(&conn, lock(13, next.stateid.clone())).await;
        let NfsResop4::OP_LOCK(Lock4res::NFS4_OK(l)) = &r.resarray[1] else {
            panic!("{:?}", statuses(&r))
        };
        let lsid = l.lock_stateid.clone();
        // LOCKU by the lock owner (its seqid 1 follows lock_seqid 0).
        let (_, r) = c40(
            &conn,
            vec![
                putfh(&fh),
                NfsArgop4::OP_LOCKU(Locku4args {
                    locktype: NfsLockType4::WRITE_LT,
                    seqid: 1,
                    lock_stateid: lsid,
                    offset: 0,
                    length: 10,
                }),
            ],
        )
        .await;
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        // CLOSE with the open owner's next seqid (14), then a stale retry of it is a replay.
        let close = |seqid: u32, sid: Stateid4| {
            vec![
                putfh(&fh),
                NfsArgop4::OP_CLOSE(Close4args {
                    seqid,
                    open_stateid: sid,
                }),
            ]
        };
        let (a, r) = c40(&conn, close(14, next.stateid.clone())).await;
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        let (b, _) = c40(&conn, close(14, next.stateid.clone())).await;
        assert_eq!(a, b, "a retransmitted CLOSE gets the same reply");
    });
}
