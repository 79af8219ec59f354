//! The one RPC service Tarn registers: MOUNT v3, NFSv3, NFSv4, NLM v4 and
//! the NSM notification program on the same port, so `mount -o
//! port=P,mountport=P` works without rpcbind (NFSv3 locking needs rpcbind
//! on both ends anyway: the client's lockd finds NLM through it, and we
//! find its lockd and statd).

use crate::mount::Mount;
use crate::nfs3::Nfs3;
use crate::nfs4::Nfs4;
use crate::nlm::Nlm;
use bytes::BytesMut;
use proto::{mount::MOUNT_PROGRAM, nfs3::NFS_PROGRAM, nlm4::NLM_PROG, nsm::SM_PROG};
use rpc::{CallContext, CallError, Service};
use std::sync::Arc;
use xdr::Decoder;

pub struct TarnService {
    pub nfs3: Nfs3,
    pub nfs4: Nfs4,
    pub mount: Mount,
    pub nlm: Arc<Nlm>,
}

impl Service for TarnService {
    /// Versions, idempotence, names and metric slots come from these.
    fn programs(&self) -> &'static [&'static rpc::Program] {
        crate::procedures::ALL
    }

    fn cacheable(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> bool {
        match prog {
            // NFSv4.0 has no sessions: like knfsd's DRC it relies on the
            // duplicate request cache, so a retransmitted CREATE or REMOVE
            // is not run twice (RFC 7530 §3.1.1); the dispatcher drops the
            // entry of a COMPOUND that changed nothing.
            NFS_PROGRAM if vers == 4 => proc_ == 1 && crate::nfs4::minor_version(args) == Some(0),
            _ => !self.idempotent(prog, vers, proc_),
        }
    }

    async fn call(
        &self,
        ctx: &CallContext,
        args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        match ctx.prog {
            NFS_PROGRAM if ctx.vers == 4 => self.nfs4.dispatch(ctx, args, out).await,
            NFS_PROGRAM => self.nfs3.dispatch(ctx, args, out).await,
            MOUNT_PROGRAM => self.mount.dispatch(&self.nfs3, ctx, args, out).await,
            NLM_PROG => self.nlm.dispatch(&self.nfs3, ctx, args, out).await,
            SM_PROG => self.nlm.dispatch_nsm(ctx, args, out),
            _ => Err(CallError::ProcUnavail),
        }
    }
}
