//! The kernel's access decisions, remembered per (object, caller).
//!
//! Asking the kernel whether a caller may read, write or search an object
//! means switching the thread's fs credentials to the caller's and back:
//! several syscalls, each committing a new credential set, which cost more
//! than the LOOKUP, ACCESS or READ they guard. The answer depends only on
//! the caller's credential and the object's own permission state: mode,
//! owner, group, ACL and inode flags (immutable). Every change to those bumps
//! the object's ctime, so a decision is kept with the ctime, mode, owner and
//! group it was made against and is used only while all four are unchanged.
//!
//! Timestamps are coarse (a jiffy on ext4, up to 2 s on some filesystems):
//! two changes within one tick leave the same ctime. A decision is therefore
//! never cached for an object whose ctime is less than [`RACY`] old, so any
//! later change lands on a strictly later ctime. (A wall clock stepped back
//! by more than that could defeat this; an operator stepping the clock back
//! should restart the server.) Objects whose ctime keeps moving, such as a
//! file being written, are simply asked about every time.
//!
//! Callers with more than [`MAX_GIDS`] supplementary groups are not cached.

use crate::{Cred, Fid};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

/// How old a ctime must be before a decision against it is kept.
pub const RACY: i64 = 2;
/// Supplementary groups a cached caller may have (AUTH_SYS carries 16).
pub const MAX_GIDS: usize = 16;

/// The questions the backend asks: each a `faccessat2` mode. W|X is its
/// own question: with ACLs, W and X may each be granted by a different
/// group entry while no entry grants both at once.
pub const QUESTIONS: [libc::c_int; 4] =
    [libc::R_OK, libc::W_OK, libc::X_OK, libc::W_OK | libc::X_OK];

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    fid: Fid,
    uid: u32,
    gid: u32,
    ngids: u8,
    gids: [u32; MAX_GIDS],
}

impl Key {
    fn new(fid: &Fid, cred: &Cred) -> Option<Key> {
        if cred.gids.len() > MAX_GIDS {
            return None;
        }
        let mut gids = [0; MAX_GIDS];
        gids[..cred.gids.len()].copy_from_slice(&cred.gids);
        Some(Key {
            fid: *fid,
            uid: cred.uid,
            gid: cred.gid,
            ngids: cred.gids.len() as u8,
            gids,
        })
    }
}

/// What a decision was made against.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Basis {
    ctime: (i64, i64),
    mode: u32,
    uid: u32,
    gid: u32,
}

impl Basis {
    fn of(st: &libc::stat) -> Basis {
        Basis {
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
        }
    }
}

#[derive(Clone, Copy)]
struct Decision {
    basis: Basis,
    /// Bit i: QUESTIONS[i] is allowed.
    allowed: u8,
}

/// The answers to [`QUESTIONS`] for one caller and object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allowed(u8);

impl Allowed {
    /// Whether `mode` (one of [`QUESTIONS`]) is allowed.
    pub fn may(self, mode: libc::c_int) -> bool {
        let i = QUESTIONS
            .iter()
            .position(|&q| q == mode)
            .expect("a mode from QUESTIONS");
        self.0 & (1 << i) != 0
    }

    /// Builds the answers from a per-question oracle.
    pub fn ask(mut may: impl FnMut(libc::c_int) -> bool) -> Allowed {
        let mut bits = 0;
        for (i, &q) in QUESTIONS.iter().enumerate() {
            if may(q) {
                bits |= 1 << i;
            }
        }
        Allowed(bits)
    }
}

const SHARDS: usize = 64;

/// Bounded, sharded LRU of decisions.
pub struct PermCache {
    shards: Box<[Mutex<lru::LruCache<Key, Decision>>]>,
    hasher: std::collections::hash_map::RandomState,
    racy: i64,
}

impl PermCache {
    pub fn new(cap: usize) -> PermCache {
        Self::with_racy(cap, RACY)
    }

    /// Tests of the callers use 0, to see decisions cached at once.
    pub fn with_racy(cap: usize, racy: i64) -> PermCache {
        let per = std::num::NonZeroUsize::new((cap / SHARDS).max(1)).unwrap();
        PermCache {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(lru::LruCache::new(per)))
                .collect(),
            hasher: Default::default(),
            racy,
        }
    }

    fn shard(&self, k: &Key) -> &Mutex<lru::LruCache<Key, Decision>> {
        &self.shards[self.hasher.hash_one(k) as usize % SHARDS]
    }

    /// The cached answers for `cred` on the object `fid` whose current
    /// attributes are `st`; None if not known for this state of the object.
    pub fn get(&self, fid: &Fid, cred: &Cred, st: &libc::stat) -> Option<Allowed> {
        let k = Key::new(fid, cred)?;
        let mut s = self.shard(&k).lock().unwrap();
        match s.get(&k) {
            Some(d) if d.basis == Basis::of(st) => Some(Allowed(d.allowed)),
            Some(_) => {
                s.pop(&k);
                None
            }
            None => None,
        }
    }

    /// Whether a decision about an object in state `st` may be kept: its
    /// last change is old enough (see the module docs); `now` is the wall
    /// clock in seconds.
    pub fn would_keep(&self, st: &libc::stat, now: i64) -> bool {
        now - st.st_ctime >= self.racy
    }

    /// Remembers `a`, asked with the object in state `st`, if
    /// [`PermCache::would_keep`] says so.
    pub fn put(&self, fid: &Fid, cred: &Cred, st: &libc::stat, a: Allowed, now: i64) {
        if !self.would_keep(st, now) {
            return;
        }
        let Some(k) = Key::new(fid, cred) else {
            return;
        };
        let d = Decision {
            basis: Basis::of(st),
            allowed: a.0,
        };
        self.shard(&k).lock().unwrap().put(k, d);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(ctime: i64, mode: u32) -> libc::stat {
        let mut s = super::super::sys::zero_stat();
        s.st_ctime = ctime;
        s.st_mode = mode;
        s
    }

    fn cred(uid: u32, gids: &[u32]) -> Cred {
        Cred {
            uid,
            gid: uid,
            gids: gids.to_vec(),
        }
    }

    fn fid(n: u8) -> Fid {
        Fid::new(&[1, n]).unwrap()
    }

    const READ_ONLY: Allowed = Allowed(1);

    #[test]
    fn answers_are_per_question() {
        let a = Allowed::ask(|m| m == libc::R_OK || m == libc::X_OK);
        assert!(a.may(libc::R_OK) && a.may(libc::X_OK));
        assert!(!a.may(libc::W_OK) && !a.may(libc::W_OK | libc::X_OK));
    }

    #[test]
    fn kept_while_the_object_is_unchanged() {
        let c = PermCache::new(1024);
        let s = st(1000, 0o100644);
        c.put(&fid(1), &cred(7, &[1, 2]), &s, READ_ONLY, 2000);
        assert_eq!(c.get(&fid(1), &cred(7, &[1, 2]), &s), Some(READ_ONLY));
        // Another object, another user, other groups (even their order): not known.
        assert_eq!(c.get(&fid(2), &cred(7, &[1, 2]), &s), None);
        assert_eq!(c.get(&fid(1), &cred(8, &[1, 2]), &s), None);
        assert_eq!(c.get(&fid(1), &cred(7, &[1]), &s), None);
        assert_eq!(c.get(&fid(1), &cred(7, &[2, 1]), &s), None);
    }

    #[test]
    fn any_change_to_the_object_forgets() {
        let c = PermCache::new(1024);
        let s = st(1000, 0o100644);
        let who = cred(7, &[]);
        for changed in [st(1001, 0o100644), st(1000, 0o100600), {
            let mut o = s;
            o.st_uid = 9;
            o
        }] {
            c.put(&fid(1), &who, &s, READ_ONLY, 2000);
            assert_eq!(c.get(&fid(1), &who, &changed), None);
            // ... and the stale decision is gone, not just skipped.
            assert_eq!(c.get(&fid(1), &who, &s), None);
        }
        let mut ns = s;
        ns.st_ctime_nsec = 1;
        c.put(&fid(1), &who, &s, READ_ONLY, 2000);
        assert_eq!(c.get(&fid(1), &who, &ns), None);
    }

    #[test]
    fn recently_changed_objects_are_not_cached() {
        let c = PermCache::new(1024);
        let who = cred(7, &[]);
        let s = st(1000, 0o100644);
        c.put(&fid(1), &who, &s, READ_ONLY, 1000 + RACY - 1);
        assert_eq!(c.get(&fid(1), &who, &s), None);
        // A ctime in the future (clock stepped back): not cached either.
        c.put(&fid(1), &who, &s, READ_ONLY, 900);
        assert_eq!(c.get(&fid(1), &who, &s), None);
        c.put(&fid(1), &who, &s, READ_ONLY, 1000 + RACY);
        assert_eq!(c.get(&fid(1), &who, &s), Some(READ_ONLY));
    }

    #[test]
    fn callers_with_many_groups_are_not_cached() {
        let c = PermCache::new(1024);
        let many: Vec<u32> = (0..=MAX_GIDS as u32).collect();
        let s = st(1000, 0o100644);
        c.put(&fid(1), &cred(7, &many), &s, READ_ONLY, 2000);
        assert_eq!(c.get(&fid(1), &cred(7, &many), &s), None);
    }

    #[test]
    fn bounded() {
        let c = PermCache::new(128);
        let s = st(1000, 0o100644);
        for i in 0..10_000u32 {
            c.put(&fid(1), &cred(i, &[]), &s, READ_ONLY, 2000);
        }
        assert!(c.len() <= 128, "{}", c.len());
    }
}
