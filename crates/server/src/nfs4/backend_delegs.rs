//! NFSv4 delegations backed by one of the file system's own, for backends
//! other servers also change ([`vfs::SharedDelegations::shares_delegations`]:
//! CephFS, where every head and every other CephFS client can open a file
//! behind this server's back).
//!
//! Before a read delegation is granted on such a file, the head takes a
//! read delegation of the file system on it (one per file, whatever the
//! number of NFS holders). A conflicting open elsewhere then waits in the
//! file system, which calls this head back; the NFS delegations on the
//! file are recalled as for any conflict here, and once none is left the
//! head gives its own back and the other open goes on. Write delegations
//! are not granted on such backends.
//!
//! Giving back is a sweep: a file is checked when one of its delegations
//! is returned, when the file system recalls it, and every second. A
//! per-file async lock orders a grant (take in the backend, then in the
//! state core) against a sweep (look in the state core, then give back)
//! and against a recall heard (look in the state core, then recall), so
//! a file is never left delegated to a client without the file system's
//! delegation behind it, nor with one the file system wants back and
//! nobody asked the client for. A recalled file gets no new delegation
//! until the file system's is given back.
//!
//! The file system may punish a holder that is late (libcephfs unmounts
//! the whole mount). The state core revokes a recalled delegation not
//! returned within a lease; the backend is told recalls must come back
//! within two leases; and a sweep gives back, with an error logged, any
//! backend delegation recalled for longer than that less a margin.

use super::backend_held::{BackendDelegs, MARGIN};
use super::compound::file_key;
use super::server::Nfs4;
use super::state::deleg::DelegType;
use crate::export::Export;
use crate::locks::FileKey;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vfs::Fid;

/// How often every backed file is checked.
const SWEEP: Duration = Duration::from_secs(1);

/// Held from taking the backend's delegation until the state core has
/// granted (or not) the NFS one.
pub struct Backed<'a> {
    _file: tokio::sync::MutexGuard<'a, ()>,
}

impl Nfs4 {
    /// Runs `grant` (the state core granting or reclaiming an NFS
    /// delegation of `kind` on `fid`), backed by the backend's delegation
    /// where the backend shares them. None: not granted, the backend has
    /// none to give (a conflicting open elsewhere, or a write delegation,
    /// which such backends do not back).
    pub(super) async fn backed_grant<T, E>(
        &self,
        export: &Arc<Export>,
        fid: &Fid,
        kind: DelegType,
        grant: impl FnOnce() -> Result<T, E>,
    ) -> Option<Result<T, E>> {
        if !export.backend.shares_delegations() {
            return Some(grant());
        }
        if kind == DelegType::Write {
            return None;
        }
        let backed = self.back_delegation(export, fid).await?;
        let r = grant();
        drop(backed);
        if r.is_err() {
            // Given back by the sweeper if no NFS delegation stands on it.
            self.bdelegs.check(file_key(export, fid));
        }
        Some(r)
    }

    /// Takes the backend's read delegation on `fid` for a grant about to
    /// be made; None when the backend refuses (a conflicting open through
    /// another server: no delegation then). The guard is kept until the
    /// state core has decided.
    async fn back_delegation(&self, export: &Arc<Export>, fid: &Fid) -> Option<Backed<'_>> {
        let file = file_key(export, fid);
        let guard = self.bdelegs.shard(&file).lock().await;
        match self.bdelegs.held.lock().unwrap().entry(file) {
            // Recalled: someone elsewhere is waiting for the file (the
            // file system would refuse a new one too).
            Entry::Occupied(e) if e.get().is_some() => return None,
            Entry::Occupied(_) => return Some(Backed { _file: guard }),
            // Listed before it is asked for: a recall the backend sends
            // while granting it finds the entry to mark (the recall hook
            // marks only listed files).
            Entry::Vacant(v) => {
                v.insert(None);
            }
        }
        let (b, f, within) = (export.backend.clone(), *fid, self.bdelegs.within);
        match self.pool.run(move || b.delegate(&f, within)).await {
            // Recalled already: no NFS delegation on it; the sweeper,
            // woken by the recall, gives it back.
            Ok(true) if self.bdelegs.recalled(&file) => None,
            Ok(true) => Some(Backed { _file: guard }),
            Ok(false) => {
                self.bdelegs.held.lock().unwrap().remove(&file);
                None
            }
            Err(e) => {
                self.bdelegs.held.lock().unwrap().remove(&file);
                tracing::debug!(export = export.id, error = ?e, "no delegation from the backend");
                None
            }
        }
    }

    /// Runs the sweeper: hooks every export whose backend shares
    /// delegations (exports added by a reload at the next tick), recalls
    /// the NFS delegations of files the backend recalls, and gives back
    /// what is no longer needed. Runs until the runtime stops.
    pub fn spawn_backend_delegations(&self) {
        let Some(mut rx) = self.bdelegs.rx.lock().unwrap().take() else {
            return;
        };
        let s = Sweeper {
            live: self.live.clone(),
            state: self.state.clone(),
            records: self.records.clone(),
            pool: self.pool.clone(),
            clock: self.clock.clone(),
            bd: self.bdelegs.clone(),
        };
        tokio::spawn(async move {
            let mut hooked = std::collections::HashSet::new();
            let mut t = tokio::time::interval(SWEEP);
            loop {
                tokio::select! {
                    _ = t.tick() => {
                        for e in s.live.load().exports.iter() {
                            let key = Arc::as_ptr(&e.backend) as *const () as usize;
                            if e.backend.shares_delegations() && hooked.insert(key) {
                                e.backend.on_delegation_recall(s.recall_hook(e.id));
                            }
                        }
                        s.sweep().await;
                    }
                    Some(file) = rx.recv() => s.heard(file).await,
                }
            }
        });
    }
}

/// What the sweeper task needs of the server.
struct Sweeper {
    live: Arc<crate::live::Live>,
    state: Arc<super::state::State>,
    records: Arc<super::effects::Records>,
    pool: crate::pool::Pool,
    clock: Arc<dyn super::clock::Clock>,
    bd: Arc<BackendDelegs>,
}

impl Sweeper {
    /// The backend's recall hook for an export: marks the file recalled
    /// and hands it to the sweeper (runs on the backend's thread: no
    /// waiting here).
    fn recall_hook(&self, export: u32) -> Box<dyn Fn(&Fid) + Send + Sync> {
        let bd = self.bd.clone();
        Box::new(move |fid| {
            let file = FileKey { export, fid: *fid };
            if let Some(at) = bd.held.lock().unwrap().get_mut(&file) {
                at.get_or_insert_with(Instant::now);
            }
            let _ = bd.tx.send(file);
        })
    }

    /// A file to look at now: recalled by the backend (its NFS delegations
    /// are recalled as for a conflicting open here), or one of its
    /// delegations returned.
    ///
    /// Looked at under the file's lock, so after a grant under way: a
    /// recall can come while a grant waits between the backend's
    /// delegation and the state core's, and the NFS delegation it grants
    /// must be recalled too (else it stands, unrecalled, while the file
    /// system's is held for the waiter until the deadline's forced
    /// return).
    async fn heard(&self, file: FileKey) {
        let broke = {
            let _g = self.bd.shard(&file).lock().await;
            let recall = self.bd.recalled(&file) && self.state.delegated(&file);
            if recall {
                self.state
                    .break_delegations(&file, None, false, self.clock.now());
            }
            recall
        };
        if broke {
            self.records.apply().await;
        }
        self.settle(file, false).await;
    }

    /// Gives back the backend delegation of `file` if no NFS delegation
    /// is left on it (or, `force`, regardless).
    async fn settle(&self, file: FileKey, force: bool) {
        let _g = self.bd.shard(&file).lock().await;
        if !self.bd.held.lock().unwrap().contains_key(&file) {
            return;
        }
        if !force && self.state.delegated(&file) {
            return;
        }
        let export = self
            .live
            .load()
            .exports
            .iter()
            .find(|e| e.id == file.export)
            .cloned();
        if let Some(e) = export {
            let (b, f) = (e.backend.clone(), file.fid);
            self.pool.run(move || b.undelegate(&f)).await;
        }
        self.bd.held.lock().unwrap().remove(&file);
    }

    async fn sweep(&self) {
        let now = Instant::now();
        let files: Vec<(FileKey, Option<Instant>)> = self
            .bd
            .held
            .lock()
            .unwrap()
            .iter()
            .map(|(f, r)| (*f, *r))
            .collect();
        for (file, recalled) in files {
            let late = recalled.is_some_and(|at| now.duration_since(at) + MARGIN >= self.bd.within);
            if late && self.state.delegated(&file) {
                tracing::error!(
                    export = file.export,
                    "a recalled delegation was neither returned nor revoked in time: giving the backend's back so the file system does not drop this server"
                );
            }
            self.settle(file, late).await;
        }
    }
}
