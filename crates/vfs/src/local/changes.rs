//! What changed on the export's filesystem, and since when: the coherence
//! behind the directory listings kept in memory ([`super::listings`]).
//!
//! A fanotify group with a mark on the export's whole filesystem
//! (`FAN_MARK_FILESYSTEM`, reporting file handles) hears of every change to
//! any inode on it, whichever path, hard link, mount, process or open file it
//! came through: data written or truncated (`FAN_MODIFY`), mode, owner,
//! times, link count or xattrs changed (`FAN_ATTRIB`), the object renamed
//! (`FAN_MOVE_SELF`, its ctime moves) or its last link removed
//! (`FAN_DELETE_SELF`), and for a directory any entry created, removed or
//! moved in it (`FAN_CREATE`, `FAN_DELETE`, `FAN_MOVED_*`). The kernel queues
//! the event inside the syscall that made the change, so applying every
//! queued event ([`Changes::sync`]) before answering answers as of that
//! moment.
//!
//! Applied events are numbered. Per hash of the object's fid
//! ([`SEQ_SHARDS`] of them) the number of its last event is kept, so "has
//! this object changed since event N" ([`Changes::unchanged`]) is one load,
//! without locks. An unrelated object sharing the hash makes the answer a
//! false "changed", which costs a refetch, never a stale answer. A lost event
//! (queue overflow) counts as a change of everything, and so does any change
//! to the mount table (`/proc/self/mountinfo` polls readable): a name covered
//! by a new mount must not keep the covered object's answer.
//!
//! Not covered, as for any fanotify user: access times (reads are not
//! watched: one event per READ would cost more than it saves) and the
//! mtime/ctime that a write through a shared mapping sets at its page fault,
//! which queues no event; both can lag in kept answers until the object's
//! next event.
//!
//! The mark needs CAP_SYS_ADMIN and a filesystem that reports file handles
//! (ext4, xfs, btrfs …); where it cannot be had, nothing is kept. At start
//! the group proves on the export root that the handles it reports are the
//! ones `name_to_handle_at` gives (changes are matched by them), or nothing
//! is kept.

use super::sys;
use crate::Fid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Granularity of "has this object changed since".
pub const SEQ_SHARDS: usize = 16_384;
const READ_BUF: usize = 64 * 1024;

/// What the filesystem mark listens to.
const MASK: u64 = libc::FAN_MODIFY
    | libc::FAN_ATTRIB
    | libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_DELETE_SELF
    | libc::FAN_MOVE_SELF
    | libc::FAN_ONDIR;

pub struct Changes {
    group: Option<OwnedFd>,
    /// `/proc/self/mountinfo`, polled for mount table changes.
    mounts: Option<OwnedFd>,
    /// Whether changes are followed at all.
    following: bool,
    /// Held while events are read and applied: a `sync` returns only once
    /// every event queued before it is applied.
    reader: Mutex<Vec<u8>>,
    /// Events applied so far (written under `reader`).
    seq: AtomicU64,
    /// Per hash of an object's fid, the `seq` of its last event.
    touched: Box<[AtomicU64]>,
    /// The `seq` at which everything last counted as changed.
    cleared: AtomicU64,
    /// Told of each object changed by another process than this server
    /// (see [`Changes::watch_local`]).
    local: OnceLock<LocalHook>,
}

/// What [`Changes::watch_local`] calls for each object changed by another
/// process: the object's fid.
pub type LocalHook = Box<dyn Fn(&Fid) + Send + Sync>;

/// The events applied at some moment: answers gathered after it are current
/// while their object is [`Changes::unchanged`] since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot(pub u64);

/// One event as read from the group.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Events were lost.
    Overflow,
    /// Something about the object with this kernel handle changed, by
    /// the process `pid`.
    Object {
        htype: i32,
        handle: &'a [u8],
        pid: i32,
    },
    /// A record this parser does not understand.
    Unknown,
}

impl Changes {
    /// Follows nothing: every object always counts as changed.
    pub fn disabled() -> Changes {
        Changes::with_group(None, false)
    }

    fn with_group(group: Option<OwnedFd>, following: bool) -> Changes {
        Changes {
            group,
            mounts: None,
            following,
            reader: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
            touched: (0..SEQ_SHARDS).map(|_| AtomicU64::new(0)).collect(),
            cleared: AtomicU64::new(0),
            local: OnceLock::new(),
        }
    }

    /// Marks the filesystem of `root` (whose fid is `root_fid`); the error
    /// says why changes cannot be followed.
    pub fn new(root: BorrowedFd<'_>, root_fid: &Fid) -> Result<Changes, String> {
        let group = sys::fanotify_fid_group().map_err(|e| format!("fanotify_init: {e}"))?;
        prove_handles(group.as_fd(), root, root_fid)?;
        sys::fanotify_mark(
            group.as_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            MASK,
            root,
        )
        .map_err(|e| format!("fanotify_mark on the filesystem: {e}"))?;
        let mounts = sys::open_path(c"/proc/self/mountinfo", libc::O_RDONLY)
            .map_err(|e| format!("opening /proc/self/mountinfo: {e}"))?;
        // Changes before now are not news.
        sys::poll_now([(mounts.as_fd(), libc::POLLPRI)])
            .map_err(|e| format!("polling /proc/self/mountinfo: {e}"))?;
        let mut c = Changes::with_group(Some(group), true);
        c.mounts = Some(mounts);
        *c.reader.lock().unwrap() = vec![0; READ_BUF];
        Ok(c)
    }

    pub fn following(&self) -> bool {
        self.following
    }

    /// Applies every event queued so far.
    ///
    /// One `poll` without the lock when nothing happened: the lock is then
    /// only taken and released, which waits for a reader that dequeued
    /// events before our poll and is still applying them. (A mount table
    /// change is seen by one poll only; a sync in the microseconds before
    /// that poller applies it may miss it.)
    pub fn sync(&self) -> Snapshot {
        let (Some(group), Some(mounts)) = (&self.group, &self.mounts) else {
            return Snapshot(self.seq.load(Ordering::Relaxed));
        };
        let ready = sys::poll_now([
            (group.as_fd(), libc::POLLIN),
            (mounts.as_fd(), libc::POLLPRI),
        ]);
        let mut buf = self.reader.lock().unwrap();
        match ready {
            Ok([events, mount]) => {
                if mount & (libc::POLLPRI | libc::POLLERR) != 0 {
                    self.changed_all();
                }
                if events != 0 {
                    self.read_queued(group.as_fd(), &mut buf);
                }
            }
            Err(e) => {
                tracing::warn!("polling fanotify: {e}; forgetting kept listings");
                self.changed_all();
                self.read_queued(group.as_fd(), &mut buf);
            }
        }
        Snapshot(self.seq.load(Ordering::Relaxed))
    }

    /// Calls `hook` with each object another process changes (a write,
    /// truncate, attribute change, rename or removal by anything but this
    /// server), soon after the change: a thread waits on the group and
    /// applies events as they come. It ends when `changes` is dropped.
    /// Returns false when changes are not followed (or a hook is set).
    ///
    /// The event comes after the change, not before: a kernel lease
    /// (F_SETLEASE) would hold a local writer until the hook's caller is
    /// done, but costs a descriptor per watched file and a signal per break;
    /// see docs/architecture.md (delegations) for the choice.
    pub fn watch_local(changes: &Arc<Changes>, hook: LocalHook) -> bool {
        if changes.group.is_none() || changes.local.set(hook).is_err() {
            return false;
        }
        let weak: Weak<Changes> = Arc::downgrade(changes);
        std::thread::Builder::new()
            .name("tarn-fanotify".into())
            .spawn(move || loop {
                let Some(c) = weak.upgrade() else { return };
                let Some(group) = &c.group else { return };
                // Wakes at least once a second to notice the end.
                match sys::poll_for(group.as_fd(), libc::POLLIN, 1000) {
                    Ok(true) => {
                        c.sync();
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!("waiting for fanotify events: {e}");
                        std::thread::sleep(std::time::Duration::from_secs(1));
                    }
                }
            })
            .is_ok()
    }

    /// Whether the object `fid` has had no event since `since` (as far as
    /// the last [`Changes::sync`] knows).
    pub fn unchanged(&self, fid: &Fid, since: Snapshot) -> bool {
        self.following
            && self.cleared.load(Ordering::Relaxed) <= since.0
            && self.touched[seq_shard(fid)].load(Ordering::Relaxed) <= since.0
    }

    /// Reads the group until it is empty; called under `reader`.
    fn read_queued(&self, group: BorrowedFd<'_>, buf: &mut [u8]) {
        loop {
            match sys::read_nonblocking(group, buf) {
                Ok(0) => break,
                Ok(n) => self.apply(&buf[..n]),
                Err(e) => {
                    tracing::warn!("reading fanotify events: {e}; forgetting kept listings");
                    self.changed_all();
                    break;
                }
            }
        }
    }

    /// Applies events read from the group; called under `reader`.
    fn apply(&self, events: &[u8]) {
        parse(events, |e| match e {
            // A handle that fits no fid was never kept.
            Event::Object { htype, handle, pid } => {
                if let Some(fid) = super::fid_of(htype, handle) {
                    self.changed(&fid);
                    if pid != own_pid() {
                        if let Some(hook) = self.local.get() {
                            hook(&fid);
                        }
                    }
                }
            }
            Event::Overflow | Event::Unknown => self.changed_all(),
        });
    }

    fn changed(&self, fid: &Fid) {
        let seq = self.seq.load(Ordering::Relaxed) + 1;
        self.seq.store(seq, Ordering::Relaxed);
        self.touched[seq_shard(fid)].store(seq, Ordering::Relaxed);
    }

    /// Follows changes that only tests report ([`Changes::changed_for_tests`]).
    #[cfg(test)]
    pub fn following_nothing_for_tests() -> Changes {
        Changes::with_group(None, true)
    }

    #[cfg(test)]
    pub fn changed_for_tests(&self, fid: &Fid) {
        let _g = self.reader.lock().unwrap();
        self.changed(fid);
    }

    fn changed_all(&self) {
        let seq = self.seq.load(Ordering::Relaxed) + 1;
        self.seq.store(seq, Ordering::Relaxed);
        self.cleared.store(seq, Ordering::Relaxed);
    }
}

/// This server's process id: the events its own threads cause carry it
/// (fanotify reports the thread group id unless asked for thread ids).
fn own_pid() -> i32 {
    static PID: OnceLock<i32> = OnceLock::new();
    *PID.get_or_init(|| std::process::id() as i32)
}

/// A hash of the fid, computed on every kept answer used. A collision only
/// costs a refetch, so it need not resist crafted input.
fn seq_shard(fid: &Fid) -> usize {
    fnv1a(&[fid.as_bytes()]) as usize % SEQ_SHARDS
}

/// FNV-1a over the parts, folded: cheap for the few bytes of a fid and a name.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    for p in parts {
        std::hash::Hasher::write(&mut h, p);
    }
    let h = std::hash::Hasher::finish(&h);
    h ^ (h >> 32)
}

/// Opens the root with an inode mark for FAN_OPEN on it and checks that the
/// event names the root by the handle `name_to_handle_at` gave: changes are
/// matched by those handles, so any other encoding would go unnoticed.
fn prove_handles(
    group: BorrowedFd<'_>,
    root: BorrowedFd<'_>,
    root_fid: &Fid,
) -> Result<(), String> {
    let mask = libc::FAN_OPEN | libc::FAN_ONDIR;
    sys::fanotify_mark(group, libc::FAN_MARK_ADD, mask, root)
        .map_err(|e| format!("fanotify_mark on the export root: {e}"))?;
    let opened = sys::openat(root, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0);
    let mut buf = vec![0u8; READ_BUF];
    let n = sys::read_nonblocking(group, &mut buf);
    let removed = sys::fanotify_mark(group, libc::FAN_MARK_REMOVE, mask, root);
    drop(opened.map_err(|e| format!("opening the export root: {e}"))?);
    let n = n.map_err(|e| format!("reading fanotify events: {e}"))?;
    removed.map_err(|e| format!("removing the fanotify mark on the root: {e}"))?;
    let mut seen = None;
    parse(&buf[..n], |e| {
        if let Event::Object { htype, handle, .. } = e {
            seen = seen.or(Some(super::fid_of(htype, handle)));
        }
    });
    match seen {
        Some(Some(fid)) if fid == *root_fid => Ok(()),
        Some(_) => Err("fanotify reports file handles other than name_to_handle_at's".into()),
        None => Err("fanotify reported no event for opening the export root".into()),
    }
}

/// Calls `f` for each event in `buf` (whole events, as read(2) returns
/// them). A record that is cut short or malformed ends the buffer as
/// [`Event::Unknown`].
pub fn parse<'a>(buf: &'a [u8], mut f: impl FnMut(Event<'a>)) {
    // struct fanotify_event_metadata: u32 event_len, u8 vers, u8 reserved,
    // u16 metadata_len, u64 mask, i32 fd, i32 pid.
    const META: usize = 24;
    let u16_at = |b: &[u8], i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap());
    let mut rest = buf;
    while !rest.is_empty() {
        if rest.len() < META {
            return f(Event::Unknown);
        }
        let len = u32_at(rest, 0) as usize;
        let meta_len = u16_at(rest, 6) as usize;
        if rest[4] != libc::FANOTIFY_METADATA_VERSION
            || len < META
            || meta_len < META
            || meta_len > len
            || len > rest.len()
        {
            return f(Event::Unknown);
        }
        let mask = u64::from_ne_bytes(rest[8..16].try_into().unwrap());
        let pid = u32_at(rest, 20) as i32;
        let (event, info) = (&rest[..len], &rest[meta_len..len]);
        rest = &rest[len..];
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            f(Event::Overflow);
            continue;
        }
        let _ = event;
        // Info records: u8 type, u8 pad, u16 len; FID: fsid (8 bytes), then
        // struct file_handle: u32 handle_bytes, i32 handle_type, bytes.
        let mut found = None;
        let mut records = info;
        while records.len() >= 4 {
            let rlen = u16_at(records, 2) as usize;
            if rlen < 4 || rlen > records.len() {
                break;
            }
            let rec = &records[..rlen];
            records = &records[rlen..];
            if rec[0] == libc::FAN_EVENT_INFO_TYPE_FID && rec.len() >= 20 {
                let hlen = u32_at(rec, 12) as usize;
                let htype = u32_at(rec, 16) as i32;
                if let Some(handle) = rec.get(20..20 + hlen) {
                    found = Some(Event::Object { htype, handle, pid });
                }
            }
        }
        f(found.unwrap_or(Event::Unknown));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mask: u64, htype: i32, handle: &[u8]) -> Vec<u8> {
        let mut rec = vec![libc::FAN_EVENT_INFO_TYPE_FID, 0, 0, 0];
        rec.extend_from_slice(&[7; 8]); // fsid
        rec.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&htype.to_ne_bytes());
        rec.extend_from_slice(handle);
        while rec.len() % 4 != 0 {
            rec.push(0);
        }
        let rlen = rec.len() as u16;
        rec[2..4].copy_from_slice(&rlen.to_ne_bytes());
        let mut e = Vec::new();
        e.extend_from_slice(&((24 + rec.len()) as u32).to_ne_bytes());
        e.push(libc::FANOTIFY_METADATA_VERSION);
        e.push(0);
        e.extend_from_slice(&24u16.to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&1234i32.to_ne_bytes());
        e.extend_from_slice(&rec);
        e
    }

    fn overflow() -> Vec<u8> {
        let mut e = event(libc::FAN_Q_OVERFLOW, 0, &[]);
        e.truncate(24);
        e[0..4].copy_from_slice(&24u32.to_ne_bytes());
        e
    }

    fn parsed(buf: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        parse(buf, |e| out.push(format!("{e:?}")));
        out
    }

    #[test]
    fn parses_events_with_handles_and_overflow() {
        let mut buf = event(libc::FAN_MODIFY, 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        buf.extend(overflow());
        buf.extend(event(libc::FAN_ATTRIB, 0x81, &[9; 12]));
        assert_eq!(
            parsed(&buf),
            [
                format!(
                    "{:?}",
                    Event::Object {
                        htype: 1,
                        handle: &[1, 2, 3, 4, 5, 6, 7, 8],
                        pid: 1234,
                    }
                ),
                "Overflow".to_string(),
                format!(
                    "{:?}",
                    Event::Object {
                        htype: 0x81,
                        handle: &[9; 12],
                        pid: 1234,
                    }
                ),
            ]
        );
    }

    #[test]
    fn malformed_records_are_unknown_and_never_panic() {
        let good = event(libc::FAN_MODIFY, 1, &[1; 8]);
        for cut in 1..good.len() {
            let out = parsed(&good[..cut]);
            assert_eq!(out, ["Unknown"], "cut at {cut}");
        }
        let mut bad_version = good.clone();
        bad_version[4] = 99;
        assert_eq!(parsed(&bad_version), ["Unknown"]);
        // A handle longer than its record.
        let mut long = good.clone();
        long[24 + 12..24 + 16].copy_from_slice(&200u32.to_ne_bytes());
        assert_eq!(parsed(&long), ["Unknown"]);
        proptest::proptest!(|(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200))| {
            parse(&bytes, |_| ());
        });
    }

    fn fid(n: u8) -> Fid {
        Fid::new(&[1, n, 0, 0, 0, 1, 0, 0, 0]).unwrap()
    }

    fn changed(c: &Changes, n: u8) {
        let f = fid(n);
        let b = f.as_bytes();
        let _g = c.reader.lock().unwrap();
        c.apply(&event(libc::FAN_ATTRIB, b[0] as i32, &b[1..]));
    }

    #[test]
    fn nothing_counts_as_unchanged_when_not_following() {
        let c = Changes::disabled();
        assert!(!c.unchanged(&fid(1), c.sync()));
    }

    #[test]
    fn an_object_counts_as_changed_after_its_event_only() {
        let c = Changes::with_group(None, true);
        let s = c.sync();
        assert!(c.unchanged(&fid(1), s));
        changed(&c, 1);
        assert!(!c.unchanged(&fid(1), s));
        assert!(c.unchanged(&fid(2), s));
        let s2 = c.sync();
        assert!(c.unchanged(&fid(1), s2));
        // Lost events: everything changed.
        c.apply(&overflow());
        assert!(!c.unchanged(&fid(2), s2));
        assert!(c.unchanged(&fid(2), c.sync()));
    }

    #[test]
    fn handles_that_fit_no_fid_change_nothing() {
        let c = Changes::with_group(None, true);
        let s = c.sync();
        c.apply(&event(libc::FAN_ATTRIB, 1, &[5; 60]));
        assert!(c.unchanged(&fid(1), s));
    }
}
