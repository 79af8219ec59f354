//! NFS version 4.0, 4.1 and 4.2 (RFC 7530, RFC 8881, RFC 7862): COMPOUND
//! processing with one handler per operation group and a shared
//! [`compound::Compound`] state; the pseudo filesystem; the client, session
//! and open/lock state in [`state`].
//!
//! [`Nfs4::dispatch`] decodes the COMPOUND header, then one operation at a
//! time (so an unknown operation number becomes OP_ILLEGAL after the
//! results so far), runs it, and stops at the first error, as RFC 8881
//! §16.2.3 says. Results are written straight into the reply.

pub mod attr;
pub mod backchannel;
mod backend_delegs;
pub mod cb40;
pub mod clock;
mod compound;
pub mod copy;
mod deleg;
mod dir;
mod fh;
mod getattr;
pub mod idmap;
mod io;
mod local_changes;
mod lock;
mod open;
pub mod peers;
pub mod pseudo;
mod readdir;
pub mod recovery;
mod secinfo;
mod session;
mod sparse;
pub mod state;
mod v40;
mod xattr;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use crate::grace::Grace;
use crate::live::Live;
use crate::pool::Pool;
use bytes::{BufMut, Bytes, BytesMut};
use compound::{Compound, Fh, PSEUDO_EXPORT};
use proto::nfs4::*;
use rpc::{CallContext, CallError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};
use vfs::{Fid, FsError, HandleKey};
use xdr::{Decoder, Pack, Unpack};

/// Tunables of the NFSv4 server.
#[derive(Clone, Debug)]
pub struct Nfs4Config {
    pub lease: Duration,
    pub grace: Duration,
    /// The id-mapping domain for `owner@domain` strings.
    pub domain: String,
    /// Send names (`user@domain`) instead of numeric ids.
    pub id_names: bool,
    /// Most slots a session gets.
    pub max_slots: u32,
    /// How long, and how many, lapsed clients keep their state.
    pub courtesy: state::Courtesy,
    /// Most delegations outstanding at once; past it OPEN grants none
    /// (OPEN_DELEGATE_NONE_EXT with WND4_RESOURCE).
    pub max_delegations: usize,
    /// When COPY runs in the background, and its bounds.
    pub copy: copy::CopyConfig,
    /// Bounds on client records and per-client state.
    pub limits: state::StateLimits,
}

impl Default for Nfs4Config {
    fn default() -> Self {
        Nfs4Config {
            lease: Duration::from_secs(90),
            grace: Duration::from_secs(90),
            domain: "localdomain".into(),
            id_names: false,
            max_slots: 128,
            courtesy: state::Courtesy::default(),
            max_delegations: deleg::default_max_delegations(),
            copy: copy::CopyConfig::default(),
            limits: state::StateLimits::default(),
        }
    }
}

pub struct Nfs4 {
    /// The exports in force and their pseudo tree (swapped on reload; each
    /// COMPOUND loads them once, see [`Compound::snap`]).
    pub live: Arc<Live>,
    pub key: Arc<HandleKey>,
    pub pool: Pool,
    pub state: Arc<state::State>,
    pub idmap: Arc<attr::IdMap>,
    pub cfg: Nfs4Config,
    /// Shared with NFSv3 (see [`crate::verf`]).
    pub write_verf: Arc<crate::verf::WriteVerf>,
    /// Identifies this server to clients (EXCHANGE_ID server owner/scope).
    pub server_owner: Bytes,
    /// When the server started: times of pseudo directories.
    pub boot: vfs::Timespec,
    /// The one writer of the stable client records (reclaim after a
    /// restart): carries out the state core's effects.
    pub records: Arc<Records>,
    /// Wakes the lease timer when the state core queued something outside
    /// its walk (see [`state::Waker`]).
    wake: Arc<tokio::sync::Notify>,
    /// Per-operation counters (the COMPOUND itself is counted by the RPC layer).
    pub metrics: Option<Arc<metrics::Metrics>>,
    /// The time for every lease, grace and courtesy decision (a manual
    /// clock in tests).
    pub clock: Arc<dyn clock::Clock>,
    /// Each session's back channel (driver state: it holds connections).
    pub backchannels: Arc<backchannel::Backchannels>,
    /// Which address each client record calls from (for `tarn top`).
    pub peers: Arc<peers::Peers>,
    /// Locks also taken in backends that keep them (CephFS), shared with NLM.
    pub shared: Arc<crate::shared_locks::SharedLocks>,
    /// Delegations backed by the backend's own (CephFS).
    pub bdelegs: Arc<backend_delegs::BackendDelegs>,
}

/// An NFSv4 error together with why, for the log line.
#[derive(Debug, Clone, Copy)]
pub struct Fail {
    pub status: Nfsstat4,
    pub why: &'static str,
}

impl Fail {
    pub fn new(status: Nfsstat4, why: &'static str) -> Fail {
        Fail { status, why }
    }
}

impl From<FsError> for Fail {
    fn from(e: FsError) -> Fail {
        Fail {
            status: status(e),
            why: e.reason(),
        }
    }
}

impl From<Nfsstat4> for Fail {
    fn from(s: Nfsstat4) -> Fail {
        Fail {
            status: s,
            why: "refused by the state manager",
        }
    }
}

/// The NFSv4 status for a backend error.
pub fn status(e: FsError) -> Nfsstat4 {
    use Nfsstat4::*;
    match e {
        FsError::Perm => NFS4ERR_PERM,
        FsError::NoEnt => NFS4ERR_NOENT,
        FsError::Io => NFS4ERR_IO,
        FsError::NxIo => NFS4ERR_NXIO,
        FsError::Acces => NFS4ERR_ACCESS,
        FsError::Exist => NFS4ERR_EXIST,
        FsError::XDev => NFS4ERR_XDEV,
        FsError::NoDev => NFS4ERR_INVAL,
        FsError::NotDir => NFS4ERR_NOTDIR,
        FsError::IsDir => NFS4ERR_ISDIR,
        FsError::Inval => NFS4ERR_INVAL,
        FsError::FBig => NFS4ERR_FBIG,
        FsError::NoSpc => NFS4ERR_NOSPC,
        FsError::RoFs => NFS4ERR_ROFS,
        FsError::MLink => NFS4ERR_MLINK,
        FsError::NameTooLong => NFS4ERR_NAMETOOLONG,
        FsError::NotEmpty => NFS4ERR_NOTEMPTY,
        FsError::DQuot => NFS4ERR_DQUOT,
        FsError::Stale => NFS4ERR_STALE,
        FsError::BadHandle => NFS4ERR_BADHANDLE,
        FsError::NotSupp => NFS4ERR_NOTSUPP,
        FsError::TooSmall => NFS4ERR_TOOSMALL,
        FsError::ServerFault => NFS4ERR_SERVERFAULT,
        FsError::Jukebox => NFS4ERR_DELAY,
        FsError::BadCookie => NFS4ERR_BAD_COOKIE,
        FsError::BadType => NFS4ERR_BADTYPE,
        FsError::Loop => NFS4ERR_SYMLINK,
        FsError::NoXattr => NFS4ERR_NOXATTR,
        FsError::XattrTooBig => NFS4ERR_XATTR2BIG,
        FsError::WouldBlock => NFS4ERR_DELAY,
    }
}

macro_rules! opnums {
    ($($name:ident),*) => { $(pub const $name: u32 = NfsOpnum4::$name as u32;)* };
}
opnums!(
    OP_ACCESS,
    OP_GETATTR,
    OP_READ,
    OP_READDIR,
    OP_SEQUENCE,
    OP_SETATTR,
    OP_EXCHANGE_ID,
    OP_CREATE_SESSION,
    OP_DESTROY_SESSION,
    OP_DESTROY_CLIENTID,
    OP_BIND_CONN_TO_SESSION,
    OP_RELEASE_LOCKOWNER,
    OP_RECLAIM_COMPLETE,
    OP_CLONE,
    OP_REMOVEXATTR,
    OP_ILLEGAL
);

/// Operations allowed without SEQUENCE in NFSv4.1, each then only as the
/// sole operation (RFC 8881 §15.1.3.3 and the op descriptions).
fn sessionless(op: u32) -> bool {
    matches!(
        op,
        OP_EXCHANGE_ID
            | OP_CREATE_SESSION
            | OP_DESTROY_SESSION
            | OP_DESTROY_CLIENTID
            | OP_BIND_CONN_TO_SESSION
    )
}

/// The highest operation number of each minor version.
fn max_op(minor: u32) -> u32 {
    match minor {
        0 => OP_RELEASE_LOCKOWNER,
        1 => OP_RECLAIM_COMPLETE,
        // RFC 7862's operations, then RFC 8276's extended attributes.
        _ => OP_REMOVEXATTR,
    }
}

/// The minor version of a COMPOUND's arguments (after the tag), if they
/// are well-formed that far.
pub fn minor_version(args: &[u8]) -> Option<u32> {
    let word = |at: usize| Some(u32::from_be_bytes(args.get(at..at + 4)?.try_into().ok()?));
    let tag = word(0)? as usize;
    word(4usize.checked_add(tag.checked_next_multiple_of(4)?)?)
}

/// NFSv4.0 operations that change files or state: a COMPOUND with one of
/// them keeps its reply in the duplicate request cache, so a
/// retransmission gets the reply instead of running again.
fn changes_something(op: u32) -> bool {
    use NfsOpnum4 as O;
    [
        O::OP_CLOSE,
        O::OP_CREATE,
        O::OP_LINK,
        O::OP_LOCK,
        O::OP_LOCKU,
        O::OP_OPEN,
        O::OP_OPEN_CONFIRM,
        O::OP_OPEN_DOWNGRADE,
        O::OP_REMOVE,
        O::OP_RENAME,
        O::OP_SETATTR,
        O::OP_SETCLIENTID,
        O::OP_SETCLIENTID_CONFIRM,
        O::OP_WRITE,
        O::OP_RELEASE_LOCKOWNER,
    ]
    .iter()
    .any(|o| *o as u32 == op)
}

/// Largest NFSv4.0 reply kept in the duplicate request cache: replies of
/// changing operations are small; a big one (a READ in the same COMPOUND)
/// would only crowd the cache.
const DRC_MAX_REPLY: usize = 16 << 10;

/// Most operations one COMPOUND may carry before a session bounds it.
pub const MAX_OPS: u32 = 256;

impl Nfs4 {
    pub fn new(
        live: Arc<Live>,
        key: Arc<HandleKey>,
        pool: Pool,
        locks: Arc<crate::locks::LockManager>,
        cfg: Nfs4Config,
        recovery: Option<recovery::Recovery>,
    ) -> Nfs4 {
        let grace = Grace::new(Instant::now(), cfg.grace);
        Self::with_grace(live, key, pool, locks, cfg, recovery, grace)
    }

    /// Like [`Nfs4::new`], with the server's grace period (shared with
    /// NLM) given.
    pub fn with_grace(
        live: Arc<Live>,
        key: Arc<HandleKey>,
        pool: Pool,
        locks: Arc<crate::locks::LockManager>,
        cfg: Nfs4Config,
        recovery: Option<recovery::Recovery>,
        grace: Grace,
    ) -> Nfs4 {
        Self::with_clock(
            live,
            key,
            pool,
            locks,
            cfg,
            recovery,
            grace,
            Arc::new(clock::SystemClock),
        )
    }

    /// [`Nfs4::with_grace`] reading the time from `clock`.
    #[allow(clippy::too_many_arguments)]
    pub fn with_clock(
        live: Arc<Live>,
        key: Arc<HandleKey>,
        pool: Pool,
        locks: Arc<crate::locks::LockManager>,
        cfg: Nfs4Config,
        recovery: Option<recovery::Recovery>,
        grace: Grace,
        clock: Arc<dyn clock::Clock>,
    ) -> Nfs4 {
        let shared =
            crate::shared_locks::SharedLocks::new(locks.clone(), live.clone(), pool.clone());
        let state = Arc::new(
            state::State::with_courtesy(cfg.lease, locks.clone(), cfg.courtesy, new_epoch())
                .with_limits(cfg.limits),
        );
        // A lock request (NFSv4 or NLM) refused because of a courteous
        // client's lock expires that client and tries again. Weak: the
        // state owns the lock manager, which owns the hook.
        let weak = Arc::downgrade(&state);
        let hook_clock = clock.clone();
        locks.set_conflict_hook(Box::new(move |client| {
            weak.upgrade()
                .is_some_and(|s| s.expire_courteous(client, hook_clock.now()))
        }));
        let wake = Arc::new(tokio::sync::Notify::new());
        {
            let wake = wake.clone();
            state.set_waker(Box::new(move || wake.notify_one()));
        }
        if let Some(r) = &recovery {
            state.start_grace(r.previous(), grace);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let write_verf = Default::default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "tarn".into());
        let backchannels: Arc<backchannel::Backchannels> = Arc::default();
        let records = Arc::new(Records {
            state: state.clone(),
            store: recovery,
            pool: pool.clone(),
            order: tokio::sync::Mutex::new(()),
            backchannels: backchannels.clone(),
        });
        Nfs4 {
            shared,
            bdelegs: Arc::new(backend_delegs::BackendDelegs::new(cfg.lease)),
            peers: Arc::default(),
            live,
            key,
            pool,
            state,
            idmap: Arc::new(attr::IdMap::new(&cfg.domain, cfg.id_names)),
            cfg,
            write_verf,
            server_owner: Bytes::from(format!("tarn:{host}")),
            boot: vfs::Timespec {
                secs: now.as_secs() as i64,
                nsecs: now.subsec_nanos(),
            },
            records,
            wake,
            metrics: None,
            clock,
            backchannels,
        }
    }

    /// Carries out what the state core queued (see [`Records::apply`]).
    pub async fn apply_effects(&self) {
        self.records.apply().await;
    }

    /// The lease timer: clients whose lease ran out become courteous
    /// (their state stays until someone needs it, see
    /// [`state::Courtesy`]); it logs what the state core reports, carries
    /// out its effects (the recovery records of clients expired for real
    /// go) and keeps the courteous-clients gauge. Woken at once when the
    /// state core queued something outside the walk (a conflict expired a
    /// client). Runs until the runtime stops.
    pub fn spawn_reaper(&self) {
        let state = self.state.clone();
        let records = self.records.clone();
        let wake = self.wake.clone();
        let metrics = self.metrics.clone();
        let clock = self.clock.clone();
        let backchannels = self.backchannels.clone();
        let max_delegations = self.cfg.max_delegations;
        let every = (self.cfg.lease / 4).max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = t.tick() => {}
                    _ = wake.notified() => {}
                }
                lease_walk(&state, &records, &metrics, max_delegations, clock.now()).await;
                backchannels.retain(|id| state.session(id).is_some());
            }
        });
    }

    /// One walk of the lease timer now, without waiting for its tick
    /// (tests drive time by hand and walk after each step).
    pub async fn lease_walk(&self) {
        lease_walk(
            &self.state,
            &self.records,
            &self.metrics,
            self.cfg.max_delegations,
            self.clock.now(),
        )
        .await;
        self.backchannels
            .retain(|id| self.state.session(id).is_some());
    }

    /// The wire filehandle of `fh`.
    pub fn seal(&self, fh: &Fh) -> Bytes {
        match fh {
            Fh::Pseudo(node) => {
                let fid = Fid::new(&node.to_be_bytes()).expect("4 bytes fit");
                Bytes::copy_from_slice(self.key.seal(PSEUDO_EXPORT, &fid).as_bytes())
            }
            Fh::Obj { export, fid } => {
                Bytes::copy_from_slice(self.key.seal(export.id, fid).as_bytes())
            }
        }
    }

    /// Checks a client's filehandle: MAC first (no syscall), then its export
    /// and whether this client may use it.
    pub fn open_fh(&self, c: &Compound<'_>, wire: &[u8]) -> Result<Fh, Fail> {
        let ctx = c.ctx;
        let (export_id, fid) = self.key.open(wire).map_err(|_| {
            Fail::new(
                Nfsstat4::NFS4ERR_BADHANDLE,
                "handle fails its MAC or is malformed",
            )
        })?;
        if export_id == PSEUDO_EXPORT {
            let b = fid.as_bytes();
            let node = u32::from_be_bytes(b.try_into().map_err(|_| {
                Fail::new(
                    Nfsstat4::NFS4ERR_BADHANDLE,
                    "malformed pseudo filesystem handle",
                )
            })?);
            if node as usize >= c.snap.pseudo.nodes.len() {
                return Err(Fail::new(
                    Nfsstat4::NFS4ERR_STALE,
                    "pseudo directory no longer exists",
                ));
            }
            return Ok(Fh::Pseudo(node));
        }
        let export = c.snap.exports.get(export_id).ok_or(Fail::new(
            Nfsstat4::NFS4ERR_STALE,
            "handle names an export that no longer exists",
        ))?;
        ctx.set_export(export_id);
        c.access(export)?;
        Ok(Fh::Obj {
            export: export.clone(),
            fid,
        })
    }

    /// The root of the tree: the export at `/`, or the pseudo root.
    pub fn root(&self, c: &Compound<'_>) -> Fh {
        let snap = &c.snap;
        match snap.pseudo.root_export.and_then(|id| snap.exports.get(id)) {
            Some(e) => Fh::Obj {
                export: e.clone(),
                fid: e.backend.root(),
            },
            None => Fh::Pseudo(0),
        }
    }

    /// Runs a backend call on the blocking pool.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.pool.run(f).await
    }

    /// Runs a read-only backend call inline when it can finish without
    /// waiting for a disk, else on the pool (see [`Pool::run_fast`]).
    pub async fn run_fast<T: Send + 'static>(
        &self,
        b: &dyn vfs::Backend,
        f: impl Fn() -> T + Send + 'static,
    ) -> T {
        self.pool.run_fast(b, f).await
    }

    pub async fn dispatch(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        if ctx.proc_ != 1 {
            return Err(CallError::ProcUnavail);
        }
        let args_sum = rpc::drc::args_sum(&args.rest());
        let args_len = args.remaining();
        let garbage = |what: &str| {
            if ctx.client.log_allowed() {
                warn!(peer = %ctx.peer, xid = ctx.xid, what, "GARBAGE_ARGS in COMPOUND header");
            }
            CallError::GarbageArgs
        };
        let tag = args.opaque(None).map_err(|_| garbage("tag"))?;
        let minor = args.u32().map_err(|_| garbage("minorversion"))?;
        let nops = args.count(None).map_err(|_| garbage("operation count"))? as u32;
        let start = out.len();
        out.put_u32(0);
        xdr::pack_opaque(&tag, out);
        let count_at = out.len();
        out.put_u32(0);
        if minor > 2 {
            set_status(out, start, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
            ctx.set_status(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH as u32);
            return Ok(());
        }
        let mut c = Compound::new(self, ctx, minor);
        let mut done = 0u32;
        let mut status = Nfsstat4::NFS4_OK;
        let mut changing = false;
        for i in 0..nops {
            // Peek at the operation number so an unknown one becomes
            // OP_ILLEGAL instead of failing the whole call.
            let op = args.clone().u32().unwrap_or(OP_ILLEGAL);
            changing |= changes_something(op);
            let at = out.len();
            if op > max_op(minor) || op < OP_ACCESS {
                out.put_u32(OP_ILLEGAL);
                out.put_u32(Nfsstat4::NFS4ERR_OP_ILLEGAL as u32);
                status = Nfsstat4::NFS4ERR_OP_ILLEGAL;
                done += 1;
                break;
            }
            if i >= MAX_OPS {
                put_error(out, op, Nfsstat4::NFS4ERR_RESOURCE);
                status = Nfsstat4::NFS4ERR_RESOURCE;
                done += 1;
                break;
            }
            // Session rules: SEQUENCE first, or one sessionless op alone.
            // After a SEQUENCE, EXCHANGE_ID (RFC 8881 §18.35.3: "MAY be
            // sent in a COMPOUND procedure that starts with SEQUENCE"),
            // CREATE_SESSION (§18.36.3: "with or without a preceding
            // SEQUENCE"), DESTROY_SESSION (§18.37.3) and DESTROY_CLIENTID
            // (§18.50.3) run like any other operation; NOT_ONLY_OP is only
            // for a COMPOUND that does not start with SEQUENCE (§15.1.3.3).
            // BIND_CONN_TO_SESSION "MUST be the only operation" (§18.34.3).
            if minor > 0 {
                let refuse = if i == 0 {
                    if op == OP_SEQUENCE {
                        None
                    } else if sessionless(op) {
                        (nops > 1).then_some(Nfsstat4::NFS4ERR_NOT_ONLY_OP)
                    } else {
                        Some(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
                    }
                } else if op == OP_SEQUENCE {
                    Some(Nfsstat4::NFS4ERR_SEQUENCE_POS)
                } else if op == OP_BIND_CONN_TO_SESSION {
                    Some(Nfsstat4::NFS4ERR_NOT_ONLY_OP)
                } else if c
                    .slot
                    .as_ref()
                    .is_some_and(|s| i >= s.session().fore.ca_maxoperations)
                {
                    Some(Nfsstat4::NFS4ERR_TOO_MANY_OPS)
                } else {
                    None
                };
                if let Some(s) = refuse {
                    put_error(out, op, s);
                    status = s;
                    done += 1;
                    break;
                }
            }
            // Service time for metrics: real time, not the lease clock.
            let t0 = Instant::now();
            let a = match NfsArgop4::unpack(&mut args) {
                Ok(a) => a,
                Err(e) => {
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid = ctx.xid, op = op_name(op), error = %e, "NFS4ERR_BADXDR");
                    }
                    put_error(out, op, Nfsstat4::NFS4ERR_BADXDR);
                    status = Nfsstat4::NFS4ERR_BADXDR;
                    done += 1;
                    break;
                }
            };
            if op == OP_SEQUENCE {
                match session::sequence(&mut c, a, args_sum, args_len, out.len() - start, out) {
                    session::Seq::Go => {}
                    session::Seq::Replay(r) => {
                        if let Some(m) = &self.metrics {
                            m.server
                                .slot_replays
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        out.truncate(start);
                        out.extend_from_slice(&r);
                        return Ok(());
                    }
                    session::Seq::Failed(s) => {
                        status = s;
                        done += 1;
                        break;
                    }
                }
            } else {
                self.op(&mut c, op, a, out).await;
                if !c.snap.exports.call_everywhere(ctx)
                    && out[at + 4..at + 8] == [0; 4]
                    && secinfo::wrong_sec(&c, op, args.clone().u32().ok())
                {
                    out.truncate(at);
                    ctx.detach_from(at);
                    put_error(out, op, Nfsstat4::NFS4ERR_WRONGSEC);
                }
                // RFC 8881 §2.10.6.4: a reply that outgrows the session's
                // ca_maxresponsesize ends, in place of the result that
                // overflowed, with REP_TOO_BIG; one sa_cachethis asks to
                // cache that outgrows ca_maxresponsesize_cached, with
                // REP_TOO_BIG_TO_CACHE, and is cached like that (a retry
                // must not run it again). Only the COMPOUND is measured.
                // (READ data in a pipe counts: see rpc::zero_copy.)
                let over = c.slot.as_ref().and_then(|s| {
                    let fore = &s.session().fore;
                    let len = out.len() - start + ctx.attached_len();
                    if len > fore.ca_maxresponsesize as usize {
                        Some(Nfsstat4::NFS4ERR_REP_TOO_BIG)
                    } else if c.cachethis && len > fore.ca_maxresponsesize_cached as usize {
                        Some(Nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)
                    } else {
                        None
                    }
                });
                if let Some(s) = over {
                    out.truncate(at);
                    ctx.detach_from(at);
                    put_error(out, op, s);
                }
            }
            done += 1;
            let s = u32::from_be_bytes(out[at + 4..at + 8].try_into().unwrap());
            tracing::trace!(peer = %ctx.peer, xid = ctx.xid, minor, op = op_name(op), status = s, "NFSv4 operation");
            if let Some(m) = &self.metrics {
                m.op_end(
                    metrics::ops::nfs4_op_slot(op),
                    &ctx.client,
                    s,
                    t0.elapsed().as_nanos() as u64,
                );
            }
            if s != 0 {
                status = Nfsstat4::from_i32(s as i32).unwrap_or(Nfsstat4::NFS4ERR_SERVERFAULT);
                if tracing::enabled!(tracing::Level::DEBUG) && ctx.client.log_allowed() {
                    debug!(peer = %ctx.peer, xid = ctx.xid, op = op_name(op), ?status, "NFSv4 operation failed");
                }
                break;
            }
        }
        set_status(out, start, status);
        out[count_at..count_at + 4].copy_from_slice(&done.to_be_bytes());
        ctx.set_status(status as u32);
        if minor == 0 && (!changing || out.len() - start > DRC_MAX_REPLY) {
            ctx.skip_cache();
        }
        if let Some(slot) = c.slot.take() {
            // Bounded by the check after each operation (plus one status).
            let reply = c.cachethis.then(|| Bytes::copy_from_slice(&out[start..]));
            slot.finish(reply);
        }
        Ok(())
    }

    /// Runs one operation, packing its result (operation number first).
    /// `op` is `a`'s operation number, as the dispatcher read it.
    async fn op(&self, c: &mut Compound<'_>, op: u32, a: NfsArgop4, out: &mut BytesMut) {
        use NfsArgop4 as A;
        use NfsResop4 as R;
        let v40 = c.minor == 0;
        // NFSv4.0 open and lock owners sequence their requests themselves.
        let seq = if v40 { v40::sequenced(c, &a) } else { None };
        if let Some(k) = &seq {
            // A stateful operation renews the lease (RFC 7530 §9.6) and
            // brings a courteous client back with its state.
            let _ = self.state.renew(k.0, self.clock.now());
            if let Some(reply) = v40::before(c, op, k) {
                out.extend_from_slice(&reply);
                return;
            }
        }
        let start = out.len();
        let r = match a {
            A::OP_ACCESS(a) => R::OP_ACCESS(getattr::access(c, a).await),
            A::OP_CLOSE(a) => R::OP_CLOSE(open::close(c, a).await),
            A::OP_COMMIT(a) => R::OP_COMMIT(io::commit(c, a).await),
            A::OP_CREATE(a) => R::OP_CREATE(dir::create(c, a).await),
            A::OP_DELEGPURGE(_) => R::OP_DELEGPURGE(Delegpurge4res {
                status: Nfsstat4::NFS4ERR_NOTSUPP,
            }),
            A::OP_DELEGRETURN(a) => R::OP_DELEGRETURN(open::delegreturn(c, a)),
            A::OP_GETATTR(a) => {
                getattr::getattr(c, a, out).await;
                return;
            }
            A::OP_GETFH => R::OP_GETFH(fh::getfh(c)),
            A::OP_LINK(a) => R::OP_LINK(dir::link(c, a).await),
            A::OP_LOCK(a) => R::OP_LOCK(lock::lock(c, a).await),
            A::OP_LOCKT(a) => R::OP_LOCKT(lock::lockt(c, a).await),
            A::OP_LOCKU(a) => R::OP_LOCKU(lock::locku(c, a).await),
            A::OP_LOOKUP(a) => R::OP_LOOKUP(fh::lookup(c, a).await),
            A::OP_LOOKUPP => R::OP_LOOKUPP(fh::lookupp(c).await),
            A::OP_NVERIFY(a) => R::OP_NVERIFY(getattr::nverify(c, a).await),
            A::OP_OPEN(a) => R::OP_OPEN(open::open(c, a).await),
            A::OP_OPENATTR(_) => R::OP_OPENATTR(Openattr4res {
                status: Nfsstat4::NFS4ERR_NOTSUPP,
            }),
            A::OP_OPEN_CONFIRM(a) if v40 => R::OP_OPEN_CONFIRM(v40::open_confirm(c, a)),
            A::OP_OPEN_DOWNGRADE(a) => R::OP_OPEN_DOWNGRADE(open::downgrade(c, a)),
            A::OP_PUTFH(a) => R::OP_PUTFH(fh::putfh(c, a)),
            A::OP_PUTPUBFH => R::OP_PUTPUBFH(Putpubfh4res {
                status: fh::putrootfh(c),
            }),
            A::OP_PUTROOTFH => R::OP_PUTROOTFH(Putrootfh4res {
                status: fh::putrootfh(c),
            }),
            A::OP_READ(a) => {
                io::read(c, a, out).await;
                return;
            }
            A::OP_READDIR(a) => {
                readdir::readdir(c, a, out).await;
                return;
            }
            A::OP_READLINK => R::OP_READLINK(dir::readlink(c).await),
            A::OP_REMOVE(a) => R::OP_REMOVE(dir::remove(c, a).await),
            A::OP_RENAME(a) => R::OP_RENAME(dir::rename(c, a).await),
            A::OP_RENEW(a) if v40 => R::OP_RENEW(v40::renew(c, a)),
            A::OP_RESTOREFH => R::OP_RESTOREFH(Restorefh4res {
                status: fh::restorefh(c),
            }),
            A::OP_SAVEFH => R::OP_SAVEFH(Savefh4res {
                status: fh::savefh(c),
            }),
            A::OP_SECINFO(a) => R::OP_SECINFO(secinfo::secinfo(c, a).await),
            A::OP_SETATTR(a) => R::OP_SETATTR(getattr::setattr(c, a).await),
            A::OP_SETCLIENTID(a) if v40 => R::OP_SETCLIENTID(v40::setclientid(c, a)),
            A::OP_SETCLIENTID_CONFIRM(a) if v40 => {
                R::OP_SETCLIENTID_CONFIRM(v40::setclientid_confirm(c, a).await)
            }
            A::OP_VERIFY(a) => R::OP_VERIFY(getattr::verify(c, a).await),
            A::OP_WRITE(a) => R::OP_WRITE(io::write(c, a).await),
            A::OP_RELEASE_LOCKOWNER(a) if v40 => {
                R::OP_RELEASE_LOCKOWNER(lock::release_lockowner(c, a))
            }
            A::OP_BIND_CONN_TO_SESSION(a) => R::OP_BIND_CONN_TO_SESSION(session::bind_conn(c, a)),
            A::OP_BACKCHANNEL_CTL(a) => R::OP_BACKCHANNEL_CTL(session::backchannel_ctl(c, a)),
            A::OP_EXCHANGE_ID(a) => R::OP_EXCHANGE_ID(session::exchange_id(c, a)),
            A::OP_CREATE_SESSION(a) => R::OP_CREATE_SESSION(session::create_session(c, a).await),
            A::OP_DESTROY_SESSION(a) => R::OP_DESTROY_SESSION(session::destroy_session(c, a)),
            A::OP_FREE_STATEID(a) => R::OP_FREE_STATEID(FreeStateid4res {
                // The current stateid is resolved too (§16.2.3.1.2).
                fsr_status: match c
                    .clientid()
                    .and_then(|id| c.stateid(&a.fsa_stateid).map(|sid| (id, sid)))
                {
                    Ok((id, sid)) => self.state.free_stateid(id, &sid),
                    Err(f) => f.status,
                },
            }),
            A::OP_SECINFO_NO_NAME(a) => R::OP_SECINFO_NO_NAME(secinfo::secinfo_no_name(c, a).await),
            A::OP_TEST_STATEID(a) => R::OP_TEST_STATEID(match c.clientid() {
                Ok(id) => TestStateid4res::NFS4_OK(TestStateid4resok {
                    tsr_status_codes: a
                        .ts_stateids
                        .iter()
                        .map(|s| self.state.test_stateid(id, s))
                        .collect(),
                }),
                Err(f) => TestStateid4res::Default(f.status),
            }),
            A::OP_DESTROY_CLIENTID(a) => {
                R::OP_DESTROY_CLIENTID(session::destroy_clientid(c, a).await)
            }
            A::OP_RECLAIM_COMPLETE(a) => {
                R::OP_RECLAIM_COMPLETE(session::reclaim_complete(c, a).await)
            }
            A::OP_ALLOCATE(a) => R::OP_ALLOCATE(sparse::allocate(c, a).await),
            A::OP_DEALLOCATE(a) => R::OP_DEALLOCATE(sparse::deallocate(c, a).await),
            A::OP_SEEK(a) => R::OP_SEEK(sparse::seek(c, a).await),
            A::OP_READ_PLUS(a) => {
                sparse::read_plus(c, a, out).await;
                return;
            }
            A::OP_COPY(a) => R::OP_COPY(copy::copy(c, a).await),
            A::OP_CLONE(a) => R::OP_CLONE(copy::clone(c, a).await),
            A::OP_IO_ADVISE(a) => R::OP_IO_ADVISE(copy::io_advise(c, a).await),
            A::OP_OFFLOAD_STATUS(a) => R::OP_OFFLOAD_STATUS(copy::offload_status(c, a)),
            A::OP_OFFLOAD_CANCEL(a) => R::OP_OFFLOAD_CANCEL(copy::offload_cancel(c, a)),
            A::OP_GETXATTR(a) => R::OP_GETXATTR(xattr::getxattr(c, a).await),
            A::OP_SETXATTR(a) => R::OP_SETXATTR(xattr::setxattr(c, a).await),
            A::OP_LISTXATTRS(a) => R::OP_LISTXATTRS(xattr::listxattrs(c, a).await),
            A::OP_REMOVEXATTR(a) => R::OP_REMOVEXATTR(xattr::removexattr(c, a).await),
            _ => {
                // Defined but not (yet) implemented here, or belonging to
                // another minor version: NOTSUPP, never a crash.
                out.put_u32(op);
                out.put_u32(Nfsstat4::NFS4ERR_NOTSUPP as u32);
                // Results of these ops are `status` alone or a union whose
                // non-OK arms are void, so the status is the whole result.
                return;
            }
        };
        r.pack(out);
        if let Some(k) = seq {
            v40::after(c, k, &out[start..]);
        }
    }
}

/// What the lease timer does each time: the state core's walk at `now`,
/// its events logged, CB_RECALL_ANY asked for past the delegations'
/// high-water mark, its effects carried out, the courteous-clients gauge
/// kept.
async fn lease_walk(
    state: &state::State,
    records: &Records,
    metrics: &Option<Arc<metrics::Metrics>>,
    max_delegations: usize,
    now: Instant,
) {
    for e in state.reap(now) {
        report(e);
    }
    state.recall_any(max_delegations);
    records.apply().await;
    // NFSv4.0 callback paths go with their clients.
    records
        .backchannels
        .v40
        .retain(|client| state.client_exists(client));
    if let Some(m) = metrics {
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let (up, down) = records.backchannels.path_counts();
        m.server.nfs4_callback_paths_up.store(up as i64, relaxed);
        m.server
            .nfs4_callback_paths_down
            .store(down as i64, relaxed);
        let d = state.take_deleg_counts();
        m.server.delegations_recalled.fetch_add(d.recalled, relaxed);
        m.server.delegations_revoked.fetch_add(d.revoked, relaxed);
        m.server.recall_any_sent.fetch_add(d.recall_any, relaxed);
        m.server.nfs4_courteous_clients.store(
            state.courteous_clients() as i64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// A server instance's epoch, the high half of its client ids and the
/// first word of its stateids: the start time in seconds, mixed with a
/// little randomness so two instances started in one second differ.
/// This instance's epoch, in its client IDs and stateids: the start time
/// in milliseconds (31 bits, as the state keeps them), so two starts at
/// least a millisecond apart within 24 days never share one. Seconds XOR
/// 16 random bits did: any two starts under 18 hours apart matched with
/// chance 2^-16, and the crash cycles (hundreds of restarts) met it, old
/// stateids then looking current.
fn new_epoch() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u32 & 0x7fff_ffff)
        .unwrap_or(1)
}

/// The one writer of the durable client records: takes the effects the
/// state core queued and carries them out in order.
///
/// Policy on failure: a new client is recorded before it is confirmed
/// ([`Records::persist_first`]); if that fails, CREATE_SESSION (or
/// SETCLIENTID_CONFIRM) answers NFS4ERR_DELAY and the client retries
/// until the state directory takes writes again (knfsd logs and confirms
/// anyway; then the client's reclaims after a restart are refused). Other
/// changes (a client forgotten) are logged at error level and the
/// operation still succeeds: the in-memory set holds the change, so the
/// next write that succeeds carries it; until then a restart may let a
/// forgotten client reclaim what it no longer held (which only conflicts
/// with locks taken since by others if they exist, and then is refused
/// as any conflicting lock is).
pub struct Records {
    state: Arc<state::State>,
    store: Option<recovery::Recovery>,
    pool: Pool,
    /// Held while effects are taken and carried out, so a handler and the
    /// lease timer apply them in the order the state core queued them.
    order: tokio::sync::Mutex<()>,
    /// Where recalls are sent.
    backchannels: Arc<backchannel::Backchannels>,
}

impl Records {
    /// Writes `owner` into the durable client record now, before the
    /// client it names is confirmed. A client is refused rather than
    /// confirmed unrecorded: it could not reclaim after a restart, and
    /// the server could not tell its reclaims from anyone's (RFC 8881
    /// §8.4.3). Err: the record could not be written (logged loudly).
    pub async fn persist_first(&self, owner: &Bytes, op: &'static str) -> Result<(), ()> {
        let Some(store) = self.store.clone() else {
            return Ok(());
        };
        let _order = self.order.lock().await;
        let o = owner.clone();
        match self.pool.run(move || store.add(&o)).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
                tracing::error!(
                    owner,
                    op,
                    error = %e,
                    "the state directory cannot record a new NFSv4 client for reclaim after a restart (read-only or full?): the client is refused with NFS4ERR_DELAY until it can"
                );
                Err(())
            }
        }
    }

    /// A client finished reclaiming: in a cluster its record moves to
    /// this head's current epoch (and out of a failed head's), which is
    /// how the other heads learn that its recovery is over. A failure is
    /// logged; the grace then lasts until its bound.
    pub async fn reclaimed(&self, clientid: u64) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Some(owner) = self.state.client_owner(clientid) else {
            return;
        };
        if !self.state.reclaimed_here(&owner) {
            return;
        }
        let _order = self.order.lock().await;
        let o = owner.clone();
        if let Err(e) = self.pool.run(move || store.reclaimed(&o)).await {
            let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
            tracing::error!(owner, error = %e, "cannot move the reclaimed NFSv4 client's record: the grace lasts until its bound");
        }
    }

    /// Sends CB_RECALL on the client's back channel, without waiting: the
    /// state core revokes the delegation if it is not returned within a
    /// lease, whatever happens to the call. A client with no usable back
    /// channel is not called (it gets no new delegations either).
    fn recall(&self, client: u64, stateid: Stateid4, fh: Bytes) {
        let bc = self.backchannels.for_client(client);
        // An NFSv4.0 client's path that is down is tried again first.
        if bc.is_none() && !self.backchannels.v40.known(client) {
            debug!(client, "no back channel to recall a delegation on");
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let all = self.backchannels.clone();
        tokio::spawn(async move {
            let bc = match bc {
                Some(bc) => bc,
                None => match all.v40.revive(client).await {
                    Some(bc) => bc,
                    None => return debug!(client, "callback path down: CB_RECALL not sent"),
                },
            };
            let op = NfsCbArgop4::OP_CB_RECALL(CbRecall4args {
                stateid,
                truncate: false,
                fh: NfsFh4(fh),
            });
            match bc.compound(vec![op], backchannel::CALL_TIMEOUT).await {
                Ok((Nfsstat4::NFS4_OK, _)) => {}
                Ok((status, _)) => debug!(client, ?status, "CB_RECALL refused"),
                Err(e) => debug!(client, error = ?e, "CB_RECALL failed"),
            }
        });
    }

    /// Sends CB_RECALL_ANY on the client's back channel without waiting;
    /// the state core hears when it is over, so one is in flight per
    /// client. What the client returns comes back as DELEGRETURNs.
    fn recall_any(&self, client: u64, keep: u32, mask: u32) {
        let state = self.state.clone();
        let Some(bc) = self.backchannels.for_client(client) else {
            debug!(client, "no back channel for CB_RECALL_ANY");
            state.recall_any_done(client);
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            state.recall_any_done(client);
            return;
        }
        tokio::spawn(async move {
            let op = NfsCbArgop4::OP_CB_RECALL_ANY(CbRecallAny4args {
                craa_objects_to_keep: keep,
                craa_type_mask: vec![mask],
            });
            match bc.compound(vec![op], backchannel::CALL_TIMEOUT).await {
                Ok((Nfsstat4::NFS4_OK, _)) => {}
                Ok((status, _)) => debug!(client, ?status, "CB_RECALL_ANY refused"),
                Err(e) => debug!(client, error = ?e, "CB_RECALL_ANY failed"),
            }
            state.recall_any_done(client);
        });
    }

    /// Carries out the queued effects; returns when they are on disk (a
    /// handler awaits this before replying, e.g. to CREATE_SESSION).
    pub async fn apply(&self) {
        let _order = self.order.lock().await;
        for e in self.state.take_effects() {
            let (owner, persist) = match e {
                state::Effect::PersistClient { owner } => (owner, true),
                state::Effect::ForgetClient { owner } => (owner, false),
                state::Effect::Recall {
                    client,
                    stateid,
                    fh,
                } => {
                    self.recall(client, stateid, fh);
                    continue;
                }
                state::Effect::RecallAny { client, keep, mask } => {
                    self.recall_any(client, keep, mask);
                    continue;
                }
            };
            let Some(store) = self.store.clone() else {
                continue;
            };
            let o = owner.clone();
            // One small file write and fsync, on the pool.
            let r = self
                .pool
                .run(move || {
                    if persist {
                        store.add(&o)
                    } else {
                        store.remove(&o)
                    }
                })
                .await;
            if let Err(e) = r {
                let owner: String = owner.iter().map(|b| format!("{b:02x}")).collect();
                if persist {
                    tracing::error!(owner, error = %e, "the state directory cannot record the NFSv4 client for reclaim after a restart; retried with the next record change");
                } else {
                    tracing::error!(owner, error = %e, "the state directory cannot remove the NFSv4 client's reclaim record; retried with the next record change");
                }
            }
        }
    }
}

/// Logs one change of the client table.
fn report(e: state::Event) {
    use state::Event;
    let id = |c: u64| format!("{c:016x}");
    match e {
        Event::Courteous { clientid } => {
            tracing::info!(
                clientid = id(clientid),
                "NFSv4 client lease expired: courteous, its state is kept until another client needs it"
            );
        }
        Event::Reactivated { clientid } => {
            tracing::info!(
                clientid = id(clientid),
                "courteous NFSv4 client is back: active again with its state"
            );
        }
        Event::Expired {
            why: state::Why::Unconfirmed,
            clientid,
            ..
        } => {
            // Routine (a client that never finished SETCLIENTID or
            // EXCHANGE_ID); it held nothing and was never recorded.
            tracing::debug!(
                clientid = id(clientid),
                "unconfirmed NFSv4 client record dropped after a lease"
            );
        }
        Event::Expired {
            why: state::Why::TableFull,
            clientid,
            ..
        } => {
            // Routine under a crowd of one-shot clients (counted in the
            // limit metrics when none can give way); it held nothing.
            tracing::debug!(
                clientid = id(clientid),
                "NFSv4 client record without state dropped: the client table is full"
            );
        }
        Event::Expired { clientid, why, .. } => {
            tracing::info!(
                clientid = id(clientid),
                reason = why.as_str(),
                "NFSv4 client expired: its state is released"
            );
        }
        Event::Recovered { clientid, .. } => {
            tracing::debug!(
                clientid = id(clientid),
                "NFSv4 client freed its revoked state: recorded for reclaim again"
            );
        }
    }
}

/// An operation's result that is an error decided outside its handler:
/// the operation number and status, and what the result carries whatever
/// the status (SETATTR4res always has its `attrsset` bitmap, here empty).
fn put_error(out: &mut BytesMut, op: u32, s: Nfsstat4) {
    out.put_u32(op);
    out.put_u32(s as u32);
    if op == OP_SETATTR {
        out.put_u32(0);
    }
}

fn set_status(out: &mut BytesMut, start: usize, s: Nfsstat4) {
    out[start..start + 4].copy_from_slice(&(s as u32).to_be_bytes());
}

/// An operation's name for logs and metrics ("OP_READ").
pub fn op_name(op: u32) -> &'static str {
    static NAMES: std::sync::OnceLock<std::collections::HashMap<u32, &'static str>> =
        std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..=OP_REMOVEXATTR)
            .chain([OP_ILLEGAL])
            .filter_map(|n| {
                NfsOpnum4::from_i32(n as i32)
                    .map(|o| (n, &*Box::leak(format!("{o:?}").into_boxed_str())))
            })
            .collect()
    });
    names.get(&op).copied().unwrap_or("OP_ILLEGAL")
}

/// Logs a failed operation once: expected statuses at debug, others at warn,
/// rate-limited per client.
pub fn log_fail(c: &Compound<'_>, op: &'static str, f: &Fail) {
    use Nfsstat4::*;
    let ctx = c.ctx;
    match f.status {
        NFS4ERR_NOENT | NFS4ERR_EXIST | NFS4ERR_NOTEMPTY | NFS4ERR_NOTDIR | NFS4ERR_ISDIR
        | NFS4ERR_NAMETOOLONG | NFS4ERR_DENIED | NFS4ERR_GRACE | NFS4ERR_DELAY
        | NFS4ERR_SYMLINK | NFS4ERR_OLD_STATEID | NFS4ERR_SAME | NFS4ERR_NOT_SAME
        // EXCHANGE_ID's SP4_MACH_CRED, which Linux asks for under krb5i/krb5p
        // and then retries as SP4_NONE: a negotiation, not an error.
        | NFS4ERR_ENCR_ALG_UNSUPP => {
            if tracing::enabled!(tracing::Level::DEBUG) && ctx.client.log_allowed() {
                debug!(peer = %ctx.peer, xid = ctx.xid, op, status = ?f.status, reason = f.why, "NFSv4 error")
            }
        }
        _ => {
            if ctx.client.log_allowed() {
                warn!(peer = %ctx.peer, xid = ctx.xid, op, status = ?f.status, reason = f.why, "NFSv4 error")
            }
        }
    }
}

/// Largest READ / WRITE payload (maxread / maxwrite).
pub const MAX_IO: u32 = 1 << 20;

#[cfg(test)]
mod epoch_tests {
    #[test]
    fn starts_a_few_milliseconds_apart_have_different_epochs() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            assert!(seen.insert(super::new_epoch()), "an epoch came twice");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
