//! Conversions between backend attributes and their NFSv3 wire forms.

use proto::nfs3::*;
use vfs::{Attr, Backend, Fid, FileType, FsError, SetAttr, SetTime, Timespec};

pub fn nfstime(t: Timespec) -> Nfstime3 {
    Nfstime3 {
        seconds: t.secs.clamp(0, u32::MAX as i64) as u32,
        nseconds: t.nsecs,
    }
}

pub fn ftype3(t: FileType) -> Ftype3 {
    match t {
        FileType::Regular => Ftype3::NF3REG,
        FileType::Directory => Ftype3::NF3DIR,
        FileType::Symlink => Ftype3::NF3LNK,
        FileType::BlockDev => Ftype3::NF3BLK,
        FileType::CharDev => Ftype3::NF3CHR,
        FileType::Socket => Ftype3::NF3SOCK,
        FileType::Fifo => Ftype3::NF3FIFO,
    }
}

pub fn fattr3(a: &Attr) -> Fattr3 {
    Fattr3 {
        r#type: ftype3(a.ftype),
        mode: a.mode & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: Specdata3 {
            specdata1: a.rdev.0,
            specdata2: a.rdev.1,
        },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: nfstime(a.atime),
        mtime: nfstime(a.mtime),
        ctime: nfstime(a.ctime),
    }
}

pub fn post_op_attr(a: Option<&Attr>) -> PostOpAttr {
    a.map(fattr3)
}

pub fn pre_op_attr(a: Option<&Attr>) -> PreOpAttr {
    a.map(|a| WccAttr {
        size: a.size,
        mtime: nfstime(a.mtime),
        ctime: nfstime(a.ctime),
    })
}

pub fn wcc_data(before: Option<&Attr>, after: Option<&Attr>) -> WccData {
    WccData {
        before: pre_op_attr(before),
        after: post_op_attr(after),
    }
}

/// The backend's form of a client's sattr3.
pub fn sattr(s: &Sattr3) -> SetAttr {
    let time = |t: Option<Nfstime3>, server: bool| match (t, server) {
        (Some(t), _) => SetTime::ClientTime(Timespec {
            secs: t.seconds as i64,
            nsecs: t.nseconds,
        }),
        (None, true) => SetTime::ServerTime,
        (None, false) => SetTime::DontChange,
    };
    let (at, at_server) = match &s.atime {
        SetAtime::SET_TO_CLIENT_TIME(t) => (Some(t.clone()), false),
        SetAtime::Default(h) => (None, *h == TimeHow::SET_TO_SERVER_TIME),
    };
    let (mt, mt_server) = match &s.mtime {
        SetMtime::SET_TO_CLIENT_TIME(t) => (Some(t.clone()), false),
        SetMtime::Default(h) => (None, *h == TimeHow::SET_TO_SERVER_TIME),
    };
    SetAttr {
        mode: s.mode,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: time(at, at_server),
        mtime: time(mt, mt_server),
    }
}

/// Runs a change to `fid` between a pre-op and a post-op getattr, giving the
/// wcc data clients use to keep their caches; failures still get wcc.
pub fn with_wcc<T>(
    b: &dyn Backend,
    fid: &Fid,
    change: impl FnOnce() -> Result<T, FsError>,
) -> (Result<T, FsError>, WccData) {
    let before = b.getattr(fid).ok();
    let r = change();
    let after = b.getattr(fid).ok();
    (r, wcc_data(before.as_ref(), after.as_ref()))
}

/// [`with_wcc`] for a change of a directory's names, under its namespace
/// lock ([`crate::dirlock`]): the wcc data brackets this change alone, as
/// NFSv4's change_info of the same directory does. NFS3ERR_JUKEBOX,
/// nothing changed, while NFSv4 delegations on the directory are being
/// recalled (`recalling`, see [`crate::dirlock::hold_unrecalled`]).
pub fn with_dir_wcc<T>(
    b: &dyn Backend,
    dir: &Fid,
    recalling: &crate::dirlock::Recalling,
    change: impl FnOnce() -> Result<T, FsError>,
) -> (Result<T, FsError>, WccData) {
    let _held = match crate::dirlock::hold_unrecalled(dir, recalling) {
        Ok(h) => h,
        Err(e) => return (Err(e), empty_wcc()),
    };
    with_wcc(b, dir, change)
}

/// Whether NFSv4 delegations on what `name` in `dir` leads to (if
/// anything) are being recalled; asking starts the recall.
pub fn named_recalling(
    b: &dyn Backend,
    cred: &vfs::Cred,
    dir: &Fid,
    name: &[u8],
    recalling: &crate::dirlock::Recalling,
) -> bool {
    b.lookup(cred, dir, name)
        .is_ok_and(|(fid, _)| recalling(&fid))
}

/// Post-op attributes, or none if the object cannot be stat'ed any more.
pub fn post_op(b: &dyn Backend, fid: &Fid) -> PostOpAttr {
    b.getattr(fid).ok().as_ref().map(fattr3)
}

pub fn empty_wcc() -> WccData {
    WccData {
        before: None,
        after: None,
    }
}
