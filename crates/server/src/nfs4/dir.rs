//! Directory changes: CREATE (non-regular objects), REMOVE, RENAME, LINK,
//! and READLINK. Each reports the directory's change attribute before and
//! after, read under the directory's namespace lock ([`crate::dirlock`]),
//! so atomic where the backend is Tarn's alone. Under that lock, other
//! clients' directory delegations on the directory are recalled first
//! (NFS4ERR_DELAY meanwhile; see `dir_deleg`).

use super::attr;
use super::compound::{Compound, Fh};
use super::fail::{reply, Fail};
use super::fh::check_name;
use crate::dirlock;
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Backend, Fid, FileType, FsError};

/// The change attribute of `fid`, 0 if it cannot be read.
pub(super) fn change_of(b: &dyn Backend, fid: &Fid) -> u64 {
    b.getattr(fid).map(|a| attr::change(&a)).unwrap_or(0)
}

/// Runs `op` between two reads of the change attribute of `dir` (of the
/// object itself, for SETXATTR and REMOVEXATTR), holding its namespace
/// lock throughout; first Err(Jukebox) while `recalling` says delegations
/// on `dir` are being recalled.
pub(super) fn with_cinfo<T>(
    b: &dyn Backend,
    dir: &Fid,
    recalling: &dirlock::Recalling,
    op: impl FnOnce() -> Result<T, FsError>,
) -> Result<(T, ChangeInfo4), FsError> {
    let _held = dirlock::hold_unrecalled(dir, recalling)?;
    let before = change_of(b, dir);
    let r = op()?;
    let after = change_of(b, dir);
    Ok((r, cinfo(b, before, after)))
}

pub(super) fn cinfo(b: &dyn Backend, before: u64, after: u64) -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: dirlock::atomic(b),
        before,
        after,
    }
}

pub async fn create(c: &mut Compound<'_>, a: Create4args) -> Create4res {
    let r = do_create(c, a).await;
    reply(c.ctx, "OP_CREATE", r, Create4res::NFS4_OK)
}

async fn do_create(c: &mut Compound<'_>, a: Create4args) -> Result<Create4resok, Fail> {
    check_name(&a.objname)?;
    let (export, dir, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ROFS)?;
    let (set, attrset) = attr::decode_set(&a.createattrs, &c.n.idmap, c.minor)
        .map_err(|s| Fail::new(s, "create attributes could not be decoded"))?;
    let b = export.backend.clone();
    let name = a.objname.clone();
    let recalling = c.n.dir_recaller(c.clientid, export.id);
    let (fid, cinfo) =
        c.n.run(move || {
            with_cinfo(&*b, &dir, &recalling, || {
                let mknod = |t, rdev| b.mknod(&cred, &dir, &name, t, rdev, &set);
                let made = match a.objtype {
                    Createtype4::NF4DIR => b.mkdir(&cred, &dir, &name, &set),
                    Createtype4::NF4LNK(target) => b.symlink(&cred, &dir, &name, &target, &set),
                    Createtype4::NF4BLK(d) => mknod(FileType::BlockDev, (d.specdata1, d.specdata2)),
                    Createtype4::NF4CHR(d) => mknod(FileType::CharDev, (d.specdata1, d.specdata2)),
                    Createtype4::NF4SOCK => mknod(FileType::Socket, (0, 0)),
                    Createtype4::NF4FIFO => mknod(FileType::Fifo, (0, 0)),
                    // Regular files are made by OPEN.
                    Createtype4::Default(_) => Err(FsError::BadType),
                };
                made.map(|(fid, _)| fid)
            })
        })
        .await?;
    c.set_cur(Fh::Obj { export, fid });
    Ok(Create4resok { cinfo, attrset })
}

pub async fn remove(c: &mut Compound<'_>, a: Remove4args) -> Remove4res {
    let r = async {
        check_name(&a.target)?;
        let (export, dir, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ROFS)?;
        if c.snap.pseudo.junction(export.id, &dir, &a.target).is_some() {
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_XDEV,
                "another export is mounted on this name",
            ));
        }
        super::deleg::break_name(c, &export, &dir, &cred, &a.target).await?;
        let b = export.backend.clone();
        let name = a.target.clone();
        let recalling = c.n.dir_recaller(c.clientid, export.id);
        let ((), cinfo) =
            c.n.run(move || {
                with_cinfo(&*b, &dir, &recalling, || {
                    match b.remove(&cred, &dir, &name) {
                        // NFSv4 REMOVE removes directories too.
                        Err(FsError::IsDir) => b.rmdir(&cred, &dir, &name),
                        r => r,
                    }
                })
            })
            .await?;
        Ok(cinfo)
    }
    .await;
    reply(c.ctx, "OP_REMOVE", r, |cinfo| {
        Remove4res::NFS4_OK(Remove4resok { cinfo })
    })
}

/// The saved filehandle as an object of the same export as the current one.
fn saved_same_export(c: &Compound<'_>) -> Result<Fid, Fail> {
    let saved = c.saved.as_ref().ok_or(Fail::new(
        Nfsstat4::NFS4ERR_NOFILEHANDLE,
        "no saved filehandle",
    ))?;
    match (&saved.fh, &c.cur()?.fh) {
        (Fh::Obj { export: a, fid }, Fh::Obj { export: b, .. }) if Arc::ptr_eq(a, b) => Ok(*fid),
        (Fh::Obj { .. }, Fh::Obj { .. }) => Err(Fail::new(
            Nfsstat4::NFS4ERR_XDEV,
            "source and target are in different exports",
        )),
        _ => Err(Fail::new(
            Nfsstat4::NFS4ERR_ROFS,
            "pseudo filesystem directories cannot change",
        )),
    }
}

pub async fn rename(c: &mut Compound<'_>, a: Rename4args) -> Rename4res {
    let r = async {
        check_name(&a.oldname)?;
        check_name(&a.newname)?;
        let from = saved_same_export(c)?;
        let (export, to, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ROFS)?;
        // The file renamed and the one it replaces.
        super::deleg::break_name(c, &export, &from, &cred, &a.oldname).await?;
        super::deleg::break_name(c, &export, &to, &cred, &a.newname).await?;
        let b = export.backend.clone();
        let (old, new) = (a.oldname.clone(), a.newname.clone());
        let recalling = c.n.dir_recaller(c.clientid, export.id);
        c.n.run(move || {
            let _held = dirlock::hold_two_unrecalled(&from, &to, &recalling)?;
            let (sb, tb) = (change_of(&*b, &from), change_of(&*b, &to));
            b.rename(&cred, &from, &old, &to, &new)?;
            let (sa, ta) = (change_of(&*b, &from), change_of(&*b, &to));
            Ok::<_, FsError>(Rename4resok {
                source_cinfo: cinfo(&*b, sb, sa),
                target_cinfo: cinfo(&*b, tb, ta),
            })
        })
        .await
        .map_err(Fail::from)
    }
    .await;
    reply(c.ctx, "OP_RENAME", r, Rename4res::NFS4_OK)
}

pub async fn link(c: &mut Compound<'_>, a: Link4args) -> Link4res {
    let r = async {
        check_name(&a.newname)?;
        let src = saved_same_export(c)?;
        let (export, dir, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ROFS)?;
        super::deleg::break_file(c, &export, &src, super::deleg::Intent::Change, None).await?;
        let b = export.backend.clone();
        let name = a.newname.clone();
        let recalling = c.n.dir_recaller(c.clientid, export.id);
        let ((), cinfo) =
            c.n.run(move || with_cinfo(&*b, &dir, &recalling, || b.link(&cred, &src, &dir, &name)))
                .await?;
        Ok(cinfo)
    }
    .await;
    reply(c.ctx, "OP_LINK", r, |cinfo| {
        Link4res::NFS4_OK(Link4resok { cinfo })
    })
}

pub async fn readlink(c: &mut Compound<'_>) -> Readlink4res {
    let r = async {
        let (export, fid, cred) = c.obj(Nfsstat4::NFS4ERR_INVAL)?;
        let b = export.backend.clone();
        let target =
            c.n.pool
                .run_fast(&*b.clone(), move || b.readlink(&cred, &fid))
                .await?;
        Ok::<_, Fail>(target)
    }
    .await;
    reply(c.ctx, "OP_READLINK", r, |t| {
        Readlink4res::NFS4_OK(Readlink4resok { link: t.into() })
    })
}
