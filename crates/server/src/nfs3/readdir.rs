//! READDIR and READDIRPLUS: one page of a directory, sized to the client's
//! byte budget.

use super::{attr, failed, failed_with, Fail, Nfs3};
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::{DirItem, DirSink, HandleKey};
use xdr::Pack;

/// Room kept for everything in a reply but the entries: status,
/// post_op_attr, cookieverf, the list's end marker and eof.
const FIXED: usize = 128;
/// Bytes of a fattr3.
const FATTR3: usize = 84;
/// Most entries in one reply, whatever the budget.
const MAX_PAGE: usize = 4096;

fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// fileid + name + cookie: what READDIRPLUS `dircount` bounds.
fn dir_size(name: &[u8]) -> usize {
    8 + 4 + padded(name.len()) + 8
}

/// Copies of the page's names and handles, all in one allocation: the
/// replies' `Bytes` share it instead of allocating one each.
struct Arena(BytesMut);

impl Arena {
    fn new(cap: usize) -> Arena {
        Arena(BytesMut::with_capacity(cap))
    }

    fn copy(&mut self, b: &[u8]) -> Bytes {
        self.0.extend_from_slice(b);
        self.0.split().freeze()
    }
}

/// READDIR's page: entries while they fit in the budget.
struct Plain {
    entries: Vec<Entry3>,
    arena: Arena,
    used: usize,
    budget: usize,
}

impl DirSink for Plain {
    fn room_for(&mut self, name: &[u8]) -> bool {
        // The list's "value follows" word before each entry.
        self.entries.len() < MAX_PAGE && self.used + 4 + dir_size(name) <= self.budget
    }

    fn push(&mut self, e: DirItem<'_>) -> bool {
        if !self.room_for(e.name) {
            return false;
        }
        self.used += 4 + dir_size(e.name);
        self.entries.push(Entry3 {
            fileid: e.fileid,
            name: self.arena.copy(e.name),
            cookie: e.cookie,
        });
        true
    }
}

/// The bytes of entries a READDIR reply may carry: the client's count less
/// the fixed part, and never more than the largest transfer, since the
/// page's name arena reserves that much up front (a count of 4 GiB from
/// the wire must not become a 4 GiB reservation).
pub(super) fn plain_budget(count: u32) -> usize {
    (count.min(super::MAX_IO) as usize).saturating_sub(FIXED)
}

pub async fn readdir(n: &Nfs3, ctx: &CallContext, args: Readdir3args) -> Readdir3res {
    let t = or_failed!(ctx, n.resolve(ctx, &args.dir));
    let budget = plain_budget(args.count);
    let (cookie, verf) = (args.cookie, args.cookieverf);
    let b = t.export.backend.clone();
    let (r, dir_attributes) = n
        .run(move || {
            let mut sink = Plain {
                // No entry encodes in fewer than 28 bytes.
                entries: Vec::with_capacity((budget / 28).min(MAX_PAGE)),
                arena: Arena::new(budget),
                used: 0,
                budget,
            };
            let r = b
                .readdir_into(&t.cred, &t.fid, cookie, verf, false, &mut sink)
                .map(|end| (sink.entries, end));
            (r, attr::post_op(&*b, &t.fid))
        })
        .await;
    let (entries, end) = match r {
        Ok(p) => p,
        Err(e) => return failed_with(ctx, e.into(), dir_attributes),
    };
    if entries.is_empty() && !end.eof {
        let f = Fail::new(Nfsstat3::NFS3ERR_TOOSMALL, "count too small for one entry");
        return failed_with(ctx, f, dir_attributes);
    }
    Readdir3res::NFS3_OK(Readdir3resok {
        dir_attributes,
        cookieverf: end.verifier,
        reply: Dirlist3 {
            entries,
            eof: end.eof,
        },
    })
}

/// READDIRPLUS's page: entries while they fit in both maxcount and dircount,
/// encoded as they come (no per-entry structures to build, then pack).
struct Plus<'k> {
    key: &'k HandleKey,
    export_id: u32,
    /// The encoded entries, each with its "value follows" word.
    body: BytesMut,
    entries: usize,
    used: usize,
    dir_used: usize,
    budget: usize,
    dircount: usize,
    /// Expected size of an entry's handle (the directory's own), to judge
    /// an entry by its name before the backend stats it.
    fh_guess: usize,
}

impl Plus<'_> {
    /// What an entry encodes to: exactly what `push` writes.
    fn size(dsize: usize, with_attr: bool, fh: Option<usize>) -> usize {
        4 + dsize + 4 + if with_attr { FATTR3 } else { 0 } + 4 + fh.map_or(0, |l| 4 + padded(l))
    }
}

impl DirSink for Plus<'_> {
    fn room_for(&mut self, name: &[u8]) -> bool {
        let dsize = dir_size(name);
        self.entries < MAX_PAGE
            && self.dir_used + dsize <= self.dircount
            && self.used + Self::size(dsize, true, Some(self.fh_guess)) <= self.budget
    }

    fn push(&mut self, e: DirItem<'_>) -> bool {
        let dsize = dir_size(e.name);
        let fh = e
            .plus
            .as_ref()
            .map(|(fid, _)| self.key.seal(self.export_id, fid));
        let size = Self::size(dsize, e.plus.is_some(), fh.as_ref().map(|h| h.len()));
        if self.used + size > self.budget
            || self.dir_used + dsize > self.dircount
            || self.entries >= MAX_PAGE
        {
            return false;
        }
        self.used += size;
        self.dir_used += dsize;
        self.entries += 1;
        let out = &mut self.body;
        xdr::put_word(out, 1u32.to_be_bytes());
        xdr::put_word(out, e.fileid.to_be_bytes());
        xdr::pack_opaque(e.name, out);
        xdr::put_word(out, e.cookie.to_be_bytes());
        match &e.plus {
            Some((_, a)) => {
                xdr::put_word(out, 1u32.to_be_bytes());
                attr::fattr3(a).pack(out);
            }
            None => xdr::put_word(out, 0u32.to_be_bytes()),
        }
        match &fh {
            Some(h) => {
                xdr::put_word(out, 1u32.to_be_bytes());
                xdr::pack_opaque(h.as_bytes(), out);
            }
            None => xdr::put_word(out, 0u32.to_be_bytes()),
        }
        true
    }
}

/// READDIRPLUS, its reply encoded into `out`.
pub async fn readdirplus(n: &Nfs3, ctx: &CallContext, args: Readdirplus3args, out: &mut BytesMut) {
    let fail = |f: Fail, dir_attributes, out: &mut BytesMut| {
        failed_with::<Readdirplus3res>(ctx, f, dir_attributes).pack(out);
    };
    let t = match n.resolve(ctx, &args.dir) {
        Ok(t) => t,
        Err(f) => return fail(f, None, out),
    };
    let maxcount = args.maxcount as usize;
    // dircount 0 would allow nothing at all; read it as "no separate bound".
    let dircount = match args.dircount as usize {
        0 => maxcount,
        d => d,
    };
    let budget = maxcount.saturating_sub(FIXED);
    let (cookie, verf) = (args.cookie, args.cookieverf);
    let b = t.export.backend.clone();
    let key = n.key.clone();
    let export_id = t.export.id;
    let (r, dir_attributes) = n
        .run(move || {
            let mut sink = Plus {
                key: &key,
                export_id,
                body: BytesMut::with_capacity(budget.min(1 << 20)),
                entries: 0,
                used: 0,
                dir_used: 0,
                budget,
                dircount,
                fh_guess: key.seal(export_id, &t.fid).len(),
            };
            let r = b
                .readdir_into(&t.cred, &t.fid, cookie, verf, true, &mut sink)
                .map(|end| (sink.body, sink.entries, end));
            (r, attr::post_op(&*b, &t.fid))
        })
        .await;
    let (body, entries, end) = match r {
        Ok(p) => p,
        Err(e) => return fail(e.into(), dir_attributes, out),
    };
    if entries == 0 && !end.eof {
        let f = Fail::new(
            Nfsstat3::NFS3ERR_TOOSMALL,
            "dircount/maxcount too small for one entry",
        );
        return fail(f, dir_attributes, out);
    }
    // Readdirplus3resok: dir_attributes, cookieverf, the entry list (ended
    // by a "no value follows" word), eof.
    Nfsstat3::NFS3_OK.pack(out);
    dir_attributes.pack(out);
    out.put_slice(&end.verifier);
    out.put_slice(&body);
    out.put_u32(0);
    end.eof.pack(out);
}
