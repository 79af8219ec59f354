//! The FUSE file system over a [`Remote`]: the kernel's requests come in on
//! fuser's thread and are answered from tasks on the tokio runtime, so
//! slow calls overlap. Everything (inodes, open files, locks) hangs off
//! this one mount's [`State`].
//!
//! Caching: the kernel keeps attributes and names for the TTLs given in
//! replies, which come from the attribute-timeout policy
//! ([`client::cache::attr`]) and `lookupcache`; page data stays in the
//! kernel's page cache across opens (FOPEN_KEEP_CACHE) only while the
//! file's change attribute has not moved; a change seen by GETATTR drops
//! it (notify_inval_inode). Writes are buffered per open file and sent as
//! wsize UNSTABLE WRITEs, then COMMIT on flush (close) and fsync; under a
//! write delegation close only starts the WRITEs and release COMMITs.
//!
//! Names: LOOKUP comes with its GETATTR in one call, READDIR with every
//! entry's handle and attributes (FUSE readdirplus), and an open checks
//! the name it was reached by (close-to-open for names, see on_open): a
//! name another client renamed or removed is ENOENT at the next open, at
//! the next stat once the directory's attribute timeout has run out.
//!
//! Delegations (NFSv4.1/4.2, the session has a back channel): an existing
//! file is opened with a real OPEN (CLAIM_FH, GETATTR in the same
//! COMPOUND) whose stateid its READs and WRITEs carry, so the server may
//! delegate it. While the session holds a delegation on a file, its cached
//! attributes are used without asking (stat, and open's close-to-open
//! check); under a write delegation this mount's writes set size and
//! mtime. On CB_RECALL the session calls [`State::before_return`], which
//! sends the file's buffered data and COMMITs it before the DELEGRETURN.

use super::options::MountOptions;
use bytes::{Bytes, BytesMut};
use client::cache::attr::{AcOptions, Delegated, Refresh};
use client::cache::inodes::{InodeTable, TableStats, ROOT};
use client::nfs4::DelegKind;
use client::remote::{
    Attr, Error, Fh, FileType as FT, HeldLock, OpenFile, Range, Remote, SetAttr, SetTime, Special,
    Stable, Time,
};
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, Notifier, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow,
};
use proto::rpc::OpaqueAuth;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod attr;
mod callers;
mod dir;
mod io;
mod lock;
use lock::PosixLock;
pub mod silly;
mod space;

/// WRITEs of one open file in flight at once before a writer waits.
const WRITES_IN_FLIGHT: usize = 16;

/// A directory's entries as read at opendir: (d_ino, type, name, and the
/// handle and attributes readdirplus hands the kernel; None for "." and
/// "..").
type Listing = Vec<(u64, FileType, String, Option<(Fh, Attr)>)>;

pub struct State {
    pub remote: Arc<Remote>,
    pub opts: MountOptions,
    rsize: u32,
    wsize: u32,
    table: Mutex<InodeTable>,
    files: Mutex<HashMap<u64, Arc<Open>>>,
    /// The same opens by inode, so that what touches one file (a stat, a
    /// read, a recall) looks at that file's opens only.
    opens_of: Mutex<HashMap<u64, Vec<Arc<Open>>>>,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    /// Directory changes in flight, by directory inode (see dir.rs).
    changing: Mutex<dir::DirChanges>,
    locks: Mutex<HashMap<(u64, u64), Vec<HeldLock>>>,
    /// Files unlinked while open here: their directory and hidden name,
    /// removed at the last close.
    silly: Mutex<HashMap<u64, (Fh, String)>>,
    /// Where those names are recorded for the clean-up after a crash.
    silly_log: std::sync::OnceLock<silly::SillyLog>,
    /// Files whose open by name just failed (ESTALE): the kernel's retry
    /// opens them by handle (see on_open).
    reopen_by_fh: Mutex<std::collections::HashSet<u64>>,
    next_fh: AtomicU64,
    pub notifier: Mutex<Option<Notifier>>,
    /// Some: each request's calls go as its process's uid/gids (AUTH_SYS,
    /// with this machine name) instead of the mount's identity.
    per_caller: Option<callers::Callers>,
}

/// One open file: its handle (and NFSv4 open state) and its write buffer.
struct Open {
    ino: u64,
    file: OpenFile,
    /// Whether this mount created it with an OPEN (to CLOSE on release).
    owns_state: bool,
    /// The opener's credential (per-caller mounts): what its WRITEs go as.
    cred: Option<OpaqueAuth>,
    /// Opened for writing (its close invalidates the cached attributes).
    writable: bool,
    /// Opened with O_DIRECT: no page cache, each write stable before it
    /// returns (set by [`State::direct_io`] as the open is answered).
    direct: std::sync::atomic::AtomicBool,
    w: Mutex<WriteBuf>,
    /// Held by a flush from send to COMMIT, so that a second flush (close
    /// beside a recall's) waits for the first's data to be stable.
    flushing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct WriteBuf {
    /// Contiguous data not sent yet, starting at `off`.
    off: u64,
    data: BytesMut,
    /// The tasks of WRITEs sent (a writer waits for the oldest when there
    /// are too many).
    inflight: Vec<JoinHandle<()>>,
    /// The byte ranges of WRITEs sent and not yet answered. The server
    /// may run two calls of one connection in either order, so a WRITE
    /// waits for every earlier one it overlaps: the newer data lands last.
    sent: Vec<Sent>,
    /// Some WRITE was UNSTABLE: a COMMIT is owed; the verifier it had.
    verf: Option<[u8; 8]>,
    /// A failure to report at the next flush/fsync.
    err: Option<i32>,
    /// UNSTABLE WRITEs came back with different verifiers.
    verf_mixed: bool,
}

impl WriteBuf {
    fn dirty(&self) -> bool {
        !self.data.is_empty() || self.sent.iter().any(|s| !*s.done.borrow())
    }

    /// Registers a WRITE of `[start, end)` about to be sent: returns the
    /// completion signals of the earlier ones it overlaps, and the sender
    /// that marks this one done.
    fn order(&mut self, start: u64, end: u64) -> (Vec<watch::Receiver<bool>>, watch::Sender<bool>) {
        self.sent.retain(|s| !*s.done.borrow());
        let before = self
            .sent
            .iter()
            .filter(|s| s.start < end && start < s.end)
            .map(|s| s.done.clone())
            .collect();
        let (tx, rx) = watch::channel(false);
        self.sent.push(Sent {
            start,
            end,
            done: rx,
        });
        (before, tx)
    }
}

/// A WRITE on its way: its range and whether it has been answered.
struct Sent {
    start: u64,
    end: u64,
    done: watch::Receiver<bool>,
}

pub struct TarnFs {
    rt: Handle,
    st: Arc<State>,
}

fn now() -> Instant {
    Instant::now()
}

fn to_system(t: Option<Time>) -> SystemTime {
    match t {
        Some(t) if t.seconds >= 0 => {
            UNIX_EPOCH + Duration::new(t.seconds as u64, t.nseconds.min(999_999_999))
        }
        _ => UNIX_EPOCH,
    }
}

fn kind(t: Option<FT>) -> FileType {
    match t {
        Some(FT::Directory) => FileType::Directory,
        Some(FT::Symlink) => FileType::Symlink,
        Some(FT::Block) => FileType::BlockDevice,
        Some(FT::Char) => FileType::CharDevice,
        Some(FT::Socket) => FileType::Socket,
        Some(FT::Fifo) => FileType::NamedPipe,
        _ => FileType::RegularFile,
    }
}

fn fattr(ino: u64, a: &Attr) -> FileAttr {
    let size = a.size.unwrap_or(0);
    FileAttr {
        // st_ino: the node id, which is the server's fileid when it can be
        // (cache::inodes), as `ls -i` shows on a kernel NFS mount; the root
        // is FUSE's 1, but only GETATTR tells the kernel its attributes.
        ino: if ino == ROOT {
            a.fileid.filter(|&f| f != 0).unwrap_or(ino)
        } else {
            ino
        },
        size,
        blocks: a.used.unwrap_or(size).div_ceil(512),
        atime: to_system(a.atime),
        mtime: to_system(a.mtime),
        ctime: to_system(a.ctime),
        crtime: to_system(a.ctime),
        kind: kind(a.ftype),
        perm: (a.mode.unwrap_or(0o644) & 0o7777) as u16,
        nlink: a.nlink.unwrap_or(1),
        uid: a.uid.unwrap_or(65534),
        gid: a.gid.unwrap_or(65534),
        rdev: a.rdev.map_or(0, |(major, minor)| encode_dev(major, minor)),
        blksize: 1 << 20,
        flags: 0,
    }
}

/// A device number as FUSE carries it (the kernel's new_encode_dev).
fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// (major, minor) of a device number as FUSE carries it.
fn decode_dev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

/// The inode number the kernel knows, in attributes we hand back.
fn with_nodeid(mut f: FileAttr, _ino: u64) -> FileAttr {
    f.blksize = 1 << 20;
    f
}

/// `f`, as `cred` when there is one.
async fn maybe_as<F: std::future::Future>(cred: Option<OpaqueAuth>, f: F) -> F::Output {
    match cred {
        Some(c) => rpc::client::as_caller(c, f).await,
        None => f.await,
    }
}

/// The supplementary groups of process `pid` (/proc/PID/status), at most
/// the 16 AUTH_SYS carries.
fn groups_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .take(16)
                    .collect()
            })
        })
        .unwrap_or_default()
}

fn name_of(n: &OsStr) -> Result<String, i32> {
    n.to_str().map(str::to_string).ok_or(libc::EINVAL)
}

fn errno(e: Error) -> i32 {
    e.errno()
}

impl State {
    pub fn new(
        remote: Arc<Remote>,
        opts: MountOptions,
        root: Fh,
        root_attr: Attr,
        per_caller: Option<String>,
    ) -> State {
        let rsize = opts.rsize.unwrap_or(u32::MAX).min(remote.rsize());
        let wsize = opts.wsize.unwrap_or(u32::MAX).min(remote.wsize());
        let table = InodeTable::new(root, root_attr, now(), &opts.ac);
        State {
            remote,
            rsize,
            wsize,
            table: Mutex::new(table),
            files: Mutex::new(HashMap::new()),
            opens_of: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            changing: Mutex::new(Default::default()),
            locks: Mutex::new(HashMap::new()),
            silly: Mutex::new(HashMap::new()),
            silly_log: std::sync::OnceLock::new(),
            reopen_by_fh: Mutex::new(Default::default()),
            next_fh: AtomicU64::new(1),
            notifier: Mutex::new(None),
            per_caller: per_caller.map(callers::Callers::new),
            opts,
        }
    }

    /// The AUTH_SYS credential of the process behind `req`, when this
    /// mount acts per caller.
    fn caller_cred(&self, req: &Request<'_>) -> Option<OpaqueAuth> {
        let callers = self.per_caller.as_ref()?;
        Some(callers.cred(
            std::time::Instant::now(),
            req.pid(),
            req.uid(),
            req.gid(),
            groups_of,
        ))
    }

    /// READ and WRITE sizes in use (the server's, capped by the options).
    pub fn transfer_sizes(&self) -> (u32, u32) {
        (self.rsize, self.wsize)
    }

    pub fn stats(&self) -> TableStats {
        self.table.lock().expect("table").stats()
    }

    /// Over the inode cap: asks the kernel to drop the least recently
    /// used names; its FORGETs then remove the inodes from the table.
    pub fn evict(&self) -> usize {
        let out = self
            .table
            .lock()
            .expect("table")
            .over_cap(self.opts.inode_cap);
        if let Some(n) = self.notifier.lock().expect("notifier").as_ref() {
            for (_, parent, name) in &out {
                let _ = n.inval_entry(*parent, OsStr::new(name));
            }
        }
        out.len()
    }

    fn ac(&self) -> &AcOptions {
        &self.opts.ac
    }

    fn fh(&self, ino: u64) -> Result<Fh, i32> {
        self.table
            .lock()
            .expect("table")
            .get(ino)
            .map(|n| n.fh.clone())
            .ok_or(libc::ESTALE)
    }
}

impl TarnFs {
    pub fn new(rt: Handle, st: Arc<State>) -> TarnFs {
        TarnFs { rt, st }
    }

    /// Runs a request's work on the runtime, its calls made as the
    /// requesting process (uid, gid and groups; under Kerberos, its uid's
    /// credential cache, found through its pid) when the mount acts per
    /// caller.
    fn spawn<F>(&self, req: &Request<'_>, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match self.st.caller_cred(req) {
            Some(c) => self.rt.spawn(rpc::client::as_caller_pid(c, req.pid(), f)),
            None => self.rt.spawn(f),
        };
    }

    /// As [`TarnFs::spawn`], then answers the kernel: `ok` with what `op`
    /// gave, or the errno it failed with.
    fn spawn_reply<R, T, Op>(
        &self,
        req: &Request<'_>,
        reply: R,
        op: Op,
        ok: impl FnOnce(R, T) + Send + 'static,
    ) where
        R: ErrReply + Send + 'static,
        T: Send + 'static,
        Op: std::future::Future<Output = Result<T, i32>> + Send + 'static,
    {
        self.spawn(req, async move {
            match op.await {
                Ok(v) => ok(reply, v),
                Err(e) => reply.error(e),
            }
        });
    }

    /// [`TarnFs::spawn_reply`] for a call answered with success alone.
    fn spawn_empty(
        &self,
        req: &Request<'_>,
        reply: ReplyEmpty,
        op: impl std::future::Future<Output = Result<(), i32>> + Send + 'static,
    ) {
        self.spawn_reply(req, reply, op, |reply, ()| reply.ok());
    }

    /// [`TarnFs::spawn_reply`] for a change to the directory entry `name`
    /// of the directory `dir`, refused up front as [`TarnFs::changed_name`]
    /// says; `op` gets the directory's handle (ESTALE if it is gone).
    fn spawn_change<R, T, Fut>(
        &self,
        req: &Request<'_>,
        (dir, name): (u64, &OsStr),
        reply: R,
        op: impl FnOnce(Arc<State>, Fh, String) -> Fut + Send + 'static,
        ok: impl FnOnce(R, T) + Send + 'static,
    ) where
        R: ErrReply + Send + 'static,
        T: Send + 'static,
        Fut: std::future::Future<Output = Result<T, i32>> + Send + 'static,
    {
        match self.changed_name(name) {
            Ok(name) => {
                let st = self.st.clone();
                let op = async move {
                    let dfh = st.fh(dir)?;
                    op(st, dfh, name).await
                };
                self.spawn_reply(req, reply, op, ok)
            }
            Err(e) => reply.error(e),
        }
    }

    fn ro(&self) -> bool {
        self.st.opts.ro
    }

    /// The name a change is to make or remove: EROFS on a read-only mount
    /// before anything else, EINVAL for a name that is not UTF-8.
    fn changed_name(&self, name: &OsStr) -> Result<String, i32> {
        if self.ro() {
            return Err(libc::EROFS);
        }
        name_of(name)
    }
}

/// The fuser replies' shared way to fail, so one helper can answer any of them.
trait ErrReply {
    fn error(self, errno: i32);
}

macro_rules! err_reply {
    ($($t:ty),*) => {$(
        impl ErrReply for $t {
            fn error(self, errno: i32) {
                <$t>::error(self, errno)
            }
        }
    )*};
}
err_reply!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyEmpty,
    ReplyEntry,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite
);

/// The FUSE callbacks past `init` only hand their arguments (less those
/// tarn ignores) to the `on_*` method in this module's files that does the
/// work; this writes each forwarding `fn` from one signature line.
macro_rules! forward {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) => $on:ident($($pass:expr),* $(,)?);)*) => {
        $(fn $name(&mut self, $($arg: $ty),*) {
            self.$on($($pass),*)
        })*
    };
}

const OFFSET_MAX: u64 = i64::MAX as u64;

impl Filesystem for TarnFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        use fuser::consts::*;
        // AUTO_INVAL_DATA: the kernel drops a file's cached pages itself
        // when a GETATTR reply shows a new mtime (a new size always does).
        // FLOCK_LOCKS: flock(2) comes as a whole-file lock whose owner is
        // the open file description, so it holds across the network as on
        // a Linux NFS mount (released at that open's release).
        // READDIRPLUS(_AUTO): a listing hands the kernel each entry's
        // attributes (READDIR asks the server for them and the handles),
        // so `ls -l` needs no LOOKUP per name; the kernel uses it while
        // the names are being looked up.
        let _ = config.add_capabilities(
            FUSE_POSIX_LOCKS
                | FUSE_FLOCK_LOCKS
                | FUSE_PARALLEL_DIROPS
                | FUSE_AUTO_INVAL_DATA
                | FUSE_DO_READDIRPLUS
                | FUSE_READDIRPLUS_AUTO,
        );
        let _ = config.set_max_write(self.st.wsize.clamp(4096, 1 << 20));
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    forward! {
        fn lookup(req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry)
            => on_lookup(req, parent, name, reply);
        fn forget(_req: &Request<'_>, ino: u64, nlookup: u64) => on_forget(ino, nlookup);
        fn batch_forget(_req: &Request<'_>, nodes: &[fuser::fuse_forget_one])
            => on_batch_forget(nodes);
        fn getattr(req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr)
            => on_getattr(req, ino, reply);
        fn setattr(req: &Request<'_>, ino: u64, mode: Option<u32>, uid: Option<u32>,
            gid: Option<u32>, size: Option<u64>, atime: Option<TimeOrNow>,
            mtime: Option<TimeOrNow>, _ctime: Option<SystemTime>, _fh: Option<u64>,
            _crtime: Option<SystemTime>, _chgtime: Option<SystemTime>,
            _bkuptime: Option<SystemTime>, _flags: Option<u32>, reply: ReplyAttr)
            => on_setattr(req, ino, mode, uid, gid, size, atime, mtime, reply);
        fn readlink(req: &Request<'_>, ino: u64, reply: ReplyData) => on_readlink(req, ino, reply);
        fn mknod(req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32,
            reply: ReplyEntry) => on_mknod(req, parent, name, mode, umask, rdev, reply);
        fn mkdir(req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32,
            reply: ReplyEntry) => on_mkdir(req, parent, name, mode, umask, reply);
        fn unlink(req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty)
            => on_unlink(req, parent, name, reply);
        fn rmdir(req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty)
            => on_rmdir(req, parent, name, reply);
        fn symlink(req: &Request<'_>, parent: u64, link_name: &OsStr, target: &std::path::Path,
            reply: ReplyEntry) => on_symlink(req, parent, link_name, target, reply);
        fn rename(req: &Request<'_>, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr,
            flags: u32, reply: ReplyEmpty)
            => on_rename(req, parent, name, newparent, newname, flags, reply);
        fn link(req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry)
            => on_link(req, ino, newparent, newname, reply);
        fn open(req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen)
            => on_open(req, ino, flags, reply);
        fn create(req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, flags: i32,
            reply: ReplyCreate) => on_create(req, parent, name, mode, umask, flags, reply);
        fn read(req: &Request<'_>, ino: u64, fh: u64, offset: i64, size: u32, _flags: i32,
            _lock_owner: Option<u64>, reply: ReplyData)
            => on_read(req, ino, fh, offset, size, reply);
        fn write(req: &Request<'_>, ino: u64, fh: u64, offset: i64, data: &[u8],
            _write_flags: u32, _flags: i32, _lock_owner: Option<u64>, reply: ReplyWrite)
            => on_write(req, ino, fh, offset, data, reply);
        fn flush(req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty)
            => on_flush(req, ino, fh, lock_owner, reply);
        fn release(req: &Request<'_>, ino: u64, fh: u64, _flags: i32, lock_owner: Option<u64>,
            _flush: bool, reply: ReplyEmpty) => on_release(req, ino, fh, lock_owner, reply);
        fn fsync(req: &Request<'_>, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty)
            => on_fsync(req, fh, reply);
        fn opendir(req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen)
            => on_opendir(req, ino, reply);
        fn readdir(_req: &Request<'_>, _ino: u64, fh: u64, offset: i64, reply: ReplyDirectory)
            => on_readdir(fh, offset, reply);
        fn readdirplus(_req: &Request<'_>, ino: u64, fh: u64, offset: i64,
            reply: fuser::ReplyDirectoryPlus) => on_readdirplus(ino, fh, offset, reply);
        fn releasedir(_req: &Request<'_>, _ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty)
            => on_releasedir(fh, reply);
        fn statfs(req: &Request<'_>, _ino: u64, reply: ReplyStatfs) => on_statfs(req, reply);
        fn getlk(req: &Request<'_>, ino: u64, _fh: u64, lock_owner: u64, start: u64, end: u64,
            typ: i32, pid: u32, reply: ReplyLock)
            => on_getlk(req, PosixLock { ino, lock_owner, start, end, typ }, pid, reply);
        fn setlk(req: &Request<'_>, ino: u64, _fh: u64, lock_owner: u64, start: u64, end: u64,
            typ: i32, _pid: u32, sleep: bool, reply: ReplyEmpty)
            => on_setlk(req, PosixLock { ino, lock_owner, start, end, typ }, sleep, reply);
        fn fallocate(req: &Request<'_>, ino: u64, fh: u64, offset: i64, length: i64, mode: i32,
            reply: ReplyEmpty) => on_fallocate(req, ino, fh, offset, length, mode, reply);
        fn lseek(req: &Request<'_>, ino: u64, fh: u64, offset: i64, whence: i32,
            reply: ReplyLseek) => on_lseek(req, ino, fh, offset, whence, reply);
        fn copy_file_range(req: &Request<'_>, ino_in: u64, fh_in: u64, offset_in: i64,
            ino_out: u64, fh_out: u64, offset_out: i64, len: u64, flags: u32, reply: ReplyWrite)
            => on_copy_file_range(req, ino_in, fh_in, offset_in, ino_out, fh_out, offset_out,
                len, flags, reply);
    }
}
