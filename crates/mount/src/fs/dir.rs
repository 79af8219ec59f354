//! Names: lookup, the makers (mkdir, mknod, symlink), unlink and rmdir,
//! rename, link, and reading directories.

use super::*;

/// The directory changes this mount has in flight, by directory inode. A
/// change's reply may carry the directory's attributes after it; they are
/// kept only when no other change of that directory overlapped it, as
/// replies (and the server's execution) may come in either order.
#[derive(Default)]
pub(super) struct DirChanges(HashMap<u64, Changing>);

#[derive(Default)]
struct Changing {
    inflight: u32,
    spoiled: bool,
}

impl DirChanges {
    /// A change of `dir` is about to be sent.
    fn begin(&mut self, dir: u64) {
        let c = self.0.entry(dir).or_default();
        c.inflight += 1;
        c.spoiled |= c.inflight > 1;
    }

    /// A change of `dir` was answered: whether it was alone from its
    /// begin to now.
    fn end(&mut self, dir: u64) -> bool {
        let Some(c) = self.0.get_mut(&dir) else {
            return false;
        };
        c.inflight -= 1;
        let alone = !c.spoiled;
        if c.inflight == 0 {
            self.0.remove(&dir);
        }
        alone
    }

    /// `dir` changed by a call not counted here: a reply in flight may
    /// predate it.
    fn spoil(&mut self, dir: u64) {
        if let Some(c) = self.0.get_mut(&dir) {
            c.spoiled = true;
        }
    }
}

impl State {
    /// The cached attributes of `dir` (or of any inode) are stale after a
    /// change made through this mount.
    pub(super) fn dir_changed(&self, dir: u64) {
        self.changing.lock().expect("changing").spoil(dir);
        if let Some(n) = self.table.lock().expect("table").get_mut(dir) {
            n.attr.invalidate();
        }
    }

    /// A change of `dir` is about to be sent; [`State::end_change`] must
    /// follow, whatever its outcome.
    pub(super) fn begin_change(&self, dir: u64) {
        self.changing.lock().expect("changing").begin(dir);
    }

    /// A change of `dir` was answered, with the directory's attributes
    /// after it when the reply had them: cached when this change was
    /// alone (an `rm -r` then sends no GETATTR per file), otherwise the
    /// cache is dropped.
    pub(super) fn end_change(&self, dir: u64, dfh: &Fh, after: Option<Attr>) {
        let alone = self.changing.lock().expect("changing").end(dir);
        match after {
            // Err: the directory left the table meanwhile; nothing to keep.
            Some(a) if alone => drop(self.got_attr(dir, dfh, a)),
            _ => self.dir_changed(dir),
        }
    }

    /// `name` left `dir`, renamed to `to` in `newdir` (or removed:
    /// `newdir` 0): the inode it named, if known here, is filed under its
    /// new name, and its cached attributes dropped (its ctime moved, and
    /// a removal's nlink).
    pub(super) fn name_moved(&self, dir: u64, name: &str, newdir: u64, to: &str) {
        let mut tab = self.table.lock().expect("table");
        if let Some(i) = tab.child(dir, name) {
            if let Some(n) = tab.get_mut(i) {
                n.attr.invalidate();
            }
            tab.renamed(i, newdir, to);
        }
    }

    /// A name found (or made) in `dir`: the inode (one more lookup held by
    /// the kernel) and the entry's TTL.
    pub(super) async fn entry(
        &self,
        dir: u64,
        name: &str,
        fh: Fh,
        known: Option<Attr>,
    ) -> Result<(FileAttr, Duration, Duration), i32> {
        // A delegated file known here is not asked about (a lookup after
        // the entry's timeout is then one LOOKUP, no GETATTR); nor is one
        // whose attributes came with the call that made it (`known`).
        let held = self.delegated(&fh);
        let cached = known.or_else(|| {
            held.and_then(|_| {
                let tab = self.table.lock().expect("table");
                let n = tab.get(tab.ino_of(&fh)?)?;
                n.attr.deleg.is_some().then(|| n.attr.attr.clone())
            })
        });
        let mut a = match cached {
            Some(a) => a,
            None => self.remote.stat(&fh).await.map_err(errno)?,
        };
        let known_ino = self.table.lock().expect("table").ino_of(&fh);
        if let Some(i) = known_ino {
            self.floor_size(i, &mut a);
        }
        let t = now();
        let mut tab = self.table.lock().expect("table");
        if held.is_none() {
            if let Some(n) = tab.ino_of(&fh).and_then(|i| tab.get_mut(i)) {
                n.attr.released(t);
            }
        }
        let ino = tab.found(fh, a, dir, name, t, self.ac());
        if let (Some(k), Some(n)) = (held, tab.get_mut(ino)) {
            n.attr.held(k);
        }
        let n = tab.get(ino).expect("just found");
        let attr_ttl = n.attr.ttl(t);
        let fa = with_nodeid(fattr(ino, &n.attr.attr), ino);
        let entry_ttl = self.entry_ttl(&tab, dir, t, &n.attr.attr);
        Ok((FileAttr { ino, ..fa }, attr_ttl, entry_ttl))
    }

    /// The directory handle and name `ino` was last found by (what the
    /// kernel's latest lookup of it walked), if both are still known.
    pub(super) fn found_as(&self, ino: u64) -> Option<(Fh, String)> {
        let tab = self.table.lock().expect("table");
        let n = tab.get(ino)?;
        if n.name.is_empty() {
            return None;
        }
        let d = tab.get(n.parent)?;
        Some((d.fh.clone(), n.name.clone()))
    }

    /// An entry handed out by readdirplus: into the table as a lookup
    /// would put it, with the listing's attributes, except for a file
    /// delegated or open here, whose cached attributes (its own writes)
    /// are newer than the server's. Returns the kernel's attributes and
    /// the TTL (the shorter of the attribute's and the entry's).
    pub(super) fn listed(
        &self,
        dir: u64,
        name: &str,
        fh: &Fh,
        attr: &Attr,
    ) -> (FileAttr, Duration) {
        let held = self.delegated(fh);
        let t = now();
        let tab = self.table.lock().expect("table");
        let mut a = attr.clone();
        if let Some(n) = tab.ino_of(fh).and_then(|i| tab.get(i)) {
            if held.is_some() || n.opens > 0 {
                a = n.attr.attr.clone();
            }
        }
        drop(tab);
        if let Some(i) = self.table.lock().expect("table").ino_of(fh) {
            self.floor_size(i, &mut a);
        }
        let mut tab = self.table.lock().expect("table");
        let ino = tab.found(fh.clone(), a, dir, name, t, self.ac());
        let n = tab.get_mut(ino).expect("just found");
        if let Some(k) = held {
            n.attr.held(k);
        }
        let attr_ttl = n.attr.ttl(t);
        let a = n.attr.attr.clone();
        let fa = with_nodeid(fattr(ino, &a), ino);
        let entry_ttl = self.entry_ttl(&tab, dir, t, &a);
        (FileAttr { ino, ..fa }, attr_ttl.min(entry_ttl))
    }

    /// How long the kernel may trust a name in `dir`: while the directory
    /// is (at least acdirmin when that has just been checked). Not at all
    /// for a file with more than one link: open checks the name the file
    /// was last looked up by (on_open), and only a LOOKUP just before the
    /// open tells which of its names the kernel walked.
    fn entry_ttl(&self, tab: &InodeTable, dir: u64, t: Instant, a: &Attr) -> Duration {
        if !a.is_dir() && a.nlink.unwrap_or(1) > 1 {
            return Duration::ZERO;
        }
        let dir_ttl = tab.get(dir).map_or(Duration::ZERO, |d| d.attr.ttl(t));
        self.opts
            .lookupcache
            .positive(dir_ttl.max(if self.opts.ac.noac {
                Duration::ZERO
            } else {
                self.opts.ac.acdirmin
            }))
    }

    pub(super) async fn lookup(
        &self,
        dir: u64,
        name: &str,
    ) -> Result<(FileAttr, Duration, Duration), i32> {
        let dfh = self.fh(dir)?;
        // LOOKUP and GETATTR in one call. A delegated file's attributes
        // come from the cache instead (under a write delegation it has
        // this mount's own size and mtime, newer than the server's), so a
        // name known to lead to one is looked up without GETATTR.
        let was = {
            let tab = self.table.lock().expect("table");
            tab.child(dir, name)
                .and_then(|i| tab.get(i))
                .map(|n| n.fh.clone())
        };
        if was.is_some_and(|f| self.delegated(&f).is_some()) {
            let fh = self.remote.lookup(&dfh, name).await.map_err(errno)?;
            return self.entry(dir, name, fh, None).await;
        }
        let (fh, known) = self.remote.lookup_attr(&dfh, name).await.map_err(errno)?;
        let known = known.filter(|_| self.delegated(&fh).is_none());
        self.entry(dir, name, fh, known).await
    }
}

impl TarnFs {
    /// A request that makes `name` in `parent` (mkdir, mknod, symlink):
    /// `make` gets the directory's handle and returns the new file's (and
    /// its attributes when they came with the call); the reply is the new
    /// entry.
    pub(super) fn make_entry<F, Fut>(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        reply: ReplyEntry,
        make: F,
    ) where
        F: FnOnce(Arc<Remote>, Fh, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(Fh, Option<Attr>), Error>> + Send,
    {
        self.spawn_change(
            req,
            (parent, name),
            reply,
            move |st, dfh, name| async move {
                let (fh, known) = make(st.remote.clone(), dfh, name.clone())
                    .await
                    .map_err(errno)?;
                st.dir_changed(parent);
                st.entry(parent, &name, fh, known).await
            },
            |reply, (fa, a, e)| reply.entry(&a.min(e), &fa, 0),
        );
    }

    pub(super) fn on_lookup(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        reply: ReplyEntry,
    ) {
        let st = self.st.clone();
        let name = match name_of(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.spawn(req, async move {
            match st.lookup(parent, &name).await {
                Ok((fa, attr_ttl, entry_ttl)) => {
                    // fuser gives one TTL for both: the shorter.
                    reply.entry(&attr_ttl.min(entry_ttl), &fa, 0)
                }
                Err(libc::ENOENT) => {
                    let t = now();
                    let dir_ttl = st
                        .table
                        .lock()
                        .expect("table")
                        .get(parent)
                        .map_or(Duration::ZERO, |d| d.attr.ttl(t));
                    match st.opts.lookupcache.negative(dir_ttl) {
                        // A negative entry: node id 0 with a TTL.
                        Some(ttl) => reply.entry(
                            &ttl,
                            &FileAttr {
                                ino: 0,
                                ..fattr(0, &Attr::default())
                            },
                            0,
                        ),
                        None => reply.error(libc::ENOENT),
                    }
                }
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn on_forget(&self, ino: u64, nlookup: u64) {
        self.st.table.lock().expect("table").forget(ino, nlookup);
    }

    pub(super) fn on_batch_forget(&self, nodes: &[fuser::fuse_forget_one]) {
        let mut t = self.st.table.lock().expect("table");
        for n in nodes {
            t.forget(n.nodeid, n.nlookup);
        }
    }

    pub(super) fn on_readlink(&self, req: &Request<'_>, ino: u64, reply: ReplyData) {
        let st = self.st.clone();
        self.spawn_reply(
            req,
            reply,
            async move {
                let fh = st.fh(ino)?;
                st.remote.readlink(&fh).await.map_err(errno)
            },
            |reply, s| reply.data(s.as_bytes()),
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_mknod(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let perm = mode & !umask & 0o7777;
        let (major, minor) = decode_dev(rdev);
        let kind = match mode & libc::S_IFMT {
            libc::S_IFIFO => Some(Special::Fifo),
            libc::S_IFSOCK => Some(Special::Socket),
            libc::S_IFCHR => Some(Special::Char { major, minor }),
            libc::S_IFBLK => Some(Special::Block { major, minor }),
            // mknod(2) of a regular file: an exclusive create.
            libc::S_IFREG | 0 => None,
            _ => return reply.error(libc::EINVAL),
        };
        self.make_entry(req, parent, name, reply, move |r, dfh, name| async move {
            match kind {
                Some(k) => Ok((r.mknod(&dfh, &name, k, perm).await?, None)),
                None => r.create_exclusive(&dfh, &name, perm).await,
            }
        });
    }

    pub(super) fn on_mkdir(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = mode & !umask & 0o7777;
        self.make_entry(req, parent, name, reply, move |r, dfh, name| async move {
            Ok((r.mkdir(&dfh, &name, perm).await?, None))
        });
    }

    pub(super) fn on_unlink(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        reply: ReplyEmpty,
    ) {
        self.remove(req, parent, name, false, reply)
    }

    pub(super) fn on_rmdir(&self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.remove(req, parent, name, true, reply)
    }

    pub(super) fn on_symlink(
        &self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let Some(target) = target.to_str().map(str::to_string) else {
            return reply.error(libc::EINVAL);
        };
        self.make_entry(
            req,
            parent,
            link_name,
            reply,
            move |r, dfh, name| async move { Ok((r.symlink(&dfh, &name, &target).await?, None)) },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_rename(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if self.ro() {
            return reply.error(libc::EROFS);
        }
        if flags != 0 {
            // RENAME_NOREPLACE / EXCHANGE: NFS has no such rename.
            return reply.error(libc::EINVAL);
        }
        let st = self.st.clone();
        let (Ok(from), Ok(to)) = (name_of(name), name_of(newname)) else {
            return reply.error(libc::EINVAL);
        };
        self.spawn_empty(req, reply, async move {
            let (a, b) = (st.fh(parent)?, st.fh(newparent)?);
            // A file renamed over loses a link (its nlink and ctime
            // move); one this mount has open keeps its data under a
            // hidden name until the last close.
            let over = st.victim(newparent, &b, &to).await;
            if let Some(i) = over.filter(|&i| !st.opens(i).is_empty()) {
                st.silly_rename(newparent, &b, &to, i).await?;
            }
            st.remote.rename(&a, &from, &b, &to).await.map_err(errno)?;
            st.dir_changed(parent);
            st.dir_changed(newparent);
            if let Some(i) = over {
                st.dir_changed(i);
            }
            st.name_moved(parent, &from, newparent, &to);
            Ok::<_, i32>(())
        });
    }

    pub(super) fn on_link(
        &self,
        req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.spawn_change(
            req,
            (newparent, newname),
            reply,
            move |st, dfh, name| async move {
                let fh = st.fh(ino)?;
                st.remote.link(&fh, &dfh, &name).await.map_err(errno)?;
                st.dir_changed(newparent);
                // Its nlink and ctime moved (a delegation does not vouch
                // for what this mount changed).
                st.dir_changed(ino);
                st.entry(newparent, &name, fh, None).await
            },
            |reply, (fa, a, e)| reply.entry(&a.min(e), &fa, 0),
        );
    }

    pub(super) fn on_opendir(&self, req: &Request<'_>, ino: u64, reply: ReplyOpen) {
        let st = self.st.clone();
        self.spawn_reply(
            req,
            reply,
            async move {
                let fh = st.fh(ino)?;
                let list = st.remote.readdir_plus(&fh).await.map_err(errno)?;
                let parent = st
                    .table
                    .lock()
                    .expect("table")
                    .get(ino)
                    .map_or(ROOT, |n| n.parent);
                let mut v = vec![
                    (ino, FileType::Directory, ".".to_string(), None),
                    (parent, FileType::Directory, "..".to_string(), None),
                ];
                for e in list {
                    let id = e.attr.fileid.filter(|&f| f != 0).unwrap_or(u64::MAX);
                    let plus = e.fh.map(|f| (f, e.attr.clone()));
                    v.push((id, kind(e.attr.ftype), e.name, plus));
                }
                let id = st.new_fh();
                st.dirs.lock().expect("dirs").insert(id, Arc::new(v));
                Ok::<_, i32>(id)
            },
            |reply, id| reply.opened(id, 0),
        );
    }

    pub(super) fn on_readdir(&self, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let Some(list) = self.st.dirs.lock().expect("dirs").get(&fh).cloned() else {
            return reply.error(libc::EBADF);
        };
        for (i, (ino, k, name, _)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *k, name) {
                break;
            }
        }
        reply.ok();
    }

    /// Entries with their attributes: each one handed out is one lookup
    /// the kernel holds (as a LOOKUP reply would be), so it goes into the
    /// inode table like one, and is taken back when it did not fit.
    pub(super) fn on_readdirplus(
        &self,
        dir: u64,
        fh: u64,
        offset: i64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        let st = &self.st;
        let Some(list) = st.dirs.lock().expect("dirs").get(&fh).cloned() else {
            return reply.error(libc::EBADF);
        };
        for (i, (d_ino, k, name, plus)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            let off = (i + 1) as i64;
            let Some((efh, attr)) = plus else {
                // "." and ".." (the kernel links neither), or an entry
                // the server gave no handle for: node id 0, which the
                // kernel lists without linking.
                let id = if name == "." || name == ".." {
                    *d_ino
                } else {
                    0
                };
                let fa = FileAttr {
                    ino: id,
                    kind: *k,
                    ..fattr(0, &Attr::default())
                };
                if reply.add(id, off, name, &Duration::ZERO, &fa, 0) {
                    break;
                }
                continue;
            };
            let (fa, ttl) = st.listed(dir, name, efh, attr);
            if reply.add(fa.ino, off, name, &ttl, &fa, 0) {
                // Not sent: not held by the kernel either.
                st.table.lock().expect("table").forget(fa.ino, 1);
                break;
            }
        }
        reply.ok();
    }

    pub(super) fn on_releasedir(&self, fh: u64, reply: ReplyEmpty) {
        self.st.dirs.lock().expect("dirs").remove(&fh);
        reply.ok();
    }

    pub(super) fn remove(
        &self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        dir: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn_change(
            req,
            (parent, name),
            reply,
            move |st, dfh, name| async move {
                let victim = match dir {
                    true => None,
                    false => st.victim(parent, &dfh, &name).await,
                };
                if let Some(i) = victim.filter(|&i| !st.opens(i).is_empty()) {
                    return st.silly_rename(parent, &dfh, &name, i).await;
                }
                st.begin_change(parent);
                let r = st.remote.remove_attr(&dfh, &name, dir).await;
                st.end_change(parent, &dfh, r.as_ref().ok().cloned().flatten());
                r.map_err(errno)?;
                if let Some(i) = victim {
                    // Its other names' nlink and ctime moved.
                    st.dir_changed(i);
                }
                st.name_moved(parent, &name, 0, "");
                Ok::<_, i32>(())
            },
            |reply, ()| reply.ok(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::DirChanges;

    #[test]
    fn a_change_alone_keeps_its_reply() {
        let mut c = DirChanges::default();
        c.begin(7);
        assert!(c.end(7));
        // Nothing is left behind for the next one.
        c.begin(7);
        assert!(c.end(7));
        assert!(c.0.is_empty());
    }

    #[test]
    fn overlapping_changes_keep_neither_reply() {
        let mut c = DirChanges::default();
        c.begin(7);
        c.begin(7);
        assert!(!c.end(7));
        assert!(!c.end(7));
        // Another directory's change is not concerned.
        c.begin(7);
        c.begin(8);
        assert!(c.end(8));
        assert!(c.end(7));
    }

    #[test]
    fn an_uncounted_change_spoils_the_one_in_flight() {
        let mut c = DirChanges::default();
        c.begin(7);
        c.spoil(7);
        assert!(!c.end(7));
        // With nothing in flight there is nothing to spoil.
        c.spoil(7);
        c.begin(7);
        assert!(c.end(7));
    }
}
