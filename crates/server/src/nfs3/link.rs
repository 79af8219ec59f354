//! LINK: a new hard link, within one export.

use super::{attr, failed, failed_with, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn link(n: &Nfs3, ctx: &CallContext, args: Link3args) -> Link3res {
    let pair = (&args.file, &args.link.dir);
    let (file, dir) = or_failed!(ctx, n.resolve_rw_pair(ctx, pair, "link across exports"));
    if let Err(f) = n.not_recalling(&file) {
        return failed(ctx, f);
    }
    let b = dir.export.backend.clone();
    let name = args.link.name;
    let recalling = n.dir_recalling(dir.export.id);
    let (r, file_attributes, linkdir_wcc) = n
        .run(move || {
            let (r, wcc) = attr::with_dir_wcc(&*b, &dir.fid, &recalling, || {
                b.link(&dir.cred, &file.fid, &dir.fid, &name)
            });
            // After the link, so nlink shows it.
            (r, attr::post_op(&*b, &file.fid), wcc)
        })
        .await;
    match r {
        Ok(()) => Link3res::NFS3_OK(Link3resok {
            file_attributes,
            linkdir_wcc,
        }),
        Err(e) => failed_with(ctx, e.into(), (file_attributes, linkdir_wcc)),
    }
}
