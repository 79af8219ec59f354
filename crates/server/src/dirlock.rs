//! Namespace changes of one directory made one at a time, so that the
//! change attribute read before and after a CREATE, OPEN(create), REMOVE,
//! RENAME or LINK brackets that change alone. NFSv4 then reports the
//! change_info as atomic (RFC 8881 §3.3.4), and a client whose cached
//! change attribute equals `before` keeps its lookup and access caches
//! instead of dropping them after each of its own creates (Linux:
//! `update_changeattr_locked`). NFSv3 handlers take the same locks, so
//! their wcc data brackets one change too.
//!
//! A fixed table of stripes, hashed by file id: no allocation, and no
//! table that grows with the number of directories. Two directories that
//! share a stripe merely wait for each other.
//!
//! What the locks do not cover: processes on the server changing the
//! exported tree directly, and other servers of a shared file system
//! ([`atomic`] says false for those backends).
//!
//! The locks are also where NFSv4 directory delegations are recalled
//! ([`hold_unrecalled`]): a change of a directory's entries asks, holding
//! the lock, whether delegations on it stand in the way, and a directory
//! delegation is granted holding the same lock, so no change slips
//! between a grant and the check.

use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard};
use vfs::{Backend, Fid, FsError};

const STRIPES: usize = 256;

static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

fn stripe(fid: &Fid) -> usize {
    let mut h = std::hash::DefaultHasher::new();
    fid.hash(&mut h);
    (h.finish() as usize) % STRIPES
}

fn lock(i: usize) -> MutexGuard<'static, ()> {
    // A handler that panicked left nothing half-done in `()`.
    LOCKS[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// The namespace locks of one or two directories, released on drop.
pub struct Held {
    _first: MutexGuard<'static, ()>,
    _second: Option<MutexGuard<'static, ()>>,
}

/// Takes the lock of `dir`.
pub fn hold(dir: &Fid) -> Held {
    Held {
        _first: lock(stripe(dir)),
        _second: None,
    }
}

/// Takes the locks of both directories of a RENAME, lower stripe first so
/// that two renames in opposite directions cannot deadlock.
pub fn hold_two(a: &Fid, b: &Fid) -> Held {
    let (x, y) = (stripe(a), stripe(b));
    let (lo, hi) = (x.min(y), x.max(y));
    Held {
        _first: lock(lo),
        _second: (lo != hi).then(|| lock(hi)),
    }
}

/// Asked holding a directory's lock just before its entries change:
/// whether delegations on it are being recalled (asking queues the recall
/// the first time), in which case the change must wait.
pub type Recalling = dyn Fn(&Fid) -> bool + Send + Sync;

/// A [`Recalling`] for changes nothing recalls for (no NFSv4 server
/// beside, or a change of the object itself that the caller recalled for).
pub fn no_recall(_: &Fid) -> bool {
    false
}

/// Takes the lock of `dir`, then Err(Jukebox) (NFS3ERR_JUKEBOX,
/// NFS4ERR_DELAY) while delegations on it are being recalled.
pub fn hold_unrecalled(dir: &Fid, recalling: &Recalling) -> Result<Held, FsError> {
    let held = hold(dir);
    unrecalled(held, &[dir], recalling)
}

/// [`hold_two`], then as [`hold_unrecalled`] for both directories.
pub fn hold_two_unrecalled(a: &Fid, b: &Fid, recalling: &Recalling) -> Result<Held, FsError> {
    let held = hold_two(a, b);
    unrecalled(held, &[a, b], recalling)
}

fn unrecalled(held: Held, dirs: &[&Fid], recalling: &Recalling) -> Result<Held, FsError> {
    // Every directory is asked, so that each recall starts now.
    let waits = dirs.iter().fold(false, |w, d| recalling(d) | w);
    if waits {
        return Err(FsError::Jukebox);
    }
    Ok(held)
}

/// Whether a change made under these locks may be reported as atomic:
/// not where other servers change the same file system (CephFS, whose
/// heads share locks for the same reason).
pub fn atomic(b: &dyn Backend) -> bool {
    !b.shares_locks()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_directories_in_either_order_do_not_deadlock() {
        let a = Fid::new(b"a").unwrap();
        let b = Fid::new(b"b").unwrap();
        let t = std::thread::spawn(move || {
            for _ in 0..10_000 {
                drop(hold_two(&a, &b));
            }
        });
        for _ in 0..10_000 {
            drop(hold_two(&b, &a));
        }
        t.join().unwrap();
        // The same stripe twice is taken once.
        drop(hold_two(&a, &a));
    }

    #[test]
    fn a_held_directory_waits() {
        let a = Fid::new(b"dir").unwrap();
        let g = hold(&a);
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let _g = hold(&a);
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(50))
            .is_err());
        drop(g);
        rx.recv().unwrap();
        t.join().unwrap();
    }
}
