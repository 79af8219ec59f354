//! [`SharedLocks`]: byte-range locks also kept by the file system, where
//! other heads serving it see them. [`crate::cephfs::CephFs`] implements
//! it; for the others (memory, local) the server's lock manager is the
//! whole truth and the defaults do nothing.

use crate::{Fid, FsError};

/// The kind of a byte-range lock taken in the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockType {
    Read,
    Write,
}

/// A lock that stands in the way in the backend (held by another head or
/// another client of the file system). `length` is `u64::MAX` to end of file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeLock {
    pub offset: u64,
    pub length: u64,
    pub kind: LockType,
}

/// Byte-range locks shared with other heads.
pub trait SharedLocks {
    /// Whether byte-range locks are also kept by the file system itself,
    /// where other servers of it see them (CephFS: every head). When false
    /// (local and memory backends) the server's lock manager is the whole
    /// truth and the three calls below are never needed (they do nothing).
    fn shares_locks(&self) -> bool {
        false
    }
    /// Takes, upgrades or downgrades `owner`'s POSIX lock on `offset`,
    /// `length` (`u64::MAX`: to end of file) without waiting. `Ok(Some)`:
    /// refused, naming one conflicting lock held elsewhere; nothing
    /// changed then. `owner` names the lock owner within this server:
    /// different owners conflict with each other, as processes do.
    fn lock_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _kind: LockType,
        _offset: u64,
        _length: u64,
    ) -> Result<Option<RangeLock>, FsError> {
        Ok(None)
    }
    /// Whether [`SharedLocks::lock_range`] would be refused now, and by what;
    /// changes nothing.
    fn test_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _kind: LockType,
        _offset: u64,
        _length: u64,
    ) -> Result<Option<RangeLock>, FsError> {
        Ok(None)
    }
    /// Releases `owner`'s locks on the range (splitting as POSIX does);
    /// releasing what is not held is not an error.
    fn unlock_range(
        &self,
        _fid: &Fid,
        _owner: u64,
        _offset: u64,
        _length: u64,
    ) -> Result<(), FsError> {
        Ok(())
    }
}
