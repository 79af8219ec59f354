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
    shards: Vec<Mutex<HashMap<IpAddr, ClientCache>>>,
}

/// A cheap checksum of the first bytes of the arguments (FNV-1a).
pub fn args_sum(args: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut h, &args[..args.len().min(256)]);
    std::hash::Hasher::finish(&h) ^ args.len() as u64
}

impl Drc {
    pub fn new(per_client: usize) -> Self {
        Drc {
            per_client: per_client.max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, ip: &IpAddr) -> &Mutex<HashMap<IpAddr, ClientCache>> {
        let h = match ip {
            IpAddr::V4(a) => u32::from(*a) as usize,
            IpAddr::V6(a) => u128::from(*a) as usize,
        };
        &self.shards[h.wrapping_mul(0x9e37_79b9) % SHARDS]
    }

    pub fn lookup(&self, ip: IpAddr, key: Key) -> Lookup {
        let mut shard = self.shard(&ip).lock().unwrap();
        let c = shard.entry(ip).or_default();
        match c.entries.get(&key) {
            Some(None) => Lookup::InProgress,
            Some(Some(r)) => Lookup::Done(r.clone()),
            None => {
                if c.order.len() >= self.per_client {
                    // Oldest first; the evicted entry may be in progress, in
                    // which case a late retransmission is simply executed.
                    if let Some(old) = c.order.pop_front() {
                        c.entries.remove(&old);
                    }
                }
                c.entries.insert(key, None);
                c.order.push_back(key);
                Lookup::New
            }
        }
    }

    /// Records the reply of a call that [`Drc::lookup`] reported as new.
    pub fn complete(&self, ip: IpAddr, key: Key, reply: Bytes) {
        let mut shard = self.shard(&ip).lock().unwrap();
        if let Some(e) = shard.get_mut(&ip).and_then(|c| c.entries.get_mut(&key)) {
            *e = Some(reply);
        }
    }

    /// (entries, approximate bytes) held, for the metrics; walks every
    /// shard, so it is called by the metrics reader, never on a request.
    pub fn usage(&self) -> (u64, u64) {
        let (mut n, mut bytes) = (0u64, 0u64);
        for shard in &self.shards {
            let shard = shard.lock().unwrap();
            for c in shard.values() {
                n += c.entries.len() as u64;
                bytes += c
                    .entries
                    .values()
                    .map(|r| {
                        r.as_ref().map_or(0, |b| b.len()) + 2 * std::mem::size_of::<Key>() + 16
                    })
                    .sum::<usize>() as u64;
            }
        }
        (n, bytes)
    }

    /// Forgets a call that produced no reply, so a retransmission is executed.
    pub fn abandon(&self, ip: IpAddr, key: Key) {
        let mut shard = self.shard(&ip).lock().unwrap();
        if let Some(c) = shard.get_mut(&ip) {
            c.entries.remove(&key);
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
}
