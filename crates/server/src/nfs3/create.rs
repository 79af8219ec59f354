//! CREATE, MKDIR, SYMLINK and MKNOD: a new name in a directory, with its
//! handle, its attributes and the directory's wcc data.

use super::{attr, failed, failed_with, Fail, FailReply, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::{Attr, Backend, CreateHow, Cred, Fid, FileType, FsError};

/// The creating procedures' replies: one success shape (handle,
/// attributes, the directory's wcc data) under four names.
trait MadeReply: FailReply<Attrs = WccData> {
    fn made(fh: NfsFh3, a: &Attr, dir_wcc: WccData) -> Self;
}

macro_rules! made_reply {
    ($($res:ident($ok:ident)),* $(,)?) => {
        $(impl MadeReply for $res {
            fn made(fh: NfsFh3, a: &Attr, dir_wcc: WccData) -> Self {
                $res::NFS3_OK($ok {
                    obj: Some(fh),
                    obj_attributes: Some(attr::fattr3(a)),
                    dir_wcc,
                })
            }
        })*
    };
}

made_reply! {
    Create3res(Create3resok),
    Mkdir3res(Mkdir3resok),
    Symlink3res(Symlink3resok),
    Mknod3res(Mknod3resok),
}

/// Resolves `at.dir` (read-write), runs `op` on `at.name` between the
/// directory's pre- and post-op getattr, and replies with a handle sealed
/// for what it made.
async fn make<R: MadeReply>(
    n: &Nfs3,
    ctx: &CallContext,
    at: Diropargs3,
    op: impl FnOnce(&dyn Backend, &Cred, &Fid, &[u8]) -> Result<(Fid, Attr), FsError> + Send + 'static,
) -> R {
    let t = or_failed!(ctx, n.resolve_rw(ctx, &at.dir));
    let b = t.export.backend.clone();
    let name = at.name;
    let recalling = n.dir_recalling(t.export.id);
    let (r, dir_wcc) = n
        .run(move || {
            attr::with_dir_wcc(&*b, &t.fid, &recalling, || op(&*b, &t.cred, &t.fid, &name))
        })
        .await;
    match r {
        Ok((fid, a)) => R::made(n.handle(&t.export, &fid), &a, dir_wcc),
        Err(e) => failed_with(ctx, e.into(), dir_wcc),
    }
}

pub async fn create(n: &Nfs3, ctx: &CallContext, args: Create3args) -> Create3res {
    let how = match &args.how {
        Createhow3::UNCHECKED(s) => CreateHow::Unchecked(attr::sattr(s)),
        Createhow3::GUARDED(s) => CreateHow::Guarded(attr::sattr(s)),
        Createhow3::EXCLUSIVE(v) => CreateHow::Exclusive(*v),
    };
    make(n, ctx, args.r#where, move |b, c, d, name| {
        b.create(c, d, name, &how)
    })
    .await
}

pub async fn mkdir(n: &Nfs3, ctx: &CallContext, args: Mkdir3args) -> Mkdir3res {
    let set = attr::sattr(&args.attributes);
    make(n, ctx, args.r#where, move |b, c, d, name| {
        b.mkdir(c, d, name, &set)
    })
    .await
}

pub async fn symlink(n: &Nfs3, ctx: &CallContext, args: Symlink3args) -> Symlink3res {
    let set = attr::sattr(&args.symlink.symlink_attributes);
    let target = args.symlink.symlink_data;
    make(n, ctx, args.r#where, move |b, c, d, name| {
        b.symlink(c, d, name, &target, &set)
    })
    .await
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
            return failed(ctx, f);
        }
    };
    make(n, ctx, args.r#where, move |b, c, d, name| {
        b.mknod(c, d, name, ftype, rdev, &set)
    })
    .await
}
