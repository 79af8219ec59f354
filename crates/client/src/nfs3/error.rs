//! Errors of the NFSv3 client: transport and decoding failures, NFSv3
//! statuses with the procedure that returned them, MOUNT and NLM refusals.

use proto::mount::Mountstat3;
use proto::nfs3::Nfsstat3;
use proto::nlm4::Nlm4Stats;

/// A procedure that failed, as the server reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{proc_} failed: {status:?}")]
pub struct Nfs3Error {
    pub proc_: &'static str,
    pub status: Nfsstat3,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Nfs(#[from] Nfs3Error),
    /// MNT refused the export.
    #[error("MNT {path}: {status:?}")]
    Mount { path: String, status: Mountstat3 },
    /// The lock manager refused (DENIED only while not retrying).
    #[error("NLM: {0:?}")]
    Nlm(Nlm4Stats),
    #[error("RPC: {0}")]
    Rpc(#[from] rpc::client::ClientError),
    #[error("undecodable reply: {0}")]
    Xdr(#[from] xdr::Error),
    /// Setting up: no MOUNT or NLM service found, no flavor in common.
    #[error("{0}")]
    Setup(String),
    #[error("protocol: {0}")]
    Protocol(String),
}

impl Error {
    /// The NFSv3 status, if the server returned one (a MOUNT status is
    /// given as the NFSv3 status of the same number: RFC 1813 makes them equal).
    pub fn status(&self) -> Option<Nfsstat3> {
        match self {
            Error::Nfs(e) => Some(e.status),
            Error::Mount { status, .. } => Nfsstat3::from_i32(*status as i32),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A status in words, as `strerror` would put the errno it stands for.
pub fn describe(status: Nfsstat3) -> &'static str {
    use Nfsstat3::*;
    match status {
        NFS3_OK => "success",
        NFS3ERR_PERM => "operation not permitted",
        NFS3ERR_NOENT => "no such file or directory",
        NFS3ERR_IO => "input/output error",
        NFS3ERR_NXIO => "no such device or address",
        NFS3ERR_ACCES => "permission denied",
        NFS3ERR_EXIST => "file exists",
        NFS3ERR_XDEV => "cross-filesystem operation",
        NFS3ERR_NODEV => "no such device",
        NFS3ERR_NOTDIR => "not a directory",
        NFS3ERR_ISDIR => "is a directory",
        NFS3ERR_INVAL => "invalid argument",
        NFS3ERR_FBIG => "file too large",
        NFS3ERR_NOSPC => "no space left on device",
        NFS3ERR_ROFS => "read-only file system",
        NFS3ERR_MLINK => "too many links",
        NFS3ERR_NAMETOOLONG => "file name too long",
        NFS3ERR_NOTEMPTY => "directory not empty",
        NFS3ERR_DQUOT => "disk quota exceeded",
        NFS3ERR_STALE => "stale file handle",
        NFS3ERR_REMOTE => "too many levels of remote in path",
        NFS3ERR_BADHANDLE => "bad file handle",
        NFS3ERR_NOT_SYNC => "update synchronization mismatch",
        NFS3ERR_BAD_COOKIE => "directory changed while being read (stale cookie)",
        NFS3ERR_NOTSUPP => "operation not supported",
        NFS3ERR_TOOSMALL => "buffer too small",
        NFS3ERR_SERVERFAULT => "server fault",
        NFS3ERR_BADTYPE => "type not supported",
        NFS3ERR_JUKEBOX => "server busy, try again",
    }
}

/// An NLM status in words.
pub fn describe_nlm(s: Nlm4Stats) -> &'static str {
    use Nlm4Stats::*;
    match s {
        NLM4_GRANTED => "granted",
        NLM4_DENIED => "lock held by another owner",
        NLM4_DENIED_NOLOCKS => "server out of locks",
        NLM4_BLOCKED => "blocked",
        NLM4_DENIED_GRACE_PERIOD => "server in grace period, try again",
        NLM4_DEADLCK => "deadlock",
        NLM4_ROFS => "read-only file system",
        NLM4_STALE_FH => "stale file handle",
        NLM4_FBIG => "offset or length too large",
        NLM4_FAILED => "lock failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_status_reads_as_the_nfs_status_of_the_same_number() {
        let e = Error::Mount {
            path: "/x".into(),
            status: Mountstat3::MNT3ERR_ACCES,
        };
        assert_eq!(e.status(), Some(Nfsstat3::NFS3ERR_ACCES));
        assert_eq!(describe(e.status().unwrap()), "permission denied");
    }
}
