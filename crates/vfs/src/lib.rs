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
//! - [`backend`]: the contract, split by capability (see below).
//!
//! # The traits
//! [`Core`] is what every backend has: attributes, lookup and access (with
//! combined forms that save a second call), read and write, namespace
//! changes, directory listing into a [`DirSink`], `fsstat` and `sync_all`.
//! Capability traits carry the rest, with defaults that answer "not
//! supported" written once: [`SharedLocks`], [`SharedDelegations`],
//! [`Space`], [`Xattrs`], [`ChangeNotify`] (the table in [`backend`] says
//! which backend implements what). [`Backend`] is all six together, for
//! `Arc<dyn Backend>`. Their method docs are the reference; they are not
//! repeated here.
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

/// Defines a byte string of at most `$max` bytes kept inline (no heap,
/// `Copy`) with its accessors: [`Fid`] and [`handle::Handle`] are both
/// such buffers.
macro_rules! inline_bytes {
    ($(#[$doc:meta])* $name:ident[$max:expr]) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            len: u8,
            buf: [u8; $max],
        }

        impl $name {
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
    };
}

pub mod backend;
pub mod cephfs;
pub mod durable;
pub mod faulty;
pub mod handle;
pub mod local;
pub mod memory;
mod mode;
pub mod nowait;

pub use backend::prelude;
pub use backend::{
    reply_room, user_xattr_name, Advice, Backend, ChangeNotify, Core, LockType, RangeLock,
    SeekWhat, SharedDelegations, SharedLocks, Space, XattrSet, Xattrs, XATTR_NAME_MAX,
    XATTR_SIZE_MAX, XATTR_USER_PREFIX,
};
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

/// Receives the entries of one page of [`Core::readdir_into`] and decides
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

/// How a [`Core::readdir_into`] page ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEnd {
    /// The sink took every entry up to the end of the directory.
    pub eof: bool,
    pub verifier: [u8; 8],
}

/// Collects at most `max` entries (what [`Core::readdir`] returns).
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

inline_bytes! {
    /// Backend-internal file id: opaque bytes, at most [`Fid::MAX_LEN`] bytes,
    /// stable across server restarts. Inline buffer, no heap, so it is cheap to
    /// copy around on every call.
    Fid[Fid::MAX_LEN]
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
