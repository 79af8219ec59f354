//! NFSv4.2 extended attributes (RFC 8276): GETXATTR, SETXATTR, LISTXATTRS
//! and REMOVEXATTR on the current object's user attributes. The protocol's
//! names carry no namespace; the backend keeps them under `user.`, as Linux
//! knfsd does. The dispatcher lets these through in minor version 2 only
//! (earlier ones get OP_ILLEGAL).
//!
//! Permissions are the backend's, checked as the (squashed) caller: read
//! for GETXATTR and LISTXATTRS, write for SETXATTR and REMOVEXATTR, which
//! a read-only export refuses with ROFS first. An export whose backend has
//! no user xattrs (xattr_support false), and the pseudo filesystem, answer
//! NOTSUPP, as RFC 8276 has a server without xattr support answer.

use super::compound::Compound;
use super::dir::with_cinfo;
use super::fail::{reply, Fail};
use crate::export::Export;
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Backend, Cred, Fid, FsError, XattrSet};

/// The current object, on an export that takes user xattrs; `rw` also
/// refuses read-only exports.
fn object(c: &Compound<'_>, rw: bool) -> Result<(Arc<Export>, Fid, Cred), Fail> {
    let pseudo = Nfsstat4::NFS4ERR_NOTSUPP;
    let t = if rw {
        c.obj_rw(pseudo)?
    } else {
        c.obj(pseudo)?
    };
    if !t.0.backend.xattr_support() {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_NOTSUPP,
            "the export's filesystem has no user extended attributes",
        ));
    }
    Ok(t)
}

pub async fn getxattr(c: &mut Compound<'_>, a: Getxattr4args) -> Getxattr4res {
    let r = async {
        let (export, fid, cred) = object(c, false)?;
        let b = export.backend.clone();
        let v =
            c.n.run(move || b.getxattr(&cred, &fid, &a.gxa_name))
                .await?;
        Ok::<_, Fail>(Bytes::from(v))
    }
    .await;
    reply(c.ctx, "OP_GETXATTR", r, Getxattr4res::NFS4_OK)
}

pub async fn setxattr(c: &mut Compound<'_>, a: Setxattr4args) -> Setxattr4res {
    let how = match a.sxa_option {
        SetxattrOption4::SETXATTR4_EITHER => XattrSet::Either,
        SetxattrOption4::SETXATTR4_CREATE => XattrSet::Create,
        SetxattrOption4::SETXATTR4_REPLACE => XattrSet::Replace,
    };
    let r = change(c, move |b, cred, fid| {
        b.setxattr(cred, fid, &a.sxa_key, &a.sxa_value, how)
    })
    .await;
    reply(c.ctx, "OP_SETXATTR", r, Setxattr4res::NFS4_OK)
}

pub async fn removexattr(c: &mut Compound<'_>, a: Removexattr4args) -> Removexattr4res {
    let r = change(c, move |b, cred, fid| b.removexattr(cred, fid, &a.rxa_name)).await;
    reply(c.ctx, "OP_REMOVEXATTR", r, Removexattr4res::NFS4_OK)
}

/// SETXATTR's and REMOVEXATTR's common part: `op` run on the current
/// object (after others' delegations on it are recalled), with the
/// change info around it.
async fn change(
    c: &Compound<'_>,
    op: impl FnOnce(&dyn Backend, &Cred, &Fid) -> Result<(), FsError> + Send + 'static,
) -> Result<ChangeInfo4, Fail> {
    let (export, fid, cred) = object(c, true)?;
    super::deleg::break_file(c, &export, &fid, super::deleg::Intent::Change, None).await?;
    let b = export.backend.clone();
    let ((), cinfo) =
        c.n.run(move || {
            with_cinfo(&*b, &fid, &crate::dirlock::no_recall, || {
                op(&*b, &cred, &fid)
            })
        })
        .await?;
    Ok(cinfo)
}

/// The fixed part of a LISTXATTRS4resok: cookie, name count, eof.
const LIST_OVERHEAD: usize = 8 + 4 + 4;

pub async fn listxattrs(c: &mut Compound<'_>, a: Listxattrs4args) -> Listxattrs4res {
    let r = async {
        let (export, fid, cred) = object(c, false)?;
        let b = export.backend.clone();
        let names = c.n.run(move || b.listxattrs(&cred, &fid)).await?;
        page(names, a.lxa_cookie, a.lxa_maxcount as usize)
    }
    .await;
    reply(c.ctx, "OP_LISTXATTRS", r, Listxattrs4res::NFS4_OK)
}

/// The names from position `cookie` on that fit, with their XDR, in
/// `maxcount` bytes of result (RFC 8276: maxcount bounds the
/// whole LISTXATTRS4resok). The cookie returned is the position after
/// the last name sent, so the next call resumes there; the backend lists
/// names in a stable order. A cookie past the end is BAD_COOKIE; no room
/// for the first name due is TOOSMALL.
fn page(names: Vec<Vec<u8>>, cookie: u64, maxcount: usize) -> Result<Listxattrs4resok, Fail> {
    let start = usize::try_from(cookie)
        .ok()
        .filter(|&s| s <= names.len())
        .ok_or(Fail::new(
            Nfsstat4::NFS4ERR_BAD_COOKIE,
            "cookie past the last extended attribute",
        ))?;
    let mut used = LIST_OVERHEAD;
    let mut sent = Vec::new();
    for name in names.iter().skip(start) {
        let len = 4 + name.len().next_multiple_of(4);
        if used + len > maxcount {
            break;
        }
        used += len;
        sent.push(Bytes::copy_from_slice(name));
    }
    let next = start + sent.len();
    if sent.is_empty() && next < names.len() {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_TOOSMALL,
            "maxcount leaves no room for one extended attribute name",
        ));
    }
    Ok(Listxattrs4resok {
        lxr_cookie: next as u64,
        lxr_names: sent,
        lxr_eof: next == names.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("attr{i}").into_bytes()).collect()
    }

    #[test]
    fn pages_resume_at_the_cookie_and_fit_maxcount() {
        // Each "attrN" (N < 10) takes 4 + 8 bytes.
        let p = page(names(5), 0, LIST_OVERHEAD + 2 * 12).unwrap();
        assert_eq!(p.lxr_names.len(), 2);
        assert_eq!((p.lxr_cookie, p.lxr_eof), (2, false));
        let p = page(names(5), 2, LIST_OVERHEAD + 2 * 12 + 11).unwrap();
        assert_eq!(&p.lxr_names[0][..], b"attr2");
        assert_eq!((p.lxr_cookie, p.lxr_eof), (4, false));
        let p = page(names(5), 4, 1 << 16).unwrap();
        assert_eq!((p.lxr_names.len(), p.lxr_cookie, p.lxr_eof), (1, 5, true));
        // At the end: nothing, eof; past it: BAD_COOKIE.
        let p = page(names(5), 5, 0).unwrap();
        assert!(p.lxr_names.is_empty() && p.lxr_eof);
        let e = page(names(5), 6, 1 << 16).unwrap_err();
        assert_eq!(e.status, Nfsstat4::NFS4ERR_BAD_COOKIE);
        let e = page(names(5), u64::MAX, 1 << 16).unwrap_err();
        assert_eq!(e.status, Nfsstat4::NFS4ERR_BAD_COOKIE);
        // No room for one name.
        let e = page(names(5), 0, LIST_OVERHEAD + 11).unwrap_err();
        assert_eq!(e.status, Nfsstat4::NFS4ERR_TOOSMALL);
        // No names at all fit in anything.
        let p = page(Vec::new(), 0, 0).unwrap();
        assert!(p.lxr_names.is_empty() && p.lxr_eof && p.lxr_cookie == 0);
    }
}
