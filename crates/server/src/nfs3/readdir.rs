//! READDIR and READDIRPLUS: one page of a directory, sized to the client's
//! byte budget.

use super::{attr, log_fail, seal, Fail, Nfs3};
use proto::nfs3::*;
use rpc::CallContext;
use vfs::DirEntry;

/// Room kept for everything in a reply but the entries: status,
/// post_op_attr, cookieverf, the list's end marker and eof.
const FIXED: usize = 128;
/// Most entries asked of the backend at once, whatever the budget.
const MAX_PAGE: usize = 4096;

fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// fileid + name + cookie: what READDIRPLUS `dircount` bounds.
fn dir_size(e: &DirEntry) -> usize {
    8 + 4 + padded(e.name.len()) + 8
}

pub async fn readdir(n: &Nfs3, ctx: &CallContext, args: Readdir3args) -> Readdir3res {
    let fail = |f: Fail, dir_attributes| {
        log_fail(ctx, &f);
        Readdir3res::Default(f.status, Readdir3resfail { dir_attributes })
    };
    let t = match n.resolve(ctx, &args.dir) {
        Ok(t) => t,
        Err(f) => return fail(f, None),
    };
    let count = args.count as usize;
    let budget = count.saturating_sub(FIXED);
    // No entry encodes in fewer than 28 bytes, so this never asks for less
    // than could fit.
    let max_entries = (count / 24).clamp(1, MAX_PAGE);
    let (cookie, verf) = (args.cookie, args.cookieverf);
    let b = t.export.backend.clone();
    let (r, dir_attributes) = n
        .run(move || {
            let r = b.readdir(&t.cred, &t.fid, cookie, verf, max_entries, false);
            (r, attr::post_op(&*b, &t.fid))
        })
        .await;
    let page = match r {
        Ok(p) => p,
        Err(e) => return fail(e.into(), dir_attributes),
    };
    let total = page.entries.len();
    let mut used = 0;
    let mut entries = Vec::with_capacity(total);
    for e in page.entries {
        // The list's "value follows" word before each entry.
        let size = 4 + dir_size(&e);
        if used + size > budget {
            break;
        }
        used += size;
        entries.push(Entry3 {
            fileid: e.fileid,
            name: e.name.into(),
            cookie: e.cookie,
        });
    }
    if entries.is_empty() && total > 0 {
        let f = Fail::new(Nfsstat3::NFS3ERR_TOOSMALL, "count too small for one entry");
        return fail(f, dir_attributes);
    }
    let eof = page.eof && entries.len() == total;
    Readdir3res::NFS3_OK(Readdir3resok {
        dir_attributes,
        cookieverf: page.verifier,
        reply: Dirlist3 { entries, eof },
    })
}

pub async fn readdirplus(n: &Nfs3, ctx: &CallContext, args: Readdirplus3args) -> Readdirplus3res {
    let fail = |f: Fail, dir_attributes| {
        log_fail(ctx, &f);
        Readdirplus3res::Default(f.status, Readdirplus3resfail { dir_attributes })
    };
    let t = match n.resolve(ctx, &args.dir) {
        Ok(t) => t,
        Err(f) => return fail(f, None),
    };
    let maxcount = args.maxcount as usize;
    // dircount 0 would allow nothing at all; read it as "no separate bound".
    let dircount = match args.dircount as usize {
        0 => maxcount,
        d => d,
    };
    let budget = maxcount.saturating_sub(FIXED);
    // Each entry asked for costs the backend a stat, so ask for about what
    // fits: a typical entry with attributes and handle takes over 128 bytes.
    let max_entries = (maxcount / 128).min(dircount / 24).clamp(1, MAX_PAGE);
    let (cookie, verf) = (args.cookie, args.cookieverf);
    let b = t.export.backend.clone();
    let key = n.key.clone();
    let export_id = t.export.id;
    let (r, dir_attributes) = n
        .run(move || {
            let r = b
                .readdir(&t.cred, &t.fid, cookie, verf, max_entries, true)
                .map(|page| {
                    let total = page.entries.len();
                    let (mut dir_used, mut used) = (0, 0);
                    let mut entries = Vec::with_capacity(total);
                    for e in page.entries {
                        let dsize = dir_size(&e);
                        let (name_attributes, name_handle) = match &e.plus {
                            Some((fid, a)) => {
                                (Some(attr::fattr3(a)), Some(seal(&key, export_id, fid)))
                            }
                            None => (None, None),
                        };
                        let size = 4
                            + dsize
                            + 4
                            + name_attributes.as_ref().map_or(0, |_| 84)
                            + 4
                            + name_handle.as_ref().map_or(0, |h| 4 + padded(h.data.len()));
                        if used + size > budget || dir_used + dsize > dircount {
                            break;
                        }
                        used += size;
                        dir_used += dsize;
                        entries.push(Entryplus3 {
                            fileid: e.fileid,
                            name: e.name.into(),
                            cookie: e.cookie,
                            name_attributes,
                            name_handle,
                        });
                    }
                    let eof = page.eof && entries.len() == total;
                    (entries, total, eof, page.verifier)
                });
            (r, attr::post_op(&*b, &t.fid))
        })
        .await;
    let (entries, total, eof, cookieverf) = match r {
        Ok(p) => p,
        Err(e) => return fail(e.into(), dir_attributes),
    };
    if entries.is_empty() && total > 0 {
        let f = Fail::new(
            Nfsstat3::NFS3ERR_TOOSMALL,
            "dircount/maxcount too small for one entry",
        );
        return fail(f, dir_attributes);
    }
    Readdirplus3res::NFS3_OK(Readdirplus3resok {
        dir_attributes,
        cookieverf,
        reply: Dirlistplus3 { entries, eof },
    })
}
