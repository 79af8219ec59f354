//! The CephFS backend's open-file cache: one libcephfs handle per file,
//! kept between NFS calls.
//!
//! Opening a file in libcephfs (`ceph_ll_open`) and closing it again on
//! every READ and WRITE costs several trips through the client lock, and
//! the close gives up what the open won: the capabilities that let the
//! client cache data and attributes, its readahead state, its buffered
//! writes (which the close flushes). So a handle stays open after the call
//! that opened it: until it has been idle for a while, the cache is full
//! (the least recently used goes), the file loses a name through this
//! head, a delegation on it is taken, or the export goes. A handle open
//! for writing also ends sooner (see [`WRITE_IDLE`]).
//!
//! A handle evicted while a call still uses it closes when that call ends
//! (values are `Arc`s). Each shard is an O(1) LRU, and the idle sweep pops
//! from the least recently used end only, so no operation walks the table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Fid;

const SHARDS: usize = 16;

/// Defaults: how many files, and how long one stays open unused. The idle
/// time is short because a handle kept open has costs outside this head: a
/// file removed through another head keeps its space until it closes here,
/// and one kept open for writing stops other heads (and this one) from
/// taking a read delegation on it.
pub const DEFAULT_MAX: usize = 4096;
pub const DEFAULT_IDLE: Duration = Duration::from_secs(5);
/// A handle open for writing is kept at most this long unused, and ends at
/// a COMMIT or a CLOSE: while one is open, the MDS keeps every other head
/// reading the file in the shared (uncached) mode, and with libcephfs 16.2
/// a read through another head then stalled for 10-15 s (a capability
/// revoke acknowledged late): in 3 of 8 two-head test runs with such
/// handles kept 0.1-5 s unused, in none of 15 tries once a COMMIT had
/// closed it.
pub const WRITE_IDLE: Duration = Duration::from_millis(250);

struct Slot<V> {
    fid: Fid,
    v: Arc<V>,
    used: Instant,
}

/// Kept values by inode number, each with the fid it was opened for.
pub struct OpenFiles<V> {
    shards: Vec<Mutex<lru::LruCache<u64, Slot<V>>>>,
    idle: Duration,
    len: AtomicU64,
    opened: AtomicU64,
}

impl<V> OpenFiles<V> {
    pub fn new(max: usize, idle: Duration) -> OpenFiles<V> {
        let per = std::num::NonZeroUsize::new(max.div_ceil(SHARDS).max(1)).unwrap();
        OpenFiles {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(lru::LruCache::new(per)))
                .collect(),
            idle,
            len: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        }
    }

    fn shard(&self, ino: u64) -> &Mutex<lru::LruCache<u64, Slot<V>>> {
        &self.shards[(ino % SHARDS as u64) as usize]
    }

    /// The value kept for `ino`, if it was opened for this very fid (an
    /// inode number alone could name a file since removed).
    pub fn get(&self, ino: u64, fid: &Fid) -> Option<Arc<V>> {
        let mut s = self.shard(ino).lock().unwrap();
        let slot = s.get_mut(&ino)?;
        if slot.fid != *fid {
            return None;
        }
        slot.used = Instant::now();
        Some(slot.v.clone())
    }

    /// Keeps `v` for `ino` (replacing what was kept), evicting the least
    /// recently used of its shard when full. What leaves is dropped after
    /// the shard's lock is let go.
    pub fn insert(&self, ino: u64, fid: Fid, v: Arc<V>) {
        self.opened.fetch_add(1, Ordering::Relaxed);
        let slot = Slot {
            fid,
            v,
            used: Instant::now(),
        };
        // Something out (the same inode's, or the least recently used):
        // the count stays.
        let out = self.shard(ino).lock().unwrap().push(ino, slot);
        if out.is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        drop(out);
    }

    /// Stops keeping `ino`'s value, returning it.
    pub fn remove(&self, ino: u64) -> Option<Arc<V>> {
        let out = self.shard(ino).lock().unwrap().pop(&ino);
        out.map(|slot| {
            self.len.fetch_sub(1, Ordering::Relaxed);
            slot.v
        })
    }

    /// Drops what has not been used for the idle time as of `now`; how
    /// many left.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let mut n = 0;
        for shard in &self.shards {
            let mut out = Vec::new();
            {
                let mut s = shard.lock().unwrap();
                while s
                    .peek_lru()
                    .is_some_and(|(_, slot)| now.saturating_duration_since(slot.used) >= self.idle)
                {
                    out.extend(s.pop_lru());
                }
            }
            n += out.len();
            self.len.fetch_sub(out.len() as u64, Ordering::Relaxed);
        }
        n
    }

    /// How many are kept now.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    /// How many were opened since the start.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    pub fn idle(&self) -> Duration {
        self.idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u8) -> Fid {
        Fid::new(&[n; super::super::FID_LEN]).unwrap()
    }

    #[test]
    fn bounded_by_least_recent_use_and_idle_time() {
        // One slot per shard: inodes 0 and 16 share shard 0.
        let c = OpenFiles::new(SHARDS, Duration::from_secs(5));
        c.insert(0, fid(0), Arc::new("a"));
        c.insert(1, fid(1), Arc::new("b"));
        assert_eq!(c.len(), 2);
        let held = c.get(0, &fid(0)).unwrap();
        c.insert(16, fid(16), Arc::new("c"));
        assert_eq!(c.len(), 2, "0 left shard 0 for 16");
        assert!(c.get(0, &fid(0)).is_none());
        // Still usable by whoever had it.
        assert_eq!(*held, "a");
        // Another fid for the same inode number is not the kept file.
        assert!(c.get(16, &fid(99)).is_none());
        assert!(c.get(16, &fid(16)).is_some());
        let later = Instant::now() + Duration::from_secs(6);
        assert_eq!(c.evict_idle(Instant::now()), 0);
        assert_eq!(c.evict_idle(later), 2);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn replacing_and_removing_keep_the_count() {
        let c = OpenFiles::new(64, Duration::from_secs(5));
        c.insert(3, fid(3), Arc::new(1));
        c.insert(3, fid(3), Arc::new(2));
        assert_eq!(c.len(), 1);
        assert_eq!(*c.get(3, &fid(3)).unwrap(), 2);
        assert_eq!(c.remove(3).as_deref(), Some(&2));
        assert!(c.remove(3).is_none());
        assert_eq!((c.len(), c.opened()), (0, 2));
    }
}
