//! ACCESS: which of the asked-for rights the caller really has.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::Access;

pub async fn access(n: &Nfs3, ctx: &CallContext, args: Access3args) -> Access3res {
    let t = or_failed!(ctx, n.resolve(ctx, &args.object));
    let want = Access(args.access) & Access::ALL;
    let b = t.export.backend.clone();
    let (cred, fid) = (t.cred.clone(), t.fid);
    let (r, obj_attributes) = n
        .run_fast(&*t.export.backend, move || {
            let (r, a) = b.access_with_attr(&cred, &fid, want);
            (r, attr::post_op_attr(a.as_ref()))
        })
        .await;
    match r {
        Ok(mut got) => {
            got = got & want;
            // Mode bits may allow writing; a read-only export never does.
            if !t.rw {
                got =
                    Access(got.bits() & !(Access::MODIFY | Access::EXTEND | Access::DELETE).bits());
            }
            Access3res::NFS3_OK(Access3resok {
                obj_attributes,
                access: got.bits(),
            })
        }
        Err(e) => failed_with(ctx, e.into(), obj_attributes),
    }
}
