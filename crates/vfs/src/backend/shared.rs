//! Behaviour the backends share, written once: what CREATE does with the
//! name it is asked for ([`CreateHow::for_new_file`],
//! [`CreateHow::on_existing`], [`verifier_times`]), MKNOD's mode
//! ([`special_node`]), COPY's overlap ([`ranges_overlap`]), `fsstat` from a
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

/// Whether `len` bytes at `a` and at `b` of one file overlap (COPY and
/// CLONE within a file refuse that with `Inval`).
pub(crate) fn ranges_overlap(a: u64, b: u64, len: u64) -> bool {
    len > 0 && a.abs_diff(b) < len
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

#[cfg(test)]
mod tests {
    use super::*;

    fn regular(mtime: i64, atime: i64) -> Attr {
        let t = |secs| Timespec { secs, nsecs: 0 };
        Attr {
            ftype: FileType::Regular,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size: 0,
            used: 0,
            rdev: (0, 0),
            fsid: 1,
            fileid: 2,
            atime: t(atime),
            mtime: t(mtime),
            ctime: t(0),
        }
    }

    #[test]
    fn create_on_an_existing_name() {
        let sized = SetAttr {
            size: Some(7),
            ..SetAttr::default()
        };
        let f = regular(1, 2);
        assert_eq!(
            CreateHow::Guarded(SetAttr::default()).on_existing(&f),
            Err(FsError::Exist)
        );
        assert_eq!(
            CreateHow::Unchecked(sized.clone()).on_existing(&f),
            Ok(Some(7))
        );
        assert_eq!(
            CreateHow::Unchecked(SetAttr::default()).on_existing(&f),
            Ok(None)
        );
        let dir = Attr {
            ftype: FileType::Directory,
            ..f.clone()
        };
        assert_eq!(
            CreateHow::Unchecked(sized).on_existing(&dir),
            Err(FsError::Exist)
        );
        // The verifier's top bit of each half is dropped (31-bit seconds).
        let v = [0x80, 0, 0, 1, 0, 0, 0, 2];
        assert_eq!(CreateHow::Exclusive(v).on_existing(&f), Ok(None));
        assert_eq!(
            CreateHow::Exclusive([0, 0, 0, 1, 0, 0, 0, 3]).on_existing(&f),
            Err(FsError::Exist)
        );
        let mut late = f.clone();
        late.mtime.nsecs = 1;
        assert_eq!(
            CreateHow::Exclusive(v).on_existing(&late),
            Err(FsError::Exist)
        );
        assert_eq!(
            CreateHow::Exclusive(v).for_new_file(),
            (0o600, SetAttr::default())
        );
    }

    #[test]
    fn mknod_modes() {
        let set = SetAttr {
            mode: Some(0o10640),
            ..SetAttr::default()
        };
        assert_eq!(
            special_node(FileType::Fifo, (1, 2), &set),
            Ok((libc::S_IFIFO | 0o640, (0, 0)))
        );
        assert_eq!(
            special_node(FileType::BlockDev, (1, 2), &SetAttr::default()),
            Ok((libc::S_IFBLK | 0o644, (1, 2)))
        );
        assert_eq!(
            special_node(FileType::Regular, (0, 0), &set),
            Err(FsError::BadType)
        );
    }

    #[test]
    fn xattr_lists() {
        assert_eq!(
            user_xattr_names(b"user.b\0trusted.x\0user.\0user.a\0"),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        assert_eq!(xattr_flags(XattrSet::Create), libc::XATTR_CREATE);
        assert_eq!(
            check_xattr_value(&vec![0; XATTR_SIZE_MAX + 1]),
            Err(FsError::XattrTooBig)
        );
        assert_eq!(check_xattr_value(&[]), Ok(()));
    }
}
