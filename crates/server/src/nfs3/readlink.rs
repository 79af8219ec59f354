//! READLINK: a symlink's target.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn readlink(n: &Nfs3, ctx: &CallContext, args: Readlink3args) -> Readlink3res {
    let t = or_failed!(ctx, n.resolve(ctx, &args.symlink));
    let b = t.export.backend.clone();
    let (r, symlink_attributes) = n
        .run(move || {
            let r = b.readlink(&t.cred, &t.fid);
            (r, attr::post_op(&*b, &t.fid))
        })
        .await;
    match r {
        Ok(target) => Readlink3res::NFS3_OK(Readlink3resok {
            symlink_attributes,
            data: target.into(),
        }),
        Err(e) => failed_with(ctx, e.into(), symlink_attributes),
    }
}
