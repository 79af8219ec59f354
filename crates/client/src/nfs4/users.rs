//! Which RPCSEC_GSS context a caller's calls go under, when one client
//! acts for many local users (a FUSE mount, as the Linux kernel does with
//! rpc.gssd): one entry per uid, made on the uid's first call, dropped
//! when idle or when the table is full (least recently used first). A uid
//! whose credential could not be had is remembered for a short while, so
//! a burst of its calls fails fast instead of asking MIT (and the KDC) for
//! each, and its refusal is logged once, not per call.
//!
//! Pure bookkeeping over instants the caller passes in; `T` is whatever
//! the caller keeps per user (a context, in tests a number).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The uid whose own credential a call made for `caller` (the caller's
/// uid, if the call is made for one) should use, by a client running as
/// `own_uid`: none for root and for the client's own uid, whose calls use
/// the client's own credential (the mounter's; for root, as rpc.gssd uses
/// the machine's credential for root).
pub fn acts_for(caller: Option<u32>, own_uid: u32) -> Option<u32> {
    caller.filter(|&uid| uid != 0 && uid != own_uid)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserLimits {
    /// Users with a live entry at most.
    pub cap: usize,
    /// An entry unused this long is dropped.
    pub idle: Duration,
    /// After a uid's credential could not be had, its calls fail at once
    /// for this long (then the credential cache is tried again: a kinit
    /// takes effect without remounting).
    pub retry_after: Duration,
}

impl Default for UserLimits {
    fn default() -> Self {
        UserLimits {
            cap: 1024,
            idle: Duration::from_secs(600),
            retry_after: Duration::from_secs(2),
        }
    }
}

/// What a uid's lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<T> {
    Live(T),
    /// Refused a moment ago: fail without trying.
    Refused,
    /// Nothing: make the uid's entry.
    Absent,
}

pub struct UserTable<T> {
    limits: UserLimits,
    live: HashMap<u32, (T, Instant)>,
    /// When each refused uid was refused.
    refused: HashMap<u32, Instant>,
    /// Uids whose refusal was logged (since their last success).
    logged: HashSet<u32>,
}

impl<T: Clone> UserTable<T> {
    pub fn new(limits: UserLimits) -> Self {
        UserTable {
            limits,
            live: HashMap::new(),
            refused: HashMap::new(),
            logged: HashSet::new(),
        }
    }

    pub fn limits(&self) -> UserLimits {
        self.limits
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// `uid`'s entry, marked used at `now`.
    pub fn find(&mut self, uid: u32, now: Instant) -> Found<T> {
        if let Some((v, used)) = self.live.get_mut(&uid) {
            *used = now;
            return Found::Live(v.clone());
        }
        match self.refused.get(&uid) {
            Some(&at) if now.saturating_duration_since(at) < self.limits.retry_after => {
                Found::Refused
            }
            _ => Found::Absent,
        }
    }

    /// Adds `uid`'s entry (replacing any); returns the entries dropped to
    /// stay within the cap (the least recently used), which the caller
    /// ends (a context is destroyed on the server).
    pub fn insert(&mut self, uid: u32, v: T, now: Instant) -> Vec<T> {
        self.refused.remove(&uid);
        self.logged.remove(&uid);
        let mut out: Vec<T> = self
            .live
            .insert(uid, (v, now))
            .map(|(v, _)| v)
            .into_iter()
            .collect();
        while self.live.len() > self.limits.cap.max(1) {
            let oldest = self
                .live
                .iter()
                .filter(|(&u, _)| u != uid)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(&u, _)| u);
            match oldest.and_then(|u| self.live.remove(&u)) {
                Some((v, _)) => out.push(v),
                None => break,
            }
        }
        out
    }

    /// Notes that `uid`'s credential could not be had at `now`; whether
    /// this is the first refusal since its last success (log it then).
    pub fn refuse(&mut self, uid: u32, now: Instant) -> bool {
        self.live.remove(&uid);
        if self.refused.len() >= self.limits.cap.max(1) && !self.refused.contains_key(&uid) {
            self.forget_refusals(now);
        }
        self.refused.insert(uid, now);
        if self.logged.len() >= self.limits.cap.max(1) && !self.logged.contains(&uid) {
            // Bounded: an attack by many uids costs log lines, not memory.
            self.logged.clear();
        }
        self.logged.insert(uid)
    }

    fn forget_refusals(&mut self, now: Instant) {
        let keep = self.limits.retry_after;
        self.refused
            .retain(|_, at| now.saturating_duration_since(*at) < keep);
        if self.refused.len() >= self.limits.cap.max(1) {
            self.refused.clear();
        }
    }

    /// Removes the entries unused for `idle` at `now`; returns them.
    pub fn sweep(&mut self, now: Instant) -> Vec<T> {
        let idle = self.limits.idle;
        let gone: Vec<u32> = self
            .live
            .iter()
            .filter(|(_, (_, used))| now.saturating_duration_since(*used) >= idle)
            .map(|(&u, _)| u)
            .collect();
        self.forget_refusals(now);
        gone.into_iter()
            .filter_map(|u| self.live.remove(&u).map(|(v, _)| v))
            .collect()
    }

    /// Every entry, removed (the client is going away).
    pub fn drain(&mut self) -> Vec<T> {
        self.live.drain().map(|(_, (v, _))| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    fn table(cap: usize) -> UserTable<u32> {
        UserTable::new(UserLimits {
            cap,
            idle: Duration::from_secs(600),
            retry_after: Duration::from_secs(2),
        })
    }

    /// A table of `cap` made at the returned instant t0, with `entries`
    /// (uid, value, seconds after t0) inserted in order.
    fn filled(cap: usize, entries: &[(u32, u32, u64)]) -> (Instant, UserTable<u32>) {
        let (t0, mut t) = (Instant::now(), table(cap));
        for &(uid, v, s) in entries {
            t.insert(uid, v, at(t0, s));
        }
        (t0, t)
    }

    #[test]
    fn root_and_the_clients_own_uid_use_the_clients_credential() {
        assert_eq!(acts_for(None, 0), None, "not made for a caller");
        assert_eq!(acts_for(Some(0), 0), None, "root");
        assert_eq!(acts_for(Some(1000), 0), Some(1000));
        // A user's own mount: their calls are the mounter's.
        assert_eq!(acts_for(Some(1000), 1000), None);
        assert_eq!(acts_for(Some(0), 1000), None);
        assert_eq!(acts_for(Some(1001), 1000), Some(1001));
    }

    #[test]
    fn an_entry_is_made_once_and_found_after() {
        let (t0, mut t) = filled(8, &[]);
        assert_eq!(t.find(1000, t0), Found::Absent);
        assert!(t.insert(1000, 7, t0).is_empty());
        assert_eq!(t.find(1000, at(t0, 1)), Found::Live(7));
        assert_eq!(t.find(1001, at(t0, 1)), Found::Absent, "per uid");
    }

    #[test]
    fn the_least_recently_used_goes_beyond_the_cap() {
        let (t0, mut t) = filled(2, &[(1, 10, 0), (2, 20, 1)]);
        // 1 used again: 2 is now the oldest.
        assert_eq!(t.find(1, at(t0, 2)), Found::Live(10));
        assert_eq!(t.insert(3, 30, at(t0, 3)), vec![20]);
        assert_eq!(t.len(), 2);
        assert_eq!(t.find(2, at(t0, 4)), Found::Absent);
        assert_eq!(t.find(1, at(t0, 4)), Found::Live(10));
    }

    #[test]
    fn replacing_an_entry_returns_the_old_one() {
        let (t0, mut t) = filled(2, &[(1, 10, 0)]);
        assert_eq!(t.insert(1, 11, t0), vec![10]);
        assert_eq!(t.find(1, t0), Found::Live(11));
    }

    #[test]
    fn idle_entries_are_swept() {
        let (t0, mut t) = filled(8, &[(1, 10, 0), (2, 20, 0)]);
        t.find(2, at(t0, 500));
        assert!(t.sweep(at(t0, 599)).is_empty());
        assert_eq!(t.sweep(at(t0, 600)), vec![10]);
        assert_eq!(t.find(2, at(t0, 601)), Found::Live(20));
        assert_eq!(t.sweep(at(t0, 1201)), vec![20]);
        assert!(t.is_empty());
    }

    #[test]
    fn a_refused_uid_fails_fast_for_a_while_and_is_logged_once() {
        let (t0, mut t) = filled(8, &[]);
        assert!(t.refuse(1000, t0), "first refusal: log it");
        assert_eq!(t.find(1000, at(t0, 1)), Found::Refused);
        // Tried again after retry_after (a kinit may have happened).
        assert_eq!(t.find(1000, at(t0, 2)), Found::Absent);
        assert!(!t.refuse(1000, at(t0, 2)), "not logged again");
        // A success resets it: a later refusal is news again.
        t.insert(1000, 1, at(t0, 10));
        assert_eq!(t.find(1000, at(t0, 10)), Found::Live(1));
        assert!(t.refuse(1000, at(t0, 20)));
        assert_eq!(t.find(1000, at(t0, 20)), Found::Refused);
    }

    #[test]
    fn refusals_stay_bounded() {
        let (t0, mut t) = filled(4, &[]);
        for uid in 0..100 {
            t.refuse(uid, t0);
        }
        assert!(t.refused.len() <= 4, "{}", t.refused.len());
        assert!(t.logged.len() <= 4, "{}", t.logged.len());
    }
}
