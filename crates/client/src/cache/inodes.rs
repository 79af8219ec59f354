//! One mount's inodes: the numbers handed to the kernel and the handles
//! and attributes behind them. Each mount owns its table (nothing global),
//! so unmounting or flushing one mount walks only its own inodes.
//!
//! An inode lives while the kernel holds lookups on it (FUSE's `nlookup`,
//! dropped by FORGET) or while it is open; a hard link found under another
//! name is the same inode (one number per handle).
//!
//! The number is the server's fileid when that is free: the kernel reports
//! a FUSE inode's number as st_ino (an entry reply carries one number for
//! both the node id and st_ino in fuser), so `ls -i` on the mount shows
//! what it shows on a kernel NFS mount. A fileid that is 0, the root's
//! number, or held by another handle (a second file system under the
//! export, a fileid the server reused while the kernel still holds the old
//! file) gets a spare number from the top half instead.

use super::attr::{AcOptions, CachedAttr};
use crate::remote::{Attr, Fh};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// FUSE's root inode number.
pub const ROOT: u64 = 1;

/// The first spare number (for a fileid that cannot be used): fileids
/// this large are rare, and a clash is checked anyway.
pub const SPARE: u64 = 1 << 63;

#[derive(Clone, Debug)]
pub struct Inode {
    pub fh: Fh,
    pub attr: CachedAttr,
    /// Lookups the kernel holds (replies that handed out this number).
    pub nlookup: u64,
    /// Open files on it (kept while > 0 even when forgotten).
    pub opens: u32,
    /// Where it was last found (an NFSv4 LOCK opens the file by name).
    pub parent: u64,
    pub name: String,
    /// When last handed to the kernel or asked about (the table's clock).
    pub used: u64,
}

impl Inode {
    /// Bytes this entry holds, counted for the table's total.
    fn cost(&self) -> usize {
        std::mem::size_of::<Inode>()
            + self.fh.0.len()
            + self.name.len()
            + self.attr.attr.owner.as_ref().map_or(0, |s| s.len())
            + self.attr.attr.group.as_ref().map_or(0, |s| s.len())
            // The reverse map's key and slot, the name index's and the
            // LRU order's entries.
            + self.fh.0.len()
            + 2 * std::mem::size_of::<u64>()
            + self.name.len()
            + 3 * std::mem::size_of::<u64>()
            + 2 * std::mem::size_of::<u64>()
    }
}

/// Counts for `tarn mount --stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    pub inodes: usize,
    pub bytes: usize,
    pub forgotten: u64,
}

#[derive(Debug, Default)]
pub struct InodeTable {
    nodes: HashMap<u64, Inode>,
    by_fh: HashMap<Fh, u64>,
    /// (parent, name) → the inode last found there: rename and remove
    /// find theirs without walking the table.
    by_name: HashMap<(u64, String), u64>,
    /// Least recently used first (`Inode::used` → number): eviction takes
    /// from the front instead of sorting the table.
    lru: BTreeMap<u64, u64>,
    next: u64,
    clock: u64,
    bytes: usize,
    forgotten: u64,
}

impl InodeTable {
    pub fn new(root: Fh, attr: Attr, now: Instant, ac: &AcOptions) -> InodeTable {
        let mut t = InodeTable {
            next: SPARE,
            ..Default::default()
        };
        let n = Inode {
            fh: root.clone(),
            attr: CachedAttr::new(attr, now, ac),
            // The root is never forgotten.
            nlookup: 1,
            opens: 0,
            parent: ROOT,
            name: String::new(),
            used: 0,
        };
        t.bytes += n.cost();
        t.by_fh.insert(root, ROOT);
        t.lru.insert(0, ROOT);
        t.nodes.insert(ROOT, n);
        t
    }

    pub fn get(&self, ino: u64) -> Option<&Inode> {
        self.nodes.get(&ino)
    }

    /// The inode number of `fh`, if it is in the table.
    pub fn ino_of(&self, fh: &Fh) -> Option<u64> {
        self.by_fh.get(fh).copied()
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Inode> {
        self.nodes.get_mut(&ino)
    }

    /// The inode for `fh` found as `parent/name`, one more lookup held by
    /// the kernel; the attributes refreshed. Returns its number.
    pub fn found(
        &mut self,
        fh: Fh,
        attr: Attr,
        parent: u64,
        name: &str,
        now: Instant,
        ac: &AcOptions,
    ) -> u64 {
        self.clock += 1;
        let used = self.clock;
        if let Some(&ino) = self.by_fh.get(&fh) {
            self.mark_used(ino, used);
            self.place(ino, parent, name);
            let n = self.nodes.get_mut(&ino).expect("maps agree");
            n.nlookup += 1;
            n.attr.refresh(attr, now, ac);
            return ino;
        }
        let ino = self.number_for(attr.fileid);
        let n = Inode {
            fh: fh.clone(),
            attr: CachedAttr::new(attr, now, ac),
            nlookup: 1,
            opens: 0,
            parent,
            name: name.to_string(),
            used,
        };
        self.bytes += n.cost();
        self.by_fh.insert(fh, ino);
        self.by_name.insert((parent, name.to_string()), ino);
        self.lru.insert(used, ino);
        self.nodes.insert(ino, n);
        ino
    }

    /// The server's fileid if no other inode has it as its number, else
    /// the next free spare number.
    fn number_for(&mut self, fileid: Option<u64>) -> u64 {
        if let Some(f) = fileid.filter(|&f| f > ROOT && !self.nodes.contains_key(&f)) {
            return f;
        }
        loop {
            let n = self.next;
            self.next = self.next.checked_add(1).unwrap_or(SPARE);
            if !self.nodes.contains_key(&n) {
                return n;
            }
        }
    }

    /// Moves `ino` to the back of the LRU order.
    fn mark_used(&mut self, ino: u64, used: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            self.lru.remove(&n.used);
            n.used = used;
            self.lru.insert(used, ino);
        }
    }

    /// Records `ino` as found at `parent/name` (in the entry and the index).
    fn place(&mut self, ino: u64, parent: u64, name: &str) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        if n.parent == parent && n.name == name {
            self.by_name.insert((parent, name.to_string()), ino);
            return;
        }
        self.bytes -= n.cost();
        let old = (n.parent, std::mem::replace(&mut n.name, name.to_string()));
        n.parent = parent;
        self.bytes += n.cost();
        if self.by_name.get(&old) == Some(&ino) {
            self.by_name.remove(&old);
        }
        self.by_name.insert((parent, name.to_string()), ino);
    }

    /// The kernel dropped `n` lookups; an inode neither looked up nor open
    /// is removed.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.nlookup = node.nlookup.saturating_sub(n);
        self.drop_if_unused(ino);
    }

    pub fn opened(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.opens += 1;
        }
    }

    pub fn closed(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.opens = n.opens.saturating_sub(1);
        }
        self.drop_if_unused(ino);
    }

    fn drop_if_unused(&mut self, ino: u64) {
        let unused = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.nlookup == 0 && n.opens == 0 && ino != ROOT);
        if unused {
            let n = self.nodes.remove(&ino).expect("checked");
            self.bytes -= n.cost();
            self.by_fh.remove(&n.fh);
            self.lru.remove(&n.used);
            let key = (n.parent, n.name);
            if self.by_name.get(&key) == Some(&ino) {
                self.by_name.remove(&key);
            }
            self.forgotten += 1;
        }
    }

    /// A name was removed or renamed away: an inode found under it keeps
    /// its number but forgets where (a lock then reopens by a new lookup).
    pub fn renamed(&mut self, ino: u64, parent: u64, name: &str) {
        self.place(ino, parent, name);
    }

    /// The inode found as `parent/name`, if one is known.
    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        // The lookup key is built (one String) rather than the map keyed
        // by a borrowed pair: rename and remove are not hot paths.
        let ino = *self.by_name.get(&(parent, name.to_string()))?;
        let n = self.nodes.get(&ino)?;
        (n.parent == parent && n.name == name).then_some(ino)
    }

    /// The inode was used (its attributes asked, it was opened).
    pub fn touch(&mut self, ino: u64) {
        self.clock += 1;
        self.mark_used(ino, self.clock);
    }

    /// With more than `cap` inodes, the least recently used ones beyond it
    /// that are not open (and not the root), as (number, parent, name):
    /// the names the kernel is asked to drop, after which its FORGETs
    /// remove them here.
    pub fn over_cap(&self, cap: usize) -> Vec<(u64, u64, String)> {
        let excess = self.nodes.len().saturating_sub(cap);
        if excess == 0 {
            return vec![];
        }
        // From the least recently used, past the open ones (few).
        self.lru
            .values()
            .filter_map(|&i| {
                let n = &self.nodes[&i];
                (i != ROOT && n.opens == 0 && !n.name.is_empty())
                    .then(|| (i, n.parent, n.name.clone()))
            })
            .take(excess)
            .collect()
    }

    pub fn stats(&self) -> TableStats {
        TableStats {
            inodes: self.nodes.len(),
            bytes: self.bytes,
            forgotten: self.forgotten,
        }
    }

    /// Every inode (for flushing or unmounting this mount only).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Inode)> {
        self.nodes.iter().map(|(&i, n)| (i, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn fh(n: u8) -> Fh {
        Fh(Bytes::from(vec![n; 8]))
    }

    /// A table whose root (handle fh(0)) has `root`, made now with the
    /// default attribute-cache options; the instant and options returned
    /// are for the calls that follow.
    fn table(root: Attr) -> (InodeTable, Instant, AcOptions) {
        let ac = AcOptions::default();
        let now = Instant::now();
        (InodeTable::new(fh(0), root, now, &ac), now, ac)
    }

    #[test]
    fn one_number_per_handle_and_forget_drops_it() {
        let (mut t, now, ac) = table(Attr::default());
        let a = t.found(fh(1), Attr::default(), ROOT, "a", now, &ac);
        let b = t.found(fh(1), Attr::default(), ROOT, "hardlink", now, &ac);
        assert_eq!(a, b);
        assert_eq!(t.get(a).unwrap().nlookup, 2);
        let before = t.stats();
        assert_eq!(before.inodes, 2);
        t.forget(a, 1);
        assert!(t.get(a).is_some());
        t.opened(a);
        t.forget(a, 1);
        assert!(t.get(a).is_some(), "open keeps it");
        t.closed(a);
        assert!(t.get(a).is_none());
        let s = t.stats();
        assert_eq!((s.inodes, s.forgotten), (1, 1));
        assert!(s.bytes < before.bytes);
        // A new lookup of the handle gets a new number.
        let c = t.found(fh(1), Attr::default(), ROOT, "a", now, &ac);
        assert_ne!(c, a);
        t.forget(ROOT, 10);
        assert!(t.get(ROOT).is_some());
    }

    fn with_id(fileid: u64) -> Attr {
        Attr {
            fileid: Some(fileid),
            ..Attr::default()
        }
    }

    #[test]
    fn the_number_is_the_fileid_unless_taken() {
        let (mut t, now, ac) = table(with_id(2));
        let a = t.found(fh(1), with_id(1234), ROOT, "a", now, &ac);
        assert_eq!(a, 1234);
        assert_eq!(t.found(fh(1), with_id(1234), ROOT, "link", now, &ac), a);
        // Another handle with the same fileid (another file system, or a
        // reused fileid while the old file is held): a spare number.
        let b = t.found(fh(2), with_id(1234), ROOT, "b", now, &ac);
        assert_eq!(b, SPARE);
        // Neither 0 nor the root's number.
        assert_eq!(t.found(fh(3), with_id(0), ROOT, "c", now, &ac), SPARE + 1);
        assert_eq!(
            t.found(fh(4), with_id(ROOT), ROOT, "d", now, &ac),
            SPARE + 2
        );
        assert_eq!(
            t.found(fh(5), Attr::default(), ROOT, "e", now, &ac),
            SPARE + 3
        );
        // Once forgotten, the fileid is free again.
        t.forget(a, 2);
        assert_eq!(t.found(fh(6), with_id(1234), ROOT, "f", now, &ac), 1234);
        // A fileid in the spare range that is taken gets the next spare.
        let g = t.found(fh(7), with_id(SPARE + 4), ROOT, "g", now, &ac);
        assert_eq!(g, SPARE + 4);
        assert_eq!(
            t.found(fh(8), Attr::default(), ROOT, "h", now, &ac),
            SPARE + 5
        );
    }

    #[test]
    fn over_cap_names_the_least_recently_used_unopened_inodes() {
        let (mut t, now, ac) = table(Attr::default());
        let a = t.found(fh(1), Attr::default(), ROOT, "a", now, &ac);
        let b = t.found(fh(2), Attr::default(), ROOT, "b", now, &ac);
        let c = t.found(fh(3), Attr::default(), ROOT, "c", now, &ac);
        assert!(t.over_cap(4).is_empty());
        t.touch(a);
        t.opened(b);
        let out = t.over_cap(2);
        // Two over the cap; b is open: c then a.
        assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![c, a]);
        assert_eq!(out[0].2, "c");
        t.forget(c, 1);
        t.forget(a, 1);
        assert!(t.over_cap(2).is_empty());
    }

    #[test]
    fn child_follows_renames_and_forgets() {
        let (mut t, now, ac) = table(Attr::default());
        let a = t.found(fh(1), Attr::default(), ROOT, "a", now, &ac);
        let d = t.found(fh(2), Attr::default(), ROOT, "d", now, &ac);
        assert_eq!(t.child(ROOT, "a"), Some(a));
        t.renamed(a, d, "b");
        assert_eq!(t.child(ROOT, "a"), None);
        assert_eq!(t.child(d, "b"), Some(a));
        // Another file renamed over the name, then the old one forgotten:
        // the name stays the newcomer's.
        let c = t.found(fh(3), Attr::default(), ROOT, "c", now, &ac);
        t.renamed(c, d, "b");
        assert_eq!(t.child(d, "b"), Some(c));
        t.forget(a, 1);
        assert_eq!(t.child(d, "b"), Some(c));
        t.forget(c, 1);
        assert_eq!(t.child(d, "b"), None);
        assert_eq!(t.lru.len(), t.nodes.len());
        assert_eq!(t.by_name.len(), 1, "d alone");
    }
}
