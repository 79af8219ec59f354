//! Duplicate request cache for non-idempotent procedures (REMOVE, RENAME,
//! CREATE...): a retransmitted call gets the reply of the original instead of
//! being executed twice. Per client address, bounded, sharded so that clients
//! do not contend on one lock. Pure code.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

const SHARDS: usize = 16;

/// Identifies a call: clients reuse xids only after a long time, and the
/// checksum of the arguments guards against an xid reused after a client reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub args_sum: u64,
    /// The RPCSEC_GSS context (0: not GSS). Under GSS the entry holds the
    /// unprotected results, re-protected for the retransmission's sequence
    /// number (a cached reply carries the old one, which the client rejects).
    pub gss_ctx: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// First time: the caller executes the call, then calls [`Drc::complete`].
    New,
    /// The original is still executing: drop the retransmission.
    InProgress,
    /// The original's reply (a whole record, with its record mark).
    Done(Bytes),
}

#[derive(Default)]
struct ClientCache {
    entries: HashMap<Key, Option<Bytes>>,
    order: VecDeque<Key>,
}

pub struct Drc {
    per_client: usize,
    /// Bytes of replies each shard may hold (the configured total / SHARDS).
    shard_bytes: usize,
    shards: Vec<Mutex<Shard>>,
    /// Entries evicted to stay within the byte budget.
    byte_evictions: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Shard {
    clients: HashMap<IpAddr, ClientCache>,
    bytes: usize,
}

/// What one entry is charged: its reply and its bookkeeping.
fn cost(reply: &Option<Bytes>) -> usize {
    reply.as_ref().map_or(0, |b| b.len()) + 2 * std::mem::size_of::<Key>() + 16
}

/// A cheap checksum of the first bytes of the arguments (FNV-1a).
pub fn args_sum(args: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, &args[..args.len().min(256)]);
    std::hash::Hasher::finish(&h) ^ args.len() as u64
}

impl Drc {
    /// A cache of `per_client` entries per client and no byte bound.
    pub fn new(per_client: usize) -> Self {
        Self::with_max_bytes(per_client, usize::MAX)
    }

    /// ...and at most about `max_bytes` of entries in all: past it the
    /// oldest entries go, the filling client's first (a client whose
    /// retransmission then finds nothing re-executes the call, as after
    /// any eviction).
    pub fn with_max_bytes(per_client: usize, max_bytes: usize) -> Self {
        Drc {
            per_client: per_client.max(1),
            shard_bytes: (max_bytes / SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            byte_evictions: Default::default(),
        }
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<Shard> {
        let h = match ip {
            IpAddr::V4(a) => u32::from(*a) as usize,
            IpAddr::V6(a) => u128::from(*a) as usize,
        };
        &self.shards[h.wrapping_mul(0x9e37_79b9) % SHARDS]
    }

    pub fn lookup(&self, ip: IpAddr, key: Key) -> Lookup {
        let mut guard = self.shard(&ip).lock().unwrap();
        let shard = &mut *guard;
        let c = shard.clients.entry(ip).or_default();
        match c.entries.get(&key) {
            Some(None) => Lookup::InProgress,
            Some(Some(r)) => Lookup::Done(r.clone()),
            None => {
                if c.order.len() >= self.per_client {
                    // Oldest first; the evicted entry may be in progress, in
                    // which case a late retransmission is simply executed.
                    if let Some(old) = c.order.pop_front() {
                        if let Some(r) = c.entries.remove(&old) {
                            shard.bytes -= cost(&r);
                        }
                    }
                }
                shard.bytes += cost(&None);
                c.entries.insert(key, None);
                c.order.push_back(key);
                Lookup::New
            }
        }
    }

    /// Records the reply of a call that [`Drc::lookup`] reported as new.
    pub fn complete(&self, ip: IpAddr, key: Key, reply: Bytes) {
        let mut guard = self.shard(&ip).lock().unwrap();
        let shard = &mut *guard;
        if let Some(e) = shard
            .clients
            .get_mut(&ip)
            .and_then(|c| c.entries.get_mut(&key))
        {
            shard.bytes += reply.len();
            *e = Some(reply);
        }
        self.trim(shard, ip, key);
    }

    /// Evicts the oldest entries until the shard is within its budget: the
    /// filling client's own first, then other clients' (never `keep`, the
    /// entry just completed, unless it alone is over the budget).
    fn trim(&self, shard: &mut Shard, ip: IpAddr, keep: Key) {
        let mut others: Vec<IpAddr> = Vec::new();
        let mut evicted = 0u64;
        while shard.bytes > self.shard_bytes {
            let victim = shard.clients.get_mut(&ip).and_then(|c| {
                let k = *c.order.front()?;
                (k != keep).then(|| {
                    c.order.pop_front();
                    c.entries.remove(&k)
                })
            });
            let freed = match victim {
                Some(r) => r,
                None => {
                    if others.is_empty() {
                        others = shard
                            .clients
                            .keys()
                            .filter(|a| **a != ip)
                            .copied()
                            .collect();
                        if others.is_empty() {
                            break;
                        }
                    }
                    let Some(o) = others.pop() else { break };
                    let c = shard.clients.get_mut(&o).expect("listed");
                    let Some(k) = c.order.pop_front() else {
                        shard.clients.remove(&o);
                        continue;
                    };
                    let r = c.entries.remove(&k);
                    if !c.order.is_empty() {
                        others.push(o);
                    }
                    r
                }
            };
            if let Some(r) = freed {
                shard.bytes -= cost(&r);
                evicted += 1;
            }
        }
        if evicted > 0 {
            self.byte_evictions
                .fetch_add(evicted, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Entries evicted so far to stay within the byte budget.
    pub fn byte_evictions(&self) -> u64 {
        self.byte_evictions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes held, all shards (what the byte budget bounds).
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().bytes).sum()
    }

    /// (entries, approximate bytes) held, for the metrics; walks every
    /// shard, so it is called by the metrics reader, never on a request.
    pub fn usage(&self) -> (u64, u64) {
        let (mut n, mut bytes) = (0u64, 0u64);
        for shard in &self.shards {
            let shard = shard.lock().unwrap();
            n += shard
                .clients
                .values()
                .map(|c| c.entries.len() as u64)
                .sum::<u64>();
            bytes += shard.bytes as u64;
        }
        (n, bytes)
    }

    /// Forgets a call that produced no reply, so a retransmission is executed.
    pub fn abandon(&self, ip: IpAddr, key: Key) {
        let mut guard = self.shard(&ip).lock().unwrap();
        let shard = &mut *guard;
        if let Some(c) = shard.clients.get_mut(&ip) {
            if let Some(r) = c.entries.remove(&key) {
                shard.bytes -= cost(&r);
            }
            c.order.retain(|k| *k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32) -> Key {
        Key {
            gss_ctx: 0,
            xid,
            prog: 100003,
            vers: 3,
            proc_: 12,
            args_sum: 1,
        }
    }

    #[test]
    fn retransmission_gets_the_original_reply() {
        let d = Drc::new(4);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(d.lookup(ip, key(1)), Lookup::New);
        assert_eq!(d.lookup(ip, key(1)), Lookup::InProgress);
        d.complete(ip, key(1), Bytes::from_static(b"ok"));
        assert_eq!(
            d.lookup(ip, key(1)),
            Lookup::Done(Bytes::from_static(b"ok"))
        );
        // Another client with the same xid is another call.
        assert_eq!(d.lookup("10.0.0.2".parse().unwrap(), key(1)), Lookup::New);
    }

    #[test]
    fn bounded_per_client() {
        let d = Drc::new(2);
        let ip: IpAddr = "::1".parse().unwrap();
        for x in 0..3 {
            assert_eq!(d.lookup(ip, key(x)), Lookup::New);
            d.complete(ip, key(x), Bytes::new());
        }
        assert_eq!(d.lookup(ip, key(0)), Lookup::New, "oldest evicted");
        assert!(matches!(d.lookup(ip, key(2)), Lookup::Done(_)));
    }

    #[test]
    fn bounded_in_bytes() {
        // 16 shards of 2 KiB: a client's 1 KiB replies keep at most two.
        let d = Drc::with_max_bytes(1000, 16 * 2048);
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        for x in 0..50 {
            assert_eq!(d.lookup(ip, key(x)), Lookup::New);
            d.complete(ip, key(x), Bytes::from(vec![0u8; 1000]));
        }
        assert!(d.bytes() <= 2048, "{} bytes held", d.bytes());
        assert!(d.byte_evictions() >= 48);
        assert!(
            matches!(d.lookup(ip, key(49)), Lookup::Done(_)),
            "newest kept"
        );
        assert_eq!(d.lookup(ip, key(0)), Lookup::New, "oldest evicted");
        // Abandoned and evicted entries give their bytes back.
        d.abandon(ip, key(0));
        let (n, b) = d.usage();
        assert!(n <= 3 && b as usize == d.bytes());
    }
}
