//! READ, WRITE and COMMIT, checked against the stateid the client presents.
//! READ data goes from the backend straight into the reply buffer.

use super::compound::{file_key, Compound};
use super::fail::{log_fail, Fail};
use crate::zero_copy::{copy_read, ReadAt};
use bytes::{BufMut, BytesMut};
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Backend, Fid, Stable};

/// Largest READ / WRITE payload (maxread / maxwrite).
pub const MAX_IO: u32 = 1 << 20;

const OP_READ: u32 = NfsOpnum4::OP_READ as u32;

/// Checks the stateid of a READ or WRITE; renews a 4.0 client's lease.
pub(super) fn check(
    c: &Compound<'_>,
    sid: &Stateid4,
    export: &crate::export::Export,
    fid: &Fid,
    write: bool,
) -> Result<(), Fail> {
    let sid = c.stateid(sid)?;
    c.n.state
        .check_io(&sid, &file_key(export, fid), write, c.minor)?;
    if c.minor == 0 {
        if let Some(id) = c.n.state.owner_client(&sid) {
            let _ = c.n.state.renew(id, c.n.clock.now());
        }
    }
    Ok(())
}

/// opnum + status + eof + data length.
const HEADER: usize = 16;

pub async fn read(c: &mut Compound<'_>, a: Read4args, out: &mut BytesMut) {
    let t = c.obj(Nfsstat4::NFS4ERR_ISDIR).and_then(|t| {
        check(c, &a.stateid, &t.0, &t.1, false)?;
        Ok(t)
    });
    // Another client's write delegation is recalled first: its holder may
    // have written what the server has not seen.
    let t = match t {
        Ok(t) => {
            super::deleg::break_file(c, &t.0, &t.1, super::deleg::Intent::Read, Some(&a.stateid))
                .await
                .map(|()| t)
        }
        Err(f) => Err(f),
    };
    let (export, fid, cred) = match t {
        Ok(t) => t,
        Err(f) => {
            log_fail(c.ctx, "OP_READ", &f);
            out.put_u32(OP_READ);
            out.put_u32(f.status as u32);
            return;
        }
    };
    let count = a.count.min(MAX_IO) as usize;
    let offset = a.offset;
    let b: Arc<dyn Backend> = export.backend.clone();
    // Not when a cache keeps the reply: an NFSv4.1 slot with sa_cachethis,
    // or NFSv4.0's DRC (a COMPOUND that also changed something must
    // stay cached).
    if !c.cachethis && c.minor > 0 {
        if let Some((pipe, len, eof)) =
            crate::zero_copy::read(&c.n.pool, c.ctx, &b, &cred, &fid, offset, count).await
        {
            out.put_u32(OP_READ);
            out.put_u32(0);
            out.put_u32(eof as u32);
            out.put_u32(len as u32);
            crate::zero_copy::place(c.ctx, out, pipe, len);
            return;
        }
    }
    let at = ReadAt::new(cred, fid, offset, count);
    if let Err(f) = copy_read(&c.n.pool, b, at, out, fill).await {
        log_fail(c.ctx, "OP_READ", &f);
    }
}

/// Encodes READ's result at the end of `buf`, the data read into its place.
fn fill(b: &dyn Backend, at: &ReadAt, buf: &mut BytesMut) -> Result<(), Fail> {
    let start = buf.len();
    match at.read_behind(b, buf, HEADER) {
        Ok((len, eof)) => {
            buf.truncate(start + HEADER + len);
            xdr::pack_padding(len, buf);
            let h = &mut buf[start..start + HEADER];
            h[..4].copy_from_slice(&OP_READ.to_be_bytes());
            h[4..8].copy_from_slice(&0u32.to_be_bytes());
            h[8..12].copy_from_slice(&(eof as u32).to_be_bytes());
            h[12..16].copy_from_slice(&(len as u32).to_be_bytes());
            Ok(())
        }
        Err(e) => {
            let f = Fail::from(e);
            buf.put_u32(OP_READ);
            buf.put_u32(f.status as u32);
            Err(f)
        }
    }
}

pub async fn write(c: &mut Compound<'_>, a: Write4args) -> Write4res {
    let r = async {
        let (export, fid, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ISDIR)?;
        check(c, &a.stateid, &export, &fid, true)?;
        super::deleg::break_file(
            c,
            &export,
            &fid,
            super::deleg::Intent::Change,
            Some(&a.stateid),
        )
        .await?;
        if a.data.len() > MAX_IO as usize {
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_INVAL,
                "WRITE larger than maxwrite",
            ));
        }
        let stable = match a.stable {
            StableHow4::UNSTABLE4 => Stable::Unstable,
            StableHow4::DATA_SYNC4 => Stable::DataSync,
            StableHow4::FILE_SYNC4 => Stable::FileSync,
        };
        // For the doctor's small-sync-write rule.
        c.ctx
            .client
            .record_write(a.data.len() as u32, stable != Stable::Unstable);
        let b = export.backend.clone();
        let (offset, data) = (a.offset, a.data);
        // Writes to one file queue for one pool thread (see Pool::run_serial).
        let (n, got) =
            c.n.pool
                .run_serial((export.id, fid), move || {
                    b.write(&cred, &fid, offset, &data, stable)
                })
                .await?;
        Ok(Write4resok {
            count: n as u32,
            committed: match got {
                Stable::Unstable => StableHow4::UNSTABLE4,
                Stable::DataSync => StableHow4::DATA_SYNC4,
                Stable::FileSync => StableHow4::FILE_SYNC4,
            },
            writeverf: c.n.write_verf.get(),
        })
    }
    .await;
    match r {
        Ok(ok) => Write4res::NFS4_OK(ok),
        Err(f) => {
            c.n.write_verf.reset_if(lost(f.status));
            log_fail(c.ctx, "OP_WRITE", &f);
            Write4res::Default(f.status)
        }
    }
}

pub async fn commit(c: &mut Compound<'_>, _a: Commit4args) -> Commit4res {
    let r = async {
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let b = export.backend.clone();
        c.n.run(move || b.commit(&fid)).await?;
        Ok::<_, Fail>(())
    }
    .await;
    match r {
        Ok(()) => Commit4res::NFS4_OK(Commit4resok {
            writeverf: c.n.write_verf.get(),
        }),
        Err(f) => {
            c.n.write_verf.reset_if(lost(f.status));
            log_fail(c.ctx, "OP_COMMIT", &f);
            Commit4res::Default(f.status)
        }
    }
}

/// Whether a failed WRITE or COMMIT may have lost unstable data.
fn lost(s: Nfsstat4) -> bool {
    matches!(
        s,
        Nfsstat4::NFS4ERR_IO | Nfsstat4::NFS4ERR_NOSPC | Nfsstat4::NFS4ERR_DQUOT
    )
}
