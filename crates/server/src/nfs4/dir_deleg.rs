//! Directory delegations (GET_DIR_DELEGATION, RFC 8881 §18.39), recall
//! only: a holder may trust what it cached of a directory (its entries
//! and attributes) until CB_RECALL, which comes before another client, an
//! NFSv3 call or a local process changes them. No notifications are
//! offered (CB_NOTIFY): the reply's bitmaps are empty whatever was asked.
//!
//! The state core keeps them as delegations of kind `Dir` on the
//! directory's FileKey, so recall, DELEGRETURN, revocation of a holder
//! that does not return and release with the client are the file
//! delegations'. Changes of entries ask under the directory's namespace
//! lock (`crate::dirlock::hold_unrecalled`, through `Nfs4::dir_recaller`),
//! and a grant is made under that lock too, so none slips in between.
//! The holder's own changes recall nothing (§10.9.1).
//!
//! When Tarn does not grant one the answer is GDD4_UNAVAIL (no
//! signal promised), counted by reason in `tarn_dir_delegations_unavailable`.

use super::compound::{file_key, Compound, Fh};
use super::fail::{reply, Fail};
use super::state::deleg::{DelegAsk, DelegType, NoDeleg};
use crate::export::Export;
use proto::nfs4::*;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use vfs::{Fid, FileType};

/// Why no directory delegation was granted (a metric label each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unavail {
    /// No usable back channel to recall it on.
    NoCallback,
    /// The export grants no delegations, or the directory may change
    /// where Tarn does not see it (a pseudo directory, a backend other
    /// servers change: CephFS).
    Policy,
    /// Held already, being recalled, or recalled within the back-off.
    Contention,
    /// The bound on outstanding delegations is reached.
    Resource,
}

pub async fn get_dir_delegation(
    c: &mut Compound<'_>,
    _a: GetDirDelegation4args,
) -> GetDirDelegation4res {
    let r = grant(c).await;
    reply(c.ctx, "OP_GET_DIR_DELEGATION", r, |r| match r {
        Ok(stateid) => GetDirDelegation4res::NFS4_OK(GetDirDelegation4resNonFatal::GDD4_OK(
            GetDirDelegation4resok {
                // Cookies would only matter to notifications, of which
                // there are none.
                gddr_cookieverf: [0; 8],
                gddr_stateid: stateid,
                gddr_notification: Vec::new(),
                gddr_child_attributes: Vec::new(),
                gddr_dir_attributes: Vec::new(),
            },
        )),
        Err(why) => {
            count_unavail(c, why);
            tracing::debug!(client = ?c.clientid, ?why, "no directory delegation");
            // Tarn does not tell when one becomes available (CB_NOTIFY_DELEG_AVAIL).
            GetDirDelegation4res::NFS4_OK(GetDirDelegation4resNonFatal::GDD4_UNAVAIL(false))
        }
    })
}

/// The delegation on the current directory for the COMPOUND's client, or
/// why none; a failure for a current filehandle that is no directory.
async fn grant(c: &Compound<'_>) -> Result<Result<Stateid4, Unavail>, Fail> {
    let (export, dir) = match &c.cur()?.fh {
        Fh::Obj { export, fid } => (export.clone(), *fid),
        // Pseudo directories change only on a reload, unrecalled.
        Fh::Pseudo(_) => return Ok(Err(Unavail::Policy)),
    };
    c.access(&export)?;
    let b = export.backend.clone();
    let a =
        c.n.pool
            .run_fast(&*b.clone(), move || b.getattr(&dir))
            .await?;
    if a.ftype != FileType::Directory {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_NOTDIR,
            "GET_DIR_DELEGATION of a non-directory",
        ));
    }
    // SEQUENCE named the client: the operation is 4.1's.
    let Some(clientid) = c.clientid else {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION,
            "GET_DIR_DELEGATION without a session",
        ));
    };
    // Where other servers change the directory unseen (CephFS), or the
    // export grants no delegations, there is nothing to promise.
    if !export.delegations.read()
        || !crate::dirlock::atomic(&*export.backend)
        || export.backend.shares_delegations()
    {
        return Ok(Err(Unavail::Policy));
    }
    if c.n.backchannels.for_client(clientid).is_none() {
        return Ok(Err(Unavail::NoCallback));
    }
    let ask = DelegAsk {
        client: clientid,
        file: file_key(&export, &dir),
        fh: c.n.seal(&Fh::Obj {
            export: export.clone(),
            fid: dir,
        }),
        kind: DelegType::Dir,
        change: 0,
    };
    let (state, max, now) = (c.n.state.clone(), c.n.cfg.max_delegations, c.n.clock.now());
    // Under the directory's lock: a change of its entries is either done
    // before the grant or asks after it (and recalls it).
    let granted =
        c.n.run(move || {
            let _held = crate::dirlock::hold(&dir);
            state.grant_delegation(ask, max, now)
        })
        .await;
    Ok(match granted {
        Ok(sid) => {
            super::deleg::count_grant(c, DelegType::Dir);
            if c.n.state.recall_any(max) > 0 {
                c.n.apply_effects().await;
            }
            Ok(sid)
        }
        Err(NoDeleg::Resource) => {
            if let Some(m) = &c.n.metrics {
                m.limit_reached(rpc::observe::Limit::Delegations, 1);
            }
            Err(Unavail::Resource)
        }
        Err(NoDeleg::Contention | NoDeleg::Held | NoDeleg::Upgrade) => Err(Unavail::Contention),
    })
}

fn count_unavail(c: &Compound<'_>, why: Unavail) {
    if let Some(m) = &c.n.metrics {
        let s = &m.server;
        match why {
            Unavail::NoCallback => &s.dir_delegations_unavail_no_callback,
            Unavail::Policy => &s.dir_delegations_unavail_policy,
            Unavail::Contention => &s.dir_delegations_unavail_contention,
            Unavail::Resource => &s.dir_delegations_unavail_resource,
        }
        .fetch_add(1, Relaxed);
    }
}

/// Before another client changes the attributes of `fid` (SETATTR): if it
/// is a directory others hold delegations on, they are recalled first
/// (NFS4ERR_DELAY meanwhile).
pub async fn break_dir(c: &Compound<'_>, export: &Arc<Export>, fid: &Fid) -> Result<(), Fail> {
    if !c.n.state.has_delegations() {
        return Ok(());
    }
    let now = c.n.clock.now();
    let b =
        c.n.state
            .break_dir_delegations(&file_key(export, fid), c.clientid, now);
    let why = "a delegation on the directory is being recalled";
    super::deleg::after_break(c, b, why).await
}
