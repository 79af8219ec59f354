//! Permission from mode bits alone, for backends that cannot ask the
//! kernel as the caller (the in-memory one; CephFS's ACCESS answers).

use crate::{Attr, Cred, FileType};

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
