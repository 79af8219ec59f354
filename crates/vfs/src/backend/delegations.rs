//! [`SharedDelegations`]: NFSv4 delegations backed by the file system's
//! own, for a file system that other servers (other heads) and other
//! clients change too. [`crate::cephfs::CephFs`] implements it;
//! [`crate::faulty::Faulty`] can play one. The defaults describe a file
//! system only this server changes (memory, local): no delegation of the
//! file system is needed, so every one is granted and nothing is recalled.

use crate::{Fid, FsError};

/// Delegations shared with other heads.
pub trait SharedDelegations {
    /// Whether an NFSv4 delegation on this backend's files needs one of the
    /// file system's own behind it (CephFS: other heads and other clients
    /// of the file system change files behind this server's back). When
    /// false (local and memory backends) the calls below are never needed.
    fn shares_delegations(&self) -> bool {
        false
    }
    /// Takes (or keeps) a read delegation of the file system on `fid`:
    /// until [`SharedDelegations::undelegate`], a conflicting open elsewhere waits
    /// and the recall hook is called. Ok(false): a conflicting open exists
    /// (grant none). A recalled delegation must be given back within
    /// `give_back_within` (the file system may drop the whole mount of a
    /// late holder).
    fn delegate(
        &self,
        _fid: &Fid,
        _give_back_within: std::time::Duration,
    ) -> Result<bool, FsError> {
        Ok(true)
    }
    /// Gives the file system's delegation on `fid` back (none held: nothing).
    fn undelegate(&self, _fid: &Fid) {}
    /// Asks to hear when the file system recalls a delegation taken with
    /// [`SharedDelegations::delegate`]; the hook runs on the backend's own thread and
    /// must only pass the news on. False where there are none.
    fn on_delegation_recall(&self, _hook: Box<dyn Fn(&Fid) + Send + Sync>) -> bool {
        false
    }
}
