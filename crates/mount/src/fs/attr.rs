//! getattr, setattr and statfs: the attribute cache, and a size that never
//! falls below what this mount has not sent yet.

use super::*;

impl State {
    /// Attributes from the server for `ino`, put in the cache; a change
    /// drops the kernel's cached pages of a file.
    pub(super) async fn fetch_attr(&self, ino: u64) -> Result<(FileAttr, Duration, Refresh), i32> {
        let fh = self.fh(ino)?;
        let a = self.remote.stat(&fh).await.map_err(errno)?;
        self.got_attr(ino, &fh, a)
    }

    /// Attributes just fetched for `ino` (a GETATTR, or one in an OPEN's
    /// COMPOUND) into the cache, held under the delegation if there is one.
    pub(super) fn got_attr(
        &self,
        ino: u64,
        fh: &Fh,
        mut a: Attr,
    ) -> Result<(FileAttr, Duration, Refresh), i32> {
        self.floor_size(ino, &mut a);
        let t = now();
        let (r, ttl, fa) = {
            let mut tab = self.table.lock().expect("table");
            let n = tab.get_mut(ino).ok_or(libc::ESTALE)?;
            let r = n.attr.refresh(a, t, &self.opts.ac);
            if let Some(k) = self.delegated(fh) {
                n.attr.held(k);
            }
            (r, n.attr.ttl(t), fattr(ino, &n.attr.attr))
        };
        if r == Refresh::Changed && fa.kind == FileType::RegularFile {
            self.inval_data(ino);
        }
        Ok((fa, ttl, r))
    }

    /// Drops the kernel's cached pages of `ino` (another client changed
    /// it). The notification is written on a blocking-pool thread, never
    /// on a worker and never before the request's reply can go: the kernel
    /// takes page locks to drop pages, and a page may be locked by a READ
    /// or a truncate that waits on this mount's workers.
    pub(super) fn inval_data(&self, ino: u64) {
        let Some(n) = self.notifier.lock().expect("notifier").clone() else {
            return;
        };
        match Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(move || {
                    // The kernel may not have the inode any more.
                    let _ = n.inval_inode(ino, 0, 0);
                });
            }
            Err(_) => {
                let _ = n.inval_inode(ino, 0, 0);
            }
        }
    }

    /// Drops the kernel's cached attributes of `ino` (not its pages: no
    /// page lock is taken, so this may be waited for before a reply).
    /// Open uses it when close-to-open found the file changed: the kernel
    /// would otherwise keep the old size and stat answers until its
    /// attribute timeout, and cut reads of a grown file at the old size.
    pub(super) async fn inval_attr(&self, ino: u64) {
        let Some(n) = self.notifier.lock().expect("notifier").clone() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || n.inval_inode(ino, -1, 0)).await;
    }

    /// The delegation the session holds on `fh`, as the attribute cache
    /// knows it; None with `noac` (every stat asks the server).
    pub(super) fn delegated(&self, fh: &Fh) -> Option<Delegated> {
        if self.opts.ac.noac {
            return None;
        }
        self.remote.delegation(fh).map(|k| match k {
            DelegKind::Read => Delegated::Read,
            DelegKind::Write => Delegated::Write,
        })
    }

    /// Brings `ino`'s cache in line with the session's delegations: one
    /// that went back (recalled) ends the cache's hold. Returns the
    /// delegation held on it now.
    pub(super) fn sync_deleg(&self, ino: u64) -> Result<Option<Delegated>, i32> {
        let fh = self.fh(ino)?;
        let held = self.delegated(&fh);
        if held.is_none() {
            if let Some(n) = self.table.lock().expect("table").get_mut(ino) {
                n.attr.released(now());
            }
        }
        Ok(held)
    }

    /// Attributes for the kernel: cached while fresh (or delegated), else
    /// from the server.
    pub(super) async fn attr(&self, ino: u64) -> Result<(FileAttr, Duration), i32> {
        // Under a write delegation the cache has this mount's size and
        // mtime: buffered data need not go out first.
        if self.sync_deleg(ino)? != Some(Delegated::Write) {
            self.flush_writes_of(ino).await?;
        }
        let t = now();
        {
            let mut tab = self.table.lock().expect("table");
            tab.touch(ino);
            let n = tab.get(ino).ok_or(libc::ESTALE)?;
            if n.attr.fresh(t) {
                return Ok((fattr(ino, &n.attr.attr), n.attr.ttl(t)));
            }
        }
        let (fa, ttl, _) = self.fetch_attr(ino).await?;
        Ok((fa, ttl))
    }

    /// Attributes from the server never shrink a file below what this
    /// mount wrote and has not sent yet (as Linux's client keeps i_size
    /// while it has writes pending): the kernel would take the smaller
    /// size and cut its page cache.
    ///
    /// A file unlinked while open here (renamed to a hidden name) shows
    /// the links it has left, not counting the hidden one.
    pub(super) fn floor_size(&self, ino: u64, a: &mut Attr) {
        if let (Some(size), Some(end)) = (a.size, self.dirty_end(ino)) {
            a.size = Some(size.max(end));
        }
        if self.silly.lock().expect("silly").contains_key(&ino) {
            a.nlink = a.nlink.map(|n| n.saturating_sub(1));
        }
    }
}

impl TarnFs {
    pub(super) fn on_getattr(&self, req: &Request<'_>, ino: u64, reply: ReplyAttr) {
        let st = self.st.clone();
        self.spawn(req, async move {
            match st.attr(ino).await {
                Ok((fa, ttl)) => reply.attr(&ttl, &fa),
                Err(e) => reply.error(e),
            }
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_setattr(
        &self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        reply: ReplyAttr,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        let st = self.st.clone();
        let t = |x: TimeOrNow| match x {
            TimeOrNow::Now => SetTime::Server,
            TimeOrNow::SpecificTime(s) => {
                let d = s.duration_since(UNIX_EPOCH).unwrap_or_default();
                SetTime::Client(Time {
                    seconds: d.as_secs() as i64,
                    nseconds: d.subsec_nanos(),
                })
            }
        };
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(t),
            mtime: mtime.map(t),
        };
        let caller = st.caller_cred(req);
        self.spawn_reply(
            req,
            reply,
            async move {
                // Buffered data first: a truncate must not be undone by a
                // WRITE still in flight. Setting the mtime marks the end of
                // writing (tar, cp -p, rsync set it after the data): the
                // data is made stable now, in the SETATTR's own call when
                // it fits one WRITE, and the close that follows has nothing
                // to send.
                let times_last = set.mtime.is_some() && set.size.is_none();
                let fused = match times_last {
                    true => st.write_then_setattr(ino, &set, &caller).await,
                    false => None,
                };
                let fh = st.fh(ino)?;
                // The attributes it left come back in the same call.
                let after = match fused {
                    Some(after) => after?,
                    None => {
                        st.flush_dirty_of(ino, times_last).await?;
                        st.remote.setattr_attr(&fh, &set).await.map_err(errno)?
                    }
                };
                // A new size: the kernel cuts its own page cache when the
                // reply comes (an invalidation sent from here deadlocked
                // with a reader holding a page lock).
                let (fa, ttl, _) = match after {
                    Some(a) => st.got_attr(ino, &fh, a)?,
                    None => st.fetch_attr(ino).await?,
                };
                Ok::<_, i32>((fa, ttl))
            },
            |reply, (fa, ttl)| reply.attr(&ttl, &fa),
        );
    }

    pub(super) fn on_statfs(&self, req: &Request<'_>, reply: ReplyStatfs) {
        let st = self.st.clone();
        self.spawn_reply(
            req,
            reply,
            async move { st.remote.fsstat(&st.fh(ROOT)?).await.map_err(errno) },
            |reply, s| {
                let b = 4096u64;
                reply.statfs(
                    s.total / b,
                    s.free / b,
                    s.avail / b,
                    s.files_total,
                    s.files_free,
                    b as u32,
                    255,
                    b as u32,
                )
            },
        );
    }
}
