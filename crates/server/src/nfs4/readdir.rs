//! READDIR: entries with the attributes the client asks for, encoded on the
//! blocking pool straight into the reply, within the client's byte budget.

use super::attr::{self, AttrSource, IdMap};
use super::compound::{Compound, Fh};
use super::fail::{log_fail, Fail};
use super::getattr::{export_fsid, pseudo_attr};
use super::io::MAX_IO;
use super::pseudo::{node_fileid, Target};
use bytes::{BufMut, BytesMut};
use proto::nfs4::*;
use std::sync::Arc;
use vfs::{Attr, HandleKey};

const OP_READDIR: u32 = NfsOpnum4::OP_READDIR as u32;

/// Most entries in one READDIR reply, whatever maxcount: one call holds a
/// pool thread for a stat per entry.
const MAX_ENTRIES: usize = 1024;

/// What encoding an entry needs, owned so it can move to the pool.
struct Enc {
    key: Arc<HandleKey>,
    idmap: Arc<IdMap>,
    lease: u32,
    request: Vec<u32>,
    want_fh: bool,
    minor: u32,
    /// The directory's export takes user xattrs (entries of a pseudo
    /// directory say false).
    xattr_support: bool,
}

/// One directory entry to encode.
struct Entry<'a> {
    cookie: u64,
    name: &'a [u8],
    attr: &'a Attr,
    fh: &'a [u8],
    fsid: Fsid4,
    mounted_on: u64,
}

impl Enc {
    /// One entry4 (with its "value follows" word); false if it did not fit
    /// in `limit` bytes (the buffer is then left as it was).
    fn entry(&self, out: &mut BytesMut, limit: usize, e: Entry<'_>) -> bool {
        let start = out.len();
        out.put_u32(1);
        out.put_u64(e.cookie);
        xdr::pack_opaque(e.name, out);
        let src = AttrSource {
            attr: e.attr,
            fh: e.fh,
            fsid: e.fsid,
            mounted_on_fileid: e.mounted_on,
            lease_time: self.lease,
            fsstat: None,
            idmap: &self.idmap,
            read_only: false,
            rdattr_error: None,
            minor: self.minor,
            xattr_support: self.xattr_support,
        };
        attr::encode_into(&self.request, &src, out);
        if out.len() > limit {
            out.truncate(start);
            return false;
        }
        true
    }
}

/// A READDIR result being written: where it starts, the byte limit of its
/// entries, and whether any entry fit.
///
/// maxcount bounds the READDIR4resok (RFC 8881 §18.23.3, RFC 7530
/// §16.24): the cookie verifier, the entries and the end-of-list and eof
/// words, but not the operation number and status before them. So even an
/// empty directory needs 16 bytes.
struct Listing {
    start: usize,
    limit: usize,
    any: bool,
}

impl Listing {
    fn begin(out: &mut BytesMut, maxcount: usize, verifier: &[u8; 8]) -> Listing {
        let start = out.len();
        out.put_u32(OP_READDIR);
        out.put_u32(0);
        out.put_slice(verifier);
        Listing {
            start,
            // The resok starts after the op and status words (8 bytes);
            // its end-of-list and eof words (8 more) must fit after the
            // entries.
            limit: start + maxcount,
            any: false,
        }
    }

    /// Ends the list; `eof` is false when an entry did not fit.
    fn finish(self, out: &mut BytesMut, eof: bool) -> Result<(), Fail> {
        // Nothing fit, not even the end words after the verifier.
        if !self.any && (!eof || out.len() > self.limit) {
            out.truncate(self.start);
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_TOOSMALL,
                "maxcount too small for one entry",
            ));
        }
        out.put_u32(0);
        out.put_u32(eof as u32);
        Ok(())
    }
}

pub async fn readdir(c: &mut Compound<'_>, a: Readdir4args, out: &mut BytesMut) {
    if let Err(f) = run(c, a, out).await {
        log_fail(c.ctx, "OP_READDIR", &f);
        out.put_u32(OP_READDIR);
        out.put_u32(f.status as u32);
    }
}

async fn run(c: &mut Compound<'_>, a: Readdir4args, out: &mut BytesMut) -> Result<(), Fail> {
    attr::check_get_request(&a.attr_request)
        .map_err(|s| Fail::new(s, "write-only attribute requested"))?;
    if a.cookie == 1 || a.cookie == 2 {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_BAD_COOKIE,
            "cookies 1 and 2 are reserved",
        ));
    }
    let n = c.n;
    let enc = Enc {
        key: n.key.clone(),
        idmap: n.idmap.clone(),
        lease: n.cfg.lease.as_secs() as u32,
        want_fh: attr::bitmap_has(&a.attr_request, FATTR4_FILEHANDLE),
        request: a.attr_request.clone(),
        minor: c.minor,
        xattr_support: matches!(&c.cur()?.fh, Fh::Obj { export, .. } if export.backend.xattr_support()),
    };
    // The reply so far, then this result; maxcount bounds the result.
    let maxcount = (a.maxcount as usize).min(MAX_IO as usize);
    match c.cur()?.fh.clone() {
        Fh::Pseudo(node) => {
            let mut res = Listing::begin(out, maxcount, &[0; 8]);
            let limit = res.limit;
            let mut eof = true;
            // Cookies of pseudo entries are their index + 3.
            let skip = if a.cookie == 0 {
                0
            } else {
                a.cookie as usize - 2
            };
            let children = c.snap.pseudo.nodes[node as usize].children.clone();
            for (i, (name, t)) in children.iter().enumerate().skip(skip) {
                let cookie = i as u64 + 3;
                let (fh, at, fsid, mounted_on) = match *t {
                    Target::Node(x) => (
                        Fh::Pseudo(x),
                        pseudo_attr(n, x),
                        Fsid4 { major: 0, minor: 0 },
                        node_fileid(x),
                    ),
                    Target::Export(id) => {
                        let Some(e) = c.snap.exports.get(id) else {
                            continue;
                        };
                        if c.access(e).is_err() {
                            continue;
                        }
                        let (b, root) = (e.backend.clone(), e.backend.root());
                        let Ok(at) = n.run(move || b.getattr(&root)).await else {
                            continue;
                        };
                        let fh = Fh::Obj {
                            export: e.clone(),
                            fid: root,
                        };
                        (fh, at, export_fsid(id), node_fileid(node))
                    }
                };
                let fh = if enc.want_fh {
                    n.seal(&fh)
                } else {
                    Default::default()
                };
                let entry = Entry {
                    cookie,
                    name,
                    attr: &at,
                    fh: &fh,
                    fsid,
                    mounted_on,
                };
                let ok = enc.entry(out, limit, entry);
                if !ok {
                    eof = false;
                    break;
                }
                res.any = true;
            }
            res.finish(out, eof)
        }
        Fh::Obj { export, fid } => {
            let cred = c.access(&export)?.cred.clone();
            let b = export.backend.clone();
            let export_id = export.id;
            let fsid = export_fsid(export_id);
            // Names that lead to other exports get those exports' root attributes.
            let junctions: Vec<(Vec<u8>, u32)> = c
                .snap
                .pseudo
                .junctions
                .get(&(export_id, fid))
                .cloned()
                .unwrap_or_default();
            let roots: Vec<(Vec<u8>, Arc<crate::export::Export>)> = junctions
                .into_iter()
                .filter_map(|(name, id)| c.snap.exports.get(id).map(|e| (name, e.clone())))
                .collect();
            let mut buf = std::mem::take(out);
            let (buf, r) = n
                .run(move || {
                    let r = fill(
                        &enc, &*b, &cred, &fid, export_id, fsid, &roots, &a, maxcount, &mut buf,
                    );
                    (buf, r)
                })
                .await;
            *out = buf;
            r
        }
    }
}

/// Encodes each entry as the backend hands it over; the first that does not
/// fit ends the page.
struct Sink<'a> {
    enc: &'a Enc,
    export_id: u32,
    fsid: Fsid4,
    /// Names that lead to other exports: the export, its root fid and the
    /// root's attributes (None if they could not be had: the name is skipped).
    roots: &'a [(Vec<u8>, u32, vfs::Fid, Option<Attr>)],
    out: &'a mut BytesMut,
    limit: usize,
    any: bool,
    /// Entries encoded.
    seen: usize,
}

impl vfs::DirSink for Sink<'_> {
    fn room_for(&mut self, _name: &[u8]) -> bool {
        self.seen < MAX_ENTRIES
    }

    fn push(&mut self, e: vfs::DirItem<'_>) -> bool {
        if self.seen >= MAX_ENTRIES {
            return false;
        }
        if e.name == b"." || e.name == b".." {
            return true;
        }
        let enc = self.enc;
        let (export_id, fid, at, fsid, mounted_on) =
            if let Some((_, id, root, at)) = self.roots.iter().find(|r| r.0 == e.name) {
                let Some(at) = at else { return true };
                (*id, root, at, export_fsid(*id), e.fileid)
            } else {
                // An entry that vanished between listing and stat is skipped.
                let Some((fid, at)) = &e.plus else {
                    return true;
                };
                (self.export_id, fid, at, self.fsid.clone(), at.fileid)
            };
        let fh = enc.want_fh.then(|| enc.key.seal(export_id, fid));
        let entry = Entry {
            cookie: e.cookie,
            name: e.name,
            attr: at,
            fh: fh.as_ref().map_or(&[][..], |h| h.as_bytes()),
            fsid,
            mounted_on,
        };
        let ok = enc.entry(self.out, self.limit, entry);
        self.any |= ok;
        self.seen += ok as usize;
        ok
    }
}

#[allow(clippy::too_many_arguments)]
fn fill(
    enc: &Enc,
    b: &dyn vfs::Backend,
    cred: &vfs::Cred,
    dir: &vfs::Fid,
    export_id: u32,
    fsid: Fsid4,
    roots: &[(Vec<u8>, Arc<crate::export::Export>)],
    a: &Readdir4args,
    maxcount: usize,
    out: &mut BytesMut,
) -> Result<(), Fail> {
    // The other exports' roots first: the backend lists as the caller.
    let roots: Vec<_> = roots
        .iter()
        .map(|(name, ex)| {
            let root = ex.backend.root();
            (name.clone(), ex.id, root, ex.backend.getattr(&root).ok())
        })
        .collect();
    // The verifier is known only at the end: write a placeholder.
    let mut res = Listing::begin(out, maxcount, &[0; 8]);
    let mut sink = Sink {
        enc,
        export_id,
        fsid,
        roots: &roots,
        out,
        limit: res.limit,
        any: false,
        seen: 0,
    };
    let end = b.readdir_into(cred, dir, a.cookie, a.cookieverf, true, &mut sink);
    res.any = sink.any;
    let end = match end {
        Ok(end) => end,
        Err(e) => {
            out.truncate(res.start);
            return Err(e.into());
        }
    };
    // OP_READDIR, status, then the verifier.
    out[res.start + 8..res.start + 16].copy_from_slice(&end.verifier);
    res.finish(out, end.eof)
}
