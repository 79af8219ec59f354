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
use crate::nfs4::{plain, Session, ANON_STATEID};
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
        let v4 = match &self.proto {
            Proto::V4(s) => s.readdir_with(&dir.v4(), V4_ATTRS).await?,
            Proto::V40(c) => plain::readdir_with(&**c, &dir.v4(), V4_ATTRS).await?,
            Proto::V3(_) => vec![],
        };
        match &self.proto {
            Proto::V4(_) | Proto::V40(_) => Ok(v4
                .into_iter()
                .map(|e| Entry {
                    name: e.name,
                    attr: Attr::from_v4(&e.attrs),
                    fh: None,
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
        let access = match (read, write) {
            (true, true) => p4::OPEN4_SHARE_ACCESS_BOTH,
            (false, true) => p4::OPEN4_SHARE_ACCESS_WRITE,
            _ => p4::OPEN4_SHARE_ACCESS_READ,
        };
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
        let set = SetAttr {
            mode: Some(mode),
            size: truncate.then_some(0),
            ..Default::default()
        };
        match &self.proto {
            Proto::V4(s) => {
                let how =
                    p4::Openflag4::OPEN4_CREATE(p4::Createhow4::UNCHECKED4(set.v4().encode()));
                let o = s
                    .open_with(
                        &s.open_owner(),
                        &dir.v4(),
                        name,
                        how,
                        p4::OPEN4_SHARE_ACCESS_BOTH,
                        p4::OPEN4_SHARE_DENY_NONE,
                    )
                    .await?;
                Ok(OpenFile {
                    fh: Fh(o.fh.0),
                    stateid: Some(o.stateid),
                })
            }
            Proto::V40(c) => {
                let how =
                    p4::Openflag4::OPEN4_CREATE(p4::Createhow4::UNCHECKED4(set.v4().encode()));
                let o = c
                    .open_with(
                        c.open_owner(),
                        &dir.v4(),
                        name,
                        how,
                        p4::OPEN4_SHARE_ACCESS_BOTH,
                        p4::OPEN4_SHARE_DENY_NONE,
                    )
                    .await?;
                Ok(OpenFile {
                    fh: Fh(o.fh.0),
                    stateid: Some(o.stateid),
                })
            }
            Proto::V3(c) => {
                // UNCHECKED: an existing file is used, its mode kept and
                // (size 0) truncated, as open(O_CREAT|O_TRUNC) does.
                let fh = c
                    .create(&dir.v3(), name, p3::Createhow3::UNCHECKED(set.v3()))
                    .await?;
                Ok(OpenFile {
                    fh: Fh(fh.data),
                    stateid: None,
                })
            }
        }
    }

    /// [`Remote::open_write`], with the file's attributes from the same
    /// COMPOUND over NFSv4.1/4.2 (None elsewhere).
    pub async fn open_write_attr(
        &self,
        dir: &Fh,
        name: &str,
        mode: u32,
        truncate: bool,
    ) -> Result<(OpenFile, Option<Attr>)> {
        let Proto::V4(s) = &self.proto else {
            return Ok((self.open_write(dir, name, mode, truncate).await?, None));
        };
        let set = SetAttr {
            mode: Some(mode),
            size: truncate.then_some(0),
            ..Default::default()
        };
        let how = p4::Openflag4::OPEN4_CREATE(p4::Createhow4::UNCHECKED4(set.v4().encode()));
        let (o, a) = s
            .open_with_attrs(
                &s.open_owner(),
                &dir.v4(),
                name,
                how,
                p4::OPEN4_SHARE_ACCESS_BOTH,
                p4::OPEN4_SHARE_DENY_NONE,
                V4_ATTRS,
            )
            .await?;
        Ok((
            OpenFile {
                fh: Fh(o.fh.0),
                stateid: Some(o.stateid),
            },
            Some(Attr::from_v4(&a)),
        ))
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
        match &self.proto {
            Proto::V4(s) => {
                let how = match stable {
                    Stable::Unstable => p4::StableHow4::UNSTABLE4,
                    Stable::FileSync => p4::StableHow4::FILE_SYNC4,
                };
                let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
                let r = s.write(&sid, &f.fh.v4(), off, data, how).await?;
                Ok(Written {
                    count: r.count,
                    unstable: r.committed == p4::StableHow4::UNSTABLE4,
                    verf: r.writeverf,
                })
            }
            Proto::V3(c) => {
                let how = match stable {
                    Stable::Unstable => p3::StableHow::UNSTABLE,
                    Stable::FileSync => p3::StableHow::FILE_SYNC,
                };
                let r = c.write(&f.fh.v3(), off, data, how).await?;
                Ok(Written {
                    count: r.count,
                    unstable: r.committed == p3::StableHow::UNSTABLE,
                    verf: r.verf,
                })
            }
            Proto::V40(c) => {
                let how = match stable {
                    Stable::Unstable => p4::StableHow4::UNSTABLE4,
                    Stable::FileSync => p4::StableHow4::FILE_SYNC4,
                };
                let sid = f.stateid.clone().unwrap_or(ANON_STATEID);
                let r = plain::write(&**c, &sid, &f.fh.v4(), off, data, how).await?;
                Ok(Written {
                    count: r.count,
                    unstable: r.committed == p4::StableHow4::UNSTABLE4,
                    verf: r.writeverf,
                })
            }
        }
    }

    /// COMMIT of the whole file; the verifier to compare with the writes'.
    pub async fn commit(&self, fh: &Fh) -> Result<[u8; 8]> {
        Ok(match &self.proto {
            Proto::V4(s) => s.commit(&fh.v4(), 0, 0).await?,
            Proto::V3(c) => c.commit(&fh.v3(), 0, 0).await?,
            Proto::V40(c) => plain::commit(&**c, &fh.v4(), 0, 0).await?,
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

    pub async fn mkdir(&self, dir: &Fh, name: &str, mode: u32) -> Result<Fh> {
        Ok(match &self.proto {
            Proto::V4(s) => Fh(s.mkdir(&dir.v4(), name, mode).await?.0),
            Proto::V3(c) => Fh(c.mkdir(&dir.v3(), name, mode).await?.data),
            Proto::V40(c) => Fh(plain::mkdir(&**c, &dir.v4(), name, mode).await?.0),
        })
    }

    /// Removes a non-directory.
    pub async fn remove(&self, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.remove(&dir.v4(), name).await?;
            }
            Proto::V3(c) => c.remove(&dir.v3(), name).await?,
            Proto::V40(c) => {
                plain::remove(&**c, &dir.v4(), name).await?;
            }
        }
        Ok(())
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, dir: &Fh, name: &str) -> Result<()> {
        match &self.proto {
            Proto::V4(s) => {
                s.remove(&dir.v4(), name).await?;
            }
            Proto::V3(c) => c.rmdir(&dir.v3(), name).await?,
            Proto::V40(c) => {
                plain::remove(&**c, &dir.v4(), name).await?;
            }
        }
        Ok(())
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
        use p4::*;
        const FS: &[u32] = &[
            FATTR4_FILES_AVAIL,
            FATTR4_FILES_FREE,
            FATTR4_FILES_TOTAL,
            FATTR4_SPACE_AVAIL,
            FATTR4_SPACE_FREE,
            FATTR4_SPACE_TOTAL,
        ];
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
            Proto::V3(c) => {
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
            Proto::V4(s) => {
                let access = if exclusive {
                    p4::OPEN4_SHARE_ACCESS_BOTH
                } else {
                    p4::OPEN4_SHARE_ACCESS_READ
                };
                let (dir, name) = dir_and_name;
                // An open owner of its own: the session's would share one
                // open among this client's locks on the file, and
                // [`Remote::unlock`]'s CLOSE would release them all.
                let oo = s.new_owner("lock-open");
                let o = s
                    .open_with(
                        &oo,
                        &dir.v4(),
                        name,
                        p4::Openflag4::Default(p4::Opentype4::OPEN4_NOCREATE),
                        access,
                        p4::OPEN4_SHARE_DENY_NONE,
                    )
                    .await?;
                let (open, ofh) = (o.stateid, o.fh);
                let owner = s.new_owner("lock");
                // NFSv4 length: all ones means to the end.
                let len = if range.len == 0 { u64::MAX } else { range.len };
                // A denied LOCK leaves no lock state: each try introduces the
                // owner again with the open stateid.
                let locker = s.new_lock_owner(&open, &owner);
                let mut pause = std::time::Duration::from_millis(50);
                loop {
                    let t = match (exclusive, wait) {
                        (true, true) => p4::NfsLockType4::WRITEW_LT,
                        (true, false) => p4::NfsLockType4::WRITE_LT,
                        (false, true) => p4::NfsLockType4::READW_LT,
                        (false, false) => p4::NfsLockType4::READ_LT,
                    };
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
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
            }
            Proto::V40(c) => {
                let access = if exclusive {
                    p4::OPEN4_SHARE_ACCESS_BOTH
                } else {
                    p4::OPEN4_SHARE_ACCESS_READ
                };
                let (dir, name) = dir_and_name;
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
                        p4::Openflag4::Default(p4::Opentype4::OPEN4_NOCREATE),
                        access,
                        p4::OPEN4_SHARE_DENY_NONE,
                    )
                    .await?;
                let len = if range.len == 0 { u64::MAX } else { range.len };
                let t = match (exclusive, wait) {
                    (true, true) => p4::NfsLockType4::WRITEW_LT,
                    (true, false) => p4::NfsLockType4::WRITE_LT,
                    (false, true) => p4::NfsLockType4::READW_LT,
                    (false, false) => p4::NfsLockType4::READ_LT,
                };
                let mut pause = std::time::Duration::from_millis(50);
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
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
            }
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
