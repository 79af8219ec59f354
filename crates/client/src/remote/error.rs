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
