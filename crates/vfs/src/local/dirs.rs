//! Open directory streams kept between READDIR pages (see "# Readdir" in the
//! module docs): reopening the directory by handle, seeking to the cookie and
//! letting ext4 rebuild its htree position on every page cost more than
//! reading the entries.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::Fid;

/// Streams kept at most (each holds a directory fd and its buffer).
pub const DIR_STREAMS: usize = 128;
/// A stream unused this long is closed.
pub const DIR_STREAM_IDLE: Duration = Duration::from_secs(10);
/// getdents64 buffer of one stream: a few dozen KiB of entries, more than one
/// reply's worth.
const BUF_LEN: usize = 32 * 1024;

/// An open directory and the entries already read from it but not yet
/// delivered: `buf[pos..len]` are the dirents that follow the cookie the
/// stream is filed under, and the fd's position is after them.
pub struct DirStream {
    fd: OwnedFd,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// getdents64 returned 0: nothing follows the buffer.
    at_end: bool,
    idle_since: Instant,
    /// The pass so far, if it started at the first entry and may be kept.
    pub recording: Option<super::listings::Recording>,
}

/// One raw dirent of a [`DirStream`].
pub struct Dirent<'a> {
    pub ino: u64,
    pub off: u64,
    pub name: &'a [u8],
    /// The name with its NUL terminator (None if the kernel gave none).
    pub name_nul: Option<&'a [u8]>,
}

impl DirStream {
    /// A stream over `fd` (opened O_RDONLY|O_DIRECTORY), positioned where the
    /// fd is.
    pub fn new(fd: OwnedFd) -> DirStream {
        DirStream {
            fd,
            buf: vec![0u8; BUF_LEN].into_boxed_slice(),
            pos: 0,
            len: 0,
            at_end: false,
            idle_since: Instant::now(),
            recording: None,
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Makes sure a dirent is buffered (reading from the directory when the
    /// buffer is used up); false at the end of the directory.
    pub fn fill(&mut self) -> std::io::Result<bool> {
        if self.pos < self.len {
            return Ok(true);
        }
        if self.at_end {
            return Ok(false);
        }
        let n = super::sys::getdents64(std::os::fd::AsFd::as_fd(&self.fd), &mut self.buf)?;
        self.pos = 0;
        self.len = n;
        self.at_end = n == 0;
        Ok(n > 0)
    }

    /// The directory, the next dirent (not consumed; call after
    /// [`DirStream::fill`] said there is one) and the recording, borrowed
    /// together.
    pub fn current_recording(
        &mut self,
    ) -> (
        BorrowedFd<'_>,
        Dirent<'_>,
        &mut Option<super::listings::Recording>,
    ) {
        use std::os::fd::AsFd;
        let d = dirent(&self.buf[self.pos..self.len]);
        (self.fd.as_fd(), d, &mut self.recording)
    }

    /// Consumes the dirent [`DirStream::current_recording`] returned.
    pub fn advance(&mut self) {
        let b = &self.buf[self.pos..];
        self.pos += u16::from_ne_bytes(b[16..18].try_into().unwrap()) as usize;
    }
}

/// The first dirent of `b`: struct linux_dirent64 is u64 ino, i64 off, u16
/// reclen, u8 type, then the name.
fn dirent(b: &[u8]) -> Dirent<'_> {
    let ino = u64::from_ne_bytes(b[0..8].try_into().unwrap());
    let off = u64::from_ne_bytes(b[8..16].try_into().unwrap());
    let reclen = u16::from_ne_bytes(b[16..18].try_into().unwrap()) as usize;
    let field = &b[19..reclen];
    let len = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    Dirent {
        ino,
        off,
        name: &field[..len],
        name_nul: field.get(..=len),
    }
}

/// Streams between pages, keyed by (directory fid, the cookie the next page
/// starts after). A stream is taken out while a page is read from it, so two
/// listings never share one; least recently used ones are closed beyond
/// [`DIR_STREAMS`], and idle ones after [`DIR_STREAM_IDLE`] by a pruning
/// thread that runs only while streams are kept.
pub struct DirStreams {
    inner: Arc<Mutex<Inner>>,
    cap: usize,
    idle: Duration,
}

struct Inner {
    lru: lru::LruCache<(Fid, u64), DirStream>,
    pruner: bool,
}

impl DirStreams {
    pub fn new(cap: usize, idle: Duration) -> DirStreams {
        DirStreams {
            inner: Arc::new(Mutex::new(Inner {
                lru: lru::LruCache::unbounded(),
                pruner: false,
            })),
            cap: cap.max(1),
            idle,
        }
    }

    /// The stream that continues `dir` after `cookie`, if one is kept.
    pub fn take(&self, dir: &Fid, cookie: u64) -> Option<DirStream> {
        let s = self.inner.lock().unwrap().lru.pop(&(*dir, cookie))?;
        (s.idle_since.elapsed() < self.idle).then_some(s)
    }

    /// Keeps `s` for the page after `cookie`. Another stream filed under the
    /// same key (two clients at the same place) is replaced.
    pub fn put(&self, dir: Fid, cookie: u64, mut s: DirStream) {
        s.idle_since = Instant::now();
        let mut closed = Vec::new();
        let spawn = {
            let mut g = self.inner.lock().unwrap();
            if let Some((_, old)) = g.lru.push((dir, cookie), s) {
                closed.push(old);
            }
            while g.lru.len() > self.cap {
                closed.extend(g.lru.pop_lru().map(|(_, s)| s));
            }
            !std::mem::replace(&mut g.pruner, true)
        };
        // Close outside the lock.
        drop(closed);
        if spawn {
            let (w, idle) = (Arc::downgrade(&self.inner), self.idle);
            let r = std::thread::Builder::new()
                .name("tarn-dirstreams".into())
                .spawn(move || prune_loop(w, idle));
            if r.is_err() {
                // No pruner: streams still go by LRU; try again next time.
                self.inner.lock().unwrap().pruner = false;
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().lru.len()
    }

    #[cfg(test)]
    pub fn prune_now(&self) {
        prune(&self.inner, self.idle);
    }
}

/// Closes the streams idle for `idle`; false once none is left (the pruner
/// then stops, and the next `put` starts another).
fn prune(inner: &Mutex<Inner>, idle: Duration) -> bool {
    let mut closed = Vec::new();
    let mut g = inner.lock().unwrap();
    while let Some((_, s)) = g.lru.peek_lru() {
        if s.idle_since.elapsed() < idle {
            break;
        }
        closed.extend(g.lru.pop_lru().map(|(_, s)| s));
    }
    let any = !g.lru.is_empty();
    if !any {
        g.pruner = false;
    }
    drop(g);
    drop(closed);
    any
}

fn prune_loop(inner: Weak<Mutex<Inner>>, idle: Duration) {
    loop {
        std::thread::sleep((idle / 2).max(Duration::from_millis(100)));
        let Some(inner) = inner.upgrade() else { return };
        if !prune(&inner, idle) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::LocalFs;
    use super::*;
    use crate::prelude::*;
    use crate::{CreateHow, Cred, SetAttr};
    use std::collections::HashMap;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    fn setup(files: usize) -> (tempfile::TempDir, LocalFs, Fid) {
        let (d, fs) = crate::local::tests::on_disk("vfs-dirs");
        let r = fs.root();
        let (sub, _) = fs
            .mkdir(&Cred::root(), &r, b"sub", &SetAttr::mode(0o755))
            .unwrap();
        for i in 0..files {
            create(&fs, &sub, &name(i));
        }
        (d, fs, sub)
    }

    fn name(i: usize) -> Vec<u8> {
        format!("file-{i:05}").into_bytes()
    }

    fn create(fs: &LocalFs, dir: &Fid, n: &[u8]) {
        let how = CreateHow::Guarded(SetAttr::mode(0o644));
        fs.create(&Cred::root(), dir, n, &how).unwrap();
    }

    /// One page of up to `max` entries: (name, cookie) pairs and eof.
    fn page(fs: &LocalFs, dir: &Fid, cookie: u64, max: usize) -> (Vec<(Vec<u8>, u64)>, bool) {
        let p = fs
            .readdir(&Cred::root(), dir, cookie, [0; 8], max, true)
            .unwrap();
        for e in &p.entries {
            // Only removed entries (listed from the buffer) lack them.
            if e.plus.is_none() {
                assert!(e.name.starts_with(b"file-"));
                let c = super::super::sys::cstr(&e.name).unwrap();
                let dfd = fs.open_path(dir).unwrap().0;
                assert!(super::super::sys::lstatat(dfd.as_fd(), &c).is_err());
            }
        }
        let v = p.entries.into_iter().map(|e| (e.name, e.cookie)).collect();
        (v, p.eof)
    }

    /// A whole listing in pages of `max`, counting each name.
    fn list(fs: &LocalFs, dir: &Fid, max: usize) -> HashMap<Vec<u8>, usize> {
        let (mut seen, mut cookie) = (HashMap::new(), 0);
        loop {
            let (v, eof) = page(fs, dir, cookie, max);
            for (n, c) in v {
                *seen.entry(n).or_default() += 1;
                cookie = c;
            }
            if eof {
                return seen;
            }
        }
    }

    fn assert_once(seen: &HashMap<Vec<u8>, usize>, files: usize) {
        assert_eq!(seen.len(), files + 2);
        assert!(seen.values().all(|&c| c == 1), "an entry came twice");
        for i in 0..files {
            assert!(seen.contains_key(&name(i)));
        }
    }

    #[test]
    fn pages_resume_from_the_kept_stream() {
        let (_d, fs, sub) = setup(1000);
        let (first, eof) = page(&fs, &sub, 0, 100);
        assert!(!eof);
        assert_eq!(first.len(), 100);
        let last = first.last().unwrap().1;
        // Kept under the cookie the client will send back.
        assert_eq!(fs.dirs.len(), 1);
        let s = fs
            .dirs
            .take(&sub, last)
            .expect("stream kept at the last cookie");
        fs.dirs.put(sub, last, s);
        let (second, _) = page(&fs, &sub, last, 100);
        assert_eq!(fs.dirs.len(), 1);
        // Same as a fresh open seeking to the cookie would give.
        fs.dirs.take(&sub, second.last().unwrap().1).unwrap();
        let fresh = page(&fs, &sub, last, 100).0;
        assert_eq!(second, fresh);
        // A cookie from the middle of a page (no stream) seeks.
        let mid = page(&fs, &sub, first[49].1, 51).0;
        assert_eq!(&mid[..], &[&first[50..], &second[..1]].concat()[..]);
        // A whole listing ends at eof and keeps no stream.
        let seen = list(&fs, &sub, 77);
        assert_once(&seen, 1000);
    }

    #[test]
    fn listings_at_eof_keep_nothing() {
        let (_d, fs, sub) = setup(10);
        let (v, eof) = page(&fs, &sub, 0, 100);
        assert!(eof);
        assert_eq!(v.len(), 12);
        assert_eq!(fs.dirs.len(), 0);
    }

    #[test]
    fn two_listings_interleaved_and_concurrent() {
        let (_d, fs, sub) = setup(700);
        // Page by page in turn: each listing continues its own stream.
        let (mut a, mut b) = (HashMap::new(), HashMap::new());
        let (mut ca, mut cb, mut ea, mut eb) = (0, 0, false, false);
        while !(ea && eb) {
            for (seen, cookie, eof, max) in [
                (&mut a, &mut ca, &mut ea, 50),
                (&mut b, &mut cb, &mut eb, 33),
            ] {
                if *eof {
                    continue;
                }
                let (v, e) = page(&fs, &sub, *cookie, max);
                for (n, c) in v {
                    *seen.entry(n).or_insert(0) += 1;
                    *cookie = c;
                }
                *eof = e;
            }
        }
        assert_once(&a, 700);
        assert_once(&b, 700);
        // On threads, the same directory at once.
        std::thread::scope(|s| {
            for max in [40, 41, 64, 100] {
                let (fs, sub) = (&fs, &sub);
                s.spawn(move || {
                    for _ in 0..5 {
                        assert_once(&list(fs, sub, max), 700);
                    }
                });
            }
        });
    }

    #[test]
    fn a_directory_changing_between_pages_lists_untouched_entries_once() {
        let (_d, fs, sub) = setup(1000);
        let mut seen = HashMap::new();
        let (mut cookie, mut round) = (0, 0);
        loop {
            let (v, eof) = page(&fs, &sub, cookie, 64);
            for (n, c) in v {
                *seen.entry(n).or_insert(0) += 1;
                cookie = c;
            }
            if eof {
                break;
            }
            // Between pages: remove some files (listed or not), add others.
            for i in (round * 10..round * 10 + 10).map(|i| i * 7 % 1000) {
                let _ = fs.remove(&Cred::root(), &sub, &name(i));
            }
            for i in 0..10 {
                create(&fs, &sub, format!("new-{round}-{i}").as_bytes());
            }
            round += 1;
        }
        assert!(round > 10);
        let removed: std::collections::HashSet<usize> =
            (0..round * 10).map(|i| i * 7 % 1000).collect();
        assert!(seen.values().all(|&c| c == 1), "an entry came twice");
        for i in (0..1000).filter(|i| !removed.contains(i)) {
            assert_eq!(seen.get(&name(i)), Some(&1), "file {i}");
        }
    }

    #[test]
    fn read_permission_is_checked_on_every_page() {
        if super::super::sys::geteuid() != 0 {
            return;
        }
        let (d, fs, sub) = setup(300);
        let user = Cred::user(1000, 1000);
        let p = fs.readdir(&user, &sub, 0, [0; 8], 50, false).unwrap();
        let last = p.entries.last().unwrap().cookie;
        assert_eq!(fs.dirs.len(), 1);
        std::fs::set_permissions(d.path().join("sub"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let r = fs.readdir(&user, &sub, last, [0; 8], 50, false);
        assert_eq!(r.unwrap_err(), crate::FsError::Acces);
        // Root may still continue.
        assert!(fs
            .readdir(&Cred::root(), &sub, last, [0; 8], 50, false)
            .is_ok());
    }

    #[test]
    fn streams_are_bounded_and_expire() {
        let (d, fs, sub) = setup(0);
        let fd = || {
            let p = super::super::sys::cstr(d.path().as_os_str().as_encoded_bytes()).unwrap();
            super::super::sys::open_path(&p, libc::O_RDONLY | libc::O_DIRECTORY).unwrap()
        };
        let streams = DirStreams::new(4, Duration::from_secs(3600));
        for c in 0..10 {
            streams.put(sub, c, DirStream::new(fd()));
        }
        assert_eq!(streams.len(), 4);
        // The least recently used went first.
        assert!(streams.take(&sub, 5).is_none());
        assert!(streams.take(&sub, 9).is_some());
        assert_eq!(streams.len(), 3);
        // Same key: replaced, not added.
        streams.put(sub, 8, DirStream::new(fd()));
        assert_eq!(streams.len(), 3);
        let idle = DirStreams::new(4, Duration::ZERO);
        idle.put(sub, 1, DirStream::new(fd()));
        assert!(idle.take(&sub, 1).is_none());
        idle.put(sub, 2, DirStream::new(fd()));
        idle.prune_now();
        assert_eq!(idle.len(), 0);
        // The listing's own cache stays within DIR_STREAMS.
        let r = fs.root();
        for i in 0..DIR_STREAMS + 20 {
            let n = format!("d{i}").into_bytes();
            let (dir, _) = fs
                .mkdir(&Cred::root(), &r, &n, &SetAttr::mode(0o755))
                .unwrap();
            for j in 0..3 {
                create(&fs, &dir, &name(j));
            }
            assert!(!page(&fs, &dir, 0, 2).1);
        }
        assert_eq!(fs.dirs.len(), DIR_STREAMS);
    }
}
