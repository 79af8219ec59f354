//! The Network Lock Manager, version 4 (X/Open XNFS), for NFSv3 clients,
//! on the shared [`LockManager`], so NLM locks and NFSv4 locks conflict.
//!
//! - `lock.rs`: TEST, LOCK (and NM_LOCK), CANCEL, UNLOCK, and blocked locks
//!   granted later with an NLMPROC4_GRANTED call back to the client.
//! - `share.rs`: SHARE / UNSHARE (refused: DOS share modes are not kept)
//!   and FREE_ALL.
//! - `nsm.rs`: the server's side of the status monitor: its state number
//!   and the hosts holding locks, in stable storage; SM_NOTIFY to those hosts
//!   after a restart; SM_NOTIFY from a rebooted client releases its locks.
//! - `callback.rs`: calls to the client (GRANTED, SM_NOTIFY), found through
//!   the client's rpcbind.
//!
//! Identity: a host is its `caller_name`; each gets a lock-manager client id
//! with [`NLM_CLIENT_BIT`] set. A lock owner is (host, svid + oh), so two
//! processes of one host conflict, and one process's locks merge (POSIX).
//! Files are named by the NFSv3 handle in `fh`, checked like every NFSv3
//! handle ([`Nfs3::resolve`]).

mod callback;
mod lock;
pub mod nsm;
mod share;

#[cfg(test)]
mod tests;

pub use callback::{Callback, RpcCallback};

use crate::grace::Grace;
use crate::locks::{Conflict, FileKey, LockKind, LockManager, OwnerKey, NLM_CLIENT_BIT};
use crate::nfs3::Nfs3;
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs3::{NfsFh3, Nfsstat3};
use proto::nlm4::*;
use rpc::{CallContext, CallError};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};
use xdr::{Decoder, Pack, Unpack};

/// What the NLM service needs to be told at start.
#[derive(Clone, Debug)]
pub struct NlmConfig {
    /// During the server's grace period (the one NFSv4 has too) only
    /// reclaims are granted, so clients that held locks before the restart
    /// get them back first.
    pub grace: Grace,
}

impl Default for NlmConfig {
    fn default() -> Self {
        NlmConfig {
            grace: Grace::new(Instant::now(), Duration::from_secs(90)),
        }
    }
}

/// One client host, as NLM knows it.
struct Host {
    name: Bytes,
    /// Where its last call came from: callbacks go there.
    addr: IpAddr,
    /// Whether this host is in stable storage (see `nsm.rs`), so that it
    /// is notified after our restart.
    recorded: bool,
}

#[derive(Default)]
struct Hosts {
    by_name: HashMap<Bytes, u64>,
    by_addr: HashMap<IpAddr, HashSet<u64>>,
    info: HashMap<u64, Host>,
    next: u64,
}

/// A blocked LOCK, as a retransmission or CANCEL names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct BlockKey {
    file: FileKey,
    owner: OwnerKey,
    offset: u64,
    length: u64,
    exclusive: bool,
}

pub struct Nlm {
    pub locks: Arc<LockManager>,
    pub nsm: Arc<nsm::Nsm>,
    /// The server's period, and whether a cluster-wide grace holds this
    /// head in grace beyond it (set by the cluster driver).
    grace: Mutex<(Grace, bool)>,
    hosts: Mutex<Hosts>,
    /// Blocked LOCKs waiting in the lock manager, by what names them.
    blocked: Mutex<HashMap<BlockKey, lock::Block>>,
    callback: Arc<dyn Callback>,
    /// Locks also taken in backends that keep them (CephFS); set once by
    /// [`Nlm::share_locks`].
    shared: std::sync::OnceLock<Arc<crate::shared_locks::SharedLocks>>,
    /// Names blocked LOCKs that wait for another head (see `lock.rs`).
    next_poll: std::sync::atomic::AtomicU64,
}

/// An NLM failure with why, for the log line.
struct Fail {
    stat: Nlm4Stats,
    why: &'static str,
}

impl Nlm {
    pub fn new(
        locks: Arc<LockManager>,
        nsm: Arc<nsm::Nsm>,
        cfg: NlmConfig,
        callback: Arc<dyn Callback>,
    ) -> Arc<Nlm> {
        Arc::new(Nlm {
            locks,
            nsm,
            grace: Mutex::new((cfg.grace, false)),
            hosts: Mutex::default(),
            blocked: Mutex::default(),
            callback,
            shared: std::sync::OnceLock::new(),
            next_poll: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// Takes granted locks in backends that keep them too (the NFSv4
    /// server's [`crate::shared_locks::SharedLocks`], on the same lock
    /// manager), so NLM locks conflict across heads.
    pub fn share_locks(&self, s: Arc<crate::shared_locks::SharedLocks>) {
        let _ = self.shared.set(s);
    }

    pub fn in_grace(&self) -> bool {
        let g = self.grace.lock().unwrap();
        g.1 || g.0.running(Instant::now())
    }

    /// Enters grace again while serving (a cluster: another head failed
    /// or started), until `period` ends at the latest: NLM hosts of the
    /// failed head reclaim here after the SM_NOTIFY of the head that took
    /// over its address; new locks wait.
    pub fn join_grace(&self, period: Grace) {
        let mut g = self.grace.lock().unwrap();
        if period.until() > g.0.until() {
            g.0 = period;
        }
    }

    /// The cluster-wide grace was lifted: so is this head's period.
    pub fn end_grace(&self) {
        let mut g = self.grace.lock().unwrap();
        g.0 = Grace::new(Instant::now(), Duration::ZERO);
        g.1 = false;
    }

    /// Whether a cluster-wide grace holds this head in grace.
    pub fn set_cluster_grace(&self, hold: bool) {
        self.grace.lock().unwrap().1 = hold;
    }

    /// A procedure's name, for logs (from [`crate::procedures::NLM4`]).
    pub fn proc_name(proc_: u32) -> &'static str {
        crate::procedures::NLM4.name(proc_)
    }

    pub async fn dispatch(
        self: &Arc<Self>,
        nfs: &Nfs3,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        macro_rules! args {
            ($t:ty) => {
                <$t>::unpack(&mut args).map_err(|e| {
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid = ctx.xid, procedure = Self::proc_name(ctx.proc_), error = %e, "GARBAGE_ARGS");
                    }
                    CallError::GarbageArgs
                })?
            };
        }
        match ctx.proc_ {
            NLMPROC4_TEST => self.test(nfs, ctx, args!(Nlm4Testargs)).await.pack(out),
            NLMPROC4_LOCK => self
                .lock(nfs, ctx, args!(Nlm4Lockargs), true)
                .await
                .pack(out),
            NLMPROC4_NM_LOCK => self
                .lock(nfs, ctx, args!(Nlm4Lockargs), false)
                .await
                .pack(out),
            NLMPROC4_CANCEL => self.cancel(nfs, ctx, args!(Nlm4Cancargs)).pack(out),
            NLMPROC4_UNLOCK => self.unlock(nfs, ctx, args!(Nlm4Unlockargs)).await.pack(out),
            NLMPROC4_SHARE => self.share(ctx, args!(Nlm4Shareargs)).pack(out),
            NLMPROC4_UNSHARE => self.unshare(ctx, args!(Nlm4Shareargs)).pack(out),
            NLMPROC4_FREE_ALL => self.free_all(ctx, args!(Nlm4Notify)),
            // GRANTED goes from server to client; the asynchronous _MSG/_RES
            // forms are not served (Linux clients use the synchronous ones over TCP).
            _ => return Err(CallError::ProcUnavail),
        }
        Ok(())
    }

    /// The lock-manager client id of a host, made on first sight; remembers
    /// where it calls from.
    fn host(&self, name: &Bytes, addr: IpAddr) -> u64 {
        let mut h = self.hosts.lock().unwrap();
        let h = &mut *h;
        if let Some(&id) = h.by_name.get(name) {
            let info = h.info.get_mut(&id).expect("indexed host");
            if info.addr != addr {
                if let Some(s) = h.by_addr.get_mut(&info.addr) {
                    s.remove(&id);
                    if s.is_empty() {
                        h.by_addr.remove(&info.addr);
                    }
                }
                info.addr = addr;
                h.by_addr.entry(addr).or_default().insert(id);
            }
            return id;
        }
        h.next += 1;
        let id = NLM_CLIENT_BIT | h.next;
        h.by_name.insert(name.clone(), id);
        h.by_addr.entry(addr).or_default().insert(id);
        h.info.insert(
            id,
            Host {
                name: name.clone(),
                addr,
                recorded: false,
            },
        );
        id
    }

    /// The host called `name` if its calls come from `addr`.
    fn hosts_matching(&self, name: &[u8], addr: IpAddr) -> Vec<u64> {
        let h = self.hosts.lock().unwrap();
        h.by_name
            .get(name)
            .copied()
            .filter(|id| h.info.get(id).is_some_and(|i| i.addr == addr))
            .into_iter()
            .collect()
    }

    /// Every host whose calls come from `addr`. An SM_NOTIFY names the
    /// host as its statd knows itself, which need not be lockd's caller_name,
    /// so a reboot notice is matched by address.
    fn hosts_at(&self, addr: IpAddr) -> Vec<u64> {
        let h = self.hosts.lock().unwrap();
        h.by_addr
            .get(&addr)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Makes sure `host` is in stable storage before it is told it holds a
    /// lock: after a restart we must be able to tell it to reclaim.
    async fn record_host(&self, nfs: &Nfs3, host: u64) -> Result<(), Fail> {
        let (name, addr) = {
            let h = self.hosts.lock().unwrap();
            let info = h.info.get(&host).expect("known host");
            if info.recorded {
                return Ok(());
            }
            (info.name.clone(), info.addr)
        };
        let nsm = self.nsm.clone();
        let n2 = name.clone();
        nfs.run(move || nsm.record(&n2, addr))
            .await
            .map_err(|e| {
                tracing::error!(host = %String::from_utf8_lossy(&name), error = %e, "cannot record lock holder in stable storage (state directory read-only or full?): NLM4_DENIED_NOLOCKS");
                Fail {
                    stat: Nlm4Stats::NLM4_DENIED_NOLOCKS,
                    why: "cannot record the host in stable storage",
                }
            })?;
        if let Some(info) = self.hosts.lock().unwrap().info.get_mut(&host) {
            info.recorded = true;
        }
        Ok(())
    }

    /// Forgets a host's locks (FREE_ALL, SM_NOTIFY): its client id is
    /// released in the lock manager, its blocked locks cancelled, and its
    /// stable-storage record removed.
    fn release_host(&self, id: u64) {
        self.locks.release_client(id);
        self.blocked
            .lock()
            .unwrap()
            .retain(|k, _| k.owner.client != id);
        let mut h = self.hosts.lock().unwrap();
        if let Some(info) = h.info.get_mut(&id) {
            if info.recorded {
                if let Err(e) = self.nsm.forget(&info.name) {
                    warn!(error = %e, "cannot remove host record");
                }
                info.recorded = false;
            }
        }
    }

    /// The file a lock names: the NFSv3 handle, checked (MAC, export,
    /// client allowed) exactly as NFSv3 checks it.
    fn file(&self, nfs: &Nfs3, ctx: &CallContext, fh: &Netobj) -> Result<FileKey, Fail> {
        let t = nfs
            .resolve(ctx, &NfsFh3 { data: fh.0.clone() })
            .map_err(|f| Fail {
                stat: match f.status {
                    Nfsstat3::NFS3ERR_ACCES => Nlm4Stats::NLM4_FAILED,
                    _ => Nlm4Stats::NLM4_STALE_FH,
                },
                why: f.why,
            })?;
        // No xprtsec check, as in knfsd: the Linux client's lockd has no
        // TLS and sends NLM in the clear even for a `-o xprtsec=tls` mount
        // (refusing it left such mounts without locks). A lock call names
        // a handle and a range and carries no file data; the data calls on
        // that handle still need the export's protection.
        Ok(FileKey {
            export: t.export.id,
            fid: t.fid,
        })
    }
}

/// The lock-manager owner of an NLM lock: its host, and svid + oh.
fn owner_key(host: u64, svid: i32, oh: &Netobj) -> OwnerKey {
    let mut b = BytesMut::with_capacity(4 + oh.0.len());
    b.put_i32(svid);
    b.put_slice(&oh.0);
    OwnerKey {
        client: host,
        owner: b.freeze(),
    }
}

/// NLM's `l_len == 0` means to end of file; the lock manager's is `u64::MAX`.
fn nlm_length(l_len: u64) -> u64 {
    if l_len == 0 {
        u64::MAX
    } else {
        l_len
    }
}

/// TEST's answer for a conflicting lock. Owners from NLM give back their
/// svid and oh; an NFSv4 owner has neither (svid 0, oh its owner bytes).
fn holder(c: &Conflict) -> Nlm4Holder {
    let (svid, oh) = if c.owner.client & NLM_CLIENT_BIT != 0 && c.owner.owner.len() >= 4 {
        let o = &c.owner.owner;
        (i32::from_be_bytes([o[0], o[1], o[2], o[3]]), o.slice(4..))
    } else {
        (0, c.owner.owner.clone())
    };
    Nlm4Holder {
        exclusive: c.kind == LockKind::Write,
        svid,
        oh: Netobj(oh),
        l_offset: c.offset,
        l_len: if c.length == u64::MAX { 0 } else { c.length },
    }
}

fn res(cookie: Netobj, stat: Nlm4Stats) -> Nlm4Res {
    Nlm4Res {
        cookie,
        stat: Nlm4Stat { stat },
    }
}

/// Records an NLM error status for the counters, and logs it within the
/// client's budget: ordinary outcomes (denied, blocked, grace) at debug.
fn log_fail(ctx: &CallContext, f: &Fail) {
    ctx.set_status(f.stat as u32);
    let procedure = Nlm::proc_name(ctx.proc_);
    match f.stat {
        Nlm4Stats::NLM4_DENIED | Nlm4Stats::NLM4_BLOCKED | Nlm4Stats::NLM4_DENIED_GRACE_PERIOD => {
            if tracing::enabled!(tracing::Level::DEBUG) && ctx.client.log_allowed() {
                debug!(peer = %ctx.peer, xid = ctx.xid, procedure, stat = ?f.stat, reason = f.why, "NLM refusal")
            }
        }
        _ => {
            if ctx.client.log_allowed() {
                warn!(peer = %ctx.peer, xid = ctx.xid, procedure, stat = ?f.stat, reason = f.why, "NLM error reply")
            }
        }
    }
}
