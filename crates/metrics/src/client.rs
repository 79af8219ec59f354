//! Per-client statistics. A connection resolves its client's [`ClientStats`]
//! once, when it opens, and every call of that connection carries the `Arc`:
//! the request path never looks a client up. The table is bounded: idle
//! clients (no connection, no call for a while) are evicted by the
//! background sweeper, and past the hard cap new addresses share one
//! "overflow" entry.

use crate::ops::OP_SLOTS;
use crate::Padded;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Shards per client, each owned by one counting thread (plus one shared):
/// calls of one client on several worker threads neither bounce one cache
/// line between cores nor pay locked instructions.
pub const CLIENT_SHARDS: usize = 4;

pub(crate) struct ClientShard {
    pub n: crate::CallCounts,
    /// WRITEs asked to be FILE_SYNC or DATA_SYNC, and those of them under [`SMALL_WRITE`].
    pub sync_writes: AtomicU64,
    pub small_sync_writes: AtomicU64,
    pub ops: [AtomicU64; OP_SLOTS],
}

impl Default for ClientShard {
    fn default() -> Self {
        ClientShard {
            n: Default::default(),
            sync_writes: Default::default(),
            small_sync_writes: Default::default(),
            ops: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A synchronous write shorter than this is "small".
pub const SMALL_WRITE: u32 = 32 << 10;

/// Bits of one distinct-file-handle bitmap (linear counting).
const FH_BITS: usize = 4096;
const FH_WORDS: usize = FH_BITS / 64;

/// Estimates how many distinct file handles a client used recently: two
/// bitmaps of hashed handles, the current one and the previous one; the
/// sweeper rotates them every `fh_window`, so the estimate covers the last
/// one to two windows. Recording is a load and, the first time a bit is
/// seen, one `fetch_or`.
pub(crate) struct FhSketch {
    bits: [[AtomicU64; FH_WORDS]; 2],
    cur: AtomicUsize,
}

impl Default for FhSketch {
    fn default() -> Self {
        FhSketch {
            bits: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            cur: AtomicUsize::new(0),
        }
    }
}

impl FhSketch {
    #[inline]
    fn record(&self, h: u64) {
        let i = (h % FH_BITS as u64) as usize;
        let w = &self.bits[self.cur.load(Relaxed) & 1][i / 64];
        let m = 1u64 << (i % 64);
        if w.load(Relaxed) & m == 0 {
            w.fetch_or(m, Relaxed);
        }
    }

    fn rotate(&self) {
        let next = (self.cur.load(Relaxed) + 1) & 1;
        for w in &self.bits[next] {
            w.store(0, Relaxed);
        }
        self.cur.store(next, Relaxed);
    }

    /// Linear-counting estimate over the union of both bitmaps.
    fn estimate(&self) -> u64 {
        let mut set = 0u32;
        for i in 0..FH_WORDS {
            set += (self.bits[0][i].load(Relaxed) | self.bits[1][i].load(Relaxed)).count_ones();
        }
        let zero = (FH_BITS as u32 - set).max(1) as f64;
        let m = FH_BITS as f64;
        (-m * (zero / m).ln()).round() as u64
    }
}

/// A cheap hash of a file handle: Tarn's handles end in a 16-byte MAC, so
/// their last 8 bytes are already uniform; other shapes are folded (FNV-1a).
#[inline]
pub fn fh_hash(fh: &[u8]) -> u64 {
    if fh.len() >= 24 {
        let t: [u8; 8] = fh[fh.len() - 8..].try_into().unwrap();
        u64::from_le_bytes(t).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 7
    } else {
        let mut h = fnv::FnvHasher::default();
        std::hash::Hasher::write(&mut h, fh);
        std::hash::Hasher::finish(&h)
    }
}

/// Log lines allowed per client: a burst of this many, then this many per second.
const LOG_BURST: f64 = 20.0;
const LOG_RATE: f64 = 5.0;

pub struct ClientStats {
    pub addr: IpAddr,
    /// Whether calls are recorded (false with `--no-metrics`: the handle
    /// still exists so logs stay rate-limited).
    pub enabled: bool,
    /// The shared entry of clients beyond the table's hard cap.
    pub overflow: bool,
    pub(crate) shards: Box<[Padded<ClientShard>; CLIENT_SHARDS + 1]>,
    pub(crate) fh: FhSketch,
    pub connections_opened: AtomicU64,
    pub connections_open: AtomicI64,
    /// RPCSEC_GSS: calls of this client dropped because their sequence
    /// number fell outside the window, or for another reason; and when its
    /// newest context expires (unix seconds), to correlate write patterns
    /// with credential age.
    pub gss_dropped_seq_window: AtomicU64,
    pub gss_dropped_other: AtomicU64,
    pub gss_ctx_expires_unix: AtomicU64,
    /// The Kerberos principals of this client's contexts, newest first.
    principals: Mutex<Vec<std::sync::Arc<str>>>,
    /// Auth-cache misses caused by this client.
    pub auth_cache_misses: AtomicU64,
    /// The exports this client's calls touched, one bit per export id
    /// (`MAX_EXPORTS` fits): which export's settings explain its behaviour.
    pub exports_seen: AtomicU32,
    log: Mutex<(f64, Instant)>,
    log_suppressed: AtomicU64,
}

impl std::fmt::Debug for ClientStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientStats")
            .field("addr", &self.addr)
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

/// Principals remembered per client address.
const MAX_PRINCIPALS: usize = 8;

impl ClientStats {
    /// A call under the GSS context that expires at `expires_unix`, of
    /// `principal`: the principal is recorded when the context is new to
    /// this client (its expiry differs from the last one seen), not per call.
    pub fn note_gss(&self, expires_unix: u64, principal: Option<&std::sync::Arc<str>>) {
        let old = self.gss_ctx_expires_unix.swap(expires_unix, Relaxed);
        if let (true, Some(p)) = (old != expires_unix, principal) {
            let mut v = self.principals.lock().unwrap();
            v.retain(|q| q != p);
            v.insert(0, p.clone());
            v.truncate(MAX_PRINCIPALS);
        }
    }

    /// The principals of this client's contexts, newest first.
    pub fn principals(&self) -> Vec<std::sync::Arc<str>> {
        self.principals.lock().unwrap().clone()
    }

    pub fn new(addr: IpAddr, enabled: bool) -> Self {
        ClientStats {
            addr,
            enabled,
            overflow: false,
            shards: Box::new(std::array::from_fn(|_| Padded(ClientShard::default()))),
            fh: FhSketch::default(),
            connections_opened: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            gss_dropped_seq_window: AtomicU64::new(0),
            gss_dropped_other: AtomicU64::new(0),
            gss_ctx_expires_unix: AtomicU64::new(0),
            principals: Mutex::new(Vec::new()),
            auth_cache_misses: AtomicU64::new(0),
            exports_seen: AtomicU32::new(0),
            log: Mutex::new((LOG_BURST, Instant::now())),
            log_suppressed: AtomicU64::new(0),
        }
    }

    /// A handle that belongs to no table (tests, tools).
    pub fn detached(addr: IpAddr) -> Arc<Self> {
        Arc::new(ClientStats::new(addr, false))
    }

    #[inline]
    pub(crate) fn shard(&self) -> (&ClientShard, bool) {
        let (i, x) = crate::shard_slot(CLIENT_SHARDS);
        (&self.shards[i].0, x)
    }

    /// A GETATTR (or any attribute revalidation) of this file handle.
    #[inline]
    pub fn record_getattr(&self, fh: &[u8]) {
        if self.enabled {
            self.fh.record(fh_hash(fh));
        }
    }

    /// A call of this client touched export `id`: a load, and one
    /// `fetch_or` the first time only.
    #[inline]
    pub fn saw_export(&self, id: u32) {
        let bit = 1u32 << (id as usize).min(crate::MAX_EXPORTS - 1);
        if self.exports_seen.load(Relaxed) & bit == 0 {
            self.exports_seen.fetch_or(bit, Relaxed);
        }
    }

    /// The ids of the exports this client touched.
    pub fn exports(&self) -> Vec<u32> {
        let m = self.exports_seen.load(Relaxed);
        (0..crate::MAX_EXPORTS as u32)
            .filter(|i| m & (1 << i) != 0)
            .collect()
    }

    /// A WRITE of `count` bytes asked to be `sync` (FILE_SYNC or DATA_SYNC).
    #[inline]
    pub fn record_write(&self, count: u32, sync: bool) {
        if self.enabled && sync {
            let (s, x) = self.shard();
            crate::add(x, &s.sync_writes, 1);
            if count < SMALL_WRITE {
                crate::add(x, &s.small_sync_writes, 1);
            }
        }
    }

    /// Whether one more log line about this client may be written now (a
    /// token bucket); when not, the line is counted and the sweeper later
    /// writes one "suppressed N messages" line.
    pub fn log_allowed(&self) -> bool {
        let mut b = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * LOG_RATE).min(LOG_BURST);
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            true
        } else {
            self.log_suppressed.fetch_add(1, Relaxed);
            false
        }
    }

    pub(crate) fn take_suppressed(&self) -> u64 {
        self.log_suppressed.swap(0, Relaxed)
    }

    pub(crate) fn sum(&self, f: impl Fn(&ClientShard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(&s.0).load(Relaxed)).sum()
    }

    pub(crate) fn in_flight(&self) -> i64 {
        self.shards
            .iter()
            .map(|s| s.0.n.in_flight.load(Relaxed))
            .sum()
    }

    pub(crate) fn op_calls(&self, slot: usize) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0.ops[slot].load(Relaxed))
            .sum()
    }

    pub(crate) fn distinct_files(&self) -> u64 {
        self.fh.estimate()
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Relaxed);
    }
}

/// The per-peer handle every call carries ([`rpc::CallContext::client`]).
impl rpc::PeerStats for ClientStats {
    fn log_allowed(&self) -> bool {
        ClientStats::log_allowed(self)
    }

    fn note_gss(&self, expires_unix: u64, principal: Option<&Arc<str>>) {
        ClientStats::note_gss(self, expires_unix, principal)
    }

    /// Shown with the GSS principals (`tarn top`), marked as from TLS.
    fn note_tls_identity(&self, who: &str) {
        let p: std::sync::Arc<str> = format!("tls:{who}").into();
        let mut v = self.principals.lock().unwrap();
        v.retain(|q| *q != p);
        v.insert(0, p);
        v.truncate(MAX_PRINCIPALS);
    }

    fn gss_dropped(&self, why: rpc::gss::DropReason) {
        match why {
            rpc::gss::DropReason::SeqWindow => &self.gss_dropped_seq_window,
            rpc::gss::DropReason::Replay => &self.gss_dropped_other,
        }
        .fetch_add(1, Relaxed);
    }

    fn record_getattr(&self, fh: &[u8]) {
        ClientStats::record_getattr(self, fh)
    }

    fn record_write(&self, count: u32, sync: bool) {
        ClientStats::record_write(self, count, sync)
    }

    fn auth_cache_miss(&self) {
        self.auth_cache_misses.fetch_add(1, Relaxed);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

struct Entry {
    stats: Arc<ClientStats>,
    last_calls: u64,
    idle_sweeps: u32,
}

pub struct ClientTable {
    map: Mutex<HashMap<IpAddr, Entry>>,
    overflow: Arc<ClientStats>,
    cap: usize,
    enabled: bool,
}

/// IPv4 clients on a dual-stack socket appear as ::ffff:a.b.c.d.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

impl ClientTable {
    pub fn new(cap: usize, enabled: bool) -> Self {
        let mut o = ClientStats::new(IpAddr::from([0, 0, 0, 0]), enabled);
        o.overflow = true;
        ClientTable {
            map: Mutex::new(HashMap::new()),
            overflow: Arc::new(o),
            cap: cap.max(1),
            enabled,
        }
    }

    /// A connection from `ip` opened: its client's handle (created if new).
    pub fn connection_opened(&self, ip: IpAddr) -> Arc<ClientStats> {
        let ip = canonical(ip);
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let len = m.len();
        let s = match m.get_mut(&ip) {
            Some(e) => {
                e.idle_sweeps = 0;
                e.stats.clone()
            }
            None if len >= self.cap => self.overflow.clone(),
            None => {
                let s = Arc::new(ClientStats::new(ip, self.enabled));
                m.insert(
                    ip,
                    Entry {
                        stats: s.clone(),
                        last_calls: 0,
                        idle_sweeps: 0,
                    },
                );
                s
            }
        };
        // Under the lock, so the sweeper never evicts an entry a connection holds.
        s.connections_opened.fetch_add(1, Relaxed);
        s.connections_open.fetch_add(1, Relaxed);
        s
    }

    /// Every client (and the overflow entry if it was used).
    pub fn list(&self) -> Vec<Arc<ClientStats>> {
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m.values().map(|e| e.stats.clone()).collect();
        if self.overflow.connections_opened.load(Relaxed) > 0 {
            v.push(self.overflow.clone());
        }
        v
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evicts clients with no open connection and no call for `max_idle`
    /// consecutive sweeps. Runs in the background, never on a request.
    pub(crate) fn sweep(&self, max_idle: u32) -> usize {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let before = m.len();
        m.retain(|_, e| {
            let calls = e.stats.sum(|s| &s.n.calls) + e.stats.connections_opened.load(Relaxed);
            if calls != e.last_calls || e.stats.connections_open.load(Relaxed) > 0 {
                e.last_calls = calls;
                e.idle_sweeps = 0;
                return true;
            }
            e.idle_sweeps += 1;
            e.idle_sweeps < max_idle
        });
        before - m.len()
    }

    pub(crate) fn rotate_fh(&self) {
        for c in self.list() {
            c.fh.rotate();
        }
    }

    /// Approximate memory held by the table.
    pub fn bytes(&self) -> u64 {
        (self.len() as u64 + 1)
            * (std::mem::size_of::<ClientStats>()
                + std::mem::size_of::<[Padded<ClientShard>; CLIENT_SHARDS + 1]>()
                + std::mem::size_of::<Entry>()
                + std::mem::size_of::<IpAddr>()
                + 16) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_estimate() {
        let c = ClientStats::new("127.0.0.1".parse().unwrap(), true);
        for i in 0..500u64 {
            let mut fh = [0u8; 40];
            fh[32..].copy_from_slice(&(i * 7919).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            c.record_getattr(&fh);
            c.record_getattr(&fh);
        }
        let e = c.distinct_files();
        assert!((450..=550).contains(&e), "estimate {e}");
        c.fh.rotate();
        assert!(c.distinct_files() >= 450, "previous window still counts");
        c.fh.rotate();
        assert_eq!(c.distinct_files(), 0);
    }

    #[test]
    fn log_bucket_limits() {
        let c = ClientStats::new("127.0.0.1".parse().unwrap(), true);
        let allowed = (0..1000).filter(|_| c.log_allowed()).count();
        assert!((20..=22).contains(&allowed), "{allowed}");
        assert!(c.take_suppressed() >= 978);
    }

    #[test]
    fn table_bounded_and_sweeps_idle() {
        let t = ClientTable::new(2, true);
        let a = t.connection_opened("10.0.0.1".parse().unwrap());
        let _b = t.connection_opened("10.0.0.2".parse().unwrap());
        let c = t.connection_opened("10.0.0.3".parse().unwrap());
        assert!(
            c.overflow,
            "past the cap new clients share the overflow entry"
        );
        assert!(!a.overflow);
        let mapped = t.connection_opened("::ffff:10.0.0.1".parse().unwrap());
        assert!(Arc::ptr_eq(&a, &mapped));
        a.connection_closed();
        mapped.connection_closed();
        for _ in 0..4 {
            t.sweep(3);
        }
        assert_eq!(t.len(), 1, "the idle client without connections is gone");
    }
}
