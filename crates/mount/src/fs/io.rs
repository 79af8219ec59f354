//! Open files: open, create, read, write, flush, release, fsync, and the
//! per-open write buffer sent as UNSTABLE WRITEs and COMMITted on flush.

use super::*;

impl State {
    /// Sends what `o` has buffered, waits for every WRITE of it sent so
    /// far (whoever sent it), and with `commit` makes them stable. A
    /// failure of its WRITEs is reported; fsync and release forget it
    /// once told (they pass `commit`), a stat or read keeps it.
    pub(super) async fn flush_open(&self, o: &Arc<Open>, commit: bool) -> Result<(), i32> {
        self.flush_open_as(o, commit, commit).await
    }

    /// [`State::flush_open`]; `take`: the failure reported is forgotten.
    /// A close (FUSE's flush, one per descriptor closed: also the copies a
    /// forked child closes at exec) and a recall's flush do not take it,
    /// so that the owner's fsync still reports it (a child's close had
    /// taken it, and the fsync said the data was stored when it was not).
    pub(super) async fn flush_open_as(
        &self,
        o: &Arc<Open>,
        commit: bool,
        take: bool,
    ) -> Result<(), i32> {
        let _one = o.flushing.lock().await;
        let waits = {
            let mut w = o.w.lock().expect("wbuf");
            w.sent.retain(|s| !*s.done.borrow());
            if commit
                && w.sent.is_empty()
                && w.verf.is_none()
                && w.data.len() <= self.wsize as usize
                && !w.data.is_empty()
            {
                // Everything left fits one WRITE and nothing earlier awaits
                // a COMMIT: one FILE_SYNC WRITE instead of WRITE + COMMIT
                // (a small file's close costs one call, as with Linux).
                let data = std::mem::take(&mut w.data).freeze();
                let off = w.off;
                w.off += data.len() as u64;
                let h = self.spawn_write_how(o, &mut w, off, data, Stable::FileSync);
                w.inflight.push(h);
            }
            self.send_buffer(o, &mut w);
            // Also the WRITEs another flush or a writer waiting for room
            // holds the handle of: each task records its own outcome.
            w.sent.iter().map(|s| s.done.clone()).collect::<Vec<_>>()
        };
        for mut d in waits {
            // An error (the task went away) also means it is over.
            let _ = d.wait_for(|done| *done).await;
        }
        let verf = {
            let mut w = o.w.lock().expect("wbuf");
            w.inflight.retain(|h| !h.is_finished());
            if !commit {
                // A stat or read that sent the buffer: a failure is told
                // to it and kept for the fsync or close, which must report
                // it too (taken here, a soft mount's lost WRITE let fsync
                // succeed).
                return w.err.map_or(Ok(()), Err);
            }
            if std::mem::take(&mut w.verf_mixed) {
                // The server restarted between two UNSTABLE WRITEs: the
                // earlier data may be lost, and is no longer held here.
                w.verf = None;
                w.err.get_or_insert(libc::EIO);
            }
            if let Some(e) = if take { w.err.take() } else { w.err } {
                return Err(e);
            }
            w.verf
        };
        if commit && verf.is_some() {
            // As the opener, like its WRITEs: a recall's flush runs on no
            // caller's behalf, and the mounter may not write the file.
            let v = maybe_as(o.cred.clone(), self.remote.commit(&o.file.fh))
                .await
                .map_err(errno)?;
            let mut w = o.w.lock().expect("wbuf");
            if Some(v) != verf {
                // The server restarted between WRITE and COMMIT: the data
                // may be lost, and is no longer held here to resend.
                w.verf = None;
                if !take {
                    w.err.get_or_insert(libc::EIO);
                }
                return Err(libc::EIO);
            }
            if w.verf == verf && !w.dirty() {
                w.verf = None;
            }
        }
        Ok(())
    }

    /// Starts WRITEs for the whole buffer (in wsize pieces).
    pub(super) fn send_buffer(&self, o: &Arc<Open>, w: &mut WriteBuf) {
        while !w.data.is_empty() {
            let n = w.data.len().min(self.wsize as usize);
            let chunk = w.data.split_to(n).freeze();
            let off = w.off;
            w.off += n as u64;
            let h = self.spawn_write(o, w, off, chunk);
            w.inflight.push(h);
        }
    }

    pub(super) fn spawn_write(
        &self,
        o: &Arc<Open>,
        w: &mut WriteBuf,
        off: u64,
        data: Bytes,
    ) -> JoinHandle<()> {
        self.spawn_write_how(o, w, off, data, Stable::Unstable)
    }

    /// Sends `data` at `off` on a task of its own, after every WRITE of
    /// `w` already sent that overlaps it has been answered. The task puts
    /// its outcome (an error, the verifier an UNSTABLE reply carried) in
    /// the open's buffer before it counts as done.
    pub(super) fn spawn_write_how(
        &self,
        o: &Arc<Open>,
        w: &mut WriteBuf,
        off: u64,
        data: Bytes,
        how: Stable,
    ) -> JoinHandle<()> {
        let r = self.remote.clone();
        let o = o.clone();
        let cred = o.cred.clone();
        let (before, done) = w.order(off, off + data.len() as u64);
        tokio::spawn(maybe_as(cred, async move {
            for mut b in before {
                let _ = b.wait_for(|d| *d).await;
            }
            let mut off = off;
            let mut data = data;
            let res = loop {
                let w = match r.write(&o.file, off, data.clone(), how).await {
                    Ok(w) => w,
                    Err(e) => break Err(e),
                };
                let n = (w.count as usize).min(data.len());
                if n == data.len() || n == 0 {
                    break Ok(w);
                }
                // A short write: the rest again.
                off += n as u64;
                data = data.slice(n..);
            };
            {
                let mut w = o.w.lock().expect("wbuf");
                match res {
                    Ok(wr) if wr.unstable => {
                        if w.verf.is_some_and(|v| v != wr.verf) {
                            w.verf_mixed = true;
                        }
                        w.verf = Some(wr.verf);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        w.err.get_or_insert(errno(e));
                    }
                }
            }
            let _ = done.send(true);
        }))
    }

    /// Sends and commits what every open file has buffered (the mount is
    /// going away without the kernel's releases).
    pub async fn flush_all(&self) {
        let opens: Vec<Arc<Open>> = self
            .files
            .lock()
            .expect("files")
            .values()
            .cloned()
            .collect();
        for o in opens {
            if let Err(e) = self.flush_open(&o, true).await {
                tracing::warn!("inode {}: buffered data not made stable: errno {e}", o.ino);
            }
        }
    }

    /// The opens of `ino`.
    pub(super) fn opens(&self, ino: u64) -> Vec<Arc<Open>> {
        self.opens_of
            .lock()
            .expect("opens")
            .get(&ino)
            .cloned()
            .unwrap_or_default()
    }

    /// Where the data this mount has written to `ino` and the server may
    /// not have yet ends (buffered, or in a WRITE not answered).
    pub(super) fn dirty_end(&self, ino: u64) -> Option<u64> {
        let mut end = None;
        for o in self.opens(ino) {
            let mut w = o.w.lock().expect("wbuf");
            w.sent.retain(|s| !*s.done.borrow());
            let buffered = (!w.data.is_empty()).then(|| w.off + w.data.len() as u64);
            let sent = w.sent.iter().map(|s| s.end).max();
            end = end.max(buffered).max(sent);
        }
        end
    }

    /// Sends (without COMMIT) what any open of `ino` holds, so the server's
    /// size and data are current.
    pub(super) async fn flush_writes_of(&self, ino: u64) -> Result<(), i32> {
        self.flush_dirty_of(ino, false).await
    }

    /// [`State::flush_writes_of`], and `stable`: made stable too, in one
    /// FILE_SYNC WRITE when it fits (a failure is kept for the fsync or
    /// close to report as well).
    pub(super) async fn flush_dirty_of(&self, ino: u64, stable: bool) -> Result<(), i32> {
        let opens: Vec<Arc<Open>> = self
            .opens(ino)
            .into_iter()
            .filter(|o| o.w.lock().expect("wbuf").dirty())
            .collect();
        for o in opens {
            self.flush_open_as(&o, stable, false).await?;
        }
        Ok(())
    }

    /// Sends the one dirty open of `ino`'s buffer as a FILE_SYNC WRITE
    /// with `set` after it in the same call (`tar x`: the data, then the
    /// times, one round trip). Applies only when that buffer is all the
    /// open owes (nothing sent unanswered, nothing awaiting COMMIT, no
    /// failure kept), fits one WRITE, and the caller is the opener (the
    /// SETATTR goes as the WRITE does). None otherwise: the caller
    /// flushes, then sets.
    pub(super) async fn write_then_setattr(
        &self,
        ino: u64,
        set: &SetAttr,
        caller: &Option<OpaqueAuth>,
    ) -> Option<Result<Option<Attr>, i32>> {
        let mut dirty = self
            .opens(ino)
            .into_iter()
            .filter(|o| o.w.lock().expect("wbuf").dirty());
        let o = dirty.next()?;
        if dirty.next().is_some() || o.cred != *caller {
            return None;
        }
        let _one = o.flushing.lock().await;
        let (off, data, done) = {
            let mut w = o.w.lock().expect("wbuf");
            w.sent.retain(|s| !*s.done.borrow());
            let alone = w.sent.is_empty() && w.verf.is_none() && w.err.is_none();
            if !alone || w.data.is_empty() || w.data.len() > self.wsize as usize {
                return None;
            }
            let data = std::mem::take(&mut w.data).freeze();
            let off = w.off;
            w.off += data.len() as u64;
            let end = w.off;
            let (_, done) = w.order(off, end);
            (off, data, done)
        };
        let r = self
            .remote
            .write_then_setattr(&o.file, off, data.clone(), set)
            .await;
        let out = match r {
            Ok((wr, _)) if (wr.count as usize) < data.len() => {
                // A short WRITE: the rest, then the times again (the
                // rest's WRITE moved them).
                match self.write_rest(&o, off, data, wr.count as usize).await {
                    Ok(()) => Some(
                        self.remote
                            .setattr_attr(&o.file.fh, set)
                            .await
                            .map_err(errno),
                    ),
                    Err(e) => Some(Err(e)),
                }
            }
            Ok((wr, after)) => {
                if wr.unstable {
                    // A server that answered a FILE_SYNC WRITE UNSTABLE
                    // (RFC 8881 forbids it): the close owes a COMMIT.
                    o.w.lock().expect("wbuf").verf = Some(wr.verf);
                }
                Some(after.map_err(errno))
            }
            Err(e) => Some(Err(self.keep_err(&o, errno(e)))),
        };
        let _ = done.send(true);
        out
    }

    /// The rest of a short stable WRITE: from `data[sent..]` on, FILE_SYNC
    /// until all of it is stored; a failure is kept for fsync and close.
    async fn write_rest(
        &self,
        o: &Arc<Open>,
        off: u64,
        data: Bytes,
        sent: usize,
    ) -> Result<(), i32> {
        let mut at = sent;
        while at < data.len() {
            let part = data.slice(at..);
            match self
                .remote
                .write(&o.file, off + at as u64, part, Stable::FileSync)
                .await
            {
                Ok(w) if w.count > 0 => at += w.count as usize,
                Ok(_) => return Err(self.keep_err(o, libc::EIO)),
                Err(e) => return Err(self.keep_err(o, errno(e))),
            }
        }
        Ok(())
    }

    fn keep_err(&self, o: &Arc<Open>, e: i32) -> i32 {
        o.w.lock().expect("wbuf").err.get_or_insert(e);
        e
    }

    /// `size` bytes at `off`, with the open's stateid when there is one.
    pub(super) async fn read(
        &self,
        ino: u64,
        open: Option<Arc<Open>>,
        off: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        self.flush_writes_of(ino).await?;
        let file = match open {
            Some(o) => o.file.clone(),
            None => OpenFile {
                fh: self.fh(ino)?,
                stateid: None,
            },
        };
        // Pieces of rsize read at once.
        let mut calls = vec![];
        let mut at = off;
        let end = off + size as u64;
        while at < end {
            let n = ((end - at) as u32).min(self.rsize);
            let r = self.remote.clone();
            let f = file.clone();
            let cred = rpc::client::current_caller();
            calls.push((
                at + n as u64,
                tokio::spawn(maybe_as(cred, async move { r.read_open(&f, at, n).await })),
            ));
            at += n as u64;
        }
        // The kernel takes a reply shorter than asked for as the end of
        // the file (it zero-fills the rest and may shrink its size), so a
        // piece the server answered short, not at its end of file, is
        // read on until it is whole.
        let mut out = Vec::with_capacity(size as usize);
        let mut at = off;
        let mut calls = calls.into_iter();
        for (piece_end, c) in calls.by_ref() {
            let (data, mut eof) = c.await.map_err(|_| libc::EIO)?.map_err(errno)?;
            out.extend_from_slice(&data);
            at += data.len() as u64;
            let mut progress = !data.is_empty();
            while !eof && progress && at < piece_end {
                let (more, e) = self
                    .remote
                    .read_open(&file, at, (piece_end - at) as u32)
                    .await
                    .map_err(errno)?;
                out.extend_from_slice(&more);
                at += more.len() as u64;
                progress = !more.is_empty();
                eof = e;
            }
            if at < piece_end {
                break;
            }
        }
        for (_, c) in calls {
            c.abort();
        }
        Ok(out)
    }

    pub(super) fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn add_open(
        &self,
        ino: u64,
        file: OpenFile,
        owns_state: bool,
        writable: bool,
    ) -> u64 {
        let fh = self.new_fh();
        self.table.lock().expect("table").opened(ino);
        let o = Arc::new(Open {
            ino,
            file,
            owns_state,
            cred: rpc::client::current_caller(),
            writable,
            direct: Default::default(),
            w: Mutex::new(WriteBuf::default()),
            flushing: tokio::sync::Mutex::new(()),
        });
        self.opens_of
            .lock()
            .expect("opens")
            .entry(ino)
            .or_default()
            .push(o.clone());
        self.files.lock().expect("files").insert(fh, o);
        fh
    }

    /// Takes open `fh` out of the tables (release).
    pub(super) fn remove_open(&self, fh: u64) -> Option<Arc<Open>> {
        let o = self.files.lock().expect("files").remove(&fh)?;
        let mut by = self.opens_of.lock().expect("opens");
        if let Some(v) = by.get_mut(&o.ino) {
            v.retain(|x| !Arc::ptr_eq(x, &o));
            if v.is_empty() {
                by.remove(&o.ino);
            }
        }
        Some(o)
    }

    /// Has the session call [`State::before_return`] before it gives a
    /// delegation back (NFSv4.1/4.2). The hook holds the state weakly: the
    /// state owns the session that owns the hook.
    pub fn install_recall_hook(self: &Arc<Self>) {
        let Some(s) = self.remote.v4() else {
            return;
        };
        let w = Arc::downgrade(self);
        s.delegations()
            .set_before_return(Some(Arc::new(move |fh: proto::nfs4::NfsFh4| {
                let w = w.clone();
                Box::pin(async move {
                    match w.upgrade() {
                        Some(st) => st.before_return(Fh(fh.0)).await,
                        None => false,
                    }
                })
            })));
    }

    /// The delegation on `fh` is about to go back (CB_RECALL, or the
    /// server asked for some back): what this mount buffered of the file
    /// is written and committed (the recall is already answered; this
    /// runs on a task of its own, so a FUSE request on the file never
    /// stands in its way), and the attribute cache stops leaning on the
    /// delegation. True when every open's data was made stable.
    pub(super) async fn before_return(&self, fh: Fh) -> bool {
        let Some(ino) = self.table.lock().expect("table").ino_of(&fh) else {
            return false;
        };
        let opens = self.opens(ino);
        let mut ok = !opens.is_empty();
        for o in opens {
            ok &= self.flush_open_as(&o, true, false).await.is_ok();
        }
        if let Some(n) = self.table.lock().expect("table").get_mut(ino) {
            n.attr.released(now());
        }
        ok
    }

    /// The open flags for the reply to an open of `id` with `flags`:
    /// O_DIRECT gets FOPEN_DIRECT_IO (reads and writes bypass the page
    /// cache) and marks the open so that its writes are stable before
    /// they return (see [`State::write_direct`]).
    pub(super) fn direct_io(&self, id: u64, flags: i32) -> u32 {
        if flags & libc::O_DIRECT == 0 {
            return 0;
        }
        if let Ok(o) = self.open_of(id) {
            o.direct.store(true, Ordering::Relaxed);
        }
        fuser::consts::FOPEN_DIRECT_IO
    }

    /// An O_DIRECT write (already in the open's buffer) sent and made
    /// stable before the write returns, as Linux's client does
    /// (fs/nfs/direct.c): a write that fits one WRITE goes FILE_SYNC,
    /// a larger one as UNSTABLE WRITEs and a COMMIT. (The kernel hands
    /// over a large direct write in max_write pieces, one after the
    /// other, so with wsize = max_write each piece is one FILE_SYNC
    /// WRITE.) A verifier that changed before the COMMIT is EIO (Linux
    /// sends the data again; this buffer no longer holds it).
    pub(super) async fn write_direct(&self, o: &Arc<Open>) -> Result<(), i32> {
        self.flush_open(o, true).await
    }

    pub(super) fn open_of(&self, fh: u64) -> Result<Arc<Open>, i32> {
        self.files
            .lock()
            .expect("files")
            .get(&fh)
            .cloned()
            .ok_or(libc::EBADF)
    }
}

impl TarnFs {
    pub(super) fn on_open(&self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let acc = flags & libc::O_ACCMODE;
        if self.ro() && acc != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        self.spawn_reply(
            req,
            reply,
            async move {
                let t = now();
                let write = acc != libc::O_RDONLY;
                let read = acc != libc::O_WRONLY;
                // Close-to-open: the attributes are asked on every open
                // (nocto: only when the cache is stale), unless a
                // delegation vouches for them; cached pages are kept only
                // if the file did not change.
                let held = st.sync_deleg(ino)?;
                let fresh = st
                    .table
                    .lock()
                    .expect("table")
                    .get(ino)
                    .ok_or(libc::ESTALE)?
                    .attr
                    .fresh(t);
                let ask = (st.opts.cto && held.is_none()) || !fresh;
                let fh = st.fh(ino)?;
                // Close-to-open covers the name too: another client may
                // have renamed or removed it since the kernel cached the
                // entry (for the directory's attribute timeout). So the
                // file is opened by the name it was found by, which costs
                // no extra call (NFSv4.1/4.2: OPEN by name with GETFH and
                // GETATTR; NFSv3/4.0: LOOKUP with attributes in place of
                // the GETATTR). A name that is gone or leads elsewhere now
                // answers ESTALE: the kernel then walks the path again
                // with LOOKUP_REVAL, which makes FUSE look every entry up
                // again, and the open ends in ENOENT or opens the new
                // file, as on a kernel NFS mount. The retry itself goes
                // by handle: its walk has just looked the names up again,
                // or had none to look up (a /proc/PID/fd link). Under a
                // delegation the name cannot move without a recall:
                // opened by handle.
                let retry = st.reopen_by_fh.lock().expect("reopen").remove(&ino);
                let by_name = if st.opts.cto && held.is_none() && !retry {
                    st.found_as(ino)
                } else {
                    None
                };
                let stale = || {
                    st.reopen_by_fh.lock().expect("reopen").insert(ino);
                    libc::ESTALE
                };
                let (file, owns, attr) = match by_name {
                    Some((dfh, name)) => {
                        let (f, now_fh, a) =
                            match st.remote.open_name(&dfh, &name, read, write).await {
                                Ok(x) => x,
                                Err(e) if e.errno() == libc::ENOENT => return Err(stale()),
                                Err(e) => return Err(errno(e)),
                            };
                        if now_fh != fh {
                            if let Some(f) = &f {
                                let _ = st.remote.close(f).await;
                            }
                            return Err(stale());
                        }
                        match f {
                            Some(f) => (f, true, a),
                            None => (OpenFile { fh, stateid: None }, false, a),
                        }
                    }
                    None => {
                        // NFSv4.1/4.2: a real OPEN (the server may delegate
                        // the file), its GETATTR in the same COMPOUND;
                        // elsewhere I/O goes without open state.
                        let opened = st
                            .remote
                            .open_fh(&fh, read, write, ask)
                            .await
                            .map_err(errno)?;
                        match opened {
                            Some((f, a)) => (f, true, a),
                            None => (OpenFile { fh, stateid: None }, false, None),
                        }
                    }
                };
                let keep = match attr {
                    Some(a) => {
                        let fh = file.fh.clone();
                        st.got_attr(ino, &fh, a)
                            .map(|(_, _, r)| r != Refresh::Changed)
                    }
                    None if ask => st
                        .fetch_attr(ino)
                        .await
                        .map(|(_, _, r)| r != Refresh::Changed),
                    None => Ok(true),
                };
                let keep = match keep {
                    Ok(k) => k,
                    Err(e) => {
                        // The open is not handed out: its state goes.
                        if owns {
                            let _ = st.remote.close(&file).await;
                        }
                        return Err(e);
                    }
                };
                if !keep {
                    st.inval_attr(ino).await;
                }
                let id = st.add_open(ino, file, owns, write);
                let f = if keep {
                    fuser::consts::FOPEN_KEEP_CACHE
                } else {
                    0
                };
                Ok::<_, i32>((id, f | st.direct_io(id, flags)))
            },
            |reply, (id, f)| reply.opened(id, f),
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_create(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.spawn_change(
            req,
            (parent, name),
            reply,
            move |st, dfh, name| async move {
                // NFSv4.1/4.2: the file's attributes and the directory's
                // come with the OPEN (the kernel's next permission check
                // of the directory, before the next lookup in it, is then
                // answered here: `tar x` sends no GETATTR per file).
                // O_EXCL: GUARDED, so a file another client made since the
                // kernel's lookup is EEXIST rather than opened.
                st.begin_change(parent);
                let r = st
                    .remote
                    .open_create_attr(
                        &dfh,
                        &name,
                        mode & !umask & 0o7777,
                        flags & libc::O_TRUNC != 0,
                        flags & libc::O_EXCL != 0,
                    )
                    .await;
                let dir_after = r.as_ref().ok().and_then(|(_, _, d)| d.clone());
                st.end_change(parent, &dfh, dir_after);
                let (f, known, _) = r.map_err(errno)?;
                let (fa, a, e) = st.entry(parent, &name, f.fh.clone(), known).await?;
                let owns = f.stateid.is_some();
                let id = st.add_open(fa.ino, f, owns, true);
                Ok::<_, i32>((fa, a.min(e), id, st.direct_io(id, flags)))
            },
            |reply, (fa, ttl, id, f)| reply.created(&ttl, &fa, 0, id, f),
        );
    }

    pub(super) fn on_read(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        reply: ReplyData,
    ) {
        let st = self.st.clone();
        let open = st.open_of(fh).ok();
        self.spawn(req, async move {
            match st.read(ino, open, offset.max(0) as u64, size).await {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn on_write(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let o = match self.st.open_of(fh) {
            Ok(o) => o,
            Err(e) => return reply.error(e),
        };
        let off = offset.max(0) as u64;
        // Under a write delegation this mount has the file's size and
        // mtime (stat answers from them); otherwise the cache is stale.
        {
            let mut tab = self.st.table.lock().expect("table");
            if let Some(n) = tab.get_mut(ino) {
                let d = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default();
                let at = Time {
                    seconds: d.as_secs() as i64,
                    nseconds: d.subsec_nanos(),
                };
                // Without a write delegation this drops the cached
                // attributes: the next stat sends the buffer and asks the
                // server, never handing the kernel the size from before
                // this write (which it would take, shrinking the file in
                // its page cache: fsx's "Size error", O_APPEND writing
                // over itself).
                n.attr.wrote(off + data.len() as u64, at);
            }
        }
        // Buffered here, on fuser's thread, so writes keep their order; a
        // writer waits only when too many WRITEs are in flight.
        let wait = {
            let mut w = o.w.lock().expect("wbuf");
            // WRITEs are spawned on the runtime from this (fuser's) thread,
            // also when a write not contiguous with the buffer sends it.
            let _g = self.rt.enter();
            if w.data.is_empty() || w.off + w.data.len() as u64 != off {
                self.st.send_buffer(&o, &mut w);
                w.off = off;
            }
            w.data.extend_from_slice(data);
            while w.data.len() >= self.st.wsize as usize {
                let n = self.st.wsize as usize;
                let chunk = w.data.split_to(n).freeze();
                let at = w.off;
                w.off += n as u64;
                let h = self.st.spawn_write(&o, &mut w, at, chunk);
                w.inflight.push(h);
            }
            w.inflight.retain(|h| !h.is_finished());
            w.inflight.len() >= WRITES_IN_FLIGHT
        };
        if o.direct.load(Ordering::Relaxed) {
            let (st, n) = (self.st.clone(), data.len() as u32);
            return self.spawn(req, async move {
                match st.write_direct(&o).await {
                    Ok(()) => reply.written(n),
                    Err(e) => reply.error(e),
                }
            });
        }
        if wait {
            let n = data.len() as u32;
            // Waits on the runtime (not on fuser's thread, which must keep
            // reading requests) for the oldest WRITE; its outcome is in
            // the buffer for the next flush.
            self.spawn(req, async move {
                let first = {
                    let mut w = o.w.lock().expect("wbuf");
                    (!w.inflight.is_empty()).then(|| w.inflight.remove(0))
                };
                if let Some(h) = first {
                    let _ = h.await;
                }
                reply.written(n)
            });
        } else {
            reply.written(data.len() as u32);
        }
    }

    pub(super) fn on_flush(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        lock_owner: u64,
        reply: ReplyEmpty,
    ) {
        let st = self.st.clone();
        self.spawn_empty(req, reply, async move {
            // close(): POSIX drops the process's locks on the file.
            let _ = st.unlock(ino, lock_owner, 0, u64::MAX).await;
            let o = st.open_of(fh)?;
            // Under a write delegation no other client can open the
            // file without a recall first, and the recall flushes and
            // commits (before_return): close sends the WRITEs and waits
            // for their replies but not for a COMMIT; release commits.
            // A tree of small files does not wait for one server fsync
            // per file, and what close returned from is in the
            // server's file (an earlier version returned before the
            // WRITEs were answered, as Linux's nfs4_file_flush does:
            // a process that closed and exited could not find its data
            // in the export, and a write error surfaced only at fsync).
            let commit = st.delegated(&o.file.fh) != Some(Delegated::Write);
            st.flush_open_as(&o, commit, false).await
        });
    }

    pub(super) fn on_release(
        &self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        flock_owner: Option<u64>,
        reply: ReplyEmpty,
    ) {
        let st = self.st.clone();
        self.spawn_empty(req, reply, async move {
            if let Some(owner) = flock_owner {
                st.flock_release(ino, owner).await;
            }
            let o = st.open_of(fh).ok();
            let mut r = Ok(());
            if let Some(o) = o {
                // Out of the tables once its data is out: until then a
                // stat must still count it (floor_size).
                r = st.flush_open(&o, true).await;
                st.remove_open(fh);
                if o.owns_state {
                    let _ = st.remote.close(&o.file).await;
                }
                st.silly_remove(ino).await;
                // What we wrote moved the change attribute: ask next time
                // (under a write delegation the cache already has it).
                if let Some(n) = st.table.lock().expect("table").get_mut(ino) {
                    if o.writable
                        && n.attr.deleg != Some(Delegated::Write)
                        && o.w.lock().expect("wbuf").verf.is_none()
                    {
                        n.attr.invalidate();
                    }
                }
                st.table.lock().expect("table").closed(ino);
            }
            r
        });
    }

    pub(super) fn on_fsync(&self, req: &Request<'_>, fh: u64, reply: ReplyEmpty) {
        let st = self.st.clone();
        self.spawn_empty(req, reply, async move {
            st.flush_open(&st.open_of(fh)?, true).await
        });
    }
}
