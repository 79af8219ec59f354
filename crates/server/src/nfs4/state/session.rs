//! A session's slot table: exactly-once semantics for NFSv4.1 (RFC 8881
//! §2.10.6). Pure: no I/O, no clock.

use bytes::Bytes;
use proto::nfs4::{ChannelAttrs4, Nfsstat4, Sessionid4};
use std::sync::{Arc, Mutex};

/// One slot: the last sequence id seen on it and, if the client asked for
/// it to be cached, that request's whole COMPOUND reply.
#[derive(Default)]
struct Slot {
    seqid: u32,
    busy: bool,
    /// Fingerprint of the request the cached reply answers, to tell a true
    /// retry from a new request that reused a sequence id (false retry).
    args_sum: u64,
    reply: Option<Bytes>,
}

pub struct Session {
    pub id: Sessionid4,
    pub client: u64,
    pub fore: ChannelAttrs4,
    pub back: ChannelAttrs4,
    pub flags: u32,
    slots: Mutex<Vec<Slot>>,
}

/// What SEQUENCE decided about a request.
pub enum SlotUse {
    /// A new request: run it, then [`SlotGuard::finish`].
    New(SlotGuard),
    /// A retransmission of a request whose reply was cached: send this.
    Replay(Bytes),
}

impl Session {
    pub fn new(
        id: Sessionid4,
        client: u64,
        fore: ChannelAttrs4,
        back: ChannelAttrs4,
        flags: u32,
    ) -> Session {
        let n = fore.ca_maxrequests.max(1) as usize;
        Session {
            id,
            client,
            fore,
            back,
            flags,
            slots: Mutex::new((0..n).map(|_| Slot::default()).collect()),
        }
    }

    pub fn highest_slot(&self) -> u32 {
        self.fore.ca_maxrequests.saturating_sub(1)
    }

    /// RFC 8881 §2.10.6.1: a sequence id one above the slot's is a new
    /// request; equal is a retry; anything else is misordered.
    pub fn begin(
        self: &Arc<Self>,
        slot: u32,
        seqid: u32,
        args_sum: u64,
    ) -> Result<SlotUse, Nfsstat4> {
        let mut slots = self.slots.lock().unwrap();
        let s = slots
            .get_mut(slot as usize)
            .ok_or(Nfsstat4::NFS4ERR_BADSLOT)?;
        if seqid == s.seqid.wrapping_add(1) {
            if s.busy {
                // The previous request on this slot is still running: the
                // client broke the one-request-per-slot rule.
                return Err(Nfsstat4::NFS4ERR_DELAY);
            }
            s.seqid = seqid;
            s.busy = true;
            s.args_sum = args_sum;
            s.reply = None;
            Ok(SlotUse::New(SlotGuard {
                session: self.clone(),
                slot,
                done: false,
            }))
        } else if seqid == s.seqid {
            if s.busy {
                return Err(Nfsstat4::NFS4ERR_DELAY);
            }
            if s.args_sum != args_sum {
                return Err(Nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
            }
            match &s.reply {
                Some(r) => Ok(SlotUse::Replay(r.clone())),
                None => Err(Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP),
            }
        } else {
            Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED)
        }
    }

    /// Slots whose request is running (DESTROY_SESSION waits for none of them).
    pub fn busy_slots(&self) -> usize {
        self.slots.lock().unwrap().iter().filter(|s| s.busy).count()
    }

    /// Memory held by cached replies, for the metrics.
    pub fn cached_bytes(&self) -> usize {
        self.slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.reply.as_ref().map_or(0, |r| r.len()))
            .sum()
    }
}

/// A slot held by a running request. Dropping it without
/// [`SlotGuard::finish`] (an error path or a panic) frees the slot with no
/// cached reply, so a retry gets NFS4ERR_RETRY_UNCACHED_REP instead of
/// waiting forever.
pub struct SlotGuard {
    session: Arc<Session>,
    slot: u32,
    done: bool,
}

impl SlotGuard {
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Frees the slot, keeping `reply` for retransmissions.
    pub fn finish(mut self, reply: Option<Bytes>) {
        self.release(reply);
        self.done = true;
    }

    fn release(&self, reply: Option<Bytes>) {
        let mut slots = self.session.slots.lock().unwrap();
        if let Some(s) = slots.get_mut(self.slot as usize) {
            s.busy = false;
            s.reply = reply;
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if !self.done {
            self.release(None);
        }
    }
}

/// The channel a client asks for in CREATE_SESSION: messages of up to
/// `max` bytes, `ops` operations a COMPOUND, `slots` slots and replies of
/// up to `cached` bytes kept per slot; no header padding, no RDMA. For
/// tests, the simulator, the fuzzer and the benches; not used by the
/// server itself.
#[doc(hidden)]
pub fn channel(max: u32, ops: u32, slots: u32, cached: u32) -> ChannelAttrs4 {
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: max,
        ca_maxresponsesize: max,
        ca_maxresponsesize_cached: cached,
        ca_maxoperations: ops,
        ca_maxrequests: slots,
        ca_rdma_ird: vec![],
    }
}

/// A 1 MiB [`channel`] of `slots` slots, 16 operations and a 4 KiB reply
/// cache: the one the state core's tests, the simulator and the benches
/// open their sessions with.
#[doc(hidden)]
pub fn plain_channel(slots: u32) -> ChannelAttrs4 {
    channel(1 << 20, 16, slots, 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Arc<Session> {
        Arc::new(Session::new(
            [1; 16],
            7,
            plain_channel(4),
            plain_channel(1),
            0,
        ))
    }

    fn new(s: &Arc<Session>, slot: u32, seq: u32, sum: u64) -> SlotGuard {
        match s.begin(slot, seq, sum) {
            Ok(SlotUse::New(g)) => g,
            Ok(SlotUse::Replay(_)) => panic!("replay"),
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn new_request_then_cached_replay() {
        let s = session();
        let g = new(&s, 0, 1, 42);
        assert!(matches!(s.begin(0, 1, 42), Err(Nfsstat4::NFS4ERR_DELAY)));
        g.finish(Some(Bytes::from_static(b"reply")));
        match s.begin(0, 1, 42) {
            Ok(SlotUse::Replay(r)) => assert_eq!(&r[..], b"reply"),
            _ => panic!("expected the cached reply"),
        }
        assert!(matches!(
            s.begin(0, 1, 43),
            Err(Nfsstat4::NFS4ERR_SEQ_FALSE_RETRY)
        ));
        new(&s, 0, 2, 1).finish(None);
    }

    #[test]
    fn uncached_misordered_and_bad_slot() {
        let s = session();
        new(&s, 1, 1, 5).finish(None);
        assert!(matches!(
            s.begin(1, 1, 5),
            Err(Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP)
        ));
        assert!(matches!(
            s.begin(1, 3, 5),
            Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED)
        ));
        assert!(matches!(
            s.begin(1, 0, 5),
            Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED)
        ));
        assert!(matches!(s.begin(4, 1, 5), Err(Nfsstat4::NFS4ERR_BADSLOT)));
    }

    #[test]
    fn dropped_guard_frees_the_slot() {
        let s = session();
        drop(new(&s, 2, 1, 9));
        assert_eq!(s.busy_slots(), 0);
        new(&s, 2, 2, 9).finish(None);
    }

    #[test]
    fn sequence_ids_wrap() {
        let s = session();
        {
            let mut slots = s.slots.lock().unwrap();
            slots[0].seqid = u32::MAX;
        }
        new(&s, 0, 0, 1).finish(None);
    }
}
