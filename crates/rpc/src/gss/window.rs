//! The RPCSEC_GSS sequence window (RFC 2203 section 5.3.3.1), the way
//! docs/design.md rule 4 wants it: whether a call is inside the window is judged
//! against a snapshot of the window taken when the call was read off the
//! connection, and replays are remembered over a range much larger than the
//! advertised window, so a call that waited behind others for a worker or
//! for crypto is never dropped for the server's own slowness. Pure code.

/// Why a verified call is not executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Older than the advertised window was when the call arrived, or
    /// older than the replay range now (so a replay could not be told).
    SeqWindow,
    /// The sequence number was already accepted once.
    Replay,
}

/// Accepted sequence numbers: the highest one and a bitmap of the
/// `range` numbers up to it.
#[derive(Debug)]
pub struct SeqWindow {
    /// Highest accepted sequence number, if any.
    max: Option<u32>,
    /// Bit `s % range` is set once `s` has been accepted (for s in (max - range, max]).
    bits: Vec<u64>,
    range: u32,
}

impl SeqWindow {
    /// `range` (rounded up to a power of two, at least 64) is how far back
    /// replays are tracked; make it several times the advertised window.
    pub fn new(range: u32) -> Self {
        let range = range.max(64).next_power_of_two();
        SeqWindow {
            max: None,
            bits: vec![0; (range / 64) as usize],
            range,
        }
    }

    /// The snapshot a call carries from the moment it was read.
    pub fn snapshot(&self) -> Option<u32> {
        self.max
    }

    fn bit(&self, s: u32) -> (usize, u64) {
        let i = s & (self.range - 1);
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Accepts `seq` for a call whose header checksum has been verified,
    /// given the window's snapshot `snap` from when the call was read and
    /// the advertised `window`. Only an accepted call changes the state.
    pub fn accept(&mut self, seq: u32, snap: Option<u32>, window: u32) -> Result<(), DropReason> {
        if let Some(s) = snap {
            if seq as u64 + window as u64 <= s as u64 {
                return Err(DropReason::SeqWindow);
            }
        }
        match self.max {
            Some(max) if seq <= max => {
                if seq as u64 + self.range as u64 <= max as u64 {
                    return Err(DropReason::SeqWindow);
                }
                let (w, m) = self.bit(seq);
                if self.bits[w] & m != 0 {
                    return Err(DropReason::Replay);
                }
                self.bits[w] |= m;
            }
            _ => {
                // Slide: forget the numbers that leave the tracked range.
                let from = self.max.map_or(0, |m| m as u64 + 1);
                if seq as u64 - from >= self.range as u64 || self.max.is_none() {
                    self.bits.iter_mut().for_each(|b| *b = 0);
                } else {
                    for s in from..seq as u64 {
                        let (w, m) = self.bit(s as u32);
                        self.bits[w] &= !m;
                    }
                }
                let (w, m) = self.bit(seq);
                self.bits[w] |= m;
                self.max = Some(seq);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_out_of_order_and_replays() {
        let mut w = SeqWindow::new(1024);
        for s in 0..10 {
            let snap = w.snapshot();
            w.accept(s, snap, 128).unwrap();
        }
        assert_eq!(w.accept(5, w.snapshot(), 128), Err(DropReason::Replay));
        w.accept(20, w.snapshot(), 128).unwrap();
        w.accept(15, w.snapshot(), 128).unwrap(); // out of order, inside
        assert_eq!(w.accept(15, w.snapshot(), 128), Err(DropReason::Replay));
        assert_eq!(w.accept(9, w.snapshot(), 128), Err(DropReason::Replay));
    }

    #[test]
    fn snapshot_protects_slow_calls() {
        let mut w = SeqWindow::new(1024);
        w.accept(0, None, 128).unwrap();
        // Call 1 is read now; 300 later calls overtake it.
        let snap = w.snapshot();
        for s in 2..302 {
            w.accept(s, w.snapshot(), 128).unwrap();
        }
        // Judged against the current window it would be dropped...
        assert_eq!(w.accept(1, w.snapshot(), 128), Err(DropReason::SeqWindow));
        // ...judged as of its arrival it is inside, and not a replay.
        w.accept(1, snap, 128).unwrap();
        assert_eq!(w.accept(1, snap, 128), Err(DropReason::Replay));
    }

    #[test]
    fn beyond_replay_range_is_dropped_and_far_jumps_clear() {
        let mut w = SeqWindow::new(64);
        w.accept(10, None, 8).unwrap();
        w.accept(10_000, Some(10), 8).unwrap();
        assert_eq!(w.accept(11, Some(10), 8), Err(DropReason::SeqWindow));
        w.accept(9_990, Some(9_989), 8).unwrap();
        assert_eq!(w.accept(9_990, Some(9_989), 8), Err(DropReason::Replay));
        w.accept(u32::MAX / 2, w.snapshot(), 8).unwrap();
    }

    #[test]
    fn rejected_calls_leave_no_trace() {
        let mut w = SeqWindow::new(256);
        w.accept(100, None, 16).unwrap();
        // A stale call is refused and the window does not move.
        assert!(w.accept(50, Some(100), 16).is_err());
        assert_eq!(w.snapshot(), Some(100));
        w.accept(99, Some(100), 16).unwrap();
    }
}
