//! `cp` and `cat`: what to copy where (files, trees, local or NFS on
//! either side); the bytes are moved by `transfer`.
//!
//! Modes and modification times are kept; directories get theirs after
//! their contents are in place (writing entries changes a directory's mtime).
//! Symbolic links are copied as links (their text, not what they point
//! to), between local and NFS either way and between servers; only a
//! local link named on the command line is followed, as cp(1) does.

use super::conn::{nfs_err, parse, resolve_parent, status_err, Client};
use super::progress::Progress;
use super::small;
use super::transfer::{
    bulk_remote, depth, finish, nfs_create, pump, server_copy, t4, Plan, Reader, Writer, CHUNK,
    DEPTH,
};
use super::url::NfsUrl;
use client::remote::{Attr, FileType, Kind as Status, Remote, SetAttr, SetTime, Time};
use futures::{StreamExt, TryStreamExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[derive(clap::Args)]
pub struct CpArgs {
    /// Copy directories and their contents.
    #[arg(short = 'r', short_alias = 'R')]
    pub recursive: bool,
    /// No summary line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// READs and WRITEs in flight per file, each way (over NFSv4 at most the session's slots).
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
    Nfs(Arc<Remote>, NfsUrl),
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
    Link,
    Other,
}

/// What a copy needs to know of a source or an existing target.
struct Meta {
    kind: Kind,
    size: u64,
    mode: u32,
    mtime: Time,
    /// Largest READ the server takes (NFS sources).
    rsize: u32,
}

fn to_time(t: &Time) -> SystemTime {
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
            Side::Nfs(r, u) => match r.lookup_path_attr(&u.path).await {
                Ok((_, a)) => Ok(Some(nfs_meta(r, &a))),
                Err(e) if e.is(Status::NoEnt) => Ok(None),
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
            Side::Nfs(r, u) => {
                let fh = r.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?;
                r.readdir(&fh)
                    .await
                    .map_err(|e| nfs_err(u, e))?
                    .into_iter()
                    .map(|e| (e.name, nfs_meta(r, &e.attr)))
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
            Side::Nfs(r, u) => {
                let (dir, name) = resolve_parent(r, u).await?;
                match r.mkdir(&dir, &name, 0o700).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is(Status::Exist) => match self.meta(false).await? {
                        Some(m) if m.kind == Kind::Dir => Ok(()),
                        _ => Err(nfs_err(u, e)),
                    },
                    Err(e) => Err(nfs_err(u, e)),
                }
            }
        }
    }

    /// Sets mode and modification time (and the access time to the same).
    async fn set_meta(&self, mode: u32, mtime: &Time) -> Result<(), String> {
        match self {
            Side::Local(p) => {
                let err = |e: std::io::Error| format!("{}: {e}", p.display());
                let t = to_time(mtime);
                let f = std::fs::File::open(p).map_err(err)?;
                f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
                    .map_err(err)?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(err)
            }
            Side::Nfs(r, u) => {
                let fh = r.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?;
                let set = SetAttr {
                    mode: Some(mode),
                    atime: Some(SetTime::Client(*mtime)),
                    mtime: Some(SetTime::Client(*mtime)),
                    ..Default::default()
                };
                r.setattr(&fh, &set).await.map_err(|e| nfs_err(u, e))
            }
        }
    }

    /// A symbolic link's text.
    async fn read_link(&self) -> Result<String, String> {
        match self {
            Side::Local(p) => std::fs::read_link(p)
                .map(|t| t.to_string_lossy().into_owned())
                .map_err(|e| format!("{}: {e}", p.display())),
            Side::Nfs(r, u) => {
                let fh = r.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?;
                r.readlink(&fh).await.map_err(|e| nfs_err(u, e))
            }
        }
    }

    /// Makes a symbolic link holding `target`; a link already there is
    /// replaced, anything else there is an error.
    async fn make_link(&self, target: &str) -> Result<(), String> {
        let existing = self.meta(false).await?;
        match existing.as_ref().map(|m| m.kind) {
            None | Some(Kind::Link) => {}
            Some(_) => return Err(format!("{self}: exists and is not a symbolic link")),
        }
        match self {
            Side::Local(p) => {
                let err = |e: std::io::Error| format!("{}: {e}", p.display());
                if existing.is_some() {
                    std::fs::remove_file(p).map_err(err)?;
                }
                std::os::unix::fs::symlink(target, p).map_err(err)
            }
            Side::Nfs(r, u) => {
                let (dir, name) = resolve_parent(r, u).await?;
                if existing.is_some() {
                    r.remove(&dir, &name).await.map_err(|e| nfs_err(u, e))?;
                }
                r.symlink(&dir, &name, target)
                    .await
                    .map(|_| ())
                    .map_err(|e| nfs_err(u, e))
            }
        }
    }
}

fn nfs_meta(r: &Remote, a: &Attr) -> Meta {
    Meta {
        kind: match a.ftype {
            Some(FileType::Regular) => Kind::File,
            Some(FileType::Directory) => Kind::Dir,
            Some(FileType::Symlink) => Kind::Link,
            _ => Kind::Other,
        },
        size: a.size.unwrap_or(0),
        mode: a.mode.unwrap_or(0o644) & 0o7777,
        mtime: a.mtime.unwrap_or_default(),
        rsize: r.rsize(),
    }
}

fn local_meta(m: &std::fs::Metadata) -> Meta {
    let ft = m.file_type();
    Meta {
        kind: if ft.is_file() {
            Kind::File
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_symlink() {
            Kind::Link
        } else {
            Kind::Other
        },
        size: m.len(),
        mode: m.mode() & 0o7777,
        mtime: Time {
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
        SideArg::Nfs(u) => Side::Nfs(c.remote(&u).await?, u),
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
        Side::Nfs(r, u) => status_err(u, r, Status::NoEnt),
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
                        Kind::Link => copy_link(&s, &d).await,
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
        Kind::Link => copy_link(src, dst).await?,
        Kind::Other => eprintln!("tarn: skipping {src}: not a regular file or directory"),
    }
    Ok(())
}

/// A symbolic link copied as a link with the same text (not counted
/// among the files copied: the summary counts files and their bytes).
async fn copy_link(src: &Side, dst: &Side) -> Result<(), String> {
    let target = src.read_link().await?;
    dst.make_link(&target).await
}

/// A small file in one COMPOUND (see `small`); None when it is not
/// small or the fast way declined, else the bytes copied.
async fn copy_small(src: &Side, dst: &Side, m: &Meta) -> Result<Option<u64>, String> {
    if m.size > small::SMALL {
        return Ok(None);
    }
    match (src, dst) {
        (Side::Local(p), Side::Nfs(r, u)) if r.v4().is_some() => {
            let s = r.v4().expect("checked");
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
                &t4(&m.mtime),
            )
            .await
            .map_err(|e| nfs_err(u, e))?;
            Ok(done.then_some(n))
        }
        (Side::Nfs(r, u), Side::Local(p)) if r.v4().is_some_and(|s| small::fits(s, m.size)) => {
            let s = r.v4().expect("checked");
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
        Side::Nfs(r, u) => Reader::Nfs(
            r.clone(),
            r.lookup_path(&u.path).await.map_err(|e| nfs_err(u, e))?,
        ),
    };
    let mut chunk = m.rsize;
    let mut depth_n = match src {
        Side::Nfs(r, _) => depth(r).min(want),
        Side::Local(_) => want,
    };
    let writer = match dst {
        Side::Local(p) => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(p)
                .map_err(|e| format!("{}: {e}", p.display()))?;
            preallocate(&f, m.size);
            Writer::Local(Arc::new(f))
        }
        Side::Nfs(r, u) => {
            let (file, wsize) = nfs_create(r, u).await.map_err(|e| nfs_err(u, e))?;
            chunk = chunk.min(wsize);
            depth_n = depth_n.min(depth(r));
            // Data a server restart loses is read again from the source.
            Writer::nfs(r.clone(), file).rereading(reader.clone())
        }
    };
    let plan = Plan {
        size: m.size,
        chunk,
        depth: depth_n,
    };
    let r = match (&reader, dst) {
        // Both on one server (one session) speaking 4.2: let it copy.
        (Reader::Nfs(r, sfh), Side::Nfs(d, _))
            if Arc::ptr_eq(r, d) && r.v4().is_some_and(|s| s.minorversion() >= 2) =>
        {
            let s = r.v4().expect("checked");
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
    if let (Err(_), Writer::Local(f)) = (&r, &writer) {
        // A copy cut short keeps what it wrote, not the blocks reserved
        // past it (a truncate to its own size gives them back).
        let _ = f.metadata().and_then(|m| f.set_len(m.len()));
    }
    r?;
    done?;
    if let Side::Local(_) = dst {
        dst.set_meta(m.mode, &m.mtime).await?;
    }
    job.progress.add_file();
    Ok(())
}

/// Reserves a local destination's blocks before its data arrives, its
/// size unchanged (FALLOC_FL_KEEP_SIZE): ext4 then skips the per-page
/// delayed-allocation work of each write (1 GiB of 1 MiB writes took a
/// third less CPU on the development host). `f` was just created or
/// truncated.
///
/// Only where the free space shows the file fits: a fallocate that does
/// not fit is not undone (ext4 keeps what it allocated before ENOSPC, the
/// disk left full), and a filesystem that compresses may hold more than
/// its free space says, so a file that seems not to fit is written as
/// before, the writes deciding. A reservation that fails anyway is given
/// back (truncated) and the copy goes on without it.
fn preallocate(f: &std::fs::File, size: u64) {
    use nix::fcntl::{fallocate, FallocateFlags};
    use std::os::fd::AsRawFd;
    let Ok(len) = i64::try_from(size) else {
        return;
    };
    if len == 0 || !f.metadata().is_ok_and(|m| m.is_file()) {
        return;
    }
    let Ok(fs) = nix::sys::statvfs::fstatvfs(f) else {
        return;
    };
    if size > fs.blocks_available().saturating_mul(fs.fragment_size()) {
        return;
    }
    if fallocate(f.as_raw_fd(), FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len).is_err() {
        let _ = f.set_len(0);
    }
}

/// `cat`: the file's bytes to standard output, read ahead as `cp` does.
pub async fn cat(c: &mut Client, arg: &str) -> Result<(), String> {
    let (url, r, fh, a) = c.resolve(arg).await?;
    if a.is_dir() {
        return Err(status_err(&url, &r, Status::IsDir));
    }
    let size = a.size.unwrap_or(0);
    // Over connections of its own when large (see BULK_BYTES). Not `cp`:
    // into a local file the writes are what limits it (a 1 GiB download
    // took as long or longer with four).
    let bulk = bulk_remote(&r, &url, size).await.map(Arc::new);
    let r = bulk.clone().unwrap_or(r);
    let chunk = r.rsize();
    let reader = Reader::Nfs(r.clone(), fh);
    let src = Side::Nfs(r.clone(), url.clone());
    let r = cat_chunks(&reader, &src, &r, size, chunk).await;
    if let Some(b) = bulk {
        b.close_all().await;
    }
    r
}

/// Writes `size` bytes of `reader` to standard output.
async fn cat_chunks(
    reader: &Reader,
    src: &Side,
    r: &Remote,
    size: u64,
    chunk: u32,
) -> Result<(), String> {
    // Not Stdout: its LineWriter looks for newlines in every MiB of data
    // and splits each write at the last one.
    let out = std::io::stdout();
    let mut chunks = futures::stream::iter((0..size).step_by(chunk as usize))
        .map(|off| {
            let len = (size - off).min(chunk as u64) as u32;
            reader.read(off, len)
        })
        .buffered(depth(r).min(DEPTH));
    while let Some(d) = chunks.next().await {
        let d = d.map_err(|e| nfs_err(src, e))?;
        match write_all_fd(&out, &d) {
            Ok(()) => {}
            // `| head`: the reader is gone, which is not our failure.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(format!("standard output: {e}")),
        }
    }
    Ok(())
}

/// write(2) to `fd` until all of `data` is written.
fn write_all_fd(fd: &impl std::os::fd::AsFd, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_destination_keeps_its_size_and_gives_back_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        preallocate(&f, 8 << 20);
        assert_eq!(f.metadata().unwrap().len(), 0, "the size is the data's");
        let reserved = f.metadata().unwrap().blocks() * 512;
        std::os::unix::fs::FileExt::write_all_at(&f, &[7u8; 1 << 20], 0).unwrap();
        // As a copy cut short does.
        f.set_len(f.metadata().unwrap().len()).unwrap();
        let m = f.metadata().unwrap();
        assert_eq!(m.len(), 1 << 20);
        if reserved > 0 {
            // (A filesystem without fallocate reserves nothing.)
            assert!(reserved >= 8 << 20, "{reserved} bytes reserved");
            assert!(
                m.blocks() * 512 < 2 << 20,
                "{} bytes kept",
                m.blocks() * 512
            );
        }
    }

    #[test]
    fn a_file_larger_than_the_free_space_is_not_reserved() {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(d.path().join("f")).unwrap();
        // 15 TiB: under ext4's largest file, over any disk here. Nothing
        // is allocated (ext4 would keep a partial fallocate: a full disk).
        preallocate(&f, 15 << 40);
        assert_eq!(f.metadata().unwrap().blocks(), 0);
        // Nor for what is not a regular file.
        preallocate(
            &std::fs::File::options()
                .write(true)
                .open("/dev/null")
                .unwrap(),
            1 << 20,
        );
    }

    #[test]
    fn times_convert_both_sides_of_the_epoch() {
        let t = Time {
            seconds: 10,
            nseconds: 5,
        };
        assert_eq!(to_time(&t), SystemTime::UNIX_EPOCH + Duration::new(10, 5));
        let t = Time {
            seconds: -10,
            nseconds: 5,
        };
        assert_eq!(
            to_time(&t),
            SystemTime::UNIX_EPOCH - Duration::new(9, 999_999_995)
        );
    }
}
