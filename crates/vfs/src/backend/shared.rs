//! Behaviour the backends share, written once: what CREATE does with the
//! name it is asked for ([`CreateHow::for_new_file`],
//! [`CreateHow::on_existing`], [`verifier_times`]), MKNOD's mode
//! ([`special_node`]), `fsstat` from a
//! statvfs(3) ([`fsstat_of`]), and the user-xattr details of the backends
//! that keep them in a real file system ([`xattr_flags`],
//! [`check_xattr_value`], [`user_xattr_names`]).

use crate::{Attr, CreateHow, FileType, FsError, FsStat, SetAttr, Timespec};
use crate::{XattrSet, XATTR_SIZE_MAX, XATTR_USER_PREFIX};

impl CreateHow {
    /// The mode a new file is created with (0o644 unless the client set
    /// one; 0o600 for an exclusive create, whose attributes come in a
    /// SETATTR afterwards) and the attributes set on it after.
    pub(crate) fn for_new_file(&self) -> (u32, SetAttr) {
        match self {
            CreateHow::Unchecked(s) | CreateHow::Guarded(s) => (s.mode.unwrap_or(0o644), s.clone()),
            CreateHow::Exclusive(_) => (0o600, SetAttr::default()),
        }
    }

    /// What a create does when the name exists already, judged on the
    /// existing object's attributes: `Exist` (guarded; another verifier
    /// or not a regular file), else Ok with the size to set first (an
    /// unchecked create with a size: the only attribute applied to an
    /// existing file) or None (return the object as it is: an unchecked
    /// create without size, or a retransmitted exclusive one).
    pub(crate) fn on_existing(&self, attr: &Attr) -> Result<Option<u64>, FsError> {
        match self {
            CreateHow::Guarded(_) => Err(FsError::Exist),
            CreateHow::Exclusive(v) => {
                let (m, a) = verifier_times(v);
                if attr.ftype == FileType::Regular && attr.mtime == m && attr.atime == a {
                    Ok(None)
                } else {
                    Err(FsError::Exist)
                }
            }
            CreateHow::Unchecked(s) => {
                if attr.ftype != FileType::Regular {
                    return Err(FsError::Exist);
                }
                Ok(s.size)
            }
        }
    }
}

/// The verifier of an exclusive create as the (mtime, atime) it is stored
/// in: 31 bits of seconds each, no nanoseconds (as Linux knfsd does).
pub(crate) fn verifier_times(v: &[u8; 8]) -> (Timespec, Timespec) {
    let m = u32::from_be_bytes(v[..4].try_into().unwrap()) & 0x7fff_ffff;
    let a = u32::from_be_bytes(v[4..].try_into().unwrap()) & 0x7fff_ffff;
    (
        Timespec {
            secs: m as i64,
            nsecs: 0,
        },
        Timespec {
            secs: a as i64,
            nsecs: 0,
        },
    )
}

/// FSSTAT's numbers from a statvfs(3), counting blocks of `frag` bytes.
pub(crate) fn fsstat_of(s: &libc::statvfs, frag: u64) -> FsStat {
    FsStat {
        total_bytes: s.f_blocks * frag,
        free_bytes: s.f_bfree * frag,
        avail_bytes: s.f_bavail * frag,
        total_files: s.f_files,
        free_files: s.f_ffree,
        avail_files: s.f_favail,
    }
}

/// setxattr(2)'s flags for `how`.
pub(crate) fn xattr_flags(how: XattrSet) -> libc::c_int {
    match how {
        XattrSet::Either => 0,
        XattrSet::Create => libc::XATTR_CREATE,
        XattrSet::Replace => libc::XATTR_REPLACE,
    }
}

/// A value the backends can store: at most [`XATTR_SIZE_MAX`] bytes
/// (else `XattrTooBig`).
pub(crate) fn check_xattr_value(value: &[u8]) -> Result<(), FsError> {
    if value.len() > XATTR_SIZE_MAX {
        return Err(FsError::XattrTooBig);
    }
    Ok(())
}

/// The user attributes' names (without `user.`) in a listxattr(2) answer
/// (NUL-terminated names), sorted, so that cookies (positions in the
/// list) keep their meaning from one LISTXATTRS to the next while the
/// names stay the same.
pub(crate) fn user_xattr_names(list: &[u8]) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = list
        .split(|&b| b == 0)
        .filter_map(|n| n.strip_prefix(XATTR_USER_PREFIX))
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    names.sort();
    names
}

/// MKNOD's mode (file type and permission bits) and device numbers for a
/// new `ftype` object: a FIFO or socket takes no device numbers; any other
/// type than those and the two device types is `BadType`.
pub(crate) fn special_node(
    ftype: FileType,
    rdev: (u32, u32),
    set: &SetAttr,
) -> Result<(u32, (u32, u32)), FsError> {
    let (kind, rdev) = match ftype {
        FileType::Fifo => (libc::S_IFIFO, (0, 0)),
        FileType::Socket => (libc::S_IFSOCK, (0, 0)),
        FileType::CharDev => (libc::S_IFCHR, rdev),
        FileType::BlockDev => (libc::S_IFBLK, rdev),
        _ => return Err(FsError::BadType),
    };
    Ok((kind | (set.mode.unwrap_or(0o644) & 0o7777), rdev))
}
