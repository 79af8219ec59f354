//! The backend contract, split by what a backend can do.
//!
//! [`Core`] is what every backend must have: the namespace, attributes,
//! read/write/commit and directory listing. The capability traits carry
//! the rest, each with default methods that give the "not supported" (or
//! "nothing to do") answer, written once here; a backend implements a
//! capability trait with an empty `impl` when it lacks the capability and
//! overrides what it can:
//!
//! | trait | for | memory | local | cephfs | faulty (wrapper) |
//! | --- | --- | --- | --- | --- | --- |
//! | [`Core`] | namespace, attributes, I/O, readdir | yes | yes | yes | passes on, injects faults |
//! | [`SharedLocks`] | byte-range locks kept by the file system for other heads | - | - | yes | - |
//! | [`SharedDelegations`] | delegations backed by the file system's own | - | - | yes | passes on, or plays one |
//! | [`Space`] | SEEK, ALLOCATE/DEALLOCATE, COPY, CLONE, IO_ADVISE | seek, allocate, deallocate, copy | all | seek, deallocate | passes seek, allocate, deallocate on |
//! | [`Xattrs`] | user extended attributes | yes | yes | yes | passes `xattr_support` on |
//! | [`ChangeNotify`] | hearing of changes made other than through the server | - | yes | - | passes on |
//!
//! Logic several backends share (CREATE's rules, MKNOD's mode, FSSTAT from
//! statvfs, xattr flags and lists) sits in `shared.rs`, written once.
//!
//! [`Backend`] is all of them together; every type with all six is one
//! (a blanket impl), so `Arc<dyn Backend>` reaches every method.

mod core;
mod delegations;
mod locks;
mod notify;
mod shared;
mod space;
mod xattrs;

pub use self::core::{reply_room, Core};
pub use delegations::SharedDelegations;
pub use locks::{LockType, RangeLock, SharedLocks};
pub use notify::ChangeNotify;
pub(crate) use shared::{
    check_xattr_value, fsstat_of, ranges_overlap, special_node, user_xattr_names, verifier_times,
    xattr_flags,
};
pub use space::{Advice, SeekWhat, Space};
pub use xattrs::{
    user_xattr_name, XattrSet, Xattrs, XATTR_NAME_MAX, XATTR_SIZE_MAX, XATTR_USER_PREFIX,
};

/// A storage backend: the [`Core`] contract and every capability trait.
/// See the crate docs for shared semantics.
pub trait Backend: Core + SharedLocks + SharedDelegations + Space + Xattrs + ChangeNotify {}

impl<T> Backend for T where
    T: ?Sized + Core + SharedLocks + SharedDelegations + Space + Xattrs + ChangeNotify
{
}

/// Every backend trait, for calling their methods on a concrete backend
/// (`use vfs::prelude::*`); `dyn Backend` needs none of them in scope.
pub mod prelude {
    pub use super::{Backend, ChangeNotify, Core, SharedDelegations, SharedLocks, Space, Xattrs};
}
