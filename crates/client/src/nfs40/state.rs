//! NFSv4.0 state: OPEN (confirmed with OPEN_CONFIRM when the server asks),
//! CLOSE, LOCK, LOCKU and LOCKT. Each seqid-mutating request is built,
//! sent and its reply read with its owner's seqid held, so an owner's
//! requests reach the server one at a time and in order; NFS4ERR_DELAY
//! and NFS4ERR_GRACE are retried with the next seqid (they moved it on).

use super::client::{pause, try_again, Client40};
use super::owner::{after, LockOwner, OpenOwner};
use crate::nfs4::check;
use crate::nfs4::error::{Error, Result};
use crate::nfs4::plain::{self, name, putfh, take};
use proto::nfs4::*;
use std::time::{Duration, Instant};

/// An open file: its handle, the open stateid (confirmed), OPEN's result.
#[derive(Clone, Debug)]
pub struct Open40 {
    pub fh: NfsFh4,
    pub stateid: Stateid4,
    pub res: Open4resok,
}

impl Client40 {
    /// Sends what `build` makes of the seqid `*seqid`, again with the next
    /// one while the server answers DELAY or GRACE (until the deadline);
    /// `*seqid` follows what operation `op` did. The caller holds the
    /// owner's lock around this.
    async fn sequenced(
        &self,
        seqid: &mut u32,
        op: NfsOpnum4,
        mut build: impl FnMut(u32) -> Vec<NfsArgop4>,
    ) -> Result<Compound4res> {
        let deadline: Instant = self.retry_deadline();
        let mut p = Duration::from_millis(5);
        loop {
            let res = self.conn().compound(0, build(*seqid)).await?;
            after(seqid, &res, op);
            if !try_again(res.status) || Instant::now() >= deadline {
                return Ok(res);
            }
            pause(&mut p).await;
        }
    }

    /// OPEN by name with the client's default open owner, no share denial.
    /// `create`: Some(mode) creates the file if missing (UNCHECKED4).
    pub async fn open(
        &self,
        dir: &NfsFh4,
        n: &str,
        create: Option<u32>,
        access: u32,
    ) -> Result<Open40> {
        let how = plain::open_how(create);
        let owner = self.open_owner().clone();
        self.open_with(&owner, dir, n, how, access, OPEN4_SHARE_DENY_NONE)
            .await
    }

    /// OPEN (CLAIM_NULL) and GETFH, then OPEN_CONFIRM if the server asks
    /// (a new owner's first open). A delegation, which this client never
    /// asked for, is returned at once.
    pub async fn open_with(
        &self,
        owner: &OpenOwner,
        dir: &NfsFh4,
        n: &str,
        openhow: Openflag4,
        share_access: u32,
        share_deny: u32,
    ) -> Result<Open40> {
        let mut seqid = owner.seqid.lock().await;
        let res = self
            .sequenced(&mut seqid, NfsOpnum4::OP_OPEN, |seqid| {
                vec![
                    putfh(dir),
                    NfsArgop4::OP_OPEN(Open4args {
                        seqid,
                        share_access,
                        share_deny,
                        owner: owner.owner.clone(),
                        openhow: openhow.clone(),
                        claim: OpenClaim4::CLAIM_NULL(name(n)),
                    }),
                    NfsArgop4::OP_GETFH,
                ]
            })
            .await?;
        check(&res)?;
        let mut r = res.resarray;
        let fh = take!(r.pop(), "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)?;
        let ok = take!(r, "OPEN", NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => ok)?;
        let mut stateid = ok.stateid.clone();
        if ok.rflags & OPEN4_RESULT_CONFIRM != 0 {
            let sid = stateid.clone();
            let res = self
                .sequenced(&mut seqid, NfsOpnum4::OP_OPEN_CONFIRM, |seqid| {
                    vec![
                        putfh(&fh),
                        NfsArgop4::OP_OPEN_CONFIRM(OpenConfirm4args {
                            open_stateid: sid.clone(),
                            seqid,
                        }),
                    ]
                })
                .await?;
            check(&res)?;
            stateid = take!(res.resarray, "OPEN_CONFIRM",
                NfsResop4::OP_OPEN_CONFIRM(OpenConfirm4res::NFS4_OK(ok)) => ok.open_stateid)?;
        }
        drop(seqid);
        let deleg = match &ok.delegation {
            OpenDelegation4::OPEN_DELEGATE_READ(d) => Some(d.stateid.clone()),
            OpenDelegation4::OPEN_DELEGATE_WRITE(d) => Some(d.stateid.clone()),
            _ => None,
        };
        if let Some(d) = deleg {
            // Without a callback path the server could never recall it.
            let _ = self
                .call(vec![
                    putfh(&fh),
                    NfsArgop4::OP_DELEGRETURN(Delegreturn4args { deleg_stateid: d }),
                ])
                .await;
        }
        Ok(Open40 {
            fh,
            stateid,
            res: ok,
        })
    }

    /// CLOSE of a file opened by the default open owner.
    pub async fn close(&self, fh: &NfsFh4, stateid: &Stateid4) -> Result<Stateid4> {
        let owner = self.open_owner().clone();
        self.close_as(&owner, fh, stateid).await
    }

    pub async fn close_as(
        &self,
        owner: &OpenOwner,
        fh: &NfsFh4,
        stateid: &Stateid4,
    ) -> Result<Stateid4> {
        let mut seqid = owner.seqid.lock().await;
        let res = self
            .sequenced(&mut seqid, NfsOpnum4::OP_CLOSE, |seqid| {
                vec![
                    putfh(fh),
                    NfsArgop4::OP_CLOSE(Close4args {
                        seqid,
                        open_stateid: stateid.clone(),
                    }),
                ]
            })
            .await?;
        check(&res)?;
        take!(res.resarray, "CLOSE", NfsResop4::OP_CLOSE(Close4res::NFS4_OK(s)) => s)
    }

    /// LOCK by `lock` on the file opened as `open` by `owner`: its first
    /// lock introduces it with the open stateid (sequenced by the open
    /// owner), later ones use its lock stateid. Ok(Err(denied)) when
    /// another owner holds a conflicting lock. A lock owner whose first
    /// LOCK was denied is best not used again (servers differ on whether
    /// they kept it).
    #[allow(clippy::too_many_arguments)]
    pub async fn lock(
        &self,
        owner: &OpenOwner,
        open: &Open40,
        lock: &LockOwner,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
    ) -> Result<std::result::Result<Stateid4, Lock4denied>> {
        // Open owner first, then lock owner, as everywhere: no deadlock.
        let mut open_seqid = owner.seqid.lock().await;
        let mut st = lock.state.lock().await;
        let mk = |locker| plain::lock_ops(&open.fh, locker, locktype, offset, length);
        let res = match st.stateid.clone() {
            None => {
                let first = st.seqid;
                let res = self
                    .sequenced(&mut open_seqid, NfsOpnum4::OP_LOCK, |seqid| {
                        mk(Locker4::TRUE(OpenToLockOwner4 {
                            open_seqid: seqid,
                            open_stateid: open.stateid.clone(),
                            lock_seqid: first,
                            lock_owner: lock.owner.clone(),
                        }))
                    })
                    .await?;
                if let Some(NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok))) = res.resarray.last() {
                    // Its sequence starts at the lock_seqid it was introduced with.
                    st.seqid = first.wrapping_add(1);
                    st.stateid = Some(ok.lock_stateid.clone());
                }
                res
            }
            Some(sid) => {
                drop(open_seqid);
                let mut seqid = st.seqid;
                let res = self
                    .sequenced(&mut seqid, NfsOpnum4::OP_LOCK, |seqid| {
                        mk(Locker4::FALSE(ExistLockOwner4 {
                            lock_stateid: sid.clone(),
                            lock_seqid: seqid,
                        }))
                    })
                    .await?;
                st.seqid = seqid;
                if let Some(NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok))) = res.resarray.last() {
                    st.stateid = Some(ok.lock_stateid.clone());
                }
                res
            }
        };
        plain::lock_result(res)
    }

    /// LOCKU of a range `lock` holds.
    pub async fn locku(
        &self,
        fh: &NfsFh4,
        lock: &LockOwner,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4> {
        let mut st = lock.state.lock().await;
        let sid = st
            .stateid
            .clone()
            .ok_or_else(|| Error::Protocol("LOCKU: the lock owner holds no lock stateid".into()))?;
        let mut seqid = st.seqid;
        let res = self
            .sequenced(&mut seqid, NfsOpnum4::OP_LOCKU, |seqid| {
                vec![
                    putfh(fh),
                    NfsArgop4::OP_LOCKU(Locku4args {
                        locktype,
                        seqid,
                        lock_stateid: sid.clone(),
                        offset,
                        length,
                    }),
                ]
            })
            .await?;
        st.seqid = seqid;
        check(&res)?;
        let s = take!(res.resarray, "LOCKU", NfsResop4::OP_LOCKU(Locku4res::NFS4_OK(s)) => s)?;
        st.stateid = Some(s.clone());
        Ok(s)
    }

    /// RELEASE_LOCKOWNER: the server may forget a lock owner that holds
    /// no locks (RFC 7530 §16.37), as one does with a denied first LOCK.
    pub async fn release_lock_owner(&self, lock: &LockOwner) -> Result<()> {
        self.call(vec![NfsArgop4::OP_RELEASE_LOCKOWNER(
            ReleaseLockowner4args {
                lock_owner: lock.owner.clone(),
            },
        )])
        .await?;
        Ok(())
    }
}
