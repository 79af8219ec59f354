//! FSSTAT, FSINFO and PATHCONF: what the filesystem holds and what it allows.

use super::{attr, failed, failed_with, Fail, Nfs3, MAX_IO};
use proto::nfs3::*;
use rpc::CallContext;

pub async fn fsstat(n: &Nfs3, ctx: &CallContext, args: Fsstat3args) -> Fsstat3res {
    let t = or_failed!(ctx, n.resolve(ctx, &args.fsroot));
    let b = t.export.backend.clone();
    let fid = t.fid;
    let (r, obj_attributes) = n
        .run_fast(&*t.export.backend, move || {
            (b.fsstat(&fid), attr::post_op(&*b, &fid))
        })
        .await;
    match r {
        Ok(s) => Fsstat3res::NFS3_OK(Fsstat3resok {
            obj_attributes,
            tbytes: s.total_bytes,
            fbytes: s.free_bytes,
            abytes: s.avail_bytes,
            tfiles: s.total_files,
            ffiles: s.free_files,
            afiles: s.avail_files,
            // Usage changes at any time; clients should not cache it.
            invarsec: 0,
        }),
        Err(e) => failed_with(ctx, e.into(), obj_attributes),
    }
}

/// The attributes of what `fh` names: all FSINFO and PATHCONF look at.
async fn getattr(n: &Nfs3, ctx: &CallContext, fh: &NfsFh3) -> Result<vfs::Attr, Fail> {
    let t = n.resolve(ctx, fh)?;
    let b = t.export.backend.clone();
    Ok(n.run(move || b.getattr(&t.fid)).await?)
}

pub async fn fsinfo(n: &Nfs3, ctx: &CallContext, args: Fsinfo3args) -> Fsinfo3res {
    match getattr(n, ctx, &args.fsroot).await {
        Ok(a) => Fsinfo3res::NFS3_OK(Fsinfo3resok {
            obj_attributes: Some(attr::fattr3(&a)),
            rtmax: MAX_IO,
            rtpref: MAX_IO,
            rtmult: 4096,
            wtmax: MAX_IO,
            wtpref: MAX_IO,
            wtmult: 4096,
            dtpref: 65536,
            maxfilesize: u64::MAX >> 1,
            time_delta: Nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        }),
        Err(f) => failed(ctx, f),
    }
}

pub async fn pathconf(n: &Nfs3, ctx: &CallContext, args: Pathconf3args) -> Pathconf3res {
    match getattr(n, ctx, &args.object).await {
        Ok(a) => Pathconf3res::NFS3_OK(Pathconf3resok {
            obj_attributes: Some(attr::fattr3(&a)),
            // ext4's limit; the backend does not report its own.
            linkmax: 65000,
            name_max: vfs::NAME_MAX as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        }),
        Err(f) => failed(ctx, f),
    }
}
