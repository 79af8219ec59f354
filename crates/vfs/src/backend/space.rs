//! [`Space`]: the NFSv4.2 data operations beyond read and write (SEEK,
//! ALLOCATE, DEALLOCATE, COPY, CLONE, IO_ADVISE). Every default answers
//! `NotSupp`. [`crate::local::LocalFs`] implements all of them;
//! [`crate::memory::MemFs`] seek, allocate, deallocate and copy_range;
//! [`crate::cephfs::CephFs`] seek and deallocate; [`crate::faulty::Faulty`]
//! passes seek, allocate and deallocate on.

use crate::{Cred, Fid, FsError};

/// Space and data placement of a file's contents.
pub trait Space {
    /// The first offset at or after `offset` where `what` begins, as
    /// lseek(2) SEEK_DATA/SEEK_HOLE answers: every file ends in an implicit
    /// hole, so a hole is always found at or below the size. `NxIo` when
    /// `offset` is at or past the end, or no data follows it. Needs read
    /// permission.
    fn seek(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _offset: u64,
        _what: SeekWhat,
    ) -> Result<u64, FsError> {
        Err(FsError::NotSupp)
    }
    /// Reserves space for `len` bytes at `offset` (fallocate(2) mode 0):
    /// later writes there do not fail for lack of space, and the size
    /// grows to cover the range. Needs write permission.
    fn allocate(&self, _cred: &Cred, _fid: &Fid, _offset: u64, _len: u64) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Frees `len` bytes at `offset` (fallocate(2) PUNCH_HOLE|KEEP_SIZE):
    /// the range reads as zeros afterwards and the size does not change.
    /// Needs write permission.
    fn deallocate(&self, _cred: &Cred, _fid: &Fid, _offset: u64, _len: u64) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Copies up to `len` bytes of `src` at `src_off` into `dst` at
    /// `dst_off` within this backend (copy_file_range(2)); returns the
    /// bytes copied, fewer than `len` only where the source ends. Needs
    /// read permission on `src` and write permission on `dst`; an
    /// overlapping range of one file is `Inval`.
    #[allow(clippy::too_many_arguments)]
    fn copy_range(
        &self,
        _cred: &Cred,
        _src: &Fid,
        _src_off: u64,
        _dst: &Fid,
        _dst_off: u64,
        _len: u64,
    ) -> Result<u64, FsError> {
        Err(FsError::NotSupp)
    }
    /// Makes `dst` at `dst_off` share `src`'s storage from `src_off` for
    /// `len` bytes (0: to the source's end), as the FICLONERANGE ioctl
    /// does; `NotSupp` where the backend cannot share storage. Permissions
    /// as for [`Space::copy_range`].
    #[allow(clippy::too_many_arguments)]
    fn clone_range(
        &self,
        _cred: &Cred,
        _src: &Fid,
        _src_off: u64,
        _dst: &Fid,
        _dst_off: u64,
        _len: u64,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// Passes an access-pattern hint for `len` bytes at `offset` (0: to
    /// the end) to the backend's cache, as posix_fadvise(2); `NotSupp`
    /// when the backend has no use for it. Needs read permission.
    fn advise(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _offset: u64,
        _len: u64,
        _advice: Advice,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
}

/// A hint for [`Space::advise`], as posix_fadvise(2) takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    Normal,
    Sequential,
    Random,
    WillNeed,
    DontNeed,
    NoReuse,
}

/// What [`Space::seek`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}
