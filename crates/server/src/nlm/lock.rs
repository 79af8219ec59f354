//! TEST, LOCK / NM_LOCK, CANCEL, UNLOCK, and blocked locks.
//!
//! A blocking LOCK that conflicts is queued in the lock manager in
//! [`WaitMode::Grant`] mode and answered NLM4_BLOCKED. When the range frees,
//! the manager takes the lock for the waiter atomically, and a task sends
//! NLMPROC4_GRANTED to the client. If the client answers that it no longer
//! waits, the lock is released again, unless a retransmitted LOCK already
//! told the client it holds it. If the client cannot be reached the lock
//! stays: Linux clients re-send a blocked LOCK every 30 s and are then
//! answered GRANTED (an owner's own lock never conflicts with itself).
//!
//! Over a backend that keeps locks for every head (CephFS), a lock granted
//! here is then taken in the backend
//! ([`crate::shared_locks::SharedLocks`]); if another head
//! holds it, the grant is undone and the LOCK denied. A blocking LOCK
//! that only another head stands in the way of cannot be woken by a
//! release here: it is answered NLM4_BLOCKED and tried again every
//! [`POLL_BACKEND`] until it is granted (then GRANTED is sent as usual),
//! cancelled, or its host released.

use super::*;
use crate::locks::{Attempt, LockRange, WaitId, WaitMode};
use crate::shared_locks::Refusal;

/// Where a blocked LOCK stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Block {
    Waiting(WaitId),
    /// Granted by the manager; the GRANTED call is on its way. `answered`:
    /// a retransmitted LOCK was answered GRANTED meanwhile.
    Granting {
        answered: bool,
    },
    /// Held through another head: a task tries again now and then.
    Polling(u64),
}

/// How often a blocked LOCK that waits for another head is tried again.
pub(super) const POLL_BACKEND: Duration = Duration::from_secs(1);

fn kind(exclusive: bool) -> LockKind {
    if exclusive {
        LockKind::Write
    } else {
        LockKind::Read
    }
}

/// The lock a LOCK or TEST asks for.
fn wanted(exclusive: bool, l: &Nlm4Lock) -> LockRange {
    kind(exclusive).range(l.l_offset, nlm_length(l.l_len))
}

impl BlockKey {
    fn range(&self) -> LockRange {
        kind(self.exclusive).range(self.offset, self.length)
    }
}

/// How many times a GRANTED call is tried, and the pause between tries.
const GRANTED_TRIES: u32 = 5;
const GRANTED_RETRY: Duration = Duration::from_secs(2);

impl Nlm {
    pub(super) async fn test(&self, nfs: &Nfs3, ctx: &CallContext, a: Nlm4Testargs) -> Nlm4Testres {
        let r = (|| {
            if self.in_grace() {
                return Err(Fail {
                    stat: Nlm4Stats::NLM4_DENIED_GRACE_PERIOD,
                    why: "in grace period",
                });
            }
            let file = self.file(nfs, ctx, &a.alock.fh)?;
            let host = self.host(&a.alock.caller_name, ctx.peer.ip());
            let owner = owner_key(host, a.alock.svid, &a.alock.oh);
            Ok((
                self.locks.test(file, &owner, wanted(a.exclusive, &a.alock)),
                file,
                owner,
            ))
        })();
        // No conflict here: maybe through another head.
        let r = match (r, self.shared.get()) {
            (Ok((Ok(()), file, owner)), Some(sh)) => {
                match sh.test(file, &owner, wanted(a.exclusive, &a.alock)).await {
                    Ok(()) => Ok(Ok(())),
                    Err(Refusal::Held(c)) => Ok(Err(c)),
                    Err(Refusal::Failed(_)) => Err(Fail {
                        stat: Nlm4Stats::NLM4_FAILED,
                        why: "the backend failed to test the lock",
                    }),
                }
            }
            (r, _) => r.map(|(t, _, _)| t),
        };
        let test_stat = match r {
            Ok(Ok(())) => Nlm4Testrply::Default(Nlm4Stats::NLM4_GRANTED),
            Ok(Err(c)) => {
                ctx.set_status(Nlm4Stats::NLM4_DENIED as u32);
                Nlm4Testrply::NLM4_DENIED(holder(&c))
            }
            Err(f) => {
                log_fail(ctx, &f);
                Nlm4Testrply::Default(f.stat)
            }
        };
        Nlm4Testres {
            cookie: a.cookie,
            test_stat,
        }
    }

    /// LOCK (`monitored`) and NM_LOCK (not monitored: never blocks, and the
    /// host is not recorded for notification after a restart).
    pub(super) async fn lock(
        self: &Arc<Self>,
        nfs: &Nfs3,
        ctx: &CallContext,
        a: Nlm4Lockargs,
        monitored: bool,
    ) -> Nlm4Res {
        let cookie = a.cookie.clone();
        match self.lock_inner(nfs, ctx, a, monitored).await {
            Ok(stat) => {
                ctx.set_status(stat as u32);
                res(cookie, stat)
            }
            Err(f) => {
                log_fail(ctx, &f);
                res(cookie, f.stat)
            }
        }
    }

    async fn lock_inner(
        self: &Arc<Self>,
        nfs: &Nfs3,
        ctx: &CallContext,
        a: Nlm4Lockargs,
        monitored: bool,
    ) -> Result<Nlm4Stats, Fail> {
        // Linux answers a reclaim outside the grace period the same way:
        // the client then knows its lock was not kept.
        if self.in_grace() != a.reclaim {
            return Err(Fail {
                stat: Nlm4Stats::NLM4_DENIED_GRACE_PERIOD,
                why: if a.reclaim {
                    "reclaim outside the grace period"
                } else {
                    "in grace period: only reclaims"
                },
            });
        }
        let file = self.file(nfs, ctx, &a.alock.fh)?;
        // An NFSv4 client holding a delegation takes its locks locally:
        // they reach the server only once it returns the delegation. The
        // Linux client retries a lock denied for the grace period.
        if nfs.recalling(file.export, &file.fid) {
            return Err(Fail {
                stat: Nlm4Stats::NLM4_DENIED_GRACE_PERIOD,
                why: "an NFSv4 delegation on the file is being recalled",
            });
        }
        let host = self.host(&a.alock.caller_name, ctx.peer.ip());
        if monitored {
            self.record_host(nfs, host).await?;
        }
        let owner = owner_key(host, a.alock.svid, &a.alock.oh);
        let r = wanted(a.exclusive, &a.alock);
        let (offset, length) = (r.offset, r.length);
        let denied = Fail {
            stat: Nlm4Stats::NLM4_DENIED,
            why: "conflicting lock",
        };
        if !(a.block && monitored) {
            let prev = self.locks.held_in(file, &owner, offset, length);
            return match self.locks.lock(file, &owner, r) {
                Ok(()) => self
                    .take_shared(file, &owner, r, prev)
                    .await
                    .map(|()| Nlm4Stats::NLM4_GRANTED)
                    .map_err(|r| self.refused(r, a.reclaim)),
                Err(_) => Err(denied),
            };
        }
        let key = BlockKey {
            file,
            owner: owner.clone(),
            offset,
            length,
            exclusive: a.exclusive,
        };
        let prev = self.locks.held_in(file, &owner, offset, length);
        let args = Nlm4Testargs {
            cookie: a.cookie,
            exclusive: a.exclusive,
            alock: a.alock,
        };
        let addr = ctx.peer.ip();
        let granted = {
            // Held across the attempt, so a retransmission cannot queue twice.
            let mut blocked = self.blocked.lock().unwrap();
            if let Some(Block::Polling(_)) = blocked.get(&key) {
                // Its task takes it when the other head lets go.
                return Err(Fail {
                    stat: Nlm4Stats::NLM4_BLOCKED,
                    why: "still blocked by another head",
                });
            }
            if let (Some(Block::Waiting(_)), Some(sh)) = (blocked.get(&key), self.shared.get()) {
                if sh.applies(&file) {
                    // Granted here perhaps, but not yet taken in the
                    // backend (another head may still refuse it): GRANTED
                    // is called back once it is.
                    return Err(Fail {
                        stat: Nlm4Stats::NLM4_BLOCKED,
                        why: "still blocked",
                    });
                }
            }
            if let Some(b) = blocked.get_mut(&key) {
                // A retransmission of a LOCK we already queued or granted.
                return match self.locks.lock(file, &owner, r) {
                    Ok(()) => {
                        if let Block::Granting { answered } = b {
                            *answered = true;
                        }
                        Ok(Nlm4Stats::NLM4_GRANTED)
                    }
                    Err(_) => Err(Fail {
                        stat: Nlm4Stats::NLM4_BLOCKED,
                        why: "still blocked",
                    }),
                };
            }
            match self.locks.lock_or_wait(file, &owner, r, WaitMode::Grant) {
                Attempt::Granted => true,
                Attempt::Queued(_, waiter) => {
                    blocked.insert(key.clone(), Block::Waiting(waiter.id));
                    let me = self.clone();
                    let (key, args, prev) = (key.clone(), args.clone(), prev.clone());
                    tokio::spawn(async move {
                        let id = waiter.id;
                        if waiter.wait().await {
                            me.deliver_grant(key, id, addr, args, prev).await;
                        }
                    });
                    false
                }
            }
        };
        if !granted {
            return Err(Fail {
                stat: Nlm4Stats::NLM4_BLOCKED,
                why: "conflicting lock; queued",
            });
        }
        match self.take_shared(file, &owner, r, prev).await {
            Ok(()) => Ok(Nlm4Stats::NLM4_GRANTED),
            Err(Refusal::Held(_)) if !a.reclaim => {
                self.poll(key, None, addr, args);
                Err(Fail {
                    stat: Nlm4Stats::NLM4_BLOCKED,
                    why: "held through another head; polling",
                })
            }
            Err(r) => Err(self.refused(r, a.reclaim)),
        }
    }

    /// Takes a lock the manager granted in a backend that keeps locks for
    /// every head; undoes the manager's grant if that fails.
    async fn take_shared(
        &self,
        file: FileKey,
        owner: &OwnerKey,
        r: LockRange,
        prev: Vec<(u64, u64, LockKind)>,
    ) -> Result<(), Refusal> {
        match self.shared.get() {
            Some(sh) => sh.take(file, owner, r, prev).await,
            None => Ok(()),
        }
    }

    /// The answer to a LOCK the backend refused.
    fn refused(&self, r: Refusal, reclaim: bool) -> Fail {
        match r {
            // During grace no head grants new locks: a failed head's
            // session holds it until the MDS ends it. The client retries.
            Refusal::Held(_) if reclaim => Fail {
                stat: Nlm4Stats::NLM4_DENIED_GRACE_PERIOD,
                why: "reclaim: still held in CephFS by a failed head's session",
            },
            Refusal::Held(_) => Fail {
                stat: Nlm4Stats::NLM4_DENIED,
                why: "lock held through another head",
            },
            Refusal::Failed(_) => Fail {
                stat: Nlm4Stats::NLM4_FAILED,
                why: "the backend failed to take the lock",
            },
        }
    }

    /// A blocked LOCK that another head stands in the way of: no release
    /// here would wake it, so a task tries it again every
    /// [`POLL_BACKEND`] while it is still wanted. `waiting`: the id it had
    /// in the lock manager's queue (its entry is replaced only if unchanged).
    fn poll(
        self: &Arc<Self>,
        key: BlockKey,
        waiting: Option<WaitId>,
        addr: IpAddr,
        args: Nlm4Testargs,
    ) {
        let token = self
            .next_poll
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut b = self.blocked.lock().unwrap();
            match (b.get(&key), waiting) {
                (None, None) => {}
                (Some(s), Some(id)) if *s == Block::Waiting(id) => {}
                // Cancelled, or a retransmission took over meanwhile.
                _ => return,
            }
            b.insert(key.clone(), Block::Polling(token));
        }
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL_BACKEND).await;
                if me.blocked.lock().unwrap().get(&key) != Some(&Block::Polling(token)) {
                    return;
                }
                let prev = me
                    .locks
                    .held_in(key.file, &key.owner, key.offset, key.length);
                if me.locks.lock(key.file, &key.owner, key.range()).is_err() {
                    continue;
                }
                match me
                    .take_shared(key.file, &key.owner, key.range(), prev)
                    .await
                {
                    Ok(()) => break,
                    Err(Refusal::Held(_)) => continue,
                    Err(Refusal::Failed(_)) => {
                        warn!(client = %addr, "backend failed while retrying a blocked lock; giving up (the client's next LOCK tries again)");
                        me.blocked.lock().unwrap().remove(&key);
                        return;
                    }
                }
            }
            {
                let mut b = me.blocked.lock().unwrap();
                match b.get_mut(&key) {
                    Some(s) if *s == Block::Polling(token) => {
                        *s = Block::Granting { answered: false }
                    }
                    _ => {
                        // Cancelled while it was being taken.
                        drop(b);
                        me.locks
                            .unlock(key.file, &key.owner, key.offset, key.length);
                        return;
                    }
                }
            }
            me.send_granted(key, addr, args).await;
        });
    }

    /// The manager granted a queued lock: take it in a backend that keeps
    /// locks too, then tell the client.
    async fn deliver_grant(
        self: &Arc<Self>,
        key: BlockKey,
        id: WaitId,
        addr: IpAddr,
        args: Nlm4Testargs,
        prev: Vec<(u64, u64, LockKind)>,
    ) {
        if self.blocked.lock().unwrap().get(&key) != Some(&Block::Waiting(id)) {
            // Cancelled or released meanwhile: CANCEL undid the grant.
            return;
        }
        if let Err(r) = self
            .take_shared(key.file, &key.owner, key.range(), prev)
            .await
        {
            match r {
                Refusal::Held(_) => self.poll(key, Some(id), addr, args),
                Refusal::Failed(_) => {
                    warn!(client = %addr, "backend failed to take a granted blocked lock; the client's next LOCK tries again");
                    let mut b = self.blocked.lock().unwrap();
                    if b.get(&key) == Some(&Block::Waiting(id)) {
                        b.remove(&key);
                    }
                }
            }
            return;
        }
        {
            let mut b = self.blocked.lock().unwrap();
            match b.get_mut(&key) {
                Some(s) if *s == Block::Waiting(id) => *s = Block::Granting { answered: false },
                // Cancelled or released meanwhile: CANCEL undid the grant.
                _ => return,
            }
        }
        self.send_granted(key, addr, args).await;
    }

    /// Sends GRANTED for a lock now held (its entry is `Granting`).
    async fn send_granted(&self, key: BlockKey, addr: IpAddr, args: Nlm4Testargs) {
        let mut outcome = Err(String::new());
        for attempt in 0..GRANTED_TRIES {
            if attempt > 0 {
                tokio::time::sleep(GRANTED_RETRY).await;
            }
            outcome = self.callback.granted(addr, args.clone()).await;
            if outcome.is_ok() {
                break;
            }
        }
        let state = self.blocked.lock().unwrap().remove(&key);
        match outcome {
            Ok(Nlm4Stats::NLM4_GRANTED) => {
                debug!(client = %addr, "blocked lock granted and GRANTED delivered")
            }
            Ok(stat) => {
                // The client no longer waits for it (its process gave up).
                if state == Some(Block::Granting { answered: false }) {
                    self.locks
                        .unlock(key.file, &key.owner, key.offset, key.length);
                }
                debug!(client = %addr, ?stat, "client refused GRANTED; lock released");
            }
            Err(e) => {
                warn!(client = %addr, error = %e, "cannot deliver NLM GRANTED; the lock stays granted for the client's next LOCK");
            }
        }
    }

    pub(super) fn cancel(&self, nfs: &Nfs3, ctx: &CallContext, a: Nlm4Cancargs) -> Nlm4Res {
        let r = (|| {
            let file = self.file(nfs, ctx, &a.alock.fh)?;
            let host = self.host(&a.alock.caller_name, ctx.peer.ip());
            let owner = owner_key(host, a.alock.svid, &a.alock.oh);
            let key = BlockKey {
                file,
                owner: owner.clone(),
                offset: a.alock.l_offset,
                length: nlm_length(a.alock.l_len),
                exclusive: a.exclusive,
            };
            let mut blocked = self.blocked.lock().unwrap();
            match blocked.remove(&key) {
                Some(Block::Waiting(id)) => {
                    if !self.locks.cancel_wait(file, &owner, id) {
                        // Granted an instant ago; its grant task will find
                        // no entry and send nothing. Undo the grant.
                        self.locks.unlock(file, &owner, key.offset, key.length);
                    }
                    Ok(Nlm4Stats::NLM4_GRANTED)
                }
                Some(Block::Granting { .. }) => {
                    self.locks.unlock(file, &owner, key.offset, key.length);
                    Ok(Nlm4Stats::NLM4_GRANTED)
                }
                // Its task stops at its next try.
                Some(Block::Polling(_)) => Ok(Nlm4Stats::NLM4_GRANTED),
                None => Err(Fail {
                    stat: Nlm4Stats::NLM4_DENIED,
                    why: "no such blocked lock",
                }),
            }
        })();
        match r {
            Ok(stat) => res(a.cookie, stat),
            Err(f) => {
                log_fail(ctx, &f);
                res(a.cookie, f.stat)
            }
        }
    }

    /// Unlocking what is not held succeeds, as fcntl does. Allowed in the
    /// grace period: it only removes.
    pub(super) async fn unlock(&self, nfs: &Nfs3, ctx: &CallContext, a: Nlm4Unlockargs) -> Nlm4Res {
        match self.file(nfs, ctx, &a.alock.fh) {
            Ok(file) => {
                let host = self.host(&a.alock.caller_name, ctx.peer.ip());
                let owner = owner_key(host, a.alock.svid, &a.alock.oh);
                let (offset, length) = (a.alock.l_offset, nlm_length(a.alock.l_len));
                self.locks.unlock(file, &owner, offset, length);
                // Released in CephFS before the reply: the client may ask
                // another head next.
                if let Some(sh) = self.shared.get() {
                    sh.release(file, &owner, offset, length).await;
                }
                res(a.cookie, Nlm4Stats::NLM4_GRANTED)
            }
            Err(f) => {
                log_fail(ctx, &f);
                res(a.cookie, f.stat)
            }
        }
    }
}
