//! [`CephFs`]: a directory of a CephFS, through libcephfs's low-level
//! (`ceph_ll_*`) API, so several Tarn heads can serve one file system.
//!
//! Fids are `1 | inode number (8) | birth time (12)`: the inode number is
//! the same on every client of the file system and across restarts, so a
//! handle one head issued works on any other head with the same handle key
//! and export id. Ceph may give a freed inode number to a new file; the
//! birth time (btime, fixed at creation) tells them apart, and a fid whose
//! btime no longer matches is stale.
//!
//! Permission checks of the namespace calls are Ceph's: each passes the NFS
//! caller's uid, gid and groups as a ceph UserPerm (squashing happened
//! above). ACCESS is computed from the mode bits, as the memory backend
//! does (libcephfs has no low-level access call).
//!
//! READ and WRITE go through a handle kept open between calls (`files`:
//! opened once as root, kept while used and for a few idle seconds), so
//! they are checked here instead: by the mode bits, the file's owner
//! always allowed (as the local backend and the kernel server allow an
//! owner who opened a file before making it read-only); where libcephfs
//! enforces POSIX ACLs (`client_acl_type`) by an open as the caller.
//!
//! Byte-range locks are also taken in Ceph (`ceph_ll_setlk`, never
//! waiting), so the MDS makes locks taken through different heads
//! conflict; see [`CephFs::lock_handles`] for the handles they need.
//!
//! Read delegations are backed by CephFS's (`ceph_ll_delegation`): the
//! server takes one before granting an NFS read delegation and hears
//! through [`crate::SharedDelegations::on_delegation_recall`] when another client of the
//! file system wants the file (see the server's `backend_delegs`).
//!
//! Not done yet: write delegations, allocate, copy/clone offload.

mod ffi;
mod files;

use std::ffi::CString;

use crate::backend::verifier_times;
use crate::{
    check_name, check_new_name, check_rename_names, user_xattr_name, Access, Attr, CreateHow, Cred,
    DirEnd, DirItem, DirSink, Fid, FileType, FsError, FsStat, SeekWhat, SetAttr, SetTime, Stable,
    Timespec, XattrSet, XATTR_SIZE_MAX,
};
use ffi::{InodeRef, KeptFile, LockFh, Mount, Perms, Statx};
use files::OpenFiles;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use ffi::available;

/// Where a `cephfs://` export points.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CephConfig {
    /// Client id without `client.` (None: `admin`).
    pub id: Option<String>,
    /// The file system's name (None: the cluster's default one).
    pub fs_name: Option<String>,
    /// Directory within the file system (absolute).
    pub path: String,
    /// ceph.conf (None: CEPH_CONF or /etc/ceph/ceph.conf).
    pub conf: Option<String>,
    /// Keyring (None: what ceph.conf says, else /etc/ceph's).
    pub keyring: Option<String>,
    /// Files kept open between READs and WRITEs, at most (None: 4096).
    pub open_files: Option<usize>,
    /// How long a kept file stays open unused (None: 5 s).
    pub open_idle: Option<std::time::Duration>,
}

impl CephConfig {
    /// Parses `cephfs://[id@][fs_name]/path`.
    pub fn parse_url(url: &str) -> Result<CephConfig, String> {
        let rest = url
            .strip_prefix("cephfs://")
            .ok_or_else(|| format!("{url:?}: expected cephfs://[id@][fs]/path"))?;
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (id, fs) = match auth.split_once('@') {
            Some((id, fs)) => (Some(id), fs),
            None => (None, auth),
        };
        if id.is_some_and(|i| i.is_empty() || i.starts_with("client.")) {
            return Err(format!(
                "{url:?}: the client id goes without \"client.\" and is not empty"
            ));
        }
        if path.split('/').any(|c| c == "." || c == "..") {
            return Err(format!("{url:?}: the path may not contain . or .."));
        }
        Ok(CephConfig {
            id: id.map(str::to_string),
            fs_name: (!fs.is_empty()).then(|| fs.to_string()),
            path: path.to_string(),
            ..CephConfig::default()
        })
    }
}

/// This head's stable name (see [`set_head_id`]).
static HEAD_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names this head for its CephFS sessions, once at startup: a name that
/// stays the same across the head's restarts and differs between heads
/// (the server keeps one in its state directory). Each mount's Ceph uuid
/// is this name plus the export's URL, so when the head comes back after
/// a crash the MDS drops the old session and its capabilities at once,
/// instead of stalling every client of those files until the session
/// times out (60 s and more).
pub fn set_head_id(id: &str) {
    let _ = HEAD_ID.set(id.to_string());
}

/// This head's name (see [`set_head_id`]), if it was set.
pub fn head_id() -> Option<&'static str> {
    HEAD_ID.get().map(String::as_str)
}

/// The Ceph client uuid of head `head`'s mount of `cfg`.
fn session_uuid(head: &str, cfg: &CephConfig) -> String {
    format!(
        "tarn:{head}:{}@{}{}",
        cfg.id.as_deref().unwrap_or("admin"),
        cfg.fs_name.as_deref().unwrap_or(""),
        cfg.path
    )
}

/// Ends the CephFS session that head `head` (another head, failed) had for
/// the export `cfg`, so that the MDS drops its capabilities and POSIX
/// locks now rather than when the session times out. Only for a head
/// known to be gone: a live head would lose its locks under its feet.
/// Ok(false): no such session.
pub fn reset_head_session(head: &str, cfg: &CephConfig) -> Result<bool, String> {
    ffi::Mount::reset_session(
        &ffi::MountOpts {
            id: cfg.id.as_deref(),
            conf: cfg.conf.as_deref(),
            keyring: cfg.keyring.as_deref(),
            fs_name: cfg.fs_name.as_deref(),
            root: &cfg.path,
            uuid: None,
        },
        &session_uuid(head, cfg),
    )
}

/// An export of a CephFS directory.
pub struct CephFs {
    m: Arc<Mount>,
    /// Handles for READ, by inode number (see `files`).
    files: Arc<OpenFiles<KeptFile>>,
    /// Handles for WRITE (and READ), kept a shorter while: see
    /// `files::WRITE_IDLE`.
    writers: Arc<OpenFiles<KeptFile>>,
    /// libcephfs checks POSIX ACLs: an open as the caller decides who may
    /// read or write, not the mode bits.
    acls: bool,
    root: Fid,
    root_ino: u64,
    fsid: u64,
    /// By inode number: the handle the file's POSIX locks are held through.
    /// libcephfs ties a lock to the Fh it was taken through and drops it
    /// when that Fh closes, so one Fh stays open per file while any owner
    /// holds a lock on it. One mutex per file, held across its Ceph calls
    /// (opening, locking and closing a file's handle keep one order); a
    /// call that waits in the MDS (for a dead client's capabilities) holds
    /// up that file only.
    locks: Mutex<HashMap<u64, Arc<Mutex<Option<LockFile>>>>>,
    /// By inode number: the read delegations held for NFS ones (a
    /// handle each, open while the delegation is).
    delegs: Mutex<HashMap<u64, (LockFh, ffi::Delegation)>>,
    /// Where recalls of those go (set once by the server).
    recall: Arc<OnceLock<RecallHook>>,
    /// ceph_set_deleg_timeout's answer, asked once before the first.
    deleg_timeout: OnceLock<Result<(), String>>,
}

/// The server's hook for delegations CephFS recalls.
type RecallHook = Box<dyn Fn(&Fid) + Send + Sync>;

struct LockFile {
    fh: LockFh,
    /// Per owner: the ranges it holds (first and last byte), only to know
    /// when the last lock is gone and the handle may close.
    held: HashMap<u64, Vec<(u64, u64)>>,
}

impl Drop for CephFs {
    fn drop(&mut self) {
        for (_, (fh, d)) in self.delegs.get_mut().unwrap().drain() {
            self.m.give_back(fh, d);
        }
        // Before the mount goes (closing drops the locks in Ceph).
        for (_, f) in self.locks.get_mut().unwrap().drain() {
            if let Some(f) = f.lock().unwrap().take() {
                self.m.close_lock_fh(f.fh);
            }
        }
    }
}

/// Marks a lock owner as complete in itself: the MDS then tells owners
/// apart by this number alone (not also by the pid), as the kernel client
/// does.
const OWNER_BIT: u64 = 1 << 63;

/// A lock range as Ceph takes it: start and length, 0 meaning to the end.
/// Ceph offsets are signed 64-bit: a range past that reaches the end.
fn ceph_range(offset: u64, length: u64) -> (u64, u64) {
    let start = offset.min(i64::MAX as u64);
    match offset.checked_add(length) {
        Some(end) if length != u64::MAX && end <= i64::MAX as u64 => (start, length),
        _ => (start, 0),
    }
}

/// A lock request as `ceph_ll_setlk`/`getlk` take it: fcntl type, start,
/// length (0: to the end) and owner.
fn ceph_lock(
    kind: crate::LockType,
    offset: u64,
    length: u64,
    owner: u64,
) -> (std::ffi::c_int, u64, u64, u64) {
    let (start, len) = ceph_range(offset, length);
    let t = match kind {
        crate::LockType::Read => libc::F_RDLCK,
        crate::LockType::Write => libc::F_WRLCK,
    };
    (t, start, len, owner | OWNER_BIT)
}

/// First and last byte of a Ceph range.
fn inclusive(start: u64, len: u64) -> (u64, u64) {
    if len == 0 {
        (start, u64::MAX)
    } else {
        (start, start + len - 1)
    }
}

fn range_lock(t: std::ffi::c_int, start: u64, len: u64) -> crate::RangeLock {
    crate::RangeLock {
        offset: start,
        length: if len == 0 { u64::MAX } else { len },
        kind: if t == libc::F_WRLCK {
            crate::LockType::Write
        } else {
            crate::LockType::Read
        },
    }
}

/// `held` without `[s, e]`.
fn subtract(held: &mut Vec<(u64, u64)>, s: u64, e: u64) {
    let mut out = Vec::with_capacity(held.len() + 1);
    for &(a, b) in held.iter() {
        if b < s || a > e {
            out.push((a, b));
            continue;
        }
        if a < s {
            out.push((a, s - 1));
        }
        if b > e {
            out.push((e + 1, b));
        }
    }
    *held = out;
}

const FID_VERSION: u8 = 1;
const FID_LEN: usize = 1 + 8 + 12;

fn fid_of(st: &Statx) -> Fid {
    let mut b = [0u8; FID_LEN];
    b[0] = FID_VERSION;
    b[1..9].copy_from_slice(&st.ino.to_be_bytes());
    b[9..17].copy_from_slice(&(st.btime.tv_sec as u64).to_be_bytes());
    b[17..21].copy_from_slice(&(st.btime.tv_nsec as u32).to_be_bytes());
    Fid::new(&b).expect("fid fits")
}

fn parse_fid(fid: &Fid) -> Result<(u64, [u8; 12]), FsError> {
    let b = fid.as_bytes();
    if b.len() != FID_LEN || b[0] != FID_VERSION {
        return Err(FsError::BadHandle);
    }
    Ok((
        u64::from_be_bytes(b[1..9].try_into().unwrap()),
        b[9..21].try_into().unwrap(),
    ))
}

fn err(e: ffi::Errno) -> FsError {
    FsError::from_errno(e)
}

fn cname(name: &[u8]) -> Result<CString, FsError> {
    CString::new(name).map_err(|_| FsError::Inval)
}

fn ts(t: &libc::timespec) -> Timespec {
    Timespec {
        secs: t.tv_sec,
        nsecs: t.tv_nsec as u32,
    }
}

fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFBLK => FileType::BlockDev,
        libc::S_IFCHR => FileType::CharDev,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFIFO => FileType::Fifo,
        _ => FileType::Regular,
    }
}

// Linux's dev_t encoding (glibc's gnu_dev_major/minor/makedev).
fn dev_major(d: u64) -> u32 {
    (((d >> 32) & 0xffff_f000) | ((d >> 8) & 0xfff)) as u32
}
fn dev_minor(d: u64) -> u32 {
    (((d >> 12) & 0xffff_ff00) | (d & 0xff)) as u32
}
fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (major as u64, minor as u64);
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

fn now() -> Timespec {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timespec {
        secs: d.as_secs() as i64,
        nsecs: d.subsec_nanos(),
    }
}

fn to_libc(t: Timespec) -> libc::timespec {
    libc::timespec {
        tv_sec: t.secs,
        tv_nsec: t.nsecs as i64,
    }
}

impl CephFs {
    /// Mounts `cfg.path` of the file system. Errors name the library when
    /// libcephfs is not installed.
    pub fn new(cfg: &CephConfig) -> Result<CephFs, String> {
        tracing::info!(
            path = %cfg.path,
            fs = cfg.fs_name.as_deref().unwrap_or("(default)"),
            id = cfg.id.as_deref().unwrap_or("admin"),
            "mounting CephFS"
        );
        let m = Arc::new(Mount::new(&ffi::MountOpts {
            id: cfg.id.as_deref(),
            conf: cfg.conf.as_deref(),
            keyring: cfg.keyring.as_deref(),
            fs_name: cfg.fs_name.as_deref(),
            root: &cfg.path,
            uuid: HEAD_ID.get().map(|h| session_uuid(h, cfg)).as_deref(),
        })?);
        let (root, root_ino) = {
            let r = m
                .lookup_root()
                .map_err(|e| format!("ceph root: {}", ffi::strerror(e)))?;
            let st = m
                .getattr(&r, &m.perms(0, 0, &[]), false)
                .map_err(|e| format!("ceph root: {}", ffi::strerror(e)))?;
            (fid_of(&st), st.ino)
        };
        // The same on every head: derived from what names the export.
        let mut fsid: u64 = 0xcbf2_9ce4_8422_2325;
        for b in cfg
            .fs_name
            .as_deref()
            .unwrap_or("")
            .bytes()
            .chain(root_ino.to_be_bytes())
        {
            fsid = (fsid ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        let max = cfg.open_files.unwrap_or(files::DEFAULT_MAX);
        let idle = cfg.open_idle.unwrap_or(files::DEFAULT_IDLE);
        let files = Arc::new(OpenFiles::new(max, idle));
        let writers = Arc::new(OpenFiles::new(max, idle.min(files::WRITE_IDLE)));
        let (weak, weak_w) = (Arc::downgrade(&files), Arc::downgrade(&writers));
        // Closes what has been idle; ends with the export.
        std::thread::Builder::new()
            .name("cephfs-idle".into())
            .spawn(move || loop {
                let Some(w) = weak_w.upgrade() else { return };
                let nap = (w.idle() / 4).clamp(
                    std::time::Duration::from_millis(20),
                    std::time::Duration::from_secs(1),
                );
                drop(w);
                std::thread::sleep(nap);
                let now = std::time::Instant::now();
                match (weak.upgrade(), weak_w.upgrade()) {
                    (Some(f), Some(w)) => f.evict_idle(now) + w.evict_idle(now),
                    _ => return,
                };
            })
            .map_err(|e| format!("cephfs idle-file thread: {e}"))?;
        let acls = m.acls_enforced();
        Ok(CephFs {
            m,
            files,
            writers,
            acls,
            root,
            root_ino,
            fsid,
            locks: Mutex::default(),
            delegs: Mutex::default(),
            recall: Arc::default(),
            deleg_timeout: OnceLock::new(),
        })
    }

    /// How many files have a handle open for locks (for tests and
    /// diagnostics): one per file some owner holds a lock on.
    pub fn lock_handles(&self) -> usize {
        let files: Vec<_> = self.locks.lock().unwrap().values().cloned().collect();
        files.iter().filter(|f| f.lock().unwrap().is_some()).count()
    }

    /// The lock entry of an inode (made if missing).
    fn lock_file(&self, ino: u64) -> Arc<Mutex<Option<LockFile>>> {
        self.locks.lock().unwrap().entry(ino).or_default().clone()
    }

    /// Runs `f` on the inode's lock handle slot (created empty when
    /// missing), locked; then forgets the entry if it is left empty.
    fn with_lock_file<R>(&self, ino: u64, f: impl FnOnce(&mut Option<LockFile>) -> R) -> R {
        let entry = self.lock_file(ino);
        let r = f(&mut entry.lock().unwrap());
        self.tidy_lock_file(ino, entry);
        r
    }

    /// Forgets an inode's entry once nobody holds a lock through it or is
    /// about to use it.
    fn tidy_lock_file(&self, ino: u64, f: Arc<Mutex<Option<LockFile>>>) {
        let mut tab = self.locks.lock().unwrap();
        // Two references: the table's and `f`; the entry is empty.
        if Arc::strong_count(&f) == 2 && f.try_lock().is_ok_and(|g| g.is_none()) {
            tab.remove(&ino);
        }
    }

    /// Opens a lock handle: for writing if Ceph lets the head (write locks
    /// on a read-only open are what POSIX refuses), else for reading.
    fn open_lock_fh(&self, i: &InodeRef<'_>) -> Result<LockFh, FsError> {
        let perms = self.root_perms();
        match self.m.open_lock_fh(i, libc::O_RDWR, &perms) {
            Ok(f) => Ok(f),
            Err(libc::EACCES | libc::EPERM | libc::EROFS) => {
                self.m.open_lock_fh(i, libc::O_RDONLY, &perms).map_err(err)
            }
            Err(e) => Err(err(e)),
        }
    }

    /// A conflicting lock as Ceph reports it, for a request it refused.
    fn conflict(
        &self,
        fh: &LockFh,
        t: std::ffi::c_int,
        start: u64,
        len: u64,
        owner: u64,
    ) -> Result<crate::RangeLock, FsError> {
        Ok(match self.m.getlk(fh, t, start, len, owner).map_err(err)? {
            Some((ct, cs, cl)) => range_lock(ct, cs, cl),
            // Released between the two calls: report the range asked for.
            None => range_lock(libc::F_WRLCK, start, len),
        })
    }

    fn perms(&self, cred: &Cred) -> Perms<'_> {
        self.m.perms(cred.uid, cred.gid, &cred.gids)
    }

    fn root_perms(&self) -> Perms<'_> {
        self.m.root_perms()
    }

    /// How many files have a handle kept open for READ and WRITE, and how
    /// many were opened since the export started (for tests and metrics).
    pub fn open_files(&self) -> (u64, u64) {
        (
            self.files.len() + self.writers.len(),
            self.files.opened() + self.writers.opened(),
        )
    }

    /// A kept handle of the regular file `fid` for READ (or, `write`, for
    /// WRITE too) and its attributes now: the kept one when there is one
    /// for this fid, else opened as root and kept.
    fn kept(&self, fid: &Fid, write: bool) -> Result<(Arc<KeptFile>, Statx), FsError> {
        let (ino, _) = parse_fid(fid)?;
        let found = match self.writers.get(ino, fid) {
            Some(f) => Some(f),
            None if !write => self.files.get(ino, fid),
            None => None,
        };
        if let Some(f) = found {
            let st = f.getattr(&self.root_perms()).map_err(err)?;
            if st.nlink == 0 {
                self.forget(ino);
                return Err(FsError::Stale);
            }
            return Ok((f, st));
        }
        let i = self.file_inode(fid)?;
        let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
        let f = Arc::new(
            self.m
                .keep_open(i, flags, &self.root_perms())
                .map_err(err)?,
        );
        // Fresh, unlike the cached attributes `file_inode` went by: the
        // file may have lost its last name since they were.
        let st = f.getattr(&self.root_perms()).map_err(err)?;
        if st.nlink == 0 {
            return Err(FsError::Stale);
        }
        if write {
            self.writers.insert(ino, *fid, f.clone());
        } else {
            self.files.insert(ino, *fid, f.clone());
        }
        Ok((f, st))
    }

    /// Closes whatever is kept open of `ino` (once no call uses it).
    fn forget(&self, ino: u64) {
        self.files.remove(ino);
        self.writers.remove(ino);
    }

    /// Whether `cred` may read (or `write`) the file with attributes `st`:
    /// see the module docs.
    fn may_io(&self, cred: &Cred, fid: &Fid, st: &Statx, write: bool) -> Result<(), FsError> {
        if cred.uid == st.uid {
            return Ok(());
        }
        if self.acls {
            let flags = if write {
                libc::O_WRONLY
            } else {
                libc::O_RDONLY
            };
            let i = self.inode(fid)?;
            return self
                .m
                .open(&i, flags, &self.perms(cred))
                .map(drop)
                .map_err(err);
        }
        let a = self.attr(st);
        let ok = if write {
            crate::mode::may(cred, &a, crate::mode::W)
        } else {
            crate::mode::may(cred, &a, crate::mode::R) || crate::mode::may(cred, &a, crate::mode::X)
        };
        if ok {
            Ok(())
        } else {
            Err(FsError::Acces)
        }
    }

    /// Stops keeping the file `name` in `dir` names before it loses that
    /// name (an open handle would keep a removed file's space).
    fn forget_name(&self, dir: &InodeRef<'_>, name: &std::ffi::CStr) -> Option<u64> {
        if self.files.len() + self.writers.len() == 0 {
            return None;
        }
        let (_, st) = self.m.lookup(dir, name, &self.root_perms()).ok()?;
        Some(st.ino)
    }

    /// The inode of a fid, checked against the birth time it was issued
    /// with, and its cached attributes (enough for the type and btime,
    /// which never change).
    fn inode_st(&self, fid: &Fid) -> Result<(InodeRef<'_>, Statx), FsError> {
        self.inode_checked(fid, false)
    }

    /// [`CephFs::inode_st`] with the attributes `fresh` (libcephfs asks the
    /// MDS when it lacks the capabilities for them) or cached.
    fn inode_checked(&self, fid: &Fid, fresh: bool) -> Result<(InodeRef<'_>, Statx), FsError> {
        let (ino, btime) = parse_fid(fid)?;
        let i = self.m.lookup_inode(ino).map_err(|e| match e {
            libc::ENOENT | libc::ESTALE => FsError::Stale,
            e => err(e),
        })?;
        let st = self
            .m
            .getattr(&i, &self.root_perms(), !fresh)
            .map_err(err)?;
        if fid_of(&st).as_bytes()[9..] != btime || st.nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok((i, st))
    }

    fn inode(&self, fid: &Fid) -> Result<InodeRef<'_>, FsError> {
        self.inode_st(fid).map(|(i, _)| i)
    }

    /// The inode of a fid that must be a directory (else `NotDir`, as a
    /// local directory's *at() calls say).
    fn dir_inode(&self, fid: &Fid) -> Result<InodeRef<'_>, FsError> {
        let (i, st) = self.inode_st(fid)?;
        if file_type(st.mode as u32) != FileType::Directory {
            return Err(FsError::NotDir);
        }
        Ok(i)
    }

    /// The inode of a fid that must be a regular file: file I/O on anything
    /// else is refused here (a directory `IsDir`, others `Inval`), before
    /// libcephfs would open a directory or a device node for it.
    fn file_inode(&self, fid: &Fid) -> Result<InodeRef<'_>, FsError> {
        let (i, st) = self.inode_st(fid)?;
        match file_type(st.mode as u32) {
            FileType::Regular => Ok(i),
            FileType::Directory => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }

    fn attr(&self, st: &Statx) -> Attr {
        let mode = st.mode as u32;
        Attr {
            ftype: file_type(mode),
            mode: mode & 0o7777,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            used: st.blocks * 512,
            rdev: (dev_major(st.rdev), dev_minor(st.rdev)),
            fsid: self.fsid,
            fileid: st.ino,
            atime: ts(&st.atime),
            mtime: ts(&st.mtime),
            ctime: ts(&st.ctime),
        }
    }

    /// Fresh attributes; an inode with no links left (removed, still in
    /// this client's cache) is stale, as for any fid of a deleted object.
    fn stat(&self, i: &InodeRef<'_>) -> Result<Statx, FsError> {
        let st = self.m.getattr(i, &self.root_perms(), false).map_err(err)?;
        if st.nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok(st)
    }

    fn apply_set(&self, i: &InodeRef<'_>, perms: &Perms<'_>, set: &SetAttr) -> Result<(), FsError> {
        let mut st = Statx::default();
        let mut mask = 0;
        if let Some(m) = set.mode {
            st.mode = (m & 0o7777) as u16;
            mask |= ffi::SETATTR_MODE;
        }
        if let Some(u) = set.uid {
            st.uid = u;
            mask |= ffi::SETATTR_UID;
        }
        if let Some(g) = set.gid {
            st.gid = g;
            mask |= ffi::SETATTR_GID;
        }
        if let Some(s) = set.size {
            st.size = s;
            mask |= ffi::SETATTR_SIZE;
        }
        let t = now();
        match set.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => {
                st.atime = to_libc(t);
                mask |= ffi::SETATTR_ATIME;
            }
            SetTime::ClientTime(c) => {
                st.atime = to_libc(c);
                mask |= ffi::SETATTR_ATIME;
            }
        }
        match set.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => {
                st.mtime = to_libc(t);
                mask |= ffi::SETATTR_MTIME;
            }
            SetTime::ClientTime(c) => {
                st.mtime = to_libc(c);
                mask |= ffi::SETATTR_MTIME;
            }
        }
        if mask == 0 {
            return Ok(());
        }
        self.m.setattr(i, &st, mask, perms).map_err(err)
    }

    /// After a create: the attributes the client asked for, except a mode
    /// already given to the create call and a zero size (new is empty).
    fn set_after_create(
        &self,
        i: &InodeRef<'_>,
        perms: &Perms<'_>,
        set: &SetAttr,
    ) -> Result<(), FsError> {
        let mut s = set.clone();
        s.mode = None;
        if s.size == Some(0) {
            s.size = None;
        }
        self.apply_set(i, perms, &s)
    }

    fn lookup_in(
        &self,
        cred: &Cred,
        dir: &InodeRef<'_>,
        dir_ino: u64,
        name: &[u8],
    ) -> Result<(Fid, Attr), FsError> {
        if name == b".." && dir_ino == self.root_ino {
            let st = self.stat(dir)?;
            return Ok((self.root, self.attr(&st)));
        }
        let c = cname(name)?;
        let (_i, st) = self.m.lookup(dir, &c, &self.perms(cred)).map_err(err)?;
        Ok((fid_of(&st), self.attr(&st)))
    }
}

impl crate::Core for CephFs {
    fn root(&self) -> Fid {
        self.root
    }

    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError> {
        // One getattr, not the cached one of `inode` and a fresh one:
        // libcephfs answers from its cache while it holds the capabilities.
        let (_, st) = self.inode_checked(fid, true)?;
        Ok(self.attr(&st))
    }

    fn kept_open(&self) -> Option<u64> {
        Some(self.files.len() + self.writers.len())
    }

    fn closed(&self, fid: &Fid) {
        if let Ok((ino, _)) = parse_fid(fid) {
            // Dropped here (closed, unless a call still uses it).
            drop(self.writers.remove(ino));
        }
    }

    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError> {
        let i = if set.size.is_some() {
            self.file_inode(fid)?
        } else {
            self.inode(fid)?
        };
        self.apply_set(&i, &self.perms(cred), set)?;
        Ok(self.attr(&self.stat(&i)?))
    }

    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError> {
        check_name(name)?;
        let d = self.dir_inode(dir)?;
        let (ino, _) = parse_fid(dir)?;
        self.lookup_in(cred, &d, ino, name)
    }

    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError> {
        let a = self.getattr(fid)?;
        Ok(crate::mode::access(cred, &a, want))
    }

    fn readlink(&self, cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError> {
        let i = self.inode(fid)?;
        self.m.readlink(&i, &self.perms(cred)).map_err(|e| match e {
            libc::EINVAL | libc::ENOENT => FsError::Inval,
            e => err(e),
        })
    }

    fn read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, bool), FsError> {
        let (f, st) = self.kept(fid, false)?;
        self.may_io(cred, fid, &st, false)?;
        let mut done = 0;
        // ll_read may return less than asked at an object boundary: loop
        // until the buffer is full or the file ends.
        while done < buf.len() {
            let n = f
                .read(offset + done as u64, &mut buf[done..])
                .map_err(err)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok((done, offset + done as u64 >= st.size))
    }

    fn write(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<(usize, Stable), FsError> {
        let (f, st) = self.kept(fid, true)?;
        self.may_io(cred, fid, &st, true)?;
        let mut done = 0;
        while done < data.len() {
            let n = f.write(offset + done as u64, &data[done..]).map_err(err)?;
            if n == 0 {
                return Err(FsError::Io);
            }
            done += n;
        }
        match stable {
            Stable::Unstable => {}
            Stable::DataSync => f.fsync(true).map_err(err)?,
            Stable::FileSync => f.fsync(false).map_err(err)?,
        }
        Ok((done, stable))
    }

    fn commit(&self, fid: &Fid) -> Result<(), FsError> {
        let i = self.file_inode(fid)?;
        self.m.sync_inode(&i).map_err(err)?;
        // The data is stable: the write open ends here (see `files`).
        if let Ok((ino, _)) = parse_fid(fid) {
            self.writers.remove(ino);
        }
        Ok(())
    }

    fn create(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        how: &CreateHow,
    ) -> Result<(Fid, Attr), FsError> {
        check_new_name(name)?;
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        let perms = self.perms(cred);
        let (mode, set) = how.for_new_file();
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NOFOLLOW;
        match self
            .m
            .create(&d, &c, mode & 0o7777 | libc::S_IFREG, flags, &perms)
        {
            Ok((i, f, _)) => {
                self.set_after_create(&i, &perms, &set)?;
                if let CreateHow::Exclusive(v) = how {
                    let (m, a) = verifier_times(v);
                    let times = SetAttr {
                        atime: SetTime::ClientTime(a),
                        mtime: SetTime::ClientTime(m),
                        ..SetAttr::default()
                    };
                    self.apply_set(&i, &perms, &times)?;
                }
                let st = self.stat(&i)?;
                let fid = fid_of(&st);
                // Data usually follows a create: keep the handle for it.
                self.writers
                    .insert(st.ino, fid, Arc::new(self.m.keep(i, f)));
                Ok((fid, self.attr(&st)))
            }
            Err(libc::EEXIST) => {
                let (i, st) = self.m.lookup(&d, &c, &perms).map_err(err)?;
                let attr = self.attr(&st);
                let Some(size) = how.on_existing(&attr)? else {
                    return Ok((fid_of(&st), attr));
                };
                let set = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                self.apply_set(&i, &perms, &set)?;
                let st = self.stat(&i)?;
                Ok((fid_of(&st), self.attr(&st)))
            }
            Err(e) => Err(err(e)),
        }
    }

    fn mkdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        check_new_name(name)?;
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        let perms = self.perms(cred);
        let (i, _) = self
            .m
            .mkdir(&d, &c, set.mode.unwrap_or(0o755) & 0o7777, &perms)
            .map_err(err)?;
        self.set_after_create(&i, &perms, set)?;
        let st = self.stat(&i)?;
        Ok((fid_of(&st), self.attr(&st)))
    }

    fn symlink(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        check_new_name(name)?;
        if target.is_empty() {
            return Err(FsError::Inval);
        }
        let d = self.dir_inode(dir)?;
        let (c, t) = (cname(name)?, cname(target)?);
        let perms = self.perms(cred);
        let (i, _) = self.m.symlink(&d, &c, &t, &perms).map_err(err)?;
        let mut s = set.clone();
        s.mode = None; // symlinks have no mode of their own
        self.set_after_create(&i, &perms, &s)?;
        let st = self.stat(&i)?;
        Ok((fid_of(&st), self.attr(&st)))
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
        check_new_name(name)?;
        let (mode, rdev) = crate::backend::special_node(ftype, rdev, set)?;
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        let perms = self.perms(cred);
        let dev = makedev(rdev.0, rdev.1);
        let (i, _) = self.m.mknod(&d, &c, mode, dev, &perms).map_err(err)?;
        self.set_after_create(&i, &perms, set)?;
        let st = self.stat(&i)?;
        Ok((fid_of(&st), self.attr(&st)))
    }

    fn remove(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        if name == b"." || name == b".." {
            return Err(FsError::Inval);
        }
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        let perms = self.perms(cred);
        let kept = self.forget_name(&d, &c);
        // unlink(2) of a directory is EISDIR on Linux; Ceph's MDS says EISDIR too.
        self.m.unlink(&d, &c, &perms).map_err(err)?;
        if let Some(ino) = kept {
            self.forget(ino);
        }
        Ok(())
    }

    fn rmdir(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        if name == b"." {
            return Err(FsError::Inval);
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        self.m.rmdir(&d, &c, &self.perms(cred)).map_err(err)
    }

    fn rename(
        &self,
        cred: &Cred,
        from_dir: &Fid,
        from_name: &[u8],
        to_dir: &Fid,
        to_name: &[u8],
    ) -> Result<(), FsError> {
        check_rename_names(from_name, to_name)?;
        let f = self.dir_inode(from_dir)?;
        let t = self.dir_inode(to_dir)?;
        let (a, b) = (cname(from_name)?, cname(to_name)?);
        let perms = self.perms(cred);
        let replaced = self.forget_name(&t, &b);
        let r = self.m.rename(&f, &a, &t, &b, &perms);
        if let (Ok(()), Some(ino)) = (&r, replaced) {
            self.forget(ino);
        }
        match r {
            // The MDS says ENOTEMPTY for a file onto a non-empty
            // directory; rename(2) says EISDIR, whatever the directory holds.
            Err(libc::ENOTEMPTY) => match self.m.lookup(&f, &a, &perms) {
                Ok((_, st)) if file_type(st.mode as u32) != FileType::Directory => {
                    Err(FsError::IsDir)
                }
                _ => Err(FsError::NotEmpty),
            },
            r => r.map_err(err),
        }
    }

    fn link(&self, cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        check_new_name(name)?;
        let (i, st) = self.inode_st(fid)?;
        if file_type(st.mode as u32) == FileType::Directory {
            return Err(FsError::IsDir); // the MDS would say EPERM
        }
        let d = self.dir_inode(dir)?;
        let c = cname(name)?;
        self.m.link(&i, &d, &c, &self.perms(cred)).map_err(err)
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
        let (d, dst) = self.inode_st(dir)?;
        if file_type(dst.mode as u32) != FileType::Directory {
            return Err(FsError::NotDir);
        }
        let (dir_ino, _) = parse_fid(dir)?;
        let perms = self.perms(cred);
        let stream = self.m.opendir(&d, &perms).map_err(err)?;
        if cookie != 0 {
            self.m.seekdir(&stream, cookie);
        }
        let verifier = [0u8; 8];
        // Handles and attributes with the names only for a caller who may
        // look the names up (search permission on the directory, which a
        // LOOKUP of each would need), judged once by the mode bits as
        // ACCESS is.
        let plus = plus && crate::mode::may(cred, &self.attr(&dst), crate::mode::X);
        loop {
            let entry = if plus {
                self.m
                    .next_entry_plus(&stream)
                    .map_err(err)?
                    .map(|(name, st, next)| (name, st.ino, next, Some(st)))
            } else {
                self.m
                    .next_entry(&stream)
                    .map_err(err)?
                    .map(|(name, ino, next)| (name, ino, next, None))
            };
            let Some((name, ino, next, st)) = entry else {
                return Ok(DirEnd {
                    eof: true,
                    verifier,
                });
            };
            if !sink.room_for(&name) {
                return Ok(DirEnd {
                    eof: false,
                    verifier,
                });
            }
            let extra = match st {
                // "." and "..": as LOOKUP answers them (the export root's
                // parent is the root itself).
                Some(_) if name == b"." || name == b".." => {
                    self.lookup_in(cred, &d, dir_ino, &name).ok()
                }
                // An entry removed since the listing was read.
                Some(st) if st.nlink == 0 => None,
                Some(st) => Some((fid_of(&st), self.attr(&st))),
                None => None,
            };
            let fileid = extra.as_ref().map_or(ino, |(_, a)| a.fileid);
            let item = DirItem {
                name: &name,
                fileid,
                cookie: next,
                plus: extra,
            };
            if !sink.push(item) {
                return Ok(DirEnd {
                    eof: false,
                    verifier,
                });
            }
        }
    }

    fn fsstat(&self, fid: &Fid) -> Result<FsStat, FsError> {
        let i = self.inode(fid)?;
        let s = self.m.statfs(&i).map_err(err)?;
        Ok(crate::backend::fsstat_of(&s, s.f_frsize.max(1)))
    }

    fn sync_all(&self) -> Result<(), FsError> {
        self.m.sync_fs().map_err(err)
    }
}

impl crate::SharedLocks for CephFs {
    fn shares_locks(&self) -> bool {
        true
    }

    fn lock_range(
        &self,
        fid: &Fid,
        owner: u64,
        kind: crate::LockType,
        offset: u64,
        length: u64,
    ) -> Result<Option<crate::RangeLock>, FsError> {
        let i = self.file_inode(fid)?;
        let (ino, _) = parse_fid(fid)?;
        let (t, start, len, owner) = ceph_lock(kind, offset, length, owner);
        self.with_lock_file(ino, |slot| {
            let f = match slot {
                Some(f) => f,
                None => slot.insert(LockFile {
                    fh: self.open_lock_fh(&i)?,
                    held: HashMap::new(),
                }),
            };
            let r = match self.m.setlk(&f.fh, t, start, len, owner) {
                Ok(()) => {
                    f.held.entry(owner).or_default().push(inclusive(start, len));
                    Ok(None)
                }
                Err(libc::EAGAIN | libc::EACCES) => {
                    self.conflict(&f.fh, t, start, len, owner).map(Some)
                }
                Err(e) => Err(err(e)),
            };
            if f.held.is_empty() {
                // Opened for this request, which was refused: nothing to keep.
                let f = slot.take().expect("present");
                self.m.close_lock_fh(f.fh);
            }
            r
        })
    }

    fn test_range(
        &self,
        fid: &Fid,
        owner: u64,
        kind: crate::LockType,
        offset: u64,
        length: u64,
    ) -> Result<Option<crate::RangeLock>, FsError> {
        let i = self.file_inode(fid)?;
        let (ino, _) = parse_fid(fid)?;
        let (t, start, len, owner) = ceph_lock(kind, offset, length, owner);
        let ask = |fh: &LockFh| {
            Ok(self
                .m
                .getlk(fh, t, start, len, owner)
                .map_err(err)?
                .map(|(ct, cs, cl)| range_lock(ct, cs, cl)))
        };
        self.with_lock_file(ino, |slot| match slot {
            Some(f) => ask(&f.fh),
            None => {
                // Nothing held through this head: a handle just for
                // the question (closing it drops nothing).
                match self.open_lock_fh(&i) {
                    Ok(fh) => {
                        let r = ask(&fh);
                        self.m.close_lock_fh(fh);
                        r
                    }
                    Err(e) => Err(e),
                }
            }
        })
    }

    fn unlock_range(&self, fid: &Fid, owner: u64, offset: u64, length: u64) -> Result<(), FsError> {
        let (ino, _) = parse_fid(fid)?;
        let (start, len) = ceph_range(offset, length);
        let owner = owner | OWNER_BIT;
        let Some(entry) = self.locks.lock().unwrap().get(&ino).cloned() else {
            // No lock was taken through this head.
            return Ok(());
        };
        let r = (|| {
            let mut slot = entry.lock().unwrap();
            let Some(f) = &mut *slot else {
                return Ok(());
            };
            if !f.held.contains_key(&owner) {
                return Ok(());
            }
            self.m
                .setlk(&f.fh, libc::F_UNLCK, start, len, owner)
                .map_err(err)?;
            let (s, e) = inclusive(start, len);
            if let Some(h) = f.held.get_mut(&owner) {
                subtract(h, s, e);
                if h.is_empty() {
                    f.held.remove(&owner);
                }
            }
            if f.held.is_empty() {
                // The last lock is gone: the handle is not needed any more.
                let f = slot.take().expect("present");
                self.m.close_lock_fh(f.fh);
            }
            Ok(())
        })();
        self.tidy_lock_file(ino, entry);
        r
    }
}

impl crate::SharedDelegations for CephFs {
    fn shares_delegations(&self) -> bool {
        true
    }

    fn delegate(&self, fid: &Fid, within: std::time::Duration) -> Result<bool, FsError> {
        let allowed = self.deleg_timeout.get_or_init(|| {
            // libcephfs refuses delegations until told how long a recall
            // may take, and unmounts a mount that takes longer.
            let secs = within.as_secs().clamp(5, u32::MAX as u64) as u32;
            self.m.set_deleg_timeout(secs).map_err(|e| {
                let m = format!(
                    "ceph_set_deleg_timeout({secs}): {} (the cluster's session timeout is shorter: shorten [nfs4] lease_seconds); no delegations on this CephFS export",
                    ffi::strerror(e)
                );
                tracing::warn!("{m}");
                m
            })
        });
        if allowed.is_err() {
            return Ok(false);
        }
        let (ino, _) = parse_fid(fid)?;
        if self.delegs.lock().unwrap().contains_key(&ino) {
            return Ok(true);
        }
        let i = self.file_inode(fid)?;
        // A handle kept open for writing here would make Ceph refuse a
        // read delegation (EAGAIN); the server only asks with no NFS
        // writer, so the one kept is idle.
        self.writers.remove(ino);
        let fh = self
            .m
            .open_lock_fh(&i, libc::O_RDONLY, &self.root_perms())
            .map_err(err)?;
        let (hook, f) = (self.recall.clone(), *fid);
        let recall = Arc::new(move || {
            if let Some(h) = hook.get() {
                h(&f)
            }
        });
        match self.m.delegate(&fh, recall) {
            Ok(d) => {
                // The server takes one per file at a time: no other can
                // have come in meanwhile.
                if let Some((fh, d)) = self.delegs.lock().unwrap().insert(ino, (fh, d)) {
                    self.m.give_back(fh, d);
                }
                Ok(true)
            }
            Err(e) => {
                self.m.close_lock_fh(fh);
                match e {
                    libc::EAGAIN => Ok(false),
                    e => Err(err(e)),
                }
            }
        }
    }

    fn undelegate(&self, fid: &Fid) {
        let Ok((ino, _)) = parse_fid(fid) else {
            return;
        };
        let held = self.delegs.lock().unwrap().remove(&ino);
        if let Some((fh, d)) = held {
            self.m.give_back(fh, d);
        }
    }

    fn on_delegation_recall(&self, hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        self.recall.set(hook).is_ok()
    }
}

impl crate::Space for CephFs {
    fn seek(&self, cred: &Cred, fid: &Fid, offset: u64, what: SeekWhat) -> Result<u64, FsError> {
        let i = self.file_inode(fid)?;
        let f = self
            .m
            .open(&i, libc::O_RDONLY, &self.perms(cred))
            .map_err(err)?;
        let whence = match what {
            SeekWhat::Data => libc::SEEK_DATA,
            SeekWhat::Hole => libc::SEEK_HOLE,
        };
        self.m.lseek(&f, offset, whence).map_err(err)
    }

    fn deallocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        let i = self.file_inode(fid)?;
        let f = self
            .m
            .open(&i, libc::O_WRONLY, &self.perms(cred))
            .map_err(err)?;
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        self.m.fallocate(&f, mode, offset, len).map_err(err)
    }
}

impl crate::Xattrs for CephFs {
    fn xattr_support(&self) -> bool {
        true
    }

    fn getxattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let c = cname(&user_xattr_name(name)?)?;
        let i = self.inode(fid)?;
        self.m
            .getxattr(&i, &c, XATTR_SIZE_MAX, &self.perms(cred))
            .map_err(err)
    }

    fn setxattr(
        &self,
        cred: &Cred,
        fid: &Fid,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<(), FsError> {
        let c = cname(&user_xattr_name(name)?)?;
        crate::backend::check_xattr_value(value)?;
        let flags = crate::backend::xattr_flags(how);
        let i = self.inode(fid)?;
        self.m
            .setxattr(&i, &c, value, flags, &self.perms(cred))
            .map_err(err)
    }

    fn listxattrs(&self, cred: &Cred, fid: &Fid) -> Result<Vec<Vec<u8>>, FsError> {
        let i = self.inode(fid)?;
        let list = self
            .m
            .listxattr(&i, XATTR_SIZE_MAX, &self.perms(cred))
            .map_err(err)?;
        Ok(crate::backend::user_xattr_names(&list))
    }

    fn removexattr(&self, cred: &Cred, fid: &Fid, name: &[u8]) -> Result<(), FsError> {
        let c = cname(&user_xattr_name(name)?)?;
        let i = self.inode(fid)?;
        self.m.removexattr(&i, &c, &self.perms(cred)).map_err(err)
    }
}

impl crate::ChangeNotify for CephFs {}

#[cfg(test)]
mod tests;
