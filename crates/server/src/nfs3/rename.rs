//! RENAME: move a name, within one export, with both directories' wcc data.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn rename(n: &Nfs3, ctx: &CallContext, args: Rename3args) -> Rename3res {
    let fail = |f: Fail, fromdir_wcc, todir_wcc| {
        log_fail(ctx, &f);
        Rename3res::Default(
            f.status,
            Rename3resfail {
                fromdir_wcc,
                todir_wcc,
            },
        )
    };
    let (from, to) = match (
        n.resolve_rw(ctx, &args.from.dir),
        n.resolve_rw(ctx, &args.to.dir),
    ) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(f), _) | (_, Err(f)) => return fail(f, attr::empty_wcc(), attr::empty_wcc()),
    };
    if from.export.id != to.export.id {
        let f = Fail::new(Nfsstat3::NFS3ERR_XDEV, "rename across exports");
        return fail(f, attr::empty_wcc(), attr::empty_wcc());
    }
    let b = from.export.backend.clone();
    let (from_name, to_name) = (args.from.name, args.to.name);
    let (r, fromdir_wcc, todir_wcc) = n
        .run(move || {
            let (from_before, to_before) = (b.getattr(&from.fid).ok(), b.getattr(&to.fid).ok());
            let r = b.rename(&from.cred, &from.fid, &from_name, &to.fid, &to_name);
            let (from_after, to_after) = (b.getattr(&from.fid).ok(), b.getattr(&to.fid).ok());
            (
                r,
                attr::wcc_data(from_before.as_ref(), from_after.as_ref()),
                attr::wcc_data(to_before.as_ref(), to_after.as_ref()),
            )
        })
        .await;
    match r {
        Ok(()) => Rename3res::NFS3_OK(Rename3resok {
            fromdir_wcc,
            todir_wcc,
        }),
        Err(e) => fail(e.into(), fromdir_wcc, todir_wcc),
    }
}
