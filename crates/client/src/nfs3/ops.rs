//! One method per NFSv3 procedure (RFC 1813 §3.3), and path lookup.
//!
//! NFS3ERR_JUKEBOX (the server is fetching the file, or is busy) is not
//! an answer: the call is sent again after a pause, as a hard mount would.

use super::error::{Error, Nfs3Error, Result};
use super::Nfs3;
use bytes::Bytes;
use proto::nfs3::*;
use std::time::Duration;
use xdr::{Pack, Unpack};

/// The OK arm of a result, or the status as an error naming the procedure.
macro_rules! ok {
    ($res:expr, $ty:ident, $name:literal) => {
        match $res {
            $ty::NFS3_OK(ok) => ok,
            $ty::Default(status, ..) => {
                return Err(Nfs3Error {
                    proc_: $name,
                    status,
                }
                .into())
            }
        }
    };
}

/// How long JUKEBOX is retried before it is the answer.
const JUKEBOX_FOR: Duration = Duration::from_secs(60);

/// One directory entry, with attributes and handle when READDIRPLUS gave them.
#[derive(Clone, Debug)]
pub struct DirEntry3 {
    pub name: String,
    pub fileid: u64,
    pub cookie: u64,
    pub attrs: Option<Fattr3>,
    pub fh: Option<NfsFh3>,
}

impl DirEntry3 {
    /// An entry as READDIR gives it: no attributes, no handle.
    fn named(name: &[u8], fileid: u64, cookie: u64) -> DirEntry3 {
        DirEntry3 {
            name: String::from_utf8_lossy(name).into_owned(),
            fileid,
            cookie,
            attrs: None,
            fh: None,
        }
    }
}

/// What a WRITE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub count: u32,
    pub committed: StableHow,
    pub verf: Writeverf3,
}

fn dirop(dir: &NfsFh3, name: &str) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name.as_bytes()),
    }
}

/// Attributes left as they are.
pub fn sattr_none() -> Sattr3 {
    Sattr3 {
        mode: None,
        uid: None,
        gid: None,
        size: None,
        atime: SetAtime::Default(TimeHow::DONT_CHANGE),
        mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
    }
}

/// Only the mode set.
pub fn sattr_mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..sattr_none()
    }
}

/// A handle from a MNT or CREATE that did not return one is a server fault.
fn need_fh(fh: Option<NfsFh3>, what: &str) -> Result<NfsFh3> {
    fh.ok_or_else(|| Error::Protocol(format!("{what}: no file handle returned")))
}

/// The NFSv3 procedure's name (RFC 1813 §3.3), for per-operation counts.
pub fn proc_name(p: u32) -> &'static str {
    const NAMES: [&str; 22] = [
        "NULL",
        "GETATTR",
        "SETATTR",
        "LOOKUP",
        "ACCESS",
        "READLINK",
        "READ",
        "WRITE",
        "CREATE",
        "MKDIR",
        "SYMLINK",
        "MKNOD",
        "REMOVE",
        "RMDIR",
        "RENAME",
        "LINK",
        "READDIR",
        "READDIRPLUS",
        "FSSTAT",
        "FSINFO",
        "PATHCONF",
        "COMMIT",
    ];
    NAMES.get(p as usize).copied().unwrap_or("OTHER")
}

impl Nfs3 {
    /// Calls `proc_`, resending while the server answers JUKEBOX.
    pub async fn call<A: Pack, R: Unpack>(&self, proc_: u32, args: &A) -> Result<R> {
        // RPCSEC_GSS wraps the encoded arguments; AUTH_SYS encodes them
        // straight into each call's record (a WRITE's data copied once).
        let enc = self.gss.as_ref().map(|_| xdr::to_bytes(args));
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let t = std::time::Instant::now();
            let sent = match (&self.gss, &enc) {
                (Some(g), Some(enc)) => g.call(proc_, enc).await,
                _ => match self.ch.call_packed(NFS_PROGRAM, NFS_V3, proc_, args).await {
                    Ok(rec) => rpc::client::results(rec),
                    Err(e) => Err(e),
                },
            };
            self.ch
                .count_op(proc_name(proc_), t.elapsed(), sent.is_err());
            let d = sent?;
            // Every result starts with its status.
            let jukebox = d.clone().u32().ok() == Some(Nfsstat3::NFS3ERR_JUKEBOX as u32);
            if !jukebox || started.elapsed() > JUKEBOX_FOR {
                let mut d = d;
                return Ok(R::unpack(&mut d)?);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// The handle of `path` (mounting its export on first use), one
    /// LOOKUP per component below the export or below the deepest
    /// directory looked up in the last [`DIR_CACHE_TTL`](super::DIR_CACHE_TTL).
    pub async fn lookup_path(&self, path: &str) -> Result<NfsFh3> {
        Ok(self.walk(path).await?.0)
    }

    /// The handle and attributes of `path`: those LOOKUP returned with
    /// the last component, else a GETATTR.
    pub async fn lookup_path_attr(&self, path: &str) -> Result<(NfsFh3, Fattr3)> {
        match self.walk(path).await? {
            (fh, Some(a)) => Ok((fh, a)),
            (fh, None) => {
                let a = self.getattr(&fh).await?;
                Ok((fh, a))
            }
        }
    }

    /// A path walk; a handle gone stale (the directory was removed or
    /// replaced meanwhile) forgets the remembered directories, once.
    async fn walk(&self, path: &str) -> Result<(NfsFh3, Option<Fattr3>)> {
        match self.walk_once(path).await {
            Err(e) if e.status() == Some(Nfsstat3::NFS3ERR_STALE) => {
                self.forget_dirs();
                self.walk_once(path).await
            }
            r => r,
        }
    }

    async fn walk_once(&self, path: &str) -> Result<(NfsFh3, Option<Fattr3>)> {
        let (root, rest) = self.root_for(path).await?;
        let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let below = comps.len() - rest.len();
        let prefix = |k: usize| format!("/{}", comps[..k].join("/"));
        // The deepest remembered directory on the way.
        let (mut fh, mut at) = (root, below);
        for k in (below + 1..=comps.len()).rev() {
            if let Some(h) = self.remembered_dir(&prefix(k)) {
                (fh, at) = (h, k);
                break;
            }
        }
        let mut attrs = None;
        for k in at..comps.len() {
            (fh, attrs) = self.lookup(&fh, comps[k]).await?;
            // Looked up through, or said to be one: a directory.
            let dir =
                k + 1 < comps.len() || attrs.as_ref().is_some_and(|a| a.r#type == Ftype3::NF3DIR);
            if dir {
                self.remember_dir(prefix(k + 1), &fh);
            }
        }
        if at == comps.len() && at > below {
            // Straight from memory: the attributes are asked for fresh.
            attrs = None;
        }
        Ok((fh, attrs))
    }

    pub async fn null(&self) -> Result<()> {
        let rec = self
            .ch
            .call_raw(NFS_PROGRAM, NFS_V3, NFSPROC3_NULL, &[])
            .await?;
        rpc::client::results(rec)?;
        Ok(())
    }

    pub async fn getattr(&self, fh: &NfsFh3) -> Result<Fattr3> {
        let r: Getattr3res = self
            .call(NFSPROC3_GETATTR, &Getattr3args { object: fh.clone() })
            .await?;
        Ok(ok!(r, Getattr3res, "GETATTR").obj_attributes)
    }

    /// SETATTR, unguarded; the attributes after, when the server sent them.
    pub async fn setattr(&self, fh: &NfsFh3, set: Sattr3) -> Result<Option<Fattr3>> {
        let a = Setattr3args {
            object: fh.clone(),
            new_attributes: set,
            guard: None,
        };
        let r: Setattr3res = self.call(NFSPROC3_SETATTR, &a).await?;
        Ok(ok!(r, Setattr3res, "SETATTR").obj_wcc.after)
    }

    /// LOOKUP: the handle and, when the server sent them, the attributes.
    pub async fn lookup(&self, dir: &NfsFh3, name: &str) -> Result<(NfsFh3, Option<Fattr3>)> {
        let r: Lookup3res = self
            .call(
                NFSPROC3_LOOKUP,
                &Lookup3args {
                    what: dirop(dir, name),
                },
            )
            .await?;
        let ok = ok!(r, Lookup3res, "LOOKUP");
        Ok((ok.object, ok.obj_attributes))
    }

    /// ACCESS: which of the `ACCESS3_*` bits asked for are allowed.
    pub async fn access(&self, fh: &NfsFh3, bits: u32) -> Result<u32> {
        let r: Access3res = self
            .call(
                NFSPROC3_ACCESS,
                &Access3args {
                    object: fh.clone(),
                    access: bits,
                },
            )
            .await?;
        Ok(ok!(r, Access3res, "ACCESS").access)
    }

    pub async fn readlink(&self, fh: &NfsFh3) -> Result<Bytes> {
        let r: Readlink3res = self
            .call(
                NFSPROC3_READLINK,
                &Readlink3args {
                    symlink: fh.clone(),
                },
            )
            .await?;
        Ok(ok!(r, Readlink3res, "READLINK").data)
    }

    pub async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> Result<Read3resok> {
        let r: Read3res = self
            .call(
                NFSPROC3_READ,
                &Read3args {
                    file: fh.clone(),
                    offset,
                    count,
                },
            )
            .await?;
        Ok(ok!(r, Read3res, "READ"))
    }

    pub async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<Written> {
        let a = Write3args {
            file: fh.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data,
        };
        let r: Write3res = self.call(NFSPROC3_WRITE, &a).await?;
        let ok = ok!(r, Write3res, "WRITE");
        Ok(Written {
            count: ok.count,
            committed: ok.committed,
            verf: ok.verf,
        })
    }

    /// CREATE (UNCHECKED, GUARDED or EXCLUSIVE as `how` says); the new
    /// file's handle (looked up when the server did not return it).
    pub async fn create(&self, dir: &NfsFh3, name: &str, how: Createhow3) -> Result<NfsFh3> {
        Ok(self.create_attrs(dir, name, how).await?.0)
    }

    /// CREATE, with the new file's attributes (None after EXCLUSIVE, whose
    /// times are set after it, or when the server sent none) and the
    /// directory's after it, when the server sent them.
    pub async fn create_attrs(
        &self,
        dir: &NfsFh3,
        name: &str,
        how: Createhow3,
    ) -> Result<(NfsFh3, Option<Fattr3>, Option<Fattr3>)> {
        let exclusive = matches!(how, Createhow3::EXCLUSIVE(_));
        let a = Create3args {
            r#where: dirop(dir, name),
            how,
        };
        let r: Create3res = self.call(NFSPROC3_CREATE, &a).await?;
        let ok = ok!(r, Create3res, "CREATE");
        let (attrs, dir_after) = (ok.obj_attributes, ok.dir_wcc.after);
        let fh = match ok.obj {
            Some(fh) => fh,
            None => self.lookup(dir, name).await?.0,
        };
        if exclusive {
            // The verifier sits in the times until they are set (RFC 1813 §3.3.8).
            let now = SetMtime::Default(TimeHow::SET_TO_SERVER_TIME);
            let set = Sattr3 {
                atime: SetAtime::Default(TimeHow::SET_TO_SERVER_TIME),
                mtime: now,
                ..sattr_none()
            };
            self.setattr(&fh, set).await?;
            return Ok((fh, None, dir_after));
        }
        Ok((fh, attrs, dir_after))
    }

    pub async fn mkdir(&self, dir: &NfsFh3, name: &str, mode: u32) -> Result<NfsFh3> {
        let a = Mkdir3args {
            r#where: dirop(dir, name),
            attributes: sattr_mode(mode),
        };
        let r: Mkdir3res = self.call(NFSPROC3_MKDIR, &a).await?;
        match ok!(r, Mkdir3res, "MKDIR").obj {
            Some(fh) => Ok(fh),
            None => Ok(self.lookup(dir, name).await?.0),
        }
    }

    /// MKNOD: a device, fifo or socket `name` in `dir`.
    pub async fn mknod(&self, dir: &NfsFh3, name: &str, what: Mknoddata3) -> Result<NfsFh3> {
        let a = Mknod3args {
            r#where: dirop(dir, name),
            what,
        };
        let r: Mknod3res = self.call(NFSPROC3_MKNOD, &a).await?;
        match ok!(r, Mknod3res, "MKNOD").obj {
            Some(fh) => Ok(fh),
            None => need_fh(Some(self.lookup(dir, name).await?.0), "MKNOD"),
        }
    }

    pub async fn symlink(&self, dir: &NfsFh3, name: &str, target: &str) -> Result<NfsFh3> {
        let a = Symlink3args {
            r#where: dirop(dir, name),
            symlink: Symlinkdata3 {
                symlink_attributes: sattr_none(),
                symlink_data: Bytes::copy_from_slice(target.as_bytes()),
            },
        };
        let r: Symlink3res = self.call(NFSPROC3_SYMLINK, &a).await?;
        match ok!(r, Symlink3res, "SYMLINK").obj {
            Some(fh) => Ok(fh),
            None => need_fh(Some(self.lookup(dir, name).await?.0), "SYMLINK"),
        }
    }

    /// REMOVE: the directory's attributes after it, when the server sent
    /// them.
    pub async fn remove(&self, dir: &NfsFh3, name: &str) -> Result<Option<Fattr3>> {
        let a = Remove3args {
            object: dirop(dir, name),
        };
        let r: Remove3res = self.call(NFSPROC3_REMOVE, &a).await?;
        Ok(ok!(r, Remove3res, "REMOVE").dir_wcc.after)
    }

    /// RMDIR: the parent's attributes after it, when the server sent them.
    pub async fn rmdir(&self, dir: &NfsFh3, name: &str) -> Result<Option<Fattr3>> {
        self.forget_dirs();
        let a = Rmdir3args {
            object: dirop(dir, name),
        };
        let r: Rmdir3res = self.call(NFSPROC3_RMDIR, &a).await?;
        Ok(ok!(r, Rmdir3res, "RMDIR").dir_wcc.after)
    }

    pub async fn rename(
        &self,
        from_dir: &NfsFh3,
        from: &str,
        to_dir: &NfsFh3,
        to: &str,
    ) -> Result<()> {
        let a = Rename3args {
            from: dirop(from_dir, from),
            to: dirop(to_dir, to),
        };
        self.forget_dirs();
        let r: Rename3res = self.call(NFSPROC3_RENAME, &a).await?;
        ok!(r, Rename3res, "RENAME");
        Ok(())
    }

    /// LINK: a new name `name` in `dir` for the file `fh`.
    pub async fn link(&self, fh: &NfsFh3, dir: &NfsFh3, name: &str) -> Result<()> {
        let a = Link3args {
            file: fh.clone(),
            link: dirop(dir, name),
        };
        let r: Link3res = self.call(NFSPROC3_LINK, &a).await?;
        ok!(r, Link3res, "LINK");
        Ok(())
    }

    /// Every entry of a directory but "." and "..", with attributes and
    /// handles: READDIRPLUS, or READDIR when the server does not do it.
    /// A listing whose cookies the server stopped honouring (BAD_COOKIE:
    /// the directory changed) is started again, once.
    pub async fn readdir(&self, dir: &NfsFh3) -> Result<Vec<DirEntry3>> {
        match self.readdir_pages(dir, true).await {
            Err(e) if e.status() == Some(Nfsstat3::NFS3ERR_NOTSUPP) => {
                self.readdir_pages(dir, false).await
            }
            Err(e) if e.status() == Some(Nfsstat3::NFS3ERR_BAD_COOKIE) => {
                self.readdir_pages(dir, true).await
            }
            r => r,
        }
    }

    async fn readdir_pages(&self, dir: &NfsFh3, plus: bool) -> Result<Vec<DirEntry3>> {
        let mut out = vec![];
        let (mut cookie, mut cookieverf) = (0u64, [0u8; 8]);
        loop {
            let (entries, eof) = if plus {
                let a = Readdirplus3args {
                    dir: dir.clone(),
                    cookie,
                    cookieverf,
                    dircount: 16 << 10,
                    maxcount: 128 << 10,
                };
                let r: Readdirplus3res = self.call(NFSPROC3_READDIRPLUS, &a).await?;
                let ok = ok!(r, Readdirplus3res, "READDIRPLUS");
                cookieverf = ok.cookieverf;
                let v = ok.reply.entries.into_iter().map(|e| DirEntry3 {
                    attrs: e.name_attributes,
                    fh: e.name_handle,
                    ..DirEntry3::named(&e.name, e.fileid, e.cookie)
                });
                (v.collect::<Vec<_>>(), ok.reply.eof)
            } else {
                let a = Readdir3args {
                    dir: dir.clone(),
                    cookie,
                    cookieverf,
                    count: 64 << 10,
                };
                let r: Readdir3res = self.call(NFSPROC3_READDIR, &a).await?;
                let ok = ok!(r, Readdir3res, "READDIR");
                cookieverf = ok.cookieverf;
                let v = ok.reply.entries.into_iter();
                let v = v.map(|e| DirEntry3::named(&e.name, e.fileid, e.cookie));
                (v.collect(), ok.reply.eof)
            };
            let progressed = !entries.is_empty();
            for e in entries {
                cookie = e.cookie;
                if e.name != "." && e.name != ".." {
                    out.push(e);
                }
            }
            if eof {
                return Ok(out);
            }
            if !progressed {
                return Err(Error::Protocol("READDIR: no entries and no eof".into()));
            }
        }
    }

    pub async fn fsstat(&self, fh: &NfsFh3) -> Result<Fsstat3resok> {
        let r: Fsstat3res = self
            .call(NFSPROC3_FSSTAT, &Fsstat3args { fsroot: fh.clone() })
            .await?;
        Ok(ok!(r, Fsstat3res, "FSSTAT"))
    }

    pub async fn fsinfo(&self, fh: &NfsFh3) -> Result<Fsinfo3resok> {
        let r: Fsinfo3res = self
            .call(NFSPROC3_FSINFO, &Fsinfo3args { fsroot: fh.clone() })
            .await?;
        Ok(ok!(r, Fsinfo3res, "FSINFO"))
    }

    /// COMMIT; `count` 0 means to the end of the file. Returns the write
    /// verifier, to compare with those of the UNSTABLE writes.
    pub async fn commit(&self, fh: &NfsFh3, offset: u64, count: u32) -> Result<Writeverf3> {
        let r: Commit3res = self
            .call(
                NFSPROC3_COMMIT,
                &Commit3args {
                    file: fh.clone(),
                    offset,
                    count,
                },
            )
            .await?;
        Ok(ok!(r, Commit3res, "COMMIT").verf)
    }
}
