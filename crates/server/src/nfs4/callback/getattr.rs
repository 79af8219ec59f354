//! CB_GETATTR (RFC 8881 §20.1): the size and change a write delegation's
//! holder has, asked for when another client's GETATTR meets the
//! delegation (the caller is `deleg::getattr_conflict`).

use super::backchannel::Backchannels;
use crate::nfs4::attr;
use crate::nfs4::state::deleg::WriteHolder;
use proto::nfs4::*;
use std::time::Duration;

/// How long a GETATTR waits for a write delegation holder's CB_GETATTR
/// answer before recalling the delegation instead (knfsd waits a few tens
/// of milliseconds; a loaded client or a scripted one needs longer, and
/// the GETATTR that waits is another client's, answered DELAY after).
pub const CB_GETATTR_TIMEOUT: Duration = Duration::from_secs(1);

/// One CB_GETATTR of size and change to a write delegation's holder.
pub async fn cb_getattr(
    backchannels: &Backchannels,
    h: &WriteHolder,
) -> Result<(u64, u64), &'static str> {
    let Some(bc) = backchannels.for_client(h.client) else {
        return Err("no back channel");
    };
    let mut bits = Vec::new();
    attr::bitmap_set(&mut bits, FATTR4_CHANGE);
    attr::bitmap_set(&mut bits, FATTR4_SIZE);
    let op = NfsCbArgop4::OP_CB_GETATTR(CbGetattr4args {
        fh: NfsFh4(h.fh.clone()),
        attr_request: bits,
    });
    // The bound covers waiting for the back channel's slot too (a recall
    // to the same client may hold it): a GETATTR never waits much longer.
    let call = bc.compound(vec![op], CB_GETATTR_TIMEOUT);
    let res = match tokio::time::timeout(CB_GETATTR_TIMEOUT, call).await {
        Ok(Ok((_, res))) => res,
        Ok(Err(_)) | Err(_) => return Err("no reply"),
    };
    match res.into_iter().next() {
        Some(NfsCbResop4::OP_CB_GETATTR(CbGetattr4res::NFS4_OK(ok))) => {
            attr::decode_change_size(&ok.obj_attributes).ok_or("unusable attributes")
        }
        _ => Err("refused"),
    }
}
