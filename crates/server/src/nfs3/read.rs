//! READ: file data read straight into the reply buffer, no intermediate copy.

use super::{attr, log_fail, Fail, Nfs3, MAX_IO};
use crate::zero_copy::{copy_read, ReadAt};
use bytes::{BufMut, BytesMut};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::Backend;
use xdr::Pack;

/// status + post_op_attr (present) + count + eof + opaque length.
const HEADER: usize = 4 + (4 + 84) + 4 + 4 + 4;

pub async fn read(n: &Nfs3, ctx: &CallContext, args: Read3args, out: &mut BytesMut) {
    let t = match n.resolve(ctx, &args.file) {
        Ok(t) => t,
        Err(f) => {
            log_fail(ctx, &f);
            fail(f, None).pack(out);
            return;
        }
    };
    let count = args.count.min(MAX_IO) as usize;
    let offset = args.offset;
    let b = t.export.backend.clone();
    if let Some((pipe, len, eof)) =
        crate::zero_copy::read(&n.pool, ctx, &b, &t.cred, &t.fid, offset, count).await
    {
        // The data stays in the pipe; the reply says where it goes.
        let (fid, b2) = (t.fid, b.clone());
        let a = n
            .pool
            .run_fast(&*b, move || attr::post_op(&*b2, &fid))
            .await;
        Nfsstat3::NFS3_OK.pack(out);
        a.pack(out);
        out.put_u32(len as u32);
        eof.pack(out);
        out.put_u32(len as u32);
        crate::zero_copy::place(ctx, out, pipe, len);
        return;
    }
    let at = ReadAt::new(t.cred, t.fid, offset, count);
    if let Err(f) = copy_read(&n.pool, b, at, out, fill).await {
        log_fail(ctx, &f);
    }
}

/// Encodes the READ result at the end of `buf`, the data read straight into
/// its place behind the header.
fn fill(b: &dyn Backend, at: &ReadAt, buf: &mut BytesMut) -> Result<(), Fail> {
    let start = buf.len();
    // Room for the header as it is when attributes are present.
    let r = at.read_behind(b, buf, HEADER);
    // Post-op attributes after the read, so they show its atime.
    let a = attr::post_op(b, &at.fid);
    match r {
        Ok((len, eof)) => {
            buf.truncate(start + HEADER + len);
            xdr::pack_padding(len, buf);
            let data = buf.split_off(start + HEADER);
            buf.truncate(start);
            Nfsstat3::NFS3_OK.pack(buf);
            a.pack(buf);
            buf.put_u32(len as u32);
            eof.pack(buf);
            buf.put_u32(len as u32);
            // O(1) when the header filled exactly HEADER bytes; a copy only
            // in the rare case that the getattr failed.
            buf.unsplit(data);
            Ok(())
        }
        Err(e) => {
            let f = Fail::from(e);
            fail(f, a).pack(buf);
            Err(f)
        }
    }
}

fn fail(f: Fail, file_attributes: PostOpAttr) -> Read3res {
    Read3res::Default(f.status, Read3resfail { file_attributes })
}
