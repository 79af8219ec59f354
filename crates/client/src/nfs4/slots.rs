//! The client's half of an NFSv4.1 session slot table (RFC 8881 §2.10.6.1),
//! with no I/O so every state is reachable from a unit test.
//!
//! Each slot carries the sequence ID of the last request the server
//! processed on it. The server starts every slot at 0, so the first request
//! on a slot carries 1. A request's SEQUENCE either succeeds (the server has
//! moved the slot on: so do we) or fails (RFC 8881 §18.46.3: the slot is left
//! as it was, so the same sequence ID is sent again).

/// One slot handed out for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotLease {
    pub slot: u32,
    /// The sequence ID to send in SEQUENCE.
    pub seqid: u32,
    /// `sa_highest_slotid`: the highest slot with a request outstanding,
    /// this one included.
    pub highest_slotid: u32,
}

/// What became of a request sent on a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// SEQUENCE succeeded: the server moved the slot to this request.
    Processed,
    /// SEQUENCE failed, or the request was never sent: the slot is unchanged.
    NotProcessed,
}

#[derive(Clone, Debug)]
pub struct SlotTable {
    /// Last sequence ID the server processed on each slot.
    seqids: Vec<u32>,
    busy: Vec<bool>,
    /// Highest slot new requests may use: the session's slot count less one,
    /// lowered by the server's `sr_highest_slotid` (a hard limit) and
    /// `sr_target_highest_slotid` (what it would like us to use).
    limit: u32,
}

impl SlotTable {
    /// A table of `n` slots (the `ca_maxrequests` the server granted).
    pub fn new(n: u32) -> Self {
        let n = n.max(1) as usize;
        SlotTable {
            seqids: vec![0; n],
            busy: vec![false; n],
            limit: n as u32 - 1,
        }
    }

    /// Number of slots in the table.
    pub fn size(&self) -> u32 {
        self.seqids.len() as u32
    }

    /// Highest slot new requests may use.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn in_flight(&self) -> usize {
        self.busy.iter().filter(|b| **b).count()
    }

    /// Last sequence ID the server processed on `slot`.
    pub fn seqid(&self, slot: u32) -> Option<u32> {
        self.seqids.get(slot as usize).copied()
    }

    /// The lowest free slot within the limit, or None if all are busy.
    /// Lowest first keeps the slots in use dense, so that a server shrinking
    /// the table loses as few as possible.
    pub fn try_acquire(&mut self) -> Option<SlotLease> {
        let top = (self.limit as usize).min(self.seqids.len() - 1);
        let slot = (0..=top).find(|&i| !self.busy[i])?;
        self.busy[slot] = true;
        Some(SlotLease {
            slot: slot as u32,
            seqid: self.seqids[slot].wrapping_add(1),
            highest_slotid: self.highest_busy().unwrap_or(0),
        })
    }

    /// Takes a given slot regardless of the limit (for tests that send
    /// requests on slots the server did not grant). None if it is busy or
    /// outside the table.
    pub fn acquire_slot(&mut self, slot: u32) -> Option<SlotLease> {
        let i = slot as usize;
        if i >= self.busy.len() || self.busy[i] {
            return None;
        }
        self.busy[i] = true;
        Some(SlotLease {
            slot,
            seqid: self.seqids[i].wrapping_add(1),
            highest_slotid: self.highest_busy().unwrap_or(0),
        })
    }

    /// Frees a slot. `seqid` is the one that was sent: a caller that crafted
    /// a different one (a replay, a misordered request) records what the
    /// server now holds only if it processed it.
    pub fn release(&mut self, slot: u32, seqid: u32, outcome: Outcome) {
        let i = slot as usize;
        if i >= self.busy.len() {
            return;
        }
        self.busy[i] = false;
        if outcome == Outcome::Processed {
            self.seqids[i] = seqid;
        }
    }

    /// Applies the server's `sr_highest_slotid` and `sr_target_highest_slotid`
    /// from a successful SEQUENCE. Slot 0 always stays usable.
    pub fn server_limits(&mut self, highest_slotid: u32, target_highest_slotid: u32) {
        let max = self.size() - 1;
        self.limit = highest_slotid.min(target_highest_slotid).min(max);
    }

    fn highest_busy(&self) -> Option<u32> {
        self.busy.iter().rposition(|b| *b).map(|i| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_request_on_a_slot_carries_one() {
        let mut t = SlotTable::new(4);
        let a = t.try_acquire().unwrap();
        assert_eq!((a.slot, a.seqid, a.highest_slotid), (0, 1, 0));
        let b = t.try_acquire().unwrap();
        assert_eq!((b.slot, b.seqid, b.highest_slotid), (1, 1, 1));
    }

    #[test]
    fn lowest_free_slot_first_and_all_busy_is_none() {
        let mut t = SlotTable::new(3);
        let l: Vec<_> = (0..3).map(|_| t.try_acquire().unwrap()).collect();
        assert_eq!(l.iter().map(|l| l.slot).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(t.try_acquire(), None);
        assert_eq!(t.in_flight(), 3);
        t.release(1, l[1].seqid, Outcome::Processed);
        let again = t.try_acquire().unwrap();
        assert_eq!((again.slot, again.seqid), (1, 2));
        // Slot 2 is still out, so it is the highest outstanding.
        assert_eq!(again.highest_slotid, 2);
    }

    #[test]
    fn seqid_advances_only_when_processed() {
        let mut t = SlotTable::new(1);
        let a = t.try_acquire().unwrap();
        t.release(a.slot, a.seqid, Outcome::NotProcessed);
        let b = t.try_acquire().unwrap();
        assert_eq!(b.seqid, 1, "a failed SEQUENCE leaves the slot as it was");
        t.release(b.slot, b.seqid, Outcome::Processed);
        let c = t.try_acquire().unwrap();
        assert_eq!(c.seqid, 2);
        t.release(c.slot, c.seqid, Outcome::Processed);
        assert_eq!(t.seqid(0), Some(2));
    }

    #[test]
    fn seqid_wraps() {
        let mut t = SlotTable::new(1);
        t.release(0, u32::MAX, Outcome::Processed);
        let a = t.try_acquire().unwrap();
        assert_eq!(a.seqid, 0);
    }

    #[test]
    fn server_highest_slot_is_respected() {
        let mut t = SlotTable::new(8);
        t.server_limits(1, 7);
        let a = t.try_acquire().unwrap();
        let b = t.try_acquire().unwrap();
        assert_eq!((a.slot, b.slot), (0, 1));
        assert_eq!(t.try_acquire(), None, "sr_highest_slotid 1 allows two");
        t.release(b.slot, b.seqid, Outcome::Processed);
        t.server_limits(7, 0);
        assert_eq!(
            t.try_acquire(),
            None,
            "target 0: only slot 0, which is busy"
        );
        t.release(a.slot, a.seqid, Outcome::Processed);
        assert_eq!(t.try_acquire().unwrap().slot, 0);
    }

    #[test]
    fn server_cannot_raise_the_limit_beyond_the_table() {
        let mut t = SlotTable::new(2);
        t.server_limits(100, 100);
        assert_eq!(t.limit(), 1);
        t.try_acquire().unwrap();
        t.try_acquire().unwrap();
        assert_eq!(t.try_acquire(), None);
    }

    #[test]
    fn slot_above_a_lowered_limit_finishes_and_is_not_reused() {
        let mut t = SlotTable::new(4);
        let l: Vec<_> = (0..4).map(|_| t.try_acquire().unwrap()).collect();
        t.server_limits(1, 1);
        t.release(3, l[3].seqid, Outcome::Processed);
        assert_eq!(t.try_acquire(), None);
        assert_eq!(t.seqid(3), Some(1), "its reply still counts");
        t.release(0, l[0].seqid, Outcome::Processed);
        assert_eq!(t.try_acquire().unwrap().slot, 0);
    }

    #[test]
    fn explicit_slot_ignores_the_limit_but_not_busy_or_bounds() {
        let mut t = SlotTable::new(4);
        t.server_limits(0, 0);
        let l = t.acquire_slot(3).unwrap();
        assert_eq!((l.slot, l.seqid, l.highest_slotid), (3, 1, 3));
        assert_eq!(t.acquire_slot(3), None);
        assert_eq!(t.acquire_slot(4), None);
    }

    #[test]
    fn crafted_seqid_is_recorded_only_if_processed() {
        let mut t = SlotTable::new(1);
        let a = t.try_acquire().unwrap();
        t.release(a.slot, 5, Outcome::NotProcessed);
        assert_eq!(t.seqid(0), Some(0));
        let b = t.try_acquire().unwrap();
        t.release(b.slot, 1, Outcome::Processed);
        assert_eq!(t.seqid(0), Some(1));
    }
}
