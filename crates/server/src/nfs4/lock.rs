//! Byte-range locks: LOCK, LOCKT, LOCKU and RELEASE_LOCKOWNER, on the lock
//! manager NLM shares, so NFSv3 and NFSv4 locks on one file conflict.

use super::compound::{file_key, Compound};
use super::fail::{self, log_fail, Fail};
use super::state::SeqOwner;
use crate::locks::{Conflict, LockKind, OwnerKey};
use crate::shared_locks::Refusal;
use proto::nfs4::*;
use std::time::Instant;
use vfs::FileType;

fn kind(t: NfsLockType4) -> LockKind {
    match t {
        NfsLockType4::READ_LT | NfsLockType4::READW_LT => LockKind::Read,
        NfsLockType4::WRITE_LT | NfsLockType4::WRITEW_LT => LockKind::Write,
    }
}

/// RFC 8881 §18.10.4: a zero length, or a range past the largest offset
/// (other than "to the end", all ones), is invalid.
fn check_range(offset: u64, length: u64) -> Result<(), Fail> {
    if length == 0 || (length != u64::MAX && offset.checked_add(length).is_none()) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_INVAL,
            "lock range is empty or overflows",
        ));
    }
    Ok(())
}

fn denied(c: Conflict) -> Lock4denied {
    Lock4denied {
        offset: c.offset,
        length: c.length,
        locktype: match c.kind {
            LockKind::Read => NfsLockType4::READ_LT,
            LockKind::Write => NfsLockType4::WRITE_LT,
        },
        owner: StateOwner4 {
            clientid: c.owner.client,
            owner: c.owner.owner,
        },
    }
}

enum LockErr {
    Fail(Fail),
    Denied(Conflict),
}

impl From<Fail> for LockErr {
    fn from(f: Fail) -> Self {
        LockErr::Fail(f)
    }
}

impl From<Nfsstat4> for LockErr {
    fn from(s: Nfsstat4) -> Self {
        LockErr::Fail(s.into())
    }
}

pub async fn lock(c: &mut Compound<'_>, a: Lock4args) -> Lock4res {
    // Another client's write delegation is recalled first (its holder
    // may hold locks locally, RFC 8881 §10.4).
    if let Ok((export, fid, _)) = c.obj(Nfsstat4::NFS4ERR_ISDIR) {
        if let Err(f) =
            super::deleg::break_file(c, &export, &fid, super::deleg::Intent::Read, None).await
        {
            log_fail(c.ctx, "OP_LOCK", &f);
            return Lock4res::Default(f.status);
        }
    }
    match do_lock(c, a).await {
        Ok(sid) => {
            c.cur_sid = Some(sid.clone());
            Lock4res::NFS4_OK(Lock4resok { lock_stateid: sid })
        }
        Err(LockErr::Denied(d)) => Lock4res::NFS4ERR_DENIED(denied(d)),
        Err(LockErr::Fail(f)) => {
            log_fail(c.ctx, "OP_LOCK", &f);
            Lock4res::Default(f.status)
        }
    }
}

/// Lock owner `o`'s key. On 4.0 its clientid must be good: one from an
/// earlier server instance is STALE, one expired EXPIRED (RFC 7530
/// §16.10.5, §16.11.5), and using a good one renews its lease. On 4.1 the
/// session names the client.
fn owner_key(c: &Compound<'_>, o: &LockOwner4, now: Instant) -> Result<OwnerKey, Fail> {
    let client = if c.minor == 0 {
        c.n.state.renew(o.clientid, now)?;
        o.clientid
    } else {
        c.clientid()?
    };
    Ok(OwnerKey {
        client,
        owner: o.owner.clone(),
    })
}

async fn do_lock(c: &mut Compound<'_>, a: Lock4args) -> Result<Stateid4, LockErr> {
    check_range(a.offset, a.length)?;
    let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
    let key = file_key(&export, &fid);
    let st = &c.n.state;
    let now = c.n.clock.now();
    let (other, owner, fresh) = match &a.locker {
        Locker4::TRUE(o) => {
            let open = c.stateid(&o.open_stateid)?;
            let owner = owner_key(c, &o.lock_owner, now)?;
            let (other, seqid) = st.lock_state_from_open(&open, &key, &owner, c.minor)?;
            (other, owner, seqid == 0)
        }
        Locker4::FALSE(e) => {
            let sid = c.stateid(&e.lock_stateid)?;
            let owner = st.lock_state(&sid, &key, c.minor)?;
            (sid.other, owner, false)
        }
    };
    // A write lock through an open that cannot write: POSIX refuses it
    // (EBADF), and RFC 7530 §16.10.5 / RFC 8881 §18.10.4 name
    // NFS4ERR_OPENMODE for it.
    let r = if kind(a.locktype) == LockKind::Write
        && st
            .lock_open_access(&other)
            .is_some_and(|acc| acc & super::state::ACCESS_WRITE == 0)
    {
        Err(Fail::new(
            Nfsstat4::NFS4ERR_OPENMODE,
            "write lock through an open without write access",
        )
        .into())
    } else {
        take_lock(c, &a, key, &owner, now).await
    };
    if r.is_err() && fresh {
        // A lock owner introduced by a LOCK that failed keeps no stateid.
        st.free_stateid(owner.client, &Stateid4 { seqid: 0, other });
    }
    if let (Ok(()), 0, Locker4::TRUE(o)) = (&r, c.minor, &a.locker) {
        // NFSv4.0: the lock owner's own seqids start here.
        st.seq_begin(
            owner.client,
            SeqOwner {
                owner: owner.owner.clone(),
                lock: true,
            },
            o.lock_seqid,
        );
    }
    r.map(|()| st.bump(&other))
}

/// The grace and conflict checks of LOCK, then the lock itself: in the
/// lock manager, then in a backend that keeps locks for every head
/// (CephFS). (An NFSv4.0 lease was renewed already: a new lock owner's
/// clientid in `do_lock`, an existing lock stateid's client by the
/// dispatcher.)
async fn take_lock(
    c: &Compound<'_>,
    a: &Lock4args,
    key: crate::locks::FileKey,
    owner: &OwnerKey,
    now: Instant,
) -> Result<(), LockErr> {
    let st = &c.n.state;
    if a.reclaim {
        st.may_reclaim(owner.client, now)?;
    } else if st.locks_in_grace(now) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_GRACE,
            "grace period: only reclaims are allowed",
        )
        .into());
    } else {
        st.reclaim_done(owner.client)
            .map_err(|s| Fail::new(s, "no RECLAIM_COMPLETE yet (RFC 8881 §18.51.3)"))?;
    }
    let r = kind(a.locktype).range(a.offset, a.length);
    let prev = st.locks.held_in(key, owner, a.offset, a.length);
    st.locks.lock(key, owner, r).map_err(LockErr::Denied)?;
    match c.n.shared.take(key, owner, r, prev).await {
        Ok(()) => Ok(()),
        // No head grants new locks during grace, so what holds it is the
        // session of a head that failed, until the MDS ends it: the
        // client tries again.
        Err(Refusal::Held(_)) if a.reclaim => Err(Fail::new(
            Nfsstat4::NFS4ERR_DELAY,
            "reclaim: the lock is still held in CephFS by a failed head's session",
        )
        .into()),
        Err(Refusal::Held(d)) => Err(LockErr::Denied(d)),
        Err(Refusal::Failed(e)) => {
            Err(Fail::new(fail::status(e), "the backend failed to take the lock").into())
        }
    }
}

pub async fn lockt(c: &mut Compound<'_>, a: Lockt4args) -> Lockt4res {
    if let Err(f) = lockable(c).await {
        log_fail(c.ctx, "OP_LOCKT", &f);
        return Lockt4res::Default(f.status);
    }
    let r = match lockt_local(c, &a) {
        Ok((key, owner)) => {
            c.n.shared
                .test(key, &owner, kind(a.locktype).range(a.offset, a.length))
                .await
                .map_err(|r| match r {
                    Refusal::Held(d) => LockErr::Denied(d),
                    Refusal::Failed(e) => LockErr::Fail(Fail::new(
                        fail::status(e),
                        "the backend failed to test the lock",
                    )),
                })
        }
        Err(e) => Err(e),
    };
    match r {
        Ok(()) => Lockt4res::NFS4_OK,
        Err(LockErr::Denied(d)) => Lockt4res::NFS4ERR_DENIED(denied(d)),
        Err(LockErr::Fail(f)) => {
            log_fail(c.ctx, "OP_LOCKT", &f);
            Lockt4res::Default(f.status)
        }
    }
}

/// LOCKT's checks and the lock manager's answer; the file and owner to ask
/// the backend about when the manager sees no conflict.
fn lockt_local(
    c: &Compound<'_>,
    a: &Lockt4args,
) -> Result<(crate::locks::FileKey, OwnerKey), LockErr> {
    {
        check_range(a.offset, a.length)?;
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let owner = owner_key(c, &a.owner, c.n.clock.now())?;
        if c.n.state.in_grace(c.n.clock.now()) {
            return Err(LockErr::Fail(Fail::new(
                Nfsstat4::NFS4ERR_GRACE,
                "grace period",
            )));
        }
        let key = file_key(&export, &fid);
        c.n.state
            .locks
            .test(key, &owner, kind(a.locktype).range(a.offset, a.length))
            .map_err(LockErr::Denied)?;
        Ok((key, owner))
    }
}

pub async fn locku(c: &mut Compound<'_>, a: Locku4args) -> Locku4res {
    let r = (|| {
        check_range(a.offset, a.length)?;
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let key = file_key(&export, &fid);
        let sid = c.stateid(&a.lock_stateid)?;
        let owner = c.n.state.lock_state(&sid, &key, c.minor)?;
        c.n.state.locks.unlock(key, &owner, a.offset, a.length);
        Ok::<_, Fail>((c.n.state.bump(&sid.other), key, owner))
    })();
    match r {
        Ok((sid, key, owner)) => {
            // Released in CephFS before the client hears of it: it may ask
            // another head for the range next.
            c.n.shared.release(key, &owner, a.offset, a.length).await;
            c.cur_sid = Some(sid.clone());
            Locku4res::NFS4_OK(sid)
        }
        Err(f) => {
            log_fail(c.ctx, "OP_LOCKU", &f);
            Locku4res::Default(f.status)
        }
    }
}

/// NFSv4.0 only: forget a lock owner that holds no locks.
pub fn release_lockowner(c: &mut Compound<'_>, a: ReleaseLockowner4args) -> ReleaseLockowner4res {
    let owner = OwnerKey {
        client: a.lock_owner.clientid,
        owner: a.lock_owner.owner.clone(),
    };
    let status = if c.n.state.locks.owner_holds(&owner) {
        Nfsstat4::NFS4ERR_LOCKS_HELD
    } else {
        Nfsstat4::NFS4_OK
    };
    ReleaseLockowner4res { status }
}

/// Only regular files hold byte-range locks. LOCK needs an open stateid,
/// which only regular files get, but LOCKT names just the current
/// filehandle, so it checks the type itself: a directory is NFS4ERR_ISDIR,
/// a symlink NFS4ERR_SYMLINK, anything else NFS4ERR_WRONG_TYPE
/// (RFC 8881 §15.1.2), which NFSv4.0 lacks: NFS4ERR_INVAL there
/// (RFC 7530 §13.1). The Linux server answers the same.
async fn lockable(c: &Compound<'_>) -> Result<(), Fail> {
    let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
    let b = export.backend.clone();
    let attr =
        c.n.pool
            .run_fast(&*b.clone(), move || b.getattr(&fid))
            .await?;
    let (status, why) = match attr.ftype {
        FileType::Regular => return Ok(()),
        FileType::Directory => (Nfsstat4::NFS4ERR_ISDIR, "LOCKT on a directory"),
        FileType::Symlink => (Nfsstat4::NFS4ERR_SYMLINK, "LOCKT on a symbolic link"),
        _ if c.minor == 0 => (Nfsstat4::NFS4ERR_INVAL, "LOCKT on a special file"),
        _ => (Nfsstat4::NFS4ERR_WRONG_TYPE, "LOCKT on a special file"),
    };
    Err(Fail::new(status, why))
}
