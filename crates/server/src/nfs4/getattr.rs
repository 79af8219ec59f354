//! Attribute operations: GETATTR, SETATTR, VERIFY, NVERIFY and ACCESS.

use super::attr::{self, AttrSource};
use super::compound::{mounted_on_fileid, Compound, Fh};
use super::fail::{log_fail, reply, Fail};
use super::pseudo::node_fileid;
use super::server::Nfs4;
use super::state::Checked;
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;
use vfs::{Access, Attr, FileType, FsStat};

/// An object's attributes as fetched for one operation.
pub struct Fetched {
    pub attr: Attr,
    pub fsstat: Option<FsStat>,
    pub fsid: Fsid4,
    pub mounted_on: u64,
    pub read_only: bool,
    pub xattr_support: bool,
}

impl Fetched {
    pub fn source<'a>(&'a self, n: &'a Nfs4, fh: &'a [u8], minor: u32) -> AttrSource<'a> {
        AttrSource {
            attr: &self.attr,
            fh,
            fsid: self.fsid.clone(),
            mounted_on_fileid: self.mounted_on,
            lease_time: n.cfg.lease.as_secs() as u32,
            fsstat: self.fsstat.as_ref(),
            idmap: &n.idmap,
            read_only: self.read_only,
            rdattr_error: None,
            minor,
            xattr_support: self.xattr_support,
        }
    }
}

/// The fsid of an export; pseudo directories are fsid 0.
pub fn export_fsid(export_id: u32) -> Fsid4 {
    Fsid4 {
        major: export_id as u64 + 1,
        minor: 0,
    }
}

/// Attributes of a pseudo filesystem directory: read-only, owned by root.
pub fn pseudo_attr(n: &Nfs4, node: u32) -> Attr {
    Attr {
        ftype: FileType::Directory,
        mode: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 4096,
        used: 4096,
        rdev: (0, 0),
        fsid: 0,
        fileid: node_fileid(node),
        atime: n.boot,
        mtime: n.boot,
        ctime: n.boot,
    }
}

/// Fetches what a request for `bits` needs about the current object.
pub async fn fetch(c: &Compound<'_>, bits: &[u32]) -> Result<Fetched, Fail> {
    let n = c.n;
    let want_fs = attr::needs_fsstat(bits);
    match &c.cur()?.fh {
        Fh::Pseudo(node) => Ok(Fetched {
            attr: pseudo_attr(n, *node),
            fsstat: want_fs.then(FsStat::default),
            fsid: Fsid4 { major: 0, minor: 0 },
            mounted_on: node_fileid(*node),
            read_only: true,
            xattr_support: false,
        }),
        Fh::Obj { export, fid } => {
            let (b, f) = (export.backend.clone(), *fid);
            let (attr, fsstat) = n
                .pool
                .run_fast(&*b.clone(), move || {
                    let a = b.getattr(&f)?;
                    let s = if want_fs { Some(b.fsstat(&f)?) } else { None };
                    Ok::<_, vfs::FsError>((a, s))
                })
                .await?;
            let mounted_on = mounted_on_fileid(&c.snap, export, fid, attr.fileid);
            Ok(Fetched {
                attr,
                fsstat,
                fsid: export_fsid(export.id),
                mounted_on,
                read_only: !c.access(export)?.rw,
                xattr_support: export.backend.xattr_support(),
            })
        }
    }
}

/// GETATTR, encoded straight into the reply.
pub async fn getattr(c: &mut Compound<'_>, a: Getattr4args, out: &mut BytesMut) {
    out.put_u32(NfsOpnum4::OP_GETATTR as u32);
    // For the doctor's GETATTR-storm rule: how many distinct files.
    if let Some(cur) = c.cur.as_mut() {
        let n = c.n;
        c.ctx.client.record_getattr(&cur.wire(n));
    }
    // Without a current filehandle that is the error, whatever was asked.
    let checked = c.cur().and_then(|_| {
        attr::check_get_request(&a.attr_request)
            .map_err(|s| Fail::new(s, "write-only attribute requested"))
    });
    let mut fetched = match checked {
        Ok(()) => fetch(c, &a.attr_request).await,
        Err(f) => Err(f),
    };
    // Size and change of a file another client holds a write delegation
    // on are the holder's to tell (CB_GETATTR, RFC 8881 §10.4.3).
    if let (Ok(f), Ok(Fh::Obj { export, fid })) = (&mut fetched, c.cur().map(|cur| &cur.fh)) {
        if attr::bitmap_has(&a.attr_request, FATTR4_CHANGE)
            || attr::bitmap_has(&a.attr_request, FATTR4_SIZE)
        {
            let (export, fid) = (export.clone(), *fid);
            if let Err(e) = super::deleg::getattr_conflict(c, &export, &fid, &mut f.attr).await {
                fetched = Err(e);
            }
        }
    }
    match fetched {
        Ok(f) => {
            let n = c.n;
            let fh = if attr::bitmap_has(&a.attr_request, FATTR4_FILEHANDLE) {
                c.cur.as_mut().map(|cur| cur.wire(n)).unwrap_or_default()
            } else {
                Bytes::new()
            };
            out.put_u32(Nfsstat4::NFS4_OK as u32);
            attr::encode_into(&a.attr_request, &f.source(n, &fh, c.minor), out);
        }
        Err(f) => {
            log_fail(c.ctx, "OP_GETATTR", &f);
            out.put_u32(f.status as u32);
        }
    }
}

pub async fn setattr(c: &mut Compound<'_>, a: Setattr4args) -> Setattr4res {
    match do_setattr(c, a).await {
        Ok(attrsset) => Setattr4res {
            status: Nfsstat4::NFS4_OK,
            attrsset,
        },
        Err(f) => {
            log_fail(c.ctx, "OP_SETATTR", &f);
            Setattr4res {
                status: f.status,
                attrsset: Vec::new(),
            }
        }
    }
}

async fn do_setattr(c: &mut Compound<'_>, a: Setattr4args) -> Result<Bitmap4, Fail> {
    let (export, fid, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ROFS)?;
    let (set, attrsset) = attr::decode_set(&a.obj_attributes, &c.n.idmap, c.minor)
        .map_err(|s| Fail::new(s, "attributes could not be decoded or set"))?;
    if set.size.is_some() {
        // A size change is a write: the stateid must allow it.
        let sid = c.stateid(&a.stateid)?;
        let key = super::compound::file_key(&export, &fid);
        if c.n.state.check_io(&sid, &key, true, c.minor)? == Checked::Special {
            // Anonymous size changes are allowed, as in NFSv3.
        }
        super::deleg::break_file(c, &export, &fid, super::deleg::Intent::Change, Some(&sid))
            .await?;
    }
    // A directory's attributes are part of what its delegation promises.
    super::dir_deleg::break_dir(c, &export, &fid).await?;
    let b = export.backend.clone();
    c.n.run(move || b.setattr(&cred, &fid, &set)).await?;
    Ok(attrsset)
}

pub async fn verify(c: &mut Compound<'_>, a: Verify4args) -> Verify4res {
    let (same, differ) = (Nfsstat4::NFS4_OK, Nfsstat4::NFS4ERR_NOT_SAME);
    let status = compared(c, &a.obj_attributes, "OP_VERIFY", same, differ).await;
    Verify4res { status }
}

pub async fn nverify(c: &mut Compound<'_>, a: Nverify4args) -> Nverify4res {
    let (same, differ) = (Nfsstat4::NFS4ERR_SAME, Nfsstat4::NFS4_OK);
    let status = compared(c, &a.obj_attributes, "OP_NVERIFY", same, differ).await;
    Nverify4res { status }
}

/// VERIFY's or NVERIFY's status: `same` or `differ` as the attributes
/// compare, or the failure's (logged under `op`).
async fn compared(
    c: &mut Compound<'_>,
    want: &Fattr4,
    op: &'static str,
    same: Nfsstat4,
    differ: Nfsstat4,
) -> Nfsstat4 {
    match compare(c, want).await {
        Ok(true) => same,
        Ok(false) => differ,
        Err(f) => {
            log_fail(c.ctx, op, &f);
            f.status
        }
    }
}

async fn compare(c: &mut Compound<'_>, want: &Fattr4) -> Result<bool, Fail> {
    let f = fetch(c, &want.attrmask).await?;
    let n = c.n;
    let fh = c.cur.as_mut().map(|cur| cur.wire(n)).unwrap_or_default();
    attr::verify(want, &f.source(n, &fh, c.minor))
        .map_err(|s| Fail::new(s, "attributes to compare are malformed or unsupported"))
}

pub async fn access(c: &mut Compound<'_>, a: Access4args) -> Access4res {
    let r = do_access(c, a.access).await;
    let ok = |(supported, access)| Access4res::NFS4_OK(Access4resok { supported, access });
    reply(c.ctx, "OP_ACCESS", r, ok)
}

/// The ACCESS bits that mean something for an object of type `t`: LOOKUP
/// and DELETE only for a directory, EXECUTE only for a non-directory
/// (RFC 7530 §16.1, RFC 8881 §18.1.3). `supported` holds only these, as
/// the Linux server's does, so a client never reads "allowed" into a bit
/// that cannot apply; the Linux client asks LOOKUP of directories and
/// EXECUTE of files, so it always gets what it asks.
fn meaningful(t: FileType) -> u32 {
    let common = Access::READ | Access::MODIFY | Access::EXTEND;
    match t {
        FileType::Directory => (common | Access::LOOKUP | Access::DELETE).bits(),
        _ => (common | Access::EXECUTE).bits(),
    }
}

/// RFC 8276's ACCESS bits (NFSv4.2): reading, writing and listing
/// extended attributes, decided as READ (read, list) and MODIFY (write)
/// are, as knfsd does; they mean something for files and directories of an
/// export that takes user xattrs.
const XA_READ_LIST: u32 = ACCESS4_XAREAD | ACCESS4_XALIST;
const XA_ALL: u32 = XA_READ_LIST | ACCESS4_XAWRITE;

async fn do_access(c: &Compound<'_>, asked: u32) -> Result<(u32, u32), Fail> {
    // ACCESS4_* bits 0x01..0x20 equal NFSv3's.
    let want = asked & Access::ALL.bits();
    let xa = if c.minor >= 2 { asked & XA_ALL } else { 0 };
    match &c.cur()?.fh {
        Fh::Pseudo(_) => {
            let supported = want & meaningful(FileType::Directory);
            Ok((
                supported,
                supported & (Access::READ | Access::LOOKUP).bits(),
            ))
        }
        Fh::Obj { export, fid } => {
            let access = c.access(export)?;
            let xa = if export.backend.xattr_support() {
                xa
            } else {
                0
            };
            // The xattr bits are answered from READ and MODIFY.
            let mut ask = want;
            if xa & XA_READ_LIST != 0 {
                ask |= Access::READ.bits();
            }
            if xa & ACCESS4_XAWRITE != 0 {
                ask |= Access::MODIFY.bits();
            }
            let (b, f, cred) = (export.backend.clone(), *fid, access.cred.clone());
            let (got, ftype) =
                c.n.pool
                    .run_fast(&*b.clone(), move || {
                        // One stat gives both the permissions and the type.
                        let (r, at) = b.access_with_attr(&cred, &f, Access(ask));
                        let got = r?;
                        let ftype = match at {
                            Some(a) => a.ftype,
                            None => b.getattr(&f)?.ftype,
                        };
                        Ok::<_, vfs::FsError>((got, ftype))
                    })
                    .await?;
            let mut got = got.bits();
            if !access.rw {
                got &= !(Access::MODIFY | Access::EXTEND | Access::DELETE).bits();
            }
            let xa = match ftype {
                FileType::Regular | FileType::Directory => xa,
                _ => 0,
            };
            let mut xa_bits = 0;
            if got & Access::READ.bits() != 0 {
                xa_bits |= xa & XA_READ_LIST;
            }
            if got & Access::MODIFY.bits() != 0 {
                xa_bits |= xa & ACCESS4_XAWRITE;
            }
            let supported = want & meaningful(ftype);
            Ok((supported | xa, (got & supported) | xa_bits))
        }
    }
}
