//! Where recovery records live. One trait, two implementations: the
//! local state directory (one head; the file format of before, node names
//! ignored) and etcd (crates/tarn/src/etcd.rs; per-head keys, shared by
//! every head). Blocking calls: the NFSv4 driver runs them on its pool.

use super::grace::ClusterGrace;
use bytes::Bytes;
use std::collections::HashSet;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The records a head needs to let clients reclaim after a restart or a
/// failover: NFSv4 client records, NSM monitored hosts, the grace record. `node` names a head; `epoch` is the cluster epoch a record
/// was written in (see [`ClusterGrace`]; 0 for a single head).
pub trait RecoveryStore: Send + Sync {
    /// The NFSv4 client owners recorded for `node`, each with its epoch.
    fn clients(&self, node: &str) -> io::Result<Vec<(Bytes, u64)>>;
    /// Records `owner` for `node` (durable on Ok); an existing record
    /// keeps its epoch, so a client that came back but has not reclaimed
    /// yet still counts as one to wait for.
    fn add_client(&self, node: &str, owner: &Bytes, epoch: u64) -> io::Result<()>;
    fn remove_client(&self, node: &str, owner: &Bytes) -> io::Result<()>;
    /// `owner` finished reclaiming on `node`: its record there is of
    /// `epoch` now, and the records other (failed) heads kept for it go.
    fn reclaimed(&self, node: &str, owner: &Bytes, epoch: u64, from: &[String]) -> io::Result<()>;
    /// The NLM hosts `node` granted monitored locks to (caller name,
    /// address), so the head that takes over a failed one can send them
    /// SM_NOTIFY.
    fn monitored(&self, node: &str) -> io::Result<Vec<(Bytes, IpAddr)>>;
    fn monitor(&self, node: &str, name: &[u8], addr: IpAddr) -> io::Result<()>;
    fn unmonitor(&self, node: &str, name: &[u8]) -> io::Result<()>;
    /// The shared grace record and a version for [`RecoveryStore::swap_grace`]
    /// (None: no record yet).
    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)>;
    /// Replaces the grace record if it is still at `version`; false: someone
    /// changed it first (read it again and retry).
    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool>;
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Option<Bytes> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

/// The state directory's record: one hex-encoded client owner per line
/// in one file, rewritten atomically (temporary file, fsync, rename) on
/// every change, which is rare next to the I/O it enables. One head: the
/// node names and epochs are not stored, and the grace record stays in
/// memory (nobody else reads it).
pub struct LocalStore {
    path: PathBuf,
    current: Mutex<HashSet<Bytes>>,
    grace: Mutex<(Option<ClusterGrace>, u64)>,
}

impl LocalStore {
    pub fn open(path: &Path) -> io::Result<LocalStore> {
        let current: HashSet<Bytes> = match std::fs::read_to_string(path) {
            Ok(s) => s.lines().filter_map(|l| unhex(l.trim())).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => HashSet::new(),
            Err(e) => return Err(e),
        };
        Ok(LocalStore {
            path: path.to_path_buf(),
            current: Mutex::new(current),
            grace: Mutex::new((None, 0)),
        })
    }

    fn write(&self, set: &HashSet<Bytes>) -> io::Result<()> {
        let mut text = String::with_capacity(set.len() * 33);
        for o in set {
            text.push_str(&hex(o));
            text.push('\n');
        }
        vfs::durable::replace(&self.path, text.as_bytes())
    }
}

impl RecoveryStore for LocalStore {
    fn clients(&self, _node: &str) -> io::Result<Vec<(Bytes, u64)>> {
        Ok(self
            .current
            .lock()
            .unwrap()
            .iter()
            .map(|o| (o.clone(), 0))
            .collect())
    }

    /// On failure the owner is not in the record (so a caller that
    /// refuses the client because of it leaves nothing behind).
    fn add_client(&self, _node: &str, owner: &Bytes, _epoch: u64) -> io::Result<()> {
        let mut cur = self.current.lock().unwrap();
        if cur.insert(owner.clone()) {
            if let Err(e) = self.write(&cur) {
                cur.remove(owner);
                return Err(e);
            }
        }
        Ok(())
    }

    fn remove_client(&self, _node: &str, owner: &Bytes) -> io::Result<()> {
        let mut cur = self.current.lock().unwrap();
        if cur.remove(owner) {
            self.write(&cur)?;
        }
        Ok(())
    }

    fn reclaimed(&self, _: &str, _: &Bytes, _: u64, _: &[String]) -> io::Result<()> {
        Ok(())
    }

    /// One head: the NSM host records stay where `nlm::nsm::Nsm` keeps
    /// them (`<state-dir>/nsm/hosts`), read back at start; nobody else
    /// needs them.
    fn monitored(&self, _node: &str) -> io::Result<Vec<(Bytes, IpAddr)>> {
        Ok(Vec::new())
    }

    fn monitor(&self, _: &str, _: &[u8], _: IpAddr) -> io::Result<()> {
        Ok(())
    }

    fn unmonitor(&self, _: &str, _: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)> {
        Ok(self.grace.lock().unwrap().clone())
    }

    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool> {
        let mut cur = self.grace.lock().unwrap();
        if cur.1 != version {
            return Ok(false);
        }
        *cur = (Some(g.clone()), version + 1);
        Ok(true)
    }
}
