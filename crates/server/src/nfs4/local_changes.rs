//! Delegations recalled when a process on the server changes a file
//! directly (not through NFS): a client holding a delegation trusts its
//! cache and would otherwise never see the change.
//!
//! The local backend tells us through its fanotify group
//! (`vfs::ChangeNotify::on_local_change`, events of other processes only), just
//! after the change; each file with delegations is then recalled as if a
//! client without a delegation had changed it, and its ctime moved once
//! the delegations are gone (see [`touch`]). The holder may read its cached
//! copy from the change until then (milliseconds on a LAN); a kernel lease
//! would hold the local writer instead, at the price of a descriptor per
//! delegated file and a signal per break (see docs/architecture.md).

use super::server::Nfs4;
use super::state::deleg::Break;
use super::state::State;
use crate::locks::FileKey;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use vfs::{Cred, SetAttr};

impl Nfs4 {
    /// Listens for local changes on every export's backend (exports added
    /// by a reload are picked up at the next tick) and recalls the
    /// delegations of the files changed. Runs until the runtime stops.
    pub fn spawn_local_recalls(&self) {
        let (tx, mut rx) = mpsc::unbounded_channel::<FileKey>();
        let live = self.live.clone();
        let state = self.state.clone();
        let records = self.records.clone();
        let clock = self.clock.clone();
        let lease = self.cfg.lease;
        let every = (lease / 4).max(Duration::from_millis(100));
        tokio::spawn(async move {
            // Backends already listened to, by address (a backend outlives
            // the reloads that keep its export).
            let mut watched: HashSet<usize> = HashSet::new();
            // Files recalled for a local change, until their delegations
            // are gone: then their ctime is moved (see `touch`).
            let mut pending: HashMap<FileKey, Instant> = HashMap::new();
            let mut t = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = t.tick() => {
                        for e in live.load().exports.iter() {
                            let key = Arc::as_ptr(&e.backend) as *const () as usize;
                            if watched.insert(key) {
                                e.backend.on_local_change(hook(e.id, state.clone(), tx.clone()));
                            }
                        }
                    }
                    Some(file) = rx.recv() => {
                        state.break_delegations(&file, None, false, clock.now());
                        records.apply().await;
                        // One line per recall, not per write of a local
                        // process while it is out.
                        if let std::collections::hash_map::Entry::Vacant(v) = pending.entry(file) {
                            tracing::info!(
                                export = file.export,
                                "a local process changed a delegated file: recalling its delegations"
                            );
                            v.insert(Instant::now());
                        }
                    }
                    _ = tokio::time::sleep(POLL_RETURNED), if !pending.is_empty() => {
                        let mut done = Vec::new();
                        pending.retain(|file, since| {
                            if !state.delegated(file) {
                                done.push(*file);
                                false
                            } else {
                                // Revoked by then at the latest.
                                since.elapsed() < 3 * lease
                            }
                        });
                        for file in done {
                            touch(&live, file).await;
                        }
                    }
                }
            }
        });
    }
}

/// How often files recalled for a local change are checked for their
/// delegations being gone.
const POLL_RETURNED: Duration = Duration::from_millis(20);

/// Moves the file's ctime (a chmod to its own mode), and so its change
/// attribute, once its delegations are gone. The holder learned the new
/// change attribute while it still held the delegation (the GETATTR in
/// its DELEGRETURN COMPOUND, or an OPEN), and the Linux client keeps its
/// cached data when the change attribute moves under a delegation (it
/// takes it for its own writes): without a second move it would never
/// see the local change. A server that holds local writers behind a lease
/// (knfsd) has the change happen after the return instead.
async fn touch(live: &Arc<crate::live::Live>, file: FileKey) {
    let Some(export) = live
        .load()
        .exports
        .iter()
        .find(|e| e.id == file.export)
        .cloned()
    else {
        return;
    };
    let r = tokio::task::spawn_blocking(move || {
        let b = &export.backend;
        let a = b.getattr(&file.fid)?;
        b.setattr(&Cred::root(), &file.fid, &SetAttr::mode(a.mode & 0o7777))
    })
    .await;
    if let Ok(Err(e)) = r {
        tracing::debug!(
            export = file.export,
            "moving the ctime of a recalled file: {e:?}"
        );
    }
}

/// The backend's hook: cheap for files nobody holds a delegation on (one
/// lookup), a message to the recalling task otherwise.
fn hook(
    export: u32,
    state: Arc<State>,
    tx: mpsc::UnboundedSender<FileKey>,
) -> Box<dyn Fn(&vfs::Fid) + Send + Sync> {
    Box::new(move |fid| {
        // Most local changes touch files nobody holds a delegation on: an
        // atomic load, no lock, while there are none at all.
        if !state.has_delegations() {
            return;
        }
        let file = FileKey { export, fid: *fid };
        if state.delegated(&file) {
            let _ = tx.send(file);
        }
    })
}

impl Nfs4 {
    /// The hook NFSv3 and NLM ask before changing or locking a file
    /// ([`crate::nfs3::Nfs3::recall`]): recalls the NFSv4 delegations on
    /// it, as another NFSv4 client's conflicting request would; true while
    /// a recall is outstanding. Costs one atomic load while there are no
    /// delegations.
    pub fn recaller(&self) -> crate::nfs3::Recall {
        Arc::new(self.recall_with(|s, file, now| s.break_delegations(file, None, false, now)))
    }

    /// What an NFSv4 change of a directory's entries by client `by` asks
    /// under the directory's lock ([`crate::dirlock::Recalling`]): recalls
    /// the directory delegations others hold on it in `export`.
    pub(super) fn dir_recaller(
        &self,
        by: Option<u64>,
        export: u32,
    ) -> impl Fn(&vfs::Fid) -> bool + Send + Sync + 'static {
        let recall = self.recall_with(move |s, dir, now| s.break_dir_delegations(dir, by, now));
        move |dir| recall(export, dir)
    }

    /// `brk` (a break of the state core's) as a synchronous hook: true
    /// while a recall is outstanding, the recalls it queued sent by a task
    /// of their own (the caller may hold a lock, and not wait).
    fn recall_with(
        &self,
        brk: impl Fn(&State, &FileKey, Instant) -> Break + Send + Sync + 'static,
    ) -> impl Fn(u32, &vfs::Fid) -> bool + Send + Sync + 'static {
        let state = self.state.clone();
        let records = self.records.clone();
        let clock = self.clock.clone();
        move |export, fid| {
            if !state.has_delegations() {
                return false;
            }
            let file = FileKey { export, fid: *fid };
            match brk(&state, &file, clock.now()) {
                Break::Clear => false,
                Break::Delay => {
                    let records = records.clone();
                    tokio::spawn(async move { records.apply().await });
                    true
                }
            }
        }
    }
}
