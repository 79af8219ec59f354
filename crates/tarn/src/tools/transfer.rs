//! The data mover under `cp` and `cat`: one file's bytes from a reader
//! (local file or NFS) to a writer, pipelined.
//!
//! A file is copied in chunks of the smaller of the two sides' transfer
//! sizes (the server's maxread/maxwrite, capped by the session's request
//! and reply sizes; NFSv3's rtmax/wtmax). Up to `depth` chunks are read ahead in order and up to
//! `depth` written in any order, so several READs and WRITEs are on the
//! wire at once (on the session's slots over NFSv4). NFS writes are
//! UNSTABLE and the file is COMMITted once at its end (over NFSv4 in the
//! COMPOUND that also sets its mode and times and closes it; over NFSv3
//! COMMIT, then SETATTR); a COMMIT whose verifier differs from a write's
//! (the server restarted in between) fails the copy.

use super::conn::nfs_err;
use super::progress::Progress;
use super::url::NfsUrl;
use bytes::Bytes;
use client::nfs4::{Session, ANON_STATEID};
use client::remote::{Fh, OpenFile, Remote, SetAttr, SetTime, Stable, Time};
use futures::{StreamExt, TryStreamExt};
use proto::nfs4::*;
use std::fmt::Display;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

/// Local chunk size, and the cap on an NFS one.
pub const CHUNK: u32 = 1 << 20;
/// Chunks in flight per direction (over NFSv4 further capped by the session's slots).
///
/// 4: on loopback on 2 cores (debug server, 100 MB file) 1 to 4 in flight
/// wrote at 560-610 MB/s, 8 at 470 and 32 at 160, reads fell from 1000 to
/// 400 MB/s between 1 and 32; a network's latency wants more than 1.
pub const DEPTH: usize = 4;

/// A transfer size: the server's limit, within what the session's
/// requests and replies hold (less room for the COMPOUND around the data),
/// a whole number of 4 KiB pages.
pub fn io_size(server_max: Option<u64>, channel_max: u32) -> u32 {
    let room = channel_max.saturating_sub(1024);
    let n = server_max.unwrap_or(CHUNK as u64).min(room as u64) as u32;
    (n & !4095).clamp(4096, CHUNK)
}

/// What the connection allows (`cp --inflight` may ask for fewer or more).
pub fn depth(r: &Remote) -> usize {
    r.max_inflight()
}

/// A time as NFSv4 writes it.
pub fn t4(t: &Time) -> Nfstime4 {
    Nfstime4 {
        seconds: t.seconds,
        nseconds: t.nseconds,
    }
}

/// Where a file's data comes from.
pub enum Reader {
    Local(Arc<std::fs::File>),
    Nfs(Arc<Remote>, Fh),
}

/// Where it goes. NFS writes remember their verifiers for the COMMIT.
pub enum Writer {
    Local(Arc<std::fs::File>),
    Nfs {
        r: Arc<Remote>,
        file: OpenFile,
        verfs: Mutex<Vec<[u8; 8]>>,
    },
}

type RResult<T> = Result<T, client::remote::Error>;

fn local_err(what: &str, e: std::io::Error) -> client::remote::Error {
    client::remote::Error::V4(client::nfs4::Error::Protocol(format!("{what}: {e}")))
}

impl Reader {
    /// `len` bytes at `off`, fewer only at the end of the file.
    pub async fn read(&self, off: u64, len: u32) -> RResult<Bytes> {
        match self {
            Reader::Local(f) => {
                let f = f.clone();
                tokio::task::spawn_blocking(move || {
                    let mut buf = vec![0u8; len as usize];
                    let mut got = 0;
                    while got < buf.len() {
                        match f.read_at(&mut buf[got..], off + got as u64) {
                            Ok(0) => break,
                            Ok(n) => got += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    buf.truncate(got);
                    Ok(Bytes::from(buf))
                })
                .await
                .expect("read task")
                .map_err(|e| local_err("local read", e))
            }
            Reader::Nfs(r, fh) => {
                // NFSv4: the anonymous stateid, no OPEN/CLOSE round trips per file.
                let (data, eof) = r.read(fh, off, len).await?;
                if data.len() == len as usize || eof {
                    return Ok(data);
                }
                // A short read before the end: collect the rest.
                let mut buf = data.to_vec();
                while buf.len() < len as usize {
                    let more = len - buf.len() as u32;
                    let (data, eof) = r.read(fh, off + buf.len() as u64, more).await?;
                    buf.extend_from_slice(&data);
                    if eof || data.is_empty() {
                        break;
                    }
                }
                Ok(Bytes::from(buf))
            }
        }
    }
}

impl Writer {
    pub async fn write(&self, off: u64, data: Bytes) -> RResult<()> {
        match self {
            Writer::Local(f) => {
                let f = f.clone();
                tokio::task::spawn_blocking(move || f.write_all_at(&data, off))
                    .await
                    .expect("write task")
                    .map_err(|e| local_err("local write", e))
            }
            Writer::Nfs { r, file, verfs } => {
                let mut at = 0usize;
                while at < data.len() {
                    let w = r
                        .write(file, off + at as u64, data.slice(at..), Stable::Unstable)
                        .await?;
                    if w.count == 0 {
                        return Err(client::remote::Error::V4(client::nfs4::Error::Protocol(
                            "WRITE wrote nothing".into(),
                        )));
                    }
                    at += w.count as usize;
                    if w.unstable {
                        let mut v = verfs.lock().unwrap();
                        if !v.contains(&w.verf) {
                            v.push(w.verf);
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

/// The file at `u` created or truncated, open for writing, and the
/// largest WRITE to send: over NFSv4 one COMPOUND ([`nfs_create_v4`]),
/// over NFSv3 LOOKUPs and CREATE (UNCHECKED, size 0, mode 0600 until the
/// copy is done).
pub async fn nfs_create(r: &Remote, u: &NfsUrl) -> RResult<(OpenFile, u32)> {
    if let Some(s) = r.v4() {
        let (fh, sid, wsize) = nfs_create_v4(s, u).await?;
        return Ok((
            OpenFile {
                fh: Fh(fh.0),
                stateid: Some(sid),
            },
            wsize.min(r.wsize()),
        ));
    }
    let Some((parent, name)) = u.split_last() else {
        return Err(client::remote::v4_status(
            NfsOpnum4::OP_OPEN,
            Nfsstat4::NFS4ERR_ISDIR,
        ));
    };
    let dir = r.lookup_path(&parent.path).await?;
    let f = r.open_write(&dir, &name, 0o600, true).await?;
    Ok((f, r.wsize()))
}

/// OPEN (create, truncate to 0) for writing, its handle and the largest
/// WRITE the server takes, in one COMPOUND from the root (or from the
/// parent's handle when the path is too deep for the session's operations).
/// Returns the handle, the open stateid and the write size.
pub async fn nfs_create_v4(
    s: &Session,
    u: &NfsUrl,
) -> client::nfs4::Result<(NfsFh4, Stateid4, u32)> {
    let isdir = client::nfs4::Error::Nfs(client::nfs4::Nfs4Error {
        op: NfsOpnum4::OP_OPEN,
        status: Nfsstat4::NFS4ERR_ISDIR,
    });
    let (parent, name) = u.split_last().ok_or(isdir)?;
    let dirs = parent.components();
    // SEQUENCE, PUTROOTFH, the LOOKUPs, OPEN, GETFH, GETATTR.
    let mut ops = if dirs.len() + 5 <= s.fore_channel().ca_maxoperations as usize {
        let mut ops = vec![NfsArgop4::OP_PUTROOTFH];
        ops.extend(dirs.iter().map(|c| {
            NfsArgop4::OP_LOOKUP(Lookup4args {
                objname: Bytes::copy_from_slice(c.as_bytes()),
            })
        }));
        ops
    } else {
        let object = s.lookup_path(&parent.path).await?;
        vec![NfsArgop4::OP_PUTFH(Putfh4args { object })]
    };
    ops.push(super::small::open_truncating(s, &name));
    ops.push(NfsArgop4::OP_GETFH);
    ops.push(NfsArgop4::OP_GETATTR(Getattr4args {
        attr_request: client::nfs4::attr::bitmap(&[FATTR4_MAXWRITE]),
    }));
    let (mut sid, mut fh, mut maxwrite) = (None, None, None);
    for r in s.call(ops).await? {
        match r {
            NfsResop4::OP_OPEN(Open4res::NFS4_OK(ok)) => sid = Some(ok.stateid),
            NfsResop4::OP_GETFH(Getfh4res::NFS4_OK(ok)) => fh = Some(ok.object),
            NfsResop4::OP_GETATTR(Getattr4res::NFS4_OK(ok)) => {
                maxwrite = client::nfs4::attr::decode(&ok.obj_attributes)?.maxwrite
            }
            _ => {}
        }
    }
    match (fh, sid) {
        (Some(fh), Some(sid)) => Ok((
            fh,
            sid,
            io_size(maxwrite, s.fore_channel().ca_maxrequestsize),
        )),
        _ => Err(client::nfs4::Error::Protocol(
            "OPEN: results missing".into(),
        )),
    }
}

/// How one file is moved: its size, the chunk size, chunks in flight.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub size: u64,
    pub chunk: u32,
    pub depth: usize,
}

/// Reads ahead in order, writes in any order, `depth` of each in flight.
pub async fn pump(
    r: &Reader,
    w: &Writer,
    plan: Plan,
    src: &dyn Display,
    dst: &dyn Display,
    progress: &Progress,
) -> Result<u64, String> {
    let Plan { size, chunk, depth } = plan;
    let offsets = (0..size).step_by(chunk as usize);
    futures::stream::iter(offsets)
        .map(|off| async move {
            let len = (size - off).min(chunk as u64) as u32;
            r.read(off, len)
                .await
                .map(|d| (off, d))
                .map_err(|e| nfs_err(src, e))
        })
        .buffered(depth)
        .map_ok(|(off, d)| async move {
            let n = d.len() as u64;
            w.write(off, d).await.map_err(|e| nfs_err(dst, e))?;
            progress.add_bytes(n);
            Ok(n)
        })
        .try_buffer_unordered(depth)
        .try_fold(0u64, |a, n| async move { Ok(a + n) })
        .await
}

/// Copies `size` bytes of `src` into the writer's file with NFSv4.2
/// COPY, the data never leaving the server. Ok(false) when the server
/// does not do it (NOTSUPP, XDEV) before anything was copied: the caller
/// moves the bytes itself.
pub async fn server_copy(
    s: &Session,
    src: &Fh,
    w: &Writer,
    size: u64,
    progress: &Progress,
) -> client::nfs4::Result<bool> {
    let Writer::Nfs { file, verfs, .. } = w else {
        return Ok(false);
    };
    let Some(stateid) = &file.stateid else {
        return Ok(false);
    };
    let (src, fh) = (NfsFh4(src.0.clone()), NfsFh4(file.fh.0.clone()));
    let mut at = 0;
    while at < size {
        let r = match s
            .copy_range(&src, &ANON_STATEID, &fh, stateid, at, at, size - at)
            .await
        {
            Ok(r) => r,
            Err(e)
                if at == 0
                    && matches!(
                        e.status(),
                        Some(Nfsstat4::NFS4ERR_NOTSUPP | Nfsstat4::NFS4ERR_XDEV)
                    ) =>
            {
                return Ok(false)
            }
            Err(e) => return Err(e),
        };
        if r.wr_count == 0 {
            break; // the source got shorter
        }
        if r.wr_committed == StableHow4::UNSTABLE4 {
            let mut v = verfs.lock().unwrap();
            if !v.contains(&r.wr_writeverf) {
                v.push(r.wr_writeverf);
            }
        }
        at += r.wr_count;
        progress.add_bytes(r.wr_count);
    }
    Ok(true)
}

/// COMMIT (when writes were UNSTABLE), mode and mtime, and CLOSE in one
/// COMPOUND; a COMMIT verifier other than the writes' fails the copy.
/// After a failed transfer, or a COMPOUND that stopped early, a CLOSE
/// alone, so no open state is left behind.
pub async fn finish(
    w: &Writer,
    ok: bool,
    mode: u32,
    mtime: &Time,
    dst: &dyn Display,
) -> Result<(), String> {
    let Writer::Nfs { r, file, verfs } = w else {
        return Ok(());
    };
    let (Some(s), Some(stateid)) = (r.v4(), &file.stateid) else {
        // NFSv3, and NFSv4.0 followed by its CLOSE (a no-op over NFSv3).
        let done = finish_v3(r, file, verfs, ok, mode, mtime, dst).await;
        let closed = r.close(file).await.map_err(|e| nfs_err(dst, e));
        return done.and(closed);
    };
    let fh = &NfsFh4(file.fh.0.clone());
    let mtime = &t4(mtime);
    if !ok {
        s.close(fh, stateid).await.map_err(|e| nfs_err(dst, e))?;
        return Ok(());
    }
    let verfs = verfs.lock().unwrap().clone();
    let mut ops = vec![NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() })];
    if !verfs.is_empty() {
        ops.push(NfsArgop4::OP_COMMIT(Commit4args {
            offset: 0,
            count: 0,
        }));
    }
    ops.push(super::small::keep_mode_and_times(
        stateid.clone(),
        mode,
        mtime,
    ));
    ops.push(NfsArgop4::OP_CLOSE(Close4args {
        seqid: 0,
        open_stateid: stateid.clone(),
    }));
    let res = match s.call(ops).await {
        Ok(r) => r,
        Err(e) => {
            let _ = s.close(fh, stateid).await;
            return Err(nfs_err(dst, e));
        }
    };
    let committed = res.iter().find_map(|r| match r {
        NfsResop4::OP_COMMIT(Commit4res::NFS4_OK(ok)) => Some(ok.writeverf),
        _ => None,
    });
    match committed {
        Some(v) if verfs.iter().any(|w| *w != v) => Err(restarted(dst)),
        _ => Ok(()),
    }
}

fn restarted(dst: &dyn Display) -> String {
    format!("{dst}: the server restarted before the data was committed; copy again")
}

/// NFSv3: COMMIT (when writes were UNSTABLE), then mode and times.
async fn finish_v3(
    r: &Remote,
    file: &OpenFile,
    verfs: &Mutex<Vec<[u8; 8]>>,
    ok: bool,
    mode: u32,
    mtime: &Time,
    dst: &dyn Display,
) -> Result<(), String> {
    if !ok {
        return Ok(());
    }
    let verfs = verfs.lock().unwrap().clone();
    if !verfs.is_empty() {
        let v = r.commit(&file.fh).await.map_err(|e| nfs_err(dst, e))?;
        if verfs.iter().any(|w| *w != v) {
            return Err(restarted(dst));
        }
    }
    let set = SetAttr {
        mode: Some(mode),
        atime: Some(SetTime::Client(*mtime)),
        mtime: Some(SetTime::Client(*mtime)),
        ..Default::default()
    };
    r.setattr(&file.fh, &set).await.map_err(|e| nfs_err(dst, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_sizes_fit_the_channel_and_are_whole_pages() {
        assert_eq!(io_size(Some(1 << 20), (1 << 20) + (64 << 10)), 1 << 20);
        assert_eq!(io_size(Some(1 << 20), 256 << 10), (256 << 10) - 4096);
        assert_eq!(io_size(Some(8 << 20), 16 << 20), CHUNK);
        assert_eq!(io_size(Some(1000), 1 << 20), 4096);
        assert_eq!(io_size(None, 1 << 20), (1 << 20) - 4096);
    }
}
