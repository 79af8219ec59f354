//! WRITE: the received payload goes to the backend without a copy.

use super::{attr, failed, failed_with, Nfs3, MAX_IO};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::Stable;

pub async fn write(n: &Nfs3, ctx: &CallContext, args: Write3args) -> Write3res {
    let t = or_failed!(ctx, n.resolve_change(ctx, &args.file));
    // A short write is legal: the client sends the rest again.
    let len = (args.count as usize)
        .min(args.data.len())
        .min(MAX_IO as usize);
    let data = args.data.slice(..len);
    // For the doctor's small-synchronous-writes rule.
    ctx.client
        .record_write(len as u32, args.stable != StableHow::UNSTABLE);
    let stable = match args.stable {
        StableHow::UNSTABLE => Stable::Unstable,
        StableHow::DATA_SYNC => Stable::DataSync,
        StableHow::FILE_SYNC => Stable::FileSync,
    };
    let offset = args.offset;
    let b = t.export.backend.clone();
    // Writes to one file queue for one pool thread (see Pool::run_serial).
    let (r, file_wcc) = n
        .pool
        .run_serial((t.export.id, t.fid), move || {
            attr::with_wcc(&*b, &t.fid, || {
                b.write(&t.cred, &t.fid, offset, &data, stable)
            })
        })
        .await;
    match r {
        Ok((count, st)) => Write3res::NFS3_OK(Write3resok {
            file_wcc,
            count: count as u32,
            committed: match st {
                Stable::Unstable => StableHow::UNSTABLE,
                Stable::DataSync => StableHow::DATA_SYNC,
                Stable::FileSync => StableHow::FILE_SYNC,
            },
            verf: n.write_verf.get(),
        }),
        Err(e) => {
            let f: super::Fail = e.into();
            n.write_verf.reset_if(lost(f.status));
            failed_with(ctx, f, file_wcc)
        }
    }
}

/// Whether a failed WRITE or COMMIT may have lost unstable data.
pub(crate) fn lost(s: Nfsstat3) -> bool {
    matches!(
        s,
        Nfsstat3::NFS3ERR_IO | Nfsstat3::NFS3ERR_NOSPC | Nfsstat3::NFS3ERR_DQUOT
    )
}
