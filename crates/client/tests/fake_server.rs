//! The session layer against a scripted NFSv4.1 peer on loopback: it checks
//! every SEQUENCE's slot and seqid, answers NFS4ERR_DELAY when told, and
//! lowers sr_target_highest_slotid, which real servers rarely do on cue.

use bytes::BytesMut;
use client::nfs4::*;
use proto::nfs4::*;
use rpc::{CallContext, CallError, Server, ServerConfig, Service};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xdr::{Decoder, Pack, Unpack};

const SLOTS: u32 = 8;

#[derive(Default)]
struct Fake {
    /// Last seqid processed per slot.
    seqids: Mutex<Vec<u32>>,
    target: AtomicU32,
    /// How many SEQUENCEs to answer NFS4ERR_DELAY (slot unchanged).
    delay_sequence: AtomicU32,
    /// How many PUTROOTFHs to answer NFS4ERR_DELAY (after SEQUENCE succeeded).
    delay_op: AtomicU32,
    attempts: AtomicU32,
    misordered: AtomicU32,
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
    /// Highest sa_slotid and sa_highest_slotid seen since the last reset.
    max_slot: AtomicU32,
    max_highest: AtomicU32,
    pause_ms: AtomicU32,
    /// How many GETATTRs to answer NFS4ERR_DELAY.
    delay_getattr: AtomicU32,
    removes: AtomicU32,
}

impl Fake {
    async fn compound(&self, args: Compound4args) -> Compound4res {
        let reply = |status, resarray| Compound4res {
            status,
            tag: args.tag.clone(),
            resarray,
        };
        let Some(NfsArgop4::OP_SEQUENCE(seq)) = args.argarray.first() else {
            return reply(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION, vec![]);
        };
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let fail = |st| reply(st, vec![NfsResop4::OP_SEQUENCE(Sequence4res::Default(st))]);
        if self
            .delay_sequence
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return fail(Nfsstat4::NFS4ERR_DELAY);
        }
        {
            let mut s = self.seqids.lock().unwrap();
            let Some(last) = s.get_mut(seq.sa_slotid as usize) else {
                return fail(Nfsstat4::NFS4ERR_BADSLOT);
            };
            if seq.sa_sequenceid != last.wrapping_add(1) {
                self.misordered.fetch_add(1, Ordering::SeqCst);
                return fail(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
            }
            *last = seq.sa_sequenceid;
        }
        self.max_slot.fetch_max(seq.sa_slotid, Ordering::SeqCst);
        self.max_highest
            .fetch_max(seq.sa_highest_slotid, Ordering::SeqCst);
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(n, Ordering::SeqCst);
        let pause = self.pause_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(pause as u64)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut res = vec![NfsResop4::OP_SEQUENCE(Sequence4res::NFS4_OK(
            Sequence4resok {
                sr_sessionid: seq.sa_sessionid,
                sr_sequenceid: seq.sa_sequenceid,
                sr_slotid: seq.sa_slotid,
                sr_highest_slotid: SLOTS - 1,
                sr_target_highest_slotid: self.target.load(Ordering::SeqCst),
                sr_status_flags: 0,
            },
        ))];
        let take = |n: &AtomicU32| {
            n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        for op in &args.argarray[1..] {
            let (st, r) = match op {
                NfsArgop4::OP_PUTROOTFH => {
                    let st = match take(&self.delay_op) {
                        true => Nfsstat4::NFS4ERR_DELAY,
                        false => Nfsstat4::NFS4_OK,
                    };
                    (st, NfsResop4::OP_PUTROOTFH(Putrootfh4res { status: st }))
                }
                NfsArgop4::OP_REMOVE(_) => {
                    self.removes.fetch_add(1, Ordering::SeqCst);
                    let ok = Remove4resok {
                        cinfo: ChangeInfo4 {
                            atomic: false,
                            before: 1,
                            after: 2,
                        },
                    };
                    (
                        Nfsstat4::NFS4_OK,
                        NfsResop4::OP_REMOVE(Remove4res::NFS4_OK(ok)),
                    )
                }
                NfsArgop4::OP_PUTFH(_) => (
                    Nfsstat4::NFS4_OK,
                    NfsResop4::OP_PUTFH(Putfh4res {
                        status: Nfsstat4::NFS4_OK,
                    }),
                ),
                NfsArgop4::OP_GETATTR(_) if take(&self.delay_getattr) => {
                    let st = Nfsstat4::NFS4ERR_DELAY;
                    (st, NfsResop4::OP_GETATTR(Getattr4res::Default(st)))
                }
                NfsArgop4::OP_GETATTR(_) => {
                    let ok = Getattr4resok {
                        obj_attributes: Fattr4 {
                            attrmask: vec![],
                            attr_vals: Default::default(),
                        },
                    };
                    (
                        Nfsstat4::NFS4_OK,
                        NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)),
                    )
                }
                _ => {
                    let st = Nfsstat4::NFS4ERR_NOTSUPP;
                    (st, NfsResop4::OP_PUTROOTFH(Putrootfh4res { status: st }))
                }
            };
            res.push(r);
            if st != Nfsstat4::NFS4_OK {
                return reply(st, res);
            }
        }
        reply(Nfsstat4::NFS4_OK, res)
    }
}

impl Service for Fake {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        (prog == NFS4_PROGRAM).then_some((4, 4))
    }
    fn idempotent(&self, _: u32, _: u32, _: u32) -> bool {
        true // keeps the DRC out of the way: the slot table is under test
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "COMPOUND"
    }
    async fn call(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> std::result::Result<(), CallError> {
        if ctx.proc_ != NFSPROC4_COMPOUND {
            return Err(CallError::ProcUnavail);
        }
        let a = Compound4args::unpack(&mut args).map_err(|_| CallError::GarbageArgs)?;
        self.compound(a).await.pack(out);
        Ok(())
    }
}

async fn start(fake: Fake) -> (Arc<Session>, Arc<Fake>) {
    fake.seqids.lock().unwrap().resize(SLOTS as usize, 0);
    let fake = Arc::new(fake);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = Server::new(fake.clone(), ServerConfig::default());
    tokio::spawn(async move { server.run(l).await });
    let conn = Nfs4Conn::connect(addr, 1000, 1000).await.unwrap();
    let opts = SessionOptions {
        slots: SLOTS,
        delay_retry_for: Duration::from_secs(5),
        ..Default::default()
    };
    // The result of a CREATE_SESSION that the fake never saw.
    let cs = CreateSession4resok {
        csr_sessionid: [7; 16],
        csr_sequence: 1,
        csr_flags: 0,
        csr_fore_chan_attrs: opts.fore_channel(),
        csr_back_chan_attrs: opts.back_channel(),
    };
    (Arc::new(Session::from_parts(conn, &opts, 42, &cs)), fake)
}

fn fake(target: u32) -> Fake {
    let f = Fake::default();
    f.target.store(target, Ordering::SeqCst);
    f
}

#[tokio::test]
async fn delay_is_retried_with_the_right_seqids() {
    let f = fake(SLOTS - 1);
    f.delay_sequence.store(2, Ordering::SeqCst);
    f.delay_op.store(2, Ordering::SeqCst);
    let (s, svc) = start(f).await;
    let r = s.call(vec![NfsArgop4::OP_PUTROOTFH]).await.unwrap();
    assert_eq!(r.len(), 1, "results after SEQUENCE only");
    assert_eq!(
        svc.attempts.load(Ordering::SeqCst),
        5,
        "two SEQUENCE delays, two op delays, success"
    );
    assert_eq!(svc.misordered.load(Ordering::SeqCst), 0);
    // Slot 0 moved on for the two op delays and the success only.
    assert_eq!(s.slot_table().seqid(0), Some(3));
    assert_eq!(svc.seqids.lock().unwrap()[0], 3);
    s.renew().await.unwrap();
}

#[tokio::test]
async fn a_change_is_not_sent_again_when_the_getattr_after_it_is_delayed() {
    let f = fake(SLOTS - 1);
    f.delay_getattr.store(1, Ordering::SeqCst);
    let (s, svc) = start(f).await;
    let getattr = || {
        NfsArgop4::OP_GETATTR(Getattr4args {
            attr_request: vec![],
        })
    };
    let remove = NfsArgop4::OP_REMOVE(Remove4args {
        target: bytes::Bytes::from_static(b"f"),
    });
    let e = s
        .call(vec![NfsArgop4::OP_PUTROOTFH, remove.clone(), getattr()])
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_DELAY));
    assert_eq!(svc.removes.load(Ordering::SeqCst), 1, "REMOVE ran once");
    assert_eq!(svc.attempts.load(Ordering::SeqCst), 1, "not sent again");

    // Through the helper that wants the attributes: the removal stands,
    // the attributes are simply missing.
    svc.delay_getattr.store(1, Ordering::SeqCst);
    let root = NfsFh4(bytes::Bytes::from_static(b"root"));
    let a = plain::remove_attrs(&*s, &root, "f", &[]).await;
    assert!(matches!(a, Ok(None)), "{a:?}");
    assert_eq!(
        svc.removes.load(Ordering::SeqCst),
        2,
        "REMOVE ran once more"
    );

    // Nothing changed before a delayed GETATTR: the whole COMPOUND is sent
    // again, as before.
    svc.delay_getattr.store(1, Ordering::SeqCst);
    let before = svc.attempts.load(Ordering::SeqCst);
    s.call(vec![NfsArgop4::OP_PUTROOTFH, getattr()])
        .await
        .unwrap();
    assert_eq!(
        svc.attempts.load(Ordering::SeqCst) - before,
        2,
        "delayed once, then sent again"
    );
}

/// `n` PUTROOTFH COMPOUNDs sent at once, each of which must succeed.
async fn putrootfh_at_once(s: &Arc<Session>, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move { s.call(vec![NfsArgop4::OP_PUTROOTFH]).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn many_in_flight_share_the_table() {
    let f = fake(SLOTS - 1);
    f.pause_ms.store(20, Ordering::SeqCst);
    let (s, svc) = start(f).await;
    putrootfh_at_once(&s, 32).await;
    assert_eq!(svc.misordered.load(Ordering::SeqCst), 0);
    assert_eq!(
        svc.max_in_flight.load(Ordering::SeqCst),
        SLOTS,
        "every slot used"
    );
    assert_eq!(svc.max_slot.load(Ordering::SeqCst), SLOTS - 1);
    assert_eq!(s.slot_table().in_flight(), 0);
    let total: u32 = (0..SLOTS).map(|i| s.slot_table().seqid(i).unwrap()).sum();
    assert_eq!(total, 32, "one seqid step per call");
}

#[tokio::test]
async fn target_highest_slotid_is_respected() {
    let f = fake(1);
    f.pause_ms.store(10, Ordering::SeqCst);
    let (s, svc) = start(f).await;
    // The first reply tells the client to use slots 0 and 1 only.
    s.renew().await.unwrap();
    svc.max_slot.store(0, Ordering::SeqCst);
    svc.max_in_flight.store(0, Ordering::SeqCst);
    putrootfh_at_once(&s, 16).await;
    assert_eq!(svc.max_slot.load(Ordering::SeqCst), 1);
    assert!(svc.max_highest.load(Ordering::SeqCst) <= 1);
    assert_eq!(svc.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn misordered_sequence_is_an_error_and_leaves_the_slot() {
    let (s, svc) = start(fake(SLOTS - 1)).await;
    let g = s.acquire().await;
    let r = s
        .conn()
        .compound(1, vec![g.sequence_with(g.lease.seqid + 1, false)])
        .await
        .unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQ_MISORDERED);
    assert_eq!(g.finish(&r), Outcome::NotProcessed);
    s.renew().await.unwrap();
    assert_eq!(svc.misordered.load(Ordering::SeqCst), 1);
    let r = s
        .conn()
        .compound(1, vec![NfsArgop4::OP_PUTROOTFH])
        .await
        .unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
}
