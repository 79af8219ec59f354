//! LOOKUP answers, and the attributes of directories looked up in, kept
//! while fanotify reports nothing about them ([`super::changes`]).
//!
//! A LOOKUP asks the kernel four or five things (the directory's attributes,
//! `openat2` of the name, its handle and attributes, a close). Clients look
//! the same names up again and again (every path walk, every `stat` after
//! the attribute cache timed out), and a name in a directory names the same
//! object until an entry of that directory is created, removed or renamed,
//! which is an event on the directory. So an answer is used while neither
//! the directory nor the object has had an event since it was fetched.
//!
//! Bounded at [`KNOWN_NAMES`] answers (about 250 bytes each), least recently
//! used first out, in [`SHARDS`] shards.

use super::changes::{Changes, Snapshot};
use crate::Fid;
use std::sync::Mutex;

/// Answers kept at most.
pub const KNOWN_NAMES: usize = 65_536;
const SHARDS: usize = 16;

struct Entry {
    dir: Fid,
    name: Box<[u8]>,
    fid: Fid,
    st: libc::stat,
    seq: Snapshot,
}

pub struct Known {
    shards: Vec<Mutex<lru::LruCache<u64, Entry>>>,
}

impl Known {
    pub fn new(cap: usize) -> Known {
        let per = std::num::NonZeroUsize::new(cap.div_ceil(SHARDS).max(1)).unwrap();
        Known {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(lru::LruCache::new(per)))
                .collect(),
        }
    }

    /// The kept answer for `name` in `dir` (the empty name: `dir` itself),
    /// if current as of the last [`Changes::sync`].
    pub fn get(&self, changes: &Changes, dir: &Fid, name: &[u8]) -> Option<(Fid, libc::stat)> {
        let h = key(dir, name);
        let mut shard = self.shards[h as usize % SHARDS].lock().unwrap();
        let e = shard.get(&h)?;
        if e.dir != *dir || *e.name != *name {
            return None;
        }
        let current = changes.unchanged(dir, e.seq) && changes.unchanged(&e.fid, e.seq);
        if !current {
            shard.pop(&h);
            return None;
        }
        Some((e.fid, e.st))
    }

    /// Keeps an answer fetched after `seq`.
    pub fn put(&self, dir: &Fid, name: &[u8], fid: Fid, st: libc::stat, seq: Snapshot) {
        let h = key(dir, name);
        let e = Entry {
            dir: *dir,
            name: name.into(),
            fid,
            st,
            seq,
        };
        self.shards[h as usize % SHARDS].lock().unwrap().put(h, e);
    }
}

/// A hash of the directory's fid and the name. Two keys that collide share
/// a place (the later one wins), never an answer: entries keep both.
fn key(dir: &Fid, name: &[u8]) -> u64 {
    super::changes::fnv1a(&[dir.as_bytes(), &[0xff], name])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u8) -> Fid {
        Fid::new(&[1, n]).unwrap()
    }

    fn st(size: i64) -> libc::stat {
        let mut s = super::super::sys::zero_stat();
        s.st_size = size;
        s
    }

    #[test]
    fn answers_are_found_by_directory_and_name() {
        let c = Changes::following_nothing_for_tests();
        let k = Known::new(64);
        let seq = c.sync();
        k.put(&fid(1), b"a", fid(2), st(5), seq);
        k.put(&fid(1), b"", fid(1), st(4096), seq);
        assert_eq!(k.get(&c, &fid(1), b"a").unwrap().1.st_size, 5);
        assert_eq!(k.get(&c, &fid(1), b"").unwrap().0, fid(1));
        assert!(k.get(&c, &fid(1), b"b").is_none());
        assert!(k.get(&c, &fid(3), b"a").is_none());
    }

    #[test]
    fn answers_go_when_the_directory_or_the_object_changes() {
        let c = Changes::following_nothing_for_tests();
        let k = Known::new(64);
        k.put(&fid(1), b"a", fid(2), st(5), c.sync());
        k.put(&fid(1), b"b", fid(3), st(6), c.sync());
        k.put(&fid(4), b"c", fid(5), st(7), c.sync());
        c.changed_for_tests(&fid(2));
        assert!(k.get(&c, &fid(1), b"a").is_none(), "the object changed");
        assert!(k.get(&c, &fid(1), b"b").is_some());
        c.changed_for_tests(&fid(1));
        assert!(k.get(&c, &fid(1), b"b").is_none(), "the directory changed");
        assert!(k.get(&c, &fid(4), b"c").is_some());
        // Fetched after the change: current again.
        k.put(&fid(1), b"b", fid(3), st(6), c.sync());
        assert!(k.get(&c, &fid(1), b"b").is_some());
    }

    #[test]
    fn bounded() {
        let c = Changes::following_nothing_for_tests();
        let k = Known::new(SHARDS);
        for i in 0..200u8 {
            k.put(&fid(1), &[i], fid(i), st(1), c.sync());
        }
        let kept: usize = k.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(kept <= SHARDS, "{kept}");
    }
}
