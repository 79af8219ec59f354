//! Tarn's metrics and diagnostics (docs/design.md rule 6).
//!
//! The hot path pays nanoseconds: per-op and per-export counters live in a
//! fixed array per shard (a shard per worker thread, cache-line aligned),
//! indexed by the op's slot (from the procedure tables, [`rpc::Program`])
//! and the export id; latency
//! goes into fixed log2 buckets; per-client counters hang off an `Arc`
//! that a connection resolves once ([`client::ClientTable`]). No call
//! allocates, locks or looks anything up to be counted. Readers (the
//! admin socket, `/metrics`) sum the shards into a [`snapshot::Snapshot`].

#![forbid(unsafe_code)]

pub mod client;
pub mod doctor;
pub mod endpoint;
pub mod ops;
pub mod prom;
pub mod snapshot;
pub mod tools;

pub use client::{ClientStats, ClientTable};
/// The TLS rules of `tarn doctor`, by their path from before they moved.
pub use doctor::tls as doctor_tls;
pub use rpc::observe::CallDone;
pub use snapshot::Snapshot;

use ops::{OpNames, N_STATUS, OP_SLOTS};
use rpc::observe::{Event, Observer, PeerStats};
use std::cell::Cell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Aligns its content to its own cache lines (128 bytes: adjacent-line prefetch).
#[repr(align(128))]
#[derive(Default)]
pub struct Padded<T>(pub T);

/// Counter shards, each owned by one thread (the first SHARDS threads that
/// count: the runtime's workers), plus one shared shard for any others.
pub const SHARDS: usize = 16;

/// Where this thread counts: `(index, exclusive)`. A thread that owns its
/// shard adds with a plain load and store (no locked instruction: nobody
/// else writes there; readers see whole values); the shared shard (index
/// `n`) takes atomic read-modify-writes.
#[inline]
pub(crate) fn shard_slot(n: usize) -> (usize, bool) {
    let i = shard_index();
    if i < n {
        (i, true)
    } else {
        (n, false)
    }
}

/// `add` (u64) and `add_i` (i64): a counter's add, a plain load and
/// store when `excl` (the caller's own shard: no other thread writes it),
/// else an atomic add.
macro_rules! adders {
    ($($name:ident: $atomic:ty, $int:ty;)*) => {
        $(#[inline]
        pub(crate) fn $name(excl: bool, a: &$atomic, v: $int) {
            if excl {
                a.store(a.load(Relaxed).wrapping_add(v), Relaxed);
            } else {
                a.fetch_add(v, Relaxed);
            }
        })*
    };
}

adders! {
    add: AtomicU64, u64;
    add_i: AtomicI64, i64;
}

/// A small number unique to this thread, given at its first count.
#[inline]
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static MINE: Cell<usize> = const { Cell::new(usize::MAX) });
    MINE.with(|m| {
        let v = m.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Relaxed);
        m.set(v);
        v
    })
}

/// Latency buckets: bucket i holds durations up to 2^i microseconds; the last is +Inf.
pub const BUCKETS: usize = 24;

#[inline]
pub fn bucket(ns: u64) -> usize {
    let us = ns / 1000;
    if us <= 1 {
        0
    } else {
        ((64 - (us - 1).leading_zeros()) as usize).min(BUCKETS - 1)
    }
}

/// Upper bound of bucket i in microseconds (None for the last, +Inf).
pub fn bucket_le_us(i: usize) -> Option<u64> {
    (i < BUCKETS - 1).then(|| 1u64 << i)
}

/// What a call counts alike for its operation and for its client.
#[derive(Default)]
pub(crate) struct CallCounts {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub queue_ns: AtomicU64,
    pub service_ns: AtomicU64,
    pub in_flight: AtomicI64,
}

impl CallCounts {
    /// A call finished (`begun`: it was counted in flight); its error,
    /// if any, is counted by the caller.
    #[inline]
    fn done(&self, x: bool, d: &CallDone, begun: bool) {
        add(x, &self.calls, 1);
        add(x, &self.bytes_in, d.bytes_in);
        add(x, &self.bytes_out, d.bytes_out);
        add(x, &self.queue_ns, d.queue_ns);
        add(x, &self.service_ns, d.service_ns);
        if begun {
            add_i(x, &self.in_flight, -1);
        }
    }
}

#[derive(Default)]
pub(crate) struct OpCell {
    pub n: CallCounts,
    pub service_hist: [AtomicU64; BUCKETS],
    pub rtt_hist: [AtomicU64; BUCKETS],
}

#[derive(Default)]
pub(crate) struct ExportCell {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub service_ns: AtomicU64,
}

/// Exports with their own counters; ids beyond share the last cell.
pub const MAX_EXPORTS: usize = 32;

pub(crate) struct Shard {
    pub ops: [OpCell; OP_SLOTS],
    pub exports: [Padded<ExportCell>; MAX_EXPORTS],
}

/// Server-wide counters. The ones for things that do not exist yet are
/// fed by the issues that bring them (noted per field); until then they
/// stay zero and the doctor rules reading them stay silent.
#[derive(Default)]
pub struct ServerCounters {
    /// Times each bound ([`rpc::observe::Limit`], by index) was reached.
    pub limit_reached: [AtomicU64; rpc::observe::Limit::ALL.len()],
    pub connections_total: AtomicU64,
    pub connections_open: AtomicI64,
    /// Retransmissions answered from the duplicate request cache.
    pub drc_hits: AtomicU64,
    /// Retransmissions dropped because the original is still executing.
    pub drc_in_progress: AtomicU64,
    /// Records dropped or refused before reaching a program (garbage, bad credentials).
    pub bad_calls: AtomicU64,
    /// NFSv4.1 retransmissions answered from their slot's reply cache.
    pub slot_replays: AtomicU64,
    /// Connections the server closed: idle, a record begun and not
    /// finished in time, replies the client did not read.
    pub closed_idle: AtomicU64,
    pub closed_stalled_record: AtomicU64,
    pub closed_unread: AtomicU64,
    /// RPC-with-TLS handshakes done, by the protection given (tls, mtls).
    pub tls_handshakes: [AtomicU64; 2],
    /// TLS connections by where their records are made: [kernel (kTLS), rustls].
    pub tls_paths: [AtomicU64; 2],
    /// Failed handshakes, by [`rpc::tls::FAILURE_REASONS`].
    pub tls_failures: [AtomicU64; rpc::tls::FAILURE_REASONS.len()],
    /// Times a connection's calls stopped being read because its replies
    /// waiting to be written passed the limit.
    pub reading_paused: AtomicU64,
    /// NFSv4 clients whose lease ran out but whose state is kept until
    /// another client needs it (courteous clients), set by the lease timer.
    pub nfs4_courteous_clients: AtomicI64,
    /// NFSv4 clients whose callback path is up, and down (4.1 clients
    /// that asked for a back channel, 4.0 clients that named a callback
    /// address), set by the lease timer.
    pub nfs4_callback_paths_up: AtomicI64,
    pub nfs4_callback_paths_down: AtomicI64,
    /// Auth cache, copied from its shards once a second.
    pub auth_cache_hits: AtomicU64,
    pub auth_cache_misses: AtomicU64,
    pub auth_cache_evictions: AtomicU64,
    /// RPCSEC_GSS contexts.
    pub gss_contexts_live: AtomicI64,
    pub gss_contexts_created: AtomicU64,
    pub gss_contexts_expired: AtomicU64,
    /// GSS calls dropped, by reason.
    pub gss_dropped_seq_window: AtomicU64,
    pub gss_dropped_bad_checksum: AtomicU64,
    pub gss_dropped_other: AtomicU64,
    /// NFSv4 delegations granted (of either type), recalled and revoked.
    pub delegations_granted: AtomicU64,
    pub delegations_recalled: AtomicU64,
    pub delegations_revoked: AtomicU64,
    /// NFSv4.2 COPYs run in the background: started, completed (CB_OFFLOAD
    /// due), cancelled (OFFLOAD_CANCEL, lease expiry), and bytes copied.
    pub copies_async_started: AtomicU64,
    pub copies_async_completed: AtomicU64,
    pub copies_async_cancelled: AtomicU64,
    pub copy_async_bytes: AtomicU64,
    /// Of those granted, the read and the write ones.
    pub delegations_granted_read: AtomicU64,
    pub delegations_granted_write: AtomicU64,
    /// Directory delegations granted (GET_DIR_DELEGATION), and those
    /// answered GDD4_UNAVAIL, by reason: no back channel, the export's
    /// policy or a backend others change (CephFS), contention (held, being
    /// recalled, recalled within the back-off), the bound reached.
    pub delegations_granted_dir: AtomicU64,
    pub dir_delegations_unavail_no_callback: AtomicU64,
    pub dir_delegations_unavail_policy: AtomicU64,
    pub dir_delegations_unavail_contention: AtomicU64,
    pub dir_delegations_unavail_resource: AtomicU64,
    /// CB_GETATTR calls to write delegation holders, and those that got
    /// no usable answer (the delegation is then recalled).
    pub cb_getattr_sent: AtomicU64,
    pub cb_getattr_failed: AtomicU64,
    /// CB_RECALL_ANY calls queued past the delegations' high-water mark.
    pub recall_any_sent: AtomicU64,
    /// Log lines suppressed by the per-client rate limit.
    pub log_suppressed: AtomicU64,
    /// READ replies sent with their data spliced from the page cache, and
    /// those bytes.
    pub read_spliced_replies: AtomicU64,
    pub read_spliced_bytes: AtomicU64,
}

/// Usage of one export's filesystem (statvfs through the backend).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FsUsage {
    pub total_bytes: u64,
    pub avail_bytes: u64,
    pub free_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
}

/// One export as the snapshot lists it.
#[derive(Debug, Clone, Default)]
pub struct ExportInfo {
    pub id: u32,
    pub path: String,
    pub usage: Option<FsUsage>,
    /// The export's delegation policy ("none", "read", "read-write").
    pub delegations: Option<String>,
}

/// What the NFSv4 server knows of the clients at one address (for `tarn
/// top` and `tarn doctor`): how many delegations they hold and whether
/// their callback paths work.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Nfs4Peer {
    /// NFSv4 client records at this address.
    pub clients: u32,
    /// Delegations they hold.
    pub delegations: u64,
    /// Of those clients, how many have a callback path that works, and
    /// how many have one that is down (a client that asked for none
    /// counts in neither).
    pub callback_up: u32,
    pub callback_down: u32,
}

type ExportProbe = Box<dyn Fn() -> Vec<ExportInfo> + Send + Sync>;
type Nfs4Probe = Box<dyn Fn() -> Vec<(IpAddr, Nfs4Peer)> + Send + Sync>;
type CacheProbe = Box<dyn Fn() -> (u64, u64) + Send + Sync>;
/// An admin-socket command the server adds (`exports`, `reload`): its
/// JSON answer, computed off the runtime's worker threads.
pub type AdminCommand = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

pub struct Metrics {
    enabled: bool,
    started: Instant,
    shards: Box<[Shard]>,
    errors: Box<[AtomicU64]>,
    pub clients: ClientTable,
    pub server: ServerCounters,
    exports: Mutex<Option<ExportProbe>>,
    nfs4: Mutex<Option<Nfs4Probe>>,
    caches: Mutex<Vec<(String, CacheProbe)>>,
    limits: Mutex<Vec<(rpc::observe::Limit, u64, rpc::observe::LimitProbe)>>,
    reached_probes: Mutex<Vec<(rpc::observe::Limit, rpc::observe::LimitProbe)>>,
    admin: Mutex<Vec<(String, AdminCommand)>>,
    /// How often the distinct-file-handle sketches rotate.
    pub fh_window: Duration,
    /// The names of the op slots, from the procedure tables of the
    /// programs served ([`Metrics::set_programs`]).
    names: OnceLock<OpNames>,
}

/// Default bound on the client table.
pub const MAX_CLIENTS: usize = 4096;

impl Metrics {
    /// `enabled = false` (`--no-metrics`) records nothing per call; the
    /// client table still exists so that logs stay rate-limited per client.
    pub fn new(enabled: bool) -> Arc<Self> {
        Arc::new(Metrics {
            enabled,
            started: Instant::now(),
            shards: (0..=SHARDS)
                .map(|_| Shard {
                    ops: std::array::from_fn(|_| OpCell::default()),
                    exports: std::array::from_fn(|_| Padded::default()),
                })
                .collect(),
            errors: (0..OP_SLOTS * N_STATUS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            clients: ClientTable::new(MAX_CLIENTS, enabled),
            server: ServerCounters::default(),
            exports: Mutex::new(None),
            nfs4: Mutex::new(None),
            caches: Mutex::new(Vec::new()),
            limits: Mutex::new(Vec::new()),
            reached_probes: Mutex::new(Vec::new()),
            admin: Mutex::new(Vec::new()),
            fh_window: Duration::from_secs(10),
            names: OnceLock::new(),
        })
    }

    /// Names the op slots after these procedure tables (the first call wins).
    pub fn set_programs(&self, programs: &[&'static rpc::Program]) {
        let _ = self.names.set(ops::op_names(programs));
    }

    /// (program label, op label) of a slot, e.g. ("nfs3", "GETATTR").
    pub fn op_name(&self, slot: usize) -> Option<(&'static str, &'static str)> {
        self.names
            .get_or_init(|| ops::op_names(&[]))
            .get(slot)
            .copied()
            .flatten()
    }

    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    #[inline]
    fn shard(&self) -> (&Shard, bool) {
        let (i, x) = shard_slot(SHARDS);
        (&self.shards[i], x)
    }

    /// A call starts executing (after its queue wait).
    #[inline]
    pub fn call_begin(&self, slot: Option<usize>, client: &ClientStats) {
        if !self.enabled {
            return;
        }
        let (sh, x) = self.shard();
        if let Some(s) = slot {
            add_i(x, &sh.ops[s].n.in_flight, 1);
        }
        let (c, x) = client.shard();
        add_i(x, &c.n.in_flight, 1);
    }

    /// A call finished (`begun`: whether [`Metrics::call_begin`] was called for it).
    #[inline]
    pub fn call_end(&self, slot: Option<usize>, client: &ClientStats, d: &CallDone, begun: bool) {
        if !self.enabled {
            return;
        }
        let (sh, x) = self.shard();
        let err = d.status != 0;
        if let Some(s) = slot {
            let o = &sh.ops[s];
            o.n.done(x, d, begun);
            add(x, &o.service_hist[bucket(d.service_ns)], 1);
            add(x, &o.rtt_hist[bucket(d.service_ns + d.queue_ns)], 1);
            if err {
                add(x, &o.n.errors, 1);
                // Errors by status: one shared array, only error replies touch it.
                self.errors[s * N_STATUS + ops::status_index(d.status)].fetch_add(1, Relaxed);
            }
        }
        if d.export != u32::MAX {
            let e = &sh.exports[(d.export as usize).min(MAX_EXPORTS - 1)].0;
            add(x, &e.calls, 1);
            add(x, &e.bytes_in, d.bytes_in);
            add(x, &e.bytes_out, d.bytes_out);
            add(x, &e.service_ns, d.service_ns);
            if err {
                add(x, &e.errors, 1);
            }
            client.saw_export(d.export);
        }
        let (c, x) = client.shard();
        c.n.done(x, d, begun);
        if let Some(s) = slot {
            add(x, &c.ops[s], 1);
        }
        if err {
            add(x, &c.n.errors, 1);
        }
    }

    /// One NFSv4 operation inside a COMPOUND finished: per-op counters and
    /// the client's per-op count. The COMPOUND itself is the call (counted
    /// by [`Metrics::call_end`]), so client and export totals are not
    /// counted twice.
    #[inline]
    pub fn op_end(&self, slot: usize, client: &dyn PeerStats, status: u32, service_ns: u64) {
        if !self.enabled {
            return;
        }
        let Some(client) = client.as_any().downcast_ref::<ClientStats>() else {
            return;
        };
        let (sh, x) = self.shard();
        let o = &sh.ops[slot];
        add(x, &o.n.calls, 1);
        add(x, &o.n.service_ns, service_ns);
        add(x, &o.service_hist[bucket(service_ns)], 1);
        add(x, &o.rtt_hist[bucket(service_ns)], 1);
        if status != 0 {
            add(x, &o.n.errors, 1);
            self.errors[slot * N_STATUS + ops::status_index(status)].fetch_add(1, Relaxed);
        }
        let (c, x) = client.shard();
        add(x, &c.ops[slot], 1);
    }

    /// Tells the snapshot how to list exports and measure their filesystems
    /// (called off the request path, on a blocking thread).
    pub fn set_export_probe(&self, f: impl Fn() -> Vec<ExportInfo> + Send + Sync + 'static) {
        *self.exports.lock().unwrap() = Some(Box::new(f));
    }

    /// Tells the snapshot how to learn the NFSv4 clients' delegations and
    /// callback paths, per address (called off the request path).
    pub fn set_nfs4_probe(&self, f: impl Fn() -> Vec<(IpAddr, Nfs4Peer)> + Send + Sync + 'static) {
        *self.nfs4.lock().unwrap() = Some(Box::new(f));
    }

    /// Adds a command to the admin socket (blocking work is fine: it runs
    /// on a blocking thread).
    pub fn add_admin_command(
        &self,
        name: &str,
        f: impl Fn() -> serde_json::Value + Send + Sync + 'static,
    ) {
        self.admin
            .lock()
            .unwrap()
            .push((name.to_string(), Arc::new(f)));
    }

    /// The command `name` added by [`Metrics::add_admin_command`].
    pub fn admin_command(&self, name: &str) -> Option<AdminCommand> {
        let a = self.admin.lock().unwrap();
        a.iter().find(|(n, _)| n == name).map(|(_, f)| f.clone())
    }

    /// Registers a cache whose (entries, bytes) the snapshot reports
    /// (the DRC now; the auth cache, GSS contexts and client caches later).
    pub fn add_cache_probe(&self, name: &str, f: impl Fn() -> (u64, u64) + Send + Sync + 'static) {
        self.caches
            .lock()
            .unwrap()
            .push((name.to_string(), Box::new(f)));
    }

    /// Registers a bound: its setting and a probe of its use (replaces an
    /// earlier registration of the same bound).
    pub fn add_limit(
        &self,
        limit: rpc::observe::Limit,
        max: u64,
        in_use: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        let mut l = self.limits.lock().unwrap();
        l.retain(|(x, _, _)| *x != limit);
        l.push((limit, max, Box::new(in_use)));
    }

    /// A bound whose refusals are counted by its owner (the NFSv4 state
    /// core, which is pure): added to [`ServerCounters::limit_reached`]
    /// in snapshots.
    pub fn add_limit_reached_probe(
        &self,
        limit: rpc::observe::Limit,
        reached: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.reached_probes
            .lock()
            .unwrap()
            .push((limit, Box::new(reached)));
    }

    /// Counts a bound reached outside the RPC layer (the NFSv4 state).
    pub fn limit_reached(&self, limit: rpc::observe::Limit, n: u64) {
        self.server.limit_reached[limit.index()].fetch_add(n, Relaxed);
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Background upkeep, once a second: rotates the distinct-handle
    /// sketches every [`Metrics::fh_window`], writes one line per client
    /// whose log lines were suppressed, and evicts clients idle for 10 minutes.
    pub async fn run_upkeep(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n: u64 = 0;
        let fh_every = self.fh_window.as_secs().max(1);
        loop {
            tick.tick().await;
            n += 1;
            if n.is_multiple_of(fh_every) {
                self.clients.rotate_fh();
            }
            if n.is_multiple_of(5) {
                self.flush_suppressed();
            }
            if n.is_multiple_of(60) {
                let gone = self.clients.sweep(10);
                if gone > 0 {
                    tracing::debug!(
                        evicted = gone,
                        "idle clients evicted from the metrics table"
                    );
                }
            }
        }
    }

    /// Writes "suppressed N messages" lines for clients that hit the log limit.
    pub fn flush_suppressed(&self) {
        for c in self.clients.list() {
            let n = c.take_suppressed();
            if n > 0 {
                self.server.log_suppressed.fetch_add(n, Relaxed);
                tracing::warn!(client = %c.addr, suppressed = n, "suppressed {n} log messages from {}", c.addr);
            }
        }
    }
}

/// The RPC server reports to the metrics through this.
impl Observer for Metrics {
    fn connection_opened(&self, ip: IpAddr) -> Arc<dyn PeerStats> {
        self.server.connections_total.fetch_add(1, Relaxed);
        self.server.connections_open.fetch_add(1, Relaxed);
        self.clients.connection_opened(ip)
    }

    fn connection_closed(&self, peer: &dyn PeerStats) {
        if let Some(c) = peer.as_any().downcast_ref::<ClientStats>() {
            c.connection_closed();
        }
        self.server.connections_open.fetch_sub(1, Relaxed);
    }

    fn timed(&self) -> bool {
        self.enabled
    }

    fn count(&self, e: Event) {
        let s = &self.server;
        match e {
            Event::BadCall => s.bad_calls.fetch_add(1, Relaxed),
            Event::DrcHit => s.drc_hits.fetch_add(1, Relaxed),
            Event::DrcInProgress => s.drc_in_progress.fetch_add(1, Relaxed),
            Event::GssDroppedSeqWindow => s.gss_dropped_seq_window.fetch_add(1, Relaxed),
            Event::GssDroppedBadChecksum => s.gss_dropped_bad_checksum.fetch_add(1, Relaxed),
            Event::GssDroppedOther => s.gss_dropped_other.fetch_add(1, Relaxed),
            Event::GssContextCreated => s.gss_contexts_created.fetch_add(1, Relaxed),
            Event::GssContextExpired => s.gss_contexts_expired.fetch_add(1, Relaxed),
            Event::ClosedIdle => s.closed_idle.fetch_add(1, Relaxed),
            Event::ClosedStalledRecord => s.closed_stalled_record.fetch_add(1, Relaxed),
            Event::ClosedUnread => s.closed_unread.fetch_add(1, Relaxed),
            Event::ReadingPaused => s.reading_paused.fetch_add(1, Relaxed),
            Event::GssContextsLive(n) => {
                s.gss_contexts_live.fetch_add(n, Relaxed);
                0
            }
            Event::LimitReached(l) => s.limit_reached[l.index()].fetch_add(1, Relaxed),
            Event::ReadSpliced(bytes) => {
                s.read_spliced_bytes.fetch_add(bytes, Relaxed);
                s.read_spliced_replies.fetch_add(1, Relaxed)
            }
        };
    }

    fn tls_handshake(&self, r: Result<rpc::tls::XprtSec, &'static str>) {
        let s = &self.server;
        match r {
            Ok(rpc::tls::XprtSec::Mtls) => s.tls_handshakes[1].fetch_add(1, Relaxed),
            Ok(_) => s.tls_handshakes[0].fetch_add(1, Relaxed),
            Err(why) => {
                let i = rpc::tls::FAILURE_REASONS
                    .iter()
                    .position(|r| *r == why)
                    .unwrap_or(rpc::tls::FAILURE_REASONS.len() - 4);
                s.tls_failures[i].fetch_add(1, Relaxed)
            }
        };
    }

    fn tls_path(&self, kernel: bool) {
        self.server.tls_paths[usize::from(!kernel)].fetch_add(1, Relaxed);
    }

    fn call_begin(&self, slot: Option<usize>, peer: &dyn PeerStats) {
        if let Some(c) = peer.as_any().downcast_ref::<ClientStats>() {
            Metrics::call_begin(self, slot, c);
        }
    }

    fn call_end(&self, slot: Option<usize>, peer: &dyn PeerStats, d: &CallDone, begun: bool) {
        if let Some(c) = peer.as_any().downcast_ref::<ClientStats>() {
            Metrics::call_end(self, slot, c, d, begun);
        }
    }

    fn add_cache_probe(&self, name: &str, f: Box<dyn Fn() -> (u64, u64) + Send + Sync>) {
        Metrics::add_cache_probe(self, name, f);
    }

    fn add_limit(&self, limit: rpc::observe::Limit, max: u64, in_use: rpc::observe::LimitProbe) {
        Metrics::add_limit(self, limit, max, in_use);
    }

    fn programs(&self, programs: &'static [&'static rpc::Program]) {
        self.set_programs(programs);
    }
}

/// A procedure table for the tests (the real ones are the server's).
#[cfg(test)]
pub(crate) mod test_tables {
    pub static NFS3: rpc::Program = rpc::Program {
        prog: 100003,
        vers: 3,
        label: "nfs3",
        slot_base: Some(0),
        unknown: rpc::Procedure::new("NFSPROC3_UNKNOWN", "", true),
        procs: &[
            rpc::Procedure::new("NFSPROC3_NULL", "NULL", true),
            rpc::Procedure::new("NFSPROC3_GETATTR", "GETATTR", true),
        ],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1_500), 0);
        assert_eq!(bucket(2_000), 1);
        assert_eq!(bucket(2_001), 1);
        assert_eq!(bucket(3_000), 2);
        assert_eq!(bucket(1_000_000), 10);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_le_us(10), Some(1024));
        assert_eq!(bucket_le_us(BUCKETS - 1), None);
        for ns in [900u64, 5_000, 70_000, 3_000_000] {
            let b = bucket(ns);
            assert!(ns / 1000 <= bucket_le_us(b).unwrap(), "{ns} in {b}");
            assert!(b == 0 || ns / 1000 > bucket_le_us(b - 1).unwrap());
        }
    }

    #[test]
    fn record_and_snapshot() {
        let m = Metrics::new(true);
        m.set_programs(&[&test_tables::NFS3]);
        let c = m.clients.connection_opened("127.0.0.1".parse().unwrap());
        let slot = test_tables::NFS3.slot(1);
        for i in 0..10 {
            m.call_begin(slot, &c);
            m.call_end(
                slot,
                &c,
                &CallDone {
                    status: if i < 3 { 70 } else { 0 },
                    export: 0,
                    bytes_in: 100,
                    bytes_out: 200,
                    queue_ns: 1_000,
                    service_ns: 10_000,
                },
                true,
            );
        }
        let s = m.snapshot();
        let op = s.ops.iter().find(|o| o.op == "GETATTR").unwrap();
        assert_eq!((op.calls, op.errors, op.in_flight), (10, 3, 0));
        assert_eq!(op.errors_by_status.get("NFS3ERR_STALE"), Some(&3));
        assert_eq!(op.service_hist.iter().sum::<u64>(), 10);
        let cl = &s.clients[0];
        assert_eq!((cl.calls, cl.errors, cl.bytes_out), (10, 3, 2000));
        assert_eq!(cl.ops.get("GETATTR"), Some(&10));
        assert_eq!(s.exports.len(), 0, "no probe: exports unknown");
    }

    #[test]
    fn disabled_records_nothing() {
        let m = Metrics::new(false);
        let c = m.clients.connection_opened("127.0.0.1".parse().unwrap());
        m.call_begin(Some(1), &c);
        m.call_end(Some(1), &c, &CallDone::default(), true);
        assert!(m.snapshot().ops.iter().all(|o| o.calls == 0));
    }
}

/// `cargo test --release -p metrics record_cost -- --ignored --nocapture`:
/// what counting one call costs on this machine.
#[cfg(test)]
mod cost {
    use super::*;

    #[test]
    #[ignore]
    fn record_cost() {
        let m = Metrics::new(true);
        let c = m.clients.connection_opened("127.0.0.1".parse().unwrap());
        let n = 5_000_000u64;
        let t = Instant::now();
        for i in 0..n {
            m.call_begin(Some(1), &c);
            let d = CallDone {
                status: 0,
                export: 0,
                bytes_in: 100,
                bytes_out: 120,
                queue_ns: i & 0xffff,
                service_ns: 3000,
            };
            m.call_end(Some(1), &c, &d, true);
        }
        let per = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("call_begin + call_end: {per:.1} ns");
        let fh = [7u8; 40];
        let t = Instant::now();
        for _ in 0..n {
            c.record_getattr(std::hint::black_box(&fh));
        }
        let per = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("record_getattr: {per:.1} ns");
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(Instant::now());
        }
        let per = t.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("one clock read: {per:.1} ns");
    }
}
