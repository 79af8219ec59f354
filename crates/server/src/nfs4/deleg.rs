//! Delegations as the handlers meet them: whether OPEN grants one, and
//! the recall that must come before another client's conflicting OPEN,
//! WRITE, SETATTR(size), REMOVE, RENAME or LINK (the requester gets
//! NFS4ERR_DELAY until the holder returns it or it is revoked). The
//! decisions are the state core's (`state::deleg`); this module finds the
//! file, asks, and sends the recalls the core queued.

use super::compound::{file_key, Compound};
use super::state::deleg::{Break, NoDeleg};
use super::state::ACCESS_READ;
use super::Fail;
use crate::export::Export;
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Cred, Fid, FsError};

/// Before a change to `fid` by the current client: recall delegations
/// others hold on it; NFS4ERR_DELAY while a recall is outstanding.
pub async fn break_file(c: &Compound<'_>, export: &Export, fid: &Fid) -> Result<(), Fail> {
    if !c.n.state.has_delegations() {
        return Ok(());
    }
    let file = file_key(export, fid);
    match c
        .n
        .state
        .break_delegations(&file, c.clientid, c.n.clock.now())
    {
        Break::Clear => Ok(()),
        Break::Delay => {
            // The recall goes out now (the records writer sends it).
            c.n.apply_effects().await;
            Err(Fail::new(
                Nfsstat4::NFS4ERR_DELAY,
                "a delegation on the file is being recalled",
            ))
        }
    }
}

/// [`break_file`] for the object `name` in `dir`, if there is one (REMOVE,
/// RENAME's source and target). The lookup is made only while some
/// delegation is outstanding.
pub async fn break_name(
    c: &Compound<'_>,
    export: &Arc<Export>,
    dir: &Fid,
    cred: &Cred,
    name: &Bytes,
) -> Result<(), Fail> {
    if !c.n.state.has_delegations() {
        return Ok(());
    }
    let (b, dir, cred, name) = (export.backend.clone(), *dir, cred.clone(), name.clone());
    match c.n.run(move || b.lookup(&cred, &dir, &name)).await {
        Ok((fid, _)) => break_file(c, export, &fid).await,
        Err(FsError::NoEnt) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether an OPEN asks for, refuses or cancels a delegation (the 4.1
/// OPEN4_SHARE_ACCESS_WANT_* bits).
fn want(share_access: u32) -> u32 {
    share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK
}

fn none_ext(why: WhyNoDelegation4) -> OpenDelegation4 {
    OpenDelegation4::OPEN_DELEGATE_NONE_EXT(match why {
        WhyNoDelegation4::WND4_CONTENTION => OpenNoneDelegation4::WND4_CONTENTION(false),
        WhyNoDelegation4::WND4_RESOURCE => OpenNoneDelegation4::WND4_RESOURCE(false),
        w => OpenNoneDelegation4::Default(w),
    })
}

/// The delegation an OPEN of `fid` by `clientid` with `share_access`
/// gets, granted in the state core when the rules allow: a read-only
/// open (Tarn grants no write delegations yet), a usable back channel
/// (for NFSv4.0 the callback path, see `cb40`), nobody else writing the
/// file, and room under the bound. `plain`: a CLAIM_NULL or
/// CLAIM_FH open (a reclaim or an open under a delegation gets none).
pub fn on_open(
    c: &Compound<'_>,
    clientid: u64,
    share_access: u32,
    plain: bool,
    export: &Arc<Export>,
    fid: &Fid,
) -> OpenDelegation4 {
    let want = want(share_access);
    // A client that says nothing of its wishes hears plain NONE; one that
    // asked is told why not (RFC 8881 §18.16.3).
    let refuse = |why| {
        if want == OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE {
            OpenDelegation4::OPEN_DELEGATE_NONE
        } else {
            none_ext(why)
        }
    };
    match want {
        OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return none_ext(WhyNoDelegation4::WND4_NOT_WANTED),
        OPEN4_SHARE_ACCESS_WANT_CANCEL => return none_ext(WhyNoDelegation4::WND4_CANCELLED),
        _ => {}
    }
    if !plain || !export.delegations.read() {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    if share_access & 0xff != ACCESS_READ || want == OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    if c.n.backchannels.for_client(clientid).is_none() {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    let file = file_key(export, fid);
    let fh = c.n.seal(&super::compound::Fh::Obj {
        export: export.clone(),
        fid: *fid,
    });
    match c
        .n
        .state
        .grant_read_delegation(clientid, file, fh, c.n.cfg.max_delegations)
    {
        Ok(stateid) => {
            if let Some(m) = &c.n.metrics {
                m.server
                    .delegations_granted
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            OpenDelegation4::OPEN_DELEGATE_READ(OpenReadDelegation4 {
                stateid,
                recall: false,
                // No access is promised beyond what ACCESS says (an empty
                // ACE, as Linux's server sends).
                permissions: Nfsace4 {
                    r#type: 0,
                    flag: 0,
                    access_mask: 0,
                    who: Bytes::new(),
                },
            })
        }
        Err(NoDeleg::Resource) => refuse(WhyNoDelegation4::WND4_RESOURCE),
        Err(NoDeleg::Contention | NoDeleg::Held) => refuse(WhyNoDelegation4::WND4_CONTENTION),
    }
}

/// The bound on outstanding delegations for this machine: four per MiB
/// of memory, as Linux's server allows (a delegation costs a few hundred
/// bytes here; the bound is for the clients' sake as much as ours).
pub fn default_max_delegations() -> usize {
    let mib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4096, |kb| kb / 1024);
    (mib as usize * 4).clamp(1024, 4 << 20)
}
