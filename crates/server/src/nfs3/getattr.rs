//! GETATTR: one backend stat, nothing else; answered on the async worker
//! itself when the backend can do it without waiting for a disk, since the
//! hand-off to the blocking pool and back costs more than the stat.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn getattr(n: &Nfs3, ctx: &CallContext, args: Getattr3args) -> Getattr3res {
    let r = async {
        let t = n.resolve(ctx, &args.object)?;
        // For the doctor's GETATTR-storm rule: how many distinct files.
        ctx.client.record_getattr(&args.object.data);
        let b = t.export.backend.clone();
        let a = n
            .run_fast(&*t.export.backend, move || b.getattr(&t.fid))
            .await?;
        Ok::<_, Fail>(a)
    }
    .await;
    match r {
        Ok(a) => Getattr3res::NFS3_OK(Getattr3resok {
            obj_attributes: attr::fattr3(&a),
        }),
        Err(f) => {
            log_fail(ctx, &f);
            Getattr3res::Default(f.status)
        }
    }
}
