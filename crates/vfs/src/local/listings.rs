//! Directory listings kept in memory, with each entry's handle and
//! attributes: a repeated listing (every `ls -l`) is answered without asking
//! the kernel anything.
//!
//! Reading a directory costs the kernel work per entry (ext4 hashes every
//! name into a tree on each pass), and READDIRPLUS adds two path lookups per
//! entry for its handle and attributes. A listing read in full, from cookie 0
//! to the end, is kept (a [`Recording`] rides along with the directory
//! stream until it reaches the end) and serves later pages as long as the
//! directory has had no event since its first entry was read
//! ([`super::changes`]: any entry created, removed or renamed in it, or the
//! directory itself changed). An entry's handle and attributes are used while
//! that object has had no event since they were fetched; otherwise they are
//! fetched again and kept for the next pass.
//!
//! Memory is bounded: at most [`LISTED_ENTRIES`] entries in kept listings
//! (least recently used listings go first) and as many again in recordings
//! under way (beyond that a recording is abandoned and its directory read as
//! before). An entry takes about 200 bytes.

use super::changes::Snapshot;
use crate::{Attr, Fid};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Entries kept at most, over all listings (and again in recordings).
pub const LISTED_ENTRIES: usize = 262_144;

/// One entry of a listing.
pub struct Slot {
    /// The name in [`Listing::names`], with its NUL.
    name: (u32, u32),
    pub ino: u64,
    pub cookie: u64,
    /// Handle and attributes, current while unchanged since `plus_seq`.
    pub plus: Option<(Fid, Attr)>,
    pub plus_seq: Snapshot,
}

/// A directory's entries in the order `getdents64` gave them.
pub struct Listing {
    /// Events applied before the first entry was read.
    pub seq: Snapshot,
    /// The directory itself, as of the end of the pass.
    pub dst: libc::stat,
    names: Vec<u8>,
    slots: Vec<Slot>,
    /// Index of the entry with each cookie.
    by_cookie: HashMap<u64, u32>,
}

impl Listing {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    pub fn slot_mut(&mut self, i: usize) -> &mut Slot {
        &mut self.slots[i]
    }

    /// The entry's name, with its NUL terminator.
    pub fn name_nul(&self, i: usize) -> &[u8] {
        let (at, len) = self.slots[i].name;
        &self.names[at as usize..(at + len) as usize]
    }

    /// Where a page after `cookie` starts; `None` for a cookie this listing
    /// never gave.
    pub fn start_after(&self, cookie: u64) -> Option<usize> {
        if cookie == 0 {
            return Some(0);
        }
        self.by_cookie.get(&cookie).map(|&i| i as usize + 1)
    }
}

/// A listing being read, page by page.
pub struct Recording {
    listing: Listing,
    budget: Arc<AtomicUsize>,
}

impl Recording {
    /// Events applied before the first entry was read.
    pub fn seq(&self) -> Snapshot {
        self.listing.seq
    }

    /// Adds the next entry; false once the recording is over budget (drop
    /// it then).
    pub fn push(
        &mut self,
        name: &[u8],
        ino: u64,
        cookie: u64,
        plus: Option<(Fid, Attr)>,
        plus_seq: Snapshot,
    ) -> bool {
        let take = |b: usize| b.checked_sub(1);
        if self
            .budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, take)
            .is_err()
        {
            return false;
        }
        let l = &mut self.listing;
        let at = l.names.len() as u32;
        l.names.extend_from_slice(name);
        l.names.push(0);
        l.by_cookie.insert(cookie, l.slots.len() as u32);
        l.slots.push(Slot {
            name: (at, name.len() as u32 + 1),
            ino,
            cookie,
            plus,
            plus_seq,
        });
        true
    }
}

impl Recording {
    /// The listing, its entries no longer counted as under way.
    fn take(&mut self) -> Listing {
        let l = std::mem::replace(&mut self.listing, empty_listing());
        self.budget.fetch_add(l.slots.len(), Ordering::Relaxed);
        l
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.budget
            .fetch_add(self.listing.slots.len(), Ordering::Relaxed);
    }
}

/// The kept listings, by directory.
pub struct Listings {
    inner: Mutex<Inner>,
    cap: usize,
    /// Entries that recordings under way may still take.
    recording: Arc<AtomicUsize>,
    /// Pages served from kept listings.
    served: AtomicUsize,
}

pub type Kept = Arc<RwLock<Listing>>;

struct Inner {
    /// Each listing with its length, so that counting never waits for a
    /// listing's lock.
    lru: lru::LruCache<Fid, (usize, Kept)>,
    entries: usize,
}

impl Listings {
    pub fn new(cap: usize) -> Listings {
        Listings {
            inner: Mutex::new(Inner {
                lru: lru::LruCache::unbounded(),
                entries: 0,
            }),
            cap,
            recording: Arc::new(AtomicUsize::new(cap)),
            served: AtomicUsize::new(0),
        }
    }

    /// Starts recording a pass over a directory whose first entry is read
    /// after `seq`.
    pub fn record(&self, seq: Snapshot) -> Recording {
        Recording {
            listing: Listing {
                seq,
                ..empty_listing()
            },
            budget: self.recording.clone(),
        }
    }

    pub fn get(&self, dir: &Fid) -> Option<Kept> {
        self.inner
            .lock()
            .unwrap()
            .lru
            .get(dir)
            .map(|(_, k)| k.clone())
    }

    /// Keeps a finished pass over `dir`, whose state at its end was `dst`.
    pub fn put(&self, dir: Fid, mut r: Recording, dst: libc::stat) {
        let n = r.listing.slots.len();
        if n > self.cap {
            return;
        }
        let mut listing = r.take();
        listing.dst = dst;
        let mut dropped = Vec::new();
        let mut g = self.inner.lock().unwrap();
        if let Some((_, (len, old))) = g.lru.push(dir, (n, Arc::new(RwLock::new(listing)))) {
            g.entries -= len;
            dropped.push(old);
        }
        g.entries += n;
        while g.entries > self.cap {
            let Some((_, (len, old))) = g.lru.pop_lru() else {
                break;
            };
            g.entries -= len;
            dropped.push(old);
        }
        drop(g);
        drop(dropped);
    }

    /// Forgets `dir`'s listing if it is still `which`.
    pub fn remove(&self, dir: &Fid, which: &Kept) {
        let mut g = self.inner.lock().unwrap();
        if g.lru.peek(dir).is_some_and(|(_, k)| Arc::ptr_eq(k, which)) {
            if let Some((len, _)) = g.lru.pop(dir) {
                g.entries -= len;
            }
        }
    }

    /// Counts a page served from a kept listing.
    pub fn served_one(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// Pages served from kept listings so far.
    #[cfg(test)]
    pub fn served(&self) -> usize {
        self.served.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.inner.lock().unwrap().entries
    }
}

fn empty_listing() -> Listing {
    Listing {
        seq: Snapshot(0),
        dst: super::sys::zero_stat(),
        names: Vec::new(),
        slots: Vec::new(),
        by_cookie: HashMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u8) -> Fid {
        Fid::new(&[1, n]).unwrap()
    }

    fn recorded(l: &Listings, names: &[&str]) -> Recording {
        let mut r = l.record(Snapshot(3));
        for (i, n) in names.iter().enumerate() {
            assert!(r.push(
                n.as_bytes(),
                100 + i as u64,
                10 * (i as u64 + 1),
                None,
                Snapshot(3)
            ));
        }
        r
    }

    #[test]
    fn pages_resume_after_the_cookie_they_gave() {
        let l = Listings::new(100);
        l.put(
            fid(1),
            recorded(&l, &[".", "..", "a", "bb"]),
            super::super::sys::zero_stat(),
        );
        let k = l.get(&fid(1)).unwrap();
        let k = k.read().unwrap();
        assert_eq!(k.len(), 4);
        assert_eq!(k.name_nul(3), b"bb\0");
        assert_eq!(k.slot(2).ino, 102);
        assert_eq!(k.start_after(0), Some(0));
        assert_eq!(k.start_after(30), Some(3));
        assert_eq!(k.start_after(40), Some(4));
        assert_eq!(k.start_after(35), None);
        assert_eq!(k.seq, Snapshot(3));
    }

    #[test]
    fn kept_and_recorded_entries_are_bounded() {
        let l = Listings::new(5);
        l.put(
            fid(1),
            recorded(&l, &["a", "b", "c"]),
            super::super::sys::zero_stat(),
        );
        l.put(
            fid(2),
            recorded(&l, &["a", "b"]),
            super::super::sys::zero_stat(),
        );
        assert_eq!(l.entries(), 5);
        // A third listing pushes out the least recently used.
        assert!(l.get(&fid(1)).is_some());
        l.put(fid(3), recorded(&l, &["a"]), super::super::sys::zero_stat());
        assert!(l.get(&fid(2)).is_none());
        assert!(l.get(&fid(1)).is_some());
        assert_eq!(l.entries(), 4);
        // Too big to keep.
        let big = Listings::new(2);
        let mut r = big.record(Snapshot(0));
        assert!(r.push(b"a", 1, 1, None, Snapshot(0)));
        assert!(r.push(b"b", 2, 2, None, Snapshot(0)));
        assert!(
            !r.push(b"c", 3, 3, None, Snapshot(0)),
            "over the recording budget"
        );
        let other = big.record(Snapshot(0));
        drop(r);
        // The abandoned recording gave its budget back.
        let mut other = other;
        assert!(other.push(b"x", 1, 1, None, Snapshot(0)));
        // Replacing and removing keep the count right.
        l.put(
            fid(3),
            recorded(&l, &["a", "b"]),
            super::super::sys::zero_stat(),
        );
        assert_eq!(l.entries(), 5);
        let k = l.get(&fid(3)).unwrap();
        l.remove(&fid(3), &k);
        assert_eq!(l.entries(), 3);
    }
}
