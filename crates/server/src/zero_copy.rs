//! READ data spliced from the page cache for the reply (see
//! `rpc::zero_copy`), and the copying read that stands in when it cannot
//! be had: NFSv3 READ, NFSv4 READ and READ_PLUS share them.

use crate::pool::Pool;
use bytes::BytesMut;
use rpc::zero_copy::{Pipe, MIN_BYTES};
use rpc::CallContext;
use std::sync::Arc;
use vfs::{Backend, Cred, Fid, FsError};

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

/// What a copying read reads: `count` bytes of `fid` from `offset`, as `cred`.
pub struct ReadAt {
    pub cred: Cred,
    pub fid: Fid,
    pub offset: u64,
    pub count: usize,
}

impl ReadAt {
    pub fn new(cred: Cred, fid: Fid, offset: u64, count: usize) -> ReadAt {
        ReadAt {
            cred,
            fid,
            offset,
            count,
        }
    }

    /// Reads into `buf` behind `header` bytes reserved at its end for the
    /// reply's header, so the data never has to move: the length read (at
    /// most `count`) and eof. After an error `buf` is as it was.
    pub fn read_behind(
        &self,
        b: &dyn Backend,
        buf: &mut BytesMut,
        header: usize,
    ) -> Result<(usize, bool), FsError> {
        let start = buf.len();
        buf.resize(start + header, 0);
        match b.read_append(&self.cred, &self.fid, self.offset, self.count, buf) {
            Ok((len, eof)) => Ok((len.min(self.count), eof)),
            Err(e) => {
                buf.truncate(start);
                Err(e)
            }
        }
    }
}

/// Runs `fill`, which encodes a whole reply with the data of `at` at the end
/// of `out`: inline when the data is in the page cache, the rest on the
/// blocking pool.
pub async fn copy_read<E: Send + 'static>(
    pool: &Pool,
    b: Arc<dyn Backend>,
    at: ReadAt,
    out: &mut BytesMut,
    fill: fn(&dyn Backend, &ReadAt, &mut BytesMut) -> Result<(), E>,
) -> Result<(), E> {
    let b2 = b.clone();
    pool.run_fast_into(&*b2, out, move |buf| fill(&*b, &at, buf))
        .await
}
