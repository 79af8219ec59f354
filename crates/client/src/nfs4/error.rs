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
