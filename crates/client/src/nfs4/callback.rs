//! The NFSv4.1 callback service (RFC 8881 §20): the calls a server makes
//! on the back channel of our connection.
//!
//! - CB_NULL, from the start (servers probe a new back channel with it).
//! - CB_COMPOUND once a session is attached: CB_SEQUENCE first, on a
//!   back-channel slot table sized by the attributes the server granted,
//!   each slot caching its last reply so that a retransmission is answered
//!   from the cache and not run again; then CB_RECALL, CB_GETATTR,
//!   CB_RECALL_ANY and CB_RECALL_SLOT. Other callback operations are
//!   NFS4ERR_NOTSUPP; an unknown operation number is CB_ILLEGAL.
//!
//! A recalled delegation is taken out of the table at once (the next stat
//! asks the server) and returned by a task of its own: the CB_RECALL is
//! answered NFS4_OK without waiting, as Linux's client does.

use super::deleg::{DelegTable, Delegation, Recall};
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;
use rpc::client::{CallHandler, CallResult, HandlerFuture, Refusal};
use std::sync::{Arc, Mutex, Weak};
use xdr::{Decoder, Pack, Unpack};

const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;
const NFS_CB_VERSION: u32 = 1;

/// One back-channel slot (RFC 8881 §2.10.6.1, the replier's side).
#[derive(Clone, Debug, Default)]
struct CbSlot {
    /// Last sequence ID processed on the slot (0: none yet).
    seqid: u32,
    busy: bool,
    /// The reply to `seqid`, for a retransmission of it.
    reply: Option<Bytes>,
}

/// What a session with a back channel gave the service.
struct Attached {
    prog: u32,
    minor: u32,
    sessionid: Sessionid4,
    attrs: ChannelAttrs4,
    slots: Mutex<Vec<CbSlot>>,
    delegs: Arc<DelegTable>,
    /// Weak: the fore channel owns the connection that owns this service.
    fore: Option<Weak<dyn ForeChannel>>,
}

/// What the callback service needs of the session's fore channel: a trait,
/// so that this module does not depend on the session (which depends on
/// the connection, which serves this module's callbacks).
pub(crate) trait ForeChannel: Send + Sync {
    /// CB_RECALL_SLOT: use no slot above `target`.
    fn lower_slots(&self, target: u32);
    /// Gives a recalled delegation back (DELEGRETURN), errors left to the
    /// server to resolve by revoking it.
    fn give_back<'a>(
        &'a self,
        d: &'a Delegation,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;
}

/// The callback program on one connection.
#[derive(Default)]
pub struct CbService {
    attached: Mutex<Option<Arc<Attached>>>,
}

impl CbService {
    /// Serves CB_COMPOUNDs of `sessionid` with program `prog` from now on.
    pub(crate) fn attach(
        &self,
        prog: u32,
        minor: u32,
        sessionid: Sessionid4,
        attrs: ChannelAttrs4,
        delegs: Arc<DelegTable>,
        fore: Weak<dyn ForeChannel>,
    ) {
        let n = attrs.ca_maxrequests.clamp(1, 1024) as usize;
        *self.attached.lock().unwrap() = Some(Arc::new(Attached {
            prog,
            minor,
            sessionid,
            attrs,
            slots: Mutex::new(vec![CbSlot::default(); n]),
            delegs,
            fore: Some(fore),
        }));
    }
}

impl CallHandler for CbService {
    fn call(&self, mut call: rpc::msg::Call) -> HandlerFuture {
        let a = self.attached.lock().unwrap().clone();
        Box::pin(async move {
            // Before a session is attached the program number is not known
            // yet; a probe is answered whatever it names.
            if let Some(a) = &a {
                if call.prog != a.prog {
                    return Err(Refusal::ProgUnavail);
                }
            }
            if call.vers != NFS_CB_VERSION {
                return Err(Refusal::ProgMismatch {
                    low: NFS_CB_VERSION,
                    high: NFS_CB_VERSION,
                });
            }
            match (call.proc_, a) {
                (CB_NULL, _) => Ok(Bytes::new()),
                (CB_COMPOUND, Some(a)) => a.compound(&mut call.args),
                (CB_COMPOUND, None) => Err(Refusal::ProgUnavail),
                _ => Err(Refusal::ProcUnavail),
            }
        })
    }
}

/// Operation numbers the callback program defines.
fn known(op: u32) -> bool {
    (NfsCbOpnum4::OP_CB_GETATTR as u32..=NfsCbOpnum4::OP_CB_OFFLOAD as u32).contains(&op)
}

/// A result that is just a status (every callback result starts with it,
/// and is no more than it when the status is an error).
fn put_status(out: &mut BytesMut, op: u32, status: Nfsstat4) {
    out.put_u32(op);
    out.put_u32(status as u32);
}

impl Attached {
    fn compound(&self, d: &mut Decoder) -> CallResult {
        let size = d.remaining();
        let head =
            (|| -> xdr::Result<_> { Ok((Bytes::unpack(d)?, d.u32()?, d.u32()?, d.u32()?)) })();
        let Ok((tag, minor, _ident, nops)) = head else {
            return Err(Refusal::GarbageArgs);
        };
        let mut results = BytesMut::new();
        let mut done = 0u32;
        let mut status = Nfsstat4::NFS4_OK;
        // The slot taken by CB_SEQUENCE, released with the reply cached.
        let mut slot: Option<(usize, u32)> = None;
        if minor != self.minor {
            status = Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH;
        }
        let mut i = 0;
        while status == Nfsstat4::NFS4_OK && i < nops {
            i += 1;
            let Ok(op) = d.clone().u32() else {
                return self.abandon(slot, Refusal::GarbageArgs);
            };
            let (rop, st) = if !known(op) {
                (
                    NfsCbOpnum4::OP_CB_ILLEGAL as u32,
                    Nfsstat4::NFS4ERR_OP_ILLEGAL,
                )
            } else {
                match NfsCbArgop4::unpack(d) {
                    Err(_) => (op, Nfsstat4::NFS4ERR_BADXDR),
                    Ok(NfsCbArgop4::OP_CB_SEQUENCE(_)) if done > 0 => {
                        (op, Nfsstat4::NFS4ERR_SEQUENCE_POS)
                    }
                    Ok(NfsCbArgop4::OP_CB_SEQUENCE(s)) => {
                        match self.sequence(&s, nops, size) {
                            Ok(Ok(ok)) => {
                                slot = Some((s.csa_slotid as usize, s.csa_sequenceid));
                                let r = NfsCbResop4::OP_CB_SEQUENCE(CbSequence4res::NFS4_OK(ok));
                                r.pack(&mut results);
                                done += 1;
                                continue;
                            }
                            // A retransmission: the reply as it was.
                            Ok(Err(cached)) => return Ok(cached),
                            Err(st) => (op, st),
                        }
                    }
                    Ok(_) if done == 0 => (op, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION),
                    Ok(a) => match self.op(a) {
                        Ok(r) => {
                            r.pack(&mut results);
                            done += 1;
                            continue;
                        }
                        Err(st) => (op, st),
                    },
                }
            };
            put_status(&mut results, rop, st);
            done += 1;
            status = st;
        }
        let mut out = BytesMut::with_capacity(16 + tag.len() + results.len());
        out.put_u32(status as u32);
        tag.pack(&mut out);
        out.put_u32(done);
        out.put_slice(&results);
        let reply = out.freeze();
        if let Some((n, seqid)) = slot {
            let mut slots = self.slots.lock().unwrap();
            let s = &mut slots[n];
            s.busy = false;
            s.seqid = seqid;
            s.reply = (reply.len() <= self.attrs.ca_maxresponsesize_cached as usize)
                .then(|| reply.clone());
        }
        Ok(reply)
    }

    /// Frees a slot taken for a request that gets no reply after all.
    fn abandon(&self, slot: Option<(usize, u32)>, r: Refusal) -> CallResult {
        if let Some((n, _)) = slot {
            self.slots.lock().unwrap()[n].busy = false;
        }
        Err(r)
    }

    /// CB_SEQUENCE: Ok(Ok) to go on with the slot taken, Ok(Err(reply))
    /// for a retransmission answered from the cache, Err for a refusal.
    fn sequence(
        &self,
        s: &CbSequence4args,
        nops: u32,
        size: usize,
    ) -> Result<Result<CbSequence4resok, Bytes>, Nfsstat4> {
        if s.csa_sessionid != self.sessionid {
            return Err(Nfsstat4::NFS4ERR_BADSESSION);
        }
        if nops > self.attrs.ca_maxoperations {
            return Err(Nfsstat4::NFS4ERR_TOO_MANY_OPS);
        }
        if size > self.attrs.ca_maxrequestsize as usize {
            return Err(Nfsstat4::NFS4ERR_REQ_TOO_BIG);
        }
        let mut slots = self.slots.lock().unwrap();
        let highest = slots.len() as u32 - 1;
        let Some(slot) = slots.get_mut(s.csa_slotid as usize) else {
            return Err(Nfsstat4::NFS4ERR_BADSLOT);
        };
        let next = slot.seqid.wrapping_add(1);
        if slot.busy {
            // A retransmission of the request being answered waits for it.
            return Err(if s.csa_sequenceid == next {
                Nfsstat4::NFS4ERR_DELAY
            } else {
                Nfsstat4::NFS4ERR_SEQ_MISORDERED
            });
        }
        if s.csa_sequenceid == slot.seqid {
            return match &slot.reply {
                Some(r) if slot.seqid != 0 => Ok(Err(r.clone())),
                _ => Err(Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP),
            };
        }
        if s.csa_sequenceid != next {
            return Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        }
        slot.busy = true;
        slot.reply = None;
        Ok(Ok(CbSequence4resok {
            csr_sessionid: self.sessionid,
            csr_sequenceid: s.csa_sequenceid,
            csr_slotid: s.csa_slotid,
            csr_highest_slotid: highest,
            csr_target_highest_slotid: highest,
        }))
    }

    /// One operation after CB_SEQUENCE.
    fn op(&self, a: NfsCbArgop4) -> Result<NfsCbResop4, Nfsstat4> {
        use NfsCbArgop4 as A;
        match a {
            A::OP_CB_RECALL(r) => {
                match self.delegs.recall(&r.stateid, &r.fh) {
                    Recall::Return(d) => self.give_back(vec![*d]),
                    Recall::Ignored | Recall::Early => {}
                    Recall::Unknown => return Err(Nfsstat4::NFS4ERR_BAD_STATEID),
                }
                Ok(NfsCbResop4::OP_CB_RECALL(CbRecall4res {
                    status: Nfsstat4::NFS4_OK,
                }))
            }
            A::OP_CB_GETATTR(g) => {
                // Only a write delegation makes us the authority; without
                // one the server asked the wrong client (as Linux answers).
                let d = self.delegs.get(&g.fh).ok_or(Nfsstat4::NFS4ERR_BADHANDLE)?;
                if d.kind != super::deleg::DelegKind::Write {
                    return Err(Nfsstat4::NFS4ERR_BADHANDLE);
                }
                let (size, change) = d.size_and_change().ok_or(Nfsstat4::NFS4ERR_DELAY)?;
                Ok(NfsCbResop4::OP_CB_GETATTR(CbGetattr4res::NFS4_OK(
                    CbGetattr4resok {
                        obj_attributes: size_change_attrs(&g.attr_request, size, change),
                    },
                )))
            }
            A::OP_CB_RECALL_ANY(r) => {
                let has = |bit: u32| {
                    r.craa_type_mask
                        .get((bit / 32) as usize)
                        .is_some_and(|w| w & (1 << (bit % 32)) != 0)
                };
                let back = self.delegs.recall_any(
                    r.craa_objects_to_keep,
                    has(RCA4_TYPE_MASK_RDATA_DLG),
                    has(RCA4_TYPE_MASK_WDATA_DLG),
                );
                self.give_back(back);
                Ok(NfsCbResop4::OP_CB_RECALL_ANY(CbRecallAny4res {
                    crar_status: Nfsstat4::NFS4_OK,
                }))
            }
            A::OP_CB_RECALL_SLOT(r) => {
                if let Some(f) = self.fore.as_ref().and_then(Weak::upgrade) {
                    f.lower_slots(r.rsa_target_highest_slotid);
                }
                Ok(NfsCbResop4::OP_CB_RECALL_SLOT(CbRecallSlot4res {
                    rsr_status: Nfsstat4::NFS4_OK,
                }))
            }
            A::OP_CB_ILLEGAL => Err(Nfsstat4::NFS4ERR_OP_ILLEGAL),
            // Layouts, notifications, pushed delegations, lock
            // notifications, wants and offloaded copies: never asked for.
            _ => Err(Nfsstat4::NFS4ERR_NOTSUPP),
        }
    }

    /// Returns delegations in the background (the callback is answered first).
    fn give_back(&self, ds: Vec<Delegation>) {
        // No fore channel: the session is gone, and its state with it.
        let Some(f) = self
            .fore
            .as_ref()
            .and_then(Weak::upgrade)
            .filter(|_| !ds.is_empty())
        else {
            return;
        };
        tokio::spawn(async move {
            for d in ds {
                f.give_back(&d).await;
            }
        });
    }
}

/// CB_GETATTR's fattr4: of the attributes asked for, change and size.
fn size_change_attrs(request: &Bitmap4, size: u64, change: u64) -> Fattr4 {
    let asked = |bit: u32| request.first().is_some_and(|w| w & (1 << bit) != 0);
    let mut mask = 0u32;
    let mut vals = BytesMut::new();
    // Values go in bit order: change (3) before size (4).
    if asked(FATTR4_CHANGE) {
        mask |= 1 << FATTR4_CHANGE;
        vals.put_u64(change);
    }
    if asked(FATTR4_SIZE) {
        mask |= 1 << FATTR4_SIZE;
        vals.put_u64(size);
    }
    Fattr4 {
        attrmask: vec![mask],
        attr_vals: vals.freeze(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::deleg::DelegKind;

    const SID: Sessionid4 = [7; 16];

    fn attached(slots: u32) -> Attached {
        Attached {
            prog: 0x4000_0000,
            minor: 1,
            sessionid: SID,
            attrs: ChannelAttrs4 {
                ca_headerpadsize: 0,
                ca_maxrequestsize: 4096,
                ca_maxresponsesize: 4096,
                ca_maxresponsesize_cached: 4096,
                ca_maxoperations: 4,
                ca_maxrequests: slots,
                ca_rdma_ird: vec![],
            },
            slots: Mutex::new(vec![CbSlot::default(); slots as usize]),
            delegs: Arc::new(DelegTable::default()),
            fore: None,
        }
    }

    fn seq(slot: u32, seqid: u32) -> NfsCbArgop4 {
        NfsCbArgop4::OP_CB_SEQUENCE(CbSequence4args {
            csa_sessionid: SID,
            csa_sequenceid: seqid,
            csa_slotid: slot,
            csa_highest_slotid: slot,
            csa_cachethis: false,
            csa_referring_call_lists: vec![],
        })
    }

    fn args(ops: Vec<NfsCbArgop4>) -> Bytes {
        xdr::to_bytes(&CbCompound4args {
            tag: Bytes::from_static(b"t"),
            minorversion: 1,
            callback_ident: 0,
            argarray: ops,
        })
    }

    fn run(a: &Attached, b: Bytes) -> CbCompound4res {
        let r = a.compound(&mut Decoder::new(b)).expect("a reply");
        xdr::from_bytes(r).expect("decodes")
    }

    fn statuses(r: &CbCompound4res) -> Vec<Nfsstat4> {
        r.resarray
            .iter()
            .map(|x| {
                let mut b = xdr::to_bytes(x);
                let _ = bytes::Buf::get_u32(&mut b);
                Nfsstat4::from_i32(bytes::Buf::get_i32(&mut b)).unwrap()
            })
            .collect()
    }

    fn recall(n: u8) -> NfsCbArgop4 {
        NfsCbArgop4::OP_CB_RECALL(CbRecall4args {
            stateid: Stateid4 {
                seqid: 1,
                other: [n; 12],
            },
            truncate: false,
            fh: NfsFh4(Bytes::from(vec![n; 8])),
        })
    }

    #[test]
    fn sequence_must_come_first_and_only_first() {
        let a = attached(2);
        let r = run(&a, args(vec![recall(1)]));
        assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION);
        let r = run(&a, args(vec![seq(0, 1), seq(0, 2)]));
        assert_eq!(
            statuses(&r),
            [Nfsstat4::NFS4_OK, Nfsstat4::NFS4ERR_SEQUENCE_POS]
        );
        assert_eq!(r.tag, Bytes::from_static(b"t"));
    }

    #[test]
    fn slots_follow_the_negotiated_table_and_replays_come_from_the_cache() {
        let a = attached(2);
        let r = run(&a, args(vec![seq(2, 1)]));
        assert_eq!(r.status, Nfsstat4::NFS4ERR_BADSLOT, "two slots: 0 and 1");
        a.delegs.granted(
            &NfsFh4(Bytes::from(vec![1; 8])),
            Stateid4 {
                seqid: 1,
                other: [1; 12],
            },
            DelegKind::Read,
            false,
        );
        let req = args(vec![seq(1, 1), recall(1)]);
        let first = run(&a, req.clone());
        assert_eq!(statuses(&first), [Nfsstat4::NFS4_OK, Nfsstat4::NFS4_OK]);
        assert_eq!(a.delegs.recalls_received(), 1);
        let again = run(&a, req);
        assert_eq!(again, first, "the cached reply");
        assert_eq!(a.delegs.recalls_received(), 1, "not run again");
        let r = run(&a, args(vec![seq(1, 3)]));
        assert_eq!(r.status, Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        let r = run(&a, args(vec![seq(1, 2), recall(1)]));
        assert_eq!(
            statuses(&r),
            [Nfsstat4::NFS4_OK, Nfsstat4::NFS4ERR_BAD_STATEID],
            "no longer held"
        );
        let r = run(&a, args(vec![seq(0, 0)]));
        assert_eq!(r.status, Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP);
    }

    #[test]
    fn wrong_session_minor_version_and_too_many_ops() {
        let a = attached(1);
        let mut s = seq(0, 1);
        if let NfsCbArgop4::OP_CB_SEQUENCE(x) = &mut s {
            x.csa_sessionid = [8; 16];
        }
        assert_eq!(run(&a, args(vec![s])).status, Nfsstat4::NFS4ERR_BADSESSION);
        let mut b = BytesMut::from(&args(vec![seq(0, 1)])[..]);
        b[8..12].copy_from_slice(&2u32.to_be_bytes()); // minorversion, after the 1-byte tag
        let r = run(&a, b.freeze());
        assert_eq!(r.status, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
        assert!(r.resarray.is_empty());
        let r = run(
            &a,
            args(vec![seq(0, 1), recall(1), recall(2), recall(3), recall(4)]),
        );
        assert_eq!(r.status, Nfsstat4::NFS4ERR_TOO_MANY_OPS);
    }

    #[test]
    fn unsupported_and_illegal_operations() {
        let a = attached(1);
        let notify = NfsCbArgop4::OP_CB_NOTIFY_LOCK(CbNotifyLock4args {
            cnla_fh: NfsFh4(Bytes::new()),
            cnla_lock_owner: StateOwner4 {
                clientid: 1,
                owner: Bytes::new(),
            },
        });
        let r = run(&a, args(vec![seq(0, 1), notify]));
        assert_eq!(statuses(&r), [Nfsstat4::NFS4_OK, Nfsstat4::NFS4ERR_NOTSUPP]);
        // Operation 99 does not exist: CB_ILLEGAL answers it.
        let mut b = BytesMut::from(&args(vec![seq(0, 2)])[..]);
        b[16..20].copy_from_slice(&2u32.to_be_bytes()); // the op count
        b.put_u32(99);
        let r = run(&a, b.freeze());
        assert_eq!(r.status, Nfsstat4::NFS4ERR_OP_ILLEGAL);
        assert!(matches!(
            r.resarray.last(),
            Some(NfsCbResop4::OP_CB_ILLEGAL(_))
        ));
    }

    #[test]
    fn getattr_answers_a_write_delegation_from_local_state() {
        let a = attached(1);
        let fh = NfsFh4(Bytes::from(vec![5; 8]));
        let sid = Stateid4 {
            seqid: 1,
            other: [5; 12],
        };
        let ga = |n| {
            vec![
                seq(0, n),
                NfsCbArgop4::OP_CB_GETATTR(CbGetattr4args {
                    fh: fh.clone(),
                    attr_request: vec![(1 << FATTR4_SIZE) | (1 << FATTR4_CHANGE)],
                }),
            ]
        };
        let r = run(&a, args(ga(1)));
        assert_eq!(r.status, Nfsstat4::NFS4ERR_BADHANDLE, "no delegation");
        a.delegs.granted(&fh, sid.clone(), DelegKind::Write, false);
        a.delegs.store_attrs(
            &fh,
            &sid,
            crate::nfs4::Attrs {
                size: Some(3),
                change: Some(40),
                ..Default::default()
            },
        );
        a.delegs.wrote(&fh, 0, 10, false);
        let r = run(&a, args(ga(2)));
        let Some(NfsCbResop4::OP_CB_GETATTR(CbGetattr4res::NFS4_OK(ok))) = r.resarray.last() else {
            panic!("{r:?}")
        };
        let got = crate::nfs4::attr::decode(&ok.obj_attributes).unwrap();
        assert_eq!((got.size, got.change), (Some(10), Some(41)));
    }
}
