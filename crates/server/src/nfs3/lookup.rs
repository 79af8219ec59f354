//! LOOKUP: one name in a directory, with the object's and the directory's attributes.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn lookup(n: &Nfs3, ctx: &CallContext, args: Lookup3args) -> Lookup3res {
    let t = match n.resolve(ctx, &args.what.dir) {
        Ok(t) => t,
        Err(f) => return fail(ctx, f, None),
    };
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
        Err(e) => fail(ctx, e.into(), dir_attributes),
    }
}

fn fail(ctx: &CallContext, f: Fail, dir_attributes: PostOpAttr) -> Lookup3res {
    log_fail(ctx, &f);
    Lookup3res::Default(f.status, Lookup3resfail { dir_attributes })
}
