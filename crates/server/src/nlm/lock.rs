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

use super::*;
use crate::locks::{Attempt, WaitId, WaitMode};

/// Where a blocked LOCK stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Block {
    Waiting(WaitId),
    /// Granted by the manager; the GRANTED call is on its way. `answered`:
    /// a retransmitted LOCK was answered GRANTED meanwhile.
    Granting {
        answered: bool,
    },
}

fn kind(exclusive: bool) -> LockKind {
    if exclusive {
        LockKind::Write
    } else {
        LockKind::Read
    }
}

/// How many times a GRANTED call is tried, and the pause between tries.
const GRANTED_TRIES: u32 = 5;
const GRANTED_RETRY: Duration = Duration::from_secs(2);

impl Nlm {
    pub(super) fn test(&self, nfs: &Nfs3, ctx: &CallContext, a: Nlm4Testargs) -> Nlm4Testres {
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
            Ok(self.locks.test(
                file,
                &owner,
                kind(a.exclusive),
                a.alock.l_offset,
                nlm_length(a.alock.l_len),
            ))
        })();
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
        let (k, offset, length) = (
            kind(a.exclusive),
            a.alock.l_offset,
            nlm_length(a.alock.l_len),
        );
        let denied = Fail {
            stat: Nlm4Stats::NLM4_DENIED,
            why: "conflicting lock",
        };
        if !(a.block && monitored) {
            return match self.locks.lock(file, &owner, k, offset, length) {
                Ok(()) => Ok(Nlm4Stats::NLM4_GRANTED),
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
        // Held across the attempt, so a retransmission cannot queue twice.
        let mut blocked = self.blocked.lock().unwrap();
        if let Some(b) = blocked.get_mut(&key) {
            // A retransmission of a LOCK we already queued or granted.
            return match self.locks.lock(file, &owner, k, offset, length) {
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
        match self
            .locks
            .lock_or_wait(file, &owner, k, offset, length, WaitMode::Grant)
        {
            Attempt::Granted => Ok(Nlm4Stats::NLM4_GRANTED),
            Attempt::Queued(_, waiter) => {
                blocked.insert(key.clone(), Block::Waiting(waiter.id));
                drop(blocked);
                let me = self.clone();
                let args = Nlm4Testargs {
                    cookie: a.cookie,
                    exclusive: a.exclusive,
                    alock: a.alock,
                };
                let addr = ctx.peer.ip();
                tokio::spawn(async move {
                    let id = waiter.id;
                    if waiter.wait().await {
                        me.deliver_grant(key, id, addr, args).await;
                    }
                });
                Err(Fail {
                    stat: Nlm4Stats::NLM4_BLOCKED,
                    why: "conflicting lock; queued",
                })
            }
        }
    }

    /// The manager granted a queued lock: tell the client.
    async fn deliver_grant(&self, key: BlockKey, id: WaitId, addr: IpAddr, args: Nlm4Testargs) {
        {
            let mut b = self.blocked.lock().unwrap();
            match b.get_mut(&key) {
                Some(s) if *s == Block::Waiting(id) => *s = Block::Granting { answered: false },
                // Cancelled or released meanwhile: CANCEL undid the grant.
                _ => return,
            }
        }
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
    pub(super) fn unlock(&self, nfs: &Nfs3, ctx: &CallContext, a: Nlm4Unlockargs) -> Nlm4Res {
        match self.file(nfs, ctx, &a.alock.fh) {
            Ok(file) => {
                let host = self.host(&a.alock.caller_name, ctx.peer.ip());
                let owner = owner_key(host, a.alock.svid, &a.alock.oh);
                self.locks
                    .unlock(file, &owner, a.alock.l_offset, nlm_length(a.alock.l_len));
                res(a.cookie, Nlm4Stats::NLM4_GRANTED)
            }
            Err(f) => {
                log_fail(ctx, &f);
                res(a.cookie, f.stat)
            }
        }
    }
}
