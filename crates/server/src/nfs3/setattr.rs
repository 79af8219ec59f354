//! SETATTR: change attributes, honouring the client's ctime guard.

use super::{attr, failed, failed_with, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn setattr(n: &Nfs3, ctx: &CallContext, args: Setattr3args) -> Setattr3res {
    let t = or_failed!(ctx, n.resolve_change(ctx, &args.object));
    let set = attr::sattr(&args.new_attributes);
    let guard = args.guard;
    let b = t.export.backend.clone();
    let (r, wcc) = n
        .run(move || {
            let before = match b.getattr(&t.fid) {
                Ok(a) => a,
                Err(e) => return (Err(Fail::from(e)), attr::empty_wcc()),
            };
            // The guard makes SETATTR conditional on the ctime the client saw.
            if let Some(g) = guard {
                if attr::nfstime(before.ctime) != g {
                    let wcc = attr::wcc_data(Some(&before), Some(&before));
                    let f = Fail::new(Nfsstat3::NFS3ERR_NOT_SYNC, "guard ctime does not match");
                    return (Err(f), wcc);
                }
            }
            match b.setattr(&t.cred, &t.fid, &set) {
                Ok(after) => (Ok(()), attr::wcc_data(Some(&before), Some(&after))),
                Err(e) => {
                    let after = b.getattr(&t.fid).ok();
                    (Err(e.into()), attr::wcc_data(Some(&before), after.as_ref()))
                }
            }
        })
        .await;
    match r {
        Ok(()) => Setattr3res::NFS3_OK(Setattr3resok { obj_wcc: wcc }),
        Err(f) => failed_with(ctx, f, wcc),
    }
}
