//! The lease timer: the state core's walk now and then (leases run out,
//! courteous clients, CB_RECALL_ANY past the delegations' high-water
//! mark), its events logged, its effects carried out, the gauges kept.

use super::callback::Backchannels;
use super::effects::Records;
use super::server::Nfs4;
use super::state;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Nfs4 {
    /// The lease timer: clients whose lease ran out become courteous
    /// (their state stays until someone needs it, see
    /// [`state::Courtesy`]); it logs what the state core reports, carries
    /// out its effects (the recovery records of clients expired for real
    /// go) and keeps the courteous-clients gauge. Woken at once when the
    /// state core queued something outside the walk (a conflict expired a
    /// client). Runs until the runtime stops.
    pub fn spawn_reaper(&self) {
        let state = self.state.clone();
        let records = self.records.clone();
        let wake = self.wake.clone();
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();
        let backchannels = self.backchannels.clone();
        let max_delegations = self.cfg.max_delegations;
        let every = (self.cfg.lease / 4).max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = t.tick() => {}
                    _ = wake.notified() => {}
                }
                walk(
                    &state,
                    &records,
                    &backchannels,
                    &metrics,
                    max_delegations,
                    clock.now(),
                )
                .await;
                backchannels.retain(|id| state.session(id).is_some());
            }
        });
    }

    /// One walk of the lease timer now, without waiting for its tick
    /// (tests drive time by hand and walk after each step).
    pub async fn lease_walk(&self) {
        walk(
            &self.state,
            &self.records,
            &self.backchannels,
            &self.metrics,
            self.cfg.max_delegations,
            self.clock.now(),
        )
        .await;
        self.backchannels
            .retain(|id| self.state.session(id).is_some());
    }
}

/// What the lease timer does each time: the state core's walk at `now`,
/// its events logged, CB_RECALL_ANY asked for past the delegations'
/// high-water mark, its effects carried out, the courteous-clients gauge
/// kept.
async fn walk(
    state: &state::State,
    records: &Records,
    backchannels: &Backchannels,
    metrics: &Option<Arc<metrics::Metrics>>,
    max_delegations: usize,
    now: Instant,
) {
    for e in state.reap(now) {
        report(e);
    }
    state.recall_any(max_delegations);
    records.apply().await;
    // NFSv4.0 callback paths go with their clients.
    backchannels
        .v40
        .retain(|client| state.client_exists(client));
    if let Some(m) = metrics {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let (up, down) = backchannels.path_counts();
        m.server.nfs4_callback_paths_up.store(up as i64, relaxed);
        m.server
            .nfs4_callback_paths_down
            .store(down as i64, relaxed);
        let d = state.take_deleg_counts();
        m.server.delegations_recalled.fetch_add(d.recalled, relaxed);
        m.server.delegations_revoked.fetch_add(d.revoked, relaxed);
        m.server.recall_any_sent.fetch_add(d.recall_any, relaxed);
        m.server.nfs4_courteous_clients.store(
            state.courteous_clients() as i64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// Logs one change of the client table.
fn report(e: state::Event) {
    use state::Event;
    let id = |c: u64| format!("{c:016x}");
    match e {
        Event::Courteous { clientid } => {
            tracing::info!(
                clientid = id(clientid),
                "NFSv4 client lease expired: courteous, its state is kept until another client needs it"
            );
        }
        Event::Reactivated { clientid } => {
            tracing::info!(
                clientid = id(clientid),
                "courteous NFSv4 client is back: active again with its state"
            );
        }
        Event::Expired {
            why: state::Why::Unconfirmed,
            clientid,
            ..
        } => {
            // Routine (a client that never finished SETCLIENTID or
            // EXCHANGE_ID); it held nothing and was never recorded.
            tracing::debug!(
                clientid = id(clientid),
                "unconfirmed NFSv4 client record dropped after a lease"
            );
        }
        Event::Expired {
            why: state::Why::TableFull,
            clientid,
            ..
        } => {
            // Routine under a crowd of one-shot clients (counted in the
            // limit metrics when none can give way); it held nothing.
            tracing::debug!(
                clientid = id(clientid),
                "NFSv4 client record without state dropped: the client table is full"
            );
        }
        Event::Expired { clientid, why, .. } => {
            tracing::info!(
                clientid = id(clientid),
                reason = why.as_str(),
                "NFSv4 client expired: its state is released"
            );
        }
        Event::Recovered { clientid, .. } => {
            tracing::debug!(
                clientid = id(clientid),
                "NFSv4 client freed its revoked state: recorded for reclaim again"
            );
        }
    }
}
