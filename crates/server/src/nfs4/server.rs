//! The NFSv4 server object ([`Nfs4`]) and its tunables ([`Nfs4Config`]):
//! what every handler reaches through `c.n` (exports, state, pool,
//! callbacks, metrics), how it is built, and the filehandle helpers
//! (seal, open, root). The COMPOUND loop is in `dispatch`, the lease
//! timer in `lease`, the effects applier in `effects`.

use super::backend_held::BackendDelegs;
use super::callback;
use super::config::Nfs4Config;
use super::effects::Records;
use super::{attr, clock, peers, recovery, state};
use crate::grace::Grace;
use crate::live::Live;
use crate::pool::Pool;
use bytes::Bytes;
use std::sync::Arc;
use vfs::HandleKey;

pub struct Nfs4 {
    /// The exports in force and their pseudo tree (swapped on reload; each
    /// COMPOUND loads them once, see [`Compound::snap`]).
    pub live: Arc<Live>,
    pub key: Arc<HandleKey>,
    pub pool: Pool,
    pub state: Arc<state::State>,
    pub idmap: Arc<attr::IdMap>,
    pub cfg: Nfs4Config,
    /// Shared with NFSv3 (see [`crate::verf`]).
    pub write_verf: Arc<crate::verf::WriteVerf>,
    /// Identifies this server to clients (EXCHANGE_ID server owner/scope).
    pub server_owner: Bytes,
    /// When the server started: times of pseudo directories.
    pub boot: vfs::Timespec,
    /// The one writer of the stable client records (reclaim after a
    /// restart): carries out the state core's effects.
    pub records: Arc<Records>,
    /// Wakes the lease timer when the state core queued something outside
    /// its walk (see [`state::Waker`]).
    pub(super) wake: Arc<tokio::sync::Notify>,
    /// Per-operation counters (the COMPOUND itself is counted by the RPC layer).
    pub metrics: Option<Arc<metrics::Metrics>>,
    /// The time for every lease, grace and courtesy decision (a manual
    /// clock in tests).
    pub clock: Arc<dyn clock::Clock>,
    /// Each session's back channel (driver state: it holds connections).
    pub backchannels: Arc<callback::Backchannels>,
    /// Which address each client record calls from (for `tarn top`).
    pub peers: Arc<peers::Peers>,
    /// Locks also taken in backends that keep them (CephFS), shared with NLM.
    pub shared: Arc<crate::shared_locks::SharedLocks>,
    /// Delegations backed by the backend's own (CephFS).
    pub bdelegs: Arc<BackendDelegs>,
}

impl Nfs4 {
    /// The NFSv4 server: `grace` is the server's grace period (shared with
    /// NLM), `clock` the time for every lease, grace and courtesy decision
    /// ([`clock::SystemClock`] outside tests).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        live: Arc<Live>,
        key: Arc<HandleKey>,
        pool: Pool,
        locks: Arc<crate::locks::LockManager>,
        cfg: Nfs4Config,
        recovery: Option<recovery::Recovery>,
        grace: Grace,
        clock: Arc<dyn clock::Clock>,
    ) -> Nfs4 {
        let shared =
            crate::shared_locks::SharedLocks::new(locks.clone(), live.clone(), pool.clone());
        let state = Arc::new(
            state::State::with_courtesy(cfg.lease, locks.clone(), cfg.courtesy, new_epoch())
                .with_limits(cfg.limits),
        );
        // A lock request (NFSv4 or NLM) refused because of a courteous
        // client's lock expires that client and tries again. Weak: the
        // state owns the lock manager, which owns the hook.
        let weak = Arc::downgrade(&state);
        let hook_clock = clock.clone();
        locks.set_conflict_hook(Box::new(move |client| {
            weak.upgrade()
                .is_some_and(|s| s.expire_courteous(client, hook_clock.now()))
        }));
        let wake = Arc::new(tokio::sync::Notify::new());
        {
            let wake = wake.clone();
            state.set_waker(Box::new(move || wake.notify_one()));
        }
        if let Some(r) = &recovery {
            state.start_grace(r.previous(), grace);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let write_verf = Default::default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "tarn".into());
        let backchannels: Arc<callback::Backchannels> = Arc::default();
        let records = Arc::new(Records::new(
            state.clone(),
            recovery,
            pool.clone(),
            backchannels.clone(),
        ));
        Nfs4 {
            shared,
            bdelegs: Arc::new(BackendDelegs::new(cfg.lease)),
            peers: Arc::default(),
            live,
            key,
            pool,
            state,
            idmap: Arc::new(attr::IdMap::new(&cfg.domain, cfg.id_names)),
            cfg,
            write_verf,
            server_owner: Bytes::from(format!("tarn:{host}")),
            boot: vfs::Timespec {
                secs: now.as_secs() as i64,
                nsecs: now.subsec_nanos(),
            },
            records,
            wake,
            metrics: None,
            clock,
            backchannels,
        }
    }

    /// Carries out what the state core queued (see [`Records::apply`]).
    pub async fn apply_effects(&self) {
        self.records.apply().await;
    }

    /// Runs a backend call on the blocking pool.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.pool.run(f).await
    }
}

/// This instance's epoch, in its client IDs and stateids: the start time
/// in milliseconds (31 bits, as the state keeps them), so two starts at
/// least a millisecond apart within 24 days never share one. Seconds XOR
/// 16 random bits did: any two starts under 18 hours apart matched with
/// chance 2^-16, and the crash cycles (hundreds of restarts) met it, old
/// stateids then looking current.
fn new_epoch() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u32 & 0x7fff_ffff)
        .unwrap_or(1)
}

#[cfg(test)]
mod epoch_tests {
    #[test]
    fn starts_a_few_milliseconds_apart_have_different_epochs() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            assert!(seen.insert(super::new_epoch()), "an epoch came twice");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
