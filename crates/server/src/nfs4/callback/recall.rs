//! CB_RECALL and CB_RECALL_ANY (RFC 8881 §20.2, §20.6): sent when the
//! state core queues them ([`crate::nfs4::state::Effect::Recall`],
//! [`crate::nfs4::state::Effect::RecallAny`]), by the effects applier
//! (`effects::Records::apply`). Neither waits for its answer: what the
//! client does comes back as DELEGRETURNs, and a delegation not returned
//! within a lease is revoked by the core whatever became of the call.

use super::backchannel::Backchannels;
use super::channel::CALL_TIMEOUT;
use crate::nfs4::state::State;
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::Arc;
use tracing::debug;

/// Sends CB_RECALL on the client's back channel, without waiting. A
/// client with no usable back channel is not called (it gets no new
/// delegations either); an NFSv4.0 client's path that is down is tried
/// again first.
pub fn recall(backchannels: &Arc<Backchannels>, client: u64, stateid: Stateid4, fh: Bytes) {
    let bc = backchannels.for_client(client);
    if bc.is_none() && !backchannels.v40.known(client) {
        debug!(client, "no back channel to recall a delegation on");
        return;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let all = backchannels.clone();
    tokio::spawn(async move {
        let bc = match bc {
            Some(bc) => bc,
            None => match all.v40.revive(client).await {
                Some(bc) => bc,
                None => return debug!(client, "callback path down: CB_RECALL not sent"),
            },
        };
        let op = NfsCbArgop4::OP_CB_RECALL(CbRecall4args {
            stateid,
            truncate: false,
            fh: NfsFh4(fh),
        });
        match bc.compound(vec![op], CALL_TIMEOUT).await {
            Ok((Nfsstat4::NFS4_OK, _)) => {}
            Ok((status, _)) => debug!(client, ?status, "CB_RECALL refused"),
            Err(e) => debug!(client, error = ?e, "CB_RECALL failed"),
        }
    });
}

/// Sends CB_RECALL_ANY on the client's back channel without waiting; the
/// state core hears when it is over ([`State::recall_any_done`]), so one
/// is in flight per client.
pub fn recall_any(
    backchannels: &Backchannels,
    state: Arc<State>,
    client: u64,
    keep: u32,
    mask: u32,
) {
    let Some(bc) = backchannels.for_client(client) else {
        debug!(client, "no back channel for CB_RECALL_ANY");
        state.recall_any_done(client);
        return;
    };
    if tokio::runtime::Handle::try_current().is_err() {
        state.recall_any_done(client);
        return;
    }
    tokio::spawn(async move {
        let op = NfsCbArgop4::OP_CB_RECALL_ANY(CbRecallAny4args {
            craa_objects_to_keep: keep,
            craa_type_mask: vec![mask],
        });
        match bc.compound(vec![op], CALL_TIMEOUT).await {
            Ok((Nfsstat4::NFS4_OK, _)) => {}
            Ok((status, _)) => debug!(client, ?status, "CB_RECALL_ANY refused"),
            Err(e) => debug!(client, error = ?e, "CB_RECALL_ANY failed"),
        }
        state.recall_any_done(client);
    });
}
