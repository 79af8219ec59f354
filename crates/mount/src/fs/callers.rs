//! The AUTH_SYS credential of the process behind a FUSE request, kept
//! for a moment per (pid, uid, gid).
//!
//! FUSE gives a request's pid, uid and gid but not its supplementary
//! groups: they come from /proc/PID/status. Read for every request, that
//! cost a per-caller mount about 50-65 µs on each 4 KiB random read, on
//! fuser's one dispatching thread (fio 4 KiB random reads through a mount
//! without uid=/gid=: 216-244 µs against 167-179 µs with them; kept here,
//! 158-178 µs against 159-161). A process
//! changes its groups rarely and its uid or gid with them as a rule (a new
//! key here); groups changed alone (setgroups(2) with the same ids) are
//! seen within [`FRESH`], as are a reused pid's.

use lru::LruCache;
use proto::rpc::OpaqueAuth;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a process's groups are taken as read.
pub const FRESH: Duration = Duration::from_secs(1);
/// Processes remembered (least recently used dropped beyond).
const CAP: usize = 1024;

/// (pid, uid, gid) of a request.
type Caller = (u32, u32, u32);

pub struct Callers {
    machine: String,
    /// Each caller's credential and when its groups were read.
    seen: Mutex<LruCache<Caller, (Instant, OpaqueAuth)>>,
}

impl Callers {
    pub fn new(machine: String) -> Callers {
        Callers {
            machine,
            seen: Mutex::new(LruCache::new(NonZeroUsize::new(CAP).expect("cap"))),
        }
    }

    /// The credential of process `pid` acting as `uid`/`gid` at `now`;
    /// `groups` reads its supplementary groups when they are not fresh.
    pub fn cred(
        &self,
        now: Instant,
        pid: u32,
        uid: u32,
        gid: u32,
        groups: impl FnOnce(u32) -> Vec<u32>,
    ) -> OpaqueAuth {
        let key = (pid, uid, gid);
        if let Some((at, c)) = self.seen.lock().expect("callers").get(&key) {
            if now.saturating_duration_since(*at) < FRESH {
                return c.clone();
            }
        }
        let c = rpc::client::auth_sys(uid, gid, &groups(pid), &self.machine);
        self.seen
            .lock()
            .expect("callers")
            .put(key, (now, c.clone()));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn groups_are_read_once_per_process_and_ids_until_stale() {
        let c = Callers::new("m".into());
        let reads = &Cell::new(0);
        let groups = |g: u32| {
            move |_pid: u32| {
                reads.set(reads.get() + 1);
                vec![g]
            }
        };
        let t = Instant::now();
        let a = c.cred(t, 10, 1000, 1000, groups(5));
        assert_eq!(c.cred(t + FRESH / 2, 10, 1000, 1000, groups(6)), a);
        assert_eq!(reads.get(), 1, "fresh: not read again");
        // Another uid or gid of the same process, or another process: read.
        assert_ne!(c.cred(t, 10, 0, 1000, groups(5)), a);
        assert_ne!(c.cred(t, 10, 1000, 0, groups(5)), a);
        let b = c.cred(t, 11, 1000, 1000, groups(5));
        assert_eq!(reads.get(), 4);
        assert_eq!(b, a, "same ids and groups, same credential");
        // Stale: read again, and a change of groups is seen.
        let later = c.cred(t + FRESH, 10, 1000, 1000, groups(6));
        assert_eq!(reads.get(), 5);
        assert_ne!(later, a);
        assert_eq!(later, rpc::client::auth_sys(1000, 1000, &[6], "m"));
    }

    #[test]
    fn the_table_is_bounded() {
        let c = Callers::new("m".into());
        let t = Instant::now();
        for pid in 0..(CAP as u32 * 3) {
            c.cred(t, pid, 1, 1, |_| vec![]);
        }
        assert_eq!(c.seen.lock().unwrap().len(), CAP);
    }
}
