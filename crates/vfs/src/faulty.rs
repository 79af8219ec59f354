//! A backend that injects storage errors, for tests of the error paths
//! (selected only by `tarn serve --debug-inject-faults`, never by default).
//!
//! Files are chosen by the name they were created or looked up under:
//! - `eio-*`: the disk fails. Reads fail with `Io`; writes reach the page
//!   cache but a stable write's flush, and any COMMIT, fail with `Io` (as a
//!   real disk error surfaces at fsync).
//! - `lostwrite-*`: writeback fails once, as the kernel reports it: the
//!   next COMMIT fails with `Io`, the ones after it succeed (the error is
//!   reported to one fsync only), though the data is gone.
//! - `edquot-*`: the owner's quota ends at [`QUOTA`] bytes of the file: a
//!   write reaching past it writes what fits and reports that count, one
//!   starting at or past it fails with `DQuot`, as write(2) does.
//!
//! Everything else passes straight through.
//!
//! [`Faulty::sharing_delegations`] also plays a file system other servers
//! change (as CephFS is), for tests of the server's backed delegations:
//! every file can be delegated; one named `contested-*` is wanted
//! elsewhere the moment it is, so its recall comes while the server is
//! still granting; [`Faulty::want_elsewhere`] recalls one later.

use crate::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where an `edquot-*` file's quota ends.
pub const QUOTA: u64 = 64 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Eio,
    LostOnce,
    Quota,
    Contested,
}

type RecallHook = Box<dyn Fn(&Fid) + Send + Sync>;

/// The file system's delegations, when it plays a shared one.
#[derive(Default)]
struct Shared {
    delegated: Mutex<std::collections::HashSet<Fid>>,
    recall: std::sync::OnceLock<RecallHook>,
}

pub struct Faulty {
    inner: Arc<dyn Backend>,
    marked: Mutex<HashMap<Fid, Fault>>,
    shared: Option<Shared>,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Faulty {
            inner,
            marked: Mutex::new(HashMap::new()),
            shared: None,
        }
    }

    /// [`Faulty::new`] over a file system that shares delegations (see
    /// the module's text).
    pub fn sharing_delegations(inner: Arc<dyn Backend>) -> Self {
        Faulty {
            shared: Some(Shared::default()),
            ..Faulty::new(inner)
        }
    }

    /// Another client of the file system opens `fid` in a way that
    /// conflicts: its delegation, if given, is recalled. True if one was.
    pub fn want_elsewhere(&self, fid: &Fid) -> bool {
        let Some(sh) = &self.shared else {
            return false;
        };
        if !sh.delegated.lock().unwrap().contains(fid) {
            return false;
        }
        if let Some(h) = sh.recall.get() {
            h(fid);
        }
        true
    }

    /// Whether the file system's delegation on `fid` is held.
    pub fn delegated(&self, fid: &Fid) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|sh| sh.delegated.lock().unwrap().contains(fid))
    }

    fn note(&self, name: &[u8], fid: &Fid) {
        let f = if name.starts_with(b"eio-") {
            Fault::Eio
        } else if name.starts_with(b"lostwrite-") {
            Fault::LostOnce
        } else if name.starts_with(b"edquot-") {
            Fault::Quota
        } else if name.starts_with(b"contested-") {
            Fault::Contested
        } else {
            return;
        };
        self.marked.lock().unwrap().insert(*fid, f);
    }

    fn fault(&self, fid: &Fid) -> Option<Fault> {
        self.marked.lock().unwrap().get(fid).copied()
    }

    fn noted(&self, name: &[u8], r: Result<(Fid, Attr), FsError>) -> Result<(Fid, Attr), FsError> {
        if let Ok((f, _)) = &r {
            self.note(name, f);
        }
        r
    }
}

impl Core for Faulty {
    fn root(&self) -> Fid {
        self.inner.root()
    }

    fn getattr(&self, fid: &Fid) -> Result<Attr, FsError> {
        self.inner.getattr(fid)
    }

    fn setattr(&self, cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError> {
        self.inner.setattr(cred, fid, set)
    }

    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError> {
        self.noted(name, self.inner.lookup(cred, dir, name))
    }

    fn access(&self, cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError> {
        self.inner.access(cred, fid, want)
    }

    fn readlink(&self, cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError> {
        self.inner.readlink(cred, fid)
    }

    fn read(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(usize, bool), FsError> {
        if self.fault(fid) == Some(Fault::Eio) {
            return Err(FsError::Io);
        }
        self.inner.read(cred, fid, offset, buf)
    }

    fn write(
        &self,
        cred: &Cred,
        fid: &Fid,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<(usize, Stable), FsError> {
        match self.fault(fid) {
            None | Some(Fault::LostOnce | Fault::Contested) => {
                self.inner.write(cred, fid, offset, data, stable)
            }
            Some(Fault::Eio) => {
                self.inner
                    .write(cred, fid, offset, data, Stable::Unstable)?;
                match stable {
                    Stable::Unstable => Ok((data.len(), Stable::Unstable)),
                    _ => Err(FsError::Io),
                }
            }
            Some(Fault::Quota) => {
                let room = QUOTA.saturating_sub(offset) as usize;
                if room == 0 {
                    return Err(FsError::DQuot);
                }
                let n = room.min(data.len());
                self.inner.write(cred, fid, offset, &data[..n], stable)
            }
        }
    }

    fn commit(&self, fid: &Fid) -> Result<(), FsError> {
        match self.fault(fid) {
            Some(Fault::Eio) => return Err(FsError::Io),
            Some(Fault::LostOnce) => {
                self.marked.lock().unwrap().remove(fid);
                return Err(FsError::Io);
            }
            _ => {}
        }
        self.inner.commit(fid)
    }

    fn create(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        how: &CreateHow,
    ) -> Result<(Fid, Attr), FsError> {
        self.noted(name, self.inner.create(cred, dir, name, how))
    }

    fn mkdir(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        self.inner.mkdir(cred, dir, name, set)
    }

    fn symlink(
        &self,
        cred: &Cred,
        dir: &Fid,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
    ) -> Result<(Fid, Attr), FsError> {
        self.inner.symlink(cred, dir, name, target, set)
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
        self.inner.mknod(cred, dir, name, ftype, rdev, set)
    }

    fn remove(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        self.inner.remove(cred, dir, name)
    }

    fn rmdir(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        self.inner.rmdir(cred, dir, name)
    }

    fn rename(
        &self,
        cred: &Cred,
        from_dir: &Fid,
        from_name: &[u8],
        to_dir: &Fid,
        to_name: &[u8],
    ) -> Result<(), FsError> {
        self.inner
            .rename(cred, from_dir, from_name, to_dir, to_name)
    }

    fn link(&self, cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError> {
        self.inner.link(cred, fid, dir, name)
    }

    fn readdir_into(
        &self,
        cred: &Cred,
        dir: &Fid,
        cookie: u64,
        verifier: [u8; 8],
        plus: bool,
        sink: &mut dyn DirSink,
    ) -> Result<DirEnd, FsError> {
        self.inner
            .readdir_into(cred, dir, cookie, verifier, plus, sink)
    }

    fn fsstat(&self, fid: &Fid) -> Result<FsStat, FsError> {
        self.inner.fsstat(fid)
    }

    fn sync_all(&self) -> Result<(), FsError> {
        self.inner.sync_all()
    }
}

impl SharedLocks for Faulty {}

impl SharedDelegations for Faulty {
    fn shares_delegations(&self) -> bool {
        self.shared.is_some() || self.inner.shares_delegations()
    }

    fn delegate(&self, fid: &Fid, within: std::time::Duration) -> Result<bool, FsError> {
        let Some(sh) = &self.shared else {
            return self.inner.delegate(fid, within);
        };
        sh.delegated.lock().unwrap().insert(*fid);
        if self.fault(fid) == Some(Fault::Contested) {
            self.want_elsewhere(fid);
        }
        Ok(true)
    }

    fn undelegate(&self, fid: &Fid) {
        match &self.shared {
            Some(sh) => {
                sh.delegated.lock().unwrap().remove(fid);
            }
            None => self.inner.undelegate(fid),
        }
    }

    fn on_delegation_recall(&self, hook: RecallHook) -> bool {
        match &self.shared {
            Some(sh) => sh.recall.set(hook).is_ok(),
            None => self.inner.on_delegation_recall(hook),
        }
    }
}

impl Space for Faulty {
    fn seek(&self, cred: &Cred, fid: &Fid, offset: u64, what: SeekWhat) -> Result<u64, FsError> {
        self.inner.seek(cred, fid, offset, what)
    }

    fn allocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        self.inner.allocate(cred, fid, offset, len)
    }

    fn deallocate(&self, cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError> {
        self.inner.deallocate(cred, fid, offset, len)
    }
}

impl Xattrs for Faulty {
    fn xattr_support(&self) -> bool {
        self.inner.xattr_support()
    }
}

impl ChangeNotify for Faulty {
    fn on_local_change(&self, hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        self.inner.on_local_change(hook)
    }
}
