//! NFSv4.0 open and lock owners and their seqids (RFC 7530 §9.1.7).
//!
//! A seqid-mutating operation (OPEN, OPEN_CONFIRM, CLOSE, LOCK, LOCKU)
//! carries its owner's next seqid; the server takes them strictly in
//! order, so each owner has a lock held from building the request until
//! its reply has moved the seqid on. The seqid moves on whenever the
//! operation was executed, whatever its status, except for the statuses
//! that say the server could not tell whose request it was.

use proto::nfs4::{NfsOpnum4, Nfsstat4, StateOwner4, Stateid4};
use tokio::sync::Mutex;

/// An open owner: its name and next seqid.
#[derive(Debug)]
pub struct OpenOwner {
    pub owner: StateOwner4,
    pub(crate) seqid: Mutex<u32>,
}

/// What a lock owner knows: its next seqid and, once its first LOCK has
/// succeeded, its lock stateid (a lock owner here serves one file).
#[derive(Debug, Default)]
pub(crate) struct LockState {
    pub(crate) seqid: u32,
    pub(crate) stateid: Option<Stateid4>,
}

#[derive(Debug)]
pub struct LockOwner {
    pub owner: StateOwner4,
    pub(crate) state: Mutex<LockState>,
}

impl OpenOwner {
    pub fn new(owner: StateOwner4) -> OpenOwner {
        OpenOwner {
            owner,
            seqid: Mutex::new(0),
        }
    }

    /// The seqid its next operation will carry.
    pub async fn next_seqid(&self) -> u32 {
        *self.seqid.lock().await
    }
}

impl LockOwner {
    pub fn new(owner: StateOwner4) -> LockOwner {
        LockOwner {
            owner,
            state: Mutex::new(LockState::default()),
        }
    }

    /// The lock stateid, once a lock was granted.
    pub async fn stateid(&self) -> Option<Stateid4> {
        self.state.lock().await.stateid.clone()
    }
}

/// Whether an executed seqid-mutating operation that returned `status`
/// moved its owner's seqid on.
pub fn advances(status: Nfsstat4) -> bool {
    use Nfsstat4::*;
    !matches!(
        status,
        NFS4ERR_STALE_CLIENTID
            | NFS4ERR_STALE_STATEID
            | NFS4ERR_BAD_STATEID
            | NFS4ERR_BAD_SEQID
            | NFS4ERR_BADXDR
            | NFS4ERR_RESOURCE
            | NFS4ERR_NOFILEHANDLE
            | NFS4ERR_MOVED
    )
}

/// The status of operation `op` in a reply, if the server got to it.
pub fn status_of(res: &proto::nfs4::Compound4res, op: NfsOpnum4) -> Option<Nfsstat4> {
    res.resarray
        .iter()
        .map(crate::nfs4::error::op_status)
        .find(|(o, _)| *o == op)
        .map(|(_, s)| s)
}

/// Moves `seqid` on if the reply says `op` was executed with a status
/// that advances it.
pub fn after(seqid: &mut u32, res: &proto::nfs4::Compound4res, op: NfsOpnum4) {
    if status_of(res, op).is_some_and(advances) {
        *seqid = seqid.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::nfs4::*;

    fn reply(results: Vec<NfsResop4>, status: Nfsstat4) -> Compound4res {
        Compound4res {
            status,
            tag: Default::default(),
            resarray: results,
        }
    }

    #[test]
    fn seqid_moves_on_unless_the_op_was_not_its_owners() {
        let close = |s| NfsResop4::OP_CLOSE(Close4res::Default(s));
        let putfh = |s| NfsResop4::OP_PUTFH(Putfh4res { status: s });
        // A CLOSE's reply with these results and status, after which `q`
        // has moved on or not.
        let close_reply = |q: &mut u32, results, status| {
            after(q, &reply(results, status), NfsOpnum4::OP_CLOSE);
        };
        let mut q = 5;
        close_reply(
            &mut q,
            vec![putfh(Nfsstat4::NFS4_OK), close(Nfsstat4::NFS4ERR_DELAY)],
            Nfsstat4::NFS4ERR_DELAY,
        );
        assert_eq!(q, 6, "DELAY was executed: the seqid moves on");
        close_reply(
            &mut q,
            vec![putfh(Nfsstat4::NFS4_OK), close(Nfsstat4::NFS4ERR_BAD_SEQID)],
            Nfsstat4::NFS4ERR_BAD_SEQID,
        );
        assert_eq!(q, 6, "BAD_SEQID: not");
        close_reply(
            &mut q,
            vec![putfh(Nfsstat4::NFS4ERR_STALE)],
            Nfsstat4::NFS4ERR_STALE,
        );
        assert_eq!(q, 6, "never reached: not");
        assert!(advances(Nfsstat4::NFS4ERR_DENIED));
        assert!(!advances(Nfsstat4::NFS4ERR_STALE_CLIENTID));
    }
}
