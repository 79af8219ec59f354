//! Which files hold a delegation of the backend's own (CephFS) and when the
//! backend recalled it: the table [`super::backend_delegs`] grants
//! against and sweeps, apart from it so that the server object can own
//! one without importing the handlers.

use crate::locks::FileKey;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const SHARDS: usize = 64;
/// Given back this long before the backend's deadline, returned or not.
pub(super) const MARGIN: Duration = Duration::from_secs(5);

pub struct BackendDelegs {
    pub(super) shards: Vec<tokio::sync::Mutex<()>>,
    pub(super) hasher: RandomState,
    /// Files with a backend delegation, and when the backend recalled it.
    pub(super) held: Mutex<HashMap<FileKey, Option<Instant>>>,
    /// Files to check now (a delegation returned, a recall heard).
    pub(super) tx: mpsc::UnboundedSender<FileKey>,
    pub(super) rx: Mutex<Option<mpsc::UnboundedReceiver<FileKey>>>,
    /// How long the backend lets a recalled delegation take to come back.
    pub(super) within: Duration,
}

impl BackendDelegs {
    pub fn new(lease: Duration) -> BackendDelegs {
        let (tx, rx) = mpsc::unbounded_channel();
        BackendDelegs {
            shards: (0..SHARDS).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: RandomState::new(),
            held: Mutex::default(),
            tx,
            rx: Mutex::new(Some(rx)),
            within: (2 * lease).max(MARGIN * 4),
        }
    }

    pub(super) fn shard(&self, f: &FileKey) -> &tokio::sync::Mutex<()> {
        &self.shards[self.hasher.hash_one(f) as usize % SHARDS]
    }

    /// Asks for `file` to be checked soon (its delegations may be gone).
    pub fn check(&self, file: FileKey) {
        if self.held.lock().unwrap().contains_key(&file) {
            let _ = self.tx.send(file);
        }
    }

    /// How many files hold a backend delegation (tests, diagnostics).
    pub fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Whether the backend has recalled its delegation on `file`.
    pub(super) fn recalled(&self, file: &FileKey) -> bool {
        self.held
            .lock()
            .unwrap()
            .get(file)
            .is_some_and(Option::is_some)
    }
}
