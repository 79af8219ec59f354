//! The one RPC service Tarn registers: MOUNT v3, NFSv3 and NFSv4 on the
//! same port, so `mount -o port=P,mountport=P` works without rpcbind.

use crate::mount::Mount;
use crate::nfs3::{self, Nfs3};
use crate::nfs4::Nfs4;
use bytes::BytesMut;
use proto::{mount::MOUNT_PROGRAM, nfs3::NFS_PROGRAM};
use rpc::{CallContext, CallError, Service};
use xdr::Decoder;

pub struct TarnService {
    pub nfs3: Nfs3,
    pub nfs4: Nfs4,
    pub mount: Mount,
}

impl Service for TarnService {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        match prog {
            NFS_PROGRAM => Some((3, 4)),
            MOUNT_PROGRAM => Some((3, 3)),
            _ => None,
        }
    }

    fn idempotent(&self, prog: u32, vers: u32, proc_: u32) -> bool {
        match prog {
            // NFSv4.1 has exactly-once semantics through session slots; a
            // COMPOUND never goes through the DRC.
            NFS_PROGRAM if vers == 4 => true,
            NFS_PROGRAM => Nfs3::idempotent(proc_),
            _ => Mount::idempotent(proc_),
        }
    }

    fn procedure_name(&self, prog: u32, vers: u32, proc_: u32) -> &'static str {
        match prog {
            NFS_PROGRAM if vers == 4 => match proc_ {
                0 => "NFSPROC4_NULL",
                1 => "NFSPROC4_COMPOUND",
                _ => "NFSPROC4_UNKNOWN",
            },
            NFS_PROGRAM => nfs3::proc_name(proc_),
            MOUNT_PROGRAM => proto::mount::mount_program_procedure_name(vers, proc_)
                .unwrap_or("MOUNTPROC3_UNKNOWN"),
            _ => "unknown",
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
            _ => Err(CallError::ProcUnavail),
        }
    }
}
