//! LINK: a new hard link, within one export.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn link(n: &Nfs3, ctx: &CallContext, args: Link3args) -> Link3res {
    let fail = |f: Fail, file_attributes, linkdir_wcc| {
        log_fail(ctx, &f);
        Link3res::Default(
            f.status,
            Link3resfail {
                file_attributes,
                linkdir_wcc,
            },
        )
    };
    let (file, dir) = match (
        n.resolve_rw(ctx, &args.file),
        n.resolve_rw(ctx, &args.link.dir),
    ) {
        (Ok(f), Ok(d)) => (f, d),
        (Err(f), _) | (_, Err(f)) => return fail(f, None, attr::empty_wcc()),
    };
    if file.export.id != dir.export.id {
        let f = Fail::new(Nfsstat3::NFS3ERR_XDEV, "link across exports");
        return fail(f, None, attr::empty_wcc());
    }
    if n.recalling(file.export.id, &file.fid) {
        let f = Fail::new(
            Nfsstat3::NFS3ERR_JUKEBOX,
            "an NFSv4 delegation on the file is being recalled",
        );
        return fail(f, None, attr::empty_wcc());
    }
    let b = dir.export.backend.clone();
    let name = args.link.name;
    let (r, file_attributes, linkdir_wcc) = n
        .run(move || {
            let (r, wcc) = attr::with_wcc(&*b, &dir.fid, || {
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
        Err(e) => fail(e.into(), file_attributes, linkdir_wcc),
    }
}
