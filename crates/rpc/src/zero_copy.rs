//! Replies whose bulk data never passes through user space: a READ's file
//! data is spliced from the page cache into a [`Pipe`] (by the backend)
//! and from the pipe into the socket (by the connection's writer), so the
//! socket takes references to the page cache's pages instead of the two
//! copies a `pread` into the reply and a `write` of it cost (45% of the
//! server's CPU on a 1 GiB read over loopback, perf).
//!
//! Only where nothing needs the bytes: plain TCP (TLS seals them), no GSS
//! integrity or privacy (they checksum or encrypt them), and no reply
//! cache that would keep them (the driver's DRC, an NFSv4.1 slot with
//! sa_cachethis). The procedure asks [`crate::CallContext::zero_copy`]
//! and, if allowed, attaches the pipe where the data belongs in its
//! results ([`crate::CallContext::attach`]).
//!
//! Pipes are reused (a pool) and bounded: each holds up to [`PIPE_BYTES`]
//! of page references, and an unprivileged user's pipes count against
//! `pipe-user-pages-soft` (64 MiB), past which the kernel refuses to
//! enlarge them; at most [`MAX_PIPES`] exist, and a call that finds none
//! free copies as before.

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Which connections READ data is spliced on (plain TCP, see above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpliceReads {
    /// Peers on other hosts. Over loopback the receiver would copy from
    /// the page cache's pages, which costs it more than the two copies
    /// save the server (a 1 GiB `tarn cat` took 6-45% longer).
    #[default]
    Auto,
    Always,
    Never,
}

impl SpliceReads {
    pub fn for_peer(self, peer: std::net::IpAddr) -> bool {
        match self {
            SpliceReads::Auto => !peer.to_canonical().is_loopback(),
            SpliceReads::Always => true,
            SpliceReads::Never => false,
        }
    }
}

/// What one pipe holds: the largest READ (1 MiB).
pub const PIPE_BYTES: usize = 1 << 20;
/// Pipes in existence at most (48 MiB of page references in flight).
pub const MAX_PIPES: usize = 48;
/// Below this a READ copies: a splice costs two syscalls and a pipe.
pub const MIN_BYTES: usize = 64 << 10;

static FREE: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Set when the kernel refuses a pipe of PIPE_BYTES: every READ copies.
static REFUSED: AtomicBool = AtomicBool::new(false);
/// READs that could have spliced but found no pipe (all in use, or
/// refused): `tarn_read_splice_no_pipe_total`.
static NO_PIPE: AtomicU64 = AtomicU64::new(0);

/// How many READs copied their data for want of a pipe (this process).
pub fn no_pipe_total() -> u64 {
    NO_PIPE.load(Relaxed)
}

/// A pipe whose read end holds data spliced from a file (or nothing).
#[derive(Debug)]
pub struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    /// A free pipe of [`PIPE_BYTES`], or None (all in use, or the kernel
    /// will not make one that large): then copy.
    pub fn get() -> Option<Pipe> {
        if let Some(p) = FREE.lock().unwrap().pop() {
            return Some(p);
        }
        let p = Self::fresh();
        if p.is_none() {
            NO_PIPE.fetch_add(1, Relaxed);
        }
        p
    }

    /// A new pipe, within [`MAX_PIPES`] and while the kernel makes them.
    fn fresh() -> Option<Pipe> {
        if REFUSED.load(Relaxed) {
            return None;
        }
        if LIVE.fetch_add(1, Relaxed) >= MAX_PIPES {
            LIVE.fetch_sub(1, Relaxed);
            return None;
        }
        match Self::make() {
            Ok(p) => Some(p),
            Err(e) => {
                LIVE.fetch_sub(1, Relaxed);
                if !REFUSED.swap(true, Relaxed) {
                    tracing::warn!(error = %e, bytes = PIPE_BYTES, "no pipe of this size (fs.pipe-max-size, pipe-user-pages-soft): READ data is copied, not spliced");
                }
                None
            }
        }
    }

    fn make() -> std::io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let got = fcntl(w.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32))?;
        if (got as usize) < PIPE_BYTES {
            return Err(std::io::Error::other(format!("pipe of {got} bytes")));
        }
        Ok(Pipe { r, w })
    }

    /// The end the backend splices file data into.
    pub fn input(&self) -> BorrowedFd<'_> {
        self.w.as_fd()
    }

    /// Back to the pool; only an empty pipe is reused (one a failed send
    /// left data in is closed, which lets go of its pages).
    pub fn put(self, empty: bool) {
        if empty {
            FREE.lock().unwrap().push(self);
        }
    }

    /// Moves up to `len` bytes from the pipe to `out` (a non-blocking
    /// socket): WouldBlock when the socket is full.
    pub(crate) fn splice_to(&self, out: BorrowedFd<'_>, len: usize) -> std::io::Result<usize> {
        let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
        Ok(splice(&self.r, None, out, None, len, flags)?)
    }

    /// The pipe's bytes copied out (for a writer that cannot splice).
    pub(crate) fn read_all(&self, len: usize) -> std::io::Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        let mut n = 0;
        while n < len {
            match nix::unistd::read(self.r.as_raw_fd(), &mut v[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if n < len {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(v)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Relaxed);
    }
}

/// File data a reply carries outside its buffer: `len` bytes in `pipe`
/// that belong at offset `at` of the reply (record mark included).
#[derive(Debug)]
pub struct Attachment {
    pub at: usize,
    pub len: usize,
    pub(crate) pipe: Option<Pipe>,
}

impl Attachment {
    pub fn new(at: usize, len: usize, pipe: Pipe) -> Self {
        Attachment {
            at,
            len,
            pipe: Some(pipe),
        }
    }

    pub(crate) fn pipe(&self) -> &Pipe {
        self.pipe
            .as_ref()
            .expect("an attachment has its pipe until dropped")
    }

    /// Its bytes were all sent: the pipe is reused.
    pub(crate) fn sent(mut self) {
        if let Some(p) = self.pipe.take() {
            p.put(true);
        }
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // Not sent (the call failed, the connection went): the pipe may
        // still hold pages, so it is closed rather than reused.
        if let Some(p) = self.pipe.take() {
            p.put(self.len == 0);
        }
    }
}

/// One record for a connection's writer.
#[derive(Debug)]
pub enum Out {
    Bytes(bytes::Bytes),
    /// A reply and the file data that goes at its attachment's offset.
    Spliced(Box<(bytes::Bytes, Attachment)>),
}

impl Out {
    /// The record's length on the wire.
    pub fn len(&self) -> usize {
        match self {
            Out::Bytes(b) => b.len(),
            Out::Spliced(s) => s.0.len() + s.1.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes, the attached ones copied out.
    #[cfg(test)]
    pub(crate) fn into_bytes(self) -> std::io::Result<bytes::Bytes> {
        match self {
            Out::Bytes(b) => Ok(b),
            Out::Spliced(s) => {
                let (reply, att) = *s;
                let data = att.pipe().read_all(att.len)?;
                let mut v = Vec::with_capacity(reply.len() + data.len());
                v.extend_from_slice(&reply[..att.at]);
                v.extend_from_slice(&data);
                v.extend_from_slice(&reply[att.at..]);
                att.sent();
                Ok(v.into())
            }
        }
    }
}

impl From<bytes::Bytes> for Out {
    fn from(b: bytes::Bytes) -> Self {
        Out::Bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_pipe_carries_file_pages_to_a_socket() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let Some(p) = Pipe::get() else {
            // A kernel that refuses 1 MiB pipes: READs copy; nothing to test.
            return;
        };
        let mut off: i64 = 1000;
        let n = splice(
            &f,
            Some(&mut off),
            p.input(),
            None,
            200_000,
            SpliceFFlags::empty(),
        )
        .unwrap();
        assert_eq!(n, 200_000);
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let att = Attachment::new(0, n, p);
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        let mut left = n;
        while left > 0 {
            match att.pipe().splice_to(a.as_fd(), left) {
                Ok(k) => left -= k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(e) => panic!("{e}"),
            }
        }
        att.sent();
        drop(a);
        assert_eq!(reader.join().unwrap(), &data[1000..201_000]);
    }
}
