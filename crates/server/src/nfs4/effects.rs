//! The effects applier ([`Records`]): carries out, in order, what the
//! state core queued ([`state::Effect`]): durable client records written
//! or removed, CB_RECALL and CB_RECALL_ANY sent (by [`callback::recall`]).

use super::callback::{self, Backchannels};
use super::{recovery, state};
use crate::pool::Pool;
use bytes::Bytes;
use std::sync::Arc;

/// The one writer of the durable client records: takes the effects the
/// state core queued and carries them out in order.
///
/// Policy on failure: a new client is recorded before it is confirmed
/// ([`Records::persist_first`]); if that fails, CREATE_SESSION (or
/// SETCLIENTID_CONFIRM) answers NFS4ERR_DELAY and the client retries
/// until the state directory takes writes again (knfsd logs and confirms
/// anyway; then the client's reclaims after a restart are refused). Other
/// changes (a client forgotten) are logged at error level and the
/// operation still succeeds: the in-memory set holds the change, so the
/// next write that succeeds carries it; until then a restart may let a
/// forgotten client reclaim what it no longer held (which only conflicts
/// with locks taken since by others if they exist, and then is refused
/// as any conflicting lock is).
pub struct Records {
    state: Arc<state::State>,
    store: Option<recovery::Recovery>,
    pool: Pool,
    /// Held while effects are taken and carried out, so a handler and the
    /// lease timer apply them in the order the state core queued them.
    order: tokio::sync::Mutex<()>,
    /// Where recalls are sent.
    backchannels: Arc<Backchannels>,
}

impl Records {
    pub fn new(
        state: Arc<state::State>,
        store: Option<recovery::Recovery>,
        pool: Pool,
        backchannels: Arc<Backchannels>,
    ) -> Records {
        Records {
            state,
            store,
            pool,
            order: tokio::sync::Mutex::new(()),
            backchannels,
        }
    }

    /// Writes `owner` into the durable client record now, before the
    /// client it names is confirmed. A client is refused rather than
    /// confirmed unrecorded: it could not reclaim after a restart, and
    /// the server could not tell its reclaims from anyone's (RFC 8881
    /// §8.4.3). Err: the record could not be written (logged loudly).
    pub async fn persist_first(&self, owner: &Bytes, op: &'static str) -> Result<(), ()> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        let _order = self.order.lock().await;
        let o = owner.clone();
        match self.pool.run(move || store.add(&o)).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
                tracing::error!(
                    owner,
                    op,
                    error = %e,
                    "the state directory cannot record a new NFSv4 client for reclaim after a restart (read-only or full?): the client is refused with NFS4ERR_DELAY until it can"
                );
                Err(())
            }
        }
    }

    /// A client finished reclaiming: in a cluster its record moves to
    /// this head's current epoch (and out of a failed head's), which is
    /// how the other heads learn that its recovery is over. A failure is
    /// logged; the grace then lasts until its bound.
    pub async fn reclaimed(&self, clientid: u64) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Some(owner) = self.state.client_owner(clientid) else {
            return;
        };
        if !self.state.reclaimed_here(&owner) {
            return;
        }
        let _order = self.order.lock().await;
        let o = owner.clone();
        if let Err(e) = self.pool.run(move || store.reclaimed(&o)).await {
            let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
            tracing::error!(owner, error = %e, "cannot move the reclaimed NFSv4 client's record: the grace lasts until its bound");
        }
    }

    /// Carries out the queued effects; returns when they are on disk (a
    /// handler awaits this before replying, e.g. to CREATE_SESSION).
    pub async fn apply(&self) {
        let _order = self.order.lock().await;
        for e in self.state.take_effects() {
            let (owner, persist) = match e {
                state::Effect::PersistClient { owner } => (owner, true),
                state::Effect::ForgetClient { owner } => (owner, false),
                state::Effect::Recall {
                    client,
                    stateid,
                    fh,
                } => {
                    callback::recall::recall(&self.backchannels, client, stateid, fh);
                    continue;
                }
                state::Effect::RecallAny { client, keep, mask } => {
                    callback::recall::recall_any(
                        &self.backchannels,
                        self.state.clone(),
                        client,
                        keep,
                        mask,
                    );
                    continue;
                }
            };
            let Some(store) = self.store.clone() else {
                continue;
            };
            let o = owner.clone();
            // One small file write and fsync, on the pool.
            let r = self
                .pool
                .run(move || {
                    if persist {
                        store.add(&o)
                    } else {
                        store.remove(&o)
                    }
                })
                .await;
            if let Err(e) = r {
                let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
                if persist {
                    tracing::error!(owner, error = %e, "the state directory cannot record the NFSv4 client for reclaim after a restart; retried with the next record change");
                } else {
                    tracing::error!(owner, error = %e, "the state directory cannot remove the NFSv4 client's reclaim record; retried with the next record change");
                }
            }
        }
    }
}
