//! Filehandle operations: PUTFH, PUTROOTFH, PUTPUBFH, GETFH, SAVEFH,
//! RESTOREFH, LOOKUP and LOOKUPP, crossing between the pseudo filesystem
//! and the exports.

use super::compound::{Compound, Cur, Fh, PSEUDO_EXPORT};
use super::fail::{log_fail, Fail};
use super::pseudo::{MountedOn, Target};
use super::server::Nfs4;
use bytes::Bytes;
use proto::nfs4::*;
use vfs::{Backend, Fid, FileType, FsError};

pub fn putfh(c: &mut Compound<'_>, a: Putfh4args) -> Putfh4res {
    let status = match c.n.open_fh(c, &a.object.0) {
        Ok(fh) => {
            c.cur = Some(Cur::with_wire(fh, a.object.0));
            // §16.2.3.1.2, as in Compound::set_cur.
            c.cur_sid = Some(super::compound::ANONYMOUS);
            Nfsstat4::NFS4_OK
        }
        Err(f) => {
            log_fail(c.ctx, "OP_PUTFH", &f);
            f.status
        }
    };
    Putfh4res { status }
}

pub fn putrootfh(c: &mut Compound<'_>) -> Nfsstat4 {
    let root = c.n.root(c);
    c.set_cur(root);
    Nfsstat4::NFS4_OK
}

pub fn getfh(c: &mut Compound<'_>) -> Getfh4res {
    let n = c.n;
    match c.cur.as_mut() {
        Some(cur) => Getfh4res::NFS4_OK(Getfh4resok {
            object: NfsFh4(cur.wire(n)),
        }),
        None => Getfh4res::Default(Nfsstat4::NFS4ERR_NOFILEHANDLE),
    }
}

pub fn savefh(c: &mut Compound<'_>) -> Nfsstat4 {
    match &c.cur {
        Some(cur) => {
            c.saved = Some(cur.clone());
            c.saved_sid = c.cur_sid.clone();
            Nfsstat4::NFS4_OK
        }
        None => Nfsstat4::NFS4ERR_NOFILEHANDLE,
    }
}

pub fn restorefh(c: &mut Compound<'_>) -> Nfsstat4 {
    match &c.saved {
        Some(s) => {
            c.cur = Some(s.clone());
            c.cur_sid = c.saved_sid.clone();
            if let Fh::Obj { export, .. } = &s.fh {
                c.ctx.set_export(export.id);
            }
            Nfsstat4::NFS4_OK
        }
        None => Nfsstat4::NFS4ERR_RESTOREFH,
    }
}

/// RFC 8881 §18.13.3 / §2.8.2: a component must be a real name.
pub fn check_name(name: &[u8]) -> Result<(), Fail> {
    if name.is_empty() {
        return Err(Fail::new(Nfsstat4::NFS4ERR_INVAL, "empty name"));
    }
    if name.len() > 255 {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_NAMETOOLONG,
            "name longer than 255 bytes",
        ));
    }
    if name == b"." || name == b".." {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_BADNAME,
            "\".\" and \"..\" are not names in NFSv4",
        ));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_BADCHAR,
            "name contains '/' or NUL",
        ));
    }
    Ok(())
}

pub async fn lookup(c: &mut Compound<'_>, a: Lookup4args) -> Lookup4res {
    let status = match lookup_fh(c, &a.objname).await {
        Ok(fh) => {
            c.set_cur(fh);
            Nfsstat4::NFS4_OK
        }
        Err(f) => {
            log_fail(c.ctx, "OP_LOOKUP", &f);
            f.status
        }
    };
    Lookup4res { status }
}

/// The object `name` in the current directory, crossing into exports.
pub async fn lookup_fh(c: &Compound<'_>, name: &[u8]) -> Result<Fh, Fail> {
    check_name(name)?;
    let n = c.n;
    match &c.cur()?.fh {
        Fh::Pseudo(node) => match c.snap.pseudo.lookup(*node, name) {
            Some(Target::Node(x)) => Ok(Fh::Pseudo(x)),
            Some(Target::Export(id)) => export_root(c, id),
            None => Err(Fail::new(
                Nfsstat4::NFS4ERR_NOENT,
                "no such export or pseudo directory",
            )),
        },
        Fh::Obj { export, fid } => {
            if let Some(id) = c.snap.pseudo.junction(export.id, fid, name) {
                return export_root(c, id);
            }
            let (b, cred, dir, name) = (
                export.backend.clone(),
                c.access(export)?.cred.clone(),
                *fid,
                name.to_vec(),
            );
            let r = n
                .pool
                .run_fast(&*b.clone(), move || {
                    b.lookup(&cred, &dir, &name)
                        .map_err(|e| from_non_dir(&*b, &dir, e))
                })
                .await;
            let (fid, _) = r?;
            Ok(Fh::Obj {
                export: export.clone(),
                fid,
            })
        }
    }
}

/// LOOKUP or LOOKUPP from a symbolic link is NFS4ERR_SYMLINK, from any
/// other non-directory NFS4ERR_NOTDIR (RFC 7530 §16.13, RFC 8881 §18.13.3;
/// the Linux server answers LOOKUPP the same way), so a client knows to
/// follow the link itself. Only a failed lookup pays for the stat.
fn from_non_dir(b: &dyn Backend, dir: &Fid, e: FsError) -> Fail {
    if e == FsError::NotDir && b.getattr(dir).is_ok_and(|a| a.ftype == FileType::Symlink) {
        return Fail::new(
            Nfsstat4::NFS4ERR_SYMLINK,
            "the current filehandle is a symbolic link",
        );
    }
    e.into()
}

fn export_root(c: &Compound<'_>, id: u32) -> Result<Fh, Fail> {
    let e = c
        .snap
        .exports
        .get(id)
        .ok_or(Fail::new(Nfsstat4::NFS4ERR_STALE, "export vanished"))?;
    c.access(e)?;
    Ok(Fh::Obj {
        export: e.clone(),
        fid: e.backend.root(),
    })
}

pub async fn lookupp(c: &mut Compound<'_>) -> Lookupp4res {
    let status = match lookupp_fh(c).await {
        Ok(fh) => {
            c.set_cur(fh);
            Nfsstat4::NFS4_OK
        }
        Err(f) => {
            log_fail(c.ctx, "OP_LOOKUPP", &f);
            f.status
        }
    };
    Lookupp4res { status }
}

/// The parent of the current filehandle.
pub async fn lookupp_fh(c: &Compound<'_>) -> Result<Fh, Fail> {
    let n = c.n;
    match &c.cur()?.fh {
        Fh::Pseudo(0) => Err(Fail::new(Nfsstat4::NFS4ERR_NOENT, "the root has no parent")),
        Fh::Pseudo(x) => Ok(Fh::Pseudo(c.snap.pseudo.nodes[*x as usize].parent)),
        Fh::Obj { export, fid } => {
            if *fid == export.backend.root() {
                return match c.snap.pseudo.mounted_on.get(&export.id) {
                    Some(MountedOn::Node(x)) => Ok(Fh::Pseudo(*x)),
                    Some(MountedOn::Dir {
                        export: up, fid, ..
                    }) => Ok(Fh::Obj {
                        export: c
                            .snap
                            .exports
                            .get(*up)
                            .expect("junction export exists")
                            .clone(),
                        fid: *fid,
                    }),
                    None => Err(Fail::new(Nfsstat4::NFS4ERR_NOENT, "the root has no parent")),
                };
            }
            let (b, cred, dir) = (export.backend.clone(), c.access(export)?.cred.clone(), *fid);
            let (fid, _) = n
                .pool
                .run_fast(&*b.clone(), move || {
                    b.lookup(&cred, &dir, b"..")
                        .map_err(|e| from_non_dir(&*b, &dir, e))
                })
                .await?;
            Ok(Fh::Obj {
                export: export.clone(),
                fid,
            })
        }
    }
}

/// Filehandles on the wire: sealed with the server's key, and checked
/// (MAC, export, access) when a client hands one back.
impl Nfs4 {
    /// The wire filehandle of `fh`.
    pub fn seal(&self, fh: &Fh) -> Bytes {
        match fh {
            Fh::Pseudo(node) => {
                let fid = Fid::new(&node.to_be_bytes()).expect("4 bytes fit");
                Bytes::copy_from_slice(self.key.seal(PSEUDO_EXPORT, &fid).as_bytes())
            }
            Fh::Obj { export, fid } => {
                Bytes::copy_from_slice(self.key.seal(export.id, fid).as_bytes())
            }
        }
    }

    /// Checks a client's filehandle: MAC first (no syscall), then its export
    /// and whether this client may use it.
    pub fn open_fh(&self, c: &Compound<'_>, wire: &[u8]) -> Result<Fh, Fail> {
        let ctx = c.ctx;
        let (export_id, fid) = self.key.open(wire).map_err(|_| {
            Fail::new(
                Nfsstat4::NFS4ERR_BADHANDLE,
                "handle fails its MAC or is malformed",
            )
        })?;
        if export_id == PSEUDO_EXPORT {
            let b = fid.as_bytes();
            let node = u32::from_be_bytes(b.try_into().map_err(|_| {
                Fail::new(
                    Nfsstat4::NFS4ERR_BADHANDLE,
                    "malformed pseudo filesystem handle",
                )
            })?);
            if node as usize >= c.snap.pseudo.nodes.len() {
                return Err(Fail::new(
                    Nfsstat4::NFS4ERR_STALE,
                    "pseudo directory no longer exists",
                ));
            }
            return Ok(Fh::Pseudo(node));
        }
        let export = c.snap.exports.get(export_id).ok_or(Fail::new(
            Nfsstat4::NFS4ERR_STALE,
            "handle names an export that no longer exists",
        ))?;
        ctx.set_export(export_id);
        c.access(export)?;
        Ok(Fh::Obj {
            export: export.clone(),
            fid,
        })
    }

    /// The root of the tree: the export at `/`, or the pseudo root.
    pub fn root(&self, c: &Compound<'_>) -> Fh {
        let snap = &c.snap;
        match snap.pseudo.root_export.and_then(|id| snap.exports.get(id)) {
            Some(e) => Fh::Obj {
                export: e.clone(),
                fid: e.backend.root(),
            },
            None => Fh::Pseudo(0),
        }
    }
}
