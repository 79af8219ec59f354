//! READ data spliced from the page cache for the reply (see
//! `rpc::zero_copy`): NFSv3 READ and NFSv4 READ share it.

use crate::pool::Pool;
use bytes::BytesMut;
use rpc::zero_copy::{Pipe, MIN_BYTES};
use rpc::CallContext;
use std::sync::Arc;
use vfs::{Backend, Cred, Fid};

/// `count` bytes of `fid` from `offset` in a pipe: (pipe, bytes, eof).
/// None: the reply copies them (the call or connection cannot take a
/// pipe, the read is small, no pipe is free, the backend cannot splice,
/// or the read failed: the copying read then reports the error).
pub async fn read(
    pool: &Pool,
    ctx: &CallContext,
    b: &Arc<dyn Backend>,
    cred: &Cred,
    fid: &Fid,
    offset: u64,
    count: usize,
) -> Option<(Pipe, usize, bool)> {
    if count < MIN_BYTES || !ctx.zero_copy() || ctx.has_attachment() {
        return None;
    }
    let pipe = Arc::new(Pipe::get()?);
    let (b2, cred, fid, p) = (b.clone(), cred.clone(), *fid, pipe.clone());
    // An inline attempt that would block has spliced nothing (the backend
    // checks the pages are cached first), so the pool starts afresh.
    let r = pool
        .run_fast(&**b, move || {
            b2.splice_read(&cred, &fid, offset, count, p.input())
        })
        .await;
    let pipe = Arc::into_inner(pipe)?;
    match r {
        Some(Ok((n, eof))) if n <= count => Some((pipe, n, eof)),
        Some(Ok((n, _))) => {
            tracing::error!(n, count, "splice_read returned more than asked");
            pipe.put(false);
            None
        }
        None => {
            pipe.put(true);
            None
        }
        // Failed (the copy path reports it): the pipe may hold part of the
        // data, so it is not reused.
        Some(Err(_)) => {
            pipe.put(false);
            None
        }
    }
}

/// The data's place in the reply being built in `out`: the pipe's `len`
/// bytes go here, then XDR's padding.
pub fn place(ctx: &CallContext, out: &mut BytesMut, pipe: Pipe, len: usize) {
    if len > 0 {
        ctx.attach(out.len(), len, pipe);
    } else {
        pipe.put(true);
    }
    xdr::pack_padding(len, out);
}
