//! Byte-range locks that other heads see: the backend's side of the lock
//! manager, for backends whose file system keeps POSIX locks of its own
//! ([`vfs::SharedLocks::shares_locks`]: CephFS, where every head of one file
//! system is a client of the same MDS).
//!
//! The head's [`LockManager`] decides first (conflicts between this head's
//! owners, NFSv4 against NLM, courteous clients); a grant is then taken in
//! the backend, and if the backend refuses (a lock held through another
//! head), the local grant is undone and the client is denied. Releases go
//! the other way: the manager notes every released range
//! ([`LockManager::record_releases`]) and [`SharedLocks::flush`] gives it
//! up in the backend, so every path that drops locks (LOCKU, NLM UNLOCK,
//! CLOSE, lease expiry, a courteous client expired on conflict, FREE_ALL,
//! SM_NOTIFY) reaches the backend without knowing of it.
//!
//! The manager stays pure; the backend calls run on the blocking pool,
//! here. Backends that do not share locks (local, memory) cost one check.
//!
//! Invariant: what an owner of this head holds in the backend is a part of
//! what it holds in the manager. A release gives up in the backend only
//! what the manager no longer holds (read under the file's serial lock, the
//! same lock the backend call of a grant takes), so a release noted a while
//! ago can never undo a newer grant of the same range.

use crate::live::Live;
use crate::locks::{Conflict, FileKey, LockKind, LockManager, LockRange, OwnerKey, Released};
use crate::pool::Pool;
use bytes::Bytes;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use tracing::warn;
use vfs::{Backend, FsError, LockType};

/// What the lock of a denied request is said to belong to when it is held
/// through another head: the other head's owner is not known here.
pub const OTHER_HEAD: &[u8] = b"another head";

/// The owner named in a denial for a lock held through another head.
pub fn other_head() -> OwnerKey {
    OwnerKey {
        client: 0,
        owner: Bytes::from_static(OTHER_HEAD),
    }
}

/// Why the backend did not take a lock.
#[derive(Debug)]
pub enum Refusal {
    /// Held elsewhere (through another head): one lock in the way.
    Held(Conflict),
    /// The backend failed (the local grant was undone all the same).
    Failed(FsError),
}

const SHARDS: usize = 64;

pub struct SharedLocks {
    locks: Arc<LockManager>,
    live: Arc<Live>,
    pool: Pool,
    /// Per file (hashed): a grant's backend call, and reading the manager
    /// plus the backend call of a release, happen one at a time.
    serial: Vec<Mutex<()>>,
    hasher: RandomState,
    wake: Arc<tokio::sync::Notify>,
    /// One flush at a time: a flush returns only once every release noted
    /// before it reached the backend, including those another flush (the
    /// background task's) had taken and was still passing on.
    flushing: tokio::sync::Mutex<()>,
}

/// The backend's owner number of a lock owner: the same for the same
/// owner, different for different owners (so two owners of one head
/// conflict in the backend as they do in the manager).
pub fn backend_owner(o: &OwnerKey) -> u64 {
    // Fixed keys: stable for the life of the process, which is as long as
    // the backend keeps this head's locks.
    let mut h = std::hash::DefaultHasher::new();
    o.client.hash(&mut h);
    o.owner.hash(&mut h);
    h.finish()
}

fn lock_type(k: LockKind) -> LockType {
    match k {
        LockKind::Read => LockType::Read,
        LockKind::Write => LockType::Write,
    }
}

fn held_elsewhere(l: vfs::RangeLock) -> Conflict {
    Conflict {
        offset: l.offset,
        length: l.length,
        kind: match l.kind {
            LockType::Read => LockKind::Read,
            LockType::Write => LockKind::Write,
        },
        owner: other_head(),
    }
}

/// The last byte of `offset`, `length` (`u64::MAX`: to end of file).
fn last_byte(offset: u64, length: u64) -> u64 {
    if length == u64::MAX {
        u64::MAX
    } else {
        offset.saturating_add(length.saturating_sub(1))
    }
}

/// The parts of `offset`, `length` outside `held` (sorted, within the
/// range, as [`LockManager::held_in`] gives them), each `(offset, length)`
/// with `u64::MAX` to end of file.
fn gaps(held: &[(u64, u64, LockKind)], offset: u64, length: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut push = |from: u64, to: u64| {
        if from <= to {
            let len = if to == u64::MAX {
                u64::MAX
            } else {
                to - from + 1
            };
            out.push((from, len));
        }
    };
    let end = last_byte(offset, length);
    let mut at = offset;
    for &(o, l, _) in held {
        if o > at {
            push(at, o - 1);
        }
        let last = last_byte(o, l);
        if last == u64::MAX {
            return out;
        }
        at = at.max(last + 1);
    }
    push(at, end);
    out
}

/// Gives up in the backend what `r.owner` no longer holds in the manager
/// within `r`'s range. Called under the file's serial lock.
fn release(locks: &LockManager, b: &dyn Backend, r: &Released) -> Result<(), FsError> {
    let owner = backend_owner(&r.owner);
    let held = locks.held_in(r.file, &r.owner, r.offset, r.length);
    for (o, l) in gaps(&held, r.offset, r.length) {
        b.unlock_range(&r.file.fid, owner, o, l)?;
    }
    Ok(())
}

impl SharedLocks {
    pub fn new(locks: Arc<LockManager>, live: Arc<Live>, pool: Pool) -> Arc<SharedLocks> {
        Arc::new(SharedLocks {
            locks,
            live,
            pool,
            serial: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            wake: Arc::default(),
            flushing: tokio::sync::Mutex::new(()),
        })
    }

    /// Starts noting releases and a task that passes them to the backend
    /// soon after each (a lease expiry, a CLOSE, FREE_ALL: nobody waits for
    /// those). Call once, inside the runtime.
    pub fn spawn_flusher(self: &Arc<Self>) {
        let wake = self.wake.clone();
        self.locks
            .record_releases(Box::new(move || wake.notify_one()));
        let me = Arc::downgrade(self);
        let wake = self.wake.clone();
        tokio::spawn(async move {
            loop {
                wake.notified().await;
                let Some(me) = me.upgrade() else { return };
                me.flush().await;
            }
        });
    }

    /// The export's backend, if it keeps locks itself.
    fn backend(&self, export: u32) -> Option<Arc<dyn Backend>> {
        let snap = self.live.load();
        let b = &snap.exports.get(export)?.backend;
        b.shares_locks().then(|| b.clone())
    }

    fn serial_of(&self, file: &FileKey) -> usize {
        self.hasher.hash_one(file) as usize % SHARDS
    }

    /// Whether the file's export keeps locks in its backend (only then do
    /// the calls below do anything).
    pub fn applies(&self, file: &FileKey) -> bool {
        self.backend(file.export).is_some()
    }

    /// After the manager granted `owner` the lock `r` (and `prev`
    /// is what [`LockManager::held_in`] said before): takes it in the
    /// backend too. If the backend refuses, the manager's grant is undone
    /// ([`LockManager::restore`]).
    pub async fn take(
        self: &Arc<Self>,
        file: FileKey,
        owner: &OwnerKey,
        r: LockRange,
        prev: Vec<(u64, u64, LockKind)>,
    ) -> Result<(), Refusal> {
        let Some(b) = self.backend(file.export) else {
            return Ok(());
        };
        // A courteous client expired to make room for this grant still
        // holds its locks in the backend until its release is passed on.
        self.flush().await;
        let me = self.clone();
        let o = backend_owner(owner);
        let taken = self
            .pool
            .run(move || {
                let _g = me.serial[me.serial_of(&file)].lock().unwrap();
                b.lock_range(&file.fid, o, lock_type(r.kind), r.offset, r.length)
            })
            .await;
        let refusal = match taken {
            Ok(None) => return Ok(()),
            Ok(Some(l)) => Refusal::Held(held_elsewhere(l)),
            Err(e) => Refusal::Failed(e),
        };
        self.locks.restore(file, owner, r.offset, r.length, &prev);
        self.flush().await;
        Err(refusal)
    }

    /// After the manager found no conflict for a test: whether the backend
    /// has one (a lock held through another head).
    pub async fn test(
        self: &Arc<Self>,
        file: FileKey,
        owner: &OwnerKey,
        r: LockRange,
    ) -> Result<(), Refusal> {
        let Some(b) = self.backend(file.export) else {
            return Ok(());
        };
        let o = backend_owner(owner);
        let tested = self
            .pool
            .run(move || b.test_range(&file.fid, o, lock_type(r.kind), r.offset, r.length))
            .await;
        match tested {
            Ok(None) => Ok(()),
            Ok(Some(l)) => Err(Refusal::Held(held_elsewhere(l))),
            Err(e) => Err(Refusal::Failed(e)),
        }
    }

    /// Gives up in the backend what `owner` released in the manager on the
    /// range, before the caller answers (an UNLOCK: the client may next
    /// ask another head for the same range).
    pub async fn release(
        self: &Arc<Self>,
        file: FileKey,
        owner: &OwnerKey,
        offset: u64,
        length: u64,
    ) {
        if self.backend(file.export).is_none() {
            return;
        }
        self.apply(vec![Released {
            file,
            owner: owner.clone(),
            offset,
            length,
        }])
        .await;
    }

    /// Passes every release noted so far to the backend; returns when they
    /// are all there.
    pub async fn flush(self: &Arc<Self>) {
        let _one = self.flushing.lock().await;
        let list = self.locks.take_released();
        if !list.is_empty() {
            self.apply(list).await;
        }
    }

    async fn apply(self: &Arc<Self>, list: Vec<Released>) {
        let mut todo: Vec<(Arc<dyn Backend>, Released)> = Vec::new();
        for r in list {
            if let Some(b) = self.backend(r.file.export) {
                todo.push((b, r));
            }
        }
        if todo.is_empty() {
            return;
        }
        let me = self.clone();
        self.pool
            .run(move || {
                for (b, r) in todo {
                    let _g = me.serial[me.serial_of(&r.file)].lock().unwrap();
                    if let Err(e) = release(&me.locks, &*b, &r) {
                        // The lock stays in the backend until this head's
                        // session ends; other heads are refused meanwhile.
                        warn!(error = %e, offset = r.offset, length = r.length, "cannot release a lock in the backend");
                    }
                }
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_differ() {
        let a = OwnerKey {
            client: 1,
            owner: Bytes::from_static(b"x"),
        };
        let b = OwnerKey {
            client: 2,
            owner: Bytes::from_static(b"x"),
        };
        assert_eq!(backend_owner(&a), backend_owner(&a.clone()));
        assert_ne!(backend_owner(&a), backend_owner(&b));
    }

    #[test]
    fn gaps_are_what_is_no_longer_held() {
        use LockKind::*;
        assert_eq!(gaps(&[], 0, u64::MAX), vec![(0, u64::MAX)]);
        assert_eq!(gaps(&[], 10, 5), vec![(10, 5)]);
        assert_eq!(gaps(&[(10, 5, Read)], 10, 5), vec![]);
        assert_eq!(gaps(&[(12, 2, Write)], 10, 10), vec![(10, 2), (14, 6)]);
        assert_eq!(
            gaps(&[(0, 10, Read), (20, u64::MAX, Write)], 0, u64::MAX),
            vec![(10, 10)]
        );
        assert_eq!(
            gaps(&[(5, 5, Read)], 0, u64::MAX),
            vec![(0, 5), (10, u64::MAX)]
        );
    }

    #[test]
    fn last_bytes() {
        assert_eq!(last_byte(0, u64::MAX), u64::MAX);
        assert_eq!(last_byte(10, 5), 14);
        assert_eq!(last_byte(u64::MAX - 1, 5), u64::MAX);
    }
}
