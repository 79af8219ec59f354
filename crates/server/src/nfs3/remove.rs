//! REMOVE and RMDIR: drop a name from a directory.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

async fn unlink(
    n: &Nfs3,
    ctx: &CallContext,
    what: Diropargs3,
    dir: bool,
) -> (Result<(), Fail>, WccData) {
    let t = match n.resolve_rw(ctx, &what.dir) {
        Ok(t) => t,
        Err(f) => {
            log_fail(ctx, &f);
            return (Err(f), attr::empty_wcc());
        }
    };
    let b = t.export.backend.clone();
    let name = what.name;
    let recalling = n.dir_recalling(t.export.id);
    let (r, wcc) = n
        .run(move || {
            // A file that goes: NFSv4 delegations on it are recalled first,
            // as NFSv4's REMOVE does (the holder may cache its data).
            if !dir && attr::named_recalling(&*b, &t.cred, &t.fid, &name, &recalling) {
                return (Err(vfs::FsError::Jukebox), attr::empty_wcc());
            }
            attr::with_dir_wcc(&*b, &t.fid, &recalling, || {
                if dir {
                    b.rmdir(&t.cred, &t.fid, &name)
                } else {
                    b.remove(&t.cred, &t.fid, &name)
                }
            })
        })
        .await;
    let r = r.map_err(|e| {
        let f = Fail::from(e);
        log_fail(ctx, &f);
        f
    });
    (r, wcc)
}

pub async fn remove(n: &Nfs3, ctx: &CallContext, args: Remove3args) -> Remove3res {
    match unlink(n, ctx, args.object, false).await {
        (Ok(()), dir_wcc) => Remove3res::NFS3_OK(Remove3resok { dir_wcc }),
        (Err(f), dir_wcc) => Remove3res::Default(f.status, Remove3resfail { dir_wcc }),
    }
}

pub async fn rmdir(n: &Nfs3, ctx: &CallContext, args: Rmdir3args) -> Rmdir3res {
    match unlink(n, ctx, args.object, true).await {
        (Ok(()), dir_wcc) => Rmdir3res::NFS3_OK(Rmdir3resok { dir_wcc }),
        (Err(f), dir_wcc) => Rmdir3res::Default(f.status, Rmdir3resfail { dir_wcc }),
    }
}
