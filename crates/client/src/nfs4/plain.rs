//! File operations that hold no state on the server (lookups, attributes,
//! directories, READ/WRITE/COMMIT with a given stateid), written once for
//! every minor version: each builds its operations and picks its result,
//! and a [`Compound`] sends them (an NFSv4.1 session puts SEQUENCE in
//! front, an NFSv4.0 client sends them as they are).

use super::attr::{self, Attrs, SetAttrs};
use super::error::{Error, Result};
use bytes::Bytes;
use proto::nfs4::*;
use std::future::Future;

/// Sends operations in one COMPOUND: the results of `ops` (nothing the
/// implementation added in front), or the error of the one that failed.
pub trait Compound: Sync {
    fn call(&self, ops: Vec<NfsArgop4>) -> impl Future<Output = Result<Vec<NfsResop4>>> + Send;
}

/// [`Compound`] for a client type whose inherent `call` already sends
/// operations that way (the NFSv4.1 session, the NFSv4.0 client), and the
/// methods both offer alike that need its inherent `call_raw` (a denial's
/// details come in a failed COMPOUND).
macro_rules! compound_client {
    ($t:ty) => {
        impl $crate::nfs4::plain::Compound for $t {
            fn call(
                &self,
                ops: Vec<proto::nfs4::NfsArgop4>,
            ) -> impl std::future::Future<
                Output = $crate::nfs4::error::Result<Vec<proto::nfs4::NfsResop4>>,
            > + Send {
                <$t>::call(self, ops)
            }
        }

        impl $t {
            /// LOCKT: None if `owner` could take the lock, else who holds what.
            pub async fn lockt(
                &self,
                fh: &proto::nfs4::NfsFh4,
                locktype: proto::nfs4::NfsLockType4,
                offset: u64,
                length: u64,
                owner: &proto::nfs4::StateOwner4,
            ) -> $crate::nfs4::error::Result<Option<proto::nfs4::Lock4denied>> {
                use proto::nfs4::*;
                let ops = vec![
                    $crate::nfs4::plain::putfh(fh),
                    NfsArgop4::OP_LOCKT(Lockt4args {
                        locktype,
                        offset,
                        length,
                        owner: owner.clone(),
                    }),
                ];
                let res = self.call_raw(ops).await?;
                if let Some(NfsResop4::OP_LOCKT(Lockt4res::NFS4ERR_DENIED(d))) = res.resarray.last()
                {
                    return Ok(Some(d.clone()));
                }
                $crate::nfs4::check(&res)?;
                Ok(None)
            }
        }
    };
}
pub(crate) use compound_client;

/// OPEN's `openhow` for [`open`-style calls](crate::nfs4::session::Session::open):
/// with Some(mode) the file is created if missing (UNCHECKED4).
pub(crate) fn open_how(create: Option<u32>) -> Openflag4 {
    match create {
        Some(mode) => {
            Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(SetAttrs::mode(mode).encode()))
        }
        None => Openflag4::Default(Opentype4::OPEN4_NOCREATE),
    }
}

/// PUTFH and a LOCK of `[offset, offset + length)` by `locker`.
pub(crate) fn lock_ops(
    fh: &NfsFh4,
    locker: Locker4,
    locktype: NfsLockType4,
    offset: u64,
    length: u64,
) -> Vec<NfsArgop4> {
    vec![
        putfh(fh),
        NfsArgop4::OP_LOCK(Lock4args {
            locktype,
            reclaim: false,
            offset,
            length,
            locker,
        }),
    ]
}

/// A LOCK's reply: the lock stateid, or Ok(Err(denied)) when another
/// owner holds a conflicting lock.
pub(crate) fn lock_result(res: Compound4res) -> Result<std::result::Result<Stateid4, Lock4denied>> {
    if let Some(NfsResop4::OP_LOCK(Lock4res::NFS4ERR_DENIED(d))) = res.resarray.last() {
        return Ok(Err(d.clone()));
    }
    super::session::check(&res)?;
    let s =
        take!(res.resarray, "LOCK", NfsResop4::OP_LOCK(Lock4res::NFS4_OK(ok)) => ok.lock_stateid)?;
    Ok(Ok(s))
}

/// The result of the given variant, from the end of the reply (the results
/// before it are PUTFH and the like).
macro_rules! take {
    ($res:expr, $what:literal, $pat:pat => $out:expr) => {
        $res.into_iter()
            .rev()
            .find_map(|r| match r {
                $pat => Some($out),
                _ => None,
            })
            .ok_or_else(|| Error::Protocol(concat!($what, ": result missing").into()))
    };
}
pub(crate) use take;

/// PUTFH `fh`, `change`, and a GETATTR of `bits` after it: the attributes
/// the change left. When the GETATTR alone failed (NFS4ERR_DELAY while
/// another client's delegation is recalled, say), the change stands and
/// was not sent again ([`super::session::safe_to_resend`]): the caller gets
/// no attributes instead of an error for a change that happened.
async fn change_then_attrs(
    c: &impl Compound,
    fh: &NfsFh4,
    change: NfsArgop4,
    bits: &[u32],
) -> Result<Option<Attrs>> {
    let getattr = NfsArgop4::OP_GETATTR(Getattr4args {
        attr_request: attr::bitmap(bits),
    });
    match c.call(vec![putfh(fh), change, getattr]).await {
        Ok(mut r) => {
            let a = take!(r.pop(), "GETATTR", NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => ok.obj_attributes)?;
            attr::decode(&a).map(Some)
        }
        Err(Error::Nfs(e)) if e.op == NfsOpnum4::OP_GETATTR => {
            tracing::debug!(status = ?e.status, "attributes after a change not returned");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub(crate) fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() })
}

/// PUTROOTFH and a LOOKUP per component of `path`.
pub fn walk(path: &str) -> Vec<NfsArgop4> {
    let mut ops = vec![NfsArgop4::OP_PUTROOTFH];
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ops.push(NfsArgop4::OP_LOOKUP(Lookup4args { objname: name(c) }));
    }
    ops
}

/// The handle of a path from the server's root (the pseudo-fs root).
pub async fn lookup_path(c: &impl Compound, path: &str) -> Result<NfsFh4> {
    let mut ops = walk(path);
    ops.push(NfsArgop4::OP_GETFH);
    let r = c.call(ops).await?;
    take!(r, "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)
}

/// The handle and attributes `bits` of a path from the server's root, in
/// one COMPOUND.
pub async fn lookup_path_attrs(
    c: &impl Compound,
    path: &str,
    bits: &[u32],
) -> Result<(NfsFh4, Attrs)> {
    let mut ops = walk(path);
    ops.push(NfsArgop4::OP_GETFH);
    ops.push(NfsArgop4::OP_GETATTR(Getattr4args {
        attr_request: attr::bitmap(bits),
    }));
    let mut r = c.call(ops).await?;
    let a = take!(r.pop(), "GETATTR", NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => ok.obj_attributes)?;
    let fh = take!(r.pop(), "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)?;
    Ok((fh, attr::decode(&a)?))
}

pub async fn lookup(c: &impl Compound, dir: &NfsFh4, n: &str) -> Result<NfsFh4> {
    let ops = vec![
        putfh(dir),
        NfsArgop4::OP_LOOKUP(Lookup4args { objname: name(n) }),
        NfsArgop4::OP_GETFH,
    ];
    let r = c.call(ops).await?;
    take!(r, "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)
}

/// LOOKUP of `n` in `dir` with its handle and attributes `bits` in the
/// same COMPOUND (a name and its attributes in one round trip).
pub async fn lookup_attrs(
    c: &impl Compound,
    dir: &NfsFh4,
    n: &str,
    bits: &[u32],
) -> Result<(NfsFh4, Attrs)> {
    let ops = vec![
        putfh(dir),
        NfsArgop4::OP_LOOKUP(Lookup4args { objname: name(n) }),
        NfsArgop4::OP_GETFH,
        NfsArgop4::OP_GETATTR(Getattr4args {
            attr_request: attr::bitmap(bits),
        }),
    ];
    let mut r = c.call(ops).await?;
    let a = take!(r.pop(), "GETATTR", NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => ok.obj_attributes)?;
    let fh = take!(r.pop(), "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)?;
    Ok((fh, attr::decode(&a)?))
}

/// GETATTR of the given attribute numbers (`FATTR4_*`), undecoded.
pub async fn getattr(c: &impl Compound, fh: &NfsFh4, bits: &[u32]) -> Result<Fattr4> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_GETATTR(Getattr4args {
            attr_request: attr::bitmap(bits),
        }),
    ];
    let r = c.call(ops).await?;
    take!(r, "GETATTR", NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => ok.obj_attributes)
}

/// GETATTR, decoded; `bits` must be among [`attr::DECODABLE`].
pub async fn attrs(c: &impl Compound, fh: &NfsFh4, bits: &[u32]) -> Result<Attrs> {
    attr::decode(&getattr(c, fh, bits).await?)
}

pub async fn read(
    c: &impl Compound,
    stateid: &Stateid4,
    fh: &NfsFh4,
    offset: u64,
    count: u32,
) -> Result<Read4resok> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_READ(Read4args {
            stateid: stateid.clone(),
            offset,
            count,
        }),
    ];
    let r = c.call(ops).await?;
    take!(r, "READ", NfsResop4::OP_READ(Read4res::NFS4_OK(ok)) => ok)
}

pub async fn write(
    c: &impl Compound,
    stateid: &Stateid4,
    fh: &NfsFh4,
    offset: u64,
    data: Bytes,
    stable: StableHow4,
) -> Result<Write4resok> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_WRITE(Write4args {
            stateid: stateid.clone(),
            offset,
            stable,
            data,
        }),
    ];
    let r = c.call(ops).await?;
    take!(r, "WRITE", NfsResop4::OP_WRITE(Write4res::NFS4_OK(ok)) => ok)
}

/// COMMIT; `count` 0 means to the end of the file. Returns the write
/// verifier, to compare with those of the UNSTABLE writes.
pub async fn commit(c: &impl Compound, fh: &NfsFh4, offset: u64, count: u32) -> Result<Verifier4> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_COMMIT(Commit4args { offset, count }),
    ];
    let r = c.call(ops).await?;
    take!(r, "COMMIT", NfsResop4::OP_COMMIT(Commit4res::NFS4_OK(ok)) => ok.writeverf)
}

pub async fn remove(c: &impl Compound, dir: &NfsFh4, n: &str) -> Result<ChangeInfo4> {
    let ops = vec![
        putfh(dir),
        NfsArgop4::OP_REMOVE(Remove4args { target: name(n) }),
    ];
    let r = c.call(ops).await?;
    take!(r, "REMOVE", NfsResop4::OP_REMOVE(Remove4res::NFS4_OK(ok)) => ok.cinfo)
}

/// REMOVE and a GETATTR of `bits` of the directory after it, in one
/// COMPOUND: what the removal left (change, mtime, nlink) without
/// another call.
/// None when the REMOVE succeeded but the GETATTR did not (see
/// [`change_then_attrs`]).
pub async fn remove_attrs(
    c: &impl Compound,
    dir: &NfsFh4,
    n: &str,
    bits: &[u32],
) -> Result<Option<Attrs>> {
    let remove = NfsArgop4::OP_REMOVE(Remove4args { target: name(n) });
    change_then_attrs(c, dir, remove, bits).await
}

/// CREATE of a directory, then GETFH.
pub async fn mkdir(c: &impl Compound, dir: &NfsFh4, n: &str, mode: u32) -> Result<NfsFh4> {
    create(c, dir, n, Createtype4::NF4DIR, SetAttrs::mode(mode)).await
}

/// CREATE of a symbolic link holding `target`, then GETFH.
pub async fn symlink(c: &impl Compound, dir: &NfsFh4, n: &str, target: &str) -> Result<NfsFh4> {
    create(
        c,
        dir,
        n,
        Createtype4::NF4LNK(name(target)),
        SetAttrs::default(),
    )
    .await
}

/// CREATE of anything but a regular file, then GETFH.
pub async fn create(
    c: &impl Compound,
    dir: &NfsFh4,
    n: &str,
    objtype: Createtype4,
    set: SetAttrs,
) -> Result<NfsFh4> {
    let ops = vec![
        putfh(dir),
        NfsArgop4::OP_CREATE(Create4args {
            objtype,
            objname: name(n),
            createattrs: set.encode(),
        }),
        NfsArgop4::OP_GETFH,
    ];
    let r = c.call(ops).await?;
    take!(r, "GETFH", NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => ok.object)
}

/// READLINK: a symbolic link's text.
pub async fn readlink(c: &impl Compound, fh: &NfsFh4) -> Result<Bytes> {
    let r = c.call(vec![putfh(fh), NfsArgop4::OP_READLINK]).await?;
    take!(r, "READLINK", NfsResop4::OP_READLINK(Readlink4res::NFS4_OK(ok)) => ok.link)
}

/// LINK: a new name `n` in `dir` for the file `fh` (the saved handle).
pub async fn link(c: &impl Compound, fh: &NfsFh4, dir: &NfsFh4, n: &str) -> Result<ChangeInfo4> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_SAVEFH,
        putfh(dir),
        NfsArgop4::OP_LINK(Link4args { newname: name(n) }),
    ];
    let r = c.call(ops).await?;
    take!(r, "LINK", NfsResop4::OP_LINK(Link4res::NFS4_OK(ok)) => ok.cinfo)
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub cookie: u64,
    /// Type and file ID, as READDIR returned them.
    pub attrs: Attrs,
}

/// Every entry of a directory with the attributes `bits` (among
/// [`attr::DECODABLE`]), page after page.
pub async fn readdir_with(c: &impl Compound, dir: &NfsFh4, bits: &[u32]) -> Result<Vec<DirEntry>> {
    let mut out = vec![];
    let (mut cookie, mut cookieverf) = (0u64, [0u8; 8]);
    loop {
        let ops = vec![
            putfh(dir),
            NfsArgop4::OP_READDIR(Readdir4args {
                cookie,
                cookieverf,
                dircount: 8 << 10,
                maxcount: 64 << 10,
                attr_request: attr::bitmap(bits),
            }),
        ];
        let r = c.call(ops).await?;
        let ok = take!(r, "READDIR", NfsResop4::OP_READDIR(Readdir4res::NFS4_OK(ok)) => ok)?;
        cookieverf = ok.cookieverf;
        let progressed = !ok.reply.entries.is_empty();
        for e in ok.reply.entries {
            cookie = e.cookie;
            out.push(DirEntry {
                name: String::from_utf8_lossy(&e.name).into_owned(),
                cookie: e.cookie,
                attrs: attr::decode(&e.attrs)?,
            });
        }
        if ok.reply.eof {
            return Ok(out);
        }
        if !progressed {
            return Err(Error::Protocol("READDIR: no entries and no eof".into()));
        }
    }
}

/// RENAME of `from` in directory `from_dir` to `to` in `to_dir` (the
/// source directory is the saved handle, the target the current one).
pub async fn rename(
    c: &impl Compound,
    from_dir: &NfsFh4,
    from: &str,
    to_dir: &NfsFh4,
    to: &str,
) -> Result<Rename4resok> {
    let ops = vec![
        putfh(from_dir),
        NfsArgop4::OP_SAVEFH,
        putfh(to_dir),
        NfsArgop4::OP_RENAME(Rename4args {
            oldname: name(from),
            newname: name(to),
        }),
    ];
    let r = c.call(ops).await?;
    take!(r, "RENAME", NfsResop4::OP_RENAME(Rename4res::NFS4_OK(ok)) => ok)
}

/// SETATTR and a GETATTR of `bits` after it in one COMPOUND: the
/// attributes the change left (ctime, a new size) without another call;
/// None when the SETATTR succeeded but the GETATTR did not.
pub async fn setattr_attrs(
    c: &impl Compound,
    fh: &NfsFh4,
    stateid: &Stateid4,
    set: &SetAttrs,
    bits: &[u32],
) -> Result<Option<Attrs>> {
    let setattr = NfsArgop4::OP_SETATTR(Setattr4args {
        stateid: stateid.clone(),
        obj_attributes: set.encode(),
    });
    change_then_attrs(c, fh, setattr, bits).await
}

/// SETATTR under `stateid` (an open's, or the anonymous stateid for mode
/// and times). Returns the attributes the server set.
pub async fn setattr(
    c: &impl Compound,
    fh: &NfsFh4,
    stateid: &Stateid4,
    set: &SetAttrs,
) -> Result<Bitmap4> {
    let ops = vec![
        putfh(fh),
        NfsArgop4::OP_SETATTR(Setattr4args {
            stateid: stateid.clone(),
            obj_attributes: set.encode(),
        }),
    ];
    let r = c.call(ops).await?;
    take!(r, "SETATTR", NfsResop4::OP_SETATTR(res) => res.attrsset)
}
