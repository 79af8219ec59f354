//! `cp` and `cat`: what to copy where (files, trees, local or NFS on
//! either side); the bytes are moved by `transfer`.
//!
//! Modes and modification times are kept; directories get theirs after
//! their contents are in place (writing entries changes a directory's mtime).

use super::conn::{is_dir, nfs_err, parse, resolve_parent, Client};
use super::progress::Progress;
use super::small;
use super::transfer::{
    depth, finish, io_size, nfs_create, pump, server_copy, Plan, Reader, Writer, CHUNK, DEPTH,
};
use super::url::NfsUrl;
use client::nfs4::{Attrs, Session, SetAttrs, ANON_STATEID};
use futures::{StreamExt, TryStreamExt};
use proto::nfs4::*;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

#[derive(clap::Args)]
pub struct CpArgs {
    /// Copy directories and their contents.
    #[arg(short = 'r', short_alias = 'R')]
    pub recursive: bool,
    /// No summary line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// READs and WRITEs in flight per file, each way (at most the session's slots).
    #[arg(long, value_name = "N", default_value_t = DEPTH)]
    pub inflight: usize,
    /// A local path or an nfs:// URL.
    pub src: String,
    /// A local path or an nfs:// URL; an existing directory receives SRC's name.
    pub dst: String,
}

/// One side of a copy.
#[derive(Clone)]
enum Side {
    Local(PathBuf),
    Nfs(Arc<Session>, NfsUrl),
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Side::Local(p) => write!(f, "{}", p.display()),
            Side::Nfs(_, u) => write!(f, "{u}"),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    File,
    Dir,
    Other,
}

/// What a copy needs to know of a source or an existing target.
struct Meta {
    kind: Kind,
    size: u64,
    mode: u32,
    mtime: Nfstime4,
    /// Largest READ the server takes for this file (NFS sources).
    rsize: u32,
}

const META_BITS: &[u32] = &[
    FATTR4_TYPE,
    FATTR4_SIZE,
    FATTR4_MAXREAD,
    FATTR4_MODE,
    FATTR4_TIME_MODIFY,
];

fn to_time(t: &Nfstime4) -> SystemTime {
    // nseconds always counts forward, also from a negative second.
    let secs = Duration::from_secs(t.seconds.unsigned_abs());
    let base = if t.seconds >= 0 {
        SystemTime::UNIX_EPOCH + secs
    } else {
        SystemTime::UNIX_EPOCH - secs
    };
    base + Duration::from_nanos(t.nseconds as u64)
}

impl Side {
    fn parse(arg: &str) -> Result<SideArg, String> {
        if arg.starts_with("nfs://") {
            Ok(SideArg::Nfs(parse(arg)?))
        } else if arg.contains("://") {
            Err(format!(
                "{arg}: only nfs:// URLs and local paths are understood"
            ))
        } else {
            Ok(SideArg::Local(PathBuf::from(arg)))
        }
    }

    fn join(&self, name: &str) -> Side {
        match self {
            Side::Local(p) => Side::Local(p.join(name)),
            Side::Nfs(s, u) => Side::Nfs(s.clone(), u.join(name)),
        }
    }

    fn name(&self) -> Option<String> {
        match self {
            Side::Local(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
            Side::Nfs(_, u) => u.split_last().map(|(_, n)| n),
        }
    }

    /// None if nothing is there. A local symbolic link is followed only
    /// when named on the command line (`follow`), as cp(1) does.
    async fn meta(&self, follow: bool) -> Result<Option<Meta>, String> {
        let local = if follow {
            std::fs::metadata
        } else {
            std::fs::symlink_metadata
        };
        match self {
            Side::Local(p) => match local(p) {
                Ok(m) => Ok(Some(local_meta(&m))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("{}: {e}", p.display())),
            },
            Side::Nfs(s, u) => match s.lookup_path_attrs(&u.path, META_BITS).await {
                Ok((_, a)) => Ok(Some(nfs_meta(s, &a))),
                Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_NOENT) => Ok(None),
                Err(e) => Err(nfs_err(u, e)),
            },
        }
    }

    /// Entries of a directory with what a copy needs of each, by name
    /// (NFS: in the READDIR replies, no GETATTR per entry).
    async fn list_meta(&self) -> Result<Vec<(String, Meta)>, String> {
        let mut out = match self {
            Side::Local(p) => {
                let err = |e: std::io::Error| format!("{}: {e}", p.display());
                let mut v = vec![];
                for e in std::fs::read_dir(p).map_err(err)? {
                    let e = e.map_err(err)?;
                    let m = e.metadata().map_err(err)?;
                    v.push((e.file_name().to_string_lossy().into_owned(), local_meta(&m)));
                }
                v
            }
            Side::Nfs(s, u) => {
                let fh = s.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?;
                s.readdir_with(&fh, META_BITS)
                    .await
                    .map_err(|e| nfs_err(u, e))?
                    .into_iter()
                    .map(|e| (e.name, nfs_meta(s, &e.attrs)))
                    .collect()
            }
        };
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Makes the directory (owner-only until its mode is set at the end);
    /// one already there is used as it is.
    async fn mkdir(&self) -> Result<(), String> {
        match self {
            Side::Local(p) => match std::fs::create_dir(p) {
                Ok(()) => std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("{}: {e}", p.display())),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && p.is_dir() => Ok(()),
                Err(e) => Err(format!("{}: {e}", p.display())),
            },
            Side::Nfs(s, u) => {
                let (dir, name) = resolve_parent(s, u).await?;
                match s.mkdir(&dir, &name, 0o700).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.status() == Some(Nfsstat4::NFS4ERR_EXIST) => {
                        match self.meta(false).await? {
                            Some(m) if m.kind == Kind::Dir => Ok(()),
                            _ => Err(nfs_err(u, e)),
                        }
                    }
                    Err(e) => Err(nfs_err(u, e)),
                }
            }
        }
    }

    /// Sets mode and modification time (and the access time to the same).
    async fn set_meta(&self, mode: u32, mtime: &Nfstime4) -> Result<(), String> {
        match self {
            Side::Local(p) => {
                let err = |e: std::io::Error| format!("{}: {e}", p.display());
                let t = to_time(mtime);
                let f = std::fs::File::open(p).map_err(err)?;
                f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
                    .map_err(err)?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(err)
            }
            Side::Nfs(s, u) => {
                let fh = s.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?;
                set_nfs_meta(s, &fh, &ANON_STATEID, mode, mtime)
                    .await
                    .map_err(|e| nfs_err(u, e))
            }
        }
    }
}

async fn set_nfs_meta(
    s: &Session,
    fh: &NfsFh4,
    sid: &Stateid4,
    mode: u32,
    mtime: &Nfstime4,
) -> client::nfs4::Result<()> {
    let set = SetAttrs {
        mode: Some(mode),
        atime: Some(Settime4::SET_TO_CLIENT_TIME4(mtime.clone())),
        mtime: Some(Settime4::SET_TO_CLIENT_TIME4(mtime.clone())),
        ..Default::default()
    };
    s.setattr(fh, sid, &set).await.map(|_| ())
}

fn nfs_meta(s: &Session, a: &Attrs) -> Meta {
    Meta {
        kind: match a.ftype {
            Some(NfsFtype4::NF4REG) => Kind::File,
            Some(NfsFtype4::NF4DIR) => Kind::Dir,
            _ => Kind::Other,
        },
        size: a.size.unwrap_or(0),
        mode: a.mode.unwrap_or(0o644) & 0o7777,
        mtime: a.time_modify.clone().unwrap_or(Nfstime4 {
            seconds: 0,
            nseconds: 0,
        }),
        rsize: io_size(a.maxread, s.fore_channel().ca_maxresponsesize),
    }
}

fn local_meta(m: &std::fs::Metadata) -> Meta {
    let ft = m.file_type();
    Meta {
        kind: if ft.is_file() {
            Kind::File
        } else if ft.is_dir() {
            Kind::Dir
        } else {
            Kind::Other
        },
        size: m.len(),
        mode: m.mode() & 0o7777,
        mtime: Nfstime4 {
            seconds: m.mtime(),
            nseconds: m.mtime_nsec() as u32,
        },
        rsize: CHUNK,
    }
}

enum SideArg {
    Local(PathBuf),
    Nfs(NfsUrl),
}

async fn side(c: &mut Client, a: SideArg) -> Result<Side, String> {
    Ok(match a {
        SideArg::Local(p) => Side::Local(p),
        SideArg::Nfs(u) => Side::Nfs(c.session(&u).await?, u),
    })
}

/// One `cp` run: what it was asked for and what it has done.
struct Job {
    /// `--inflight`.
    depth: usize,
    progress: Arc<Progress>,
}

pub async fn cp(c: &mut Client, a: &CpArgs) -> Result<(), String> {
    let (sa, da) = (Side::parse(&a.src)?, Side::parse(&a.dst)?);
    if matches!((&sa, &da), (SideArg::Local(_), SideArg::Local(_))) {
        return Err("cp: one side must be an nfs:// URL (use cp(1) for local copies)".into());
    }
    let src = side(c, sa).await?;
    let mut dst = side(c, da).await?;
    let sm = src.meta(true).await?.ok_or_else(|| not_found(&src))?;
    if sm.kind == Kind::Dir && !a.recursive {
        return Err(format!("{src}: is a directory (use -r to copy it)"));
    }
    if let Some(dm) = dst.meta(true).await? {
        if dm.kind == Kind::Dir {
            let name = src
                .name()
                .ok_or_else(|| format!("{src}: has no name to copy into {dst}"))?;
            dst = dst.join(&name);
        } else if sm.kind == Kind::Dir {
            return Err(format!("{dst}: exists and is not a directory"));
        }
    }
    let job = Job {
        depth: a.inflight.max(1),
        progress: Progress::new((sm.kind == Kind::File).then_some(sm.size)),
    };
    let shower = if a.quiet { None } else { job.progress.show() };
    let r = copy_entry(&src, &dst, &sm, &job).await;
    job.progress.finish(shower);
    r?;
    if !a.quiet {
        println!("{}", job.progress.summary());
    }
    Ok(())
}

fn not_found(s: &Side) -> String {
    match s {
        Side::Local(p) => format!("{}: no such file or directory", p.display()),
        Side::Nfs(_, u) => super::conn::status_err(u, Nfsstat4::NFS4ERR_NOENT),
    }
}

/// Files of one directory copied at once: small files are mostly round
/// trips, and these overlap them.
const FILES_AT_ONCE: usize = 8;

async fn copy_entry(src: &Side, dst: &Side, m: &Meta, job: &Job) -> Result<(), String> {
    match m.kind {
        Kind::File => copy_file(src, dst, m, job).await?,
        Kind::Dir => {
            dst.mkdir().await?;
            let (dirs, files): (Vec<_>, Vec<_>) = src
                .list_meta()
                .await?
                .into_iter()
                .partition(|(_, m)| m.kind == Kind::Dir);
            futures::stream::iter(files)
                .map(|(name, cm)| async move {
                    let (s, d) = (src.join(&name), dst.join(&name));
                    match cm.kind {
                        Kind::File => copy_file(&s, &d, &cm, job).await,
                        _ => {
                            eprintln!("tarn: skipping {s}: not a regular file or directory");
                            Ok(())
                        }
                    }
                })
                .buffer_unordered(FILES_AT_ONCE)
                .try_collect::<()>()
                .await?;
            for (name, cm) in dirs {
                Box::pin(copy_entry(&src.join(&name), &dst.join(&name), &cm, job)).await?;
            }
            dst.set_meta(m.mode, &m.mtime).await?;
        }
        Kind::Other => eprintln!("tarn: skipping {src}: not a regular file or directory"),
    }
    Ok(())
}

/// A small file in one COMPOUND (see `small`); None when it is not
/// small or the fast way declined, else the bytes copied.
async fn copy_small(src: &Side, dst: &Side, m: &Meta) -> Result<Option<u64>, String> {
    if m.size > small::SMALL {
        return Ok(None);
    }
    match (src, dst) {
        (Side::Local(p), Side::Nfs(s, u)) => {
            let data = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let n = data.len() as u64;
            let Some((parent, name)) = u.split_last() else {
                return Ok(None);
            };
            if !small::fits(s, n) {
                return Ok(None);
            }
            let done = small::put(
                s,
                &parent.components(),
                &name,
                data.into(),
                m.mode,
                &m.mtime,
            )
            .await
            .map_err(|e| nfs_err(u, e))?;
            Ok(done.then_some(n))
        }
        (Side::Nfs(s, u), Side::Local(p)) if small::fits(s, m.size) => {
            let Some(data) = small::get(s, &u.components(), m.size)
                .await
                .map_err(|e| nfs_err(u, e))?
            else {
                return Ok(None);
            };
            let err = |e: std::io::Error| format!("{}: {e}", p.display());
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(p)
                .map_err(err)?;
            std::io::Write::write_all(&mut f, &data).map_err(err)?;
            drop(f);
            dst.set_meta(m.mode, &m.mtime).await?;
            Ok(Some(data.len() as u64))
        }
        _ => Ok(None),
    }
}

/// Copies one regular file, counting its bytes and itself in the job's progress.
async fn copy_file(src: &Side, dst: &Side, m: &Meta, job: &Job) -> Result<(), String> {
    if let Some(n) = copy_small(src, dst, m).await? {
        job.progress.add_bytes(n);
        job.progress.add_file();
        return Ok(());
    }
    let want = job.depth;
    let reader = match src {
        Side::Local(p) => Reader::Local(Arc::new(
            std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        Side::Nfs(s, u) => Reader::Nfs(
            s.clone(),
            s.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?,
        ),
    };
    let mut chunk = m.rsize;
    let mut depth_n = match src {
        Side::Nfs(s, _) => depth(s).min(want),
        Side::Local(_) => want,
    };
    let writer = match dst {
        Side::Local(p) => Writer::Local(Arc::new(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        )),
        Side::Nfs(s, u) => {
            let (fh, stateid, wsize) = nfs_create(s, u).await.map_err(|e| nfs_err(u, e))?;
            chunk = chunk.min(wsize);
            depth_n = depth_n.min(depth(s));
            Writer::Nfs {
                s: s.clone(),
                fh,
                stateid,
                verfs: Mutex::default(),
            }
        }
    };
    let plan = Plan {
        size: m.size,
        chunk,
        depth: depth_n,
    };
    let r = match (&reader, dst) {
        // Both on one server (one session) speaking 4.2: let it copy.
        (Reader::Nfs(s, sfh), Side::Nfs(d, _)) if Arc::ptr_eq(s, d) && s.minorversion() >= 2 => {
            match server_copy(s, sfh, &writer, m.size, &job.progress).await {
                Ok(true) => {
                    job.progress.add_server_copy();
                    Ok(m.size)
                }
                Ok(false) => pump(&reader, &writer, plan, src, dst, &job.progress).await,
                Err(e) => Err(nfs_err(&format!("{src} -> {dst}"), e)),
            }
        }
        _ => pump(&reader, &writer, plan, src, dst, &job.progress).await,
    };
    let done = finish(&writer, r.is_ok(), m.mode, &m.mtime, dst).await;
    r?;
    done?;
    if let Side::Local(_) = dst {
        dst.set_meta(m.mode, &m.mtime).await?;
    }
    job.progress.add_file();
    Ok(())
}

/// `cat`: the file's bytes to standard output, read ahead as `cp` does.
pub async fn cat(c: &mut Client, arg: &str) -> Result<(), String> {
    use std::io::Write;
    let url = parse(arg)?;
    let s = c.session(&url).await?;
    let (fh, a) = s
        .lookup_path_attrs(&url.path, META_BITS)
        .await
        .map_err(|e| nfs_err(&url, e))?;
    if is_dir(a.ftype) {
        return Err(super::conn::status_err(&url, Nfsstat4::NFS4ERR_ISDIR));
    }
    let chunk = io_size(a.maxread, s.fore_channel().ca_maxresponsesize);
    let size = a.size.unwrap_or(0);
    let reader = Reader::Nfs(s.clone(), fh);
    let src = Side::Nfs(s.clone(), url.clone());
    let mut out = std::io::stdout().lock();
    let mut chunks = futures::stream::iter((0..size).step_by(chunk as usize))
        .map(|off| {
            let len = (size - off).min(chunk as u64) as u32;
            reader.read(off, len)
        })
        .buffered(depth(&s).min(DEPTH));
    while let Some(d) = chunks.next().await {
        let d = d.map_err(|e| nfs_err(&src, e))?;
        match out.write_all(&d) {
            Ok(()) => {}
            // `| head`: the reader is gone, which is not our failure.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(format!("standard output: {e}")),
        }
    }
    out.flush().or_else(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(format!("standard output: {e}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert_both_sides_of_the_epoch() {
        let t = Nfstime4 {
            seconds: 10,
            nseconds: 5,
        };
        assert_eq!(to_time(&t), SystemTime::UNIX_EPOCH + Duration::new(10, 5));
        let t = Nfstime4 {
            seconds: -10,
            nseconds: 5,
        };
        assert_eq!(
            to_time(&t),
            SystemTime::UNIX_EPOCH - Duration::new(9, 999_999_995)
        );
    }
}
