//! LOOKUP: one name in a directory, with the object's and the directory's attributes.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn lookup(n: &Nfs3, ctx: &CallContext, args: Lookup3args) -> Lookup3res {
    let t = or_failed!(ctx, n.resolve(ctx, &args.what.dir));
    let b = t.export.backend.clone();
    let name = args.what.name;
    let (cred, fid) = (t.cred.clone(), t.fid);
    let (r, dir_attributes) = n
        .run_fast(&*t.export.backend, move || {
            let (r, dir) = b.lookup_with_dir(&cred, &fid, &name);
            (r, attr::post_op_attr(dir.as_ref()))
        })
        .await;
    match r {
        Ok((fid, a)) => Lookup3res::NFS3_OK(Lookup3resok {
            object: n.handle(&t.export, &fid),
            obj_attributes: Some(attr::fattr3(&a)),
            dir_attributes,
        }),
        Err(e) => failed_with(ctx, e.into(), dir_attributes),
    }
}
