//! Errors: transport and decoding failures, and NFSv4 status codes with the
//! operation that returned them.

use bytes::Buf;
use proto::nfs4::{NfsOpnum4, NfsResop4, Nfsstat4};

/// An operation that failed, as the server reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op:?} failed: {status:?}")]
pub struct Nfs4Error {
    pub op: NfsOpnum4,
    pub status: Nfsstat4,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Nfs(#[from] Nfs4Error),
    #[error("RPC: {0}")]
    Rpc(#[from] rpc::client::ClientError),
    #[error("undecodable reply: {0}")]
    Xdr(#[from] xdr::Error),
    /// The server answered something the protocol does not allow here
    /// (a missing or mismatched result, an undecodable attribute).
    #[error("protocol: {0}")]
    Protocol(String),
}

impl Error {
    /// The NFS status, if the server returned one.
    pub fn status(&self) -> Option<Nfsstat4> {
        match self {
            Error::Nfs(e) => Some(e.status),
            _ => None,
        }
    }

    /// Whether the server refused the call before executing it: an RPC
    /// authentication error (e.g. its RPCSEC_GSS context expired), so an
    /// NFSv4.1 slot it was sent on did not move.
    pub fn not_executed(&self) -> bool {
        matches!(
            self,
            Error::Rpc(rpc::client::ClientError::Rpc(
                rpc::msg::ReplyStatus::AuthError(_)
            ))
        )
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The operation number and status of one result. Every NFSv4 result
/// starts with its status on the wire, right after the operation number, so
/// encoding reads both without a 70-arm match. Used on error paths only:
/// it copies the result.
pub fn op_status(r: &NfsResop4) -> (NfsOpnum4, Nfsstat4) {
    let mut b = xdr::to_bytes(r);
    let op = b.get_i32();
    let st = b.get_i32();
    (
        NfsOpnum4::from_i32(op).unwrap_or(NfsOpnum4::OP_ILLEGAL),
        Nfsstat4::from_i32(st).unwrap_or(Nfsstat4::NFS4ERR_SERVERFAULT),
    )
}

/// A status in words, as `strerror` would put the errno it stands for
/// (for messages to people: "no such file or directory (NFS4ERR_NOENT)").
pub fn describe(status: Nfsstat4) -> &'static str {
    use Nfsstat4::*;
    match status {
        NFS4_OK => "success",
        NFS4ERR_PERM => "operation not permitted",
        NFS4ERR_NOENT => "no such file or directory",
        NFS4ERR_IO => "input/output error",
        NFS4ERR_NXIO => "no such device or address",
        NFS4ERR_ACCESS => "permission denied",
        NFS4ERR_EXIST => "file exists",
        NFS4ERR_XDEV => "cross-filesystem operation",
        NFS4ERR_NOTDIR => "not a directory",
        NFS4ERR_ISDIR => "is a directory",
        NFS4ERR_INVAL => "invalid argument",
        NFS4ERR_FBIG => "file too large",
        NFS4ERR_NOSPC => "no space left on device",
        NFS4ERR_ROFS => "read-only file system",
        NFS4ERR_MLINK => "too many links",
        NFS4ERR_NAMETOOLONG => "file name too long",
        NFS4ERR_NOTEMPTY => "directory not empty",
        NFS4ERR_DQUOT => "disk quota exceeded",
        NFS4ERR_STALE => "stale file handle",
        NFS4ERR_BADHANDLE => "bad file handle",
        NFS4ERR_NOTSUPP => "operation not supported",
        NFS4ERR_TOOSMALL => "buffer too small",
        NFS4ERR_SERVERFAULT => "server fault",
        NFS4ERR_BADTYPE => "type not supported",
        NFS4ERR_DELAY => "server busy, try again",
        NFS4ERR_SYMLINK => "is a symbolic link",
        NFS4ERR_WRONGSEC => "security flavor not allowed here",
        NFS4ERR_LOCKED => "locked by another client",
        NFS4ERR_DENIED => "lock held by another owner",
        NFS4ERR_SHARE_DENIED => "denied by another open's share reservation",
        NFS4ERR_GRACE => "server in grace period, try again",
        NFS4ERR_EXPIRED => "lease expired",
        NFS4ERR_BADNAME => "invalid file name",
        NFS4ERR_BADCHAR => "invalid character in name",
        NFS4ERR_ATTRNOTSUPP => "attribute not supported",
        NFS4ERR_FILE_OPEN => "file is open",
        NFS4ERR_MINOR_VERS_MISMATCH => "minor version not supported by the server",
        NFS4ERR_OPENMODE => "file not open for that",
        NFS4ERR_MOVED => "file system moved",
        NFS4ERR_NOFILEHANDLE => "no current file handle",
        _ => "error",
    }
}
