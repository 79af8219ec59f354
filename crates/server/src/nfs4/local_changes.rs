//! Delegations recalled when a process on the server changes a file
//! directly (not through NFS): a client holding a delegation trusts its
//! cache and would otherwise never see the change.
//!
//! The local backend tells us through its fanotify group
//! (`vfs::Backend::on_local_change`, events of other processes only), just
//! after the change; each file with delegations is then recalled as if a
//! client without a delegation had changed it. The holder may read its
//! cached copy for the moment between the change and its processing of
//! CB_RECALL (a few milliseconds on a LAN); a kernel lease would hold the
//! local writer instead, at the price of a descriptor per delegated file
//! and a signal per break (see docs/architecture.md).

use super::state::State;
use super::Nfs4;
use crate::locks::FileKey;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

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
        let every = (self.cfg.lease / 4).max(Duration::from_millis(100));
        tokio::spawn(async move {
            // Backends already listened to, by address (a backend outlives
            // the reloads that keep its export).
            let mut watched: HashSet<usize> = HashSet::new();
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
                        tracing::info!(
                            export = file.export,
                            "a local process changed a delegated file: recalling its delegations"
                        );
                        state.break_delegations(&file, None, clock.now());
                        records.apply().await;
                    }
                }
            }
        });
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
        let file = FileKey { export, fid: *fid };
        if state.delegated(&file) {
            let _ = tx.send(file);
        }
    })
}
