//! CB_OFFLOAD (RFC 7862 §16.1): a background COPY's result, sent to the
//! client that asked when the copy is over (the caller is `copy::Job`).
//! Whatever becomes of it, the result stays for OFFLOAD_STATUS.

use super::backchannel::Backchannels;
use super::channel::{CbFail, CALL_TIMEOUT};
use bytes::Bytes;
use proto::nfs4::*;
use std::time::Duration;
use tracing::debug;

/// How often CB_OFFLOAD is sent to a client that answers NFS4ERR_DELAY.
const CB_OFFLOAD_TRIES: u32 = 5;

/// What CB_OFFLOAD reports: the copy's stateid and destination, and how
/// it ended.
pub struct Offload {
    pub client: u64,
    pub sid: Stateid4,
    /// The destination's filehandle.
    pub fh: Bytes,
    pub copied: u64,
    pub status: Nfsstat4,
    pub verf: [u8; 8],
}

/// Sends CB_OFFLOAD, again (backing off) while the client answers
/// NFS4ERR_DELAY, at most [`CB_OFFLOAD_TRIES`] times.
pub async fn cb_offload(backchannels: &Backchannels, o: Offload) {
    let info = match o.status {
        Nfsstat4::NFS4_OK => OffloadInfo4::NFS4_OK(WriteResponse4 {
            wr_callback_id: Vec::new(),
            wr_count: o.copied,
            wr_committed: StableHow4::FILE_SYNC4,
            wr_writeverf: o.verf,
        }),
        s => OffloadInfo4::Default(s, o.copied),
    };
    let op = NfsCbArgop4::OP_CB_OFFLOAD(CbOffload4args {
        coa_fh: NfsFh4(o.fh),
        coa_stateid: o.sid,
        coa_offload_info: info,
    });
    for attempt in 0..CB_OFFLOAD_TRIES {
        let Some(bc) = backchannels.for_client(o.client) else {
            debug!(
                client = o.client,
                "no back channel for CB_OFFLOAD: left to OFFLOAD_STATUS"
            );
            return;
        };
        let delay = match bc.compound(vec![op.clone()], CALL_TIMEOUT).await {
            Ok((Nfsstat4::NFS4_OK, _)) => return,
            Ok((Nfsstat4::NFS4ERR_DELAY, _)) | Err(CbFail::Sequence(Nfsstat4::NFS4ERR_DELAY)) => {
                true
            }
            Ok((s, _)) => {
                debug!(client = o.client, status = ?s, "CB_OFFLOAD refused");
                false
            }
            Err(e) => {
                debug!(client = o.client, error = ?e, "CB_OFFLOAD failed");
                false
            }
        };
        if !delay {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt)).await;
    }
}
