//! One interface over NFSv3, NFSv4.0 and NFSv4.1/4.2 for tools: handles as
//! opaque bytes, one attribute struct, the file operations a tool needs.
//!
//! What only one version has stays reachable: [`Remote::v4`] gives the
//! session (stateids, delegations, COMPOUNDs, server-side COPY),
//! [`Remote::v40`] the NFSv4.0 client, [`Remote::v3`] the NFSv3 client. Opening and closing are NFSv4 state;
//! over NFSv3 they are a CREATE and nothing. Locks are NFSv4 LOCK on an
//! open of the file, or NLM4 over NFSv3.

mod attr;
mod error;

pub use attr::*;
pub use error::{v4_status, Error, Kind, Result};

use crate::nfs3::{self, Nfs3};
use crate::nfs4::{attr::SetAttrs, plain, Session, ANON_STATEID};
use crate::nfs40::{Client40, LockOwner, Open40, OpenOwner};
use bytes::Bytes;
use proto::nfs3 as p3;
use proto::nfs4 as p4;
use std::sync::Arc;

/// A lock held (see [`Remote::lock`]).
#[derive(Debug)]
pub struct HeldLock {
    fh: Fh,
    range: Range,
    exclusive: bool,
    kind: HeldKind,
}

impl HeldLock {
    /// The locked range (len 0: to the end of the file).
    pub fn range(&self) -> Range {
        self.range
    }
}

#[derive(Debug)]
enum HeldKind {
    V3(nfs3::LockOwner),
    V4 {
        open: p4::Stateid4,
        lock: p4::Stateid4,
    },
    V40 {
        open: Open40,
        /// The open's own owner (CLOSE goes as it).
        owner: Arc<OpenOwner>,
        lock: Arc<LockOwner>,
    },
}

enum Proto {
    V3(Arc<Nfs3>),
    V4(Arc<Session>),
    V40(Arc<Client40>),
}

/// A server, over whichever version was agreed.
pub struct Remote {
    proto: Proto,
    rsize: u32,
    wsize: u32,
}

/// Transfer size within `channel` (less room for the COMPOUND around the
/// data), a whole number of 4 KiB pages, at most 1 MiB.
fn fit(server: Option<u64>, channel: u32) -> u32 {
    let room = channel.saturating_sub(1024) as u64;
    let n = server.unwrap_or(1 << 20).min(room) as u32;
    (n & !4095).clamp(4096, 1 << 20)
}

/// The OPEN share access for reading, writing or both (neither: reading).
fn share_access(read: bool, write: bool) -> u32 {
    match (read, write) {
        (true, true) => p4::OPEN4_SHARE_ACCESS_BOTH,
        (false, true) => p4::OPEN4_SHARE_ACCESS_WRITE,
        _ => p4::OPEN4_SHARE_ACCESS_READ,
    }
}

/// An NFSv4 OPEN of an existing file only.
fn nocreate() -> p4::Openflag4 {
    p4::Openflag4::Default(p4::Opentype4::OPEN4_NOCREATE)
}

/// What a create sets: the mode, and with `truncate` size 0.
fn create_set(mode: u32, truncate: bool) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        size: truncate.then_some(0),
        ..Default::default()
    }
}

/// An NFSv4 OPEN that creates with `set`; `guarded`: the file must not
/// exist yet.
fn create_how4(set: &SetAttr, guarded: bool) -> p4::Openflag4 {
    let f = set.v4().encode();
    p4::Openflag4::OPEN4_CREATE(if guarded {
        p4::Createhow4::GUARDED4(f)
    } else {
        p4::Createhow4::UNCHECKED4(f)
    })
}

impl Remote {
    /// Over an NFSv4.1/4.2 session; asks the root's maxread and maxwrite.
    pub async fn from_v4(s: Arc<Session>) -> Result<Remote> {
        let root = s.lookup_path("/").await?;
        let a = s
            .attrs(&root, &[p4::FATTR4_MAXREAD, p4::FATTR4_MAXWRITE])
            .await?;
        let ch = s.fore_channel();
        let (rsize, wsize) = (
            fit(a.maxread, ch.ca_maxresponsesize),
            fit(a.maxwrite, ch.ca_maxrequestsize),
        );
        Ok(Remote {
            proto: Proto::V4(s),
            rsize,
            wsize,
        })
    }

    /// Over an NFSv4.0 client; asks the root's maxread and maxwrite (and
    /// keeps a READ or WRITE with its COMPOUND within 1 MiB + 64 KiB, as
    /// for a session).
    pub async fn from_v40(c: Arc<Client40>) -> Result<Remote> {
        let root = plain::lookup_path(&*c, "/").await?;
        let a = plain::attrs(&*c, &root, &[p4::FATTR4_MAXREAD, p4::FATTR4_MAXWRITE]).await?;
        let room = (1 << 20) + (64 << 10);
        Ok(Remote {
            rsize: fit(a.maxread, room),
            wsize: fit(a.maxwrite, room),
            proto: Proto::V40(c),
        })
    }

    /// Over an NFSv3 client (its FSINFO sizes).
    pub fn from_v3(c: Arc<Nfs3>) -> Remote {
        let (rsize, wsize) = (c.rsize() & !4095, c.wsize() & !4095);
        Remote {
            proto: Proto::V3(c),
            rsize: rsize.max(4096),
            wsize: wsize.max(4096),
        }
    }

    /// The Kerberos layer of the calls, when they go under RPCSEC_GSS.
    pub fn gss(&self) -> Option<&Arc<crate::nfs4::GssSec>> {
        match &self.proto {
            Proto::V4(s) => s.conn().gss(),
            Proto::V40(c) => c.conn().gss(),
            Proto::V3(c) => c.gss(),
        }
    }

    /// Changes when renewing the Kerberos credential fails (see
    /// [`GssSec::trouble`](crate::nfs4::GssSec::trouble)): a writer should
    /// COMMIT what it holds while the old context still works.
    pub fn credential_trouble(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.gss().map(|g| g.trouble())
    }

    /// The NFSv4 session, when that is the version.
    pub fn v4(&self) -> Option<&Arc<Session>> {
        match &self.proto {
            Proto::V4(s) => Some(s),
            _ => None,
        }
    }

    pub fn v3(&self) -> Option<&Arc<Nfs3>> {
        match &self.proto {
            Proto::V3(c) => Some(c),
            _ => None,
        }
    }

    /// The NFSv4.0 client, when that is the version.
    pub fn v40(&self) -> Option<&Arc<Client40>> {
        match &self.proto {
            Proto::V40(c) => Some(c),
            _ => None,
        }
    }

    /// The reconnecting channel the calls go over (None over a single
    /// connection, as protocol tests make them): its counts and state.
    pub fn channel(&self) -> Option<&rpc::client::Channel> {
        match &self.proto {
            Proto::V3(c) => Some(c.channel()),
            Proto::V4(s) => s.conn().channel(),
            Proto::V40(c) => c.conn().channel(),
        }
    }

    /// "3", "4.0", "4.1" or "4.2".
    pub fn version(&self) -> String {
        match &self.proto {
            Proto::V3(_) => "3".into(),
            Proto::V4(s) => format!("4.{}", s.minorversion()),
            Proto::V40(_) => "4.0".into(),
        }
    }

    pub fn rsize(&self) -> u32 {
        self.rsize
    }

    pub fn wsize(&self) -> u32 {
        self.wsize
    }

    /// Calls worth having in flight at once: the session's slots, or
    /// for NFSv3 (no slot table) a fixed number.
    pub fn max_inflight(&self) -> usize {
        match &self.proto {
            Proto::V4(s) => (s.fore_channel().ca_maxrequests as usize).max(1),
            Proto::V3(_) => 64,
            // No slot table either; one connection.
            Proto::V40(_) => 32,
        }
    }

    pub async fn lookup_path(&self, path: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.lookup_path(path).await?.0),
            Proto::V3(c) => Fh(c.lookup_path(path).await?.data),
            Proto::V40(c) => Fh(plain::lookup_path(&**c, path).await?.0),
        })
    }

    pub async fn lookup_path_attr(&self, path: &str) -> Result<(Fh, Attr)> {
        match &self.proto {
            Proto::V4(s) => {
                let (fh, a) = s.lookup_path_attrs(path, V4_ATTRS).await?;
                Ok((Fh(fh.0), Attr::from_v4(&a)))
            }
            Proto::V3(c) => {
                let (fh, a) = c.lookup_path_attr(path).await?;
                Ok((Fh(fh.data), Attr::from_v3(&a)))
            }
            Proto::V40(c) => {
                let (fh, a) = plain::lookup_path_attrs(&**c, path, V4_ATTRS).await?;
                Ok((Fh(fh.0), Attr::from_v4(&a)))
            }
        }
    }

    pub async fn lookup(&self, dir: &Fh, name: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.lookup(&dir.v4(), name).await?.0),
            Proto::V3(c) => Fh(c.lookup(&dir.v3(), name).await?.0.data),
            Proto::V40(c) => Fh(plain::lookup(&**c, &dir.v4(), name).await?.0),
        })
    }

    /// [`Remote::lookup`] with the file's attributes from the same call
    /// (NFSv4: one COMPOUND; NFSv3: LOOKUP's post-op attributes, None
    /// when the server left them out).
    pub async fn lookup_attr(&self, dir: &Fh, name: &str) -> Result<(Fh, Option<Attr>)> {
        Ok(match &self.proto {
            Proto::V4(s) => {
                let (fh, a) = plain::lookup_attrs(&**s, &dir.v4(), name, V4_ATTRS).await?;
                // Under a delegation the session answers stat from its
                // cache: keep that current.
                if let Some(d) = s.delegations().get(&fh) {
                    s.delegations().store_attrs(&fh, &d.stateid, a.clone());
                }
                (Fh(fh.0), Some(Attr::from_v4(&a)))
            }
            Proto::V3(c) => {
                let (fh, a) = c.lookup(&dir.v3(), name).await?;
                (Fh(fh.data), a.as_ref().map(Attr::from_v3))
            }
            Proto::V40(c) => {
                let (fh, a) = plain::lookup_attrs(&**c, &dir.v4(), name, V4_ATTRS).await?;
                (Fh(fh.0), Some(Attr::from_v4(&a)))
            }
        })
    }

    pub async fn stat(&self, fh: &Fh) -> Result<Attr> {
        Ok(match &self.proto {
            Proto::V4(s) => Attr::from_v4(&s.attrs(&fh.v4(), V4_ATTRS).await?),
            Proto::V3(c) => Attr::from_v3(&c.getattr(&fh.v3()).await?),
            Proto::V40(c) => Attr::from_v4(&plain::attrs(&**c, &fh.v4(), V4_ATTRS).await?),
        })
    }

    /// Every entry but "." and "..", with attributes (fetched one by one
    /// when the listing had none: NFSv3 READDIR without PLUS).
    pub async fn readdir(&self, dir: &Fh) -> Result<Vec<Entry>> {
        self.readdir_bits(dir, V4_ATTRS).await
    }

    /// [`Remote::readdir`] with every entry's handle too (NFSv4: the
    /// filehandle attribute; NFSv3 READDIRPLUS has them): what a mount
    /// needs to hand out entries without a LOOKUP each (FUSE readdirplus).
    pub async fn readdir_plus(&self, dir: &Fh) -> Result<Vec<Entry>> {
        let mut bits = V4_ATTRS.to_vec();
        bits.push(p4::FATTR4_FILEHANDLE);
        self.readdir_bits(dir, &bits).await
    }

    async fn readdir_bits(&self, dir: &Fh, bits: &[u32]) -> Result<Vec<Entry>> {
        let v4 = match &self.proto {
            Proto::V4(s) => s.readdir_with(&dir.v4(), bits).await?,
            Proto::V40(c) => plain::readdir_with(&**c, &dir.v4(), bits).await?,
            Proto::V3(_) => vec![],
        };
        match &self.proto {
            Proto::V4(_) | Proto::V40(_) => Ok(v4
                .into_iter()
                .map(|e| Entry {
                    name: e.name,
                    attr: Attr::from_v4(&e.attrs),
                    fh: e.attrs.filehandle.map(|f| Fh(f.0)),
                })
                .collect()),
            Proto::V3(c) => {
                let d = dir.v3();
                let mut out = vec![];
                for e in c.readdir(&d).await? {
                    let (fh, attrs) = match (e.fh, e.attrs) {
                        (Some(fh), Some(a)) => (fh, a),
                        (fh, _) => {
                            let fh = match fh {
                                Some(f) => f,
                                None => c.lookup(&d, &e.name).await?.0,
                            };
                            let a = c.getattr(&fh).await?;
                            (fh, a)
                        }
                    };
                    out.push(Entry {
                        name: e.name,
                        attr: Attr::from_v3(&attrs),
                        fh: Some(Fh(fh.data)),
                    });
                }
                Ok(out)
            }
        }
    }

    /// `len` bytes at `off` (fewer at the end of the file) and whether
    /// the end was reached. NFSv4 reads with the anonymous stateid.
    pub async fn read(&self, fh: &Fh, off: u64, len: u32) -> Result<(Bytes, bool)> {
        match &self.proto {
            Proto::V4(s) => {
                let r = s.read(&ANON_STATEID, &fh.v4(), off, len).await?;
                Ok((r.data, r.eof))
            }
            Proto::V3(c) => {
                let r = c.read(&fh.v3(), off, len).await?;
                Ok((r.data, r.eof))
            }
            Proto::V40(c) => {
                let r = plain::read(&**c, &ANON_STATEID, &fh.v4(), off, len).await?;
                Ok((r.data, r.eof))
            }
        }
    }

    /// [`Remote::read`] with the open's stateid (NFSv4: the server may
    /// have granted a delegation on that open; the anonymous stateid would
    /// be a read by nobody it knows).
    pub async fn read_open(&self, f: &OpenFile, off: u64, len: u32) -> Result<(Bytes, bool)> {
        match (&self.proto, &f.stateid) {
            (Proto::V4(s), Some(sid)) => {
                let r = s.read(sid, &f.fh.v4(), off, len).await?;
                Ok((r.data, r.eof))
            }
            _ => self.read(&f.fh, off, len).await,
        }
    }

    /// Opens an existing file by its handle with a real NFSv4.1 OPEN
    /// (CLAIM_FH) for reading, or writing with `write` (reading too
    /// with `read`), so the server can grant a delegation; with
    /// `with_attr` its attributes come in the same COMPOUND. None over
    /// NFSv3 and NFSv4.0 (no open state there: I/O goes without).
    pub async fn open_fh(
        &self,
        fh: &Fh,
        read: bool,
        write: bool,
        with_attr: bool,
    ) -> Result<Option<(OpenFile, Option<Attr>)>> {
        let Proto::V4(s) = &self.proto else {
            return Ok(None);
        };
        let access = share_access(read, write);
        // An open owner per open: each CLOSE then ends only its own open
        // (one shared owner would share one stateid among all opens of
        // the file, and the first CLOSE would end them all).
        let owner = s.new_owner("open");
        let (o, a) = s
            .open_fh(&owner, &fh.v4(), access, with_attr.then_some(V4_ATTRS))
            .await?;
        Ok(Some((
            OpenFile {
                fh: fh.clone(),
                stateid: Some(o.stateid),
            },
            a.as_ref().map(Attr::from_v4),
        )))
    }

    /// Close-to-open by name: `dir/name` opened again as the server
    /// resolves the name now. NFSv4.1/4.2: an OPEN of the name (CLAIM_NULL,
    /// no create) for reading, or writing with `write` (reading too with
    /// `read`), its handle and attributes in the same COMPOUND; elsewhere a
    /// LOOKUP with the attributes (no open state there). Returns the open
    /// (None without open state), the handle the name leads to now (the
    /// caller compares it with the one it had) and the attributes.
    pub async fn open_name(
        &self,
        dir: &Fh,
        name: &str,
        read: bool,
        write: bool,
    ) -> Result<(Option<OpenFile>, Fh, Option<Attr>)> {
        let Proto::V4(s) = &self.proto else {
            let (fh, a) = self.lookup_attr(dir, name).await?;
            return Ok((None, fh, a));
        };
        let access = share_access(read, write);
        // An open owner per open, as in open_fh.
        let owner = s.new_owner("open");
        let (o, a, _) = s
            .open_with_attrs(
                &owner,
                &dir.v4(),
                name,
                (nocreate(), access, p4::OPEN4_SHARE_DENY_NONE),
                V4_ATTRS,
                false,
            )
            .await?;
        let fh = Fh(o.fh.0);
        Ok((
            Some(OpenFile {
                fh: fh.clone(),
                stateid: Some(o.stateid),
            }),
            fh,
            Some(Attr::from_v4(&a)),
        ))
    }

    /// The kind of delegation held on `fh` (NFSv4.1/4.2), if any.
    pub fn delegation(&self, fh: &Fh) -> Option<crate::nfs4::DelegKind> {
        let s = self.v4()?;
        s.delegations().kind(&fh.v4())
    }

    /// Creates `dir/name` if missing (with `mode`) and opens it for
    /// writing, truncated to nothing when `truncate`.
    pub async fn open_write(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
        truncate: bool,
    ) -> Result<OpenFile> {
        Ok(self.open_create(dir, name, mode, truncate, false).await?.0)
    }

    /// [`Remote::open_write`]; `guarded`: the file must not exist yet
    /// (O_EXCL: GUARDED, so a file another client made meanwhile is
    /// EEXIST, not opened). NFSv3: with the file's and the directory's
    /// attributes from the CREATE's reply, when it had them.
    async fn open_create(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
        truncate: bool,
        guarded: bool,
    ) -> Result<(OpenFile, Option<Attr>, Option<Attr>)> {
        let set = create_set(mode, truncate);
        let (d, both, none) = (
            dir.v4(),
            p4::OPEN4_SHARE_ACCESS_BOTH,
            p4::OPEN4_SHARE_DENY_NONE,
        );
        let (fh, stateid) = match &self.proto {
            Proto::V4(s) => {
                let how = create_how4(&set, guarded);
                let o = s
                    .open_with(&s.open_owner(), &d, name, how, both, none)
                    .await?;
                (o.fh, o.stateid)
            }
            Proto::V40(c) => {
                let how = create_how4(&set, guarded);
                let o = c
                    .open_with(c.open_owner(), &d, name, how, both, none)
                    .await?;
                (o.fh, o.stateid)
            }
            Proto::V3(c) => {
                // UNCHECKED: an existing file is used, its mode kept and
                // (size 0) truncated, as open(O_CREAT|O_TRUNC) does.
                let how = if guarded {
                    p3::Createhow3::GUARDED(set.v3())
                } else {
                    p3::Createhow3::UNCHECKED(set.v3())
                };
                let (fh, a, d) = c.create_attrs(&dir.v3(), name, how).await?;
                let f = OpenFile {
                    fh: Fh(fh.data),
                    stateid: None,
                };
                return Ok((
                    f,
                    a.as_ref().map(Attr::from_v3),
                    d.as_ref().map(Attr::from_v3),
                ));
            }
        };
        let f = OpenFile {
            fh: Fh(fh.0),
            stateid: Some(stateid),
        };
        Ok((f, None, None))
    }

    /// [`Remote::open_write`] (`guarded` as for [`Remote::open_create`]),
    /// with the file's attributes and its directory's after the OPEN, from
    /// the same COMPOUND over NFSv4.1/4.2 and the CREATE's reply over
    /// NFSv3 (None over NFSv4.0, or where the reply had none).
    pub async fn open_create_attr(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
        truncate: bool,
        guarded: bool,
    ) -> Result<(OpenFile, Option<Attr>, Option<Attr>)> {
        let Proto::V4(s) = &self.proto else {
            return self.open_create(dir, name, mode, truncate, guarded).await;
        };
        let how = create_how4(&create_set(mode, truncate), guarded);
        let (o, a, d) = s
            .open_with_attrs(
                &s.open_owner(),
                &dir.v4(),
                name,
                (how, p4::OPEN4_SHARE_ACCESS_BOTH, p4::OPEN4_SHARE_DENY_NONE),
                V4_ATTRS,
                true,
            )
            .await?;
        Ok((
            OpenFile {
                fh: Fh(o.fh.0),
                stateid: Some(o.stateid),
            },
            Some(Attr::from_v4(&a)),
            d.as_ref().map(Attr::from_v4),
        ))
    }

    /// A new, empty regular file `name` in `dir` (EEXIST if there is
    /// one): mknod(2) of a regular file. Its attributes when they came
    /// with the call.
    pub async fn create_exclusive(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
    ) -> Result<(Fh, Option<Attr>)> {
        let (f, a, _) = self.open_create_attr(dir, name, mode, false, true).await?;
        self.close(&f).await?;
        Ok((f.fh, a))
    }

    /// CLOSE over NFSv4 (4.0: by the default open owner, which opened
    /// it); nothing over NFSv3.
    pub async fn close(&self, f: &OpenFile) -> Result<()> {
        match (&self.proto, &f.stateid) {
            (Proto::V4(s), Some(sid)) => {
                s.close(&f.fh.v4(), sid).await?;
            }
            (Proto::V40(c), Some(sid)) => {
                c.close(&f.fh.v4(), sid).await?;
            }
            _ => {}
        }
        Ok(())
    }

    pub async fn write(
        &self,
        f: &OpenFile,
        off: u64,
        data: Bytes,
        stable: Stable,
    ) -> Result<Written> {
        let how = match stable {
            Stable::Unstable => p4::StableHow4::UNSTABLE4,
            Stable::FileSync => p4::StableHow4::FILE_SYNC4,
        };
        let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
        let r = match &self.proto {
            Proto::V4(s) => s.write(&sid, &f.fh.v4(), off, data, how).await?,
            Proto::V40(c) => plain::write(&**c, &sid, &f.fh.v4(), off, data, how).await?,
            Proto::V3(c) => {
                let how = match stable {
                    Stable::Unstable => p3::StableHow::UNSTABLE,
                    Stable::FileSync => p3::StableHow::FILE_SYNC,
                };
                let r = c.write(&f.fh.v3(), off, data, how).await?;
                return Ok(Written {
                    count: r.count,
                    unstable: r.committed == p3::StableHow::UNSTABLE,
                    verf: r.verf,
                });
            }
        };
        Ok(Written {
            count: r.count,
            unstable: r.committed == p4::StableHow4::UNSTABLE4,
            verf: r.writeverf,
        })
    }

    /// A stable WRITE of `data` at `off`, then `set` (mode, owner, times:
    /// not the size) and the attributes it left: one COMPOUND over
    /// NFSv4.1/4.2, two calls elsewhere. The WRITE's result or error, then
    /// the SETATTR's outcome (attributes None when the server gave none).
    pub async fn write_then_setattr(
        &self,
        f: &OpenFile,
        off: u64,
        data: Bytes,
        set: &SetAttr,
    ) -> Result<(Written, Result<Option<Attr>>)> {
        let Proto::V4(s) = &self.proto else {
            let w = self.write(f, off, data, Stable::FileSync).await?;
            return Ok((w, self.setattr_attr(&f.fh, set).await));
        };
        let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
        let fh = f.fh.v4();
        let (w, after) = s
            .write_then_setattr(&sid, &fh, off, data, &set.v4(), V4_ATTRS)
            .await?;
        if let Ok(a) = &after {
            set_deleg_attrs(s, &fh, a.as_ref());
        }
        let written = Written {
            count: w.count,
            unstable: w.committed == p4::StableHow4::UNSTABLE4,
            verf: w.writeverf,
        };
        Ok((
            written,
            after
                .map(|a| a.as_ref().map(Attr::from_v4))
                .map_err(Into::into),
        ))
    }

    /// COMMIT of the whole file; the verifier to compare with the writes'.
    pub async fn commit(&self, fh: &Fh) -> Result<[u8; 8]> {
        Ok(match &self.proto {
            Proto::V4(s) => s.commit(&fh.v4(), 0, 0).await?,
            Proto::V3(c) => c.commit(&fh.v3(), 0, 0).await?,
            Proto::V40(c) => plain::commit(&**c, &fh.v4(), 0, 0).await?,
        })
    }

    /// The NFSv4.2 session, for an operation only minor version 2 has;
    /// NFS4ERR_NOTSUPP (EOPNOTSUPP) over anything else, whose servers
    /// would answer OP_ILLEGAL or nothing at all.
    fn v42(&self, op: p4::NfsOpnum4) -> Result<&Arc<Session>> {
        match &self.proto {
            Proto::V4(s) if s.minorversion() >= 2 => Ok(s),
            _ => Err(v4_status(op, p4::Nfsstat4::NFS4ERR_NOTSUPP)),
        }
    }

    /// Whether the NFSv4.2 operations (ALLOCATE, DEALLOCATE, SEEK, COPY)
    /// can be asked at all (the server may still answer NOTSUPP).
    pub fn has_v42(&self) -> bool {
        self.v42(p4::NfsOpnum4::OP_SEEK).is_ok()
    }

    /// NFSv4.2 ALLOCATE: space for `[off, off + len)`, the size raised to
    /// its end (fallocate(2) mode 0).
    pub async fn allocate(&self, f: &OpenFile, off: u64, len: u64) -> Result<()> {
        let s = self.v42(p4::NfsOpnum4::OP_ALLOCATE)?;
        let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
        Ok(s.allocate(&f.fh.v4(), &sid, off, len).await?)
    }

    /// NFSv4.2 DEALLOCATE: a hole punched in `[off, off + len)`, the size
    /// kept (fallocate(2) FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE).
    pub async fn deallocate(&self, f: &OpenFile, off: u64, len: u64) -> Result<()> {
        let s = self.v42(p4::NfsOpnum4::OP_DEALLOCATE)?;
        let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
        Ok(s.deallocate(&f.fh.v4(), &sid, off, len).await?)
    }

    /// NFSv4.2 SEEK: where the next data (or with `hole`, hole) at or
    /// after `off` begins (lseek(2) SEEK_DATA, SEEK_HOLE); ENXIO when
    /// there is none.
    pub async fn seek(&self, f: &OpenFile, off: u64, hole: bool) -> Result<u64> {
        let s = self.v42(p4::NfsOpnum4::OP_SEEK)?;
        let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
        Ok(s.seek(&f.fh.v4(), &sid, off, hole).await?.sr_offset)
    }

    /// NFSv4.2 COPY within the server, synchronous: up to `count` bytes of
    /// `src` at `src_off` to `dst` at `dst_off`. The server may copy fewer;
    /// an UNSTABLE result needs a [`Remote::commit`] of `dst`.
    pub async fn copy(
        &self,
        src: &OpenFile,
        dst: &OpenFile,
        src_off: u64,
        dst_off: u64,
        count: u64,
    ) -> Result<Copied> {
        let s = self.v42(p4::NfsOpnum4::OP_COPY)?;
        let w = s
            .copy_range(
                &src.fh.v4(),
                src.stateid.as_ref().unwrap_or(&ANON_STATEID),
                &dst.fh.v4(),
                dst.stateid.as_ref().unwrap_or(&ANON_STATEID),
                src_off,
                dst_off,
                count,
            )
            .await?;
        Ok(Copied {
            count: w.wr_count,
            unstable: w.wr_committed == p4::StableHow4::UNSTABLE4,
            verf: w.wr_writeverf,
        })
    }

    pub async fn setattr(&self, fh: &Fh, set: &SetAttr) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.setattr(&fh.v4(), &ANON_STATEID, &set.v4()).await?;
            }
            Proto::V3(c) => {
                c.setattr(&fh.v3(), set.v3()).await?;
            }
            Proto::V40(c) => {
                plain::setattr(&**c, &fh.v4(), &ANON_STATEID, &set.v4()).await?;
            }
        }
        Ok(())
    }

    /// [`Remote::setattr`] and the attributes it left, from the same call
    /// (NFSv4: GETATTR in the COMPOUND; NFSv3: SETATTR's post-op
    /// attributes, None when the server left them out).
    pub async fn setattr_attr(&self, fh: &Fh, set: &SetAttr) -> Result<Option<Attr>> {
        Ok(match &self.proto {
            Proto::V4(s) => {
                let f = fh.v4();
                let a = plain::setattr_attrs(&**s, &f, &ANON_STATEID, &set.v4(), V4_ATTRS).await?;
                set_deleg_attrs(s, &f, a.as_ref());
                a.as_ref().map(Attr::from_v4)
            }
            Proto::V3(c) => c
                .setattr(&fh.v3(), set.v3())
                .await?
                .as_ref()
                .map(Attr::from_v3),
            Proto::V40(c) => {
                let a = plain::setattr_attrs(&**c, &fh.v4(), &ANON_STATEID, &set.v4(), V4_ATTRS)
                    .await?;
                a.as_ref().map(Attr::from_v4)
            }
        })
    }

    pub async fn mkdir(&self, dir: &Fh, name: &str, mode: u32) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.mkdir(&dir.v4(), name, mode).await?.0),
            Proto::V3(c) => Fh(c.mkdir(&dir.v3(), name, mode).await?.data),
            Proto::V40(c) => Fh(plain::mkdir(&**c, &dir.v4(), name, mode).await?.0),
        })
    }

    /// Removes a non-directory.
    pub async fn remove(&self, dir: &Fh, name: &str) -> Result<()> {
        self.remove_entry(dir, name, false).await
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, dir: &Fh, name: &str) -> Result<()> {
        self.remove_entry(dir, name, true).await
    }

    /// REMOVE over NFSv4 (one call for both kinds); NFSv3 has RMDIR for
    /// a directory.
    async fn remove_entry(&self, dir: &Fh, name: &str, is_dir: bool) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.remove(&dir.v4(), name).await?;
            }
            Proto::V3(c) if is_dir => {
                c.rmdir(&dir.v3(), name).await?;
            }
            Proto::V3(c) => {
                c.remove(&dir.v3(), name).await?;
            }
            Proto::V40(c) => {
                plain::remove(&**c, &dir.v4(), name).await?;
            }
        }
        Ok(())
    }

    /// [`Remote::remove`] (or [`Remote::rmdir`]) and the directory's
    /// attributes after it, from the same call (NFSv4: GETATTR in the
    /// COMPOUND; NFSv3: the post-op attributes, None when the server left
    /// them out).
    pub async fn remove_attr(&self, dir: &Fh, name: &str, is_dir: bool) -> Result<Option<Attr>> {
        Ok(match &self.proto {
            Proto::V4(s) => {
                let a = plain::remove_attrs(&**s, &dir.v4(), name, V4_ATTRS).await?;
                a.as_ref().map(Attr::from_v4)
            }
            Proto::V3(c) if is_dir => c.rmdir(&dir.v3(), name).await?.as_ref().map(Attr::from_v3),
            Proto::V3(c) => c.remove(&dir.v3(), name).await?.as_ref().map(Attr::from_v3),
            Proto::V40(c) => {
                let a = plain::remove_attrs(&**c, &dir.v4(), name, V4_ATTRS).await?;
                a.as_ref().map(Attr::from_v4)
            }
        })
    }

    pub async fn rename(&self, from_dir: &Fh, from: &str, to_dir: &Fh, to: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.rename(&from_dir.v4(), from, &to_dir.v4(), to).await?;
            }
            Proto::V3(c) => c.rename(&from_dir.v3(), from, &to_dir.v3(), to).await?,
            Proto::V40(c) => {
                plain::rename(&**c, &from_dir.v4(), from, &to_dir.v4(), to).await?;
            }
        }
        Ok(())
    }

    pub async fn symlink(&self, dir: &Fh, name: &str, target: &str) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.symlink(&dir.v4(), name, target).await?.0),
            Proto::V3(c) => Fh(c.symlink(&dir.v3(), name, target).await?.data),
            Proto::V40(c) => Fh(plain::symlink(&**c, &dir.v4(), name, target).await?.0),
        })
    }

    /// A fifo, socket or device node `name` in `dir` with `mode`.
    pub async fn mknod(&self, dir: &Fh, name: &str, kind: Special, mode: u32) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(create_special(&**s, dir, name, kind, mode).await?),
            Proto::V40(c) => Fh(create_special(&**c, dir, name, kind, mode).await?),
            Proto::V3(c) => {
                let attrs = nfs3::sattr_mode(mode);
                let dev = |major, minor| p3::Devicedata3 {
                    dev_attributes: attrs.clone(),
                    spec: p3::Specdata3 {
                        specdata1: major,
                        specdata2: minor,
                    },
                };
                let what = match kind {
                    Special::Fifo => p3::Mknoddata3::NF3FIFO(attrs.clone()),
                    Special::Socket => p3::Mknoddata3::NF3SOCK(attrs.clone()),
                    Special::Char { major, minor } => p3::Mknoddata3::NF3CHR(dev(major, minor)),
                    Special::Block { major, minor } => p3::Mknoddata3::NF3BLK(dev(major, minor)),
                };
                Fh(c.mknod(&dir.v3(), name, what).await?.data)
            }
        })
    }

    pub async fn readlink(&self, fh: &Fh) -> Result<String> {
        let b = match &self.proto {
            Proto::V4(s) => s.readlink(&fh.v4()).await?,
            Proto::V3(c) => c.readlink(&fh.v3()).await?,
            Proto::V40(c) => plain::readlink(&**c, &fh.v4()).await?,
        };
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// A hard link: `dir/name` becomes another name of `fh`.
    pub async fn link(&self, fh: &Fh, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.link(&fh.v4(), &dir.v4(), name).await?;
            }
            Proto::V3(c) => c.link(&fh.v3(), &dir.v3(), name).await?,
            Proto::V40(c) => {
                plain::link(&**c, &fh.v4(), &dir.v4(), name).await?;
            }
        }
        Ok(())
    }

    pub async fn fsstat(&self, fh: &Fh) -> Result<FsStat> {
        const FS: &[u32] = crate::nfs4::attr::FSSTAT;
        match &self.proto {
            Proto::V4(_) | Proto::V40(_) => {
                let a = match &self.proto {
                    Proto::V4(s) => s.attrs(&fh.v4(), FS).await?,
                    Proto::V40(c) => plain::attrs(&**c, &fh.v4(), FS).await?,
                    Proto::V3(_) => unreachable!("matched above"),
                };
                Ok(FsStat {
                    total: a.space_total.unwrap_or(0),
                    free: a.space_free.unwrap_or(0),
                    avail: a.space_avail.unwrap_or(0),
                    files_total: a.files_total.unwrap_or(0),
                    files_free: a.files_free.unwrap_or(0),
                    files_avail: a.files_avail.unwrap_or(0),
                })
            }
            Proto::V3(c) => {
                let r = c.fsstat(&fh.v3()).await?;
                Ok(FsStat {
                    total: r.tbytes,
                    free: r.fbytes,
                    avail: r.abytes,
                    files_total: r.tfiles,
                    files_free: r.ffiles,
                    files_avail: r.afiles,
                })
            }
        }
    }

    /// Takes a byte-range lock on the file `path`, exclusive or shared.
    /// With `wait`, a conflicting lock is waited out; without, Ok(None)
    /// says someone else holds one. NFSv4: the file is opened (read for a
    /// shared lock, read and write for an exclusive one) and stays open
    /// until [`Remote::unlock`]. NFSv3: NLM4.
    pub async fn lock(
        &self,
        fh: &Fh,
        dir_and_name: (&Fh, &str),
        range: Range,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<HeldLock>> {
        self.lock_for(fh, dir_and_name, range, exclusive, wait, None)
            .await
    }

    /// [`Remote::lock`] on behalf of one of several local lock owners
    /// (a FUSE mount serves many processes): over NLM each `owner` is a
    /// lock owner of its own, so their locks conflict at the server as
    /// the processes' would. (NFSv4 locks have a new owner each.)
    pub async fn lock_for(
        &self,
        fh: &Fh,
        dir_and_name: (&Fh, &str),
        range: Range,
        exclusive: bool,
        wait: bool,
        owner: Option<u64>,
    ) -> Result<Option<HeldLock>> {
        match &self.proto {
            Proto::V3(c) => lock_v3(c, fh, range, exclusive, wait, owner).await,
            Proto::V4(s) => lock_v41(s, dir_and_name, range, exclusive, wait).await,
            Proto::V40(c) => lock_v40(c, dir_and_name, range, exclusive, wait).await,
        }
    }

    /// Releases a lock taken by [`Remote::lock`] (and over NFSv4 closes the file).
    pub async fn unlock(&self, l: HeldLock) -> Result<()> {
        match (&self.proto, l.kind) {
            (Proto::V3(c), HeldKind::V3(owner)) => {
                let r = nfs3::LockRange {
                    offset: l.range.offset,
                    len: l.range.len,
                    exclusive: l.exclusive,
                };
                c.nlm_unlock(&l.fh.v3(), &owner, r).await?;
            }
            (Proto::V4(s), HeldKind::V4 { open, lock }) => {
                let len = if l.range.len == 0 {
                    u64::MAX
                } else {
                    l.range.len
                };
                let t = if l.exclusive {
                    p4::NfsLockType4::WRITE_LT
                } else {
                    p4::NfsLockType4::READ_LT
                };
                let fh = l.fh.v4();
                let r = s.locku(&fh, &lock, t, l.range.offset, len).await;
                s.close(&fh, &open).await?;
                r?;
            }
            (Proto::V40(c), HeldKind::V40 { open, owner, lock }) => {
                let len = if l.range.len == 0 {
                    u64::MAX
                } else {
                    l.range.len
                };
                let t = if l.exclusive {
                    p4::NfsLockType4::WRITE_LT
                } else {
                    p4::NfsLockType4::READ_LT
                };
                let r = c.locku(&open.fh, &lock, t, l.range.offset, len).await;
                if r.is_ok() {
                    let _ = c.release_lock_owner(&lock).await;
                }
                c.close_as(&owner, &open.fh, &open.stateid).await?;
                r?;
            }
            _ => unreachable!("a lock is released over the version that took it"),
        }
        Ok(())
    }

    /// Ends the session (NFSv4 DESTROY_SESSION and friends), the NFSv4.0
    /// lease's renewal, or the mounts (NFSv3 UMNT). Failures change nothing for the caller.
    pub async fn close_all(&self) {
        match &self.proto {
            Proto::V4(s) => {
                let _ = s.destroy().await;
            }
            Proto::V3(c) => c.unmount_all().await,
            // NFSv4.0 has no DESTROY_CLIENTID: the lease runs out.
            Proto::V40(c) => c.stop_renewal(),
        }
    }
}

/// NFSv4 CREATE of `kind` (either minor version): the new file's handle.
async fn create_special(
    c: &impl plain::Compound,
    dir: &Fh,
    name: &str,
    kind: Special,
    mode: u32,
) -> Result<Bytes> {
    let spec = |major, minor| p4::Specdata4 {
        specdata1: major,
        specdata2: minor,
    };
    let objtype = match kind {
        Special::Fifo => p4::Createtype4::NF4FIFO,
        Special::Socket => p4::Createtype4::NF4SOCK,
        Special::Char { major, minor } => p4::Createtype4::NF4CHR(spec(major, minor)),
        Special::Block { major, minor } => p4::Createtype4::NF4BLK(spec(major, minor)),
    };
    let fh = plain::create(c, &dir.v4(), name, objtype, SetAttrs::mode(mode)).await?;
    Ok(fh.0)
}

/// NFSv4 lock type for a lock of that kind, blocking or not.
fn lock_type(exclusive: bool, wait: bool) -> p4::NfsLockType4 {
    match (exclusive, wait) {
        (true, true) => p4::NfsLockType4::WRITEW_LT,
        (true, false) => p4::NfsLockType4::WRITE_LT,
        (false, true) => p4::NfsLockType4::READW_LT,
        (false, false) => p4::NfsLockType4::READ_LT,
    }
}

/// [`Remote::lock_for`] over NFSv3: an NLM4 lock, the owner this process
/// (or `owner` within it).
async fn lock_v3(
    c: &Nfs3,
    fh: &Fh,
    range: Range,
    exclusive: bool,
    wait: bool,
    owner: Option<u64>,
) -> Result<Option<HeldLock>> {
    let mut owner_of = nfs3::LockOwner::this_process(&c.options().machine);
    if let Some(o) = owner {
        owner_of.oh = Bytes::from(format!(
            "tarn:{}.{o:x}@{}",
            std::process::id(),
            c.options().machine
        ));
        // svid names the holder in NLM4_DENIED replies.
        owner_of.svid = (o as i32) & i32::MAX;
    }
    let owner = owner_of;
    let r = nfs3::LockRange {
        offset: range.offset,
        len: range.len,
        exclusive,
    };
    if !c.nlm_lock(&fh.v3(), &owner, r, wait).await? {
        return Ok(None);
    }
    Ok(Some(HeldLock {
        fh: fh.clone(),
        range,
        exclusive,
        kind: HeldKind::V3(owner),
    }))
}

/// [`Remote::lock_for`] over NFSv4.1: an OPEN of its own, then LOCK,
/// retried while denied (when waiting), in grace or delayed.
async fn lock_v41(
    s: &Session,
    (dir, name): (&Fh, &str),
    range: Range,
    exclusive: bool,
    wait: bool,
) -> Result<Option<HeldLock>> {
    // Reading, and writing for an exclusive (write) lock.
    let access = share_access(true, exclusive);
    // An open owner of its own: the session's would share one
    // open among this client's locks on the file, and
    // [`Remote::unlock`]'s CLOSE would release them all.
    let oo = s.new_owner("lock-open");
    let o = s
        .open_with(
            &oo,
            &dir.v4(),
            name,
            nocreate(),
            access,
            p4::OPEN4_SHARE_DENY_NONE,
        )
        .await?;
    let (open, ofh) = (o.stateid, o.fh);
    let owner = s.new_owner("lock");
    let len = range.len4();
    // A denied LOCK leaves no lock state: each try introduces the
    // owner again with the open stateid.
    let locker = s.new_lock_owner(&open, &owner);
    let mut pause = crate::pause::Pause::for_locks();
    loop {
        let t = lock_type(exclusive, wait);
        let r = s.lock(&ofh, locker.clone(), t, range.offset, len).await;
        match r {
            Ok(Ok(lock)) => {
                return Ok(Some(HeldLock {
                    fh: Fh(ofh.0),
                    range,
                    exclusive,
                    kind: HeldKind::V4 { open, lock },
                }))
            }
            Ok(Err(_denied)) if wait => {}
            Ok(Err(_denied)) => {
                let _ = s.close(&ofh, &open).await;
                return Ok(None);
            }
            Err(e)
                if matches!(
                    e.status(),
                    Some(p4::Nfsstat4::NFS4ERR_GRACE | p4::Nfsstat4::NFS4ERR_DELAY)
                ) => {}
            Err(e) => {
                let _ = s.close(&ofh, &open).await;
                return Err(e.into());
            }
        }
        pause.wait().await;
    }
}

/// [`Remote::lock_for`] over NFSv4.0: an OPEN of its own open owner, then
/// LOCK with a new lock owner per try.
async fn lock_v40(
    c: &Client40,
    (dir, name): (&Fh, &str),
    range: Range,
    exclusive: bool,
    wait: bool,
) -> Result<Option<HeldLock>> {
    // Reading, and writing for an exclusive (write) lock.
    let access = share_access(true, exclusive);
    // An open owner of its own, as over NFSv4.1: with the
    // client's one, a second lock on the file would get the
    // same open (one per owner and file), and its CLOSE (after
    // a denied try, or at its unlock) would end the first
    // lock's open too.
    let oo = c.new_open_owner();
    let open = c
        .open_with(
            &oo,
            &dir.v4(),
            name,
            nocreate(),
            access,
            p4::OPEN4_SHARE_DENY_NONE,
        )
        .await?;
    let len = range.len4();
    let t = lock_type(exclusive, wait);
    let mut pause = crate::pause::Pause::for_locks();
    loop {
        // A new lock owner each try: whether a server kept one
        // whose first LOCK was denied differs between servers.
        // (The client retries DELAY and GRACE itself.)
        let lock = c.new_lock_owner();
        let r = c.lock(&oo, &open, &lock, t, range.offset, len).await;
        match r {
            Ok(Ok(_)) => {
                return Ok(Some(HeldLock {
                    fh: Fh(open.fh.0.clone()),
                    range,
                    exclusive,
                    kind: HeldKind::V40 {
                        open,
                        owner: oo,
                        lock,
                    },
                }))
            }
            Ok(Err(_denied)) if wait => {
                let _ = c.release_lock_owner(&lock).await;
            }
            Ok(Err(_denied)) => {
                let _ = c.release_lock_owner(&lock).await;
                let _ = c.close_as(&oo, &open.fh, &open.stateid).await;
                return Ok(None);
            }
            Err(e) => {
                let _ = c.close_as(&oo, &open.fh, &open.stateid).await;
                return Err(e.into());
            }
        }
        pause.wait().await;
    }
}

/// After a SETATTR of `fh`: a delegation's cached attributes become the
/// ones the SETATTR left (dropped when none came back), which would
/// otherwise keep the times and mode from before.
fn set_deleg_attrs(s: &Session, fh: &p4::NfsFh4, after: Option<&crate::nfs4::Attrs>) {
    if let Some(d) = s.delegations().get(fh) {
        match after {
            Some(a) => s.delegations().store_attrs(fh, &d.stateid, a.clone()),
            None => s.delegations().drop_attrs(fh),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_sizes_fit_the_channel() {
        assert_eq!(fit(Some(1 << 20), (1 << 20) + (64 << 10)), 1 << 20);
        assert_eq!(fit(Some(1 << 20), 256 << 10), (256 << 10) - 4096);
        assert_eq!(fit(None, 1 << 20), (1 << 20) - 4096);
    }
}
