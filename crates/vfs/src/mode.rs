//! Permission from mode bits alone, for backends that cannot ask the
//! kernel as the caller (the in-memory one; CephFS's ACCESS answers).

use crate::{Access, Attr, Cred, FileType};

pub(crate) const R: u32 = 4;
pub(crate) const W: u32 = 2;
pub(crate) const X: u32 = 1;

/// Whether `cred` may do `want` (R/W/X bits) to `a`: root may do all but
/// execute a file nobody may execute.
pub(crate) fn may(cred: &Cred, a: &Attr, want: u32) -> bool {
    if cred.uid == 0 {
        return want & X == 0 || a.ftype == FileType::Directory || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        a.mode >> 6
    } else if cred.in_group(a.gid) {
        a.mode >> 3
    } else {
        a.mode
    } & 7;
    bits & want == want
}

/// The ACCESS bits of `want` that `cred` has on `a` by its mode bits
/// (a directory's MODIFY, EXTEND and DELETE need write and search).
pub(crate) fn access(cred: &Cred, a: &Attr, want: Access) -> Access {
    let table: &[(Access, u32)] = if a.ftype == FileType::Directory {
        &[
            (Access::READ, R),
            (Access::LOOKUP, X),
            (Access::MODIFY, W | X),
            (Access::EXTEND, W | X),
            (Access::DELETE, W | X),
        ]
    } else {
        &[
            (Access::READ, R),
            (Access::MODIFY, W),
            (Access::EXTEND, W),
            (Access::EXECUTE, X),
        ]
    };
    let mut ok = Access::empty();
    for &(bit, m) in table {
        if want.contains(bit) && may(cred, a, m) {
            ok |= bit;
        }
    }
    ok
}
