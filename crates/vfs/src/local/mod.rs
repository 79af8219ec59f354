//! [`LocalFs`]: exports a directory of the local filesystem.
//!
//! # Fids
//! A fid is the kernel's own file handle for the object
//! (`name_to_handle_at`): one byte of handle type, then the handle bytes
//! (8 bytes on ext4). They survive server restarts, and `open_by_handle_at`
//! (on the export root, which identifies the filesystem) turns them back into
//! descriptors, answering `ESTALE` → [`FsError::Stale`] once the object is
//! gone. That needs `CAP_DAC_READ_SEARCH` and a filesystem that supports
//! handles; [`LocalFs::new`] checks both and fails with a clear message.
//!
//! # Staying inside the export
//! - Names are single components (no `/`, no NUL). Every name is resolved
//!   relative to a directory fd with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_MAGICLINKS)` and `O_NOFOLLOW`, so a symlink is never followed:
//!   looking one up returns the symlink itself.
//! - `..` of the export root is the root.
//! - Objects on another mount below the export (a different mount id) are
//!   refused with [`FsError::XDev`]: their handles would decode against the
//!   wrong filesystem.
//! - Limitation: `open_by_handle_at` opens a handle anywhere on the
//!   filesystem. We only issue fids for objects reached beneath the export and
//!   the handle MAC stops clients from forging others, but an object that a
//!   *local* user moves out of the export tree stays reachable through a fid
//!   the client already holds (as with knfsd's `no_subtree_check`).
//!
//! # Permissions
//! When the server runs as root, each call switches the calling thread's
//! fsuid, fsgid and supplementary groups to the caller's ([`Cred`], already
//! squashed by the server) for the duration of the call, with raw per-thread
//! syscalls and an RAII guard that restores them. So the kernel's own checks
//! apply exactly — mode bits, sticky directories, ACLs, setgid directories,
//! suid clearing on write — with no re-implementation of permission logic
//! here. Descriptors are opened by handle *before* switching (that needs
//! `CAP_DAC_READ_SEARCH`, which a non-root fsuid drops), and then:
//! - name operations (lookup, create, remove, rename, link, …) run as the
//!   caller, so the kernel checks the directory permissions;
//! - data operations use descriptors opened by root, after the kernel checks
//!   the caller's access with `faccessat2(AT_EACCESS | AT_EMPTY_PATH)` under
//!   the caller's fs credentials. Like knfsd, the owner may read and write
//!   their own file whatever its mode (NFS has no open: a client that created
//!   a file 0444 must still be able to write it), and a file the caller may
//!   execute may be read (to run binaries);
//! - ACCESS is answered with the same `faccessat2` checks (NFSv3 table as
//!   knfsd: files READ→R, MODIFY/EXTEND→W, EXECUTE→X; directories READ→R,
//!   LOOKUP→X, MODIFY/EXTEND/DELETE→W+X).
//!
//! The switch costs more than most calls it guards, so the kernel's answers
//! (R, W, X, W+X) are remembered per (object, caller) for as long as the
//! object's ctime, mode, owner and group stay the same ([`perm`]). LOOKUP
//! (search permission on the directory is all a one-name lookup needs),
//! ACCESS and READ then run as root with no switch at all; WRITE too, unless
//! the file is suid or sgid-executable (the kernel clears those bits only
//! for writers without CAP_FSETID, so such writes run as the caller). The
//! supplementary groups a switch sets stay on the thread afterwards (root's
//! access does not depend on them), so a thread serving one user sets them
//! once.
//!
//! When the server does not run as root (it then needs `CAP_DAC_READ_SEARCH`
//! as a file capability), no switch happens: every operation runs as the
//! server's own user, and the callers' credentials are ignored.
//!
//! The process umask is shared by all threads, so modes given on create are
//! applied explicitly with chmod afterwards.
//!
//! # Data
//! read/write use `pread`/`pwrite` on descriptors opened by handle, kept in a
//! small LRU cache ([`FD_CACHE_SIZE`]); each use re-checks with `fstat` that
//! the file still has a link (else Stale). `FileSync` → `fsync`, `DataSync` →
//! `fdatasync`, commit → `fsync`.
//!
//! # Readdir
//! Cookies are the `d_off` values from `getdents64` (hash positions on ext4,
//! stable while the directory changes). The verifier is constant zero and
//! ignored (cookies don't go stale). `.` and `..` are listed; `..` of the
//! root is the root. (A 64-bit ext4 hash collision split across pages could
//! repeat an entry on a fresh open; knfsd shares this.)
//!
//! Entries go to the caller's [`DirSink`], which ends the page at the first
//! entry that does not fit, judged by name before anything is done for it:
//! no entry is stat'ed and thrown away. With `plus`, each entry costs a
//! `name_to_handle_at` and an `fstatat` by name (two lookups, but cheaper than
//! opening the entry); the inode numbers must match the dirent's, else the
//! name was replaced meanwhile and the entry goes without handle/attributes.
//!
//! Directory streams ([`dirs`]): a page that did not reach the end leaves its
//! directory open (O_RDONLY, opened by handle) with the dirents already read
//! but not delivered, filed under (dir fid, cookie of the last entry sent).
//! The next page with that cookie continues from it, without reopening by
//! handle, seeking or ext4 rebuilding its htree position; any other cookie
//! opens afresh and `lseek`s to it. A stream is taken out of the cache while
//! a page is read, so concurrent listings never share one; at most
//! [`dirs::DIR_STREAMS`] are kept (LRU), each closed after
//! [`dirs::DIR_STREAM_IDLE`] unused, and none after eof. The caller's R
//! permission on the directory is checked on every page all the same.
//! Buffered dirents may be a few seconds old: an entry removed since can
//! still be listed (without attributes with `plus`), as it could be had it
//! been removed right after the reply.
//!
//! Kept listings ([`listings`]): a pass read in full from cookie 0 is kept
//! in memory with its entries' handles and attributes, and answers later
//! pages without syscalls while fanotify ([`changes`]) reports nothing about
//! the directory since the pass began; an entry's handle and attributes are
//! fetched again once that object has an event. LOOKUP answers, and the
//! attributes of the directories looked up in, are kept the same way
//! ([`known`]).
//!
//! # Exclusive create
//! `O_CREAT|O_EXCL`, then the verifier goes into mtime (first 4 bytes) and
//! atime (last 4), each masked to 31 bits, as knfsd does.

mod changes;
mod dirs;
mod known;
mod listings;
mod perm;
mod sys;

use crate::nowait;
use dirs::{DirStream, DirStreams};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::backend::{ranges_overlap, verifier_times};
use crate::{
    check_name, check_new_name, check_rename_names, Access, Advice, Attr, ChangeNotify, Core,
    CreateHow, Cred, DirEnd, DirItem, DirSink, Fid, FileType, FsError, FsStat, SeekWhat, SetAttr,
    SetTime, Stable, Timespec, XattrSet,
};

/// How many data descriptors stay open.
pub const FD_CACHE_SIZE: usize = 1024;
/// O_PATH descriptors kept open (the server raises RLIMIT_NOFILE to fit).
pub const PATH_CACHE_SIZE: usize = 4096;
/// Access decisions remembered (about 200 bytes each).
pub const PERM_CACHE_SIZE: usize = 65536;

/// Why [`LocalFs::new`] failed, with a message for the operator.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct InitError {
    pub kind: FsError,
    pub msg: String,
}

impl From<InitError> for FsError {
    fn from(e: InitError) -> FsError {
        e.kind
    }
}

/// A local directory export. See the module docs.
pub struct LocalFs {
    /// The export root, opened O_RDONLY|O_DIRECTORY; also the mount fd for
    /// open_by_handle_at and the fd for syncfs.
    root: OwnedFd,
    root_fid: Fid,
    root_ino: u64,
    root_dev: u64,
    mount_id: i32,
    /// Running as root: switch fs credentials per call.
    switch_creds: bool,
    /// The export's filesystem takes user extended attributes.
    xattrs: bool,
    base_gid: u32,
    base_groups: Vec<u32>,
    /// Data descriptors (O_RDWR or O_RDONLY) of regular files.
    cache: FdCache<DataFd>,
    /// O_PATH descriptors of any object: GETATTR and friends cost one fstat.
    paths: FdCache<OwnedFd>,
    /// The kernel's access decisions per (object, caller): most calls need
    /// no credential switch (see `perm`).
    perms: perm::PermCache,
    /// Directory streams between READDIR pages.
    dirs: DirStreams,
    /// What changed on the export's filesystem, and since when (shared
    /// with the thread that reports local changes, when one runs).
    changes: Arc<changes::Changes>,
    /// Directory listings read in full, with their entries' attributes.
    listings: listings::Listings,
    /// LOOKUP answers and directories' attributes.
    known: known::Known,
}

impl std::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFs")
            .field("root_fid", &self.root_fid)
            .finish()
    }
}

fn io_err(e: io::Error) -> FsError {
    if e.raw_os_error() == Some(libc::EAGAIN) && nowait::active() {
        return nowait::would_block();
    }
    FsError::from(e)
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit, so that the
/// descriptor caches of several exports fit; returns the new limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    sys::raise_nofile_limit()
}

impl LocalFs {
    pub fn new(root: &Path) -> Result<LocalFs, InitError> {
        let fail = |kind: FsError, msg: String| InitError { kind, msg };
        let path = sys::cstr(root.as_os_str().as_bytes()).map_err(|_| {
            fail(
                FsError::Inval,
                format!("bad export path {}", root.display()),
            )
        })?;
        let root_fd = sys::open_path(&path, libc::O_RDONLY | libc::O_DIRECTORY).map_err(|e| {
            fail(
                FsError::from(io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0))),
                format!("cannot open export root {}: {e}", root.display()),
            )
        })?;
        let kh =
            sys::name_to_handle(root_fd.as_fd(), sys::EMPTY, libc::AT_EMPTY_PATH).map_err(|e| {
                fail(
                    FsError::NotSupp,
                    format!(
                        "the filesystem of {} does not support file handles \
                         (name_to_handle_at: {e}); persistent NFS handles need it",
                        root.display()
                    ),
                )
            })?;
        let root_fid = encode_fid(&kh).ok_or_else(|| {
            fail(
                FsError::NotSupp,
                format!(
                    "file handles of {} are too large ({} bytes, type {})",
                    root.display(),
                    kh.len,
                    kh.htype
                ),
            )
        })?;
        sys::open_by_handle(root_fd.as_fd(), kh.htype, &kh.bytes[..kh.len], libc::O_PATH).map_err(
            |e| {
                let msg = if e.raw_os_error() == Some(libc::EPERM) {
                    "open_by_handle_at is not permitted: run as root or grant \
                     CAP_DAC_READ_SEARCH"
                        .to_string()
                } else {
                    format!("open_by_handle_at failed on {}: {e}", root.display())
                };
                fail(FsError::Perm, msg)
            },
        )?;
        let st = sys::fstat(root_fd.as_fd()).map_err(|e| fail(FsError::Io, e.to_string()))?;
        let switch_creds = sys::geteuid() == 0;
        // setfsuid cannot report failure (it would leave calls running as
        // root), so prove once that this process may switch.
        if switch_creds {
            let was = sys::set_thread_fsuid(65534);
            let now = sys::set_thread_fsuid(u32::MAX);
            sys::set_thread_fsuid(was);
            if now != 65534 {
                return Err(fail(
                    FsError::Perm,
                    "cannot switch fs credentials (setfsuid): the server runs as \
                     root without CAP_SETUID"
                        .to_string(),
                ));
            }
        }
        let base_groups = if switch_creds {
            sys::getgroups().map_err(|e| fail(FsError::Io, e.to_string()))?
        } else {
            Vec::new()
        };
        let changes = changes::Changes::new(root_fd.as_fd(), &root_fid).unwrap_or_else(|why| {
            tracing::info!(
                "{}: directory listings are not kept in memory ({why})",
                root.display()
            );
            changes::Changes::disabled()
        });
        // ENODATA for a name nobody sets means the filesystem has user
        // xattrs; EOPNOTSUPP that it has none (so xattr_support is false).
        let xattrs = !matches!(
            sys::getxattr_fd(root_fd.as_fd(), c"user.tarn.probe", &mut []),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP)
        );
        Ok(LocalFs {
            changes: Arc::new(changes),
            xattrs,
            listings: listings::Listings::new(listings::LISTED_ENTRIES),
            known: known::Known::new(known::KNOWN_NAMES),
            root: root_fd,
            root_fid,
            root_ino: st.st_ino,
            root_dev: st.st_dev,
            mount_id: kh.mount_id,
            switch_creds,
            base_gid: sys::getegid(),
            base_groups,
            cache: FdCache::new(FD_CACHE_SIZE),
            paths: FdCache::new(PATH_CACHE_SIZE),
            perms: perm::PermCache::new(PERM_CACHE_SIZE),
            dirs: DirStreams::new(dirs::DIR_STREAMS, dirs::DIR_STREAM_IDLE),
        })
    }

    /// Switches this thread's fs credentials to `cred` until the guard drops.
    fn as_user(&self, cred: &Cred) -> Result<CredGuard<'_>, FsError> {
        if !self.switch_creds {
            return Ok(CredGuard { fs: None });
        }
        // Groups first: setgroups needs CAP_SETGID, which setfsuid keeps, but
        // do it while we are still fully root anyway. The guard leaves them
        // in place (root's own access never depends on its supplementary
        // groups), so a thread serving one user does not set them again.
        THREAD_GROUPS.with(|g| {
            let mut g = g.borrow_mut();
            if g.as_deref().unwrap_or(&self.base_groups) != cred.gids.as_slice() {
                sys::set_thread_groups(&cred.gids).map_err(io_err)?;
                *g = Some(cred.gids.clone());
            }
            Ok::<_, FsError>(())
        })?;
        limit_resources(cred)?;
        let guard = CredGuard { fs: Some(self) };
        sys::set_thread_fsgid(cred.gid);
        // Proven to work at start (see `new`), so no read-back here.
        sys::set_thread_fsuid(cred.uid);
        Ok(guard)
    }

    /// The kernel's answers to `perm::QUESTIONS` for `cred` on `fd` (the
    /// object `fid`, now in state `st`): remembered while the object's
    /// permissions stay the same, else asked under the caller's credentials.
    /// Only the questions in `need` are sure to be answered: when the answer
    /// cannot be remembered (the object changed moments ago, as a file being
    /// written always has), only those are asked.
    fn allowed(
        &self,
        cred: &Cred,
        fid: &Fid,
        fd: BorrowedFd<'_>,
        st: &libc::stat,
        need: &[libc::c_int],
    ) -> Result<perm::Allowed, FsError> {
        let only = |m| need.contains(&m) && self.may(fd, m);
        if !self.switch_creds {
            return Ok(perm::Allowed::ask(only));
        }
        if let Some(a) = self.perms.get(fid, cred, st) {
            return Ok(a);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let keep = self.perms.would_keep(st, now);
        let g = self.as_user(cred)?;
        if !keep {
            return Ok(perm::Allowed::ask(only));
        }
        let a = perm::Allowed::ask(|m| self.may(fd, m));
        drop(g);
        self.perms.put(fid, cred, st, a, now);
        Ok(a)
    }

    fn is_root(&self, st: &libc::stat) -> bool {
        st.st_ino == self.root_ino && st.st_dev == self.root_dev
    }

    /// Opens `fid` O_PATH (as root) and stats it; deleted objects → Stale.
    fn open_fid(&self, fid: &Fid, flags: libc::c_int) -> Result<(OwnedFd, libc::stat), FsError> {
        let b = fid.as_bytes();
        if b.is_empty() {
            return Err(FsError::BadHandle);
        }
        // Decoding a handle may read the inode from disk.
        nowait::forbid()?;
        // Linux (seen on 6.18) briefly answers ENOMEM instead of ESTALE for an
        // inode that is being freed, e.g. just after our cached descriptor of
        // a deleted file was closed: retry a few times before believing it.
        let mut tries = 0;
        let fd = loop {
            match sys::open_by_handle(self.root.as_fd(), b[0] as i32, &b[1..], flags) {
                Err(e) if e.raw_os_error() == Some(libc::ENOMEM) && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_micros(50 << tries.min(6)));
                }
                r => {
                    break r.map_err(|e| match e.raw_os_error() {
                        Some(libc::ESTALE) | Some(libc::ENOENT) => FsError::Stale,
                        Some(libc::EINVAL) => FsError::BadHandle,
                        _ => io_err(e),
                    })?;
                }
            }
        };
        let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
        // An unlinked but still open inode can still be decoded.
        if st.st_nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok((fd, st))
    }

    /// An O_PATH descriptor of `fid` and its current attributes, from the
    /// cache when possible (one fstat), else opened by handle and cached.
    /// LOOKUP in an already opened directory (see [`Core::lookup`]).
    fn lookup_in(
        &self,
        cred: &Cred,
        dir: &Fid,
        dfd: &OwnedFd,
        dst: &libc::stat,
        name: &[u8],
    ) -> Result<(Fid, Attr), FsError> {
        // Looking up one name needs search permission on the directory and
        // nothing else, so once that is granted the lookup runs as root.
        let search = self.allowed(cred, dir, dfd.as_fd(), dst, &[libc::X_OK])?;
        if !search.may(libc::X_OK) {
            return Err(FsError::Acces);
        }
        if name == b".." {
            return match self.parent(dfd.as_fd(), dst)? {
                None => Ok((self.root_fid, to_attr(dst))),
                Some(p) => self.fid_attr(p.as_fd()),
            };
        }
        let c = sys::cstr(name).map_err(io_err)?;
        let fd = self.open_child(dfd.as_fd(), &c)?;
        let (fid, attr) = self.fid_attr(fd.as_fd())?;
        // A client that looked a name up is about to use it: keep the
        // descriptor, so the next call need not decode the handle.
        self.paths.insert(fid, Arc::new(fd));
        Ok((fid, attr))
    }

    /// LOOKUP from kept answers (see `known`), fetching and keeping what is
    /// missing; `None` when changes are not followed (or for `.` and `..`):
    /// then the plain path answers.
    #[allow(clippy::type_complexity)]
    fn lookup_known(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
    ) -> Option<(Result<(Fid, Attr), FsError>, Option<Attr>)> {
        if !self.changes.following() || !self.switch_creds || name == b".." || name == b"." {
            return None;
        }
        let seq = self.changes.sync();
        let (mut dfd, dst) = match self.known.get(&self.changes, dir, b"") {
            Some((_, st)) => (None, st),
            None => match self.open_dir(dir) {
                Ok((fd, st)) => {
                    self.known.put(dir, b"", *dir, st, seq);
                    (Some(fd), st)
                }
                Err(e) => return Some((Err(e), None)),
            },
        };
        let search = match self.perms.get(dir, cred, &dst) {
            Some(a) => a,
            None => {
                let asked = (|| {
                    let (fd, st) = self.open_dir(dir)?;
                    let a = self.allowed(cred, dir, fd.as_fd(), &st, &[libc::X_OK])?;
                    dfd = Some(fd);
                    Ok(a)
                })();
                match asked {
                    Ok(a) => a,
                    Err(e) => return Some((Err(e), Some(to_attr(&dst)))),
                }
            }
        };
        let dir_attr = Some(to_attr(&dst));
        if !search.may(libc::X_OK) {
            return Some((Err(FsError::Acces), dir_attr));
        }
        if let Some((fid, st)) = self.known.get(&self.changes, dir, name) {
            return Some((Ok((fid, to_attr(&st))), dir_attr));
        }
        let fetched = (|| {
            let dfd = match dfd.take() {
                Some(fd) => fd,
                None => self.open_dir(dir)?.0,
            };
            let c = sys::cstr(name).map_err(io_err)?;
            let fd = self.open_child(dfd.as_fd(), &c)?;
            let (fid, st) = self.fid_stat(fd.as_fd())?;
            // As in `lookup_in`: the client is about to use it.
            self.paths.insert(fid, Arc::new(fd));
            self.known.put(dir, name, fid, st, seq);
            Ok((fid, to_attr(&st)))
        })();
        Some((fetched, dir_attr))
    }

    /// ACCESS on an already opened object (see [`Core::access`]).
    fn access_on(
        &self,
        cred: &Cred,
        fid: &Fid,
        fd: &OwnedFd,
        st: &libc::stat,
        want: Access,
    ) -> Result<Access, FsError> {
        let allowed = self.allowed(cred, fid, fd.as_fd(), st, &perm::QUESTIONS)?;
        let is_dir = file_type(st) == FileType::Directory;
        let table: &[(Access, libc::c_int)] = if is_dir {
            &[
                (Access::READ, libc::R_OK),
                (Access::LOOKUP, libc::X_OK),
                (Access::MODIFY, libc::W_OK | libc::X_OK),
                (Access::EXTEND, libc::W_OK | libc::X_OK),
                (Access::DELETE, libc::W_OK | libc::X_OK),
            ]
        } else {
            &[
                (Access::READ, libc::R_OK),
                (Access::MODIFY, libc::W_OK),
                (Access::EXTEND, libc::W_OK),
                (Access::EXECUTE, libc::X_OK),
            ]
        };
        let mut ok = Access::empty();
        for &(bit, mode) in table {
            if want.contains(bit) && allowed.may(mode) {
                ok |= bit;
            }
        }
        Ok(ok)
    }

    fn open_path(&self, fid: &Fid) -> Result<(Arc<OwnedFd>, libc::stat), FsError> {
        if let Some(r) = self.cached_path(fid) {
            return r;
        }
        let (fd, st) = self.open_fid(fid, libc::O_PATH)?;
        let fd = Arc::new(fd);
        self.paths.insert(*fid, fd.clone());
        Ok((fd, st))
    }

    /// The cached O_PATH descriptor's attributes; None if not cached. A file
    /// deleted since (no links left) is Stale, and leaves the cache.
    fn cached_path(&self, fid: &Fid) -> Option<Result<(Arc<OwnedFd>, libc::stat), FsError>> {
        let fd = self.paths.get(fid)?;
        Some(match sys::fstat(fd.as_fd()) {
            Ok(st) if st.st_nlink == 0 => {
                self.paths.remove(fid);
                Err(FsError::Stale)
            }
            Ok(st) => Ok((fd, st)),
            Err(e) => Err(io_err(e)),
        })
    }

    fn open_dir(&self, fid: &Fid) -> Result<(Arc<OwnedFd>, libc::stat), FsError> {
        let (fd, st) = self.open_path(fid)?;
        if file_type(&st) != FileType::Directory {
            return Err(FsError::NotDir);
        }
        Ok((fd, st))
    }

    /// The fid of the object `name` in `dir` names now (no symlink followed).
    fn fid_at(&self, dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> Option<Fid> {
        let kh = sys::name_to_handle(dir, name, 0).ok()?;
        (kh.mount_id == self.mount_id)
            .then(|| encode_fid(&kh))
            .flatten()
    }

    /// Closes the cached descriptors of an object that lost a name: an open
    /// descriptor would keep a deleted file's space allocated.
    fn forget(&self, fid: Option<Fid>) {
        if let Some(f) = fid {
            self.paths.remove(&f);
            self.cache.remove(&f);
        }
    }

    /// The fid of an open object, if it's on the export's mount.
    fn fid_of(&self, fd: BorrowedFd<'_>) -> Result<Fid, FsError> {
        let kh = sys::name_to_handle(fd, sys::EMPTY, libc::AT_EMPTY_PATH).map_err(io_err)?;
        if kh.mount_id != self.mount_id {
            return Err(FsError::XDev);
        }
        encode_fid(&kh).ok_or(FsError::NotSupp)
    }

    fn fid_attr(&self, fd: BorrowedFd<'_>) -> Result<(Fid, Attr), FsError> {
        self.fid_stat(fd).map(|(fid, st)| (fid, to_attr(&st)))
    }

    fn fid_stat(&self, fd: BorrowedFd<'_>) -> Result<(Fid, libc::stat), FsError> {
        let fid = self.fid_of(fd)?;
        let st = sys::fstat(fd).map_err(io_err)?;
        Ok((fid, st))
    }

    /// A cached read/write (or read-only) descriptor of a regular file.
    /// Opened as root: call before switching credentials.
    fn data_fd(&self, fid: &Fid) -> Result<(Arc<DataFd>, libc::stat), FsError> {
        if let Some(d) = self.cache.get(fid) {
            let st = sys::fstat(d.fd.as_fd()).map_err(io_err)?;
            if st.st_nlink == 0 {
                self.cache.remove(fid);
                return Err(FsError::Stale);
            }
            return Ok((d, st));
        }
        let (_, st) = self.open_path(fid)?;
        match file_type(&st) {
            FileType::Regular => {}
            FileType::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        let (fd, writable) = match self.open_fid(fid, libc::O_RDWR) {
            Ok((fd, _)) => (fd, true),
            Err(FsError::RoFs) | Err(FsError::Acces) | Err(FsError::Perm) => {
                (self.open_fid(fid, libc::O_RDONLY)?.0, false)
            }
            Err(e) => return Err(e),
        };
        let d = Arc::new(DataFd { fd, writable });
        self.cache.insert(*fid, d.clone());
        Ok((d, st))
    }

    /// Kernel access check for `mode` (R_OK/W_OK/X_OK) on `fd` as the
    /// current (switched) thread credentials.
    fn may(&self, fd: BorrowedFd<'_>, mode: libc::c_int) -> bool {
        sys::access_fd(fd, mode).is_ok()
    }

    /// Applies `set` to an object (O_PATH `fd`), as the caller.
    fn apply_set(
        &self,
        cred: &Cred,
        fd: BorrowedFd<'_>,
        st: &libc::stat,
        set: &SetAttr,
        data: Option<&DataFd>,
    ) -> Result<(), FsError> {
        // chown first (it may clear suid/sgid), then mode, size, times (a
        // size change bumps mtime, so an explicit mtime comes after it).
        let uid = set.uid.filter(|&u| u != st.st_uid);
        let gid = set.gid.filter(|&g| g != st.st_gid);
        if uid.is_some() || gid.is_some() {
            sys::chown_fd(fd, uid, gid).map_err(io_err)?;
        }
        // Linux symlinks have no mode of their own; ignore it like knfsd.
        if let Some(mode) = set.mode {
            if file_type(st) != FileType::Symlink {
                sys::chmod_fd(fd, mode & 0o7777).map_err(io_err)?;
            }
        }
        if let Some(size) = set.size {
            let d = data.ok_or(FsError::Inval)?;
            if !(self.may(d.fd.as_fd(), libc::W_OK) || (cred.uid == st.st_uid)) {
                return Err(FsError::Acces);
            }
            if !d.writable {
                return Err(FsError::RoFs);
            }
            sys::ftruncate(d.fd.as_fd(), size).map_err(io_err)?;
        }
        if set.atime != SetTime::DontChange || set.mtime != SetTime::DontChange {
            let times = [to_utime(set.atime), to_utime(set.mtime)];
            sys::utimens_fd(fd, &times).map_err(io_err)?;
        }
        Ok(())
    }

    /// Opens `name` in `dfd` (O_PATH, no symlink following, beneath `dfd`).
    fn open_child(&self, dfd: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, FsError> {
        sys::openat_beneath(dfd, name, libc::O_PATH | libc::O_NOFOLLOW, 0).map_err(io_err)
    }

    /// `..` of a directory; the root's is the root.
    fn parent(&self, dfd: BorrowedFd<'_>, dst: &libc::stat) -> Result<Option<OwnedFd>, FsError> {
        if self.is_root(dst) {
            return Ok(None);
        }
        // RESOLVE_BENEATH forbids "..", and the parent of a directory
        // beneath the root is itself beneath or the root.
        nowait::forbid()?;
        sys::openat(dfd, c"..", libc::O_PATH | libc::O_DIRECTORY, 0)
            .map(Some)
            .map_err(io_err)
    }

    /// Opens `name` after create-style ops, then applies leftover attributes.
    fn finish_new(
        &self,
        cred: &Cred,
        dfd: BorrowedFd<'_>,
        name: &CStr,
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        let fd = self.open_child(dfd, name)?;
        let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
        let fid = self.fid_of(fd.as_fd())?;
        let set = SetAttr {
            size: None,
            ..set.clone()
        };
        self.apply_set(cred, fd.as_fd(), &st, &set, None)?;
        let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
        Ok((fid, to_attr(&st)))
    }
}

thread_local! {
    /// The supplementary groups `as_user` last set on this thread; None:
    /// still the process's own.
    static THREAD_GROUPS: std::cell::RefCell<Option<Vec<u32>>> = const { std::cell::RefCell::new(None) };
    /// Whether `limit_resources` took CAP_SYS_RESOURCE out of this thread's
    /// effective set.
    static THREAD_LIMITED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Quotas hold for the user the server acts for, as knfsd has them:
/// CAP_SYS_RESOURCE leaves this thread's effective set while acting for
/// anyone but root, and comes back when it acts for root. It stays out in
/// between (one capset per change of side, not per call): the server's own
/// files are written with fsuid 0, which ext4 gives its reserve to anyway,
/// and root has no quota. Called with the fsuid still root's, so the read
/// back capability sets are whole.
fn limit_resources(cred: &Cred) -> Result<(), FsError> {
    let limit = cred.uid != 0;
    THREAD_LIMITED.with(|c| {
        if c.get() != limit {
            sys::set_thread_sys_resource(!limit).map_err(io_err)?;
            c.set(limit);
        }
        Ok(())
    })
}

/// Restores root's fsuid and fsgid when dropped (the supplementary groups
/// and CAP_SYS_RESOURCE stay: see `as_user` and `limit_resources`).
struct CredGuard<'a> {
    fs: Option<&'a LocalFs>,
}

impl Drop for CredGuard<'_> {
    fn drop(&mut self) {
        if let Some(fs) = self.fs {
            sys::set_thread_fsuid(0);
            sys::set_thread_fsgid(fs.base_gid);
        }
    }
}

fn encode_fid(kh: &sys::KernelHandle) -> Option<Fid> {
    fid_of(kh.htype, &kh.bytes[..kh.len])
}

/// Our fid of a kernel handle: one byte of type, then the handle.
fn fid_of(htype: i32, handle: &[u8]) -> Option<Fid> {
    if !(0..=255).contains(&htype) || handle.len() + 1 > Fid::MAX_LEN {
        return None;
    }
    let mut b = [0u8; Fid::MAX_LEN];
    b[0] = htype as u8;
    b[1..=handle.len()].copy_from_slice(handle);
    Fid::new(&b[..=handle.len()])
}

fn file_type(st: &libc::stat) -> FileType {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFBLK => FileType::BlockDev,
        libc::S_IFCHR => FileType::CharDev,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFIFO => FileType::Fifo,
        _ => FileType::Regular,
    }
}

fn ts(secs: i64, nsecs: i64) -> Timespec {
    Timespec {
        secs,
        nsecs: nsecs as u32,
    }
}

fn to_attr(st: &libc::stat) -> Attr {
    Attr {
        ftype: file_type(st),
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        size: st.st_size as u64,
        used: st.st_blocks as u64 * 512,
        rdev: (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
        fsid: st.st_dev,
        fileid: st.st_ino,
        atime: ts(st.st_atime, st.st_atime_nsec),
        mtime: ts(st.st_mtime, st.st_mtime_nsec),
        ctime: ts(st.st_ctime, st.st_ctime_nsec),
    }
}

fn to_utime(t: SetTime) -> libc::timespec {
    match t {
        SetTime::DontChange => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        SetTime::ServerTime => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        SetTime::ClientTime(t) => libc::timespec {
            tv_sec: t.secs,
            tv_nsec: (t.nsecs % 1_000_000_000) as i64,
        },
    }
}

struct DataFd {
    fd: OwnedFd,
    writable: bool,
}

/// A bounded cache of open descriptors keyed by fid: sharded so that calls
/// on different files do not contend, each shard an O(1) LRU (no scan on
/// eviction, whatever the size).
struct FdCache<V> {
    shards: Vec<Mutex<lru::LruCache<Fid, Arc<V>>>>,
}

const FD_CACHE_SHARDS: usize = 16;

impl<V> FdCache<V> {
    fn new(cap: usize) -> FdCache<V> {
        let per = std::num::NonZeroUsize::new((cap / FD_CACHE_SHARDS).max(1)).unwrap();
        FdCache {
            shards: (0..FD_CACHE_SHARDS)
                .map(|_| Mutex::new(lru::LruCache::new(per)))
                .collect(),
        }
    }

    fn shard(&self, fid: &Fid) -> &Mutex<lru::LruCache<Fid, Arc<V>>> {
        // The fid's last bytes are the most varied part of a kernel handle (inode, generation).
        let h = fid
            .as_bytes()
            .iter()
            .fold(0usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize));
        &self.shards[h % FD_CACHE_SHARDS]
    }

    fn get(&self, fid: &Fid) -> Option<Arc<V>> {
        self.shard(fid).lock().unwrap().get(fid).cloned()
    }

    fn insert(&self, fid: Fid, d: Arc<V>) {
        self.shard(&fid).lock().unwrap().put(fid, d);
    }

    fn remove(&self, fid: &Fid) {
        self.shard(fid).lock().unwrap().pop(fid);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().len()).sum()
    }
}

impl Core for LocalFs {
    fn root(&self) -> Fid {
        self.root_fid
    }

    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError> {
        let (_, st) = self.open_path(fid)?;
        Ok(to_attr(&st))
    }

    fn supports_nowait(&self) -> bool {
        true
    }

    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError> {
        nowait::forbid()?;
        let (fd, st) = self.open_path(fid)?;
        let data = match set.size {
            Some(_) => Some(self.data_fd(fid)?.0),
            None => None,
        };
        {
            let _g = self.as_user(cred)?;
            self.apply_set(cred, fd.as_fd(), &st, set, data.as_deref())?;
        }
        Ok(to_attr(&sys::fstat(fd.as_fd()).map_err(io_err)?))
    }

    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError> {
        self.lookup_with_dir(cred, dir, name).0
    }

    fn lookup_with_dir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
    ) -> (Result<(Fid, Attr), FsError>, Option<Attr>) {
        if let Err(e) = check_name(name) {
            return (Err(e), self.getattr(dir).ok());
        }
        if let Some(r) = self.lookup_known(cred, dir, name) {
            return r;
        }
        match self.open_dir(dir) {
            Ok((dfd, dst)) => (
                self.lookup_in(cred, dir, &dfd, &dst, name),
                Some(to_attr(&dst)),
            ),
            Err(e) => (Err(e), None),
        }
    }

    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError> {
        self.access_with_attr(cred, fid, want).0
    }

    fn access_with_attr(
        &self,
        cred: &Cred,
        fid: &Fid,
        want: Access,
    ) -> (Result<Access, FsError>, Option<Attr>) {
        match self.open_path(fid) {
            Ok((fd, st)) => (
                self.access_on(cred, fid, &fd, &st, want),
                Some(to_attr(&st)),
            ),
            Err(e) => (Err(e), None),
        }
    }

    fn readlink(&self, _cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError> {
        nowait::forbid()?;
        let (fd, st) = self.open_path(fid)?;
        if file_type(&st) != FileType::Symlink {
            return Err(FsError::Inval);
        }
        sys::readlink_fd(fd.as_fd()).map_err(io_err)
    }

    fn read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, bool), FsError> {
        self.read_with(cred, fid, offset, buf.len(), |fd, n, want, at| {
            sys::pread(fd, &mut buf[n..want], at)
        })
    }

    fn read_append(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        count: usize,
        buf: &mut bytes::BytesMut,
    ) -> Result<(usize, bool), FsError> {
        let start = buf.len();
        buf.reserve(crate::reply_room(count));
        let r = self.read_with(cred, fid, offset, count, |fd, n, want, at| {
            sys::pread_append(fd, buf, want - n, at)
        });
        if r.is_err() {
            buf.truncate(start);
        }
        r
    }

    fn splice_read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        count: usize,
        pipe: BorrowedFd<'_>,
    ) -> Option<Result<(usize, bool), FsError>> {
        Some(self.read_with(cred, fid, offset, count, |fd, n, want, at| {
            // splice(2) has no RWF_NOWAIT: in no-wait mode it runs only on
            // pages already cached (a kernel without cachestat(2): never).
            if n == 0 && nowait::active() && !sys::cached(fd, at, want).unwrap_or(false) {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            }
            match sys::splice_to_pipe(fd, at, pipe, want - n) {
                // The pipe is full (data that starts inside a page needs
                // one page more than it holds): a short read.
                Err(e) if n > 0 && e.raw_os_error() == Some(libc::EAGAIN) => Ok(0),
                r => r,
            }
        }))
    }

    fn write(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<(usize, Stable), FsError> {
        nowait::forbid()?;
        let (d, _g) = self.data_fd_to_change(cred, fid)?;
        let fd = d.fd.as_fd();
        let mut n = 0;
        while n < data.len() {
            match sys::pwrite(fd, &data[n..], offset + n as u64) {
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // Report a partial write as such; the client retries the rest.
                Err(_) if n > 0 => break,
                Err(e) => return Err(io_err(e)),
            }
        }
        match stable {
            Stable::Unstable => {}
            Stable::DataSync => sys::fdatasync(fd).map_err(io_err)?,
            Stable::FileSync => sys::fsync(fd).map_err(io_err)?,
        }
        Ok((n, stable))
    }

    fn commit(&self, fid: &Fid) -> Result<(), FsError> {
        nowait::forbid()?;
        let (d, _) = self.data_fd(fid)?;
        sys::fsync(d.fd.as_fd()).map_err(io_err)
    }

    fn create(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        how: &CreateHow,
    ) -> Result<(Fid, Attr), FsError> {
        nowait::forbid()?;
        check_new_name(name)?;
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let (mode, mut set) = how.for_new_file();
        let g = self.as_user(cred)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW;
        match sys::openat_beneath(dfd.as_fd(), &c, flags, mode & 0o7777) {
            Ok(fd) => {
                let fid = self.fid_of(fd.as_fd())?;
                let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
                if set.size == Some(0) {
                    set.size = None; // new files are empty already
                }
                let data = DataFd { fd, writable: true };
                self.apply_set(cred, data.fd.as_fd(), &st, &set, Some(&data))?;
                if let CreateHow::Exclusive(v) = how {
                    let (m, a) = verifier_times(v);
                    let times = [
                        libc::timespec {
                            tv_sec: a.secs,
                            tv_nsec: 0,
                        },
                        libc::timespec {
                            tv_sec: m.secs,
                            tv_nsec: 0,
                        },
                    ];
                    sys::utimens_fd(data.fd.as_fd(), &times).map_err(io_err)?;
                }
                let st = sys::fstat(data.fd.as_fd()).map_err(io_err)?;
                Ok((fid, to_attr(&st)))
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                let fd = self.open_child(dfd.as_fd(), &c)?;
                let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
                let fid = self.fid_of(fd.as_fd())?;
                let attr = to_attr(&st);
                // Only the size applies to an existing file.
                let Some(size) = how.on_existing(&attr)? else {
                    return Ok((fid, attr));
                };
                drop(g);
                self.setattr(
                    cred,
                    &fid,
                    &SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    },
                )?;
                let st = sys::fstat(fd.as_fd()).map_err(io_err)?;
                Ok((fid, to_attr(&st)))
            }
            Err(e) => Err(io_err(e)),
        }
    }

    fn mkdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        nowait::forbid()?;
        check_new_name(name)?;
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let _g = self.as_user(cred)?;
        sys::mkdirat(dfd.as_fd(), &c, set.mode.unwrap_or(0o755) & 0o7777).map_err(io_err)?;
        self.finish_new(cred, dfd.as_fd(), &c, set)
    }

    fn symlink(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        nowait::forbid()?;
        check_new_name(name)?;
        if target.contains(&0) {
            return Err(FsError::Inval);
        }
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let t = sys::cstr(target).map_err(io_err)?;
        let _g = self.as_user(cred)?;
        sys::symlinkat(&t, dfd.as_fd(), &c).map_err(io_err)?;
        self.finish_new(cred, dfd.as_fd(), &c, set)
    }

    fn mknod(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        ftype: FileType,
        rdev: (u32, u32),
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        nowait::forbid()?;
        check_new_name(name)?;
        let (mode, rdev) = crate::backend::special_node(ftype, rdev, set)?;
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let _g = self.as_user(cred)?;
        sys::mknodat(dfd.as_fd(), &c, mode, rdev).map_err(io_err)?;
        self.finish_new(cred, dfd.as_fd(), &c, set)
    }

    fn remove(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        nowait::forbid()?;
        check_name(name)?;
        if name == b"." || name == b".." {
            return Err(FsError::Inval);
        }
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let victim = self.fid_at(dfd.as_fd(), &c);
        {
            let _g = self.as_user(cred)?;
            sys::unlinkat(dfd.as_fd(), &c, 0).map_err(io_err)?;
        }
        self.forget(victim);
        Ok(())
    }

    fn rmdir(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        nowait::forbid()?;
        check_name(name)?;
        match name {
            b"." => return Err(FsError::Inval),
            b".." => return Err(FsError::NotEmpty),
            _ => {}
        }
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let victim = self.fid_at(dfd.as_fd(), &c);
        {
            let _g = self.as_user(cred)?;
            sys::unlinkat(dfd.as_fd(), &c, libc::AT_REMOVEDIR).map_err(io_err)?;
        }
        self.forget(victim);
        Ok(())
    }

    fn rename(
        &self,
        cred: &Cred,
        from_dir: &Fid,
        from_name: &[u8],
        to_dir: &Fid,
        to_name: &[u8],
    ) -> Result<(), FsError> {
        nowait::forbid()?;
        check_rename_names(from_name, to_name)?;
        let (fdir, _) = self.open_dir(from_dir)?;
        let (tdir, _) = self.open_dir(to_dir)?;
        let f = sys::cstr(from_name).map_err(io_err)?;
        let t = sys::cstr(to_name).map_err(io_err)?;
        // The object the rename replaces, if any, loses its name.
        let victim = self.fid_at(tdir.as_fd(), &t);
        {
            let _g = self.as_user(cred)?;
            sys::renameat(fdir.as_fd(), &f, tdir.as_fd(), &t).map_err(io_err)?;
        }
        if victim != self.fid_at(tdir.as_fd(), &t) {
            self.forget(victim);
        }
        Ok(())
    }

    fn link(&self, cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        nowait::forbid()?;
        check_new_name(name)?;
        let (fd, st) = self.open_path(fid)?;
        if file_type(&st) == FileType::Directory {
            return Err(FsError::IsDir);
        }
        let (dfd, _) = self.open_dir(dir)?;
        let c = sys::cstr(name).map_err(io_err)?;
        let _g = self.as_user(cred)?;
        sys::link_fd(fd.as_fd(), dfd.as_fd(), &c).map_err(io_err)
    }

    fn readdir_into(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        _verifier: [u8; 8],
        plus: bool,
        sink: &mut dyn DirSink,
    ) -> Result<DirEnd, FsError> {
        nowait::forbid()?;
        if let Some(end) = self.readdir_kept(cred, dir, cookie, plus, sink)? {
            return Ok(end);
        }
        let mut stream = match self.dirs.take(dir, cookie) {
            Some(s) => s,
            None => {
                let (fd, _) = self.open_fid(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
                sys::lseek_set(fd.as_fd(), cookie).map_err(|e| match e.raw_os_error() {
                    Some(libc::EINVAL) => FsError::BadCookie,
                    _ => io_err(e),
                })?;
                let mut s = DirStream::new(fd);
                // A pass from the start may be kept (see `listings`).
                if cookie == 0 && self.changes.following() {
                    s.recording = Some(self.listings.record(self.changes.sync()));
                }
                s
            }
        };
        // A kept stream's directory may have been removed since.
        let dst = sys::fstat(stream.fd()).map_err(io_err)?;
        if dst.st_nlink == 0 {
            return Err(FsError::Stale);
        }
        // Answers recorded on this page are current as of here.
        let page_seq = stream.recording.as_ref().map(|_| self.changes.sync());
        let g = self.as_user(cred)?;
        // Checked on every page, kept stream or not.
        if !self.may(stream.fd(), libc::R_OK) {
            return Err(FsError::Acces);
        }
        let parent_ino = if self.is_root(&dst) { dst.st_ino } else { 0 };
        let mut last = cookie;
        let eof = loop {
            if !stream.fill().map_err(io_err)? {
                break true;
            }
            let (dfd, d, recording) = stream.current_recording();
            if !sink.room_for(d.name) {
                break false;
            }
            let fileid = match d.name {
                b"." => dst.st_ino,
                b".." if parent_ino != 0 => parent_ino,
                _ => d.ino,
            };
            let plus = if plus {
                // The name is NUL-terminated in the dirent: no copy needed.
                let cname = d.name_nul.and_then(|n| CStr::from_bytes_with_nul(n).ok());
                cname.and_then(|c| self.readdir_plus(dfd, &dst, dir, c, d.ino))
            } else {
                None
            };
            let kept = recording.as_ref().map(|_| plus.clone());
            let item = DirItem {
                name: d.name,
                fileid,
                cookie: d.off,
                plus,
            };
            if !sink.push(item) {
                break false;
            }
            if let (Some(r), Some(kept), Some(seq)) = (recording.as_mut(), kept, page_seq) {
                if !r.push(d.name, d.ino, d.off, kept, seq) {
                    *recording = None;
                }
            }
            last = d.off;
            stream.advance();
        };
        drop(g);
        if eof {
            if let Some(r) = stream.recording.take() {
                // Kept only if nothing in the directory changed during the pass.
                self.changes.sync();
                if self.changes.unchanged(dir, r.seq()) {
                    self.listings.put(*dir, r, dst);
                }
            }
        } else {
            // The client comes back with the last cookie it got; at eof it won't.
            self.dirs.put(*dir, last, stream);
        }
        Ok(DirEnd {
            eof,
            verifier: [0; 8],
        })
    }

    fn fsstat(&self, fid: &Fid) -> Result<FsStat, FsError> {
        let (fd, _) = self.open_path(fid)?;
        let s = sys::fstatvfs(fd.as_fd()).map_err(io_err)?;
        Ok(crate::backend::fsstat_of(&s, s.f_frsize))
    }

    fn sync_all(&self) -> Result<(), FsError> {
        nowait::forbid()?;
        sys::syncfs(self.root.as_fd()).map_err(io_err)
    }
}

impl crate::SharedLocks for LocalFs {}

impl crate::SharedDelegations for LocalFs {}

impl crate::Space for LocalFs {
    fn seek(&self, cred: &Cred, fid: &Fid, offset: u64, what: SeekWhat) -> Result<u64, FsError> {
        nowait::forbid()?;
        let (d, st) = self.data_fd(fid)?;
        let fd = d.fd.as_fd();
        self.check_read(cred, fid, fd, &st)?;
        sys::lseek_data_hole(fd, offset, what == SeekWhat::Hole).map_err(io_err)
    }

    fn allocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        nowait::forbid()?;
        let (d, _g) = self.data_fd_to_change(cred, fid)?;
        sys::fallocate(d.fd.as_fd(), 0, offset, len).map_err(io_err)
    }

    fn deallocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        nowait::forbid()?;
        let (d, _g) = self.data_fd_to_change(cred, fid)?;
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        sys::fallocate(d.fd.as_fd(), mode, offset, len).map_err(io_err)
    }

    fn copy_range(
        &self,
        cred: &Cred,
        src: &Fid,
        src_off: u64,
        dst: &Fid,
        dst_off: u64,
        len: u64,
    ) -> Result<u64, FsError> {
        nowait::forbid()?;
        let (s, sst) = self.data_fd(src)?;
        self.check_read(cred, src, s.fd.as_fd(), &sst)?;
        let (d, _g) = self.data_fd_to_change(cred, dst)?;
        if src == dst && ranges_overlap(src_off, dst_off, len) {
            return Err(FsError::Inval);
        }
        if src_off.checked_add(len).is_none() || dst_off.checked_add(len).is_none() {
            return Err(FsError::FBig);
        }
        let (sfd, dfd) = (s.fd.as_fd(), d.fd.as_fd());
        let mut n = 0u64;
        while n < len {
            let want = (len - n).min(1 << 30) as usize;
            match sys::copy_file_range(sfd, src_off + n, dfd, dst_off + n, want) {
                Ok(0) => break,
                Ok(k) => n += k as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // No copy_file_range between these two (an old kernel, a
                // filesystem without it, a submount): copy by hand.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOSYS | libc::EXDEV | libc::EOPNOTSUPP)
                    ) =>
                {
                    return copy_by_hand(sfd, src_off, dfd, dst_off, len, n);
                }
                Err(_) if n > 0 => break,
                Err(e) => return Err(io_err(e)),
            }
        }
        Ok(n)
    }

    fn clone_range(
        &self,
        cred: &Cred,
        src: &Fid,
        src_off: u64,
        dst: &Fid,
        dst_off: u64,
        len: u64,
    ) -> Result<(), FsError> {
        nowait::forbid()?;
        let (s, sst) = self.data_fd(src)?;
        self.check_read(cred, src, s.fd.as_fd(), &sst)?;
        let (d, _g) = self.data_fd_to_change(cred, dst)?;
        let span = if len == 0 {
            (sst.st_size as u64).saturating_sub(src_off)
        } else {
            len
        };
        if src == dst && ranges_overlap(src_off, dst_off, span) {
            return Err(FsError::Inval);
        }
        sys::clone_range(s.fd.as_fd(), src_off, d.fd.as_fd(), dst_off, len).map_err(|e| {
            match e.raw_os_error() {
                // ext4 and other filesystems without shared extents, a
                // kernel without the ioctl, two filesystems.
                Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EXDEV | libc::ENOSYS) => {
                    FsError::NotSupp
                }
                _ => io_err(e),
            }
        })
    }

    fn advise(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        len: u64,
        advice: Advice,
    ) -> Result<(), FsError> {
        nowait::forbid()?;
        let (d, st) = self.data_fd(fid)?;
        let fd = d.fd.as_fd();
        self.check_read(cred, fid, fd, &st)?;
        let a = match advice {
            Advice::Normal => libc::POSIX_FADV_NORMAL,
            Advice::Sequential => libc::POSIX_FADV_SEQUENTIAL,
            Advice::Random => libc::POSIX_FADV_RANDOM,
            Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
            Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
            Advice::NoReuse => libc::POSIX_FADV_NOREUSE,
        };
        sys::fadvise(fd, offset, len, a).map_err(io_err)
    }
}

impl crate::Xattrs for LocalFs {
    fn xattr_support(&self) -> bool {
        self.xattrs
    }

    fn getxattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let name = xattr_cname(name)?;
        let Some((fd, _)) = self.xattr_object(fid)? else {
            return Err(FsError::NoXattr);
        };
        // The kernel checks read permission as the caller.
        let _g = self.as_user(cred)?;
        read_sized(|buf| sys::getxattr_fd(fd.as_fd(), &name, buf))
    }

    fn setxattr(
        &self,
        cred: &Cred,
        fid: &Fid,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), FsError> {
        let name = xattr_cname(name)?;
        crate::backend::check_xattr_value(value)?;
        // Linux keeps user xattrs off other objects (EPERM), as knfsd says.
        let Some((fd, _)) = self.xattr_object(fid)? else {
            return Err(FsError::Perm);
        };
        let flags = crate::backend::xattr_flags(how);
        // The kernel checks write permission (and the sticky-directory
        // owner rule) as the caller.
        let _g = self.as_user(cred)?;
        sys::setxattr_fd(fd.as_fd(), &name, value, flags).map_err(io_err)
    }

    fn listxattrs(&self, cred: &Cred, fid: &Fid) -> Result<Vec<Vec<u8>>, FsError> {
        let Some((fd, st)) = self.xattr_object(fid)? else {
            return Ok(Vec::new());
        };
        // listxattr(2) itself asks for no permission; NFS asks for read, as
        // knfsd does.
        if cred.uid != st.st_uid
            && !self
                .allowed(cred, fid, fd.as_fd(), &st, &[libc::R_OK])?
                .may(libc::R_OK)
        {
            return Err(FsError::Acces);
        }
        let buf = read_sized(|buf| sys::listxattr_fd(fd.as_fd(), buf))?;
        Ok(crate::backend::user_xattr_names(&buf))
    }

    fn removexattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<(), FsError> {
        let name = xattr_cname(name)?;
        let Some((fd, _)) = self.xattr_object(fid)? else {
            return Err(FsError::NoXattr);
        };
        let _g = self.as_user(cred)?;
        sys::removexattr_fd(fd.as_fd(), &name).map_err(io_err)
    }
}

impl ChangeNotify for LocalFs {
    fn on_local_change(&self, hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        changes::Changes::watch_local(&self.changes, hook)
    }
}

/// COPY's fallback where copy_file_range(2) cannot go: the rest of `len`
/// bytes after the `done` already copied, by pread and pwrite through a
/// buffer; the bytes copied in all.
fn copy_by_hand(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: u64,
    mut done: u64,
) -> Result<u64, FsError> {
    let mut buf = vec![0u8; (len - done).min(1 << 20) as usize];
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let k = match sys::pread(src, &mut buf[..want], src_off + done) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) if done > 0 => break,
            Err(e) => return Err(io_err(e)),
        };
        let mut w = 0;
        while w < k {
            match sys::pwrite(dst, &buf[w..k], dst_off + done + w as u64) {
                Ok(m) => w += m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) if done + w as u64 > 0 => return Ok(done + w as u64),
                Err(e) => return Err(io_err(e)),
            }
        }
        done += k as u64;
    }
    Ok(done)
}

/// The C string of an NFSv4.2 attribute name in the user namespace.
/// What getxattr(2) or listxattr(2) (as `call`) answers: ask the length
/// (an empty buffer), then read; an answer that grew in between (ERANGE)
/// is asked again, and after three tries read into the largest buffer
/// there is (XATTR_SIZE_MAX).
fn read_sized(mut call: impl FnMut(&mut [u8]) -> io::Result<usize>) -> Result<Vec<u8>, FsError> {
    for _ in 0..3 {
        let len = call(&mut []).map_err(io_err)?;
        let mut v = vec![0; len.max(1)];
        match call(&mut v) {
            Ok(n) => {
                v.truncate(n);
                return Ok(v);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(io_err(e)),
        }
    }
    let mut v = vec![0; crate::XATTR_SIZE_MAX];
    let n = call(&mut v).map_err(io_err)?;
    v.truncate(n);
    Ok(v)
}

fn xattr_cname(name: &[u8]) -> Result<std::ffi::CString, FsError> {
    sys::cstr(&crate::user_xattr_name(name)?).map_err(io_err)
}

impl LocalFs {
    /// The O_PATH descriptor of an object that can carry user xattrs (a
    /// regular file or directory, the only ones Linux allows them on), or
    /// None for any other object. Only for these is reaching the object
    /// through /proc/self/fd sure not to follow a symlink.
    fn xattr_object(&self, fid: &Fid) -> Result<Option<(Arc<OwnedFd>, libc::stat)>, FsError> {
        nowait::forbid()?;
        let (fd, st) = self.open_path(fid)?;
        Ok(matches!(file_type(&st), FileType::Regular | FileType::Directory).then_some((fd, st)))
    }
}

impl LocalFs {
    /// READ's permission check (SEEK's too): read or execute permission.
    /// The owner may always read (see the module docs): no need to ask.
    /// Anyone allowed reads as root, which reads the same bytes.
    fn check_read(
        &self,
        cred: &Cred,
        fid: &Fid,
        fd: BorrowedFd<'_>,
        st: &libc::stat,
    ) -> Result<(), FsError> {
        if cred.uid != st.st_uid {
            let a = self.allowed(cred, fid, fd, st, &[libc::R_OK, libc::X_OK])?;
            if !(a.may(libc::R_OK) || a.may(libc::X_OK)) {
                return Err(FsError::Acces);
            }
        }
        Ok(())
    }

    /// The data fd of `fid` for a change of its contents (WRITE, ALLOCATE,
    /// DEALLOCATE) once the caller may write it, with the caller's
    /// credentials switched in while the guard lives when the change
    /// clears suid/sgid.
    fn data_fd_to_change(
        &self,
        cred: &Cred,
        fid: &Fid,
    ) -> Result<(Arc<DataFd>, Option<CredGuard<'_>>), FsError> {
        let (d, st) = self.data_fd(fid)?;
        let fd = d.fd.as_fd();
        // The owner may always write (see the module docs): no need to ask.
        if cred.uid != st.st_uid
            && !self
                .allowed(cred, fid, fd, &st, &[libc::W_OK])?
                .may(libc::W_OK)
        {
            return Err(FsError::Acces);
        }
        // Written as the caller: writing clears suid (and group-executable
        // sgid) unless the writer holds CAP_FSETID, and the space a
        // filesystem keeps for root (ext4 judges by the fsuid) and quotas
        // (by CAP_SYS_RESOURCE) must hold for the user, not for the server.
        let g = Some(self.as_user(cred)?);
        if !d.writable {
            return Err(FsError::RoFs);
        }
        Ok((d, g))
    }

    /// READ's checks and loop; `pread(fd, done, want, at)` reads the bytes
    /// from `done` up to `want` of the request at file offset `at`.
    fn read_with(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        count: usize,
        mut pread: impl FnMut(BorrowedFd<'_>, usize, usize, u64) -> io::Result<usize>,
    ) -> Result<(usize, bool), FsError> {
        let (d, st) = self.data_fd(fid)?;
        let fd = d.fd.as_fd();
        self.check_read(cred, fid, fd, &st)?;
        let size = st.st_size as u64;
        if offset >= size {
            return Ok((0, true));
        }
        let want = count.min((size - offset) as usize);
        let mut n = 0;
        // Loop: pread may return short counts (e.g. signals).
        while n < want {
            match pread(fd, n, want, offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err(e)),
            }
        }
        Ok((n, offset + n as u64 >= size))
    }

    /// A page from the kept listing of `dir` (see `listings`); `None` when
    /// there is none that is current, or the caller's permission to read
    /// and search the directory is not known without asking the kernel:
    /// then the directory is read.
    fn readdir_kept(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        plus: bool,
        sink: &mut dyn DirSink,
    ) -> Result<Option<DirEnd>, FsError> {
        if !self.changes.following() || !self.switch_creds {
            return Ok(None);
        }
        let Some(kept) = self.listings.get(dir) else {
            return Ok(None);
        };
        let seq = self.changes.sync();
        let l = kept.read().unwrap();
        if !self.changes.unchanged(dir, l.seq) {
            drop(l);
            self.listings.remove(dir, &kept);
            return Ok(None);
        }
        let Some(start) = l.start_after(cookie) else {
            return Ok(None);
        };
        // The directory is as it was at the end of the pass, so remembered
        // permission decisions about it hold. Entries' handles and
        // attributes stand for lookups, which need search permission only,
        // so those not kept are fetched as root.
        let mut dfd = None;
        let allowed = match self.perms.get(dir, cred, &l.dst) {
            Some(a) => a,
            None => {
                let (fd, st) = self.open_dir(dir)?;
                let a = self.allowed(cred, dir, fd.as_fd(), &st, &[libc::R_OK, libc::X_OK])?;
                dfd = Some(fd);
                a
            }
        };
        if !allowed.may(libc::R_OK) || (plus && !allowed.may(libc::X_OK)) {
            // Read the directory, which answers as the caller would be.
            return Ok(None);
        }
        let mut fetched = Vec::new();
        let mut i = start;
        let eof = loop {
            if i == l.len() {
                break true;
            }
            let (slot, name_nul) = (l.slot(i), l.name_nul(i));
            let name = &name_nul[..name_nul.len() - 1];
            if !sink.room_for(name) {
                break false;
            }
            let fileid = match name {
                b"." => l.dst.st_ino,
                b".." if self.is_root(&l.dst) => l.dst.st_ino,
                _ => slot.ino,
            };
            let answer = match (&slot.plus, name) {
                _ if !plus => None,
                (_, b".") => Some((*dir, to_attr(&l.dst))),
                (Some((fid, attr)), _) if self.changes.unchanged(fid, slot.plus_seq) => {
                    Some((*fid, attr.clone()))
                }
                _ => {
                    if dfd.is_none() {
                        dfd = Some(self.open_dir(dir)?.0);
                    }
                    let fd = dfd.as_ref().unwrap().as_fd();
                    let c = CStr::from_bytes_with_nul(name_nul).ok();
                    let a = c.and_then(|c| self.readdir_plus(fd, &l.dst, dir, c, slot.ino));
                    if let Some(a) = &a {
                        fetched.push((i, a.clone()));
                    }
                    a
                }
            };
            let item = DirItem {
                name,
                fileid,
                cookie: slot.cookie,
                plus: answer,
            };
            if !sink.push(item) {
                break false;
            }
            i += 1;
        };
        drop(l);
        if !fetched.is_empty() {
            let mut l = kept.write().unwrap();
            for (i, a) in fetched {
                let s = l.slot_mut(i);
                s.plus = Some(a);
                s.plus_seq = seq;
            }
        }
        self.listings.served_one();
        Ok(Some(DirEnd {
            eof,
            verifier: [0; 8],
        }))
    }

    /// Fid and attributes of one readdir entry, as the caller; `None` if it
    /// vanished, is on another mount, or the caller may not look it up.
    fn readdir_plus(
        &self,
        dfd: BorrowedFd<'_>,
        dst: &libc::stat,
        dir: &Fid,
        name: &CStr,
        d_ino: u64,
    ) -> Option<(Fid, Attr)> {
        match name.to_bytes() {
            b"." => Some((*dir, to_attr(dst))),
            b".." => match self.parent(dfd, dst).ok()? {
                None => Some((self.root_fid, to_attr(dst))),
                Some(p) => self.fid_attr(p.as_fd()).ok(),
            },
            _ => {
                // Handle and attributes by name, without opening the entry
                // (an open and close per entry dominated listing cost). Both
                // must describe the object the dirent named: if the name was
                // replaced meanwhile the inode numbers differ, and the entry
                // goes out without attributes (the client will LOOKUP it).
                let kh = sys::name_to_handle(dfd, name, 0).ok()?;
                if kh.mount_id != self.mount_id {
                    return None;
                }
                let st = sys::lstatat(dfd, name).ok()?;
                if st.st_ino != d_ino {
                    return None;
                }
                Some((encode_fid(&kh)?, to_attr(&st)))
            }
        }
    }
}

#[cfg(test)]
mod tests;
