//! Errors of either version, and the statuses callers branch on.

use crate::{nfs3, nfs4};
use proto::nfs3 as p3;
use proto::nfs4 as p4;

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

impl Error {
    /// The POSIX errno closest to the failure (what a file system built on
    /// [`Remote`](super::Remote) returns): EIO for transport failures and
    /// statuses without a counterpart.
    pub fn errno(&self) -> i32 {
        use p3::Nfsstat3 as S3;
        use p4::Nfsstat4 as S4;
        use rpc::client::ClientError as CE;
        use rpc::msg::ReplyStatus as RS;
        // An RPC authentication error (no credential for the caller, a
        // flavor the export refuses): EACCES, as the Linux client gives.
        // So is a server that refuses our TLS connection (our certificate).
        if let Error::V3(nfs3::Error::Rpc(CE::Rpc(RS::AuthError(_)) | CE::Tls(_)))
        | Error::V4(nfs4::Error::Rpc(CE::Rpc(RS::AuthError(_)) | CE::Tls(_))) = self
        {
            return libc::EACCES;
        }
        match self {
            Error::V3(e) => match e.status() {
                Some(S3::NFS3ERR_PERM) => libc::EPERM,
                Some(S3::NFS3ERR_NOENT) => libc::ENOENT,
                Some(S3::NFS3ERR_NXIO) => libc::ENXIO,
                Some(S3::NFS3ERR_ACCES) => libc::EACCES,
                Some(S3::NFS3ERR_EXIST) => libc::EEXIST,
                Some(S3::NFS3ERR_XDEV) => libc::EXDEV,
                Some(S3::NFS3ERR_NODEV) => libc::ENODEV,
                Some(S3::NFS3ERR_NOTDIR) => libc::ENOTDIR,
                Some(S3::NFS3ERR_ISDIR) => libc::EISDIR,
                Some(S3::NFS3ERR_INVAL) => libc::EINVAL,
                Some(S3::NFS3ERR_FBIG) => libc::EFBIG,
                Some(S3::NFS3ERR_NOSPC) => libc::ENOSPC,
                Some(S3::NFS3ERR_ROFS) => libc::EROFS,
                Some(S3::NFS3ERR_MLINK) => libc::EMLINK,
                Some(S3::NFS3ERR_NAMETOOLONG) => libc::ENAMETOOLONG,
                Some(S3::NFS3ERR_NOTEMPTY) => libc::ENOTEMPTY,
                Some(S3::NFS3ERR_DQUOT) => libc::EDQUOT,
                Some(S3::NFS3ERR_STALE) => libc::ESTALE,
                Some(S3::NFS3ERR_NOTSUPP) => libc::EOPNOTSUPP,
                _ => libc::EIO,
            },
            Error::V4(e) => match e.status() {
                Some(S4::NFS4ERR_PERM) => libc::EPERM,
                Some(S4::NFS4ERR_NOENT) => libc::ENOENT,
                Some(S4::NFS4ERR_NXIO) => libc::ENXIO,
                Some(S4::NFS4ERR_ACCESS) => libc::EACCES,
                Some(S4::NFS4ERR_EXIST) => libc::EEXIST,
                Some(S4::NFS4ERR_XDEV) => libc::EXDEV,
                Some(S4::NFS4ERR_NOTDIR) => libc::ENOTDIR,
                Some(S4::NFS4ERR_ISDIR) => libc::EISDIR,
                Some(S4::NFS4ERR_INVAL) => libc::EINVAL,
                Some(S4::NFS4ERR_FBIG) => libc::EFBIG,
                Some(S4::NFS4ERR_NOSPC) => libc::ENOSPC,
                Some(S4::NFS4ERR_ROFS) => libc::EROFS,
                Some(S4::NFS4ERR_MLINK) => libc::EMLINK,
                Some(S4::NFS4ERR_NAMETOOLONG) => libc::ENAMETOOLONG,
                Some(S4::NFS4ERR_NOTEMPTY) => libc::ENOTEMPTY,
                Some(S4::NFS4ERR_DQUOT) => libc::EDQUOT,
                Some(S4::NFS4ERR_STALE) => libc::ESTALE,
                Some(S4::NFS4ERR_NOTSUPP) => libc::EOPNOTSUPP,
                Some(S4::NFS4ERR_SYMLINK) => libc::ELOOP,
                Some(S4::NFS4ERR_WRONG_TYPE) => libc::EINVAL,
                Some(S4::NFS4ERR_DENIED | S4::NFS4ERR_LOCKED) => libc::EAGAIN,
                Some(S4::NFS4ERR_BADNAME) => libc::EINVAL,
                _ => libc::EIO,
            },
        }
    }
}
