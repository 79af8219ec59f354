//! The raw layer: NFSv4 COMPOUNDs over one multiplexed RPC connection, sent
//! exactly as given. Protocol tests use this to send requests a well-behaved
//! client never would (no SEQUENCE, a wrong minor version, stale sessions).
//!
//! Or over a [`Channel`] ([`Nfs4Conn::connect_channel`]): `nconnect`
//! connections that are replaced when they break, with every call resent
//! (same xid, same bytes: an NFSv4.1 COMPOUND keeps its SEQUENCE slot and
//! seqid, so the server's slot answers a call it already executed).
//!
//! Every connection also serves the NFSv4.1 callback program (see
//! [`callback`](super::callback)): it answers CB_NULL from the start and
//! CB_COMPOUND once a session with a back channel is attached.

use super::callback::CbService;
use super::error::Result;
use super::renew::RenewPolicy;
use super::sec::{GssSec, GssTarget};
use bytes::Bytes;
use proto::nfs4::{
    Compound4args, Compound4res, NfsArgop4, NFS4_PROGRAM, NFSPROC4_COMPOUND, NFS_V4,
};
use rpc::client::{auth_none, auth_sys, Channel, ChannelOptions, RpcClient};
use rpc::gss::GssService;
use std::net::SocketAddr;
use std::sync::Arc;
use xdr::Unpack;

/// Where COMPOUNDs go.
enum Transport {
    Single(Arc<RpcClient>),
    Channel(Channel),
}

pub struct Nfs4Conn {
    transport: Transport,
    callbacks: Arc<CbService>,
    /// RPCSEC_GSS for every COMPOUND, when the connection was made with it.
    gss: Option<Arc<GssSec>>,
}

impl Nfs4Conn {
    /// Connects over TCP with an AUTH_SYS credential (`gid` is also the one
    /// supplementary group).
    pub async fn connect(addr: SocketAddr, uid: u32, gid: u32) -> Result<Self> {
        let cred = auth_sys(uid, gid, &[gid], "tarn-client");
        Ok(Nfs4Conn::from_rpc(RpcClient::connect(addr, cred).await?))
    }

    /// Connects over TCP and sends every COMPOUND under RPCSEC_GSS
    /// `service` with a context for `target` (`nfs@host`) from the caller's
    /// credential cache (KRB5CCNAME), renewed ahead of expiry by `policy`.
    pub async fn connect_gss(
        addr: SocketAddr,
        service: GssService,
        target: &str,
        policy: RenewPolicy,
    ) -> Result<Self> {
        let rpc = Arc::new(RpcClient::connect(addr, auth_none()).await?);
        let gss = GssSec::establish(rpc.clone(), nfs4_target(service, target, policy)).await?;
        let mut c = Nfs4Conn::from_shared(rpc);
        c.gss = Some(gss);
        Ok(c)
    }

    /// Connects a reconnecting, retransmitting [`Channel`] of
    /// `opts.nconnect` connections with an AUTH_SYS credential. Every
    /// connection serves the callback program.
    pub async fn connect_channel(
        addr: SocketAddr,
        uid: u32,
        gid: u32,
        opts: ChannelOptions,
    ) -> Result<Self> {
        let cred = auth_sys(uid, gid, &[gid], "tarn-client");
        let ch = Channel::connect(addr, cred, opts).await?;
        let callbacks = Arc::new(CbService::default());
        ch.set_call_handler(callbacks.clone());
        Ok(Nfs4Conn {
            transport: Transport::Channel(ch),
            callbacks,
            gss: None,
        })
    }

    /// [`Nfs4Conn::connect_gss`] over a reconnecting [`Channel`]: a
    /// retransmission carries a new RPCSEC_GSS sequence number.
    pub async fn connect_gss_channel(
        addr: SocketAddr,
        service: GssService,
        target: &str,
        policy: RenewPolicy,
        opts: ChannelOptions,
    ) -> Result<Self> {
        let ch = Channel::connect(addr, auth_none(), opts).await?;
        let callbacks = Arc::new(CbService::default());
        ch.set_call_handler(callbacks.clone());
        let gss =
            GssSec::establish_channel(ch.clone(), nfs4_target(service, target, policy)).await?;
        Ok(Nfs4Conn {
            transport: Transport::Channel(ch),
            callbacks,
            gss: Some(gss),
        })
    }

    /// Wraps an RPC client that is already connected (any credential).
    pub fn from_rpc(rpc: RpcClient) -> Self {
        Nfs4Conn::from_shared(Arc::new(rpc))
    }

    fn from_shared(rpc: Arc<RpcClient>) -> Self {
        let callbacks = Arc::new(CbService::default());
        rpc.set_call_handler(callbacks.clone());
        Nfs4Conn {
            transport: Transport::Single(rpc),
            callbacks,
            gss: None,
        }
    }

    /// The RPCSEC_GSS layer, if COMPOUNDs go under it.
    pub fn gss(&self) -> Option<&Arc<GssSec>> {
        self.gss.as_ref()
    }

    /// The callback service answering the server's calls on this connection.
    pub fn callbacks(&self) -> &Arc<CbService> {
        &self.callbacks
    }

    /// The one RPC connection. Panics for a connection over a
    /// [`Channel`] (protocol tests use single connections).
    pub fn rpc(&self) -> &RpcClient {
        match &self.transport {
            Transport::Single(r) => r,
            Transport::Channel(_) => panic!("Nfs4Conn::rpc on a Channel"),
        }
    }

    /// The channel, when COMPOUNDs go over one.
    pub fn channel(&self) -> Option<&Channel> {
        match &self.transport {
            Transport::Single(_) => None,
            Transport::Channel(c) => Some(c),
        }
    }

    async fn call_raw(&self, proc_: u32, args: &[u8]) -> Result<Bytes> {
        Ok(match &self.transport {
            Transport::Single(r) => r.call_raw(NFS4_PROGRAM, NFS_V4, proc_, args).await?,
            Transport::Channel(c) => c.call_raw(NFS4_PROGRAM, NFS_V4, proc_, args).await?,
        })
    }

    /// The NULL procedure: is anyone there?
    pub async fn null(&self) -> Result<()> {
        rpc::client::results(self.call_raw(0, &[]).await?)?;
        Ok(())
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

    /// Sends a COMPOUND that the caller keeps (to resend it after a DELAY),
    /// counted on the channel under its main operation's name.
    pub async fn send(&self, args: &Compound4args) -> Result<Compound4res> {
        let t = std::time::Instant::now();
        let r = self.send_uncounted(args).await;
        if let Some(c) = self.channel() {
            let failed = matches!(r, Err(crate::nfs4::Error::Rpc(_)));
            c.count_op(main_op(&args.argarray), t.elapsed(), failed);
        }
        r
    }

    async fn send_uncounted(&self, args: &Compound4args) -> Result<Compound4res> {
        if let Some(g) = &self.gss {
            let mut d = g.call(NFSPROC4_COMPOUND, &xdr::to_bytes(args)).await?;
            return Ok(Compound4res::unpack(&mut d)?);
        }
        // Encoded straight into the call's record: a WRITE's data is
        // copied once on its way to the socket.
        let rec = match &self.transport {
            Transport::Single(r) => {
                r.call_packed(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, args)
                    .await?
            }
            Transport::Channel(c) => {
                c.call_packed(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, args)
                    .await?
            }
        };
        let mut d = rpc::client::results(rec)?;
        Ok(Compound4res::unpack(&mut d)?)
    }
}

/// The name a COMPOUND is counted under: its first operation that is not
/// SEQUENCE or a file handle move (SEQUENCE alone: a lease renewal).
pub fn main_op(ops: &[NfsArgop4]) -> &'static str {
    use NfsArgop4 as A;
    let mut name = "NULL";
    for op in ops {
        name = match op {
            A::OP_SEQUENCE(_) => "SEQUENCE",
            A::OP_PUTFH(_)
            | A::OP_PUTROOTFH
            | A::OP_PUTPUBFH
            | A::OP_SAVEFH
            | A::OP_RESTOREFH
            | A::OP_GETFH => {
                if name == "NULL" {
                    "PUTFH"
                } else {
                    name
                }
            }
            A::OP_ACCESS(_) => return "ACCESS",
            A::OP_CLOSE(_) => return "CLOSE",
            A::OP_COMMIT(_) => return "COMMIT",
            A::OP_CREATE(_) => return "CREATE",
            A::OP_DELEGRETURN(_) => return "DELEGRETURN",
            A::OP_GETATTR(_) => return "GETATTR",
            A::OP_LINK(_) => return "LINK",
            A::OP_LOCK(_) => return "LOCK",
            A::OP_LOCKT(_) => return "LOCKT",
            A::OP_LOCKU(_) => return "LOCKU",
            A::OP_LOOKUP(_) => return "LOOKUP",
            A::OP_LOOKUPP => return "LOOKUPP",
            A::OP_OPEN(_) => return "OPEN",
            A::OP_OPEN_CONFIRM(_) => return "OPEN_CONFIRM",
            A::OP_OPEN_DOWNGRADE(_) => return "OPEN_DOWNGRADE",
            A::OP_READ(_) => return "READ",
            A::OP_READDIR(_) => return "READDIR",
            A::OP_READLINK => return "READLINK",
            A::OP_REMOVE(_) => return "REMOVE",
            A::OP_RENAME(_) => return "RENAME",
            A::OP_RENEW(_) => return "RENEW",
            A::OP_SETATTR(_) => return "SETATTR",
            A::OP_SETCLIENTID(_) => return "SETCLIENTID",
            A::OP_SETCLIENTID_CONFIRM(_) => return "SETCLIENTID_CONFIRM",
            A::OP_WRITE(_) => return "WRITE",
            A::OP_RELEASE_LOCKOWNER(_) => return "RELEASE_LOCKOWNER",
            A::OP_BIND_CONN_TO_SESSION(_) => return "BIND_CONN_TO_SESSION",
            A::OP_EXCHANGE_ID(_) => return "EXCHANGE_ID",
            A::OP_CREATE_SESSION(_) => return "CREATE_SESSION",
            A::OP_DESTROY_SESSION(_) => return "DESTROY_SESSION",
            A::OP_DESTROY_CLIENTID(_) => return "DESTROY_CLIENTID",
            A::OP_FREE_STATEID(_) => return "FREE_STATEID",
            A::OP_TEST_STATEID(_) => return "TEST_STATEID",
            A::OP_RECLAIM_COMPLETE(_) => return "RECLAIM_COMPLETE",
            A::OP_SECINFO(_) | A::OP_SECINFO_NO_NAME(_) => return "SECINFO",
            A::OP_ALLOCATE(_) => return "ALLOCATE",
            A::OP_DEALLOCATE(_) => return "DEALLOCATE",
            A::OP_COPY(_) => return "COPY",
            A::OP_CLONE(_) => return "CLONE",
            A::OP_SEEK(_) => return "SEEK",
            A::OP_READ_PLUS(_) => return "READ_PLUS",
            _ => return "OTHER",
        };
    }
    name
}

/// The context [`Nfs4Conn::connect_gss`] and its channel variant make: for
/// NFSv4 calls.
fn nfs4_target(service: GssService, target: &str, policy: RenewPolicy) -> GssTarget<'_> {
    GssTarget {
        prog: NFS4_PROGRAM,
        vers: NFS_V4,
        service,
        target,
        policy,
    }
}

#[cfg(test)]
mod op_name_tests {
    use super::*;
    use proto::nfs4::*;

    #[test]
    fn a_compound_is_named_by_its_main_operation() {
        let seq = NfsArgop4::OP_SEQUENCE(Sequence4args {
            sa_sessionid: Default::default(),
            sa_sequenceid: 0,
            sa_slotid: 0,
            sa_highest_slotid: 0,
            sa_cachethis: false,
        });
        assert_eq!(main_op(std::slice::from_ref(&seq)), "SEQUENCE");
        assert_eq!(
            main_op(&[seq, NfsArgop4::OP_PUTROOTFH, NfsArgop4::OP_READLINK]),
            "READLINK"
        );
        assert_eq!(main_op(&[]), "NULL");
    }
}
