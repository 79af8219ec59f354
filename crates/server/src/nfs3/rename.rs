//! RENAME: move a name, within one export, with both directories' wcc data.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn rename(n: &Nfs3, ctx: &CallContext, args: Rename3args) -> Rename3res {
    let pair = (&args.from.dir, &args.to.dir);
    let (from, to) = or_failed!(ctx, n.resolve_rw_pair(ctx, pair, "rename across exports"));
    let b = from.export.backend.clone();
    let (from_name, to_name) = (args.from.name, args.to.name);
    let recalling = n.dir_recalling(from.export.id);
    let (r, fromdir_wcc, todir_wcc) = n
        .run(move || {
            let held = crate::dirlock::hold_two_unrecalled(&from.fid, &to.fid, &recalling);
            let _held = match held {
                Ok(h) => h,
                Err(e) => return (Err(e), attr::empty_wcc(), attr::empty_wcc()),
            };
            // The file renamed and the one it replaces: NFSv4 delegations
            // on them are recalled first, as NFSv4's RENAME does.
            let moved = attr::named_recalling(&*b, &from.cred, &from.fid, &from_name, &recalling);
            let replaced = attr::named_recalling(&*b, &to.cred, &to.fid, &to_name, &recalling);
            if moved | replaced {
                return (
                    Err(vfs::FsError::Jukebox),
                    attr::empty_wcc(),
                    attr::empty_wcc(),
                );
            }
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
        Err(e) => failed_with(ctx, e.into(), (fromdir_wcc, todir_wcc)),
    }
}
