//! NFSv4.2 sparse files (RFC 7862 §15.1, §15.4, §15.10, §15.11): SEEK for
//! data and holes, ALLOCATE, DEALLOCATE, and READ_PLUS, each checked
//! against its stateid as READ (SEEK, READ_PLUS) or WRITE (ALLOCATE,
//! DEALLOCATE) is. The dispatcher only lets these through in minor
//! version 2; earlier ones get OP_ILLEGAL, as knfsd answers.
//!
//! READ_PLUS reads exactly what READ would, then describes the same bytes
//! as data and hole segments: a range is sent as a hole only if the backend
//! reports a hole there and the bytes just read there are all zeros, so
//! what the client rebuilds is READ's answer byte for byte, whatever a
//! concurrent writer did between the read and the look for holes.

use super::compound::Compound;
use super::fail::{log_fail, reply, status_of, Fail};
use super::io::check;
use super::io::MAX_IO;
use crate::zero_copy::{copy_read, ReadAt};
use bytes::{BufMut, BytesMut};
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Backend, Cred, Fid, FsError, SeekWhat};

pub async fn seek(c: &mut Compound<'_>, a: Seek4args) -> Seek4res {
    let r = async {
        let (export, fid, cred) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        check(c, &a.sa_stateid, &export, &fid, false)?;
        let what = match a.sa_what {
            DataContent4::NFS4_CONTENT_DATA => SeekWhat::Data,
            DataContent4::NFS4_CONTENT_HOLE => SeekWhat::Hole,
        };
        let b = export.backend.clone();
        let offset = a.sa_offset;
        let (found, size) =
            c.n.run(move || {
                let found = b.seek(&cred, &fid, offset, what)?;
                Ok::<_, FsError>((found, b.getattr(&fid)?.size))
            })
            .await?;
        // No data after `offset` is NXIO, not "eof at the size": that is
        // what lseek(SEEK_DATA) answers and what the Linux client passes
        // on (it ignores sr_eof), as knfsd does. The implicit hole at the
        // end is found, with sr_eof set.
        Ok::<_, Fail>(SeekRes4 {
            sr_eof: found >= size,
            sr_offset: found,
        })
    }
    .await;
    reply(c.ctx, "OP_SEEK", r, Seek4res::NFS4_OK)
}

/// ALLOCATE or DEALLOCATE: a change of the file's space, queued behind the
/// file's WRITEs as they are queued behind each other.
async fn change_space(
    c: &mut Compound<'_>,
    sid: &Stateid4,
    offset: u64,
    len: u64,
    free: bool,
) -> Result<(), Fail> {
    let (export, fid, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ISDIR)?;
    check(c, sid, &export, &fid, true)?;
    super::deleg::break_file(c, &export, &fid, super::deleg::Intent::Change, Some(sid)).await?;
    // RFC 7862 §15.1.3/§15.4.3: a range past the largest file is FBIG;
    // an empty one means nothing to fallocate(2), which says EINVAL.
    if offset.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_FBIG,
            "range past the largest file",
        ));
    }
    if len == 0 {
        return Err(Fail::new(Nfsstat4::NFS4ERR_INVAL, "zero-length range"));
    }
    let b = export.backend.clone();
    c.n.pool
        .run_serial((export.id, fid), move || {
            if free {
                b.deallocate(&cred, &fid, offset, len)
            } else {
                b.allocate(&cred, &fid, offset, len)
            }
        })
        .await?;
    Ok(())
}

pub async fn allocate(c: &mut Compound<'_>, a: Allocate4args) -> Allocate4res {
    let r = change_space(c, &a.aa_stateid, a.aa_offset, a.aa_length, false).await;
    Allocate4res {
        ar_status: status_of(c.ctx, "OP_ALLOCATE", r),
    }
}

pub async fn deallocate(c: &mut Compound<'_>, a: Deallocate4args) -> Deallocate4res {
    let r = change_space(c, &a.da_stateid, a.da_offset, a.da_length, true).await;
    Deallocate4res {
        dr_status: status_of(c.ctx, "OP_DEALLOCATE", r),
    }
}

/// opnum + status + eof + segment count + (content + offset + length) of
/// the one data segment most replies are.
const HEADER: usize = 32;

pub async fn read_plus(c: &mut Compound<'_>, a: ReadPlus4args, out: &mut BytesMut) {
    let t = c.obj(Nfsstat4::NFS4ERR_ISDIR).and_then(|t| {
        check(c, &a.rpa_stateid, &t.0, &t.1, false)?;
        Ok(t)
    });
    let (export, fid, cred) = match t {
        Ok(t) => t,
        Err(f) => {
            log_fail(c.ctx, "OP_READ_PLUS", &f);
            out.put_u32(NfsOpnum4::OP_READ_PLUS as u32);
            out.put_u32(f.status as u32);
            return;
        }
    };
    let count = a.rpa_count.min(MAX_IO) as usize;
    let offset = a.rpa_offset;
    let b: Arc<dyn Backend> = export.backend.clone();
    let at = ReadAt::new(cred, fid, offset, count);
    if let Err(f) = copy_read(&c.n.pool, b, at, out, fill).await {
        log_fail(c.ctx, "OP_READ_PLUS", &f);
    }
}

/// Encodes READ_PLUS's result at the end of `buf`: the bytes are read into
/// the place of a single data segment, and laid out again only when some
/// of them turn out to be a hole.
fn fill(b: &dyn Backend, req: &ReadAt, buf: &mut BytesMut) -> Result<(), Fail> {
    let (cred, fid, offset) = (&req.cred, &req.fid, req.offset);
    let start = buf.len();
    let (len, eof) = match req.read_behind(b, buf, HEADER) {
        Ok(r) => r,
        Err(e) => {
            let f = Fail::from(e);
            buf.put_u32(NfsOpnum4::OP_READ_PLUS as u32);
            buf.put_u32(f.status as u32);
            return Err(f);
        }
    };
    buf.truncate(start + HEADER + len);
    let holes = holes(b, cred, fid, offset, &buf[start + HEADER..]);
    if holes.is_empty() {
        // Zero bytes read (at or past the end, or a zero count) are no
        // segment at all; otherwise one data segment, already in place.
        if len == 0 {
            buf.truncate(start + 16);
        }
        xdr::pack_padding(len, buf);
        let h = &mut buf[start..];
        h[..4].copy_from_slice(&(NfsOpnum4::OP_READ_PLUS as u32).to_be_bytes());
        h[4..8].copy_from_slice(&0u32.to_be_bytes());
        h[8..12].copy_from_slice(&(eof as u32).to_be_bytes());
        h[12..16].copy_from_slice(&((len > 0) as u32).to_be_bytes());
        if len > 0 {
            h[16..20].copy_from_slice(&(DataContent4::NFS4_CONTENT_DATA as u32).to_be_bytes());
            h[20..28].copy_from_slice(&offset.to_be_bytes());
            h[28..32].copy_from_slice(&(len as u32).to_be_bytes());
        }
        return Ok(());
    }
    let data = buf.split_off(start + HEADER).freeze();
    buf.truncate(start);
    let mut contents = Vec::with_capacity(2 * holes.len() + 1);
    let mut at = offset;
    let end = offset + len as u64;
    for (h, hlen) in holes.into_iter().chain([(end, 0)]) {
        if h > at {
            let r = (at - offset) as usize..(h - offset) as usize;
            contents.push(ReadPlusContent::NFS4_CONTENT_DATA(Data4 {
                d_offset: at,
                d_data: data.slice(r),
            }));
        }
        if hlen > 0 {
            contents.push(ReadPlusContent::NFS4_CONTENT_HOLE(DataInfo4 {
                di_offset: h,
                di_length: hlen,
            }));
        }
        at = h + hlen;
    }
    buf.put_u32(NfsOpnum4::OP_READ_PLUS as u32);
    xdr::Pack::pack(
        &ReadPlus4res::NFS4_OK(ReadPlusRes4 {
            rpr_eof: eof,
            rpr_contents: contents,
        }),
        buf,
    );
    Ok(())
}

/// Smallest run of zeros worth a look for a hole: one page, the least a
/// filesystem punches.
const HOLE_MIN: u64 = 4096;

/// The holes in `data` (the bytes at `offset`), as (offset, length) in
/// order: ranges the backend reports as holes whose bytes are all zeros
/// in `data`. Any backend error means no more holes (the bytes are sent as
/// data, which is never wrong).
fn holes(b: &dyn Backend, cred: &Cred, fid: &Fid, offset: u64, data: &[u8]) -> Vec<(u64, u64)> {
    // Bytes read lie below the size, so these sums do not overflow; a
    // read shorter than a page has no hole worth sending.
    let mut found = Vec::new();
    if (data.len() as u64) < HOLE_MIN {
        return found;
    }
    let end = offset + data.len() as u64;
    let zeros = |from: u64, to: u64| {
        data[(from - offset) as usize..(to - offset) as usize]
            .iter()
            .all(|&x| x == 0)
    };
    // Asking the backend costs system calls: only when some aligned page
    // of what was read is all zeros can a hole be worth sending.
    let first = offset.next_multiple_of(HOLE_MIN);
    let mut page = first;
    let mut any = false;
    while page + HOLE_MIN <= end {
        if zeros(page, page + HOLE_MIN) {
            any = true;
            break;
        }
        page += HOLE_MIN;
    }
    if !any {
        return found;
    }
    let mut at = offset;
    while at < end {
        let Ok(h) = b.seek(cred, fid, at, SeekWhat::Hole) else {
            break;
        };
        if h >= end {
            break;
        }
        let d = match b.seek(cred, fid, h, SeekWhat::Data) {
            Ok(d) => d.min(end),
            // No data after the hole: it runs to the end of the file.
            Err(FsError::NxIo) => end,
            Err(_) => break,
        };
        if d <= h.max(at) {
            break;
        }
        let h = h.max(at);
        if d - h >= HOLE_MIN && zeros(h, d) {
            found.push((h, d - h));
        }
        at = d;
    }
    found
}
