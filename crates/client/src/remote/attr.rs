//! What [`Remote`](super::Remote) deals in: handles, one attribute
//! struct for both versions (and its mapping from fattr3 and fattr4),
//! attributes to set, directory entries, write results.

use crate::nfs4::{self, attr::SetAttrs};
use bytes::Bytes;
use proto::nfs3 as p3;
use proto::nfs4 as p4;

/// A file handle of either version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fh(pub Bytes);

impl Fh {
    pub(crate) fn v4(&self) -> p4::NfsFh4 {
        p4::NfsFh4(self.0.clone())
    }
    pub(crate) fn v3(&self) -> p3::NfsFh3 {
        p3::NfsFh3 {
            data: self.0.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Block,
    Char,
    Socket,
    Fifo,
    /// NFSv4 named attributes and the like.
    Other,
}

/// Seconds and nanoseconds since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Time {
    pub seconds: i64,
    pub nseconds: u32,
}

/// A file's attributes; None for what the server did not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ftype: Option<FileType>,
    pub mode: Option<u32>,
    pub nlink: Option<u32>,
    /// Numeric ids: NFSv3's, or an NFSv4 owner that is a number.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// As the server names them (NFSv4 "user@domain"; NFSv3 the number).
    pub owner: Option<String>,
    pub group: Option<String>,
    pub size: Option<u64>,
    pub used: Option<u64>,
    pub fileid: Option<u64>,
    pub fsid: Option<(u64, u64)>,
    pub atime: Option<Time>,
    pub mtime: Option<Time>,
    pub ctime: Option<Time>,
    /// NFSv4's change attribute; over NFSv3 the ctime in nanoseconds
    /// (what changes whenever the file does).
    pub change: Option<u64>,
    /// A device's (major, minor).
    pub rdev: Option<(u32, u32)>,
}

/// A file that is not a regular file, directory or link: what MKNOD
/// (NFSv3) and CREATE (NFSv4) make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

impl Attr {
    pub fn is_dir(&self) -> bool {
        self.ftype == Some(FileType::Directory)
    }

    /// From NFSv3's fattr3 (all of it is always there).
    pub fn from_v3(a: &p3::Fattr3) -> Attr {
        use p3::Ftype3::*;
        let t = |t: &p3::Nfstime3| Time {
            seconds: t.seconds as i64,
            nseconds: t.nseconds,
        };
        Attr {
            ftype: Some(match a.r#type {
                NF3REG => FileType::Regular,
                NF3DIR => FileType::Directory,
                NF3LNK => FileType::Symlink,
                NF3BLK => FileType::Block,
                NF3CHR => FileType::Char,
                NF3SOCK => FileType::Socket,
                NF3FIFO => FileType::Fifo,
            }),
            mode: Some(a.mode & 0o7777),
            nlink: Some(a.nlink),
            uid: Some(a.uid),
            gid: Some(a.gid),
            owner: Some(a.uid.to_string()),
            group: Some(a.gid.to_string()),
            size: Some(a.size),
            used: Some(a.used),
            fileid: Some(a.fileid),
            fsid: Some((a.fsid, 0)),
            atime: Some(t(&a.atime)),
            mtime: Some(t(&a.mtime)),
            ctime: Some(t(&a.ctime)),
            change: Some(a.ctime.seconds as u64 * 1_000_000_000 + a.ctime.nseconds as u64),
            rdev: Some((a.rdev.specdata1, a.rdev.specdata2)),
        }
    }

    /// From decoded NFSv4 attributes.
    pub fn from_v4(a: &nfs4::Attrs) -> Attr {
        use p4::NfsFtype4::*;
        let t = |t: &p4::Nfstime4| Time {
            seconds: t.seconds,
            nseconds: t.nseconds,
        };
        // "1000" or "1000@domain" when the server maps no names.
        let num = |s: &Option<String>| {
            s.as_deref()
                .and_then(|s| s.split('@').next())
                .and_then(|n| n.parse().ok())
        };
        Attr {
            ftype: a.ftype.map(|f| match f {
                NF4REG => FileType::Regular,
                NF4DIR => FileType::Directory,
                NF4LNK => FileType::Symlink,
                NF4BLK => FileType::Block,
                NF4CHR => FileType::Char,
                NF4SOCK => FileType::Socket,
                NF4FIFO => FileType::Fifo,
                _ => FileType::Other,
            }),
            mode: a.mode,
            nlink: a.numlinks,
            uid: num(&a.owner),
            gid: num(&a.owner_group),
            owner: a.owner.clone(),
            group: a.owner_group.clone(),
            size: a.size,
            used: a.space_used,
            fileid: a.fileid,
            fsid: a.fsid.as_ref().map(|f| (f.major, f.minor)),
            atime: a.time_access.as_ref().map(t),
            mtime: a.time_modify.as_ref().map(t),
            ctime: a.time_metadata.as_ref().map(t),
            change: a.change,
            rdev: a.rawdev.as_ref().map(|r| (r.specdata1, r.specdata2)),
        }
    }
}

/// What NFSv4 READDIR and GETATTR ask for: all of [`Attr`].
pub const V4_ATTRS: &[u32] = &[
    p4::FATTR4_TYPE,
    p4::FATTR4_CHANGE,
    p4::FATTR4_SIZE,
    p4::FATTR4_FSID,
    p4::FATTR4_FILEID,
    p4::FATTR4_MODE,
    p4::FATTR4_NUMLINKS,
    p4::FATTR4_OWNER,
    p4::FATTR4_OWNER_GROUP,
    p4::FATTR4_SPACE_USED,
    p4::FATTR4_TIME_ACCESS,
    p4::FATTR4_TIME_METADATA,
    p4::FATTR4_TIME_MODIFY,
    p4::FATTR4_RAWDEV,
];

/// One directory entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub attr: Attr,
    /// Its handle, when the listing carried it (READDIRPLUS).
    pub fh: Option<Fh>,
}

/// Space and files of a file system, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStat {
    pub total: u64,
    pub free: u64,
    /// Free to unprivileged users.
    pub avail: u64,
    pub files_total: u64,
    pub files_free: u64,
    pub files_avail: u64,
}

/// A time to set: the client's, or the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Server,
    Client(Time),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    /// Numeric owner and group (NFSv4: sent as the number's text).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

impl SetAttr {
    pub(crate) fn v4(&self) -> SetAttrs {
        let t = |s: SetTime| match s {
            SetTime::Server => p4::Settime4::Default(p4::TimeHow4::SET_TO_SERVER_TIME4),
            SetTime::Client(t) => p4::Settime4::SET_TO_CLIENT_TIME4(p4::Nfstime4 {
                seconds: t.seconds,
                nseconds: t.nseconds,
            }),
        };
        SetAttrs {
            size: self.size,
            mode: self.mode,
            owner: self.uid.map(|u| u.to_string()),
            owner_group: self.gid.map(|g| g.to_string()),
            atime: self.atime.map(t),
            mtime: self.mtime.map(t),
        }
    }

    pub(crate) fn v3(&self) -> p3::Sattr3 {
        let t = |t: Time| p3::Nfstime3 {
            seconds: t.seconds.clamp(0, u32::MAX as i64) as u32,
            nseconds: t.nseconds,
        };
        p3::Sattr3 {
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            atime: match self.atime {
                None => p3::SetAtime::Default(p3::TimeHow::DONT_CHANGE),
                Some(SetTime::Server) => p3::SetAtime::Default(p3::TimeHow::SET_TO_SERVER_TIME),
                Some(SetTime::Client(x)) => p3::SetAtime::SET_TO_CLIENT_TIME(t(x)),
            },
            mtime: match self.mtime {
                None => p3::SetMtime::Default(p3::TimeHow::DONT_CHANGE),
                Some(SetTime::Server) => p3::SetMtime::Default(p3::TimeHow::SET_TO_SERVER_TIME),
                Some(SetTime::Client(x)) => p3::SetMtime::SET_TO_CLIENT_TIME(t(x)),
            },
        }
    }
}

/// How a WRITE is to be stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stable {
    /// The server may keep it in memory until COMMIT.
    Unstable,
    FileSync,
}

/// What a WRITE did: bytes taken, whether they still need a COMMIT, and
/// the write verifier to compare with COMMIT's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub count: u32,
    pub unstable: bool,
    pub verf: [u8; 8],
}

/// What a server-side COPY did: bytes copied (maybe fewer than asked),
/// whether they still need a COMMIT, and the verifier to compare with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    pub count: u64,
    pub unstable: bool,
    pub verf: [u8; 8],
}

/// A file open for writing: its handle, and over NFSv4 the open stateid.
#[derive(Clone, Debug)]
pub struct OpenFile {
    pub fh: Fh,
    pub stateid: Option<p4::Stateid4>,
}

/// A byte range; `len` 0 means to the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub offset: u64,
    pub len: u64,
}

impl Range {
    /// The length as NFSv4 gives it: all ones means to the end (here 0).
    pub fn len4(&self) -> u64 {
        if self.len == 0 {
            u64::MAX
        } else {
            self.len
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fattr3() -> p3::Fattr3 {
        p3::Fattr3 {
            r#type: p3::Ftype3::NF3LNK,
            mode: 0o120777,
            nlink: 2,
            uid: 1000,
            gid: 50,
            size: 7,
            used: 4096,
            rdev: p3::Specdata3 {
                specdata1: 0,
                specdata2: 0,
            },
            fsid: 9,
            fileid: 42,
            atime: p3::Nfstime3 {
                seconds: 1,
                nseconds: 2,
            },
            mtime: p3::Nfstime3 {
                seconds: 3,
                nseconds: 4,
            },
            ctime: p3::Nfstime3 {
                seconds: 5,
                nseconds: 6,
            },
        }
    }

    #[test]
    fn v3_attributes_map_whole() {
        let a = Attr::from_v3(&fattr3());
        assert_eq!(a.ftype, Some(FileType::Symlink));
        assert_eq!(a.mode, Some(0o777), "type bits dropped");
        assert_eq!((a.uid, a.gid), (Some(1000), Some(50)));
        assert_eq!(a.owner.as_deref(), Some("1000"));
        assert_eq!((a.size, a.used, a.fileid), (Some(7), Some(4096), Some(42)));
        assert_eq!(
            a.mtime,
            Some(Time {
                seconds: 3,
                nseconds: 4
            })
        );
        assert_eq!(a.change, Some(5_000_000_006), "ctime stands for change");
    }

    #[test]
    fn v4_attributes_map_owner_numbers() {
        let v4 = nfs4::Attrs {
            ftype: Some(p4::NfsFtype4::NF4DIR),
            owner: Some("1000".into()),
            owner_group: Some("alice@example.org".into()),
            mode: Some(0o755),
            change: Some(77),
            ..Default::default()
        };
        let a = Attr::from_v4(&v4);
        assert!(a.is_dir());
        assert_eq!(a.uid, Some(1000));
        assert_eq!(a.gid, None, "a name is not a number");
        assert_eq!(a.group.as_deref(), Some("alice@example.org"));
        assert_eq!(a.change, Some(77));
        assert_eq!(a.size, None);
    }

    #[test]
    fn setattr_maps_to_both_versions() {
        let t = Time {
            seconds: 10,
            nseconds: 5,
        };
        let s = SetAttr {
            mode: Some(0o640),
            size: Some(0),
            atime: Some(SetTime::Server),
            mtime: Some(SetTime::Client(t)),
            ..Default::default()
        };
        let v3 = s.v3();
        assert_eq!((v3.mode, v3.size), (Some(0o640), Some(0)));
        assert_eq!(
            v3.atime,
            p3::SetAtime::Default(p3::TimeHow::SET_TO_SERVER_TIME)
        );
        assert_eq!(
            v3.mtime,
            p3::SetMtime::SET_TO_CLIENT_TIME(p3::Nfstime3 {
                seconds: 10,
                nseconds: 5
            })
        );
        let v4 = s.v4();
        assert_eq!(v4.mode, Some(0o640));
        assert_eq!(
            v4.mtime,
            Some(p4::Settime4::SET_TO_CLIENT_TIME4(p4::Nfstime4 {
                seconds: 10,
                nseconds: 5
            }))
        );
    }
}
