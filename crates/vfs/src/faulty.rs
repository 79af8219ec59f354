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
//! Everything else passes straight through, except what the impls below
//! leave to the traits' defaults (the backend's own locks, COPY, CLONE,
//! IO_ADVISE, xattr values, the combined and zero-copy forms of `Core`).
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

/// Methods that pass the call straight on to the inner backend, each
/// written `name(arg: Type, ...) -> Return;`.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        $(
            fn $name(&self, $($arg: $ty),*) -> $ret {
                self.inner.$name($($arg),*)
            }
        )*
    };
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
    // Passed straight on.
    forward! {
        root() -> Fid;
        getattr(fid: &Fid) -> Result<Attr, FsError>;
        setattr(cred: &Cred, fid: &Fid, set: &SetAttr) -> Result<Attr, FsError>;
        access(cred: &Cred, fid: &Fid, want: Access) -> Result<Access, FsError>;
        readlink(cred: &Cred, fid: &Fid) -> Result<Vec<u8>, FsError>;
        mkdir(cred: &Cred, dir: &Fid, name: &[u8], set: &SetAttr) -> Result<(Fid, Attr), FsError>;
        symlink(
            cred: &Cred, dir: &Fid, name: &[u8], target: &[u8], set: &SetAttr,
        ) -> Result<(Fid, Attr), FsError>;
        mknod(
            cred: &Cred, dir: &Fid, name: &[u8], ftype: FileType, rdev: (u32, u32), set: &SetAttr,
        ) -> Result<(Fid, Attr), FsError>;
        remove(cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
        rmdir(cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
        rename(
            cred: &Cred, from_dir: &Fid, from_name: &[u8], to_dir: &Fid, to_name: &[u8],
        ) -> Result<(), FsError>;
        link(cred: &Cred, fid: &Fid, dir: &Fid, name: &[u8]) -> Result<(), FsError>;
        readdir_into(
            cred: &Cred, dir: &Fid, cookie: u64, verifier: [u8; 8], plus: bool,
            sink: &mut dyn DirSink,
        ) -> Result<DirEnd, FsError>;
        fsstat(fid: &Fid) -> Result<FsStat, FsError>;
        sync_all() -> Result<(), FsError>;
        kept_open() -> Option<u64>;
        closed(fid: &Fid) -> ();
    }

    fn lookup(&self, cred: &Cred, dir: &Fid, name: &[u8]) -> Result<(Fid, Attr), FsError> {
        self.noted(name, self.inner.lookup(cred, dir, name))
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
    forward! {
        seek(cred: &Cred, fid: &Fid, offset: u64, what: SeekWhat) -> Result<u64, FsError>;
        allocate(cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError>;
        deallocate(cred: &Cred, fid: &Fid, offset: u64, len: u64) -> Result<(), FsError>;
    }
}

impl Xattrs for Faulty {
    forward! {
        xattr_support() -> bool;
    }
}

impl ChangeNotify for Faulty {
    forward! {
        on_local_change(hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool;
    }
}
