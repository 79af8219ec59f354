//! The data mover under `cp` and `cat`: one file's bytes from a reader
//! (local file or NFS) to a writer, pipelined.
//!
//! A file is copied in chunks of the smaller of the two sides' transfer
//! sizes (the server's maxread/maxwrite, capped by the session's request
//! and reply sizes; NFSv3's rtmax/wtmax). Up to `depth` chunks are read ahead in order and up to
//! `depth` written in any order, so several READs and WRITEs are on the
//! wire at once (on the session's slots over NFSv4); a local destination
//! is written in order from one thread. NFS writes are
//! UNSTABLE; what they wrote is remembered ([`Unstable`]) until a COMMIT
//! with the same write verifier says it is on stable storage, every
//! [`COMMIT_EVERY`] bytes and at the end. A verifier that changed (the
//! server restarted and lost what it had not committed) has the data
//! written under the old one sent again, as a kernel client resends its
//! dirty pages: read again from the source when the writer has one
//! ([`Writer::rereading`]), so only offsets and lengths are kept and a
//! chunk's buffer is freed as soon as its WRITE is answered (holding up
//! to [`COMMIT_EVERY`] of data cost a large copy its memory, and fresh
//! pages for every chunk); else the data itself is kept. At the end, over
//! NFSv4 one COMPOUND sets mode and times and closes the file; over NFSv3 a
//! SETATTR sets them.

use super::conn::nfs_err;
use super::progress::Progress;
use super::url::NfsUrl;
use bytes::Bytes;
use client::nfs4::{Session, ANON_STATEID};
use client::remote::{Fh, OpenFile, Remote, SetAttr, SetTime, Stable, Time};
use futures::{StreamExt, TryStreamExt};
use proto::nfs4::*;
use std::collections::BTreeMap;
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

/// Files this large are read over [`BULK_NCONNECT`] connections when
/// the URL does not say `nconnect=`: a single TCP connection carries
/// about 3 GB/s over loopback on the development host whatever the
/// depth (1 GiB `tarn cat`: 0.36-0.44 s with one, 0.30-0.39 s with
/// four). As rclone's `--multi-thread-streams` (4 above 256 MiB); small
/// files keep the one connection the tool made.
pub const BULK_BYTES: u64 = 64 << 20;
pub const BULK_NCONNECT: u8 = 4;

/// Connections of their own for reading a file of `size` bytes from `u`'s
/// server, in the version `r` settled on (see [`BULK_BYTES`]); None: read
/// through `r` (the file is small, the URL chose `nconnect=`, NFSv4.0's
/// client has one connection, or connecting failed). Close it after use.
pub async fn bulk_remote(r: &Remote, u: &NfsUrl, size: u64) -> Option<Remote> {
    let t = u.transport;
    if size < BULK_BYTES || t.nconnect_set || t.nconnect >= BULK_NCONNECT || r.v40().is_some() {
        return None;
    }
    let mut bu = u.clone();
    bu.transport.nconnect = BULK_NCONNECT;
    bu.vers = Some(match r.v4() {
        Some(s) => super::url::Vers::V4(s.minorversion()),
        None => super::url::Vers::V3,
    });
    match super::conn::connect(&bu).await {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::info!(server = %u.authority(), error = %e, "reading over one connection: more could not be made");
            None
        }
    }
}

/// UNSTABLE bytes written before a COMMIT is sent (the data is held in
/// memory until then).
pub const COMMIT_EVERY: u64 = 64 << 20;

/// What an UNSTABLE write wrote, kept until a COMMIT covers it: the
/// data, or only its length when the source can be read again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    Data(Bytes),
    Len(u32),
}

impl Held {
    fn len(&self) -> u64 {
        match self {
            Held::Data(d) => d.len() as u64,
            Held::Len(n) => *n as u64,
        }
    }
}

/// Data written UNSTABLE and not yet known to be on stable storage.
#[derive(Default)]
pub struct Unstable {
    /// The write verifier the data below was answered with.
    verf: Option<Verifier4>,
    /// Verifiers of server instances that are gone: data written under
    /// them is lost.
    stale: Vec<Verifier4>,
    ranges: BTreeMap<u64, Held>,
    bytes: u64,
    committing: bool,
    /// The verifier of a server-side COPY's unstable result: its data
    /// cannot be sent again, so a change of verifier fails the copy.
    copied: Option<Verifier4>,
    /// Kerberos renewal warnings already acted on.
    warnings_seen: u64,
}

impl Unstable {
    /// Records `data` written at `off`, answered with `v`. Returns what
    /// must be written again: `data` itself if `v` is of a server that is
    /// gone, everything held so far if `v` is a new server's.
    fn wrote(&mut self, off: u64, data: Held, v: Verifier4) -> Vec<(u64, Held)> {
        if self.stale.contains(&v) {
            return vec![(off, data)];
        }
        let mut again = vec![];
        match self.verf {
            Some(cur) if cur != v => {
                self.stale.push(cur);
                again = std::mem::take(&mut self.ranges).into_iter().collect();
                self.bytes = 0;
                self.verf = Some(v);
            }
            Some(_) => {}
            None => self.verf = Some(v),
        }
        self.bytes += data.len();
        if let Some(old) = self.ranges.insert(off, data) {
            self.bytes -= old.len();
        }
        again
    }

    /// A COMMIT sent when `sent` (offsets) were held under `verf` was
    /// answered `v`: returns what must be written again.
    fn committed(
        &mut self,
        sent: &[u64],
        verf: Option<Verifier4>,
        v: Verifier4,
    ) -> Vec<(u64, Held)> {
        if verf == Some(v) {
            for o in sent {
                if let Some(d) = self.ranges.remove(o) {
                    self.bytes -= d.len();
                }
            }
            return vec![];
        }
        match self.verf {
            Some(cur) if cur != v => {
                self.stale.push(cur);
                self.verf = Some(v);
                self.bytes = 0;
                std::mem::take(&mut self.ranges).into_iter().collect()
            }
            _ => vec![],
        }
    }
}

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
#[derive(Clone)]
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
        verfs: Mutex<Unstable>,
        /// Where data lost in a server restart is read again; without
        /// one, written data is kept until committed.
        source: Option<Box<Reader>>,
        /// Kerberos renewal warnings ([`Remote::credential_trouble`]): a
        /// new one has what is held committed at once, while the ageing
        /// context still works.
        trouble: Option<tokio::sync::watch::Receiver<u64>>,
    },
}

impl Writer {
    /// A writer into `file` on `r`.
    pub fn nfs(r: Arc<Remote>, file: OpenFile) -> Writer {
        let trouble = r.credential_trouble();
        Writer::Nfs {
            r,
            file,
            verfs: Mutex::default(),
            source: None,
            trouble,
        }
    }

    /// Data to write again after a server restart is read again from
    /// `src` (which the copy reads from), not kept in memory until its
    /// COMMIT. A source changed in the meantime is copied as it is then,
    /// as when it changes under any copy.
    pub fn rereading(mut self, src: Reader) -> Writer {
        if let Writer::Nfs { source, .. } = &mut self {
            *source = Some(Box::new(src));
        }
        self
    }
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
            Writer::Nfs { .. } => {
                self.write_nfs(off, data).await?;
                self.commit(false).await
            }
        }
    }

    /// WRITEs `data` at `off` UNSTABLE, and again whatever a new write
    /// verifier says the server lost.
    async fn write_nfs(&self, off: u64, data: Bytes) -> client::remote::Result<()> {
        self.write_again(vec![(off, Held::Data(data))]).await
    }

    /// WRITEs each of `todo` (data, or a range read again from the source).
    async fn write_again(&self, mut todo: Vec<(u64, Held)>) -> client::remote::Result<()> {
        let Writer::Nfs {
            r,
            file,
            verfs,
            source,
            ..
        } = self
        else {
            return Ok(());
        };
        while let Some((off, held)) = todo.pop() {
            let data = match (held, source) {
                (Held::Data(d), _) => d,
                (Held::Len(n), Some(src)) => src.read(off, n).await?,
                (Held::Len(_), None) => unreachable!("only a writer with a source keeps lengths"),
            };
            let mut at = 0usize;
            while at < data.len() {
                let w = r
                    .write(file, off + at as u64, data.slice(at..), Stable::Unstable)
                    .await?;
                if w.count == 0 {
                    return Err(protocol("WRITE wrote nothing"));
                }
                let piece = if source.is_some() {
                    Held::Len(w.count)
                } else {
                    Held::Data(data.slice(at..at + w.count as usize))
                };
                if w.unstable {
                    let again = verfs.lock().unwrap().wrote(off + at as u64, piece, w.verf);
                    note_rewrite(&again);
                    todo.extend(again);
                }
                at += w.count as usize;
            }
        }
        Ok(())
    }

    /// COMMITs what is held (`all`, or once [`COMMIT_EVERY`] bytes are) and
    /// writes again what a changed verifier says was lost, until a COMMIT
    /// confirms the verifier of everything held (`all`).
    pub async fn commit(&self, all: bool) -> client::remote::Result<()> {
        let Writer::Nfs {
            r,
            file,
            verfs,
            trouble,
            ..
        } = self
        else {
            return Ok(());
        };
        let warned = trouble.as_ref().map_or(0, |t| *t.borrow());
        for _ in 0..10 {
            let (sent, verf) = {
                let mut u = verfs.lock().unwrap();
                // A warning not yet acted on; one that comes while a
                // COMMIT is under way waits for the next call here.
                let alarm = warned > u.warnings_seen && !u.committing;
                if alarm {
                    u.warnings_seen = warned;
                }
                let urgent = alarm && u.bytes > 0;
                let due = if all {
                    !u.ranges.is_empty() || u.copied.is_some()
                } else {
                    (u.bytes >= COMMIT_EVERY && !u.committing) || urgent
                };
                if urgent && !all {
                    tracing::warn!(
                        "the Kerberos credential could not be renewed: committing {} bytes now, while it still works",
                        u.bytes
                    );
                }
                if !due {
                    return Ok(());
                }
                u.committing = true;
                (u.ranges.keys().copied().collect::<Vec<_>>(), u.verf)
            };
            let v = r.commit(&file.fh).await;
            let again = {
                let mut u = verfs.lock().unwrap();
                u.committing = false;
                let v = v?;
                if u.copied.is_some_and(|c| c != v) {
                    return Err(protocol(
                        "the server restarted before the server-side copy was committed; copy again",
                    ));
                }
                u.copied = None;
                u.committed(&sent, verf, v)
            };
            note_rewrite(&again);
            if !again.is_empty() {
                Box::pin(self.write_again(again)).await?;
            }
            if !all {
                return Ok(());
            }
        }
        Err(protocol("the server keeps restarting: data not committed"))
    }
}

fn protocol(why: &str) -> client::remote::Error {
    client::remote::Error::V4(client::nfs4::Error::Protocol(why.into()))
}

/// Says that data is written again because the write verifier changed.
fn note_rewrite(again: &[(u64, Held)]) {
    if !again.is_empty() {
        let n: u64 = again.iter().map(|(_, d)| d.len()).sum();
        tracing::warn!("the server restarted: writing again {n} bytes it may have lost");
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

/// Reads ahead in order, writes in any order, `depth` of each in flight;
/// into a local file, in order from one thread ([`write_local_in_order`]).
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
    let chunks = futures::stream::iter(offsets)
        .map(|off| async move {
            let len = (size - off).min(chunk as u64) as u32;
            r.read(off, len)
                .await
                .map(|d| (off, d))
                .map_err(|e| nfs_err(src, e))
        })
        .buffered(depth);
    if let Writer::Local(f) = w {
        return write_local_in_order(f.clone(), chunks, depth, dst, progress).await;
    }
    chunks
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

/// Writes `chunks` (in file order) into `f` from one blocking thread,
/// up to `depth` queued: parallel pwrites into one file contend on its
/// inode lock (a 1 GiB download spent 12% of its CPU spinning on ext4's
/// i_rwsem with 4 writers), and in order the file only ever grows at its
/// end. The reads keep going while a write is in progress.
async fn write_local_in_order(
    f: Arc<std::fs::File>,
    mut chunks: impl futures::Stream<Item = Result<(u64, Bytes), String>> + Unpin,
    depth: usize,
    dst: &dyn Display,
    progress: &Progress,
) -> Result<u64, String> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, Bytes)>(depth.max(1));
    let writer = tokio::task::spawn_blocking(move || {
        while let Some((off, d)) = rx.blocking_recv() {
            f.write_all_at(&d, off)?;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut total = 0u64;
    let mut failed = None;
    while let Some(c) = chunks.next().await {
        match c {
            Ok((off, d)) => {
                let n = d.len() as u64;
                // A send fails only when the writer stopped on an error,
                // which is reported below.
                if tx.send((off, d)).await.is_err() {
                    break;
                }
                total += n;
                progress.add_bytes(n);
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let wrote = writer.await.expect("local write task");
    if let Some(e) = failed {
        return Err(e);
    }
    wrote.map_err(|e| format!("{dst}: local write: {e}"))?;
    Ok(total)
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
            verfs.lock().unwrap().copied = Some(r.wr_writeverf);
        }
        at += r.wr_count;
        progress.add_bytes(r.wr_count);
    }
    Ok(true)
}

/// COMMIT until the writes' verifier holds (see [`Writer::commit`]), then
/// mode and mtime and CLOSE in one COMPOUND.
/// After a failed transfer, or a COMPOUND that stopped early, a CLOSE
/// alone, so no open state is left behind.
pub async fn finish(
    w: &Writer,
    ok: bool,
    mode: u32,
    mtime: &Time,
    dst: &dyn Display,
) -> Result<(), String> {
    let Writer::Nfs { r, file, .. } = w else {
        return Ok(());
    };
    let (Some(s), Some(stateid)) = (r.v4(), &file.stateid) else {
        // NFSv3, and NFSv4.0 followed by its CLOSE (a no-op over NFSv3).
        let done = finish_v3(w, r, file, ok, mode, mtime, dst).await;
        let closed = r.close(file).await.map_err(|e| nfs_err(dst, e));
        return done.and(closed);
    };
    let fh = &NfsFh4(file.fh.0.clone());
    let mtime = &t4(mtime);
    if !ok {
        s.close(fh, stateid).await.map_err(|e| nfs_err(dst, e))?;
        return Ok(());
    }
    if let Err(e) = w.commit(true).await {
        let _ = s.close(fh, stateid).await;
        return Err(nfs_err(dst, e));
    }
    let ops = vec![
        NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() }),
        super::small::keep_mode_and_times(stateid.clone(), mode, mtime),
        NfsArgop4::OP_CLOSE(Close4args {
            seqid: 0,
            open_stateid: stateid.clone(),
        }),
    ];
    if let Err(e) = s.call(ops).await {
        let _ = s.close(fh, stateid).await;
        return Err(nfs_err(dst, e));
    }
    Ok(())
}

/// NFSv3: COMMIT what is held (writing again what a restart lost), then
/// mode and times.
async fn finish_v3(
    w: &Writer,
    r: &Remote,
    file: &OpenFile,
    ok: bool,
    mode: u32,
    mtime: &Time,
    dst: &dyn Display,
) -> Result<(), String> {
    if !ok {
        return Ok(());
    }
    w.commit(true).await.map_err(|e| nfs_err(dst, e))?;
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

    fn b(n: u8) -> Held {
        Held::Data(Bytes::from(vec![n; 4]))
    }

    #[test]
    fn a_new_write_verifier_has_the_data_held_written_again() {
        let mut u = Unstable::default();
        assert!(u.wrote(0, b(1), [1; 8]).is_empty());
        assert!(u.wrote(4, b(2), [1; 8]).is_empty());
        // The server restarted: what it held under [1] is gone.
        let again = u.wrote(8, b(3), [2; 8]);
        assert_eq!(again, vec![(0, b(1)), (4, b(2))]);
        assert_eq!(u.bytes, 4);
        // A late answer from the old server: that write is lost too.
        assert_eq!(u.wrote(12, b(4), [1; 8]), vec![(12, b(4))]);
        // A COMMIT under the verifier of what was sent releases it.
        assert!(u.committed(&[8], Some([2; 8]), [2; 8]).is_empty());
        assert!(u.ranges.is_empty() && u.bytes == 0);
        u.wrote(0, b(1), [2; 8]);
        // A COMMIT answered by yet another server: all of it again.
        assert_eq!(u.committed(&[0], Some([2; 8]), [3; 8]), vec![(0, b(1))]);
        assert_eq!(u.verf, Some([3; 8]));
    }

    #[test]
    fn a_writer_that_reads_again_keeps_only_lengths() {
        let mut u = Unstable::default();
        assert!(u.wrote(0, Held::Len(1 << 20), [1; 8]).is_empty());
        assert!(u.wrote(1 << 20, Held::Len(4096), [1; 8]).is_empty());
        assert_eq!(u.bytes, (1 << 20) + 4096);
        // A restart: the ranges, by offset and length, are written again.
        let again = u.wrote(2 << 20, Held::Len(10), [2; 8]);
        assert_eq!(
            again,
            vec![(0, Held::Len(1 << 20)), (1 << 20, Held::Len(4096))]
        );
        assert!(u.committed(&[2 << 20], Some([2; 8]), [2; 8]).is_empty());
        assert_eq!(u.bytes, 0);
    }

    #[test]
    fn io_sizes_fit_the_channel_and_are_whole_pages() {
        assert_eq!(io_size(Some(1 << 20), (1 << 20) + (64 << 10)), 1 << 20);
        assert_eq!(io_size(Some(1 << 20), 256 << 10), (256 << 10) - 4096);
        assert_eq!(io_size(Some(8 << 20), 16 << 20), CHUNK);
        assert_eq!(io_size(Some(1000), 1 << 20), 4096);
        assert_eq!(io_size(None, 1 << 20), (1 << 20) - 4096);
    }
}
