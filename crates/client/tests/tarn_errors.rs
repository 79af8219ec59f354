//! NFSv4.1/4.2 error cases against a real `tarn serve`, through Tarn's own
//! client: the COMPOUND rules, session slots and the reply cache, stateids,
//! byte-range locks (NFSv4 against NFSv4 and against NLM), and reclaim
//! after a real restart with a grace period. Lease and grace timing is
//! tested in-process, on a manual clock, in crates/server/src/nfs4/tests/.
//! Every test starts its own server (killed by PID when it ends) on its own
//! temporary directories.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_errors
//!
//! Where RFC 8881 allows more than one answer, the test accepts each of
//! them and says why.

mod harness;

use bytes::{BufMut, Bytes};
use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use std::sync::Arc;
use Nfsstat4::*;

const OWNER_A: &str = "open-a";

fn create(mode: u32) -> Openflag4 {
    Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(SetAttrs::mode(mode).encode()))
}

fn nocreate() -> Openflag4 {
    Openflag4::Default(Opentype4::OPEN4_NOCREATE)
}

fn owner(s: &Session, name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid: s.clientid(),
        owner: Bytes::from(name.to_string()),
    }
}

/// OPEN by name in the export root, creating the file if it is missing.
async fn open(s: &Session, file: &str, owner: &str, access: u32, deny: u32) -> Result<Opened> {
    let root = s.lookup_path("/").await.expect("root");
    s.open_with(
        &self::owner(s, owner),
        &root,
        file,
        create(0o666),
        access,
        deny,
    )
    .await
}

/// [`open`] for reading and writing, denying nothing: the plain OPEN most
/// tests need before the one they are about.
async fn open_rw(s: &Session, file: &str, owner: &str) -> Result<Opened> {
    open(
        s,
        file,
        owner,
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
    )
    .await
}

/// Sends `b`, a COMPOUND of `g`'s SEQUENCE, PUTROOTFH and a third
/// operation written by hand, and checks that the first two succeed and
/// the third fails with `status`, the COMPOUND's status.
async fn third_op_fails(
    s: &Session,
    g: SlotGuard<'_>,
    b: &[u8],
    op: NfsOpnum4,
    status: Nfsstat4,
    what: &str,
) {
    let r = decode(&send_raw(s.conn(), b).await);
    g.finish(&r);
    assert_eq!(r.status, status, "{what}");
    assert_eq!(
        statuses(&r),
        [
            (NfsOpnum4::OP_SEQUENCE, NFS4_OK),
            (NfsOpnum4::OP_PUTROOTFH, NFS4_OK),
            (op, status)
        ],
        "{what}"
    );
}

// ---------------------------------------------------------------------------
// 1. COMPOUND level
// ---------------------------------------------------------------------------

#[test]
fn minor_version_3_is_a_mismatch_with_no_results() {
    with_server(|addr| async move {
        let c = conn(addr).await;
        let r = c.compound(3, vec![NfsArgop4::OP_PUTROOTFH]).await.unwrap();
        assert_eq!(r.status, NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(r.resarray.is_empty(), "{:?}", statuses(&r));
        // The tag still comes back (RFC 8881 §16.2.3).
        let r = c
            .compound_tagged(Bytes::from_static(b"mv3"), 3, vec![])
            .await
            .unwrap();
        assert_eq!(
            (r.status, &r.tag[..]),
            (NFS4ERR_MINOR_VERS_MISMATCH, &b"mv3"[..])
        );
    });
}

#[test]
fn unknown_operation_mid_compound_is_op_illegal_after_the_results_so_far() {
    with_server(|addr| async move {
        // Minor version 0 needs no session.
        let c = conn(addr).await;
        let mut b = encode(
            "illegal",
            0,
            vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH],
        );
        set_op_count(&mut b, 3);
        b.put_u32(99); // no such operation
        let r = decode(&send_raw(&c, &b).await);
        assert_eq!(r.status, NFS4ERR_OP_ILLEGAL);
        assert_eq!(
            statuses(&r),
            [
                (NfsOpnum4::OP_PUTROOTFH, NFS4_OK),
                (NfsOpnum4::OP_GETFH, NFS4_OK),
                (NfsOpnum4::OP_ILLEGAL, NFS4ERR_OP_ILLEGAL)
            ]
        );

        // Minor version 1, after SEQUENCE; an operation number from 4.2
        // (ALLOCATE, 59) is just as unknown in 4.1.
        let s = session(addr).await;
        for op in [59u32, 2, 10043] {
            let g = s.acquire().await;
            let mut b = encode(
                "illegal",
                1,
                vec![g.sequence(false), NfsArgop4::OP_PUTROOTFH],
            );
            set_op_count(&mut b, 3);
            b.put_u32(op);
            let what = format!("op {op}");
            third_op_fails(&s, g, &b, NfsOpnum4::OP_ILLEGAL, NFS4ERR_OP_ILLEGAL, &what).await;
        }
        s.renew().await.expect("the session still works");
    });
}

/// A minor version 1 COMPOUND of `ops` without SEQUENCE, on `s`'s
/// connection: refused with `status` at its first operation, `op`.
async fn refused_without_sequence(
    s: &Session,
    ops: Vec<NfsArgop4>,
    op: NfsOpnum4,
    status: Nfsstat4,
) {
    let r = s.conn().compound(1, ops).await.unwrap();
    assert_eq!(r.status, status);
    assert_eq!(statuses(&r), [(op, status)]);
}

#[test]
fn session_placement_rules() {
    with_session(|_, s| async move {
        // 4.1 without SEQUENCE.
        refused_without_sequence(
            &s,
            vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_GETFH],
            NfsOpnum4::OP_PUTROOTFH,
            NFS4ERR_OP_NOT_IN_SESSION,
        )
        .await;

        // SEQUENCE anywhere but first.
        let r = s
            .call_raw(vec![NfsArgop4::OP_PUTROOTFH, {
                let g = s.acquire().await;
                let op = g.sequence(false);
                g.release(Outcome::NotProcessed);
                op
            }])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_SEQUENCE_POS);
        assert_eq!(
            statuses(&r).last().copied(),
            Some((NfsOpnum4::OP_SEQUENCE, NFS4ERR_SEQUENCE_POS))
        );

        // EXCHANGE_ID must be alone when it comes without SEQUENCE.
        let o = SessionOptions::default();
        let ex = NfsArgop4::OP_EXCHANGE_ID(ExchangeId4args {
            eia_clientowner: ClientOwner4 {
                co_verifier: o.verifier,
                co_ownerid: o.owner.clone(),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4A::SP4_NONE,
            eia_client_impl_id: vec![],
        });
        refused_without_sequence(
            &s,
            vec![ex.clone(), NfsArgop4::OP_PUTROOTFH],
            NfsOpnum4::OP_EXCHANGE_ID,
            NFS4ERR_NOT_ONLY_OP,
        )
        .await;
        // After SEQUENCE it runs like any other operation (RFC 8881
        // §18.35.3: "EXCHANGE_ID MAY be sent in a COMPOUND procedure that
        // starts with SEQUENCE"): `o` is a new client owner, so it gets a
        // new, unconfirmed client ID (§18.35.4 case 1).
        let r = s.call_raw(vec![ex, NfsArgop4::OP_PUTROOTFH]).await.unwrap();
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        let NfsResop4::OP_EXCHANGE_ID(ExchangeId4res::NFS4_OK(ok)) = &r.resarray[1] else {
            panic!("{r:?}")
        };
        assert_ne!(ok.eir_clientid, s.clientid());
        assert_eq!(ok.eir_flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
        // BIND_CONN_TO_SESSION stays alone (§18.34.3), SEQUENCE or not.
        let r = s
            .call_raw(vec![NfsArgop4::OP_BIND_CONN_TO_SESSION(
                BindConnToSession4args {
                    bctsa_sessid: s.sessionid(),
                    bctsa_dir: ChannelDirFromClient4::CDFC4_FORE,
                    bctsa_use_conn_in_rdma_mode: false,
                },
            )])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_NOT_ONLY_OP);
    });
}

#[test]
fn truncated_argument_is_badxdr() {
    with_session(|_, s| async move {
        let g = s.acquire().await;
        let mut b = encode("short", 1, vec![g.sequence(false), NfsArgop4::OP_PUTROOTFH]);
        set_op_count(&mut b, 3);
        b.put_u32(NfsOpnum4::OP_LOOKUP as u32);
        b.put_u32(100); // a 100-byte name, of which 3 bytes arrive
        b.put_slice(b"abc");
        third_op_fails(
            &s,
            g,
            &b,
            NfsOpnum4::OP_LOOKUP,
            NFS4ERR_BADXDR,
            "short LOOKUP",
        )
        .await;
        s.renew().await.expect("the session still works");
    });
}

#[test]
fn unimplemented_operations_are_notsupp_and_the_server_keeps_serving() {
    with_session(|addr, s| async move {
        let root = s.lookup_path("/").await.unwrap();
        let o = open_rw(&s, "f", OWNER_A).await.unwrap();
        let layoutget = NfsArgop4::OP_LAYOUTGET(Layoutget4args {
            loga_signal_layout_avail: false,
            loga_layout_type: Layouttype4::LAYOUT4_NFSV4_1_FILES,
            loga_iomode: Layoutiomode4::LAYOUTIOMODE4_READ,
            loga_offset: 0,
            loga_length: u64::MAX,
            loga_minlength: 0,
            loga_stateid: o.stateid.clone(),
            loga_maxcount: 4096,
        });
        let openattr = NfsArgop4::OP_OPENATTR(Openattr4args { createdir: false });
        // RENEW is NFSv4.0 only: RFC 8881 §18.1 has 4.1 servers answer NOTSUPP.
        let renew = NfsArgop4::OP_RENEW(Renew4args {
            clientid: s.clientid(),
        });
        for (op, num) in [
            (layoutget, NfsOpnum4::OP_LAYOUTGET),
            (openattr, NfsOpnum4::OP_OPENATTR),
            (renew, NfsOpnum4::OP_RENEW),
        ] {
            let r = s.call_raw(vec![putfh(&o.fh), op]).await.unwrap();
            assert_eq!(r.status, NFS4ERR_NOTSUPP, "{num:?}");
            assert_eq!(statuses(&r).last().copied(), Some((num, NFS4ERR_NOTSUPP)));
        }

        // COPY_NOTIFY (the source side of an inter-server copy, which Tarn
        // does not offer) in minor version 2, on a 4.2 session.
        let s2 = session_with(
            addr,
            &SessionOptions {
                minorversion: 2,
                ..SessionOptions::default()
            },
        )
        .await;
        let notify = NfsArgop4::OP_COPY_NOTIFY(CopyNotify4args {
            cna_src_stateid: o.stateid.clone(),
            cna_destination_server: Netloc4::NL4_NAME(Bytes::from_static(b"elsewhere")),
        });
        let r = s2.call_raw(vec![putfh(&o.fh), notify]).await.unwrap();
        assert_eq!(r.status, NFS4ERR_NOTSUPP);
        assert_eq!(
            statuses(&r).last().copied(),
            Some((NfsOpnum4::OP_COPY_NOTIFY, NFS4ERR_NOTSUPP))
        );

        // Still serving, on both sessions and a new connection.
        s.conn().null().await.unwrap();
        s.lookup(&root, "f").await.expect("LOOKUP after NOTSUPP");
        s2.lookup_path("/f")
            .await
            .expect("4.2 LOOKUP after NOTSUPP");
        conn(addr).await.null().await.unwrap();
        s.close(&o.fh, &o.stateid).await.unwrap();
    });
}

#[test]
fn filehandle_errors() {
    let t = Tarn::start(&[]);
    std::fs::create_dir(t.export.join("d")).unwrap();
    run(async {
        let s = session(t.addr).await;
        let root = s.lookup_path("/").await.unwrap();

        // A handle the server never made fails its MAC.
        let mut forged = root.0.to_vec();
        let last = forged.len() - 1;
        forged[last] ^= 0x01;
        for fh in [
            NfsFh4(Bytes::from(forged)),
            NfsFh4(Bytes::from(vec![0x42; 32])),
        ] {
            let r = s.call(vec![putfh(&fh)]).await;
            assert_eq!(err(r), NFS4ERR_BADHANDLE);
        }

        let r = s.call(vec![NfsArgop4::OP_GETFH]).await;
        assert_eq!(err(r), NFS4ERR_NOFILEHANDLE);

        // "." and ".." are not names in NFSv4 (RFC 8881 §18.13.3).
        for n in [".", ".."] {
            let r = s
                .call(vec![
                    putfh(&root),
                    NfsArgop4::OP_LOOKUP(Lookup4args { objname: name(n) }),
                ])
                .await;
            assert_eq!(err(r), NFS4ERR_BADNAME, "LOOKUP {n:?}");
        }

        // The root has no parent; a subdirectory's parent is the root.
        let r = s
            .call(vec![NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_LOOKUPP])
            .await;
        assert_eq!(err(r), NFS4ERR_NOENT);
        let d = s.lookup(&root, "d").await.unwrap();
        let r = s
            .call(vec![putfh(&d), NfsArgop4::OP_LOOKUPP, NfsArgop4::OP_GETFH])
            .await
            .unwrap();
        let NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(up)) = &r[2] else {
            panic!("{r:?}")
        };
        assert_eq!(up.object, root);
    });
}

// ---------------------------------------------------------------------------
// 2. Sessions
// ---------------------------------------------------------------------------

fn sequence(sessionid: Sessionid4, slot: u32, seqid: u32) -> NfsArgop4 {
    NfsArgop4::OP_SEQUENCE(Sequence4args {
        sa_sessionid: sessionid,
        sa_sequenceid: seqid,
        sa_slotid: slot,
        sa_highest_slotid: slot,
        sa_cachethis: false,
    })
}

#[test]
fn misordered_bad_slot_and_bad_session() {
    with_session(|_, s| async move {
        let g = s.acquire().await;
        // lease.seqid is the next one due; one more skips a request.
        let r = s
            .conn()
            .compound(
                1,
                vec![g.sequence_with(g.lease.seqid.wrapping_add(1), false)],
            )
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_SEQ_MISORDERED);
        assert_eq!(g.finish(&r), Outcome::NotProcessed);

        let n = s.fore_channel().ca_maxrequests;
        let r = s
            .conn()
            .compound(1, vec![sequence(s.sessionid(), n, 1)])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_BADSLOT, "slot {n} of a {n}-slot table");

        let r = s
            .conn()
            .compound(1, vec![sequence([0xab; 16], 0, 1), NfsArgop4::OP_PUTROOTFH])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_BADSESSION);
        assert_eq!(statuses(&r), [(NfsOpnum4::OP_SEQUENCE, NFS4ERR_BADSESSION)]);
        s.renew().await.expect("slot 0 was left as it was");
    });
}

#[test]
fn cached_retry_replays_the_same_bytes_and_creates_once() {
    let maddr = format!("127.0.0.1:{}", testkdc::free_port());
    let t = Tarn::start(&["--metrics", &maddr]);
    run(async {
        let s = session(t.addr).await;
        let root = s.lookup_path("/").await.unwrap();
        let mkdir = |n: &str| {
            NfsArgop4::OP_CREATE(Create4args {
                objtype: Createtype4::NF4DIR,
                objname: name(n),
                createattrs: SetAttrs::mode(0o755).encode(),
            })
        };
        let g = s.acquire().await;
        let args = encode(
            "mkdir",
            1,
            vec![
                g.sequence(true),
                putfh(&root),
                mkdir("once"),
                NfsArgop4::OP_GETFH,
            ],
        );
        let first = send_raw(s.conn(), &args).await;
        let r = decode(&first);
        assert_eq!(r.status, NFS4_OK, "{:?}", statuses(&r));
        // The retransmission: same slot, same seqid, same bytes.
        let again = send_raw(s.conn(), &args).await;
        assert_eq!(first, again, "a retry gets the cached reply, byte for byte");
        // ... and is counted as a slot replay.
        let body = metrics(&maddr);
        assert!(
            body.lines()
                .any(|l| l.starts_with("tarn_slot_replays_total") && l.ends_with(" 1")),
            "{}",
            body.lines()
                .filter(|l| l.contains("slot"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // The client, its session and the slot's cached reply are in the cache report.
        let state = |m: &str| {
            body.lines()
                .find(|l| l.starts_with(&format!("{m}{{cache=\"nfs4_state\"}}")))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        assert!(state("tarn_cache_entries") >= 2, "{body}");
        assert!(state("tarn_cache_bytes") > first.len() as u64, "{body}");
        let dirs: Vec<_> = std::fs::read_dir(&t.export)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(dirs, ["once"]);

        // Same slot and seqid, different request: a false retry (RFC 8881
        // §2.10.6.1.3.1). The server must not answer it from the cache.
        let other = encode(
            "mkdir",
            1,
            vec![
                g.sequence(true),
                putfh(&root),
                mkdir("twice"),
                NfsArgop4::OP_GETFH,
            ],
        );
        let r = decode(&send_raw(s.conn(), &other).await);
        assert_eq!(r.status, NFS4ERR_SEQ_FALSE_RETRY);
        assert!(!t.export.join("twice").exists());
        g.finish(&decode(&first));

        // A new request that does the same thing runs it again: EXIST.
        let r = s.call(vec![putfh(&root), mkdir("once")]).await;
        assert_eq!(err(r), NFS4ERR_EXIST);
    });
}

#[test]
fn uncached_retry() {
    with_session(|_, s| async move {
        let g = s.acquire().await;
        let args = encode(
            "nocache",
            1,
            vec![g.sequence(false), NfsArgop4::OP_PUTROOTFH],
        );
        let first = send_raw(s.conn(), &args).await;
        assert_eq!(decode(&first).status, NFS4_OK);
        let again = send_raw(s.conn(), &args).await;
        // RFC 8881 §2.10.6.1.3: without sa_cachethis the server may still
        // have cached the reply; either the same bytes or
        // RETRY_UNCACHED_REP is right.
        if again != first {
            let r = decode(&again);
            assert_eq!(r.status, NFS4ERR_RETRY_UNCACHED_REP);
            assert_eq!(
                statuses(&r),
                [(NfsOpnum4::OP_SEQUENCE, NFS4ERR_RETRY_UNCACHED_REP)]
            );
        }
        g.finish(&decode(&first));
        s.renew().await.unwrap();
    });
}

#[test]
fn create_session_replay_and_destroy_clientid_while_busy() {
    with_server(|addr| async move {
        let c = conn(addr).await;
        let o = SessionOptions::default();
        let ex = exchange_id(&c, &o).await.unwrap();
        let cs = create_session(&c, ex.eir_clientid, ex.eir_sequenceid, &o)
            .await
            .unwrap();
        let again = create_session(&c, ex.eir_clientid, ex.eir_sequenceid, &o)
            .await
            .expect("a CREATE_SESSION retry is answered from its cache");
        assert_eq!(again, cs, "the same session, the same reply");
        // Neither the last sequence nor the next one: misordered.
        let r = create_session(&c, ex.eir_clientid, ex.eir_sequenceid.wrapping_add(5), &o).await;
        assert_eq!(err(r), NFS4ERR_SEQ_MISORDERED);

        let destroy = |id| {
            vec![NfsArgop4::OP_DESTROY_CLIENTID(DestroyClientid4args {
                dca_clientid: id,
            })]
        };
        let r = c.compound(1, destroy(ex.eir_clientid)).await.unwrap();
        assert_eq!(r.status, NFS4ERR_CLIENTID_BUSY, "a session exists");
        let s = Session::from_parts(c, &o, ex.eir_clientid, &cs);
        s.renew().await.expect("the session survived");
        s.destroy()
            .await
            .expect("DESTROY_SESSION, then DESTROY_CLIENTID");
        let r = s
            .conn()
            .compound(1, destroy(ex.eir_clientid))
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_STALE_CLIENTID, "already gone");
    });
}

// ---------------------------------------------------------------------------
// 3. Stateids (made up, old, future and TEST_STATEID / FREE_STATEID are
//    tested in-process: crates/server/src/nfs4/tests/stateids.rs)
// ---------------------------------------------------------------------------

#[test]
fn close_twice_and_close_with_locks_held() {
    with_session(|_, s| async move {
        let o = open_rw(&s, "f", OWNER_A).await.unwrap();
        let closed = s.close(&o.fh, &o.stateid).await.unwrap();
        assert_eq!(err(s.close(&o.fh, &o.stateid).await), NFS4ERR_BAD_STATEID);
        assert_eq!(err(s.close(&o.fh, &closed).await), NFS4ERR_BAD_STATEID);

        let o = open_rw(&s, "f", OWNER_A).await.unwrap();
        let lo = s.new_owner("lock");
        let l = lock_by(&s, &o.fh, &o.stateid, &lo, NfsLockType4::WRITE_LT, 0, 10)
            .await
            .unwrap()
            .unwrap();
        // RFC 8881 §18.2.4 lets a server free the locks at CLOSE or refuse
        // with LOCKS_HELD; Tarn frees them (Linux may send the CLOSE of a
        // closing file before its LOCKU completes), and the lock stateid
        // goes with the open.
        s.close(&o.fh, &o.stateid)
            .await
            .expect("CLOSE frees the locks");
        assert_eq!(
            err(s.locku(&o.fh, &l, NfsLockType4::WRITE_LT, 0, 10).await),
            NFS4ERR_BAD_STATEID
        );
        let o2 = open_rw(&s, "f", "open-b").await.unwrap();
        let lo2 = s.new_owner("lock-2");
        lock_by(&s, &o2.fh, &o2.stateid, &lo2, NfsLockType4::WRITE_LT, 0, 10)
            .await
            .unwrap()
            .expect("the range is free after the CLOSE");
    });
}

/// OPEN of "f" by OWNER_A for `access`, denying WRITE to others.
async fn open_denying_writes(s: &Session, access: u32) -> Opened {
    open(s, "f", OWNER_A, access, OPEN4_SHARE_DENY_WRITE)
        .await
        .unwrap()
}

#[test]
fn share_deny_blocks_other_owners() {
    with_server(|addr| async move {
        let a = session(addr).await;
        let b = session(addr).await;
        let oa = open_denying_writes(&a, OPEN4_SHARE_ACCESS_READ).await;
        // b's OPEN of f for `access`, denying `deny`.
        let open_b = |access, deny| open(&b, "f", "open-b", access, deny);
        let r = open_b(OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_NONE).await;
        assert_eq!(err(r), NFS4ERR_SHARE_DENIED, "deny WRITE against a writer");
        let r = open_b(OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_READ).await;
        assert_eq!(err(r), NFS4ERR_SHARE_DENIED, "deny READ against a reader");
        // Another owner of the same client is just as refused.
        let r = open_rw(&a, "f", "open-a2").await;
        assert_eq!(err(r), NFS4ERR_SHARE_DENIED);
        let ob = open_b(OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE)
            .await
            .expect("a reader is fine");
        b.close(&ob.fh, &ob.stateid).await.unwrap();
        a.close(&oa.fh, &oa.stateid).await.unwrap();
        let ob = open_b(OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_NONE)
            .await
            .expect("the deny went with the CLOSE");
        b.close(&ob.fh, &ob.stateid).await.unwrap();
    });
}

#[test]
fn share_deny_holds_against_anonymous_io() {
    with_server(|addr| async move {
        let a = session(addr).await;
        let oa = open_denying_writes(&a, OPEN4_SHARE_ACCESS_BOTH).await;
        let anon = Stateid4 {
            seqid: 0,
            other: [0; 12],
        };
        let data = || Bytes::from_static(b"x");
        // RFC 8881 §8.2.3: anonymous I/O an open denies is refused.
        let r = a
            .write(&anon, &oa.fh, 0, data(), StableHow4::FILE_SYNC4)
            .await;
        assert_eq!(err(r), NFS4ERR_LOCKED, "anonymous WRITE under DENY_WRITE");
        a.read(&anon, &oa.fh, 0, 10)
            .await
            .expect("reading is not denied");
        a.write(&oa.stateid, &oa.fh, 0, data(), StableHow4::FILE_SYNC4)
            .await
            .expect("the open's own WRITE");
        // The same owner's own deny counts too (RFC 8881 §9.7).
        let r = open(
            &a,
            "f",
            OWNER_A,
            OPEN4_SHARE_ACCESS_WRITE,
            OPEN4_SHARE_DENY_NONE,
        )
        .await;
        assert_eq!(err(r), NFS4ERR_SHARE_DENIED);
        a.close(&oa.fh, &oa.stateid).await.unwrap();
        a.write(&anon, &oa.fh, 0, data(), StableHow4::FILE_SYNC4)
            .await
            .expect("the deny went with the CLOSE");
    });
}

#[test]
fn anonymous_stateids_read_and_write() {
    let t = Tarn::start(&[]);
    std::fs::write(t.export.join("f"), b"plain data").unwrap();
    // The test runs as another user than the client's AUTH_SYS uid.
    chmod(t.export.join("f"), 0o666);
    run(async {
        let s = session(t.addr).await;
        let fh = s.lookup_path("/f").await.unwrap();
        let anon = Stateid4 {
            seqid: 0,
            other: [0; 12],
        };
        let bypass = Stateid4 {
            seqid: u32::MAX,
            other: [0xff; 12],
        };
        for sid in [&anon, &bypass] {
            let r = s.read(sid, &fh, 0, 100).await.unwrap();
            assert_eq!((&r.data[..], r.eof), (&b"plain data"[..], true));
        }
        write_sync(&s, &anon, &fh, 0, b"PLAIN")
            .await
            .expect("WRITE with the anonymous stateid");
        assert_eq!(std::fs::read(t.export.join("f")).unwrap(), b"PLAIN data");
    });
}

// ---------------------------------------------------------------------------
// 4. Locks
// ---------------------------------------------------------------------------

#[test]
fn lock_conflicts_between_owners() {
    use NfsLockType4::*;
    with_server(|addr| async move {
        let a = session(addr).await;
        let b = session(addr).await;
        let oa = open_rw(&a, "f", OWNER_A).await.unwrap();
        let ob = open_rw(&b, "f", "open-b").await.unwrap();
        let fh = oa.fh.clone();
        let (la, lb) = (owner(&a, "lock-a"), owner(&b, "lock-b"));

        // Zero length is invalid (RFC 8881 §18.10.4), for LOCK and LOCKT.
        let r = lock_by(&a, &fh, &oa.stateid, &la, WRITE_LT, 0, 0).await;
        assert_eq!(err(r), NFS4ERR_INVAL);
        assert_eq!(err(a.lockt(&fh, WRITE_LT, 0, 0, &la).await), NFS4ERR_INVAL);

        let sa = lock_by(&a, &fh, &oa.stateid, &la, WRITE_LT, 100, 50)
            .await
            .unwrap()
            .expect("first lock");
        let d = lock_by(&b, &fh, &ob.stateid, &lb, WRITE_LT, 120, 10)
            .await
            .unwrap()
            .expect_err("overlapping write lock");
        assert_eq!((d.offset, d.length, d.locktype), (100, 50, WRITE_LT));
        assert_eq!(d.owner, la, "DENIED names the holder");
        let d = b
            .lockt(&fh, READ_LT, 149, 1, &lb)
            .await
            .unwrap()
            .expect("LOCKT denies");
        assert_eq!(d.owner, la);
        assert!(
            b.lockt(&fh, WRITE_LT, 150, 10, &lb)
                .await
                .unwrap()
                .is_none(),
            "no overlap"
        );
        // A holder's own LOCKT is not in conflict with itself.
        assert!(a
            .lockt(&fh, WRITE_LT, 100, 50, &la)
            .await
            .unwrap()
            .is_none());

        // LOCKU, then the other owner gets it.
        let sa = a.locku(&fh, &sa, WRITE_LT, 100, 50).await.unwrap();
        let sb = lock_by(&b, &fh, &ob.stateid, &lb, WRITE_LT, 120, 10)
            .await
            .unwrap()
            .expect("granted after LOCKU");
        let sb = b.locku(&fh, &sb, WRITE_LT, 120, 10).await.unwrap();

        // Read locks share; a write lock waits for both to go.
        let sa = a
            .lock(&fh, Session::existing_lock_owner(&sa), READ_LT, 0, u64::MAX)
            .await
            .unwrap()
            .expect("read lock");
        let sb = b
            .lock(&fh, Session::existing_lock_owner(&sb), READ_LT, 10, 10)
            .await
            .unwrap()
            .expect("read locks share");
        let d = a.lockt(&fh, WRITE_LT, 0, 1, &la).await.unwrap();
        assert!(d.is_none(), "only its own read lock covers offset 0");
        let d = a
            .lockt(&fh, WRITE_LT, 15, 1, &la)
            .await
            .unwrap()
            .expect("b reads there");
        assert_eq!((d.owner, d.locktype), (lb.clone(), READ_LT));
        b.locku(&fh, &sb, READ_LT, 10, 10).await.unwrap();
        a.locku(&fh, &sa, READ_LT, 0, u64::MAX).await.unwrap();
    });
}

mod nlm {
    use super::*;
    use proto::nlm4::*;
    use rpc::client::{auth_sys, RpcClient};
    use xdr::Unpack;

    pub struct Nlm {
        c: RpcClient,
        fh: Netobj,
    }

    impl Nlm {
        pub async fn connect(addr: std::net::SocketAddr, fh: &NfsFh4) -> Nlm {
            let c = RpcClient::connect(addr, auth_sys(0, 0, &[], "nlmhost"))
                .await
                .unwrap();
            // NFSv3 and NFSv4 handles are the same bytes in Tarn.
            Nlm {
                c,
                fh: Netobj(fh.0.clone()),
            }
        }

        fn alock(&self, off: u64, len: u64) -> Nlm4Lock {
            Nlm4Lock {
                caller_name: Bytes::from_static(b"nlmhost"),
                fh: self.fh.clone(),
                oh: Netobj(Bytes::from_static(b"7@nlmhost")),
                svid: 7,
                l_offset: off,
                l_len: len,
            }
        }

        pub async fn lock(&self, off: u64, len: u64) -> Nlm4Stats {
            let a = Nlm4Lockargs {
                cookie: Netobj(Bytes::from_static(b"c")),
                block: false,
                exclusive: true,
                alock: self.alock(off, len),
                reclaim: false,
                state: 1,
            };
            let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_LOCK, &a).await.unwrap();
            Nlm4Res::unpack(&mut d).unwrap().stat.stat
        }

        pub async fn test(&self, off: u64, len: u64) -> Nlm4Testrply {
            let a = Nlm4Testargs {
                cookie: Netobj(Bytes::new()),
                exclusive: true,
                alock: self.alock(off, len),
            };
            let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_TEST, &a).await.unwrap();
            Nlm4Testres::unpack(&mut d).unwrap().test_stat
        }

        pub async fn unlock(&self, off: u64, len: u64) -> Nlm4Stats {
            let a = Nlm4Unlockargs {
                cookie: Netobj(Bytes::new()),
                alock: self.alock(off, len),
            };
            let mut d = self.c.call(NLM_PROG, 4, NLMPROC4_UNLOCK, &a).await.unwrap();
            Nlm4Res::unpack(&mut d).unwrap().stat.stat
        }
    }
}

#[test]
fn nfs4_and_nlm_locks_conflict() {
    use proto::nlm4::{Nlm4Stats, Nlm4Testrply};
    use NfsLockType4::*;
    // NLM needs no grace here: a server with no previous clients has none.
    let t = Tarn::start(&["--grace", "0"]);
    run(async {
        let s = session(t.addr).await;
        let o = open_rw(&s, "f", OWNER_A).await.unwrap();
        let lo = s.new_owner("lock");
        let l = lock_by(&s, &o.fh, &o.stateid, &lo, WRITE_LT, 0, 100)
            .await
            .unwrap()
            .unwrap();
        let n = nlm::Nlm::connect(t.addr, &o.fh).await;
        // The NFSv4 client holds a write delegation on the file (it is its
        // only user): NLM first hears "again later" while the server
        // recalls it (the holder could have locked locally), as Linux's
        // lockd would, then the conflict with the lock the server knows.
        let mut first = n.lock(50, 10).await;
        for _ in 0..100 {
            if first != Nlm4Stats::NLM4_DENIED_GRACE_PERIOD {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            first = n.lock(50, 10).await;
        }
        assert_eq!(first, Nlm4Stats::NLM4_DENIED, "NFSv4 lock blocks NLM");
        match n.test(50, 10).await {
            Nlm4Testrply::NLM4_DENIED(h) => {
                assert_eq!((h.l_offset, h.l_len, h.exclusive), (0, 100, true))
            }
            other => panic!("NLM TEST: {other:?}"),
        }
        let l = s.locku(&o.fh, &l, WRITE_LT, 0, 100).await.unwrap();
        assert_eq!(n.lock(50, 10).await, Nlm4Stats::NLM4_GRANTED);
        // A read lock on the whole file by the lock owner that unlocked.
        let read_all = || {
            s.lock(
                &o.fh,
                Session::existing_lock_owner(&l),
                READ_LT,
                0,
                u64::MAX,
            )
        };
        let d = read_all()
            .await
            .unwrap()
            .expect_err("NLM lock blocks NFSv4");
        assert_eq!((d.offset, d.length, d.locktype), (50, 10, WRITE_LT));
        assert!(s.lockt(&o.fh, READ_LT, 55, 1, &lo).await.unwrap().is_some());
        assert_eq!(n.unlock(50, 10).await, Nlm4Stats::NLM4_GRANTED);
        read_all().await.unwrap().expect("free again");
    });
}

// Lease expiry, courtesy, grace length and RECLAIM_COMPLETE rules are tested
// in-process on a manual clock: crates/server/src/nfs4/tests/.

// ---------------------------------------------------------------------------
// 5. Grace and recovery after a real restart
// ---------------------------------------------------------------------------

fn open_args(owner: StateOwner4, claim: OpenClaim4, how: Openflag4) -> NfsArgop4 {
    NfsArgop4::OP_OPEN(Open4args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner,
        openhow: how,
        claim,
    })
}

fn claim_previous() -> OpenClaim4 {
    OpenClaim4::CLAIM_PREVIOUS(OpenDelegationType4::OPEN_DELEGATE_NONE)
}

/// OPEN CLAIM_PREVIOUS of `fh` by `s`'s open owner OWNER_A.
async fn reopen_previous(s: &Session, fh: &NfsFh4) -> Result<Vec<NfsResop4>> {
    s.call(vec![
        putfh(fh),
        open_args(owner(s, OWNER_A), claim_previous(), nocreate()),
    ])
    .await
}

/// EXCHANGE_ID and CREATE_SESSION only: a client that may still reclaim.
async fn reclaiming_session(addr: std::net::SocketAddr, o: &SessionOptions) -> Arc<Session> {
    let c = conn(addr).await;
    let ex = exchange_id(&c, o).await.expect("EXCHANGE_ID");
    let cs = create_session(&c, ex.eir_clientid, ex.eir_sequenceid, o)
        .await
        .expect("CREATE_SESSION");
    Arc::new(Session::from_parts(c, o, ex.eir_clientid, &cs))
}

/// A client that held an open and a lock before the server died.
async fn client_with_state(addr: std::net::SocketAddr, o: &SessionOptions) -> NfsFh4 {
    let a = session_with(addr, o).await;
    let oa = open_rw(&a, "f", OWNER_A).await.unwrap();
    lock_by(
        &a,
        &oa.fh,
        &oa.stateid,
        &owner(&a, "lock-a"),
        NfsLockType4::WRITE_LT,
        0,
        10,
    )
    .await
    .unwrap()
    .unwrap();
    oa.fh
}

#[test]
fn reclaim_after_restart_in_grace() {
    let mut t = Tarn::start(&[]);
    let o = owner_opts("reclaimer", 0x1234);
    let fh = run(client_with_state(t.addr, &o));
    assert!(
        std::fs::read_to_string(t.state.join("v4clients")).is_ok_and(|s| !s.trim().is_empty()),
        "the client is on record"
    );
    t.restart(&["--grace", "5"]);
    run(async {
        // A new client may not create state during grace.
        let n = session(t.addr).await;
        let r = open_rw(&n, "g", "open-n").await;
        assert_eq!(err(r), NFS4ERR_GRACE);

        // A client the server never recorded cannot reclaim. RFC 8881
        // §18.16.3/§15.1.9: RECLAIM_BAD, or NO_GRACE (the server cannot
        // vouch for the reclaim); both are right.
        let u = reclaiming_session(t.addr, &SessionOptions::default()).await;
        let r = reopen_previous(&u, &fh).await;
        let st = err(r);
        assert!(
            matches!(st, NFS4ERR_RECLAIM_BAD | NFS4ERR_NO_GRACE),
            "{st:?}"
        );

        // The recorded client, same owner and verifier, reclaims.
        let a = reclaiming_session(t.addr, &o).await;
        let r = reopen_previous(&a, &fh).await.expect("OPEN CLAIM_PREVIOUS");
        let NfsResop4::OP_OPEN(Open4res::NFS4_OK(opened)) = &r[1] else {
            panic!("{r:?}")
        };
        let r = a
            .call(vec![
                putfh(&fh),
                NfsArgop4::OP_LOCK(Lock4args {
                    locktype: NfsLockType4::WRITE_LT,
                    reclaim: true,
                    offset: 0,
                    length: 10,
                    locker: a.new_lock_owner(&opened.stateid, &owner(&a, "lock-a")),
                }),
            ])
            .await;
        r.expect("LOCK reclaim");
        // Not a reclaim: still refused while grace lasts.
        let r = a
            .call(vec![
                putfh(&fh),
                open_args(owner(&a, "other"), OpenClaim4::CLAIM_FH, nocreate()),
            ])
            .await;
        assert_eq!(err(r), NFS4ERR_GRACE);

        // The last recorded client is done: grace ends at once.
        let reclaim_complete = || {
            a.call(vec![NfsArgop4::OP_RECLAIM_COMPLETE(ReclaimComplete4args {
                rca_one_fs: false,
            })])
        };
        reclaim_complete().await.expect("RECLAIM_COMPLETE");
        let r = reclaim_complete().await;
        assert_eq!(err(r), NFS4ERR_COMPLETE_ALREADY);
        // Its own reclaims are over too (RFC 8881 §18.51.3).
        let r = reopen_previous(&a, &fh).await;
        assert_eq!(err(r), NFS4ERR_NO_GRACE);
        let og = open_rw(&n, "g", "open-n")
            .await
            .expect("normal OPEN after grace");
        n.close(&og.fh, &og.stateid).await.unwrap();
        // The reclaimed lock holds against the new client.
        let on = open_rw(&n, "f", "open-n").await.unwrap();
        let d = n
            .lockt(&on.fh, NfsLockType4::WRITE_LT, 5, 1, &owner(&n, "lock-n"))
            .await
            .unwrap();
        assert!(d.is_some(), "the reclaimed lock is held");
        // And reclaiming is over for everyone.
        let r = reopen_previous(&u, &fh).await;
        assert_eq!(err(r), NFS4ERR_NO_GRACE);
    });
}

// ---------------------------------------------------------------------------
// Channel limits (RFC 8881 §2.10.6.4)
// ---------------------------------------------------------------------------

#[test]
fn channel_limits_are_enforced() {
    let t = Tarn::start(&[]);
    std::fs::write(t.export.join("f"), vec![b'.'; 64 << 10]).unwrap();
    chmod(t.export.join("f"), 0o666);
    run(async {
        let o = SessionOptions {
            max_ops: 4,
            max_request: 2048,
            ..SessionOptions::default()
        };
        let s = session_with(t.addr, &o).await;
        let fore = s.fore_channel().clone();
        assert!(fore.ca_maxoperations <= 4 && fore.ca_maxrequestsize <= 2048);
        let fh = s.lookup_path("/f").await.unwrap();

        // SEQUENCE and four more: five operations where four are allowed.
        // The RFC names no position for the error: SEQUENCE's (as Linux
        // does) or the first operation past the limit are both right.
        let r = s.call_raw(vec![NfsArgop4::OP_PUTROOTFH; 4]).await.unwrap();
        assert_eq!(r.status, NFS4ERR_TOO_MANY_OPS, "{:?}", statuses(&r));

        // A request larger than ca_maxrequestsize: REQ_TOO_BIG, and the
        // WRITE in it must not happen.
        let anon = Stateid4 {
            seqid: 0,
            other: [0; 12],
        };
        let r = s
            .call_raw(vec![
                putfh(&fh),
                NfsArgop4::OP_WRITE(Write4args {
                    stateid: anon.clone(),
                    offset: 0,
                    stable: StableHow4::FILE_SYNC4,
                    data: Bytes::from(vec![b'X'; 4096]),
                }),
            ])
            .await
            .unwrap();
        assert_eq!(r.status, NFS4ERR_REQ_TOO_BIG, "{:?}", statuses(&r));
        assert!(!std::fs::read(t.export.join("f")).unwrap().contains(&b'X'));

        // sa_cachethis with a reply larger than ca_maxresponsesize_cached:
        // REP_TOO_BIG_TO_CACHE, and that reply is cached ("the replier MUST
        // cache a reply" when sa_cachethis is true), so a retry gets it again.
        let cached = fore.ca_maxresponsesize_cached;
        let big_read = || {
            NfsArgop4::OP_READ(Read4args {
                stateid: anon.clone(),
                offset: 0,
                count: cached + 4096,
            })
        };
        let g = s.acquire().await;
        let args = encode("bigread", 1, vec![g.sequence(true), putfh(&fh), big_read()]);
        let first = send_raw(s.conn(), &args).await;
        let r = decode(&first);
        g.finish(&r);
        assert_eq!(r.status, NFS4ERR_REP_TOO_BIG_TO_CACHE, "{:?}", statuses(&r));
        assert!(
            first.len() <= cached as usize + 8,
            "the reply fits the cache"
        );
        let g = s.acquire().await;
        let again = encode(
            "bigread",
            1,
            vec![
                g.sequence_with(g.lease.seqid.wrapping_sub(1), true),
                putfh(&fh),
                big_read(),
            ],
        );
        assert_eq!(again, args);
        assert_eq!(
            send_raw(s.conn(), &again).await,
            first,
            "the retry is answered from the cache"
        );
        g.release(Outcome::NotProcessed);
        s.renew().await.unwrap();
    });
}
