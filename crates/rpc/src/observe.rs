//! How the RPC layer tells the outside world what it did, without knowing
//! who counts: an [`Observer`] for server-wide counters and per-call
//! accounting, and a [`PeerStats`] handle per client address that calls
//! carry (log rate limit, per-client counters). The `metrics` crate
//! implements both; `rpc` depends on neither it nor any counter layout.

use crate::gss::window::DropReason;
use std::any::Any;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// Pseudo statuses for replies that are RPC-level errors, not program results.
pub const RPC_PROC_UNAVAIL: u32 = 0x8000_0001;
pub const RPC_GARBAGE_ARGS: u32 = 0x8000_0002;
pub const RPC_SYSTEM_ERR: u32 = 0x8000_0003;
pub const RPC_AUTH_ERROR: u32 = 0x8000_0004;
pub const RPC_DROPPED: u32 = 0x8000_0005;

/// What one finished call adds to the counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallDone {
    /// The reply's status (0 = OK, or one of the `RPC_*` pseudo statuses).
    pub status: u32,
    /// The export the call touched, or `u32::MAX`.
    pub export: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
}

/// A server-wide event worth a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A record dropped or refused before reaching a program.
    BadCall,
    /// A retransmission answered from the duplicate request cache.
    DrcHit,
    /// A retransmission dropped because the original is still executing.
    DrcInProgress,
    /// An RPCSEC_GSS call dropped, by reason.
    GssDroppedSeqWindow,
    GssDroppedBadChecksum,
    GssDroppedOther,
    GssContextCreated,
    GssContextExpired,
    /// The number of live RPCSEC_GSS contexts changed by this much.
    GssContextsLive(i64),
    /// A connection closed by the server after its idle timeout.
    ClosedIdle,
    /// A connection closed because a record begun on it did not go on.
    ClosedStalledRecord,
    /// A connection closed because its client did not read its replies.
    ClosedUnread,
    /// A connection's calls not read for a while: its replies waiting to
    /// be written passed the limit.
    ReadingPaused,
    /// A configured bound was reached (a refusal, an eviction or a wait).
    LimitReached(Limit),
    /// A READ reply sent with this many bytes of file data spliced from
    /// the page cache (`rpc::zero_copy`).
    ReadSpliced(u64),
}

/// The server's configurable resource bounds, each with a metric of its
/// use and of the times it was reached (`tarn_limit*{limit="..."}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// Open connections, all clients: further ones are closed at accept.
    Connections,
    /// Open connections from one client address: likewise.
    ConnectionsPerClient,
    /// Calls of one connection executing at once: the reader stops reading.
    CallsPerConnection,
    /// Bytes of cached replies in the duplicate request cache: oldest evicted.
    DrcBytes,
    /// NFSv4 client records: EXCHANGE_ID and SETCLIENTID refused.
    Nfs4Clients,
    /// Open stateids of one NFSv4 client: OPEN refused.
    OpensPerClient,
    /// Lock stateids of one NFSv4 client: LOCK refused.
    LocksPerClient,
    /// Outstanding delegations: OPEN grants none.
    Delegations,
    /// RPCSEC_GSS contexts: the least recently used idle one is evicted.
    GssContexts,
}

impl Limit {
    pub const ALL: [Limit; 9] = [
        Limit::Connections,
        Limit::ConnectionsPerClient,
        Limit::CallsPerConnection,
        Limit::DrcBytes,
        Limit::Nfs4Clients,
        Limit::OpensPerClient,
        Limit::LocksPerClient,
        Limit::Delegations,
        Limit::GssContexts,
    ];

    /// The metric label and the `[limits]` key's stem.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Connections => "connections",
            Limit::ConnectionsPerClient => "connections_per_client",
            Limit::CallsPerConnection => "calls_per_connection",
            Limit::DrcBytes => "drc_bytes",
            Limit::Nfs4Clients => "nfs4_clients",
            Limit::OpensPerClient => "opens_per_client",
            Limit::LocksPerClient => "locks_per_client",
            Limit::Delegations => "delegations",
            Limit::GssContexts => "gss_contexts",
        }
    }

    pub fn index(self) -> usize {
        Limit::ALL.iter().position(|l| *l == self).expect("in ALL")
    }
}

/// Reports a bound's setting and current use (largest for per-client and
/// per-connection bounds, total otherwise).
pub type LimitProbe = Box<dyn Fn() -> u64 + Send + Sync>;

/// One client address's statistics and log limiter, resolved once per
/// connection and carried by every call ([`crate::CallContext::client`]).
/// Methods other than [`PeerStats::log_allowed`] default to doing nothing.
pub trait PeerStats: Any + Send + Sync + fmt::Debug {
    /// Whether a log line about this client may be written now (a per-client
    /// budget, so one misbehaving client cannot flood the log).
    fn log_allowed(&self) -> bool;

    /// The client uses an RPCSEC_GSS context of this principal that expires then.
    fn note_gss(&self, expires_unix: u64, principal: Option<&Arc<str>>) {
        let _ = (expires_unix, principal);
    }

    /// One of the client's RPCSEC_GSS calls was dropped.
    fn gss_dropped(&self, why: DropReason) {
        let _ = why;
    }

    /// A connection of the client maps its certificate to a user (mTLS).
    fn note_tls_identity(&self, who: &str) {
        let _ = who;
    }

    /// A GETATTR of this file handle (for the attribute-storm diagnosis).
    fn record_getattr(&self, fh: &[u8]) {
        let _ = fh;
    }

    /// A WRITE of `count` bytes, synchronous or not (for the small-sync-write diagnosis).
    fn record_write(&self, count: u32, sync: bool) {
        let _ = (count, sync);
    }

    /// An export access decision for this client missed the auth cache.
    fn auth_cache_miss(&self) {}

    /// The concrete statistics, for an implementation that needs its own type back.
    fn as_any(&self) -> &dyn Any;
}

/// A shared handle is a handle too (so `&ctx.client` can be passed where a
/// `&dyn PeerStats` is asked).
impl<T: PeerStats + ?Sized> PeerStats for Arc<T> {
    fn log_allowed(&self) -> bool {
        (**self).log_allowed()
    }
    fn note_gss(&self, expires_unix: u64, principal: Option<&Arc<str>>) {
        (**self).note_gss(expires_unix, principal)
    }
    fn gss_dropped(&self, why: DropReason) {
        (**self).gss_dropped(why)
    }
    fn note_tls_identity(&self, who: &str) {
        (**self).note_tls_identity(who)
    }
    fn record_getattr(&self, fh: &[u8]) {
        (**self).record_getattr(fh)
    }
    fn record_write(&self, count: u32, sync: bool) {
        (**self).record_write(count, sync)
    }
    fn auth_cache_miss(&self) {
        (**self).auth_cache_miss()
    }
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
}

/// Where the server reports what it does. Every method has a default that
/// does nothing, except [`Observer::connection_opened`].
pub trait Observer: Send + Sync + 'static {
    /// A connection from `ip` opened: the handle its calls carry.
    fn connection_opened(&self, ip: IpAddr) -> Arc<dyn PeerStats>;

    fn connection_closed(&self, peer: &dyn PeerStats) {
        let _ = peer;
    }

    /// Whether calls are timed (queue and service latency): when false the
    /// driver reads no clock for [`CallDone`].
    fn timed(&self) -> bool {
        false
    }

    fn count(&self, e: Event) {
        let _ = e;
    }

    /// An RPC-with-TLS handshake ended: the protection it gave, or why it
    /// failed (a short label: "bad-certificate", "unknown-ca", "timeout"...).
    fn tls_handshake(&self, r: Result<crate::transport::XprtSec, &'static str>) {
        let _ = r;
    }

    /// A TLS connection's records go through the kernel (kTLS: true) or
    /// rustls (false).
    fn tls_path(&self, kernel: bool) {
        let _ = kernel;
    }

    /// A call starts executing (after its queue wait); `slot` is its
    /// procedure's metric slot ([`crate::Procedure`]).
    fn call_begin(&self, slot: Option<usize>, peer: &dyn PeerStats) {
        let _ = (slot, peer);
    }

    /// A call finished (`begun`: whether [`Observer::call_begin`] was called for it).
    fn call_end(&self, slot: Option<usize>, peer: &dyn PeerStats, d: &CallDone, begun: bool) {
        let _ = (slot, peer, d, begun);
    }

    /// Registers a cache whose (entries, bytes) are reported (the DRC).
    fn add_cache_probe(&self, name: &str, f: Box<dyn Fn() -> (u64, u64) + Send + Sync>) {
        let _ = (name, f);
    }

    /// Registers a bound: its setting and a probe of its current use.
    fn add_limit(&self, limit: Limit, max: u64, in_use: LimitProbe) {
        let _ = (limit, max, in_use);
    }

    /// The procedure tables of the programs served, to name metric slots.
    fn programs(&self, programs: &'static [&'static crate::Program]) {
        let _ = programs;
    }
}

/// Counts nothing; every log line is allowed. For servers started without
/// metrics (tests, tools).
#[derive(Debug, Default)]
pub struct NoObserver;

/// The peer handle of [`NoObserver`].
#[derive(Debug, Default)]
pub struct NoStats;

impl PeerStats for NoStats {
    fn log_allowed(&self) -> bool {
        true
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Observer for NoObserver {
    fn connection_opened(&self, _: IpAddr) -> Arc<dyn PeerStats> {
        Arc::new(NoStats)
    }
}
