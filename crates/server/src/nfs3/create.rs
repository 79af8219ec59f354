//! CREATE, MKDIR, SYMLINK and MKNOD: a new name in a directory, with its
//! handle, its attributes and the directory's wcc data.

use super::{attr, log_fail, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::{Attr, Backend, CreateHow, Cred, Fid, FileType, FsError};

/// What every creating procedure replies with, success or not.
struct Made {
    r: Result<(NfsFh3, Attr), Fail>,
    dir_wcc: WccData,
}

/// Resolves `dir` (read-write), runs `op` between the directory's pre- and
/// post-op getattr, and seals a handle for what it made.
async fn make(
    n: &Nfs3,
    ctx: &CallContext,
    dir: &NfsFh3,
    name: Filename3,
    op: impl FnOnce(&dyn Backend, &Cred, &Fid, &[u8]) -> Result<(Fid, Attr), FsError> + Send + 'static,
) -> Made {
    let t = match n.resolve_rw(ctx, dir) {
        Ok(t) => t,
        Err(f) => {
            log_fail(ctx, &f);
            return Made {
                r: Err(f),
                dir_wcc: attr::empty_wcc(),
            };
        }
    };
    let b = t.export.backend.clone();
    let (r, dir_wcc) = n
        .run(move || attr::with_dir_wcc(&*b, &t.fid, || op(&*b, &t.cred, &t.fid, &name)))
        .await;
    let r = match r {
        Ok((fid, a)) => Ok((n.handle(&t.export, &fid), a)),
        Err(e) => {
            let f = Fail::from(e);
            log_fail(ctx, &f);
            Err(f)
        }
    };
    Made { r, dir_wcc }
}

pub async fn create(n: &Nfs3, ctx: &CallContext, args: Create3args) -> Create3res {
    let how = match &args.how {
        Createhow3::UNCHECKED(s) => CreateHow::Unchecked(attr::sattr(s)),
        Createhow3::GUARDED(s) => CreateHow::Guarded(attr::sattr(s)),
        Createhow3::EXCLUSIVE(v) => CreateHow::Exclusive(*v),
    };
    let m = make(
        n,
        ctx,
        &args.r#where.dir,
        args.r#where.name,
        move |b, c, d, name| b.create(c, d, name, &how),
    )
    .await;
    match m.r {
        Ok((fh, a)) => Create3res::NFS3_OK(Create3resok {
            obj: Some(fh),
            obj_attributes: Some(attr::fattr3(&a)),
            dir_wcc: m.dir_wcc,
        }),
        Err(f) => Create3res::Default(f.status, Create3resfail { dir_wcc: m.dir_wcc }),
    }
}

pub async fn mkdir(n: &Nfs3, ctx: &CallContext, args: Mkdir3args) -> Mkdir3res {
    let set = attr::sattr(&args.attributes);
    let m = make(
        n,
        ctx,
        &args.r#where.dir,
        args.r#where.name,
        move |b, c, d, name| b.mkdir(c, d, name, &set),
    )
    .await;
    match m.r {
        Ok((fh, a)) => Mkdir3res::NFS3_OK(Mkdir3resok {
            obj: Some(fh),
            obj_attributes: Some(attr::fattr3(&a)),
            dir_wcc: m.dir_wcc,
        }),
        Err(f) => Mkdir3res::Default(f.status, Mkdir3resfail { dir_wcc: m.dir_wcc }),
    }
}

pub async fn symlink(n: &Nfs3, ctx: &CallContext, args: Symlink3args) -> Symlink3res {
    let set = attr::sattr(&args.symlink.symlink_attributes);
    let target = args.symlink.symlink_data;
    let m = make(
        n,
        ctx,
        &args.r#where.dir,
        args.r#where.name,
        move |b, c, d, name| b.symlink(c, d, name, &target, &set),
    )
    .await;
    match m.r {
        Ok((fh, a)) => Symlink3res::NFS3_OK(Symlink3resok {
            obj: Some(fh),
            obj_attributes: Some(attr::fattr3(&a)),
            dir_wcc: m.dir_wcc,
        }),
        Err(f) => Symlink3res::Default(f.status, Symlink3resfail { dir_wcc: m.dir_wcc }),
    }
}

pub async fn mknod(n: &Nfs3, ctx: &CallContext, args: Mknod3args) -> Mknod3res {
    let (ftype, rdev, set) = match &args.what {
        Mknoddata3::NF3CHR(d) => (
            FileType::CharDev,
            (d.spec.specdata1, d.spec.specdata2),
            attr::sattr(&d.dev_attributes),
        ),
        Mknoddata3::NF3BLK(d) => (
            FileType::BlockDev,
            (d.spec.specdata1, d.spec.specdata2),
            attr::sattr(&d.dev_attributes),
        ),
        Mknoddata3::NF3SOCK(s) => (FileType::Socket, (0, 0), attr::sattr(s)),
        Mknoddata3::NF3FIFO(s) => (FileType::Fifo, (0, 0), attr::sattr(s)),
        Mknoddata3::Default(_) => {
            // Regular files, directories and symlinks have their own procedures.
            let f = Fail::new(Nfsstat3::NFS3ERR_BADTYPE, "MKNOD of a non-special type");
            log_fail(ctx, &f);
            return Mknod3res::Default(
                f.status,
                Mknod3resfail {
                    dir_wcc: attr::empty_wcc(),
                },
            );
        }
    };
    let m = make(
        n,
        ctx,
        &args.r#where.dir,
        args.r#where.name,
        move |b, c, d, name| b.mknod(c, d, name, ftype, rdev, &set),
    )
    .await;
    match m.r {
        Ok((fh, a)) => Mknod3res::NFS3_OK(Mknod3resok {
            obj: Some(fh),
            obj_attributes: Some(attr::fattr3(&a)),
            dir_wcc: m.dir_wcc,
        }),
        Err(f) => Mknod3res::Default(f.status, Mknod3resfail { dir_wcc: m.dir_wcc }),
    }
}
