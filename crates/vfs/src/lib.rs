//! Storage backends for Tarn.
//!
//! This crate knows nothing about NFS wire formats or sockets: the `server`
//! crate maps these types to NFSv3 and NFSv4 wire types. The
//! [`Backend`] trait is synchronous on purpose: the server runs each call on a
//! bounded blocking pool, and the local backend switches *per-thread*
//! credentials for the duration of a call, which only works if a call stays on
//! one OS thread from start to end.
//!
//! # Modules
//! - [`handle`]: MAC'd persistent file handles ([`handle::HandleKey`],
//!   [`handle::Handle`]), at most 64 bytes on the wire.
//! - [`local`]: [`local::LocalFs`], a directory of the local filesystem, with
//!   fids from the kernel's own file handles (`name_to_handle_at`).
//! - [`cephfs`]: [`cephfs::CephFs`], a directory of a CephFS through
//!   libcephfs (loaded at run time), with inode-number fids valid on every head.
//! - [`memory`]: [`memory::MemFs`], an in-memory tree for server unit tests.
//! - [`durable`]: small state files written so a crash leaves the old or
//!   the new content (the server's state directory).
//! - [`nowait`]: running a backend call inline on an async worker when it
//!   cannot block on a disk.
//!
//! # The trait
//! [`Backend`] is the whole contract: attributes, lookup and access (with
//! combined forms that save a second call), read and write, namespace
//! changes, directory listing into a [`DirSink`], `fsstat` and `sync_all`.
//! Its method docs are the reference; they are not repeated here.
//!
//! Semantics shared by all backends:
//! - Names are single path components: `/` or NUL in a name → [`FsError::Inval`],
//!   empty → [`FsError::NoEnt`], longer than 255 bytes → [`FsError::NameTooLong`].
//!   `lookup` accepts `.` and `..`; `..` at the export root returns the root.
//!   Creating/removing `.` or `..` fails ([`FsError::Exist`] / [`FsError::Inval`]).
//! - A fid whose object was deleted → [`FsError::Stale`].
//! - `read` returns `eof = true` when the read reached the end of the file.
//! - `write` returns how much was written and how stable it is now (at least
//!   what was asked for).
//! - `create` with [`CreateHow::Exclusive`] stores the verifier in the file's
//!   atime/mtime (like Linux knfsd); a retransmission with the same verifier
//!   succeeds and returns the same file, another verifier gets [`FsError::Exist`].
//!   The client is expected to send a SETATTR afterwards, which overwrites the times.
//! - `readdir_into` hands entries to a [`DirSink`] that judges each against
//!   the client's byte budget (by name before any per-entry work, then the
//!   whole entry) and ends the page at the first that does not fit; `eof` only
//!   if the sink took everything to the end. `readdir` (a fixed
//!   `max_entries`, `0` → [`FsError::TooSmall`]) is built on it.
//! - `readdir` cookie 0 starts a listing; each entry's cookie resumes right
//!   after it. `.` and `..` are listed (NFSv3 clients expect them). Backends in
//!   this crate return a constant verifier and ignore the one passed in, since
//!   their cookies stay valid while the directory changes.
//! - Fids are at most [`Fid::MAX_LEN`] bytes and stable across restarts (for
//!   [`local::LocalFs`]; [`memory::MemFs`] lives only as long as the process).
//! - Getattr does not check permissions (NFS GETATTR needs none beyond the
//!   lookup that produced the handle). The server calls `getattr` itself for
//!   pre/post-op (wcc) attributes.

#![deny(unsafe_code)]

use std::fmt;

pub mod cephfs;
pub mod durable;
pub mod faulty;
pub mod handle;
pub mod local;
pub mod memory;
mod mode;
pub mod nowait;

pub use handle::{Handle, HandleKey};

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    pub secs: i64,
    pub nsecs: u32,
}

/// Object type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    BlockDev,
    CharDev,
    Socket,
    Fifo,
}

/// Attributes of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ftype: FileType,
    /// Permission bits including suid/sgid/sticky (`0o7777`), no type bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of storage actually used.
    pub used: u64,
    /// (major, minor) for devices, else (0, 0).
    pub rdev: (u32, u32),
    pub fsid: u64,
    pub fileid: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

/// How to set a time attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    ClientTime(Timespec),
}

/// Attributes to change; `None` / `DontChange` leaves one alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

impl SetAttr {
    /// Only a mode, as clients usually send on create.
    pub fn mode(mode: u32) -> SetAttr {
        SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        }
    }
}

/// The caller's credentials, already squashed by the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub gids: Vec<u32>,
}

impl Cred {
    pub fn root() -> Cred {
        Cred {
            uid: 0,
            gid: 0,
            gids: Vec::new(),
        }
    }

    pub fn user(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            gids: Vec::new(),
        }
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.gids.contains(&gid)
    }
}

/// How `create` treats an existing name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateHow {
    /// Create or open the existing regular file (only `size` is applied to it).
    Unchecked(SetAttr),
    /// Fail with `Exist` if the name exists.
    Guarded(SetAttr),
    /// Idempotent exclusive create keyed by the client's verifier.
    Exclusive([u8; 8]),
}

/// Write stability, weakest first (so `Ord` compares strength).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stable {
    Unstable,
    DataSync,
    FileSync,
}

/// ACCESS bits, the same values as NFSv3 `ACCESS3_*`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    pub const READ: Access = Access(0x01);
    pub const LOOKUP: Access = Access(0x02);
    pub const MODIFY: Access = Access(0x04);
    pub const EXTEND: Access = Access(0x08);
    pub const DELETE: Access = Access(0x10);
    pub const EXECUTE: Access = Access(0x20);
    pub const ALL: Access = Access(0x3f);

    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn bits(self) -> u32 {
        self.0
    }
    pub fn empty() -> Access {
        Access(0)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl std::ops::BitAnd for Access {
    type Output = Access;
    fn bitand(self, rhs: Access) -> Access {
        Access(self.0 & rhs.0)
    }
}

impl std::ops::BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub fileid: u64,
    /// Pass this back to resume the listing right after this entry.
    pub cookie: u64,
    /// Filled for READDIRPLUS (`plus = true`); `None` if the entry vanished meanwhile.
    pub plus: Option<(Fid, Attr)>,
}

/// One directory entry as a backend hands it to a [`DirSink`]: the name is
/// borrowed from the backend's buffer, so nothing is allocated per entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirItem<'a> {
    pub name: &'a [u8],
    pub fileid: u64,
    /// Pass this back to resume the listing right after this entry.
    pub cookie: u64,
    /// Filled for READDIRPLUS (`plus = true`); `None` if the entry vanished meanwhile.
    pub plus: Option<(Fid, Attr)>,
}

/// Receives the entries of one page of [`Backend::readdir_into`] and decides
/// when the page is full, so a backend does no work (stat, handle) for
/// entries that the reply has no room for.
pub trait DirSink {
    /// Whether an entry named `name` may still fit, asked before the backend
    /// does any per-entry work for it; false ends the page before it. An
    /// estimate is fine: [`DirSink::push`] has the last word.
    fn room_for(&mut self, _name: &[u8]) -> bool {
        true
    }
    /// Takes one entry; false if it does not fit: it is then not part of
    /// this page, and the page ends (the next page starts with it).
    fn push(&mut self, e: DirItem<'_>) -> bool;
}

/// How a [`Backend::readdir_into`] page ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEnd {
    /// The sink took every entry up to the end of the directory.
    pub eof: bool,
    pub verifier: [u8; 8],
}

/// Collects at most `max` entries (what [`Backend::readdir`] returns).
struct Collect {
    entries: Vec<DirEntry>,
    max: usize,
}

impl DirSink for Collect {
    fn room_for(&mut self, _name: &[u8]) -> bool {
        self.entries.len() < self.max
    }
    fn push(&mut self, e: DirItem<'_>) -> bool {
        if self.entries.len() >= self.max {
            return false;
        }
        self.entries.push(DirEntry {
            name: e.name.to_vec(),
            fileid: e.fileid,
            cookie: e.cookie,
            plus: e.plus,
        });
        true
    }
}

/// One page of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    pub eof: bool,
    pub verifier: [u8; 8],
}

/// Filesystem usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
    pub avail_files: u64,
}

/// Backend-internal file id: opaque bytes, at most [`Fid::MAX_LEN`] bytes,
/// stable across server restarts. Inline buffer, no heap, so it is cheap to
/// copy around on every call.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fid {
    len: u8,
    buf: [u8; Fid::MAX_LEN],
}

impl Fid {
    pub const MAX_LEN: usize = 40;

    /// `None` if `bytes` is longer than [`Fid::MAX_LEN`].
    pub fn new(bytes: &[u8]) -> Option<Fid> {
        if bytes.len() > Self::MAX_LEN {
            return None;
        }
        let mut buf = [0u8; Self::MAX_LEN];
        buf[..bytes.len()].copy_from_slice(bytes);
        Some(Fid {
            len: bytes.len() as u8,
            buf,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for Fid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fid(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Errors, close to NFSv3 `nfsstat3` (and NFSv4's superset) so the server can
/// map them one to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FsError {
    /// The call would wait for a disk in [`nowait`] mode; never sent to a client.
    #[error("would block")]
    WouldBlock,
    #[error("not owner")]
    Perm,
    #[error("no such file or directory")]
    NoEnt,
    #[error("I/O error")]
    Io,
    #[error("no such device or address")]
    NxIo,
    #[error("permission denied")]
    Acces,
    #[error("file exists")]
    Exist,
    #[error("cross-device link")]
    XDev,
    #[error("no such device")]
    NoDev,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("invalid argument")]
    Inval,
    #[error("file too large")]
    FBig,
    #[error("no space left on device")]
    NoSpc,
    #[error("read-only filesystem")]
    RoFs,
    #[error("too many links")]
    MLink,
    #[error("name too long")]
    NameTooLong,
    #[error("directory not empty")]
    NotEmpty,
    #[error("quota exceeded")]
    DQuot,
    #[error("stale file handle")]
    Stale,
    #[error("bad file handle")]
    BadHandle,
    #[error("readdir cookie is no longer valid")]
    BadCookie,
    #[error("operation not supported")]
    NotSupp,
    #[error("buffer too small")]
    TooSmall,
    #[error("server fault")]
    ServerFault,
    #[error("object of a type the operation does not support")]
    BadType,
    #[error("temporarily unavailable, retry later")]
    Jukebox,
    #[error("too many levels of symbolic links")]
    Loop,
    /// ENODATA from an extended attribute call: no attribute of that name.
    #[error("no such extended attribute")]
    NoXattr,
    /// An extended attribute value (or list) larger than the filesystem or
    /// the reply can hold (E2BIG, ERANGE).
    #[error("extended attribute too large")]
    XattrTooBig,
}

impl FsError {
    /// Short text for logs.
    pub fn reason(&self) -> &'static str {
        match self {
            FsError::WouldBlock => "would block",
            FsError::Perm => "not owner",
            FsError::NoEnt => "no such file or directory",
            FsError::Io => "I/O error",
            FsError::NxIo => "no such device or address",
            FsError::Acces => "permission denied",
            FsError::Exist => "file exists",
            FsError::XDev => "cross-device link",
            FsError::NoDev => "no such device",
            FsError::NotDir => "not a directory",
            FsError::IsDir => "is a directory",
            FsError::Inval => "invalid argument",
            FsError::FBig => "file too large",
            FsError::NoSpc => "no space left on device",
            FsError::RoFs => "read-only filesystem",
            FsError::MLink => "too many links",
            FsError::NameTooLong => "name too long",
            FsError::NotEmpty => "directory not empty",
            FsError::DQuot => "quota exceeded",
            FsError::Stale => "stale file handle",
            FsError::BadHandle => "bad file handle",
            FsError::BadCookie => "bad readdir cookie",
            FsError::NotSupp => "operation not supported",
            FsError::TooSmall => "buffer too small",
            FsError::ServerFault => "server fault",
            FsError::BadType => "bad object type",
            FsError::Jukebox => "retry later",
            FsError::Loop => "symlink loop",
            FsError::NoXattr => "no such extended attribute",
            FsError::XattrTooBig => "extended attribute too large",
        }
    }

    /// errno → error, one to one where NFS has a matching status. Errors with
    /// no NFS counterpart become `Io`, except those that mean "the server is
    /// broken" (`ServerFault`) or "try again" (`Jukebox`).
    pub fn from_errno(errno: i32) -> FsError {
        match errno {
            libc::EPERM => FsError::Perm,
            libc::ENOENT => FsError::NoEnt,
            libc::EIO => FsError::Io,
            libc::ENXIO => FsError::NxIo,
            libc::EACCES => FsError::Acces,
            libc::EEXIST => FsError::Exist,
            libc::EXDEV => FsError::XDev,
            libc::ENODEV => FsError::NoDev,
            libc::ENOTDIR => FsError::NotDir,
            libc::EISDIR => FsError::IsDir,
            libc::EINVAL => FsError::Inval,
            libc::EFBIG => FsError::FBig,
            libc::ENOSPC => FsError::NoSpc,
            libc::EROFS => FsError::RoFs,
            libc::EMLINK => FsError::MLink,
            libc::ENAMETOOLONG => FsError::NameTooLong,
            libc::ENOTEMPTY => FsError::NotEmpty,
            libc::EDQUOT => FsError::DQuot,
            libc::ESTALE => FsError::Stale,
            libc::EOPNOTSUPP | libc::ENOSYS => FsError::NotSupp,
            libc::ELOOP => FsError::Loop,
            libc::ENODATA => FsError::NoXattr,
            libc::E2BIG | libc::ERANGE => FsError::XattrTooBig,
            // Busy/in-use objects are refused, as knfsd does.
            libc::EBUSY | libc::ETXTBSY => FsError::Acces,
            libc::EAGAIN | libc::ENOMEM | libc::ENFILE | libc::EMFILE => FsError::Jukebox,
            libc::EBADF | libc::EFAULT => FsError::ServerFault,
            libc::EOVERFLOW => FsError::FBig,
            _ => FsError::Io,
        }
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        match e.raw_os_error() {
            Some(errno) => FsError::from_errno(errno),
            None => match e.kind() {
                std::io::ErrorKind::NotFound => FsError::NoEnt,
                std::io::ErrorKind::PermissionDenied => FsError::Acces,
                std::io::ErrorKind::AlreadyExists => FsError::Exist,
                std::io::ErrorKind::InvalidInput => FsError::Inval,
                _ => FsError::Io,
            },
        }
    }
}

/// Maximum length of one name component.
pub const NAME_MAX: usize = 255;

/// Checks a name for create/remove/rename targets: one component, not `.`/`..`.
pub(crate) fn check_new_name(name: &[u8]) -> Result<(), FsError> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exist);
    }
    Ok(())
}

/// Checks both names of a rename: real entries, never `.` or `..`.
pub(crate) fn check_rename_names(from: &[u8], to: &[u8]) -> Result<(), FsError> {
    for n in [from, to] {
        check_name(n)?;
        if n == b"." || n == b".." {
            return Err(FsError::Inval);
        }
    }
    Ok(())
}

/// Checks a name is a single component (may be `.` or `..`).
pub(crate) fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.is_empty() {
        return Err(FsError::NoEnt);
    }
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(FsError::Inval);
    }
    Ok(())
}

/// The kind of a byte-range lock taken in the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockType {
    Read,
    Write,
}

/// A lock that stands in the way in the backend (held by another head or
/// another client of the file system). `length` is `u64::MAX` to end of file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeLock {
    pub offset: u64,
    pub length: u64,
    pub kind: LockType,
}

/// What [`Backend::read_append`] reserves for `count` bytes: the data
/// and XDR's padding after it, so that padding the reply does not grow
/// the buffer (growing it copied a whole 1 MiB READ's data).
pub fn reply_room(count: usize) -> usize {
    count.next_multiple_of(4)
}

/// A storage backend. See the crate docs for shared semantics.
pub trait Backend: Send + Sync {
    /// The export root.
    fn root(&self) -> Fid;
    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError>;
    /// Whether the backend honours [`nowait`] mode: then lookup, getattr,
    /// access, read and fsstat may be tried inline and report
    /// [`FsError::WouldBlock`] instead of waiting. Backends that do not must
    /// return false, or their calls would block an async worker.
    fn supports_nowait(&self) -> bool {
        false
    }
    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError>;
    /// `.` and `..` allowed; `..` at the root returns the root. Never follows
    /// a symlink: looking one up returns the symlink itself.
    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError>;
    /// Which of `want` the caller may really do.
    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError>;
    /// [`Backend::lookup`] plus the directory's attributes, for replies that
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
    /// [`Backend::access`] plus the object's attributes (NFSv3 ACCESS).
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
    /// Like [`Backend::read`] of up to `count` bytes, appended to `buf`
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
    /// Like [`Backend::read`] of up to `count` bytes, spliced into `pipe`
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
    /// The first offset at or after `offset` where `what` begins, as
    /// lseek(2) SEEK_DATA/SEEK_HOLE answers: every file ends in an implicit
    /// hole, so a hole is always found at or below the size. `NxIo` when
    /// `offset` is at or past the end, or no data follows it. Needs read
    /// permission.
    fn seek(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _offset: u64,
        _what: SeekWhat,
    ) -> Result<u64, FsError> {
        Err(FsError::NotSupp)
    }
    /// Reserves space for `len` bytes at `offset` (fallocate(2) mode 0):
    /// later writes there do not fail for lack of space, and the size
    /// grows to cover the range. Needs write permission.
    fn allocate(&self, _cred: &Cred, _fid: &Fid, _offset: u64, _len: u64) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Frees `len` bytes at `offset` (fallocate(2) PUNCH_HOLE|KEEP_SIZE):
    /// the range reads as zeros afterwards and the size does not change.
    /// Needs write permission.
    fn deallocate(&self, _cred: &Cred, _fid: &Fid, _offset: u64, _len: u64) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Copies up to `len` bytes of `src` at `src_off` into `dst` at
    /// `dst_off` within this backend (copy_file_range(2)); returns the
    /// bytes copied, fewer than `len` only where the source ends. Needs
    /// read permission on `src` and write permission on `dst`; an
    /// overlapping range of one file is `Inval`.
    #[allow(clippy::too_many_arguments)]
    fn copy_range(
        &self,
        _cred: &Cred,
        _src: &Fid,
        _src_off: u64,
        _dst: &Fid,
        _dst_off: u64,
        _len: u64,
    ) -> Result<u64, FsError> {
        Err(FsError::NotSupp)
    }
    /// Makes `dst` at `dst_off` share `src`'s storage from `src_off` for
    /// `len` bytes (0: to the source's end), as the FICLONERANGE ioctl
    /// does; `NotSupp` where the backend cannot share storage. Permissions
    /// as for [`Backend::copy_range`].
    #[allow(clippy::too_many_arguments)]
    fn clone_range(
        &self,
        _cred: &Cred,
        _src: &Fid,
        _src_off: u64,
        _dst: &Fid,
        _dst_off: u64,
        _len: u64,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Passes an access-pattern hint for `len` bytes at `offset` (0: to
    /// the end) to the backend's cache, as posix_fadvise(2); `NotSupp`
    /// when the backend has no use for it. Needs read permission.
    fn advise(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _offset: u64,
        _len: u64,
        _advice: Advice,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Asks to hear of objects changed other than through this server
    /// (a local process writing, truncating, renaming, removing, changing
    /// attributes), soon after each change; false where the backend
    /// cannot tell (then nothing is called).
    fn on_local_change(&self, _hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        false
    }
    /// Whether an NFSv4 delegation on this backend's files needs one of the
    /// file system's own behind it (CephFS: other heads and other clients
    /// of the file system change files behind this server's back). When
    /// false (local and memory backends) the calls below are never needed.
    fn shares_delegations(&self) -> bool {
        false
    }
    /// Takes (or keeps) a read delegation of the file system on `fid`:
    /// until [`Backend::undelegate`], a conflicting open elsewhere waits
    /// and the recall hook is called. Ok(false): a conflicting open exists
    /// (grant none). A recalled delegation must be given back within
    /// `give_back_within` (the file system may drop the whole mount of a
    /// late holder).
    fn delegate(
        &self,
        _fid: &Fid,
        _give_back_within: std::time::Duration,
    ) -> Result<bool, FsError> {
        Ok(true)
    }
    /// Gives the file system's delegation on `fid` back (none held: nothing).
    fn undelegate(&self, _fid: &Fid) {}
    /// Asks to hear when the file system recalls a delegation taken with
    /// [`Backend::delegate`]; the hook runs on the backend's own thread and
    /// must only pass the news on. False where there are none.
    fn on_delegation_recall(&self, _hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        false
    }
    /// Whether the objects of this backend can carry user extended
    /// attributes (the NFSv4.2 xattr_support attribute).
    fn xattr_support(&self) -> bool {
        false
    }
    /// The value of the user extended attribute `name` (given without the
    /// `user.` prefix, as NFSv4.2 names them). `NoXattr` when there is
    /// none. Needs read permission.
    fn getxattr(&self, _cred: &Cred, _fid: &Fid, _name: &[u8]) -> Result<Vec<u8>, FsError> {
        Err(FsError::NotSupp)
    }
    /// Sets the user extended attribute `name` (without `user.`) to
    /// `value`; `how` says whether it must or must not exist already
    /// (`NoXattr`, `Exist`). Needs write permission.
    fn setxattr(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _name: &[u8],
        _value: &[u8],
        _how: XattrSet,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// The names of the object's user extended attributes, without the
    /// `user.` prefix, in an order that stays the same while they do.
    /// Needs read permission.
    fn listxattrs(&self, _cred: &Cred, _fid: &Fid) -> Result<Vec<Vec<u8>>, FsError> {
        Err(FsError::NotSupp)
    }
    /// Removes the user extended attribute `name` (without `user.`);
    /// `NoXattr` when there is none. Needs write permission.
    fn removexattr(&self, _cred: &Cred, _fid: &Fid, _name: &[u8]) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Whether byte-range locks are also kept by the file system itself,
    /// where other servers of it see them (CephFS: every head). When false
    /// (local and memory backends) the server's lock manager is the whole
    /// truth and the three calls below are never needed (they do nothing).
    fn shares_locks(&self) -> bool {
        false
    }
    /// Takes, upgrades or downgrades `owner`'s POSIX lock on `offset`,
    /// `length` (`u64::MAX`: to end of file) without waiting. `Ok(Some)`:
    /// refused, naming one conflicting lock held elsewhere; nothing
    /// changed then. `owner` names the lock owner within this server:
    /// different owners conflict with each other, as processes do.
    fn lock_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _kind: LockType,
        _offset: u64,
        _length: u64,
    ) -> Result<Option<RangeLock>, FsError> {
        Ok(None)
    }
    /// Whether [`Backend::lock_range`] would be refused now, and by what;
    /// changes nothing.
    fn test_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _kind: LockType,
        _offset: u64,
        _length: u64,
    ) -> Result<Option<RangeLock>, FsError> {
        Ok(None)
    }
    /// Releases `owner`'s locks on the range (splitting as POSIX does);
    /// releasing what is not held is not an error.
    fn unlock_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _offset: u64,
        _length: u64,
    ) -> Result<(), FsError> {
        Ok(())
    }
}

/// A hint for [`Backend::advise`], as posix_fadvise(2) takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    WillNeed,
    DontNeed,
    NoReuse,
}

/// What [`Backend::setxattr`] requires of an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create it or replace it.
    Either,
    /// Fail with `Exist` if it exists (XATTR_CREATE).
    Create,
    /// Fail with `NoXattr` if it does not (XATTR_REPLACE).
    Replace,
}

/// The namespace every NFSv4.2 extended attribute lives in (RFC 8276:
/// the protocol's names are user attributes, without this prefix; Linux
/// knfsd adds it the same way).
pub const XATTR_USER_PREFIX: &[u8] = b"user.";
/// Longest attribute name Linux takes, prefix included (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value Linux takes (XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 65536;

/// The full name (`user.` + `name`) of an NFSv4.2 attribute name, once it
/// is one the backend can take: not empty (Inval), no NUL byte (Inval),
/// not past XATTR_NAME_MAX with the prefix (NameTooLong).
pub fn user_xattr_name(name: &[u8]) -> Result<Vec<u8>, FsError> {
    if name.is_empty() || name.contains(&0) {
        return Err(FsError::Inval);
    }
    if name.len() > XATTR_NAME_MAX - XATTR_USER_PREFIX.len() {
        return Err(FsError::NameTooLong);
    }
    let mut full = Vec::with_capacity(XATTR_USER_PREFIX.len() + name.len());
    full.extend_from_slice(XATTR_USER_PREFIX);
    full.extend_from_slice(name);
    Ok(full)
}

/// What [`Backend::seek`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        let e: FsError = std::io::Error::from_raw_os_error(libc::ESTALE).into();
        assert_eq!(e, FsError::Stale);
        let e: FsError = std::io::Error::from_raw_os_error(libc::ENOTEMPTY).into();
        assert_eq!(e, FsError::NotEmpty);
        assert_eq!(FsError::from_errno(libc::EDQUOT), FsError::DQuot);
        assert_eq!(FsError::Acces.to_string(), "permission denied");
    }

    #[test]
    fn names() {
        assert_eq!(check_name(b"a/b"), Err(FsError::Inval));
        assert_eq!(check_name(b"a\0"), Err(FsError::Inval));
        assert_eq!(check_name(b""), Err(FsError::NoEnt));
        assert_eq!(check_name(&[b'x'; 256]), Err(FsError::NameTooLong));
        assert!(check_name(b"..").is_ok());
        assert_eq!(check_new_name(b".."), Err(FsError::Exist));
    }

    #[test]
    fn fid_limits() {
        assert!(Fid::new(&[0; 41]).is_none());
        let f = Fid::new(&[1, 2, 3]).unwrap();
        assert_eq!(f.as_bytes(), &[1, 2, 3]);
    }
}
