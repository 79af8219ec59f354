//! Byte-range locks over NLM version 4.
//!
//! Locks are asked for non-blocking and not monitored (NM_LOCK): the
//! client runs no status monitor, so it cannot promise the reboot
//! notifications a monitored lock relies on, and a blocked lock's GRANTED
//! callback would need an NLM server of our own. While the answer is
//! DENIED (when the caller waits) or DENIED_GRACE_PERIOD, the call is
//! repeated after a pause that grows to one second. A server without
//! NM_LOCK (PROC_UNAVAIL) is asked with LOCK, non-blocking.
//!
//! Server restarts: with no statd to be told by SM_NOTIFY, the client
//! notices a restart itself. Whenever a connection to the server is made
//! again (the NFS channel's or NLM's own), it asks the server's status
//! monitor for its state number (SM_STAT); a new number is a new boot, and
//! every lock held is sent again with `reclaim` set, as Linux's lockd does
//! on SM_NOTIFY. A reclaim the server refuses is a lost lock
//! ([`Nfs3::lost_locks`]).

use super::error::{Error, Result};
use super::{mount, Nfs3};
use bytes::Bytes;
use proto::nfs3::NfsFh3;
use proto::nlm4::*;
use rpc::client::{ClientError, RpcClient};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use xdr::Unpack;

/// Who holds a lock: the owner handle and the process id (svid), as the
/// server tells one holder from another on the same host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOwner {
    pub oh: Bytes,
    pub svid: i32,
}

impl LockOwner {
    /// This process's owner.
    pub fn this_process(machine: &str) -> LockOwner {
        let pid = std::process::id();
        LockOwner {
            oh: Bytes::from(format!("tarn:{pid}@{machine}")),
            svid: pid as i32,
        }
    }
}

/// Bytes `offset..offset+len`; `len` 0 means to the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    pub offset: u64,
    pub len: u64,
    pub exclusive: bool,
}

/// A lock this client was granted and has not released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldNlmLock {
    pub fh: NfsFh3,
    pub owner: LockOwner,
    pub range: LockRange,
}

impl HeldNlmLock {
    fn of(fh: &NfsFh3, owner: &LockOwner, range: LockRange) -> HeldNlmLock {
        HeldNlmLock {
            fh: fh.clone(),
            owner: owner.clone(),
            range,
        }
    }
}

/// The NLM side of an [`Nfs3`]: its connection (made again when lost),
/// the locks held, and the server's status-monitor state they were taken
/// under. Shared with the NFS channel's connect hook.
pub(super) struct NlmClient {
    addr: SocketAddr,
    machine: String,
    cred: proto::rpc::OpaqueAuth,
    /// RPC-with-TLS for NLM and NSM too when the mount uses it.
    tls: Option<rpc::tls::TlsClient>,
    conn: tokio::sync::Mutex<Option<Arc<RpcClient>>>,
    held: Mutex<Vec<HeldNlmLock>>,
    lost: Mutex<Vec<HeldNlmLock>>,
    /// The server's NSM state when last asked; None: not asked yet, or
    /// the server has no status monitor.
    server_state: Mutex<Option<i32>>,
    /// One reboot check at a time.
    checking: tokio::sync::Mutex<()>,
    reclaims: std::sync::atomic::AtomicU64,
}

/// How long a call keeps trying while the server cannot be reached.
const UNREACHABLE_FOR: Duration = Duration::from_secs(300);

fn transport(e: &Error) -> bool {
    matches!(
        e,
        Error::Rpc(ClientError::Io(_) | ClientError::Closed | ClientError::TimedOut)
    )
}

impl NlmClient {
    pub(super) fn new(
        addr: SocketAddr,
        machine: String,
        cred: proto::rpc::OpaqueAuth,
        tls: Option<rpc::tls::TlsClient>,
    ) -> Self {
        NlmClient {
            addr,
            machine,
            cred,
            tls,
            conn: tokio::sync::Mutex::new(None),
            held: Mutex::default(),
            lost: Mutex::default(),
            server_state: Mutex::new(None),
            checking: tokio::sync::Mutex::new(()),
            reclaims: Default::default(),
        }
    }

    /// The open NLM connection, made (found) if there is none; `fresh`:
    /// whether it was made now.
    async fn conn(&self) -> Result<(Arc<RpcClient>, bool)> {
        let mut c = self.conn.lock().await;
        if let Some(c) = c.as_ref().filter(|c| !c.is_closed()) {
            return Ok((c.clone(), false));
        }
        let n = Arc::new(
            mount::locate_tls(
                self.addr,
                NLM_PROG,
                NLM4_VERS,
                self.cred.clone(),
                self.tls.as_ref(),
            )
            .await?,
        );
        *c = Some(n.clone());
        Ok((n, true))
    }

    fn alock(&self, fh: &NfsFh3, owner: &LockOwner, r: LockRange) -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bytes::copy_from_slice(self.machine.as_bytes()),
            fh: Netobj(fh.data.clone()),
            oh: Netobj(owner.oh.clone()),
            svid: owner.svid,
            l_offset: r.offset,
            l_len: r.len,
        }
    }

    /// One NLM call, then the reboot check if a connection had to be
    /// made (see [`NlmClient::send`]).
    async fn call<A: xdr::Pack, R: Unpack>(&self, proc_: u32, a: &A) -> Result<R> {
        let (r, fresh) = self.send(proc_, a).await;
        if fresh {
            self.check_reboot().await;
        }
        r
    }

    /// One NLM call; a lost connection is made again and the call sent
    /// again, for a while: also while the server is down, as a hard mount
    /// waits. Whether a new connection was made.
    async fn send<A: xdr::Pack, R: Unpack>(&self, proc_: u32, a: &A) -> (Result<R>, bool) {
        let start = std::time::Instant::now();
        let mut pause = crate::pause::Pause::from(Duration::from_millis(20));
        let mut made = false;
        loop {
            let again = start.elapsed() < UNREACHABLE_FOR;
            match self.conn().await {
                // TLS refused: trying again gets the same answer.
                Err(Error::Rpc(e)) if e.is_final() => return (Err(Error::Rpc(e)), made),
                Err(e) if again => {
                    tracing::debug!(server = %self.addr, "NLM: cannot connect: {e}")
                }
                Err(e) => return (Err(e), made),
                Ok((c, fresh)) => {
                    made |= fresh;
                    let r = async {
                        let mut d = c.call(NLM_PROG, NLM4_VERS, proc_, a).await?;
                        Ok(R::unpack(&mut d)?)
                    }
                    .await;
                    match r {
                        Err(e) if transport(&e) && again => {
                            let mut k = self.conn.lock().await;
                            if k.as_ref().is_some_and(|k| Arc::ptr_eq(k, &c)) {
                                *k = None;
                            }
                        }
                        r => return (r, made),
                    }
                }
            }
            pause.wait().await;
        }
    }

    fn lock_args(&self, l: &HeldNlmLock, reclaim: bool, cookie: u32) -> Nlm4Lockargs {
        Nlm4Lockargs {
            cookie: Netobj(Bytes::copy_from_slice(&cookie.to_be_bytes())),
            block: false,
            exclusive: l.range.exclusive,
            alock: self.alock(&l.fh, &l.owner, l.range),
            reclaim,
            state: 0,
        }
    }

    /// One LOCK call (NM_LOCK, or LOCK where that is not served): the
    /// server's answer.
    async fn lock_once(&self, l: &HeldNlmLock, reclaim: bool, cookie: u32) -> Result<Nlm4Stats> {
        let a = self.lock_args(l, reclaim, cookie);
        let res: Nlm4Res = match self.call(NLMPROC4_NM_LOCK, &a).await {
            Err(Error::Rpc(ClientError::Rpc(rpc::msg::ReplyStatus::Accepted(
                proto::rpc::AcceptStat::PROC_UNAVAIL,
            )))) => self.call(NLMPROC4_LOCK, &a).await?,
            r => r?,
        };
        Ok(res.stat.stat)
    }

    /// A reclaim: as [`NlmClient::lock_once`], without the reboot check
    /// (this is part of it).
    async fn reclaim(&self, h: &HeldNlmLock, cookie: u32) -> Result<Nlm4Stats> {
        let a = self.lock_args(h, true, cookie);
        let res: Nlm4Res = match self.send(NLMPROC4_NM_LOCK, &a).await.0 {
            Err(Error::Rpc(ClientError::Rpc(rpc::msg::ReplyStatus::Accepted(
                proto::rpc::AcceptStat::PROC_UNAVAIL,
            )))) => self.send(NLMPROC4_LOCK, &a).await.0?,
            r => r?,
        };
        Ok(res.stat.stat)
    }

    /// The server's status-monitor state (SM_STAT on the NSM program);
    /// None when it has none we can reach.
    async fn server_state(&self) -> Option<i32> {
        use proto::nsm::*;
        let c = mount::locate_tls(
            self.addr,
            SM_PROG,
            SM_VERS,
            self.cred.clone(),
            self.tls.as_ref(),
        )
        .await
        .ok()?;
        let a = SmName {
            mon_name: Bytes::copy_from_slice(self.machine.as_bytes()),
        };
        let mut d = c.call(SM_PROG, SM_VERS, SM_STAT, &a).await.ok()?;
        let r = SmStatRes::unpack(&mut d).ok()?;
        c.close();
        Some(r.state)
    }

    /// Remembers the server's state the first time a lock is granted.
    async fn note_state(&self) {
        if self.server_state.lock().unwrap().is_none() {
            let s = self.server_state().await;
            let mut k = self.server_state.lock().unwrap();
            if k.is_none() {
                *k = s;
            }
        }
    }

    /// Asks whether the server restarted since the locks were taken and,
    /// if so, reclaims them. Without a state to compare (no status monitor
    /// on the server), every new connection is taken for a possible restart.
    /// One check at a time: a caller that finds one under way (or a
    /// reclaim whose own connection was made again) goes on without.
    pub(super) async fn check_reboot(&self) {
        let Ok(_one) = self.checking.try_lock() else {
            return;
        };
        if self.held.lock().unwrap().is_empty() {
            return;
        }
        let now = self.server_state().await;
        let before = *self.server_state.lock().unwrap();
        match (before, now) {
            (Some(b), Some(n)) if b == n => return,
            // Not reachable just now: the next connection asks again.
            (Some(_), None) => return,
            _ => {}
        }
        *self.server_state.lock().unwrap() = now;
        let held = self.held.lock().unwrap().clone();
        tracing::info!(server = %self.addr, locks = held.len(), "NLM: the server restarted; reclaiming locks");
        for (i, h) in held.into_iter().enumerate() {
            let r = self.reclaim(&h, 0x8000_0000 | i as u32).await;
            self.reclaims
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match r {
                Ok(Nlm4Stats::NLM4_GRANTED) => {}
                // No restart after all (no state number to tell): the
                // server refuses a reclaim outside its grace period, and
                // the lock is still ours.
                Ok(Nlm4Stats::NLM4_DENIED_GRACE_PERIOD) if now.is_none() => {}
                other => {
                    tracing::warn!(server = %self.addr, range = ?h.range, answer = ?other, "NLM: lock lost in a server restart");
                    self.held.lock().unwrap().retain(|x| x != &h);
                    self.lost.lock().unwrap().push(h);
                }
            }
        }
    }
}

/// Asks `once` again, after the lock pause, while the server answers
/// DENIED_GRACE_PERIOD (after its restart) or a status `also` says to wait
/// out; the first other answer.
async fn until_settled<F, Fut>(mut once: F, also: impl Fn(Nlm4Stats) -> bool) -> Result<Nlm4Stats>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Nlm4Stats>>,
{
    let mut pause = crate::pause::Pause::for_locks();
    loop {
        match once().await? {
            Nlm4Stats::NLM4_DENIED_GRACE_PERIOD => {}
            s if also(s) => {}
            s => return Ok(s),
        }
        pause.wait().await;
    }
}

impl Nfs3 {
    /// Takes the lock. With `wait`, a conflicting lock is waited out
    /// (asked again until granted); without, Ok(false) says it is held
    /// by someone else. The grace period after a server restart is
    /// always waited out.
    pub async fn nlm_lock(
        &self,
        fh: &NfsFh3,
        owner: &LockOwner,
        r: LockRange,
        wait: bool,
    ) -> Result<bool> {
        let h = HeldNlmLock::of(fh, owner, r);
        let mut n = 0u32;
        let answer = until_settled(
            || {
                n += 1;
                self.nlm.lock_once(&h, false, n)
            },
            |s| wait && s == Nlm4Stats::NLM4_DENIED,
        )
        .await?;
        match answer {
            Nlm4Stats::NLM4_GRANTED => {
                self.nlm.note_state().await;
                let mut held = self.nlm.held.lock().unwrap();
                if !held.contains(&h) {
                    held.push(h);
                }
                Ok(true)
            }
            Nlm4Stats::NLM4_DENIED => Ok(false),
            other => Err(Error::Nlm(other)),
        }
    }

    /// One LOCK (non-blocking), answered as the server answered: for
    /// tests that must see DENIED_GRACE_PERIOD rather than wait it out.
    /// A lock granted is not remembered for reclaim.
    pub async fn nlm_lock_once(
        &self,
        fh: &NfsFh3,
        owner: &LockOwner,
        r: LockRange,
        reclaim: bool,
    ) -> Result<Nlm4Stats> {
        self.nlm
            .lock_once(&HeldNlmLock::of(fh, owner, r), reclaim, 1)
            .await
    }

    /// Releases the lock (granted also when nothing was held).
    pub async fn nlm_unlock(&self, fh: &NfsFh3, owner: &LockOwner, r: LockRange) -> Result<()> {
        let a = Nlm4Unlockargs {
            cookie: Netobj(Bytes::from_static(b"u")),
            alock: self.nlm.alock(fh, owner, r),
        };
        let unlock = || async {
            let res: Nlm4Res = self.nlm.call(NLMPROC4_UNLOCK, &a).await?;
            Ok(res.stat.stat)
        };
        match until_settled(unlock, |_| false).await? {
            Nlm4Stats::NLM4_GRANTED => {
                let h = HeldNlmLock::of(fh, owner, r);
                self.nlm.held.lock().unwrap().retain(|x| *x != h);
                Ok(())
            }
            other => Err(Error::Nlm(other)),
        }
    }

    /// TEST: None if `owner` could take the lock now, else who holds what.
    pub async fn nlm_test(
        &self,
        fh: &NfsFh3,
        owner: &LockOwner,
        r: LockRange,
    ) -> Result<Option<Nlm4Holder>> {
        let a = Nlm4Testargs {
            cookie: Netobj(Bytes::from_static(b"t")),
            exclusive: r.exclusive,
            alock: self.nlm.alock(fh, owner, r),
        };
        let res: Nlm4Testres = self.nlm.call(NLMPROC4_TEST, &a).await?;
        match res.test_stat {
            Nlm4Testrply::NLM4_DENIED(h) => Ok(Some(h)),
            Nlm4Testrply::Default(Nlm4Stats::NLM4_GRANTED) => Ok(None),
            Nlm4Testrply::Default(other) => Err(Error::Nlm(other)),
        }
    }

    /// The locks held (granted and not released), as they would be reclaimed.
    pub fn nlm_held(&self) -> Vec<HeldNlmLock> {
        self.nlm.held.lock().unwrap().clone()
    }

    /// Locks a server restart took away: the server refused their reclaim.
    pub fn lost_locks(&self) -> Vec<HeldNlmLock> {
        self.nlm.lost.lock().unwrap().clone()
    }

    /// Reclaim calls sent after server restarts.
    pub fn nlm_reclaims(&self) -> u64 {
        self.nlm.reclaims.load(std::sync::atomic::Ordering::Relaxed)
    }
}
