//! [`Xattrs`]: user extended attributes (NFSv4.2, RFC 8276). The defaults
//! say the backend has none (`NotSupp`). Implemented by
//! [`crate::memory::MemFs`], [`crate::local::LocalFs`] and
//! [`crate::cephfs::CephFs`]; [`crate::faulty::Faulty`] passes on only
//! `xattr_support`.

use crate::{Cred, Fid, FsError};

/// User extended attributes.
pub trait Xattrs {
    /// Whether the objects of this backend can carry user extended
    /// attributes (the NFSv4.2 xattr_support attribute).
    fn xattr_support(&self) -> bool {
        false
    }
    /// The value of the user extended attribute `name` (given without the
    /// `user.` prefix, as NFSv4.2 names them). `NoXattr` when there is
    /// none. Needs read permission.
    fn getxattr(&self, _cred: &Cred, _fid: &Fid, _name: &[u8]) -> Result<Vec<u8>, FsError> {
        Err(FsError::NotSupp)
    }
    /// Sets the user extended attribute `name` (without `user.`) to
    /// `value`; `how` says whether it must or must not exist already
    /// (`NoXattr`, `Exist`). Needs write permission.
    fn setxattr(
        &self,
        _cred: &Cred,
        _fid: &Fid,
        _name: &[u8],
        _value: &[u8],
        _how: XattrSet,
    ) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
    /// The names of the object's user extended attributes, without the
    /// `user.` prefix, in an order that stays the same while they do.
    /// Needs read permission.
    fn listxattrs(&self, _cred: &Cred, _fid: &Fid) -> Result<Vec<Vec<u8>>, FsError> {
        Err(FsError::NotSupp)
    }
    /// Removes the user extended attribute `name` (without `user.`);
    /// `NoXattr` when there is none. Needs write permission.
    fn removexattr(&self, _cred: &Cred, _fid: &Fid, _name: &[u8]) -> Result<(), FsError> {
        Err(FsError::NotSupp)
    }
}

/// What [`Xattrs::setxattr`] requires of an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Create it or replace it.
    Either,
    /// Fail with `Exist` if it exists (XATTR_CREATE).
    Create,
    /// Fail with `NoXattr` if it does not (XATTR_REPLACE).
    Replace,
}

/// The namespace every NFSv4.2 extended attribute lives in (RFC 8276:
/// the protocol's names are user attributes, without this prefix; Linux
/// knfsd adds it the same way).
pub const XATTR_USER_PREFIX: &[u8] = b"user.";
/// Longest attribute name Linux takes, prefix included (XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest attribute value Linux takes (XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 65536;

/// The full name (`user.` + `name`) of an NFSv4.2 attribute name, once it
/// is one the backend can take: not empty (Inval), no NUL byte (Inval),
/// not past XATTR_NAME_MAX with the prefix (NameTooLong).
pub fn user_xattr_name(name: &[u8]) -> Result<Vec<u8>, FsError> {
    if name.is_empty() || name.contains(&0) {
        return Err(FsError::Inval);
    }
    if name.len() > XATTR_NAME_MAX - XATTR_USER_PREFIX.len() {
        return Err(FsError::NameTooLong);
    }
    let mut full = Vec::with_capacity(XATTR_USER_PREFIX.len() + name.len());
    full.extend_from_slice(XATTR_USER_PREFIX);
    full.extend_from_slice(name);
    Ok(full)
}
