//! Byte-range locks, shared by NFSv4 (LOCK/LOCKT/LOCKU) and NLM v4, so a
//! lock taken through one protocol conflicts with the other on the same file.
//! Pure state: no I/O, no clocks; the protocol layers decide what to send.
//!
//! # Semantics
//! POSIX (fcntl) semantics per owner: an owner's locks never conflict with
//! each other; a new lock replaces whatever the owner held in its range
//! (upgrade or downgrade), adjacent or overlapping ranges of the same kind
//! merge, and unlocking the middle of a range splits it. Read locks of
//! different owners coexist; a write lock conflicts with any other owner's
//! lock that overlaps it.
//!
//! Ranges are `offset` plus `length`, `length == u64::MAX` meaning "to end of
//! file" (NFSv4's all-ones length; NLM's `l_len == 0` must be mapped to
//! `u64::MAX` by the NLM layer). Internally a range is its first and last
//! byte, both inclusive, so a to-EOF range ends at `u64::MAX`. Callers
//! validate ranges with [`range_end`] first (NFSv4 answers NFS4ERR_INVAL
//! when it is `None`); the manager itself clamps a range that runs past
//! `u64::MAX` to end of file and treats `length == 0` as an empty range
//! (locks nothing, conflicts with nothing).
//!
//! # Layout (docs/design.md rule 2: state has one owner and is linked from it)
//! - `files`: sharded map FileKey → [`FileState`]: per owner, its sorted,
//!   non-overlapping ranges on that file, and the queue of blocked waiters.
//!   Conflict checks binary-search each other owner's list. Entries with no
//!   locks and no waiters are removed.
//! - `owners`: sharded by client id: client → owner bytes → the set of files
//!   the owner has locks or waiters on. `release_owner` and `release_client`
//!   walk only these sets, so their cost depends on what that owner/client
//!   holds, not on how many other locks exist.
//!
//! Lock order: an owner shard first, then file shards one at a time. No path
//! holds two owner shards or two file shards at once.
//!
//! # Blocking
//! [`LockManager::lock_or_wait`] queues a waiter when the lock conflicts.
//! Whenever locks on the file are released or downgraded, queued waiters
//! whose range is now free are taken in FIFO order: a [`WaitMode::Grant`]
//! waiter gets the lock on its behalf, atomically (NLM then sends
//! NLM_GRANTED; nobody can steal the range in between); a
//! [`WaitMode::Notify`] waiter is only told to retry (NFSv4.1
//! CB_NOTIFY_LOCK). Either way its [`Waiter::wait`] future completes.
//!
//! # Releases, for a backend that keeps locks too
//! With [`LockManager::record_releases`] on, every release (UNLOCK, an
//! owner's or client's locks dropped, a grant undone) is also noted as a
//! [`Released`] range, taken with [`LockManager::take_released`]. The
//! manager does no I/O: the server's handler layer (`shared_locks.rs`)
//! passes them to a backend whose file system holds POSIX locks of its own
//! (CephFS, seen by every head).

use bytes::Bytes;
use std::collections::hash_map::{Entry, RandomState};
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use tokio::sync::oneshot;

/// Asked when a request conflicts with a lock of another client (by client
/// id): true if that client's state was just released (an NFSv4 courteous
/// client, see `nfs4::state::Courtesy`), so the request is tried again.
pub type ConflictHook = Box<dyn Fn(u64) -> bool + Send + Sync>;

/// Most conflicting clients one request may clear (each try releases one
/// whole client, so this only guards against a hook that misbehaves).
const MAX_RESOLVE: usize = 4096;

/// Identifies a lock owner globally: which protocol/client and the owner's
/// opaque bytes. NFSv4: `client` = clientid, `owner` = lock_owner4 bytes.
/// NLM: `client` = a per-host id assigned by the NLM layer (with
/// [`NLM_CLIENT_BIT`] set, so it never equals an NFSv4 clientid),
/// `owner` = svid + oh bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnerKey {
    pub client: u64,
    pub owner: Bytes,
}

/// NLM host ids have this bit set and NFSv4 clientids must not, so the two
/// protocols' client ids share one namespace without colliding.
pub const NLM_CLIENT_BIT: u64 = 1 << 63;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Read,
    Write,
}

impl LockKind {
    fn conflicts(self, other: LockKind) -> bool {
        self == LockKind::Write || other == LockKind::Write
    }

    /// A lock of this kind on `length` bytes from `offset` (0 or
    /// `u64::MAX` length: to the end of the file).
    pub fn range(self, offset: u64, length: u64) -> LockRange {
        LockRange {
            kind: self,
            offset,
            length,
        }
    }
}

/// What a lock or test asks for: a kind on a byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    pub kind: LockKind,
    pub offset: u64,
    pub length: u64,
}

/// One lock that stands in the way. `length` is `u64::MAX` for a lock to end of file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub offset: u64,
    pub length: u64,
    pub kind: LockKind,
    pub owner: OwnerKey,
}

/// File identity: the export id and the backend's fid bytes, so NFSv3/NLM
/// and NFSv4 meet on the same file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub export: u32,
    pub fid: vfs::Fid,
}

/// The last byte (inclusive) of the range `offset`, `length`: `u64::MAX` for
/// `length == u64::MAX` (to end of file). `None` when `length` is 0 or when
/// `offset + length` runs past 2^64: NFSv4 answers NFS4ERR_INVAL for both
/// (RFC 7530 section 16.10.4).
pub fn range_end(offset: u64, length: u64) -> Option<u64> {
    match length {
        0 => None,
        u64::MAX => Some(u64::MAX),
        n => offset.checked_add(n - 1),
    }
}

/// The manager's reading of a range: clamped to EOF on overflow, None if empty.
fn span(offset: u64, length: u64) -> Option<(u64, u64)> {
    match length {
        0 => None,
        u64::MAX => Some((offset, u64::MAX)),
        n => Some((offset, offset.saturating_add(n - 1))),
    }
}

/// The wire length of an inclusive range: `u64::MAX` for one that reaches EOF.
fn wire_length(start: u64, last: u64) -> u64 {
    if last == u64::MAX {
        u64::MAX
    } else {
        last - start + 1
    }
}

/// One range of one owner: first and last byte, inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seg {
    start: u64,
    last: u64,
    kind: LockKind,
}

/// Sets `[s, e]` of one owner's sorted, non-overlapping list to `kind`
/// (None = unlock), splitting and merging as needed.
fn apply(list: &mut Vec<Seg>, s: u64, e: u64, kind: Option<LockKind>) {
    // Segments wholly before `s` (and not adjacent) are untouched; so are those after `e`.
    let lo = list.partition_point(|g| g.last < s);
    let hi = list.partition_point(|g| g.start <= e);
    let mut mid: Vec<Seg> = Vec::with_capacity(3);
    for g in &list[lo..hi] {
        if g.start < s {
            mid.push(Seg { last: s - 1, ..*g });
        }
    }
    if let Some(k) = kind {
        mid.push(Seg {
            start: s,
            last: e,
            kind: k,
        });
    }
    if hi > lo {
        let g = list[hi - 1];
        if g.last > e {
            mid.push(Seg { start: e + 1, ..g });
        }
    }
    list.splice(lo..hi, mid);
    // Merge same-kind neighbours around the touched area (one before, one after).
    let from = lo.saturating_sub(1);
    let mut i = from;
    while i + 1 < list.len() && i <= lo + 3 {
        let (a, b) = (list[i], list[i + 1]);
        if a.kind == b.kind && a.last != u64::MAX && a.last + 1 == b.start {
            list[i].last = b.last;
            list.remove(i + 1);
        } else {
            i += 1;
        }
    }
}

/// The first segment of `list` that overlaps `[s, e]` and conflicts with `kind`.
fn find_conflict(list: &[Seg], s: u64, e: u64, kind: LockKind) -> Option<Seg> {
    let i = list.partition_point(|g| g.last < s);
    list[i..]
        .iter()
        .take_while(|g| g.start <= e)
        .find(|g| kind.conflicts(g.kind))
        .copied()
}

/// An owner gave up (some of) `offset`, `length` on a file: see
/// [`LockManager::record_releases`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    pub file: FileKey,
    pub owner: OwnerKey,
    pub offset: u64,
    pub length: u64,
}

/// Released ranges not yet taken, and who to tell when one is added.
#[derive(Default)]
struct Journal {
    on: bool,
    list: Vec<Released>,
}

/// How a queued waiter is served when its range becomes free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Take the lock on the waiter's behalf, then wake it (NLM blocking locks).
    Grant,
    /// Only wake it; it retries itself (NFSv4.1 CB_NOTIFY_LOCK).
    Notify,
}

/// Names a queued waiter, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitId(u64);

/// A queued lock request; [`Waiter::wait`] completes when it was served.
#[derive(Debug)]
pub struct Waiter {
    pub id: WaitId,
    pub file: FileKey,
    rx: oneshot::Receiver<()>,
}

impl Waiter {
    /// Completes when the lock was granted (or, for [`WaitMode::Notify`],
    /// may be retried). Returns false if the waiter was removed instead
    /// (cancelled, or its owner or client released).
    pub async fn wait(self) -> bool {
        self.rx.await.is_ok()
    }

    /// Non-blocking check: Some(true) if served, Some(false) if removed, None if still queued.
    pub fn try_served(&mut self) -> Option<bool> {
        match self.rx.try_recv() {
            Ok(()) => Some(true),
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => Some(false),
        }
    }
}

/// What [`LockManager::lock_or_wait`] did.
#[derive(Debug)]
pub enum Attempt {
    Granted,
    /// The lock conflicts with `0`; the request is queued as `1`.
    Queued(Conflict, Waiter),
}

enum Outcome {
    Granted,
    Conflict(Conflict, Option<Waiter>),
}

struct QueuedWait {
    id: WaitId,
    owner: OwnerKey,
    kind: LockKind,
    start: u64,
    last: u64,
    mode: WaitMode,
    tx: oneshot::Sender<()>,
}

#[derive(Default)]
struct FileState {
    /// Per owner: sorted, non-overlapping, same-kind neighbours merged.
    owners: HashMap<OwnerKey, Vec<Seg>>,
    waiters: VecDeque<QueuedWait>,
}

impl FileState {
    fn conflict(&self, me: &OwnerKey, s: u64, e: u64, kind: LockKind) -> Option<Conflict> {
        self.owners
            .iter()
            .filter(|(o, _)| *o != me)
            .find_map(|(o, list)| {
                find_conflict(list, s, e, kind).map(|g| Conflict {
                    offset: g.start,
                    length: wire_length(g.start, g.last),
                    kind: g.kind,
                    owner: o.clone(),
                })
            })
    }

    fn set(&mut self, owner: &OwnerKey, s: u64, e: u64, kind: Option<LockKind>) {
        match self.owners.get_mut(owner) {
            Some(list) => {
                apply(list, s, e, kind);
                if list.is_empty() {
                    self.owners.remove(owner);
                }
            }
            None => {
                if let Some(k) = kind {
                    self.owners.insert(
                        owner.clone(),
                        vec![Seg {
                            start: s,
                            last: e,
                            kind: k,
                        }],
                    );
                }
            }
        }
    }

    /// Serves every queued waiter whose range is free now, in FIFO order.
    /// Called after anything that releases or downgrades locks.
    fn wake(&mut self) {
        let mut i = 0;
        while i < self.waiters.len() {
            let w = &self.waiters[i];
            if w.tx.is_closed() {
                // Its receiver is gone: nobody would learn of a grant.
                self.waiters.remove(i);
                continue;
            }
            if self.conflict(&w.owner, w.start, w.last, w.kind).is_some() {
                i += 1;
                continue;
            }
            let w = self.waiters.remove(i).expect("index checked");
            if w.mode == WaitMode::Grant {
                self.set(&w.owner, w.start, w.last, Some(w.kind));
            }
            let _ = w.tx.send(());
        }
    }

    fn holds_or_waits(&self, owner: &OwnerKey) -> bool {
        self.owners.contains_key(owner) || self.waiters.iter().any(|w| w.owner == *owner)
    }

    fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.waiters.is_empty()
    }
}

/// Per client: owner bytes → files the owner has locks or waiters on.
type ClientIndex = HashMap<Bytes, HashSet<FileKey>>;

const SHARDS: usize = 64;

/// The byte-range lock table. `Send + Sync`; share it as `Arc<LockManager>`.
pub struct LockManager {
    files: Vec<Mutex<HashMap<FileKey, FileState>>>,
    owners: Vec<Mutex<HashMap<u64, ClientIndex>>>,
    hasher: RandomState,
    next_wait: AtomicU64,
    hook: RwLock<Option<ConflictHook>>,
    journal: Mutex<Journal>,
    on_release: RwLock<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl Default for LockManager {
    fn default() -> Self {
        Self::new()
    }
}

impl LockManager {
    pub fn new() -> Self {
        LockManager {
            files: (0..SHARDS).map(|_| Mutex::default()).collect(),
            owners: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            next_wait: AtomicU64::new(1),
            hook: RwLock::new(None),
            journal: Mutex::default(),
            on_release: RwLock::new(None),
        }
    }

    /// From now on, notes every released range (see the module docs) and
    /// calls `wake` after noting one (it must not block or call back into
    /// the manager: it is called with a file shard held).
    pub fn record_releases(&self, wake: Box<dyn Fn() + Send + Sync>) {
        *self.on_release.write().unwrap() = Some(wake);
        self.journal.lock().unwrap().on = true;
    }

    /// The released ranges noted since the last call, oldest first.
    pub fn take_released(&self) -> Vec<Released> {
        std::mem::take(&mut self.journal.lock().unwrap().list)
    }

    fn note_release(&self, file: FileKey, owner: &OwnerKey, s: u64, e: u64) {
        {
            let mut j = self.journal.lock().unwrap();
            if !j.on {
                return;
            }
            j.list.push(Released {
                file,
                owner: owner.clone(),
                offset: s,
                length: wire_length(s, e),
            });
        }
        if let Some(w) = self.on_release.read().unwrap().as_ref() {
            w();
        }
    }

    /// `owner`'s locks within `offset`, `length` on `file`, as
    /// `(offset, length, kind)`: what [`LockManager::restore`] puts back.
    pub fn held_in(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        offset: u64,
        length: u64,
    ) -> Vec<(u64, u64, LockKind)> {
        let Some((s, e)) = span(offset, length) else {
            return Vec::new();
        };
        let files = self.file_shard(&file).lock().unwrap();
        let Some(list) = files.get(&file).and_then(|st| st.owners.get(owner)) else {
            return Vec::new();
        };
        let i = list.partition_point(|g| g.last < s);
        list[i..]
            .iter()
            .take_while(|g| g.start <= e)
            .map(|g| {
                let (a, b) = (g.start.max(s), g.last.min(e));
                (a, wire_length(a, b), g.kind)
            })
            .collect()
    }

    /// Undoes a grant: `owner`'s locks within `offset`, `length` become
    /// `prev` again (what [`LockManager::held_in`] said before the grant),
    /// with no conflict check (they were held a moment ago). Waiters that
    /// fit now are served.
    pub fn restore(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        offset: u64,
        length: u64,
        prev: &[(u64, u64, LockKind)],
    ) {
        let Some((s, e)) = span(offset, length) else {
            return;
        };
        let mut idx = self.owner_shard(owner.client).lock().unwrap();
        let mut files = self.file_shard(&file).lock().unwrap();
        let st = files.entry(file).or_default();
        st.set(owner, s, e, None);
        for &(o, l, k) in prev {
            if let Some((ps, pe)) = span(o, l) {
                st.set(owner, ps, pe, Some(k));
            }
        }
        st.wake();
        let keep = st.holds_or_waits(owner);
        if st.is_empty() {
            files.remove(&file);
        }
        if keep {
            index_add(&mut idx, owner, file);
        } else {
            index_remove(&mut idx, owner, &file);
        }
        drop(files);
        drop(idx);
        self.note_release(file, owner, s, e);
    }

    /// Installs the hook consulted on a conflict (the NFSv4 server's
    /// courtesy rule); NLM and NFSv4 requests alike go through it.
    pub fn set_conflict_hook(&self, hook: ConflictHook) {
        *self.hook.write().unwrap() = Some(hook);
    }

    /// Whether the hook released the conflicting client. Called with no
    /// shard held: the hook takes the NFSv4 state lock, which calls back
    /// into this manager to release the client's locks.
    fn resolve(&self, c: &Conflict, me: &OwnerKey) -> bool {
        if c.owner.client == me.client {
            return false;
        }
        self.hook
            .read()
            .unwrap()
            .as_ref()
            .is_some_and(|h| h(c.owner.client))
    }

    /// Runs `attempt` until it finds no conflict, or one whose holder the
    /// hook does not release (as Linux's posix_lock_file and
    /// posix_test_lock let a courteous holder go).
    fn resolving(
        &self,
        me: &OwnerKey,
        mut attempt: impl FnMut() -> Option<Conflict>,
    ) -> Result<(), Conflict> {
        for _ in 0..MAX_RESOLVE {
            match attempt() {
                None => return Ok(()),
                Some(c) if !self.resolve(&c, me) => return Err(c),
                Some(_) => {}
            }
        }
        attempt().map_or(Ok(()), Err)
    }

    fn file_shard(&self, f: &FileKey) -> &Mutex<HashMap<FileKey, FileState>> {
        &self.files[self.hasher.hash_one(f) as usize % SHARDS]
    }

    fn owner_shard(&self, client: u64) -> &Mutex<HashMap<u64, ClientIndex>> {
        // Client ids are counters or random; mix so consecutive ids spread.
        &self.owners[(client.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SHARDS]
    }

    /// Acquires, upgrades or downgrades a lock. Err names one conflicting lock
    /// of another owner; nothing changes then.
    pub fn lock(&self, file: FileKey, owner: &OwnerKey, r: LockRange) -> Result<(), Conflict> {
        self.resolving(owner, || match self.lock_inner(file, owner, r, None) {
            Outcome::Granted => None,
            Outcome::Conflict(c, _) => Some(c),
        })
    }

    /// Like [`LockManager::lock`], but on conflict queues a waiter that is
    /// served once the range is free (see the module docs).
    pub fn lock_or_wait(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        r: LockRange,
        mode: WaitMode,
    ) -> Attempt {
        // Clear conflicts with courteous clients first; only a conflict
        // that stays queues a waiter.
        if self.lock(file, owner, r).is_ok() {
            return Attempt::Granted;
        }
        match self.lock_inner(file, owner, r, Some(mode)) {
            Outcome::Granted => Attempt::Granted,
            Outcome::Conflict(c, w) => Attempt::Queued(c, w.expect("queued when a mode is given")),
        }
    }

    fn lock_inner(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        r: LockRange,
        wait: Option<WaitMode>,
    ) -> Outcome {
        let kind = r.kind;
        let Some((s, e)) = span(r.offset, r.length) else {
            return Outcome::Granted;
        };
        let mut idx = self.owner_shard(owner.client).lock().unwrap();
        let mut files = self.file_shard(&file).lock().unwrap();
        let st = files.entry(file).or_default();
        if let Some(c) = st.conflict(owner, s, e, kind) {
            let waiter = wait.map(|mode| {
                let (tx, rx) = oneshot::channel();
                let id = WaitId(self.next_wait.fetch_add(1, Ordering::Relaxed));
                st.waiters.push_back(QueuedWait {
                    id,
                    owner: owner.clone(),
                    kind,
                    start: s,
                    last: e,
                    mode,
                    tx,
                });
                Waiter { id, file, rx }
            });
            if waiter.is_some() {
                index_add(&mut idx, owner, file);
            } else if st.is_empty() {
                files.remove(&file);
            }
            return Outcome::Conflict(c, waiter);
        }
        st.set(owner, s, e, Some(kind));
        // A downgrade (write → read) may let readers in.
        if !st.waiters.is_empty() {
            st.wake();
        }
        index_add(&mut idx, owner, file);
        Outcome::Granted
    }

    /// Whether `kind` on the range could be granted to `owner` now; changes nothing.
    pub fn test(&self, file: FileKey, owner: &OwnerKey, r: LockRange) -> Result<(), Conflict> {
        let Some((s, e)) = span(r.offset, r.length) else {
            return Ok(());
        };
        self.resolving(owner, || {
            let files = self.file_shard(&file).lock().unwrap();
            files
                .get(&file)
                .and_then(|st| st.conflict(owner, s, e, r.kind))
        })
    }

    /// Unlocks a range of `owner`'s locks, splitting as needed; unlocking
    /// what is not held is not an error. Waiters that fit now are served.
    pub fn unlock(&self, file: FileKey, owner: &OwnerKey, offset: u64, length: u64) {
        let Some((s, e)) = span(offset, length) else {
            return;
        };
        let mut idx = self.owner_shard(owner.client).lock().unwrap();
        let mut files = self.file_shard(&file).lock().unwrap();
        let Some(st) = files.get_mut(&file) else {
            return;
        };
        st.set(owner, s, e, None);
        st.wake();
        let keep = st.holds_or_waits(owner);
        if st.is_empty() {
            files.remove(&file);
        }
        if !keep {
            index_remove(&mut idx, owner, &file);
        }
        drop(files);
        drop(idx);
        self.note_release(file, owner, s, e);
    }

    /// Removes a queued waiter (NLM CANCEL). Returns false if it is no longer
    /// queued (already served, or released).
    pub fn cancel_wait(&self, file: FileKey, owner: &OwnerKey, id: WaitId) -> bool {
        let mut idx = self.owner_shard(owner.client).lock().unwrap();
        let mut files = self.file_shard(&file).lock().unwrap();
        let Some(st) = files.get_mut(&file) else {
            return false;
        };
        let Some(i) = st.waiters.iter().position(|w| w.id == id) else {
            return false;
        };
        st.waiters.remove(i);
        let keep = st.holds_or_waits(owner);
        if st.is_empty() {
            files.remove(&file);
        }
        if !keep {
            index_remove(&mut idx, owner, &file);
        }
        true
    }

    /// Releases every lock and waiter of `owner` on every file; the cost
    /// is proportional to the number of files the owner has state on.
    pub fn release_owner(&self, owner: &OwnerKey) {
        let mut idx = self.owner_shard(owner.client).lock().unwrap();
        let Some(client) = idx.get_mut(&owner.client) else {
            return;
        };
        let Some(files) = client.remove(&owner.owner) else {
            return;
        };
        if client.is_empty() {
            idx.remove(&owner.client);
        }
        for f in files {
            self.drop_owner_on(f, |o| o == owner);
        }
    }

    /// Releases everything every owner of `client` holds (lease expiry,
    /// NLM FREE_ALL, an NSM reboot notification); the cost is proportional
    /// to that client's state only.
    pub fn release_client(&self, client: u64) {
        let mut idx = self.owner_shard(client).lock().unwrap();
        let Some(owners) = idx.remove(&client) else {
            return;
        };
        // Several owners of one client often share a file: visit it once.
        let files: HashSet<FileKey> = owners.into_values().flatten().collect();
        for f in files {
            self.drop_owner_on(f, |o| o.client == client);
        }
        drop(idx);
    }

    /// Removes the locks and waiters of the owners matching `which` on one file.
    fn drop_owner_on(&self, f: FileKey, which: impl Fn(&OwnerKey) -> bool) {
        let mut files = self.file_shard(&f).lock().unwrap();
        let Entry::Occupied(mut ent) = files.entry(f) else {
            return;
        };
        let st = ent.get_mut();
        let mut gone = Vec::new();
        st.owners.retain(|o, _| {
            let keep = !which(o);
            if !keep {
                gone.push(o.clone());
            }
            keep
        });
        // Dropping a waiter's sender tells its task it was removed.
        st.waiters.retain(|w| !which(&w.owner));
        st.wake();
        if st.is_empty() {
            ent.remove();
        }
        drop(files);
        for o in gone {
            self.note_release(f, &o, 0, u64::MAX);
        }
    }

    /// Whether `owner` holds any lock (NFSv4 RELEASE_LOCKOWNER answers
    /// NFS4ERR_LOCKS_HELD then). Cost: the owner's files.
    pub fn owner_holds(&self, owner: &OwnerKey) -> bool {
        let idx = self.owner_shard(owner.client).lock().unwrap();
        let Some(files) = idx.get(&owner.client).and_then(|c| c.get(&owner.owner)) else {
            return false;
        };
        files.iter().any(|f| {
            let shard = self.file_shard(f).lock().unwrap();
            shard.get(f).is_some_and(|st| st.owners.contains_key(owner))
        })
    }

    /// Whether a lock of `client` keeps another owner's queued request
    /// waiting. Cost: the client's files.
    pub fn client_blocks_waiters(&self, client: u64) -> bool {
        let idx = self.owner_shard(client).lock().unwrap();
        let Some(owners) = idx.get(&client) else {
            return false;
        };
        let files: HashSet<FileKey> = owners.values().flatten().copied().collect();
        drop(idx);
        files.into_iter().any(|f| {
            let shard = self.file_shard(&f).lock().unwrap();
            shard.get(&f).is_some_and(|st| {
                st.waiters.iter().any(|w| {
                    w.owner.client != client
                        && st.owners.iter().any(|(o, list)| {
                            o.client == client
                                && find_conflict(list, w.start, w.last, w.kind).is_some()
                        })
                })
            })
        })
    }

    /// Whether any owner of `client` holds a lock or waits for one.
    pub fn client_has_state(&self, client: u64) -> bool {
        self.owner_shard(client)
            .lock()
            .unwrap()
            .contains_key(&client)
    }

    /// Whether owners of other clients than `client` (NLM hosts included)
    /// hold locks on `file`.
    pub fn locked_by_others(&self, file: FileKey, client: u64) -> bool {
        let files = self.file_shard(&file).lock().unwrap();
        files.get(&file).is_some_and(|st| {
            st.owners
                .iter()
                .any(|(o, list)| o.client != client && !list.is_empty())
        })
    }

    /// The locks on a file, each `(owner, offset, length, kind)`, sorted;
    /// for diagnostics and tests.
    pub fn locks_on(&self, file: FileKey) -> Vec<(OwnerKey, u64, u64, LockKind)> {
        let files = self.file_shard(&file).lock().unwrap();
        let mut v: Vec<_> = files
            .get(&file)
            .into_iter()
            .flat_map(|st| st.owners.iter())
            .flat_map(|(o, list)| {
                list.iter()
                    .map(move |g| (o.clone(), g.start, wire_length(g.start, g.last), g.kind))
            })
            .collect();
        v.sort_by(|a, b| (a.0.client, &a.0.owner, a.1).cmp(&(b.0.client, &b.0.owner, b.1)));
        v
    }

    /// Number of files with lock state (locks or waiters).
    pub fn file_count(&self) -> usize {
        self.files.iter().map(|s| s.lock().unwrap().len()).sum()
    }
}

fn index_add(idx: &mut HashMap<u64, ClientIndex>, owner: &OwnerKey, file: FileKey) {
    idx.entry(owner.client)
        .or_default()
        .entry(owner.owner.clone())
        .or_default()
        .insert(file);
}

fn index_remove(idx: &mut HashMap<u64, ClientIndex>, owner: &OwnerKey, file: &FileKey) {
    let Some(c) = idx.get_mut(&owner.client) else {
        return;
    };
    if let Some(fs) = c.get_mut(&owner.owner) {
        fs.remove(file);
        if fs.is_empty() {
            c.remove(&owner.owner);
        }
    }
    if c.is_empty() {
        idx.remove(&owner.client);
    }
}

#[cfg(test)]
mod tests;
