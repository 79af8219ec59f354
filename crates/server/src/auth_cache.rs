//! The auth cache of docs/design.md rule 1: who may use which export, and as
//! whom, decided once per (client address, credential) and then looked up
//! in O(1) however many clients there are.
//!
//! Level 1 is keyed by client address, level 2 by the credential (flavor,
//! uid, gid, a hash of the groups); the value is the decision for every
//! export at once, indexed by export id. Negative decisions are cached like
//! positive ones. Entries expire by TTL and both levels are bounded, with
//! CLOCK (second-chance LRU) eviction in amortized O(1). The table is sharded by address so lookups on
//! different cores rarely meet on one lock. A miss inserts a pending entry
//! that concurrent callers for the same key wait on, so one key is decided
//! once (single flight).
//!
//! Host names never block a request: [`Names`] answers from what its
//! background resolver already knows, queues a lookup otherwise, and the
//! rule is treated as not matching until the answer arrives. Decisions made
//! with an unanswered lookup are marked provisional and recomputed once any
//! answer lands (a generation number).
//!
//! Nothing here does I/O: the resolver is a trait, and the clock is passed
//! in, so every state is reachable from a unit test.

use crate::export::{ClientSpec, Exports};
use lru::LruCache;
use rpc::Auth;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vfs::Cred;

/// What one client with one credential may do on one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub rw: bool,
    /// The rule says `secure`: see [`Access::port_refused`].
    pub secure: bool,
    /// The credential the backend acts with (after squashing).
    pub cred: Cred,
}

impl Access {
    /// Whether a `secure` rule refuses this call: AUTH_SYS or AUTH_NONE
    /// from a source port of 1024 or more (anyone can bind those, so the
    /// uid the call claims is not vouched for by the client's root). As in
    /// Linux's server, RPCSEC_GSS calls are exempt: the credential is
    /// proven, whatever the port. The decision is cached per address and
    /// credential, not per port, so this is checked on every call.
    pub fn port_refused(&self, auth: &rpc::Auth, peer: std::net::SocketAddr) -> bool {
        self.secure && peer.port() >= 1024 && !matches!(auth, rpc::Auth::Gss(_))
    }
}

/// The cached answer for one (client, credential): per export id, `None`
/// when no rule lets this client in.
// The export's sec= flavors are not part of this answer: the protocol
// layers compare them with the call's (NFSv3 AUTH_TOOWEAK, NFSv4 WRONGSEC).
// repr(C) in this order: what a hit reads (after the Arc's counts) sits
// in the first cache line, the per-export answers after it.
#[derive(Debug)]
#[repr(C)]
pub struct Decision {
    expires: Instant,
    /// Set when an unanswered name lookup shaped this decision: valid only
    /// while [`Names::generation`] still has this value.
    provisional: Option<u64>,
    /// The groups the key's hash stands for: a hash collision must not
    /// hand one caller another's groups. Inline: a hit reads no other line.
    gids: Gids,
    pub exports: Vec<Option<Access>>,
}

impl Decision {
    /// The access to export `id`, if any.
    pub fn get(&self, id: u32) -> Option<&Access> {
        self.exports.get(id as usize).and_then(|a| a.as_ref())
    }
}

/// Level-2 key: the parts of a credential that decide access. Fixed size,
/// so building it costs no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CredKey {
    pub flavor: u32,
    pub uid: u32,
    pub gid: u32,
    pub gids_hash: u64,
}

impl CredKey {
    pub fn of(auth: &Auth) -> CredKey {
        match auth {
            Auth::None => CredKey {
                flavor: 0,
                uid: 0,
                gid: 0,
                gids_hash: 0,
            },
            Auth::Sys(s) => CredKey {
                flavor: 1,
                uid: s.uid,
                gid: s.gid,
                gids_hash: hash_gids(&s.gids),
            },
            // A Kerberos caller is decided by its flavor and the ids its
            // principal mapped to: principals with the same ids get the
            // same answer, so the principal itself need not be in the key.
            Auth::Gss(g) => {
                let flavor = crate::export::Flavor::of(auth).pseudo_flavor();
                match &g.ids {
                    Some(i) => CredKey {
                        flavor,
                        uid: i.uid,
                        gid: i.gid,
                        gids_hash: hash_gids(&i.gids),
                    },
                    None => CredKey {
                        flavor,
                        uid: u32::MAX,
                        gid: u32::MAX,
                        gids_hash: 0,
                    },
                }
            }
        }
    }
}

/// At most 16 groups (RFC 5531), stored inline.
#[derive(Debug)]
#[repr(C)]
struct Gids {
    n: u32,
    g: [u32; 16],
}

impl Gids {
    fn new(g: &[u32]) -> Gids {
        let mut out = Gids { n: 0, g: [0; 16] };
        if g.len() <= 16 {
            out.n = g.len() as u32;
            out.g[..g.len()].copy_from_slice(g);
        } else {
            // Cannot happen (the RPC layer refuses more); never matches.
            out.n = u32::MAX;
        }
        out
    }

    fn same(&self, g: &[u32]) -> bool {
        g.len() == self.n as usize && self.g[..g.len()] == *g
    }
}

fn gids_of(auth: &Auth) -> &[u32] {
    match auth {
        Auth::Sys(s) => &s.gids,
        Auth::Gss(g) => g.ids.as_ref().map_or(&[][..], |i| &i.gids[..]),
        Auth::None => &[],
    }
}

fn hash_gids(g: &[u32]) -> u64 {
    // FNV-1a: tiny inputs (at most 16 groups), no per-process seed needed
    // since a collision only costs a recomputation.
    let mut h = fnv::FnvHasher::default();
    for &x in g {
        std::hash::Hasher::write_u32(&mut h, x);
    }
    std::hash::Hasher::finish(&h) ^ g.len() as u64
}

/// Blocking name lookups, run only on the background resolver thread.
pub trait Resolver: Send + Sync + 'static {
    /// Addresses of a host name (forward lookup).
    fn forward(&self, name: &str) -> std::io::Result<Vec<IpAddr>>;
    /// The name of an address (reverse lookup), if it has one.
    fn reverse(&self, ip: IpAddr) -> std::io::Result<Option<String>>;
}

/// The system resolver: getaddrinfo through std, and the reverse lookup
/// through `getent hosts` (std has no getnameinfo and this is off the
/// request path, once per client per TTL).
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn forward(&self, name: &str) -> std::io::Result<Vec<IpAddr>> {
        use std::net::ToSocketAddrs;
        Ok((name, 0).to_socket_addrs()?.map(|a| a.ip()).collect())
    }

    fn reverse(&self, ip: IpAddr) -> std::io::Result<Option<String>> {
        let out = std::process::Command::new("getent")
            .args(["hosts", &ip.to_string()])
            .output()?;
        if !out.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .split_whitespace()
            .nth(1)
            .map(|s| s.trim_end_matches('.').to_ascii_lowercase()))
    }
}

/// A name-lookup answer, or "not known yet" (a lookup has been queued).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known<T> {
    Yes(T),
    Pending,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Query {
    Forward(String),
    Reverse(IpAddr),
}

#[derive(Default)]
struct NameTables {
    forward: HashMap<String, (Arc<[IpAddr]>, Instant)>,
    reverse: HashMap<IpAddr, (Option<Arc<str>>, Instant)>,
    /// Queries queued or running: each is asked once however many calls want it.
    queued: HashSet<Query>,
    /// FIFO for the worker.
    queue: std::collections::VecDeque<Query>,
}

/// Most client names remembered (reverse lookups, one per client that
/// reached a `*.domain` rule).
const MAX_REVERSE: usize = 1 << 20;

/// What the server knows about host names, filled in the background.
pub struct Names {
    resolver: Arc<dyn Resolver>,
    ttl: Duration,
    tables: Mutex<NameTables>,
    wake: Condvar,
    generation: AtomicU64,
    /// Lookups done (for tests and the log).
    pub lookups: AtomicU64,
}

impl Names {
    /// A name table with no worker: call [`Names::run_queued`] to answer
    /// (tests), or [`Names::spawn_worker`] to answer in the background.
    pub fn new(resolver: Arc<dyn Resolver>, ttl: Duration) -> Arc<Names> {
        Arc::new(Names {
            resolver,
            ttl,
            tables: Mutex::new(NameTables::default()),
            wake: Condvar::new(),
            generation: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
        })
    }

    /// Bumped whenever an answer lands: provisional decisions die with it.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    fn ask(&self, t: &mut NameTables, q: Query) {
        if t.queued.insert(q.clone()) {
            t.queue.push_back(q);
            self.wake.notify_one();
        }
    }

    /// Addresses of `name`, never waiting.
    pub fn addrs(&self, name: &str, now: Instant) -> Known<Arc<[IpAddr]>> {
        let mut t = self.tables.lock().unwrap();
        match t.forward.get(name) {
            Some((a, exp)) => {
                let a = a.clone();
                if *exp <= now {
                    // Stale but usable: refresh in the background.
                    self.ask(&mut t, Query::Forward(name.to_string()));
                }
                Known::Yes(a)
            }
            None => {
                self.ask(&mut t, Query::Forward(name.to_string()));
                Known::Pending
            }
        }
    }

    /// The (forward-confirmed) name of `ip`, never waiting.
    pub fn name_of(&self, ip: IpAddr, now: Instant) -> Known<Option<Arc<str>>> {
        let mut t = self.tables.lock().unwrap();
        match t.reverse.get(&ip) {
            Some((n, exp)) => {
                let n = n.clone();
                if *exp <= now {
                    self.ask(&mut t, Query::Reverse(ip));
                }
                Known::Yes(n)
            }
            None => {
                self.ask(&mut t, Query::Reverse(ip));
                Known::Pending
            }
        }
    }

    /// Queues forward lookups of names ahead of need (at config load), so
    /// the first call from a named host usually finds its answer ready.
    pub fn prefetch<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut t = self.tables.lock().unwrap();
        for n in names {
            if !t.forward.contains_key(n) {
                self.ask(&mut t, Query::Forward(n.to_string()));
            }
        }
    }

    fn answer(&self, q: &Query) {
        self.lookups.fetch_add(1, Relaxed);
        let now = Instant::now();
        match q {
            Query::Forward(name) => {
                let addrs: Arc<[IpAddr]> = self
                    .resolver
                    .forward(name)
                    .unwrap_or_default()
                    .into_iter()
                    .map(unmap)
                    .collect();
                let mut t = self.tables.lock().unwrap();
                t.forward.insert(name.clone(), (addrs, now + self.ttl));
                t.queued.remove(q);
            }
            Query::Reverse(ip) => {
                // A PTR record is the client's own claim: accept the name
                // only if it resolves back to the address (as mountd does).
                // Names are case-insensitive: compare and store them lower case.
                let name = self.resolver.reverse(*ip).ok().flatten();
                let name = name.map(|n| n.trim_end_matches('.').to_ascii_lowercase());
                let name = name.filter(|n| {
                    self.resolver
                        .forward(n)
                        .map(|a| a.into_iter().map(unmap).any(|a| a == unmap(*ip)))
                        .unwrap_or(false)
                });
                let mut t = self.tables.lock().unwrap();
                if t.reverse.len() >= MAX_REVERSE {
                    // Bounded: drop what has expired (here, off the request
                    // path), and everything if that was not enough.
                    t.reverse.retain(|_, (_, exp)| *exp > now);
                    if t.reverse.len() >= MAX_REVERSE {
                        t.reverse.clear();
                    }
                }
                t.reverse.insert(*ip, (name.map(Arc::from), now + self.ttl));
                t.queued.remove(q);
            }
        }
        self.generation.fetch_add(1, Relaxed);
    }

    /// Answers everything queued so far, on this thread. Returns how many.
    pub fn run_queued(&self) -> usize {
        let mut n = 0;
        loop {
            let q = self.tables.lock().unwrap().queue.pop_front();
            match q {
                Some(q) => {
                    self.answer(&q);
                    n += 1;
                }
                None => return n,
            }
        }
    }

    /// Starts the background resolver thread; it lives as long as `self`.
    pub fn spawn_worker(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("tarn-resolver".into())
            .spawn(move || loop {
                let Some(me) = weak.upgrade() else { return };
                let q = {
                    let mut t = me.tables.lock().unwrap();
                    loop {
                        if let Some(q) = t.queue.pop_front() {
                            break Some(q);
                        }
                        // Wake now and then to notice the table was dropped.
                        let (g, r) = me.wake.wait_timeout(t, Duration::from_secs(1)).unwrap();
                        t = g;
                        if r.timed_out() && t.queue.is_empty() {
                            break None;
                        }
                    }
                };
                if let Some(q) = q {
                    me.answer(&q);
                }
            })
            .expect("spawn the resolver thread");
    }
}

/// IPv4 clients on a dual-stack socket appear as ::ffff:a.b.c.d.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Computes the decision for one (client, credential) over all exports:
/// first matching rule wins. Returns whether an unanswered lookup shaped it.
pub fn decide(
    exports: &Exports,
    names: &Names,
    ip: IpAddr,
    auth: &Auth,
    now: Instant,
) -> (Vec<Option<Access>>, bool) {
    let ip = unmap(ip);
    let mut provisional = false;
    // Asked at most once per decision, and only if a wildcard rule is reached.
    let mut rname: Option<Known<Option<Arc<str>>>> = None;
    let mut out = vec![None; exports.id_limit() as usize];
    for e in exports.iter() {
        for r in &e.rules {
            let hit = match &r.client {
                ClientSpec::Any => true,
                ClientSpec::Net(c) => c.contains(ip),
                ClientSpec::Host(h) => match names.addrs(h, now) {
                    Known::Yes(a) => a.contains(&ip),
                    Known::Pending => {
                        provisional = true;
                        false
                    }
                },
                ClientSpec::Domain(suffix) => {
                    match rname.get_or_insert_with(|| names.name_of(ip, now)) {
                        Known::Yes(Some(n)) => n.ends_with(suffix.as_str()),
                        Known::Yes(None) => false,
                        Known::Pending => {
                            provisional = true;
                            false
                        }
                    }
                }
            };
            if hit {
                out[e.id as usize] = Some(Access {
                    rw: r.rw,
                    secure: r.secure,
                    cred: r.map(auth),
                });
                break;
            }
        }
    }
    (out, provisional)
}

/// Tunables.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    pub ttl: Duration,
    /// Negative answers expire sooner: a client just added to a name or
    /// network should not wait a full TTL.
    pub negative_ttl: Duration,
    pub max_clients: usize,
    pub max_creds_per_client: usize,
    pub shards: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl: Duration::from_secs(300),
            negative_ttl: Duration::from_secs(30),
            max_clients: 1 << 20,
            max_creds_per_client: 64,
            shards: 64,
        }
    }
}

/// Counters, summed over shards on demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub entries: u64,
}

impl std::ops::Add for CacheStats {
    type Output = CacheStats;
    fn add(self, o: CacheStats) -> CacheStats {
        CacheStats {
            hits: self.hits + o.hits,
            misses: self.misses + o.misses,
            evictions: self.evictions + o.evictions,
            entries: self.entries + o.entries,
        }
    }
}

/// A miss in progress: later callers for the same key wait here.
#[derive(Default)]
struct Flight {
    /// `None` while running; `Some(None)` if the one computing gave up (panicked).
    done: Mutex<Option<Option<Arc<Decision>>>>,
    cv: Condvar,
}

impl Flight {
    fn finish(&self, d: Option<Arc<Decision>>) {
        *self.done.lock().unwrap() = Some(d);
        self.cv.notify_all();
    }

    fn wait(&self) -> Option<Arc<Decision>> {
        let mut g = self.done.lock().unwrap();
        loop {
            if let Some(d) = &*g {
                return d.clone();
            }
            g = self.cv.wait(g).unwrap();
        }
    }
}

enum Slot {
    Ready(Arc<Decision>),
    Pending(Arc<Flight>),
}

struct Cached {
    slot: Slot,
    used: bool,
}

struct Client {
    creds: LruCache<CredKey, Cached>,
    used: bool,
}

struct Shard {
    // Unbounded in the lru crate's sense (it would preallocate the bound);
    // the bounds are enforced here. Both levels evict by CLOCK (second
    // chance) over the lru crate's list: a hit only sets a flag, where true
    // LRU would relink two list neighbours, i.e. two more cache misses per
    // lookup in a table of a million clients.
    clients: LruCache<IpAddr, Client>,
    stats: CacheStats,
}

/// Removes the oldest entry not used since the hand last passed it (CLOCK):
/// each pass over a used entry clears its flag, so this is amortized O(1)
/// (one pass per hit that set a flag).
fn evict_one<K: Hash + Eq, V>(
    m: &mut LruCache<K, V>,
    used: impl Fn(&mut V) -> &mut bool,
) -> Option<V> {
    loop {
        let (k, mut v) = m.pop_lru()?;
        let u = used(&mut v);
        if !*u {
            return Some(v);
        }
        *u = false;
        m.push(k, v);
    }
}

/// How a lookup was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    /// Another caller was deciding this key; we waited for its answer.
    Waited,
    Miss,
}

/// The two-level, sharded, LRU-bounded cache.
pub struct AuthCache {
    shards: Box<[Mutex<Shard>]>,
    cfg: CacheConfig,
    per_shard: usize,
    hasher: std::collections::hash_map::RandomState,
}

impl AuthCache {
    pub fn new(cfg: CacheConfig) -> AuthCache {
        let n = cfg.shards.max(1).next_power_of_two();
        AuthCache {
            shards: (0..n)
                .map(|_| {
                    Mutex::new(Shard {
                        clients: LruCache::unbounded(),
                        stats: CacheStats::default(),
                    })
                })
                .collect(),
            per_shard: cfg.max_clients.div_ceil(n).max(1),
            cfg,
            hasher: Default::default(),
        }
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<Shard> {
        let h = self.hasher.hash_one(ip);
        &self.shards[h as usize & (self.shards.len() - 1)]
    }

    pub fn stats(&self) -> CacheStats {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap().stats)
            .fold(CacheStats::default(), |a, b| a + b)
    }

    /// The decision for (ip, auth): from the cache, or made once by
    /// `compute` (which returns the per-export answers and whether they are
    /// provisional) while concurrent callers for the same key wait.
    pub fn get(
        &self,
        ip: IpAddr,
        auth: &Auth,
        now: Instant,
        generation: impl Fn() -> u64,
        compute: impl FnOnce() -> (Vec<Option<Access>>, bool),
    ) -> (Arc<Decision>, Outcome) {
        let ip = unmap(ip);
        let key = CredKey::of(auth);
        let gids = gids_of(auth);
        let shard = self.shard(&ip);
        let flight = {
            let mut s = shard.lock().unwrap();
            let s = &mut *s;
            let per_client = self.cfg.max_creds_per_client;
            if !s.clients.contains(&ip) && s.clients.len() >= self.per_shard {
                if let Some(old) = evict_one(&mut s.clients, |c| &mut c.used) {
                    let n = ready_count(&old.creds);
                    s.stats.evictions += n;
                    s.stats.entries -= n;
                }
            }
            let client = s.clients.get_or_insert_mut(ip, || Client {
                creds: LruCache::unbounded(),
                used: false,
            });
            if !client.used {
                client.used = true;
            }
            let creds = &mut client.creds;
            let slot = creds.peek_mut(&key).map(|c| {
                if !c.used {
                    c.used = true;
                }
                &c.slot
            });
            match slot {
                Some(Slot::Ready(d))
                    if d.expires > now
                        && d.provisional.is_none_or(|g| g == generation())
                        && d.gids.same(gids) =>
                {
                    s.stats.hits += 1;
                    return (d.clone(), Outcome::Hit);
                }
                Some(Slot::Ready(d)) if !d.gids.same(gids) => {
                    // Two group lists with one hash: answer this caller
                    // (below, unlocked) without disturbing the cached one.
                    s.stats.misses += 1;
                    Err(None)
                }
                Some(Slot::Pending(f)) => {
                    let f = f.clone();
                    s.stats.hits += 1;
                    Err(Some(f))
                }
                other => {
                    // Absent or expired: we decide, others wait on us.
                    let was_ready = matches!(other, Some(Slot::Ready(_)));
                    if !was_ready && creds.len() >= per_client {
                        if let Some(Cached {
                            slot: Slot::Ready(_),
                            ..
                        }) = evict_one(creds, |c| &mut c.used)
                        {
                            s.stats.evictions += 1;
                            s.stats.entries -= 1;
                        }
                    }
                    let f = Arc::new(Flight::default());
                    let new = Cached {
                        slot: Slot::Pending(f.clone()),
                        used: false,
                    };
                    if creds
                        .put(key, new)
                        .is_some_and(|o| matches!(o.slot, Slot::Ready(_)))
                    {
                        s.stats.entries -= 1;
                    }
                    s.stats.misses += 1;
                    Ok(f)
                }
            }
        };
        match flight {
            Err(Some(f)) => match f.wait() {
                Some(d) => (d, Outcome::Waited),
                None => (
                    Arc::new(self.make(gids, now, generation(), compute)),
                    Outcome::Miss,
                ),
            },
            Err(None) => (
                Arc::new(self.make(gids, now, generation(), compute)),
                Outcome::Miss,
            ),
            Ok(f) => {
                // Wakes the waiters even if `compute` panics.
                struct Finish<'a>(&'a Flight, Option<Arc<Decision>>);
                impl Drop for Finish<'_> {
                    fn drop(&mut self) {
                        self.0.finish(self.1.take());
                    }
                }
                let mut fin = Finish(&f, None);
                // The generation is read before computing: an answer landing
                // meanwhile must still invalidate what was made without it.
                let d = Arc::new(self.make(gids, now, generation(), compute));
                {
                    let mut s = shard.lock().unwrap();
                    let s = &mut *s;
                    // Still ours? (It may have been evicted meanwhile.)
                    if let Some(client) = s.clients.peek_mut(&ip) {
                        if let Some(Cached { slot, .. }) = client.creds.peek_mut(&key) {
                            if matches!(slot, Slot::Pending(p) if Arc::ptr_eq(p, &f)) {
                                *slot = Slot::Ready(d.clone());
                                s.stats.entries += 1;
                            }
                        }
                    }
                }
                fin.1 = Some(d.clone());
                drop(fin);
                (d, Outcome::Miss)
            }
        }
    }

    fn make(
        &self,
        gids: &[u32],
        now: Instant,
        generation: u64,
        compute: impl FnOnce() -> (Vec<Option<Access>>, bool),
    ) -> Decision {
        let (exports, provisional) = compute();
        let ttl = if exports.iter().any(Option::is_some) {
            self.cfg.ttl
        } else {
            self.cfg.negative_ttl
        };
        Decision {
            exports,
            gids: Gids::new(gids),
            expires: now + ttl,
            provisional: provisional.then_some(generation),
        }
    }
}

fn ready_count(c: &LruCache<CredKey, Cached>) -> u64 {
    c.iter()
        .filter(|(_, c)| matches!(c.slot, Slot::Ready(_)))
        .count() as u64
}

#[cfg(test)]
mod tests;
