//! NFSv4.2 server-side copy and friends (RFC 7862 §15.2, §15.5, §15.8,
//! §15.9, §15.13): COPY within this server, CLONE, IO_ADVISE,
//! OFFLOAD_STATUS and OFFLOAD_CANCEL. The source is the saved filehandle,
//! the destination the current one; the source's stateid is checked as
//! READ checks it, the destination's as WRITE does, and the change is
//! queued behind the destination's WRITEs.
//!
//! A synchronous COPY copies at most [`COPY_MAX`] bytes and returns a
//! short count, which clients continue from (Linux hands the short count
//! to copy_file_range(2)'s caller, and cp loops), so one call holds a pool
//! thread and the destination's write queue for a bounded time.
//!
//! Asynchronous COPY: when the client says `ca_synchronous = false` and
//! the range is more than one synchronous call copies
//! ([`CopyConfig::async_min`], 16 MiB), the reply comes at once with a
//! copy stateid in `wr_callback_id` and the copy runs in a background
//! task, [`CopyConfig::chunk`] bytes at a time through the destination's
//! write queue (WRITEs to it interleave), reporting its progress to the
//! state core (`state::copy`) after each chunk. A smaller range is copied
//! at once, as §15.2.3 lets a server do whatever the client asked: one
//! call finishes it, and a callback would only add a round trip. When the
//! bounds on running copies are reached the copy is synchronous too (as
//! knfsd falls back), not refused: NFS4ERR_OFFLOAD_NO_REQS is for
//! requirements the server cannot meet, and a synchronous copy meets them.
//!
//! At the end the destination is flushed (COMMIT's fsync), so CB_OFFLOAD
//! can honestly say FILE_SYNC4; then CB_OFFLOAD goes over the client's
//! back channel (retried while the client answers NFS4ERR_DELAY). The
//! result stays in the state core for a lease whatever became of the
//! callback, so a client that has no back channel or lost the callback
//! learns it from OFFLOAD_STATUS (knfsd found clients waiting forever on a
//! lost CB_OFFLOAD; RFC 7862 §4.8 would let the stateid go once the
//! client answered CB_OFFLOAD, but a poll racing the callback should
//! still be answered). OFFLOAD_CANCEL forgets a copy; a running one stops at
//! its next chunk and sends no CB_OFFLOAD. The client's lease running out
//! or the client going cancels its copies the same way.

use super::callback::offload::{cb_offload, Offload};
use super::callback::Backchannels;
use super::compound::{file_key, Compound, Fh};
pub use super::config::{CopyConfig, COPY_MAX};
use super::effects::Records;
use super::fail::{self, log_fail, reply, Fail};
use super::io::check;
use super::state::deleg::Break;
use super::state::State;
use crate::export::Export;
use crate::pool::Pool;
use bytes::Bytes;
use proto::nfs4::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;
use vfs::{Advice, Cred, Fid, FsError};

/// The saved filehandle as the source of a COPY or CLONE.
fn saved_obj(c: &Compound<'_>) -> Result<(Arc<Export>, Fid), Fail> {
    let saved = c.saved.as_ref().ok_or(Fail::new(
        Nfsstat4::NFS4ERR_NOFILEHANDLE,
        "no saved filehandle (the source)",
    ))?;
    match &saved.fh {
        Fh::Obj { export, fid } => Ok((export.clone(), *fid)),
        Fh::Pseudo(_) => Err(Fail::new(
            Nfsstat4::NFS4ERR_ISDIR,
            "source is a pseudo filesystem directory",
        )),
    }
}

/// Source and destination of a COPY or CLONE, both checked: the export
/// (one for both), the two files, the caller's credential.
struct Pair {
    export: Arc<Export>,
    src: Fid,
    dst: Fid,
    cred: vfs::Cred,
}

fn pair(c: &Compound<'_>, src_sid: &Stateid4, dst_sid: &Stateid4) -> Result<Pair, Fail> {
    let (export, dst, cred) = c.obj_rw(Nfsstat4::NFS4ERR_ISDIR)?;
    let (src_export, src) = saved_obj(c)?;
    if src_export.id != export.id {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_XDEV,
            "source and destination are in different exports",
        ));
    }
    check(c, src_sid, &export, &src, false)?;
    check(c, dst_sid, &export, &dst, true)?;
    Ok(Pair {
        export,
        src,
        dst,
        cred,
    })
}

/// The bytes `count` names from `offset` of a source of `size` bytes: 0
/// means to the end. RFC 7862 §15.2.3 and §15.13.3: a range that starts
/// or ends past the end of the source is NFS4ERR_INVAL.
fn source_range(offset: u64, count: u64, size: u64) -> Result<u64, Fail> {
    if offset > size {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_INVAL,
            "source offset past the end of the source",
        ));
    }
    if count == 0 {
        return Ok(size - offset);
    }
    if offset.checked_add(count).is_none_or(|e| e > size) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_INVAL,
            "source range past the end of the source",
        ));
    }
    Ok(count)
}

/// Whether `len` bytes at `a` and at `b` share a byte.
fn overlap(a: u64, b: u64, len: u64) -> bool {
    len > 0 && a.abs_diff(b) < len
}

/// COPY's and CLONE's arguments alike.
trait Ranges {
    /// The source's and the destination's stateids.
    fn stateids(&self) -> (&Stateid4, &Stateid4);
    /// The source's and the destination's offsets, and the count.
    fn span(&self) -> (u64, u64, u64);
}

impl Ranges for Copy4args {
    fn stateids(&self) -> (&Stateid4, &Stateid4) {
        (&self.ca_src_stateid, &self.ca_dst_stateid)
    }
    fn span(&self) -> (u64, u64, u64) {
        (self.ca_src_offset, self.ca_dst_offset, self.ca_count)
    }
}

impl Ranges for Clone4args {
    fn stateids(&self) -> (&Stateid4, &Stateid4) {
        (&self.cl_src_stateid, &self.cl_dst_stateid)
    }
    fn span(&self) -> (u64, u64, u64) {
        (self.cl_src_offset, self.cl_dst_offset, self.cl_count)
    }
}

/// What COPY and CLONE check alike, in order: the two files and their
/// stateids, delegations on the destination recalled, the destination
/// range within the largest file, the source range within the source, and
/// no overlap within one file (copy_file_range(2) and FICLONERANGE refuse
/// it: bytes would be read after being overwritten). Returns the pair and
/// the source range's length.
async fn checked_ranges(c: &Compound<'_>, a: &impl Ranges) -> Result<(Pair, u64), Fail> {
    let ((src_sid, dst_sid), (src_off, dst_off, count)) = (a.stateids(), a.span());
    let p = pair(c, src_sid, dst_sid)?;
    super::deleg::break_file(c, &p.export, &p.dst, super::deleg::Intent::Change, None).await?;
    if dst_off.checked_add(count).is_none() {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_FBIG,
            "destination range past the largest file",
        ));
    }
    let b = p.export.backend.clone();
    let src = p.src;
    let size = c.n.run(move || b.getattr(&src)).await?.size;
    let len = source_range(src_off, count, size)?;
    if p.src == p.dst && overlap(src_off, dst_off, len) {
        return Err(Fail::new(
            Nfsstat4::NFS4ERR_INVAL,
            "overlapping ranges of one file",
        ));
    }
    Ok((p, len))
}

pub async fn copy(c: &mut Compound<'_>, a: Copy4args) -> Copy4res {
    let r = async {
        // Inter-server copy (the source on another server) is not offered.
        if !a.ca_source_server.is_empty() {
            return Err(Fail::new(
                Nfsstat4::NFS4ERR_NOTSUPP,
                "inter-server COPY is not supported",
            ));
        }
        let (src_off, dst_off) = (a.ca_src_offset, a.ca_dst_offset);
        let (p, len) = checked_ranges(c, &a).await?;
        if !a.ca_synchronous && len > c.n.cfg.copy.async_min {
            if let Some(ok) = start_async(c, &p, src_off, dst_off, len) {
                return Ok(ok);
            }
        }
        let len = len.min(COPY_MAX);
        let b = p.export.backend.clone();
        let (cred, src, dst) = (p.cred, p.src, p.dst);
        // Even an empty copy goes to the backend, which checks both are
        // regular files the caller may read and write.
        let n =
            c.n.pool
                .run_serial((p.export.id, dst), move || {
                    b.copy_range(&cred, &src, src_off, &dst, dst_off, len)
                })
                .await?;
        // UNSTABLE: a COMMIT (Linux sends one in the same COMPOUND) makes
        // the copy durable, checked against this verifier.
        Ok(Copy4resok {
            cr_response: WriteResponse4 {
                wr_callback_id: Vec::new(),
                wr_count: n,
                wr_committed: StableHow4::UNSTABLE4,
                wr_writeverf: c.n.write_verf.get(),
            },
            cr_requirements: CopyRequirements4 {
                cr_consecutive: true,
                cr_synchronous: true,
            },
        })
    }
    .await;
    reply(c.ctx, "OP_COPY", r, Copy4res::NFS4_OK)
}

pub async fn clone(c: &mut Compound<'_>, a: Clone4args) -> Clone4res {
    let r = async {
        let (src_off, dst_off) = (a.cl_src_offset, a.cl_dst_offset);
        let (p, _) = checked_ranges(c, &a).await?;
        let b = p.export.backend.clone();
        let (cred, src, dst) = (p.cred, p.src, p.dst);
        // The count as the client gave it: 0 lets the filesystem clone to
        // the end, including a last partial block.
        let count = a.cl_count;
        c.n.pool
            .run_serial((p.export.id, dst), move || {
                b.clone_range(&cred, &src, src_off, &dst, dst_off, count)
            })
            .await?;
        Ok::<_, Fail>(())
    }
    .await;
    // NOTSUPP is the expected answer on most filesystems (the client
    // stops asking after it): not worth a warning.
    match &r {
        Err(f) if f.status != Nfsstat4::NFS4ERR_NOTSUPP => log_fail(c.ctx, "OP_CLONE", f),
        _ => {}
    }
    Clone4res {
        cl_status: r.map_or_else(|f| f.status, |()| Nfsstat4::NFS4_OK),
    }
}

/// The IO_ADVISE hints that have a posix_fadvise(2) counterpart.
const ADVICE: [(IoAdviseType4, Advice); 6] = [
    (IoAdviseType4::IO_ADVISE4_NORMAL, Advice::Normal),
    (IoAdviseType4::IO_ADVISE4_SEQUENTIAL, Advice::Sequential),
    (IoAdviseType4::IO_ADVISE4_RANDOM, Advice::Random),
    (IoAdviseType4::IO_ADVISE4_WILLNEED, Advice::WillNeed),
    (IoAdviseType4::IO_ADVISE4_DONTNEED, Advice::DontNeed),
    (IoAdviseType4::IO_ADVISE4_NOREUSE, Advice::NoReuse),
];

fn has(bits: &[u32], h: IoAdviseType4) -> bool {
    let n = h as usize;
    bits.get(n / 32).is_some_and(|w| w & (1 << (n % 32)) != 0)
}

/// The hints to pass on: those with a counterpart, less any that
/// contradict another one asked for (an access pattern is one of normal,
/// sequential and random; the pages are either needed or not).
fn wanted(bits: &[u32]) -> Vec<(IoAdviseType4, Advice)> {
    use IoAdviseType4::*;
    let count = |hs: &[IoAdviseType4]| hs.iter().filter(|&&h| has(bits, h)).count();
    let patterns = [IO_ADVISE4_NORMAL, IO_ADVISE4_SEQUENTIAL, IO_ADVISE4_RANDOM];
    let need = [IO_ADVISE4_WILLNEED, IO_ADVISE4_DONTNEED];
    let (clash_pattern, clash_need) = (count(&patterns) > 1, count(&need) > 1);
    ADVICE
        .into_iter()
        .filter(|&(h, _)| has(bits, h))
        .filter(|(h, _)| !(clash_pattern && patterns.contains(h)))
        .filter(|(h, _)| !(clash_need && need.contains(h)))
        .collect()
}

/// IO_ADVISE: each hint with a posix_fadvise(2) counterpart is passed to
/// the backend; the reply names those it took (RFC 7862 §15.5.3: the
/// server says which hints it will act on), so a backend without a cache
/// to advise answers an empty set.
pub async fn io_advise(c: &mut Compound<'_>, a: IoAdvise4args) -> IoAdvise4res {
    let r = async {
        let (export, fid, cred) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        check(c, &a.iaa_stateid, &export, &fid, false)?;
        let hints = wanted(&a.iaa_hints);
        let b = export.backend.clone();
        let (offset, count) = (a.iaa_offset, a.iaa_count);
        let taken =
            c.n.run(move || {
                let mut taken: Bitmap4 = Vec::new();
                for (h, advice) in hints {
                    match b.advise(&cred, &fid, offset, count, advice) {
                        Ok(()) => {
                            let n = h as usize;
                            if taken.len() <= n / 32 {
                                taken.resize(n / 32 + 1, 0);
                            }
                            taken[n / 32] |= 1 << (n % 32);
                        }
                        // Not taken: left out of the answer.
                        Err(FsError::NotSupp | FsError::Inval) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(taken)
            })
            .await?;
        Ok::<_, Fail>(IoAdvise4resok { ior_hints: taken })
    }
    .await;
    reply(c.ctx, "OP_IO_ADVISE", r, IoAdvise4res::NFS4_OK)
}

/// Starts `len` bytes of `p` in the background: the reply, or None when
/// a bound is reached (the caller copies synchronously).
fn start_async(
    c: &Compound<'_>,
    p: &Pair,
    src_off: u64,
    dst_off: u64,
    len: u64,
) -> Option<Copy4resok> {
    let client = c.clientid.filter(|_| c.minor > 0)?;
    let n = c.n;
    let file = file_key(&p.export, &p.dst);
    let sid = match n.state.start_copy(client, file, &n.cfg.copy.limits) {
        Ok(sid) => sid,
        Err(why) => {
            debug!(
                client,
                ?why,
                "asynchronous COPY done synchronously: bound reached"
            );
            return None;
        }
    };
    let counters = n.metrics.as_ref().map(|m| Counters { metrics: m.clone() });
    if let Some(m) = &n.metrics {
        m.server.copies_async_started.fetch_add(1, Relaxed);
    }
    let fh = n.seal(&Fh::Obj {
        export: p.export.clone(),
        fid: p.dst,
    });
    let job = Job {
        state: n.state.clone(),
        pool: n.pool.clone(),
        records: n.records.clone(),
        backchannels: n.backchannels.clone(),
        clock: n.clock.clone(),
        counters,
        export: p.export.clone(),
        cred: p.cred.clone(),
        src: p.src,
        dst: p.dst,
        src_off,
        dst_off,
        len,
        chunk: n.cfg.copy.chunk.max(1),
        client,
        sid: sid.clone(),
        fh,
        verf: n.write_verf.get(),
    };
    tokio::spawn(job.run());
    Some(Copy4resok {
        // Nothing is copied yet, and what will be is reported by
        // CB_OFFLOAD or OFFLOAD_STATUS.
        cr_response: WriteResponse4 {
            wr_callback_id: vec![sid],
            wr_count: 0,
            wr_committed: StableHow4::UNSTABLE4,
            wr_writeverf: n.write_verf.get(),
        },
        cr_requirements: CopyRequirements4 {
            cr_consecutive: true,
            cr_synchronous: false,
        },
    })
}

/// The metrics a background copy counts in.
struct Counters {
    metrics: Arc<metrics::Metrics>,
}

impl Counters {
    fn add(&self, f: impl Fn(&metrics::ServerCounters) -> &AtomicU64, n: u64) {
        f(&self.metrics.server).fetch_add(n, Relaxed);
    }
}

/// How long a background copy waits for a delegation on its destination
/// to be returned before it looks again.
const RECALL_WAIT: Duration = Duration::from_millis(100);

/// One background copy: what it copies and where it reports.
struct Job {
    state: Arc<State>,
    pool: Pool,
    records: Arc<Records>,
    backchannels: Arc<Backchannels>,
    clock: Arc<dyn super::clock::Clock>,
    counters: Option<Counters>,
    export: Arc<Export>,
    cred: Cred,
    src: Fid,
    dst: Fid,
    src_off: u64,
    dst_off: u64,
    len: u64,
    chunk: u64,
    client: u64,
    sid: Stateid4,
    /// The destination's filehandle, which CB_OFFLOAD names.
    fh: Bytes,
    verf: [u8; 8],
}

impl Job {
    async fn run(self) {
        let mut copied = 0u64;
        let mut status = Nfsstat4::NFS4_OK;
        let file = file_key(&self.export, &self.dst);
        let key = (self.export.id, self.dst);
        while copied < self.len {
            if !self.state.copy_progress(&self.sid.other, copied) {
                return self.cancelled(copied);
            }
            // A read delegation granted on the destination since COPY
            // (another client opened it for reading) is recalled before
            // the next step writes, as before a WRITE.
            if self.state.has_delegations()
                && self
                    .state
                    .break_delegations(&file, Some(self.client), false, self.clock.now())
                    == Break::Delay
            {
                self.records.apply().await;
                tokio::time::sleep(RECALL_WAIT).await;
                continue;
            }
            let step = (self.len - copied).min(self.chunk);
            let (b, cred, src, dst) = (
                self.export.backend.clone(),
                self.cred.clone(),
                self.src,
                self.dst,
            );
            let (so, d) = (self.src_off + copied, self.dst_off + copied);
            let r = self
                .pool
                .run_serial(key, move || b.copy_range(&cred, &src, so, &dst, d, step))
                .await;
            match r {
                // The source got shorter since COPY: done with what there was.
                Ok(0) => break,
                Ok(n) => {
                    copied += n;
                    if let Some(m) = &self.counters {
                        m.add(|s| &s.copy_async_bytes, n);
                    }
                    if !self.state.copy_progress(&self.sid.other, copied) {
                        return self.cancelled(copied);
                    }
                }
                Err(e) => {
                    status = fail::status(e);
                    break;
                }
            }
        }
        // Durable before CB_OFFLOAD says FILE_SYNC4.
        if status == Nfsstat4::NFS4_OK && copied > 0 {
            let (b, dst) = (self.export.backend.clone(), self.dst);
            if let Err(e) = self.pool.run_serial(key, move || b.commit(&dst)).await {
                status = fail::status(e);
            }
        }
        if !self
            .state
            .copy_done(&self.sid.other, copied, status, self.clock.now())
        {
            return self.cancelled(copied);
        }
        if let Some(m) = &self.counters {
            m.add(|s| &s.copies_async_completed, 1);
        }
        self.notify(copied, status).await;
    }

    fn cancelled(&self, copied: u64) {
        debug!(client = self.client, copied, "asynchronous COPY cancelled");
        if let Some(m) = &self.counters {
            m.add(|s| &s.copies_async_cancelled, 1);
        }
    }

    /// CB_OFFLOAD with the result.
    async fn notify(&self, copied: u64, status: Nfsstat4) {
        let o = Offload {
            client: self.client,
            sid: self.sid.clone(),
            fh: self.fh.clone(),
            copied,
            status,
            verf: self.verf,
        };
        cb_offload(&self.backchannels, o).await;
    }
}

/// OFFLOAD_STATUS and OFFLOAD_CANCEL name a copy of the session's client
/// (any other stateid is NFS4ERR_BAD_STATEID); the current filehandle is
/// required but not matched, as knfsd does.
fn copy_of(c: &Compound<'_>, sid: &Stateid4) -> Result<(u64, Stateid4), Fail> {
    c.cur()?;
    let client = c.clientid()?;
    Ok((client, c.stateid(sid)?))
}

pub fn offload_status(c: &mut Compound<'_>, a: OffloadStatus4args) -> OffloadStatus4res {
    let r = copy_of(c, &a.osa_stateid).and_then(|(client, sid)| {
        let st = c.n.state.copy_status(client, &sid)?;
        Ok(OffloadStatus4resok {
            osr_count: st.copied,
            osr_complete: st.done.into_iter().collect(),
        })
    });
    match r {
        Ok(ok) => OffloadStatus4res::NFS4_OK(ok),
        Err(f) => OffloadStatus4res::Default(f.status),
    }
}

pub fn offload_cancel(c: &mut Compound<'_>, a: OffloadCancel4args) -> OffloadCancel4res {
    let r = copy_of(c, &a.oca_stateid)
        .and_then(|(client, sid)| Ok(c.n.state.cancel_copy(client, &sid)?));
    OffloadCancel4res {
        ocr_status: r.map_or_else(|f| f.status, |_| Nfsstat4::NFS4_OK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(source_range(0, 0, 10).unwrap(), 10);
        assert_eq!(source_range(4, 0, 10).unwrap(), 6);
        assert_eq!(source_range(10, 0, 10).unwrap(), 0);
        assert_eq!(source_range(2, 8, 10).unwrap(), 8);
        assert!(source_range(11, 0, 10).is_err());
        assert!(source_range(2, 9, 10).is_err());
        assert!(source_range(2, u64::MAX, 10).is_err());
        assert!(overlap(0, 5, 6));
        assert!(!overlap(0, 5, 5));
        assert!(!overlap(3, 3, 0));
    }

    #[test]
    fn hints() {
        use IoAdviseType4::*;
        let bits = |hs: &[IoAdviseType4]| {
            let mut w = vec![0u32];
            for &h in hs {
                w[0] |= 1 << h as u32;
            }
            w
        };
        let got = |hs: &[IoAdviseType4]| -> Vec<Advice> {
            wanted(&bits(hs)).into_iter().map(|(_, a)| a).collect()
        };
        assert_eq!(
            got(&[IO_ADVISE4_SEQUENTIAL, IO_ADVISE4_WILLNEED, IO_ADVISE4_READ]),
            [Advice::Sequential, Advice::WillNeed]
        );
        assert_eq!(
            got(&[
                IO_ADVISE4_SEQUENTIAL,
                IO_ADVISE4_RANDOM,
                IO_ADVISE4_DONTNEED
            ]),
            [Advice::DontNeed]
        );
        assert!(got(&[IO_ADVISE4_WILLNEED, IO_ADVISE4_DONTNEED]).is_empty());
        assert!(wanted(&[]).is_empty());
    }
}
