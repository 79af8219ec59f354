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
//! wsize UNSTABLE WRITEs, then COMMIT on flush (close) and fsync.
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
    Attr, Error, Fh, FileType as FT, HeldLock, OpenFile, Range, Remote, SetAttr, SetTime, Stable,
    Time,
};
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, Notifier, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow,
};
use proto::rpc::OpaqueAuth;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// WRITEs of one open file in flight at once before a writer waits.
const WRITES_IN_FLIGHT: usize = 16;

/// A directory's entries as read at opendir: (d_ino, type, name).
type Listing = Vec<(u64, FileType, String)>;

pub struct State {
    pub remote: Arc<Remote>,
    pub opts: MountOptions,
    rsize: u32,
    wsize: u32,
    table: Mutex<InodeTable>,
    files: Mutex<HashMap<u64, Arc<Open>>>,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    locks: Mutex<HashMap<(u64, u64), Vec<HeldLock>>>,
    next_fh: AtomicU64,
    pub notifier: Mutex<Option<Notifier>>,
    /// Some(machine name): each request's calls go as its process's
    /// uid/gids (AUTH_SYS) instead of the mount's identity.
    per_caller: Option<String>,
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
    inflight: Vec<JoinHandle<Result<client::remote::Written, Error>>>,
    /// Some WRITE was UNSTABLE: a COMMIT is owed; the verifier it had.
    verf: Option<[u8; 8]>,
    /// A failure to report at the next flush/fsync.
    err: Option<i32>,
}

impl WriteBuf {
    fn dirty(&self) -> bool {
        !self.data.is_empty() || !self.inflight.is_empty()
    }
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
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
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
            dirs: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            notifier: Mutex::new(None),
            per_caller,
            opts,
        }
    }

    /// The AUTH_SYS credential of the process behind `req`, when this
    /// mount acts per caller.
    fn caller_cred(&self, req: &Request<'_>) -> Option<OpaqueAuth> {
        let machine = self.per_caller.as_ref()?;
        Some(rpc::client::auth_sys(
            req.uid(),
            req.gid(),
            &groups_of(req.pid()),
            machine,
        ))
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

    /// Attributes from the server for `ino`, put in the cache; a change
    /// drops the kernel's cached pages of a file.
    async fn fetch_attr(&self, ino: u64) -> Result<(FileAttr, Duration, Refresh), i32> {
        let fh = self.fh(ino)?;
        let a = self.remote.stat(&fh).await.map_err(errno)?;
        self.got_attr(ino, &fh, a)
    }

    /// Attributes just fetched for `ino` (a GETATTR, or one in an OPEN's
    /// COMPOUND) into the cache, held under the delegation if there is one.
    fn got_attr(&self, ino: u64, fh: &Fh, a: Attr) -> Result<(FileAttr, Duration, Refresh), i32> {
        let t = now();
        let (r, ttl, fa) = {
            let mut tab = self.table.lock().expect("table");
            let n = tab.get_mut(ino).ok_or(libc::ESTALE)?;
            let r = n.attr.refresh(a, t, &self.opts.ac);
            if let Some(k) = self.delegated(fh) {
                n.attr.held(k);
            }
            (r, n.attr.ttl(t), fattr(ino, &n.attr.attr))
        };
        if r == Refresh::Changed && fa.kind == FileType::RegularFile {
            self.inval_data(ino);
        }
        Ok((fa, ttl, r))
    }

    fn inval_data(&self, ino: u64) {
        if let Some(n) = self.notifier.lock().expect("notifier").as_ref() {
            // The kernel may not have the inode any more: nothing to drop.
            let _ = n.inval_inode(ino, 0, 0);
        }
    }

    /// The delegation the session holds on `fh`, as the attribute cache
    /// knows it; None with `noac` (every stat asks the server).
    fn delegated(&self, fh: &Fh) -> Option<Delegated> {
        if self.opts.ac.noac {
            return None;
        }
        self.remote.delegation(fh).map(|k| match k {
            DelegKind::Read => Delegated::Read,
            DelegKind::Write => Delegated::Write,
        })
    }

    /// Brings `ino`'s cache in line with the session's delegations: one
    /// that went back (recalled) ends the cache's hold. Returns the
    /// delegation held on it now.
    fn sync_deleg(&self, ino: u64) -> Result<Option<Delegated>, i32> {
        let fh = self.fh(ino)?;
        let held = self.delegated(&fh);
        if held.is_none() {
            if let Some(n) = self.table.lock().expect("table").get_mut(ino) {
                n.attr.released(now());
            }
        }
        Ok(held)
    }

    /// Attributes for the kernel: cached while fresh (or delegated), else
    /// from the server.
    async fn attr(&self, ino: u64) -> Result<(FileAttr, Duration), i32> {
        // Under a write delegation the cache has this mount's size and
        // mtime: buffered data need not go out first.
        if self.sync_deleg(ino)? != Some(Delegated::Write) {
            self.flush_writes_of(ino).await?;
        }
        let t = now();
        {
            let mut tab = self.table.lock().expect("table");
            tab.touch(ino);
            let n = tab.get(ino).ok_or(libc::ESTALE)?;
            if n.attr.fresh(t) {
                return Ok((fattr(ino, &n.attr.attr), n.attr.ttl(t)));
            }
        }
        let (fa, ttl, _) = self.fetch_attr(ino).await?;
        Ok((fa, ttl))
    }

    /// The cached attributes of `dir` (or of any inode) are stale after a
    /// change made through this mount.
    fn dir_changed(&self, dir: u64) {
        if let Some(n) = self.table.lock().expect("table").get_mut(dir) {
            n.attr.invalidate();
        }
    }

    /// A name found (or made) in `dir`: the inode (one more lookup held by
    /// the kernel) and the entry's TTL.
    async fn entry(
        &self,
        dir: u64,
        name: &str,
        fh: Fh,
        known: Option<Attr>,
    ) -> Result<(FileAttr, Duration, Duration), i32> {
        // A delegated file known here is not asked about (a lookup after
        // the entry's timeout is then one LOOKUP, no GETATTR); nor is one
        // whose attributes came with the call that made it (`known`).
        let held = self.delegated(&fh);
        let cached = known.or_else(|| {
            held.and_then(|_| {
                let tab = self.table.lock().expect("table");
                let n = tab.get(tab.ino_of(&fh)?)?;
                n.attr.deleg.is_some().then(|| n.attr.attr.clone())
            })
        });
        let a = match cached {
            Some(a) => a,
            None => self.remote.stat(&fh).await.map_err(errno)?,
        };
        let t = now();
        let mut tab = self.table.lock().expect("table");
        if held.is_none() {
            if let Some(n) = tab.ino_of(&fh).and_then(|i| tab.get_mut(i)) {
                n.attr.released(t);
            }
        }
        let ino = tab.found(fh, a, dir, name, t, self.ac());
        if let (Some(k), Some(n)) = (held, tab.get_mut(ino)) {
            n.attr.held(k);
        }
        let n = tab.get(ino).expect("just found");
        let attr_ttl = n.attr.ttl(t);
        let fa = with_nodeid(fattr(ino, &n.attr.attr), ino);
        let dir_ttl = tab.get(dir).map_or(Duration::ZERO, |d| d.attr.ttl(t));
        // An entry is trusted while its directory is (at least acdirmin
        // when that has just been checked).
        let entry_ttl = self
            .opts
            .lookupcache
            .positive(dir_ttl.max(if self.opts.ac.noac {
                Duration::ZERO
            } else {
                self.opts.ac.acdirmin
            }));
        Ok((FileAttr { ino, ..fa }, attr_ttl, entry_ttl))
    }

    async fn lookup(&self, dir: u64, name: &str) -> Result<(FileAttr, Duration, Duration), i32> {
        let dfh = self.fh(dir)?;
        let fh = self.remote.lookup(&dfh, name).await.map_err(errno)?;
        self.entry(dir, name, fh, None).await
    }

    /// Sends what `o` has buffered, waits for its WRITEs, and with
    /// `commit` makes them stable.
    async fn flush_open(&self, o: &Open, commit: bool) -> Result<(), i32> {
        let _one = o.flushing.lock().await;
        let (pending, verf) = {
            let mut w = o.w.lock().expect("wbuf");
            if commit
                && w.inflight.is_empty()
                && w.verf.is_none()
                && w.data.len() <= self.wsize as usize
                && !w.data.is_empty()
            {
                // Everything left fits one WRITE and nothing earlier awaits
                // a COMMIT: one FILE_SYNC WRITE instead of WRITE + COMMIT
                // (a small file's close costs one call, as with Linux).
                let data = std::mem::take(&mut w.data).freeze();
                let off = w.off;
                w.off += data.len() as u64;
                let h = self.spawn_write_how(o, off, data, Stable::FileSync);
                w.inflight.push(h);
            }
            self.send_buffer(o, &mut w);
            (std::mem::take(&mut w.inflight), w.verf)
        };
        let mut err = None;
        let mut verf = verf;
        for h in pending {
            match h.await {
                Ok(Ok(wr)) => {
                    if wr.unstable {
                        verf = Some(wr.verf);
                    }
                }
                Ok(Err(e)) => err = Some(errno(e)),
                Err(_) => err = Some(libc::EIO),
            }
        }
        {
            let mut w = o.w.lock().expect("wbuf");
            if let Some(e) = err {
                w.err.get_or_insert(e);
            }
            w.verf = verf;
            if let Some(e) = w.err.take() {
                return Err(e);
            }
        }
        if commit && verf.is_some() {
            // As the opener, like its WRITEs: a recall's flush runs on no
            // caller's behalf, and the mounter may not write the file.
            let v = maybe_as(o.cred.clone(), self.remote.commit(&o.file.fh))
                .await
                .map_err(errno)?;
            if Some(v) != verf {
                // The server restarted between WRITE and COMMIT: the data
                // may be lost, and is no longer held here to resend.
                return Err(libc::EIO);
            }
            o.w.lock().expect("wbuf").verf = None;
        }
        Ok(())
    }

    /// Starts WRITEs for the whole buffer (in wsize pieces).
    fn send_buffer(&self, o: &Open, w: &mut WriteBuf) {
        while !w.data.is_empty() {
            let n = w.data.len().min(self.wsize as usize);
            let chunk = w.data.split_to(n).freeze();
            let off = w.off;
            w.off += n as u64;
            w.inflight.push(self.spawn_write(o, off, chunk));
        }
    }

    fn spawn_write(
        &self,
        o: &Open,
        off: u64,
        data: Bytes,
    ) -> JoinHandle<Result<client::remote::Written, Error>> {
        self.spawn_write_how(o, off, data, Stable::Unstable)
    }

    fn spawn_write_how(
        &self,
        o: &Open,
        off: u64,
        data: Bytes,
        how: Stable,
    ) -> JoinHandle<Result<client::remote::Written, Error>> {
        let r = self.remote.clone();
        let f = o.file.clone();
        let cred = o.cred.clone();
        tokio::spawn(maybe_as(cred, async move {
            let mut off = off;
            let mut data = data;
            let mut last;
            loop {
                let w = r.write(&f, off, data.clone(), how).await?;
                last = w;
                let n = (w.count as usize).min(data.len());
                if n == data.len() || n == 0 {
                    break;
                }
                // A short write: the rest again.
                off += n as u64;
                data = data.slice(n..);
            }
            Ok(last)
        }))
    }

    /// Sends (without COMMIT) what any open of `ino` holds, so the server's
    /// size and data are current.
    async fn flush_writes_of(&self, ino: u64) -> Result<(), i32> {
        let opens: Vec<Arc<Open>> = self
            .files
            .lock()
            .expect("files")
            .values()
            .filter(|o| o.ino == ino && o.w.lock().expect("wbuf").dirty())
            .cloned()
            .collect();
        for o in opens {
            self.flush_open(&o, false).await?;
        }
        Ok(())
    }

    /// `size` bytes at `off`, with the open's stateid when there is one.
    async fn read(
        &self,
        ino: u64,
        open: Option<Arc<Open>>,
        off: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        self.flush_writes_of(ino).await?;
        let file = match open {
            Some(o) => o.file.clone(),
            None => OpenFile {
                fh: self.fh(ino)?,
                stateid: None,
            },
        };
        // Pieces of rsize read at once.
        let mut calls = vec![];
        let mut at = off;
        let end = off + size as u64;
        while at < end {
            let n = ((end - at) as u32).min(self.rsize);
            let r = self.remote.clone();
            let f = file.clone();
            let cred = rpc::client::current_caller();
            calls.push(tokio::spawn(maybe_as(cred, async move {
                r.read_open(&f, at, n).await
            })));
            at += n as u64;
        }
        let mut out = Vec::with_capacity(size as usize);
        let mut want = off;
        for c in calls {
            let (data, eof) = c.await.map_err(|_| libc::EIO)?.map_err(errno)?;
            if out.len() as u64 + off != want {
                break;
            }
            out.extend_from_slice(&data);
            want += data.len() as u64;
            if eof || data.is_empty() {
                break;
            }
            let _ = want;
        }
        Ok(out)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn add_open(&self, ino: u64, file: OpenFile, owns_state: bool, writable: bool) -> u64 {
        let fh = self.new_fh();
        self.table.lock().expect("table").opened(ino);
        self.files.lock().expect("files").insert(
            fh,
            Arc::new(Open {
                ino,
                file,
                owns_state,
                cred: rpc::client::current_caller(),
                writable,
                w: Mutex::new(WriteBuf::default()),
                flushing: tokio::sync::Mutex::new(()),
            }),
        );
        fh
    }

    /// Has the session call [`State::before_return`] before it gives a
    /// delegation back (NFSv4.1/4.2). The hook holds the state weakly: the
    /// state owns the session that owns the hook.
    pub fn install_recall_hook(self: &Arc<Self>) {
        let Some(s) = self.remote.v4() else {
            return;
        };
        let w = Arc::downgrade(self);
        s.delegations()
            .set_before_return(Some(Arc::new(move |fh: proto::nfs4::NfsFh4| {
                let w = w.clone();
                Box::pin(async move {
                    match w.upgrade() {
                        Some(st) => st.before_return(Fh(fh.0)).await,
                        None => false,
                    }
                })
            })));
    }

    /// The delegation on `fh` is about to go back (CB_RECALL, or the
    /// server asked for some back): what this mount buffered of the file
    /// is written and committed (the recall is already answered; this
    /// runs on a task of its own, so a FUSE request on the file never
    /// stands in its way), and the attribute cache stops leaning on the
    /// delegation. True when every open's data was made stable.
    async fn before_return(&self, fh: Fh) -> bool {
        let Some(ino) = self.table.lock().expect("table").ino_of(&fh) else {
            return false;
        };
        let opens: Vec<Arc<Open>> = self
            .files
            .lock()
            .expect("files")
            .values()
            .filter(|o| o.ino == ino)
            .cloned()
            .collect();
        let mut ok = !opens.is_empty();
        for o in opens {
            ok &= self.flush_open(&o, true).await.is_ok();
        }
        if let Some(n) = self.table.lock().expect("table").get_mut(ino) {
            n.attr.released(now());
        }
        ok
    }

    fn open_of(&self, fh: u64) -> Result<Arc<Open>, i32> {
        self.files
            .lock()
            .expect("files")
            .get(&fh)
            .cloned()
            .ok_or(libc::EBADF)
    }

    /// Releases the locks `owner` holds on `ino` that overlap `[start, end]`.
    async fn unlock(&self, ino: u64, owner: u64, start: u64, end: u64) -> Result<(), i32> {
        let held = {
            let mut locks = self.locks.lock().expect("locks");
            let Some(v) = locks.get_mut(&(ino, owner)) else {
                return Ok(());
            };
            let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(v).into_iter().partition(|l| {
                let r = l.range();
                let lend = if r.len == 0 {
                    u64::MAX
                } else {
                    r.offset + r.len - 1
                };
                r.offset <= end && lend >= start
            });
            *v = keep;
            out
        };
        let mut res = Ok(());
        for l in held {
            if let Err(e) = self.remote.unlock(l).await {
                res = Err(errno(e));
            }
        }
        res
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

    fn ro(&self) -> bool {
        self.st.opts.ro
    }
}

const OFFSET_MAX: u64 = i64::MAX as u64;

impl Filesystem for TarnFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        use fuser::consts::*;
        let _ = config.add_capabilities(FUSE_POSIX_LOCKS | FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_write(self.st.wsize.clamp(4096, 1 << 20));
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let st = self.st.clone();
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.spawn(req, async move {
            match st.lookup(parent, &name).await {
                Ok((fa, attr_ttl, entry_ttl)) => {
                    // fuser gives one TTL for both: the shorter.
                    reply.entry(&attr_ttl.min(entry_ttl), &fa, 0)
                }
                Err(libc::ENOENT) => {
                    let t = now();
                    let dir_ttl = st
                        .table
                        .lock()
                        .expect("table")
                        .get(parent)
                        .map_or(Duration::ZERO, |d| d.attr.ttl(t));
                    match st.opts.lookupcache.negative(dir_ttl) {
                        // A negative entry: node id 0 with a TTL.
                        Some(ttl) => reply.entry(
                            &ttl,
                            &FileAttr {
                                ino: 0,
                                ..fattr(0, &Attr::default())
                            },
                            0,
                        ),
                        None => reply.error(libc::ENOENT),
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn forget(&mut self, _req: &Request<'_>, ino: u64, nlookup: u64) {
        self.st.table.lock().expect("table").forget(ino, nlookup);
    }

    fn batch_forget(&mut self, _req: &Request<'_>, nodes: &[fuser::fuse_forget_one]) {
        let mut t = self.st.table.lock().expect("table");
        for n in nodes {
            t.forget(n.nodeid, n.nlookup);
        }
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let st = self.st.clone();
        self.spawn(req, async move {
            match st.attr(ino).await {
                Ok((fa, ttl)) => reply.attr(&ttl, &fa),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let t = |x: TimeOrNow| match x {
            TimeOrNow::Now => SetTime::Server,
            TimeOrNow::SpecificTime(s) => {
                let d = s.duration_since(UNIX_EPOCH).unwrap_or_default();
                SetTime::Client(Time {
                    seconds: d.as_secs() as i64,
                    nseconds: d.subsec_nanos(),
                })
            }
        };
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(t),
            mtime: mtime.map(t),
        };
        self.spawn(req, async move {
            let r = async {
                // Buffered data first: a truncate must not be undone by a
                // WRITE still in flight.
                st.flush_writes_of(ino).await?;
                let fh = st.fh(ino)?;
                st.remote.setattr(&fh, &set).await.map_err(errno)?;
                let (fa, ttl, _) = st.fetch_attr(ino).await?;
                if size.is_some() {
                    st.inval_data(ino);
                }
                Ok::<_, i32>((fa, ttl))
            }
            .await;
            match r {
                Ok((fa, ttl)) => reply.attr(&ttl, &fa),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readlink(&mut self, req: &Request<'_>, ino: u64, reply: ReplyData) {
        let st = self.st.clone();
        self.spawn(req, async move {
            let r = async {
                let fh = st.fh(ino)?;
                st.remote.readlink(&fh).await.map_err(errno)
            }
            .await;
            match r {
                Ok(s) => reply.data(s.as_bytes()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let Ok(name) = name_of(name) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let dfh = st.fh(parent)?;
                let fh = st
                    .remote
                    .mkdir(&dfh, &name, mode & !umask & 0o7777)
                    .await
                    .map_err(errno)?;
                st.dir_changed(parent);
                st.entry(parent, &name, fh, None).await
            }
            .await;
            match r {
                Ok((fa, a, e)) => reply.entry(&a.min(e), &fa, 0),
                Err(e) => reply.error(e),
            }
        });
    }

    fn unlink(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, false, reply)
    }

    fn rmdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, true, reply)
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let (Ok(name), Some(target)) = (name_of(link_name), target.to_str().map(str::to_string))
        else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let dfh = st.fh(parent)?;
                let fh = st
                    .remote
                    .symlink(&dfh, &name, &target)
                    .await
                    .map_err(errno)?;
                st.dir_changed(parent);
                st.entry(parent, &name, fh, None).await
            }
            .await;
            match r {
                Ok((fa, a, e)) => reply.entry(&a.min(e), &fa, 0),
                Err(e) => reply.error(e),
            }
        });
    }

    fn rename(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        if flags != 0 {
            // RENAME_NOREPLACE / EXCHANGE: NFS has no such rename.
            return reply.error(libc::EINVAL);
        }
        let st = self.st.clone();
        let (Ok(from), Ok(to)) = (name_of(name), name_of(newname)) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let (a, b) = (st.fh(parent)?, st.fh(newparent)?);
                st.remote.rename(&a, &from, &b, &to).await.map_err(errno)?;
                st.dir_changed(parent);
                st.dir_changed(newparent);
                let mut tab = st.table.lock().expect("table");
                if let Some(i) = tab.child(parent, &from) {
                    // Its ctime moved.
                    if let Some(n) = tab.get_mut(i) {
                        n.attr.invalidate();
                    }
                    tab.renamed(i, newparent, &to);
                }
                Ok::<_, i32>(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn link(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let Ok(name) = name_of(newname) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let (fh, dfh) = (st.fh(ino)?, st.fh(newparent)?);
                st.remote.link(&fh, &dfh, &name).await.map_err(errno)?;
                st.dir_changed(newparent);
                // Its nlink and ctime moved (a delegation does not vouch
                // for what this mount changed).
                st.dir_changed(ino);
                st.entry(newparent, &name, fh, None).await
            }
            .await;
            match r {
                Ok((fa, a, e)) => reply.entry(&a.min(e), &fa, 0),
                Err(e) => reply.error(e),
            }
        });
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let acc = flags & libc::O_ACCMODE;
        if self.ro() && acc != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        self.spawn(req, async move {
            let r = async {
                let t = now();
                let write = acc != libc::O_RDONLY;
                let read = acc != libc::O_WRONLY;
                // Close-to-open: the attributes are asked on every open
                // (nocto: only when the cache is stale), unless a
                // delegation vouches for them; cached pages are kept only
                // if the file did not change.
                let held = st.sync_deleg(ino)?;
                let fresh = st
                    .table
                    .lock()
                    .expect("table")
                    .get(ino)
                    .ok_or(libc::ESTALE)?
                    .attr
                    .fresh(t);
                let ask = (st.opts.cto && held.is_none()) || !fresh;
                let fh = st.fh(ino)?;
                // NFSv4.1/4.2: a real OPEN (the server may delegate the
                // file), its GETATTR in the same COMPOUND; elsewhere I/O
                // goes without open state.
                let opened = st
                    .remote
                    .open_fh(&fh, read, write, ask)
                    .await
                    .map_err(errno)?;
                let (file, owns, attr) = match opened {
                    Some((f, a)) => (f, true, a),
                    None => (OpenFile { fh, stateid: None }, false, None),
                };
                let keep = match attr {
                    Some(a) => {
                        let fh = file.fh.clone();
                        st.got_attr(ino, &fh, a)
                            .map(|(_, _, r)| r != Refresh::Changed)
                    }
                    None if ask => st
                        .fetch_attr(ino)
                        .await
                        .map(|(_, _, r)| r != Refresh::Changed),
                    None => Ok(true),
                };
                let keep = match keep {
                    Ok(k) => k,
                    Err(e) => {
                        // The open is not handed out: its state goes.
                        if owns {
                            let _ = st.remote.close(&file).await;
                        }
                        return Err(e);
                    }
                };
                let id = st.add_open(ino, file, owns, write);
                Ok::<_, i32>((id, keep))
            }
            .await;
            match r {
                Ok((id, keep)) => {
                    let f = if keep {
                        fuser::consts::FOPEN_KEEP_CACHE
                    } else {
                        0
                    };
                    reply.opened(id, f)
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let Ok(name) = name_of(name) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let dfh = st.fh(parent)?;
                // NFSv4.1/4.2: the attributes come with the OPEN.
                let (f, known) = st
                    .remote
                    .open_write_attr(
                        &dfh,
                        &name,
                        mode & !umask & 0o7777,
                        flags & libc::O_TRUNC != 0,
                    )
                    .await
                    .map_err(errno)?;
                st.dir_changed(parent);
                let (fa, a, e) = st.entry(parent, &name, f.fh.clone(), known).await?;
                let owns = f.stateid.is_some();
                let id = st.add_open(fa.ino, f, owns, true);
                Ok::<_, i32>((fa, a.min(e), id))
            }
            .await;
            match r {
                Ok((fa, ttl, id)) => reply.created(&ttl, &fa, 0, id, 0),
                Err(e) => reply.error(e),
            }
        });
    }

    fn read(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let st = self.st.clone();
        let open = st.open_of(fh).ok();
        self.spawn(req, async move {
            match st.read(ino, open, offset.max(0) as u64, size).await {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let o = match self.st.open_of(fh) {
            Ok(o) => o,
            Err(e) => return reply.error(e),
        };
        let off = offset.max(0) as u64;
        // Under a write delegation this mount has the file's size and
        // mtime (stat answers from them); a read delegation no longer
        // vouches for the cache; without one nothing changes here.
        {
            let mut tab = self.st.table.lock().expect("table");
            if let Some(n) = tab.get_mut(ino) {
                if n.attr.deleg.is_some() {
                    let d = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default();
                    let at = Time {
                        seconds: d.as_secs() as i64,
                        nseconds: d.subsec_nanos(),
                    };
                    n.attr.wrote(off + data.len() as u64, at);
                }
            }
        }
        // Buffered here, on fuser's thread, so writes keep their order; a
        // writer waits only when too many WRITEs are in flight.
        let wait = {
            let mut w = o.w.lock().expect("wbuf");
            // WRITEs are spawned on the runtime from this (fuser's) thread,
            // also when a write not contiguous with the buffer sends it.
            let _g = self.rt.enter();
            if w.data.is_empty() || w.off + w.data.len() as u64 != off {
                self.st.send_buffer(&o, &mut w);
                w.off = off;
            }
            w.data.extend_from_slice(data);
            while w.data.len() >= self.st.wsize as usize {
                let n = self.st.wsize as usize;
                let chunk = w.data.split_to(n).freeze();
                let at = w.off;
                w.off += n as u64;
                let h = self.st.spawn_write(&o, at, chunk);
                w.inflight.push(h);
            }
            w.inflight.len() >= WRITES_IN_FLIGHT
        };
        if wait {
            let st = self.st.clone();
            let n = data.len() as u32;
            // Waits on the runtime (not on fuser's thread, which must keep
            // reading requests) for the oldest WRITE.
            self.spawn(req, async move {
                let first = {
                    let mut w = o.w.lock().expect("wbuf");
                    if w.inflight.is_empty() {
                        None
                    } else {
                        Some(w.inflight.remove(0))
                    }
                };
                if let Some(h) = first {
                    match h.await {
                        Ok(Ok(wr)) if wr.unstable => {
                            o.w.lock().expect("wbuf").verf = Some(wr.verf);
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            o.w.lock().expect("wbuf").err.get_or_insert(errno(e));
                        }
                        Err(_) => {
                            o.w.lock().expect("wbuf").err.get_or_insert(libc::EIO);
                        }
                    }
                }
                let _ = st;
                reply.written(n)
            });
        } else {
            reply.written(data.len() as u32);
        }
    }

    fn flush(&mut self, req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        let st = self.st.clone();
        self.spawn(req, async move {
            // close(): POSIX drops the process's locks on the file.
            let _ = st.unlock(ino, lock_owner, 0, u64::MAX).await;
            let r = match st.open_of(fh) {
                Ok(o) => st.flush_open(&o, true).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn release(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let st = self.st.clone();
        self.spawn(req, async move {
            let o = st.files.lock().expect("files").remove(&fh);
            let mut r = Ok(());
            if let Some(o) = o {
                r = st.flush_open(&o, true).await;
                if o.owns_state {
                    let _ = st.remote.close(&o.file).await;
                }
                // What we wrote moved the change attribute: ask next time
                // (under a write delegation the cache already has it).
                if let Some(n) = st.table.lock().expect("table").get_mut(ino) {
                    if o.writable
                        && n.attr.deleg != Some(Delegated::Write)
                        && o.w.lock().expect("wbuf").verf.is_none()
                    {
                        n.attr.invalidate();
                    }
                }
                st.table.lock().expect("table").closed(ino);
            }
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn fsync(&mut self, req: &Request<'_>, _ino: u64, fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let st = self.st.clone();
        self.spawn(req, async move {
            let r = match st.open_of(fh) {
                Ok(o) => st.flush_open(&o, true).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn opendir(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let st = self.st.clone();
        self.spawn(req, async move {
            let r = async {
                let fh = st.fh(ino)?;
                let list = st.remote.readdir(&fh).await.map_err(errno)?;
                let parent = st
                    .table
                    .lock()
                    .expect("table")
                    .get(ino)
                    .map_or(ROOT, |n| n.parent);
                let mut v = vec![
                    (ino, FileType::Directory, ".".to_string()),
                    (parent, FileType::Directory, "..".to_string()),
                ];
                for e in list {
                    let id = e.attr.fileid.filter(|&f| f != 0).unwrap_or(u64::MAX);
                    v.push((id, kind(e.attr.ftype), e.name));
                }
                let id = st.new_fh();
                st.dirs.lock().expect("dirs").insert(id, Arc::new(v));
                Ok::<_, i32>(id)
            }
            .await;
            match r {
                Ok(id) => reply.opened(id, 0),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.st.dirs.lock().expect("dirs").get(&fh).cloned() else {
            return reply.error(libc::EBADF);
        };
        for (i, (ino, k, name)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *k, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.st.dirs.lock().expect("dirs").remove(&fh);
        reply.ok();
    }

    fn statfs(&mut self, req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let st = self.st.clone();
        self.spawn(req, async move {
            let r = async {
                let fh = st.fh(ROOT)?;
                st.remote.fsstat(&fh).await.map_err(errno)
            }
            .await;
            match r {
                Ok(s) => {
                    let b = 4096u64;
                    reply.statfs(
                        s.total / b,
                        s.free / b,
                        s.avail / b,
                        s.files_total,
                        s.files_free,
                        b as u32,
                        255,
                        b as u32,
                    )
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn getlk(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        // NFS has LOCKT but Remote does not: try the lock and let it go.
        let st = self.st.clone();
        self.spawn(req, async move {
            match st
                .try_lock(ino, lock_owner, start, end, typ == libc::F_WRLCK, false)
                .await
            {
                Ok(Some(l)) => {
                    let _ = st.remote.unlock(l).await;
                    reply.locked(0, 0, libc::F_UNLCK, 0)
                }
                Ok(None) => reply.locked(start, end, typ, pid),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setlk(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let st = self.st.clone();
        self.spawn(req, async move {
            if typ == libc::F_UNLCK {
                return match st.unlock(ino, lock_owner, start, end).await {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                };
            }
            // A new lock over a range replaces what the owner held there.
            let _ = st.unlock(ino, lock_owner, start, end).await;
            match st
                .try_lock(ino, lock_owner, start, end, typ == libc::F_WRLCK, sleep)
                .await
            {
                Ok(Some(l)) => {
                    st.locks
                        .lock()
                        .expect("locks")
                        .entry((ino, lock_owner))
                        .or_default()
                        .push(l);
                    reply.ok()
                }
                Ok(None) => reply.error(libc::EAGAIN),
                Err(e) => reply.error(e),
            }
        });
    }
}

impl State {
    async fn try_lock(
        &self,
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<HeldLock>, i32> {
        let (fh, parent, name) = {
            let t = self.table.lock().expect("table");
            let n = t.get(ino).ok_or(libc::ESTALE)?;
            (n.fh.clone(), n.parent, n.name.clone())
        };
        let dfh = self.fh(parent)?;
        let len = if end >= OFFSET_MAX {
            0
        } else {
            end - start + 1
        };
        self.remote
            .lock_for(
                &fh,
                (&dfh, &name),
                Range { offset: start, len },
                exclusive,
                wait,
                Some(owner),
            )
            .await
            .map_err(errno)
    }
}

impl TarnFs {
    fn remove(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        dir: bool,
        reply: ReplyEmpty,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let Ok(name) = name_of(name) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn(req, async move {
            let r = async {
                let dfh = st.fh(parent)?;
                if dir {
                    st.remote.rmdir(&dfh, &name).await.map_err(errno)?;
                } else {
                    st.remote.remove(&dfh, &name).await.map_err(errno)?;
                }
                st.dir_changed(parent);
                // A removed file's nlink and ctime moved.
                let mut tab = st.table.lock().expect("table");
                if let Some(i) = tab.child(parent, &name) {
                    if let Some(n) = tab.get_mut(i) {
                        n.attr.invalidate();
                    }
                    tab.renamed(i, 0, "");
                }
                Ok::<_, i32>(())
            }
            .await;
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }
}
