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

    /// The next dirent, not consumed; call after [`DirStream::fill`] said
    /// there is one.
    pub fn current(&self) -> Dirent<'_> {
        let b = &self.buf[self.pos..self.len];
        // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name.
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

    /// Consumes the dirent [`DirStream::current`] returned.
    pub fn advance(&mut self) {
        let b = &self.buf[self.pos..];
        self.pos += u16::from_ne_bytes(b[16..18].try_into().unwrap()) as usize;
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
        std::thread::sleep(idle / 2);
        let Some(inner) = inner.upgrade() else { return };
        if !prune(&inner, idle) {
            return;
        }
    }
}
