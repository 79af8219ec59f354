//! READ: file data read straight into the reply buffer, no intermediate copy.

use super::{attr, log_fail, Fail, Nfs3, MAX_IO};
use bytes::{BufMut, BytesMut};
use proto::nfs3::*;
use rpc::CallContext;
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
    let mut buf = std::mem::take(out);
    let (buf, r) = n
        .run(move || {
            let start = buf.len();
            // Room for the header as it is when attributes are present; the
            // data goes right behind it so it never has to move.
            buf.resize(start + HEADER + count, 0);
            let r = b.read(&t.cred, &t.fid, offset, &mut buf[start + HEADER..]);
            // Post-op attributes after the read, so they show its atime.
            let a = attr::post_op(&*b, &t.fid);
            match r {
                Ok((len, eof)) => {
                    let len = len.min(count);
                    buf.truncate(start + HEADER + len);
                    xdr::pack_padding(len, &mut buf);
                    let data = buf.split_off(start + HEADER);
                    buf.truncate(start);
                    Nfsstat3::NFS3_OK.pack(&mut buf);
                    a.pack(&mut buf);
                    buf.put_u32(len as u32);
                    eof.pack(&mut buf);
                    buf.put_u32(len as u32);
                    // O(1) when the header filled exactly HEADER bytes; a copy
                    // only in the rare case that the getattr failed.
                    buf.unsplit(data);
                    (buf, Ok(()))
                }
                Err(e) => {
                    buf.truncate(start);
                    let f = Fail::from(e);
                    fail(f, a).pack(&mut buf);
                    (buf, Err(f))
                }
            }
        })
        .await;
    *out = buf;
    if let Err(f) = r {
        log_fail(ctx, &f);
    }
}

fn fail(f: Fail, file_attributes: PostOpAttr) -> Read3res {
    Read3res::Default(f.status, Read3resfail { file_attributes })
}
