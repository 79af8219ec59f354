//! One interface over NFSv3 and NFSv4.1/4.2 for tools: handles as opaque
//! bytes, one attribute struct, the file operations a tool needs.
//!
//! What only one version has stays reachable: [`Remote::v4`] gives the
//! session (stateids, delegations, COMPOUNDs, server-side COPY),
//! [`Remote::v3`] the NFSv3 client. Opening and closing are NFSv4 state;
//! over NFSv3 they are a CREATE and nothing. Locks are NFSv4 LOCK on an
//! open of the file, or NLM4 over NFSv3.

use crate::nfs3::{self, Nfs3};
use crate::nfs4::{self, attr::SetAttrs, Session, ANON_STATEID};
use bytes::Bytes;
use proto::nfs3 as p3;
use proto::nfs4 as p4;
use std::sync::Arc;

/// A file handle of either version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fh(pub Bytes);

impl Fh {
    fn v4(&self) -> p4::NfsFh4 {
        p4::NfsFh4(self.0.clone())
    }
    fn v3(&self) -> p3::NfsFh3 {
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
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

impl SetAttr {
    fn v4(&self) -> SetAttrs {
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
            atime: self.atime.map(t),
            mtime: self.mtime.map(t),
        }
    }

    fn v3(&self) -> p3::Sattr3 {
        let t = |t: Time| p3::Nfstime3 {
            seconds: t.seconds.clamp(0, u32::MAX as i64) as u32,
            nseconds: t.nseconds,
        };
        p3::Sattr3 {
            mode: self.mode,
            uid: None,
            gid: None,
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

/// A lock held (see [`Remote::lock`]).
#[derive(Debug)]
pub struct HeldLock {
    fh: Fh,
    range: Range,
    exclusive: bool,
    kind: HeldKind,
}

#[derive(Debug)]
enum HeldKind {
    V3(nfs3::LockOwner),
    V4 {
        open: p4::Stateid4,
        lock: p4::Stateid4,
    },
}

/// Statuses callers branch on, the same for both versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    NoEnt,
    Exist,
    NotDir,
    IsDir,
    NotEmpty,
    NotSupp,
    XDev,
    Access,
    Perm,
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    V3(#[from] nfs3::Error),
    #[error(transparent)]
    V4(#[from] nfs4::Error),
}

impl Error {
    /// The status as a [`Kind`]; None when the server gave no status.
    pub fn kind(&self) -> Option<Kind> {
        use p3::Nfsstat3 as S3;
        use p4::Nfsstat4 as S4;
        Some(match self {
            Error::V3(e) => match e.status()? {
                S3::NFS3ERR_NOENT => Kind::NoEnt,
                S3::NFS3ERR_EXIST => Kind::Exist,
                S3::NFS3ERR_NOTDIR => Kind::NotDir,
                S3::NFS3ERR_ISDIR => Kind::IsDir,
                S3::NFS3ERR_NOTEMPTY => Kind::NotEmpty,
                S3::NFS3ERR_NOTSUPP => Kind::NotSupp,
                S3::NFS3ERR_XDEV => Kind::XDev,
                S3::NFS3ERR_ACCES => Kind::Access,
                S3::NFS3ERR_PERM => Kind::Perm,
                _ => Kind::Other,
            },
            Error::V4(e) => match e.status()? {
                S4::NFS4ERR_NOENT => Kind::NoEnt,
                S4::NFS4ERR_EXIST => Kind::Exist,
                S4::NFS4ERR_NOTDIR => Kind::NotDir,
                S4::NFS4ERR_ISDIR => Kind::IsDir,
                S4::NFS4ERR_NOTEMPTY => Kind::NotEmpty,
                S4::NFS4ERR_NOTSUPP => Kind::NotSupp,
                S4::NFS4ERR_XDEV => Kind::XDev,
                S4::NFS4ERR_ACCESS => Kind::Access,
                S4::NFS4ERR_PERM => Kind::Perm,
                _ => Kind::Other,
            },
        })
    }

    pub fn is(&self, k: Kind) -> bool {
        self.kind() == Some(k)
    }

    /// "no such file or directory (NFS3ERR_NOENT)", when the server
    /// answered with a status; None for transport and other failures.
    pub fn status_text(&self) -> Option<String> {
        match self {
            Error::V3(nfs3::Error::Nlm(s)) => Some(format!("{} ({s:?})", nfs3::describe_nlm(*s))),
            Error::V3(e) => e.status().map(|s| format!("{} ({s:?})", nfs3::describe(s))),
            Error::V4(e) => e.status().map(|s| format!("{} ({s:?})", nfs4::describe(s))),
        }
    }

    /// The RPC failure under it, if that is what it is.
    pub fn rpc(&self) -> Option<&rpc::client::ClientError> {
        match self {
            Error::V3(nfs3::Error::Rpc(e)) | Error::V4(nfs4::Error::Rpc(e)) => Some(e),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// An NFSv4 error with this status (for results a tool makes up).
pub fn v4_status(op: p4::NfsOpnum4, status: p4::Nfsstat4) -> Error {
    Error::V4(nfs4::Error::Nfs(nfs4::Nfs4Error { op, status }))
}

enum Proto {
    V3(Arc<Nfs3>),
    V4(Arc<Session>),
}

/// A server, over whichever version was agreed.
pub struct Remote {
    proto: Proto,
    rsize: u32,
    wsize: u32,
}

/// Transfer size within `channel` (less room for the COMPOUND around the
/// data), a whole number of 4 KiB pages, at most 1 MiB.
fn fit(server: Option<u64>, channel: u32) -> u32 {
    let room = channel.saturating_sub(1024) as u64;
    let n = server.unwrap_or(1 << 20).min(room) as u32;
    (n & !4095).clamp(4096, 1 << 20)
}

impl Remote {
    /// Over an NFSv4.1/4.2 session; asks the root's maxread and maxwrite.
    pub async fn from_v4(s: Arc<Session>) -> Result<Remote> {
        let root = s.lookup_path("/").await?;
        let a = s
            .attrs(&root, &[p4::FATTR4_MAXREAD, p4::FATTR4_MAXWRITE])
            .await?;
        let ch = s.fore_channel();
        let (rsize, wsize) = (
            fit(a.maxread, ch.ca_maxresponsesize),
            fit(a.maxwrite, ch.ca_maxrequestsize),
        );
        Ok(Remote {
            proto: Proto::V4(s),
            rsize,
            wsize,
        })
    }

    /// Over an NFSv3 client (its FSINFO sizes).
    pub fn from_v3(c: Arc<Nfs3>) -> Remote {
        let (rsize, wsize) = (c.rsize() & !4095, c.wsize() & !4095);
        Remote {
            proto: Proto::V3(c),
            rsize: rsize.max(4096),
            wsize: wsize.max(4096),
        }
    }

    /// The NFSv4 session, when that is the version.
    pub fn v4(&self) -> Option<&Arc<Session>> {
        match &self.proto {
            Proto::V4(s) => Some(s),
            Proto::V3(_) => None,
        }
    }

    pub fn v3(&self) -> Option<&Arc<Nfs3>> {
        match &self.proto {
            Proto::V3(c) => Some(c),
            Proto::V4(_) => None,
        }
    }

    /// "3", "4.1" or "4.2".
    pub fn version(&self) -> String {
        match &self.proto {
            Proto::V3(_) => "3".into(),
            Proto::V4(s) => format!("4.{}", s.minorversion()),
        }
    }

    pub fn rsize(&self) -> u32 {
        self.rsize
    }

    pub fn wsize(&self) -> u32 {
        self.wsize
    }

    /// Calls worth having in flight at once: the session's slots, or
    /// for NFSv3 (no slot table) a fixed number.
    pub fn max_inflight(&self) -> usize {
        match &self.proto {
            Proto::V4(s) => (s.fore_channel().ca_maxrequests as usize).max(1),
            Proto::V3(_) => 64,
        }
    }

    pub async fn lookup_path(&self, path: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.lookup_path(path).await?.0),
            Proto::V3(c) => Fh(c.lookup_path(path).await?.data),
        })
    }

    pub async fn lookup_path_attr(&self, path: &str) -> Result<(Fh, Attr)> {
        match &self.proto {
            Proto::V4(s) => {
                let (fh, a) = s.lookup_path_attrs(path, V4_ATTRS).await?;
                Ok((Fh(fh.0), Attr::from_v4(&a)))
            }
            Proto::V3(c) => {
                let (fh, a) = c.lookup_path_attr(path).await?;
                Ok((Fh(fh.data), Attr::from_v3(&a)))
            }
        }
    }

    pub async fn lookup(&self, dir: &Fh, name: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.lookup(&dir.v4(), name).await?.0),
            Proto::V3(c) => Fh(c.lookup(&dir.v3(), name).await?.0.data),
        })
    }

    pub async fn stat(&self, fh: &Fh) -> Result<Attr> {
        Ok(match &self.proto {
            Proto::V4(s) => Attr::from_v4(&s.attrs(&fh.v4(), V4_ATTRS).await?),
            Proto::V3(c) => Attr::from_v3(&c.getattr(&fh.v3()).await?),
        })
    }

    /// Every entry but "." and "..", with attributes (fetched one by one
    /// when the listing had none: NFSv3 READDIR without PLUS).
    pub async fn readdir(&self, dir: &Fh) -> Result<Vec<Entry>> {
        match &self.proto {
            Proto::V4(s) => Ok(s
                .readdir_with(&dir.v4(), V4_ATTRS)
                .await?
                .into_iter()
                .map(|e| Entry {
                    name: e.name,
                    attr: Attr::from_v4(&e.attrs),
                    fh: None,
                })
                .collect()),
            Proto::V3(c) => {
                let d = dir.v3();
                let mut out = vec![];
                for e in c.readdir(&d).await? {
                    let (fh, attrs) = match (e.fh, e.attrs) {
                        (Some(fh), Some(a)) => (fh, a),
                        (fh, _) => {
                            let fh = match fh {
                                Some(f) => f,
                                None => c.lookup(&d, &e.name).await?.0,
                            };
                            let a = c.getattr(&fh).await?;
                            (fh, a)
                        }
                    };
                    out.push(Entry {
                        name: e.name,
                        attr: Attr::from_v3(&attrs),
                        fh: Some(Fh(fh.data)),
                    });
                }
                Ok(out)
            }
        }
    }

    /// `len` bytes at `off` (fewer at the end of the file) and whether
    /// the end was reached. NFSv4 reads with the anonymous stateid.
    pub async fn read(&self, fh: &Fh, off: u64, len: u32) -> Result<(Bytes, bool)> {
        match &self.proto {
            Proto::V4(s) => {
                let r = s.read(&ANON_STATEID, &fh.v4(), off, len).await?;
                Ok((r.data, r.eof))
            }
            Proto::V3(c) => {
                let r = c.read(&fh.v3(), off, len).await?;
                Ok((r.data, r.eof))
            }
        }
    }

    /// Creates `dir/name` if missing (with `mode`) and opens it for
    /// writing, truncated to nothing when `truncate`.
    pub async fn open_write(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
        truncate: bool,
    ) -> Result<OpenFile> {
        let set = SetAttr {
            mode: Some(mode),
            size: truncate.then_some(0),
            ..Default::default()
        };
        match &self.proto {
            Proto::V4(s) => {
                let how =
                    p4::Openflag4::OPEN4_CREATE(p4::Createhow4::UNCHECKED4(set.v4().encode()));
                let o = s
                    .open_with(
                        &s.open_owner(),
                        &dir.v4(),
                        name,
                        how,
                        p4::OPEN4_SHARE_ACCESS_BOTH,
                        p4::OPEN4_SHARE_DENY_NONE,
                    )
                    .await?;
                Ok(OpenFile {
                    fh: Fh(o.fh.0),
                    stateid: Some(o.stateid),
                })
            }
            Proto::V3(c) => {
                // UNCHECKED: an existing file is used, its mode kept and
                // (size 0) truncated, as open(O_CREAT|O_TRUNC) does.
                let fh = c
                    .create(&dir.v3(), name, p3::Createhow3::UNCHECKED(set.v3()))
                    .await?;
                Ok(OpenFile {
                    fh: Fh(fh.data),
                    stateid: None,
                })
            }
        }
    }

    /// CLOSE over NFSv4; nothing over NFSv3.
    pub async fn close(&self, f: &OpenFile) -> Result<()> {
        if let (Proto::V4(s), Some(sid)) = (&self.proto, &f.stateid) {
            s.close(&f.fh.v4(), sid).await?;
        }
        Ok(())
    }

    pub async fn write(
        &self,
        f: &OpenFile,
        off: u64,
        data: Bytes,
        stable: Stable,
    ) -> Result<Written> {
        match &self.proto {
            Proto::V4(s) => {
                let how = match stable {
                    Stable::Unstable => p4::StableHow4::UNSTABLE4,
                    Stable::FileSync => p4::StableHow4::FILE_SYNC4,
                };
                let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
                let r = s.write(&sid, &f.fh.v4(), off, data, how).await?;
                Ok(Written {
                    count: r.count,
                    unstable: r.committed == p4::StableHow4::UNSTABLE4,
                    verf: r.writeverf,
                })
            }
            Proto::V3(c) => {
                let how = match stable {
                    Stable::Unstable => p3::StableHow::UNSTABLE,
                    Stable::FileSync => p3::StableHow::FILE_SYNC,
                };
                let r = c.write(&f.fh.v3(), off, data, how).await?;
                Ok(Written {
                    count: r.count,
                    unstable: r.committed == p3::StableHow::UNSTABLE,
                    verf: r.verf,
                })
            }
        }
    }

    /// COMMIT of the whole file; the verifier to compare with the writes'.
    pub async fn commit(&self, fh: &Fh) -> Result<[u8; 8]> {
        Ok(match &self.proto {
            Proto::V4(s) => s.commit(&fh.v4(), 0, 0).await?,
            Proto::V3(c) => c.commit(&fh.v3(), 0, 0).await?,
        })
    }

    pub async fn setattr(&self, fh: &Fh, set: &SetAttr) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.setattr(&fh.v4(), &ANON_STATEID, &set.v4()).await?;
            }
            Proto::V3(c) => {
                c.setattr(&fh.v3(), set.v3()).await?;
            }
        }
        Ok(())
    }

    pub async fn mkdir(&self, dir: &Fh, name: &str, mode: u32) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.mkdir(&dir.v4(), name, mode).await?.0),
            Proto::V3(c) => Fh(c.mkdir(&dir.v3(), name, mode).await?.data),
        })
    }

    /// Removes a non-directory.
    pub async fn remove(&self, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.remove(&dir.v4(), name).await?;
            }
            Proto::V3(c) => c.remove(&dir.v3(), name).await?,
        }
        Ok(())
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.remove(&dir.v4(), name).await?;
            }
            Proto::V3(c) => c.rmdir(&dir.v3(), name).await?,
        }
        Ok(())
    }

    pub async fn rename(&self, from_dir: &Fh, from: &str, to_dir: &Fh, to: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.rename(&from_dir.v4(), from, &to_dir.v4(), to).await?;
            }
            Proto::V3(c) => c.rename(&from_dir.v3(), from, &to_dir.v3(), to).await?,
        }
        Ok(())
    }

    pub async fn symlink(&self, dir: &Fh, name: &str, target: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.symlink(&dir.v4(), name, target).await?.0),
            Proto::V3(c) => Fh(c.symlink(&dir.v3(), name, target).await?.data),
        })
    }

    pub async fn readlink(&self, fh: &Fh) -> Result<String> {
        let b = match &self.proto {
            Proto::V4(s) => s.readlink(&fh.v4()).await?,
            Proto::V3(c) => c.readlink(&fh.v3()).await?,
        };
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// A hard link: `dir/name` becomes another name of `fh`.
    pub async fn link(&self, fh: &Fh, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.link(&fh.v4(), &dir.v4(), name).await?;
            }
            Proto::V3(c) => c.link(&fh.v3(), &dir.v3(), name).await?,
        }
        Ok(())
    }

    pub async fn fsstat(&self, fh: &Fh) -> Result<FsStat> {
        match &self.proto {
            Proto::V4(s) => {
                use p4::*;
                let a = s
                    .attrs(
                        &fh.v4(),
                        &[
                            FATTR4_FILES_AVAIL,
                            FATTR4_FILES_FREE,
                            FATTR4_FILES_TOTAL,
                            FATTR4_SPACE_AVAIL,
                            FATTR4_SPACE_FREE,
                            FATTR4_SPACE_TOTAL,
                        ],
                    )
                    .await?;
                Ok(FsStat {
                    total: a.space_total.unwrap_or(0),
                    free: a.space_free.unwrap_or(0),
                    avail: a.space_avail.unwrap_or(0),
                    files_total: a.files_total.unwrap_or(0),
                    files_free: a.files_free.unwrap_or(0),
                    files_avail: a.files_avail.unwrap_or(0),
                })
            }
            Proto::V3(c) => {
                let r = c.fsstat(&fh.v3()).await?;
                Ok(FsStat {
                    total: r.tbytes,
                    free: r.fbytes,
                    avail: r.abytes,
                    files_total: r.tfiles,
                    files_free: r.ffiles,
                    files_avail: r.afiles,
                })
            }
        }
    }

    /// Takes a byte-range lock on the file `path`, exclusive or shared.
    /// With `wait`, a conflicting lock is waited out; without, Ok(None)
    /// says someone else holds one. NFSv4: the file is opened (read for a
    /// shared lock, read and write for an exclusive one) and stays open
    /// until [`Remote::unlock`]. NFSv3: NLM4.
    pub async fn lock(
        &self,
        fh: &Fh,
        dir_and_name: (&Fh, &str),
        range: Range,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<HeldLock>> {
        match &self.proto {
            Proto::V3(c) => {
                let owner = nfs3::LockOwner::this_process(&c.options().machine);
                let r = nfs3::LockRange {
                    offset: range.offset,
                    len: range.len,
                    exclusive,
                };
                if !c.nlm_lock(&fh.v3(), &owner, r, wait).await? {
                    return Ok(None);
                }
                Ok(Some(HeldLock {
                    fh: fh.clone(),
                    range,
                    exclusive,
                    kind: HeldKind::V3(owner),
                }))
            }
            Proto::V4(s) => {
                let access = if exclusive {
                    p4::OPEN4_SHARE_ACCESS_BOTH
                } else {
                    p4::OPEN4_SHARE_ACCESS_READ
                };
                let (dir, name) = dir_and_name;
                let (open, ofh) = s.open(&dir.v4(), name, None, access).await?;
                let owner = s.new_owner("lock");
                // NFSv4 length: all ones means to the end.
                let len = if range.len == 0 { u64::MAX } else { range.len };
                // A denied LOCK leaves no lock state: each try introduces the
                // owner again with the open stateid.
                let locker = s.new_lock_owner(&open, &owner);
                let mut pause = std::time::Duration::from_millis(50);
                loop {
                    let t = match (exclusive, wait) {
                        (true, true) => p4::NfsLockType4::WRITEW_LT,
                        (true, false) => p4::NfsLockType4::WRITE_LT,
                        (false, true) => p4::NfsLockType4::READW_LT,
                        (false, false) => p4::NfsLockType4::READ_LT,
                    };
                    let r = s.lock(&ofh, locker.clone(), t, range.offset, len).await;
                    match r {
                        Ok(Ok(lock)) => {
                            return Ok(Some(HeldLock {
                                fh: Fh(ofh.0),
                                range,
                                exclusive,
                                kind: HeldKind::V4 { open, lock },
                            }))
                        }
                        Ok(Err(_denied)) if wait => {}
                        Ok(Err(_denied)) => {
                            let _ = s.close(&ofh, &open).await;
                            return Ok(None);
                        }
                        Err(e)
                            if matches!(
                                e.status(),
                                Some(p4::Nfsstat4::NFS4ERR_GRACE | p4::Nfsstat4::NFS4ERR_DELAY)
                            ) => {}
                        Err(e) => {
                            let _ = s.close(&ofh, &open).await;
                            return Err(e.into());
                        }
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
            }
        }
    }

    /// Releases a lock taken by [`Remote::lock`] (and over NFSv4 closes the file).
    pub async fn unlock(&self, l: HeldLock) -> Result<()> {
        match (&self.proto, l.kind) {
            (Proto::V3(c), HeldKind::V3(owner)) => {
                let r = nfs3::LockRange {
                    offset: l.range.offset,
                    len: l.range.len,
                    exclusive: l.exclusive,
                };
                c.nlm_unlock(&l.fh.v3(), &owner, r).await?;
            }
            (Proto::V4(s), HeldKind::V4 { open, lock }) => {
                let len = if l.range.len == 0 {
                    u64::MAX
                } else {
                    l.range.len
                };
                let t = if l.exclusive {
                    p4::NfsLockType4::WRITE_LT
                } else {
                    p4::NfsLockType4::READ_LT
                };
                let fh = l.fh.v4();
                let r = s.locku(&fh, &lock, t, l.range.offset, len).await;
                s.close(&fh, &open).await?;
                r?;
            }
            _ => unreachable!("a lock is released over the version that took it"),
        }
        Ok(())
    }

    /// Ends the session (NFSv4 DESTROY_SESSION and friends) or the mounts
    /// (NFSv3 UMNT). Failures change nothing for the caller.
    pub async fn close_all(&self) {
        match &self.proto {
            Proto::V4(s) => {
                let _ = s.destroy().await;
            }
            Proto::V3(c) => c.unmount_all().await,
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

    #[test]
    fn transfer_sizes_fit_the_channel() {
        assert_eq!(fit(Some(1 << 20), (1 << 20) + (64 << 10)), 1 << 20);
        assert_eq!(fit(Some(1 << 20), 256 << 10), (256 << 10) - 4096);
        assert_eq!(fit(None, 1 << 20), (1 << 20) - 4096);
    }
}
