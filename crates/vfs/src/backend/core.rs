//! [`Core`]: what every backend must have (namespace, attributes,
//! read/write/commit, directory listing, fsstat, sync). Implemented by
//! every backend: [`crate::memory::MemFs`], [`crate::local::LocalFs`],
//! [`crate::cephfs::CephFs`] and the wrapper [`crate::faulty::Faulty`].
//! The combined and zero-copy forms (`lookup_with_dir`,
//! `access_with_attr`, `read_append`, `splice_read`, `readdir`) have
//! defaults built on the plain calls, written once here.

use crate::Collect;
use crate::{
    Access, Attr, CreateHow, Cred, DirEnd, DirPage, DirSink, Fid, FileType, FsError, FsStat,
    SetAttr, Stable,
};

/// What [`Core::read_append`] reserves for `count` bytes: the data
/// and XDR's padding after it, so that padding the reply does not grow
/// the buffer (growing it copied a whole 1 MiB READ's data).
pub fn reply_room(count: usize) -> usize {
    count.next_multiple_of(4)
}

/// The part of a storage backend every backend has. See the crate docs
/// for shared semantics.
pub trait Core: Send + Sync {
    /// The export root.
    fn root(&self) -> Fid;
    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError>;
    /// Whether the backend honours [`nowait`](crate::nowait) mode: then
    /// lookup, getattr, access, read and fsstat may be tried inline and report
    /// [`FsError::WouldBlock`] instead of waiting. Backends that do not must
    /// return false, or their calls would block an async worker.
    fn supports_nowait(&self) -> bool {
        false
    }
    /// How many files the backend keeps open between calls (its open-file
    /// cache), for the metrics; None when it keeps none it reports.
    fn kept_open(&self) -> Option<u64> {
        None
    }
    /// An NFSv4 client closed the file (CLOSE). A backend that keeps files
    /// open between calls lets go of what it keeps open for writing: on a
    /// shared file system that open stops other heads from caching the
    /// file and from taking a read delegation on it. May block (a close
    /// flushes); called only when [`Core::kept_open`] is Some.
    fn closed(&self, _fid: &Fid) {}
    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError>;
    /// `.` and `..` allowed; `..` at the root returns the root. Never follows
    /// a symlink: looking one up returns the symlink itself.
    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError>;
    /// Which of `want` the caller may really do.
    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError>;
    /// [`Core::lookup`] plus the directory's attributes, for replies that
    /// carry them (NFSv3 LOOKUP): a backend that stats the directory anyway
    /// returns that stat instead of the caller paying for a second one.
    fn lookup_with_dir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
    ) -> (Result<(Fid, Attr), FsError>, Option<Attr>) {
        let r = self.lookup(cred, dir, name);
        (r, self.getattr(dir).ok())
    }
    /// [`Core::access`] plus the object's attributes (NFSv3 ACCESS).
    fn access_with_attr(
        &self,
        cred: &Cred,
        fid: &Fid,
        want: Access,
    ) -> (Result<Access, FsError>, Option<Attr>) {
        let r = self.access(cred, fid, want);
        (r, self.getattr(fid).ok())
    }
    fn readlink(&self, cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError>;
    /// Reads into the caller's buffer; returns (bytes read, eof).
    fn read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, bool), FsError>;
    /// Like [`Core::read`] of up to `count` bytes, appended to `buf`
    /// (a reply being built), with room left for XDR's padding after the
    /// data ([`reply_room`]). A backend that can read into uninitialised
    /// memory overrides it: zero-filling a 1 MiB buffer first costs about
    /// a tenth of a 1 MiB READ.
    fn read_append(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        count: usize,
        buf: &mut bytes::BytesMut,
    ) -> Result<(usize, bool), FsError> {
        let start = buf.len();
        buf.reserve(reply_room(count));
        buf.resize(start + count, 0);
        let r = self.read(cred, fid, offset, &mut buf[start..]);
        let n = r.as_ref().map_or(0, |&(n, _)| n.min(count));
        buf.truncate(start + n);
        r
    }
    /// Like [`Core::read`] of up to `count` bytes, spliced into `pipe`
    /// (the write end of an empty pipe that holds `count` bytes) instead
    /// of copied: the pipe then holds references to the page cache's
    /// pages. None: this backend cannot (the caller copies instead).
    fn splice_read(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _offset: u64,
        _count: usize,
        _pipe: std::os::fd::BorrowedFd<'_>,
    ) -> Option<Result<(usize, bool), FsError>> {
        None
    }
    /// Returns (bytes written, stability reached).
    fn write(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<(usize, Stable), FsError>;
    /// Makes earlier unstable writes durable (fsync).
    fn commit(&self, fid: &Fid) -> Result<(), FsError>;
    fn create(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        how: &CreateHow,
    ) -> Result<(Fid, Attr), FsError>;
    fn mkdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError>;
    fn symlink(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError>;
    /// `ftype` is one of Fifo, Socket, CharDev, BlockDev (else `BadType`).
    fn mknod(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        ftype: FileType,
        rdev: (u32, u32),
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError>;
    /// Removes a non-directory.
    fn remove(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
    fn rmdir(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
    fn rename(
        &self,
        cred: &Cred,
        from_dir: &Fid,
        from_name: &[u8],
        to_dir: &Fid,
        to_name: &[u8],
    ) -> Result<(), FsError>;
    /// Hard link `fid` as `dir/name`.
    fn link(&self, cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
    /// One page of the entries after `cookie` (0 = start), handed to `sink`
    /// one by one until it refuses one or the directory ends. The caller
    /// decides what an empty page that is not at eof means (TOOSMALL).
    fn readdir_into(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        verifier: [u8; 8],
        plus: bool,
        sink: &mut dyn DirSink,
    ) -> Result<DirEnd, FsError>;
    /// One page of at most `max_entries` entries after `cookie` (0 = start).
    fn readdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        verifier: [u8; 8],
        max_entries: usize,
        plus: bool,
    ) -> Result<DirPage, FsError> {
        if max_entries == 0 {
            return Err(FsError::TooSmall);
        }
        let mut c = Collect {
            entries: Vec::with_capacity(max_entries.min(1024)),
            max: max_entries,
        };
        let end = self.readdir_into(cred, dir, cookie, verifier, plus, &mut c)?;
        Ok(DirPage {
            entries: c.entries,
            eof: end.eof,
            verifier: end.verifier,
        })
    }
    fn fsstat(&self, fid: &Fid) -> Result<FsStat, FsError>;
    /// Flush everything (syncfs), e.g. at shutdown.
    fn sync_all(&self) -> Result<(), FsError>;
}
