//! Delegations as the handlers meet them: whether OPEN grants one (read
//! or write), the recall that must come before another client's
//! conflicting request (OPEN, WRITE, SETATTR(size), REMOVE, RENAME, LINK
//! for any delegation; READ, LOCK and read OPENs too for a write one; the
//! requester gets NFS4ERR_DELAY until the holder returns it or it is
//! revoked), and the CB_GETATTR another client's GETATTR of a file under a
//! write delegation waits for. The decisions are the state core's
//! (`state::deleg`); this module finds the file, asks, and sends the calls
//! the core queued.

use super::attr;
use super::callback::getattr::cb_getattr;
use super::compound::{file_key, Compound};
use super::fail::Fail;
use super::state::deleg::{Break, DelegAsk, DelegType, NoDeleg};
use super::state::{ACCESS_READ, ACCESS_WRITE};
use crate::export::Export;
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tracing::debug;
use vfs::{Access, Attr, Cred, Fid, FsError, SetAttr, SetTime};

/// What the current client is about to do to a file, which decides whose
/// delegations stand in its way.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// A change (OPEN for writing, WRITE, SETATTR, REMOVE, RENAME, LINK,
    /// ...): any delegation others hold.
    Change,
    /// A READ, LOCK or read OPEN: only write delegations others hold (a
    /// read delegation's holder is promised nobody writes, not that nobody
    /// reads).
    Read,
}

/// Before the current client's `intent` on `fid`: recall the delegations
/// others hold on it that stand in the way; NFS4ERR_DELAY while a recall
/// is outstanding. `sid`: the stateid the operation carries, if any: an
/// NFSv4.0 COMPOUND names its client only through it, and the client's
/// own delegations must not stand in the way of its own WRITE or SETATTR
/// (it flushes under a write delegation, and could not return it while
/// its flush waits for the return).
pub async fn break_file(
    c: &Compound<'_>,
    export: &Export,
    fid: &Fid,
    intent: Intent,
    sid: Option<&Stateid4>,
) -> Result<(), Fail> {
    let reader = intent == Intent::Read;
    if !c.n.state.has_delegations() {
        return Ok(());
    }
    let file = file_key(export, fid);
    let by = c.clientid.or_else(|| {
        sid.filter(|_| c.minor == 0)
            .and_then(|s| c.n.state.stateid_client(s))
    });
    let b =
        c.n.state
            .break_delegations(&file, by, reader, c.n.clock.now());
    after_break(c, b, "a delegation on the file is being recalled").await
}

/// What a break of the state core's means for the request: go ahead, or
/// NFS4ERR_DELAY (`why`) with the recalls it queued sent.
pub(super) async fn after_break(c: &Compound<'_>, b: Break, why: &'static str) -> Result<(), Fail> {
    match b {
        Break::Clear => Ok(()),
        Break::Delay => {
            // The recall goes out now (the records writer sends it).
            c.n.apply_effects().await;
            Err(Fail::new(Nfsstat4::NFS4ERR_DELAY, why))
        }
    }
}

/// GETATTR of size or change of `fid` (attributes `attr`, just fetched)
/// by a client other than a write delegation's holder (RFC 8881
/// §10.4.3): the holder is asked with CB_GETATTR first. When it reports
/// a modification, the answer carries its size and a change attribute the
/// server bumps, and the file's time_modify is set to now; when it does
/// not answer in time the delegation is recalled and the GETATTR answered
/// NFS4ERR_DELAY (as knfsd does). `attr` is updated in place.
pub async fn getattr_conflict(
    c: &Compound<'_>,
    export: &Arc<Export>,
    fid: &Fid,
    attr: &mut Attr,
) -> Result<(), Fail> {
    if !c.n.state.has_delegations() {
        return Ok(());
    }
    let file = file_key(export, fid);
    let Some(holder) = c.n.state.write_holder(&file, c.clientid) else {
        // None to ask; one being recalled still makes the answer wait.
        return break_file(c, export, fid, Intent::Read, None).await;
    };
    let metric = |f: fn(&metrics::ServerCounters) -> &std::sync::atomic::AtomicU64| {
        if let Some(m) = &c.n.metrics {
            f(&m.server).fetch_add(1, Relaxed);
        }
    };
    metric(|s| &s.cb_getattr_sent);
    let (change, size) = match cb_getattr(&c.n.backchannels, &holder).await {
        Ok(v) => v,
        Err(why) => {
            metric(|s| &s.cb_getattr_failed);
            debug!(
                client = holder.client,
                why, "CB_GETATTR unanswered: recalling the write delegation"
            );
            return break_file(c, export, fid, Intent::Read, None).await;
        }
    };
    let Some(modified) =
        c.n.state
            .cb_getattr_report(&holder.stateid, change, size, attr.size)
    else {
        return Ok(());
    };
    if modified {
        // The holder wrote what the server has not seen: the file's
        // time_modify says so now (the server's own touch, no conflict).
        let (b, f) = (export.backend.clone(), *fid);
        let touched =
            c.n.run(move || {
                let set = SetAttr {
                    mtime: SetTime::ServerTime,
                    ..SetAttr::default()
                };
                b.setattr(&Cred::root(), &f, &set)
            })
            .await;
        match touched {
            Ok(a) => *attr = a,
            Err(e) => debug!(error = ?e, "could not update time_modify after CB_GETATTR"),
        }
    }
    let ans =
        c.n.state
            .cb_getattr_answer(&holder.stateid, attr::change(attr), attr.size);
    attr.size = ans.size;
    attr::set_change(attr, ans.change);
    Ok(())
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
        Ok((fid, _)) => break_file(c, export, &fid, Intent::Change, None).await,
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

/// How an OPEN came to its file, as far as delegations care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// CLAIM_NULL or CLAIM_FH: a delegation may be granted.
    Plain,
    /// CLAIM_PREVIOUS in the grace period, with the delegation type the
    /// client held before the restart.
    Reclaim(OpenDelegationType4),
    /// An open under a delegation: it gets none more.
    Other,
}

/// Which delegation an open with `access` (share access bits), `want`
/// (its OPEN4_SHARE_ACCESS_WANT_* wish) and an export allowing `allowed`
/// may have, or why none (RFC 8881 §10.4, §18.16.3): a write one for an
/// open that writes, where the export allows it; a read one for a
/// read-only open. A client that asked for one type only gets that or
/// none.
pub fn deleg_type(
    access: u32,
    want: u32,
    allowed: crate::export::Delegations,
) -> Result<DelegType, WhyNoDelegation4> {
    if !allowed.read() {
        return Err(WhyNoDelegation4::WND4_CONTENTION);
    }
    if access & ACCESS_WRITE != 0 {
        // The opener itself writes: a read delegation would promise the
        // opposite.
        if want == OPEN4_SHARE_ACCESS_WANT_READ_DELEG || !allowed.write() {
            return Err(WhyNoDelegation4::WND4_CONTENTION);
        }
        Ok(DelegType::Write)
    } else if want == OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG {
        // A read-only open is not given a write delegation (as knfsd), and
        // a client that asked for a write one is not given a read one.
        Err(WhyNoDelegation4::WND4_CONTENTION)
    } else {
        Ok(DelegType::Read)
    }
}

fn no_ace() -> Nfsace4 {
    // No access is promised beyond what ACCESS says (an empty ACE, as
    // Linux's server sends).
    Nfsace4 {
        r#type: 0,
        flag: 0,
        access_mask: 0,
        who: Bytes::new(),
    }
}

fn granted(kind: DelegType, stateid: Stateid4, recall: bool) -> OpenDelegation4 {
    match kind {
        DelegType::Read => OpenDelegation4::OPEN_DELEGATE_READ(OpenReadDelegation4 {
            stateid,
            recall,
            permissions: no_ace(),
        }),
        DelegType::Write => OpenDelegation4::OPEN_DELEGATE_WRITE(OpenWriteDelegation4 {
            stateid,
            recall,
            // The client need not flush on CLOSE for space: Tarn does not
            // reserve it, and a write that finds none fails then as any.
            space_limit: NfsSpaceLimit4::NFS_LIMIT_SIZE(u64::MAX),
            permissions: no_ace(),
        }),
        // OPEN never asks for one (GET_DIR_DELEGATION does).
        DelegType::Dir => OpenDelegation4::OPEN_DELEGATE_NONE,
    }
}

/// The delegation an OPEN of `fid` by `clientid` with `share_access`
/// gets, granted in the state core when the rules allow: a type the
/// export and the client's wish allow (see
/// [`deleg_type`]), a usable back channel (for NFSv4.0 the callback
/// path, see `cb40`), no other client in the way,
/// and room under the bound. A reclaim gets back what it names.
pub async fn on_open(
    c: &Compound<'_>,
    clientid: u64,
    share_access: u32,
    claim: Claim,
    export: &Arc<Export>,
    fid: &Fid,
    cred: &Cred,
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
    if let Claim::Reclaim(t) = claim {
        return reclaim(c, clientid, t, export, fid).await;
    }
    match want {
        OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return none_ext(WhyNoDelegation4::WND4_NOT_WANTED),
        OPEN4_SHARE_ACCESS_WANT_CANCEL => return none_ext(WhyNoDelegation4::WND4_CANCELLED),
        _ => {}
    }
    if claim != Claim::Plain {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    let access = share_access & 0xff;
    let kind = match deleg_type(access, want, export.delegations) {
        Ok(k) => k,
        Err(why) => return refuse(why),
    };
    // NFSv4.0 gets read delegations only: its GETATTR names no client, so
    // the holder's own GETATTR could not be told from another's and would
    // send it CB_GETATTR (the Linux 4.0 client refuses it, then the recall).
    if c.minor == 0 && kind == DelegType::Write {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    if c.n.backchannels.for_client(clientid).is_none() {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    }
    // A write delegation lets the client serve reads from its cache: a
    // write-only opener must be allowed to read the file too. Its CB_GETATTR
    // answers start from the file's change attribute now.
    let mut change = 0;
    if kind == DelegType::Write {
        let (b, f, cr) = (export.backend.clone(), *fid, cred.clone());
        let r =
            c.n.pool
                .run_fast(&*b.clone(), move || {
                    if access & ACCESS_READ == 0
                        && !b.access(&cr, &f, Access::READ)?.contains(Access::READ)
                    {
                        return Err(FsError::Acces);
                    }
                    b.getattr(&f).map(|a| attr::change(&a))
                })
                .await;
        match r {
            Ok(ch) => change = ch,
            Err(_) => return refuse(WhyNoDelegation4::WND4_CONTENTION),
        }
    }
    let ask = ask(c, clientid, export, fid, kind, change);
    let max = c.n.cfg.max_delegations;
    let grant = || c.n.state.grant_delegation(ask, max, c.n.clock.now());
    let Some(granted_now) = c.n.backed_grant(export, fid, kind, grant).await else {
        return refuse(WhyNoDelegation4::WND4_CONTENTION);
    };
    match granted_now {
        Ok(stateid) => {
            count_grant(c, kind);
            // Past the high-water mark the biggest holders are asked to
            // give some back.
            if c.n.state.recall_any(max) > 0 {
                c.n.apply_effects().await;
            }
            granted(kind, stateid, false)
        }
        Err(NoDeleg::Resource) => {
            if let Some(m) = &c.n.metrics {
                m.limit_reached(rpc::observe::Limit::Delegations, 1);
            }
            refuse(WhyNoDelegation4::WND4_RESOURCE)
        }
        Err(NoDeleg::Upgrade) => refuse(WhyNoDelegation4::WND4_NOT_SUPP_UPGRADE),
        Err(NoDeleg::Contention | NoDeleg::Held) => refuse(WhyNoDelegation4::WND4_CONTENTION),
    }
}

pub(super) fn count_grant(c: &Compound<'_>, kind: DelegType) {
    if let Some(m) = &c.n.metrics {
        m.server.delegations_granted.fetch_add(1, Relaxed);
        match kind {
            DelegType::Read => m.server.delegations_granted_read.fetch_add(1, Relaxed),
            DelegType::Write => m.server.delegations_granted_write.fetch_add(1, Relaxed),
            DelegType::Dir => m.server.delegations_granted_dir.fetch_add(1, Relaxed),
        };
    }
}

/// The delegation of `kind` on `fid` that `clientid` asks for, with the
/// file's handle sealed as CB_RECALL will name it.
fn ask(
    c: &Compound<'_>,
    clientid: u64,
    export: &Arc<Export>,
    fid: &Fid,
    kind: DelegType,
    change: u64,
) -> DelegAsk {
    DelegAsk {
        client: clientid,
        file: file_key(export, fid),
        fh: c.n.seal(&super::compound::Fh::Obj {
            export: export.clone(),
            fid: *fid,
        }),
        kind,
        change,
    }
}

/// OPEN CLAIM_PREVIOUS naming a delegation (RFC 8881 §10.2.1): given
/// back, pre-recalled (recall = true) when it now conflicts or the
/// client has no back channel to recall it on.
async fn reclaim(
    c: &Compound<'_>,
    clientid: u64,
    t: OpenDelegationType4,
    export: &Arc<Export>,
    fid: &Fid,
) -> OpenDelegation4 {
    let kind = match t {
        OpenDelegationType4::OPEN_DELEGATE_READ => DelegType::Read,
        OpenDelegationType4::OPEN_DELEGATE_WRITE => DelegType::Write,
        _ => return OpenDelegation4::OPEN_DELEGATE_NONE,
    };
    // NFSv4.0 reclaims get none yet: a reclaimed delegation must be
    // recallable at once, and a 4.0 client's callback path is only probed
    // after its new SETCLIENTID_CONFIRM.
    if c.minor == 0 {
        return OpenDelegation4::OPEN_DELEGATE_NONE;
    }
    let mut change = 0;
    if kind == DelegType::Write {
        let (b, f) = (export.backend.clone(), *fid);
        match c
            .n
            .pool
            .run_fast(&*b.clone(), move || b.getattr(&f).map(|a| attr::change(&a)))
            .await
        {
            Ok(ch) => change = ch,
            Err(_) => return OpenDelegation4::OPEN_DELEGATE_NONE,
        }
    }
    let callback = c.n.backchannels.for_client(clientid).is_some();
    // Backed by the file system's as a new one is; none when it refuses:
    // the client revalidates what it cached.
    let ask = ask(c, clientid, export, fid, kind, change);
    let reclaim = || c.n.state.reclaim_delegation(ask, callback, c.n.clock.now());
    let Some(r) = c.n.backed_grant(export, fid, kind, reclaim).await else {
        return OpenDelegation4::OPEN_DELEGATE_NONE;
    };
    match r {
        Ok((stateid, recall)) => {
            count_grant(c, kind);
            if recall {
                debug!(client = clientid, "delegation reclaimed pre-recalled: it conflicts now or there is no back channel");
            }
            granted(kind, stateid, recall)
        }
        Err(_) => OpenDelegation4::OPEN_DELEGATE_NONE,
    }
}
