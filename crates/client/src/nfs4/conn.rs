//! The raw layer: NFSv4 COMPOUNDs over one multiplexed RPC connection, sent
//! exactly as given. Protocol tests use this to send requests a well-behaved
//! client never would (no SEQUENCE, a wrong minor version, stale sessions).
//!
//! Every connection also serves the NFSv4.1 callback program (see
//! [`callback`](super::callback)): it answers CB_NULL from the start and
//! CB_COMPOUND once a session with a back channel is attached.

use super::callback::CbService;
use super::error::Result;
use bytes::Bytes;
use proto::nfs4::{
    Compound4args, Compound4res, NfsArgop4, NFS4_PROGRAM, NFSPROC4_COMPOUND, NFS_V4,
};
use rpc::client::{auth_sys, RpcClient};
use std::net::SocketAddr;
use std::sync::Arc;
use xdr::Unpack;

pub struct Nfs4Conn {
    rpc: RpcClient,
    callbacks: Arc<CbService>,
}

impl Nfs4Conn {
    /// Connects over TCP with an AUTH_SYS credential (`gid` is also the one
    /// supplementary group).
    pub async fn connect(addr: SocketAddr, uid: u32, gid: u32) -> Result<Self> {
        let cred = auth_sys(uid, gid, &[gid], "tarn-client");
        Ok(Nfs4Conn::from_rpc(RpcClient::connect(addr, cred).await?))
    }

    /// Wraps an RPC client that is already connected (any credential).
    pub fn from_rpc(rpc: RpcClient) -> Self {
        let callbacks = Arc::new(CbService::default());
        rpc.set_call_handler(callbacks.clone());
        Nfs4Conn { rpc, callbacks }
    }

    /// The callback service answering the server's calls on this connection.
    pub fn callbacks(&self) -> &Arc<CbService> {
        &self.callbacks
    }

    pub fn rpc(&self) -> &RpcClient {
        &self.rpc
    }

    /// The NULL procedure: is anyone there?
    pub async fn null(&self) -> Result<()> {
        let rec = self.rpc.call_raw(NFS4_PROGRAM, NFS_V4, 0, &[]).await?;
        match rpc::msg::decode_reply(rec)? {
            (_, rpc::msg::ReplyStatus::Success, _) => Ok(()),
            (_, other, _) => Err(rpc::client::ClientError::Rpc(other).into()),
        }
    }

    /// One COMPOUND with nothing added. The reply's status is not checked:
    /// an NFS error is a result here, not an `Err`.
    pub async fn compound(&self, minorversion: u32, ops: Vec<NfsArgop4>) -> Result<Compound4res> {
        self.compound_tagged(Bytes::new(), minorversion, ops).await
    }

    pub async fn compound_tagged(
        &self,
        tag: Bytes,
        minorversion: u32,
        ops: Vec<NfsArgop4>,
    ) -> Result<Compound4res> {
        let args = Compound4args {
            tag,
            minorversion,
            argarray: ops,
        };
        self.send(&args).await
    }

    /// Sends a COMPOUND that the caller keeps (to resend it after a DELAY).
    pub async fn send(&self, args: &Compound4args) -> Result<Compound4res> {
        let mut d = self
            .rpc
            .call(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, args)
            .await?;
        Ok(Compound4res::unpack(&mut d)?)
    }
}
