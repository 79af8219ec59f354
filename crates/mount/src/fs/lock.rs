//! POSIX byte-range locks (getlk, setlk) as NFS locks, and flock(2).
//!
//! flock: with FUSE_FLOCK_LOCKS the kernel sends flock(2) as setlk of the
//! whole file whose lock owner is the open file description (fuser does
//! not pass on FUSE_LK_FLOCK; nothing here needs it). Each owner is an NFS
//! lock owner of its own, so two descriptions of the file conflict, in
//! one process or across clients, and a dup shares its description's
//! lock, as flock says. Like Linux's NFS client, flock and POSIX locks of
//! a file conflict with each other. Flock locks go at the release of
//! their description (close never drops them: its owner is another).

use super::*;

/// A getlk or setlk request's lock: the range `[start, end]` of `ino`
/// for `lock_owner`, of type `typ` (F_RDLCK, F_WRLCK, F_UNLCK).
pub(super) struct PosixLock {
    pub ino: u64,
    pub lock_owner: u64,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
}

impl State {
    /// [`State::try_lock`] of a getlk or setlk request's lock.
    async fn try_posix(&self, l: &PosixLock, sleep: bool) -> Result<Option<HeldLock>, i32> {
        let write = l.typ == libc::F_WRLCK;
        self.try_lock(l.ino, l.lock_owner, l.start, l.end, write, sleep)
            .await
    }

    /// Releases the locks `owner` holds on `ino` that overlap `[start, end]`.
    pub(super) async fn unlock(
        &self,
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
    ) -> Result<(), i32> {
        let held = {
            let mut locks = self.locks.lock().expect("locks");
            let Some(v) = locks.get_mut(&(ino, owner)) else {
                return Ok(());
            };
            let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(v).into_iter().partition(|l| {
                let r = l.range();
                let lend = if r.len == 0 {
                    u64::MAX
                } else {
                    r.offset + r.len - 1
                };
                r.offset <= end && lend >= start
            });
            *v = keep;
            out
        };
        let mut res = Ok(());
        for l in held {
            if let Err(e) = self.remote.unlock(l).await {
                res = Err(errno(e));
            }
        }
        res
    }

    pub(super) async fn try_lock(
        &self,
        ino: u64,
        owner: u64,
        start: u64,
        end: u64,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<HeldLock>, i32> {
        let (fh, parent, name) = {
            let t = self.table.lock().expect("table");
            let n = t.get(ino).ok_or(libc::ESTALE)?;
            (n.fh.clone(), n.parent, n.name.clone())
        };
        let dfh = self.fh(parent)?;
        let len = if end >= OFFSET_MAX {
            0
        } else {
            end - start + 1
        };
        self.remote
            .lock_for(
                &fh,
                (&dfh, &name),
                Range { offset: start, len },
                exclusive,
                wait,
                Some(owner),
            )
            .await
            .map_err(errno)
    }

    /// The release of an open file description that took flock locks
    /// (the kernel names its lock owner): they go.
    pub(super) async fn flock_release(&self, ino: u64, owner: u64) {
        if let Err(e) = self.unlock(ino, owner, 0, u64::MAX).await {
            tracing::warn!("inode {ino}: flock not released: errno {e}");
        }
    }
}

impl TarnFs {
    pub(super) fn on_getlk(&self, req: &Request<'_>, l: PosixLock, pid: u32, reply: ReplyLock) {
        // NFS has LOCKT but Remote does not: try the lock and let it go.
        let st = self.st.clone();
        self.spawn(req, async move {
            match st.try_posix(&l, false).await {
                Ok(Some(held)) => {
                    let _ = st.remote.unlock(held).await;
                    reply.locked(0, 0, libc::F_UNLCK, 0)
                }
                Ok(None) => reply.locked(l.start, l.end, l.typ, pid),
                Err(e) => reply.error(e),
            }
        });
    }

    pub(super) fn on_setlk(&self, req: &Request<'_>, l: PosixLock, sleep: bool, reply: ReplyEmpty) {
        let st = self.st.clone();
        self.spawn(req, async move {
            if l.typ == libc::F_UNLCK {
                return match st.unlock(l.ino, l.lock_owner, l.start, l.end).await {
                    Ok(()) => reply.ok(),
                    Err(e) => reply.error(e),
                };
            }
            // A new lock over a range replaces what the owner held there.
            let _ = st.unlock(l.ino, l.lock_owner, l.start, l.end).await;
            match st.try_posix(&l, sleep).await {
                Ok(Some(held)) => {
                    st.locks
                        .lock()
                        .expect("locks")
                        .entry((l.ino, l.lock_owner))
                        .or_default()
                        .push(held);
                    reply.ok()
                }
                Ok(None) => reply.error(libc::EAGAIN),
                Err(e) => reply.error(e),
            }
        });
    }
}
