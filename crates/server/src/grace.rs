//! The server's grace period after a start: one for NLM and NFSv4 alike,
//! so both protocols' reclaims end at the same moment and a restart gives
//! both the same window. Who may reclaim during it stays each protocol's
//! rule (NLM: any host, only reclaims; NFSv4: the recorded clients, until
//! they all said RECLAIM_COMPLETE). Pure: the start is given, `now` is
//! passed in.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    pub start: Instant,
    pub length: Duration,
}

impl Grace {
    pub fn new(start: Instant, length: Duration) -> Grace {
        Grace { start, length }
    }

    /// When the period ends.
    pub fn until(&self) -> Instant {
        self.start + self.length
    }

    /// Whether the period still runs at `now`.
    pub fn running(&self, now: Instant) -> bool {
        now < self.until()
    }
}
