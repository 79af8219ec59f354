//! The cost of a failover's grace and reclaims with many clients: three
//! heads' state cores over one in-memory recovery store (counting what
//! is read and written), the cluster grace rules between them. Head a
//! has every client (an open and a lock each) and fails; b and c take
//! over its records, the clients reclaim on b or c, and the grace lifts
//! when a's records are drained. Prints the numbers (docs/cluster.md).
//!
//! `TARN_CLUSTER_SIM_CLIENTS=10000 cargo test -p server --release --lib
//! cluster_failover_cost -- --nocapture` for the documented run (CI runs
//! it with 2,000).

use super::{attrs, PRINCIPAL};
use crate::cluster::{ClusterGrace, Params, RecoveryStore};
use crate::grace::Grace;
use crate::locks::{FileKey, LockKind, LockManager, OwnerKey};
use crate::nfs4::recovery::Recovery;
use crate::nfs4::state::session::Session;
use crate::nfs4::state::{ClusterHold, Effect, State, StateLimits, ACCESS_BOTH};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An in-memory store that counts operations (reads, writes), as etcd
/// would see them: one write per put or delete of a key.
#[derive(Default)]
struct MemStore {
    clients: Mutex<BTreeMap<(String, Bytes), u64>>,
    grace: Mutex<(Option<ClusterGrace>, u64)>,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl RecoveryStore for MemStore {
    fn clients(&self, node: &str) -> io::Result<Vec<(Bytes, u64)>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .clients
            .lock()
            .unwrap()
            .iter()
            .filter(|((n, _), _)| n == node)
            .map(|((_, o), e)| (o.clone(), *e))
            .collect())
    }
    fn add_client(&self, node: &str, owner: &Bytes, epoch: u64) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.clients
            .lock()
            .unwrap()
            .entry((node.into(), owner.clone()))
            .or_insert(epoch);
        Ok(())
    }
    fn remove_client(&self, node: &str, owner: &Bytes) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.clients
            .lock()
            .unwrap()
            .remove(&(node.into(), owner.clone()));
        Ok(())
    }
    fn reclaimed(&self, node: &str, owner: &Bytes, epoch: u64, from: &[String]) -> io::Result<()> {
        // One transaction: a put and a delete per failed head.
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut m = self.clients.lock().unwrap();
        m.insert((node.into(), owner.clone()), epoch);
        for f in from {
            m.remove(&(f.clone(), owner.clone()));
        }
        Ok(())
    }
    fn monitored(&self, _: &str) -> io::Result<Vec<(Bytes, std::net::IpAddr)>> {
        Ok(Vec::new())
    }
    fn monitor(&self, _: &str, _: &[u8], _: std::net::IpAddr) -> io::Result<()> {
        Ok(())
    }
    fn unmonitor(&self, _: &str, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(self.grace.lock().unwrap().clone())
    }
    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut cur = self.grace.lock().unwrap();
        if cur.1 != version {
            return Ok(false);
        }
        *cur = (Some(g.clone()), version + 1);
        Ok(true)
    }
}

struct HeadSim {
    st: Arc<State>,
    rec: Recovery,
}

fn file(i: usize) -> FileKey {
    FileKey {
        export: 1,
        fid: vfs::Fid::new(&(i as u64).to_be_bytes()).unwrap(),
    }
}

fn head(store: &Arc<MemStore>, node: &str) -> HeadSim {
    // Room for every client on one head (the default bound is 8,192).
    let limits = StateLimits {
        max_clients: 1 << 20,
        ..StateLimits::default()
    };
    let st = Arc::new(
        State::new(
            Duration::from_secs(90),
            Arc::new(LockManager::new()),
            node.len() as u32,
        )
        .with_limits(limits),
    );
    let rec = Recovery::with_store(store.clone(), node, 0).unwrap();
    HeadSim { st, rec }
}

/// EXCHANGE_ID and CREATE_SESSION of an NFSv4.1 client; recorded first,
/// as the driver does before confirming.
fn connect(h: &HeadSim, owner: &Bytes, now: Instant) -> u64 {
    let (id, seq, _) =
        h.st.exchange_id(owner, [7; 8], PRINCIPAL, false, 1, now)
            .unwrap();
    h.rec.add(owner).unwrap();
    assert_eq!(h.st.create_session_seq(id, seq, PRINCIPAL, now), Ok(None));
    let sid = h.st.new_sessionid(id);
    let s = Arc::new(Session::new(sid, id, attrs(), attrs(), 0));
    h.st.add_session(s, Bytes::new(), now).unwrap();
    for e in h.st.take_effects() {
        if let Effect::PersistClient { owner } = e {
            h.rec.add(&owner).unwrap();
        }
    }
    id
}

/// An open and a write lock on the client's own file.
fn open_and_lock(h: &HeadSim, id: u64, i: usize, now: Instant) {
    let oo = Bytes::from_static(b"open-owner");
    let sid = h.st.open(id, &oo, file(i), ACCESS_BOTH, 0, now).unwrap();
    let owner = OwnerKey {
        client: id,
        owner: Bytes::from_static(b"lock-owner"),
    };
    let (other, _) =
        h.st.lock_state_from_open(&sid, &file(i), &owner, 1)
            .unwrap();
    h.st.locks
        .lock(file(i), &owner, LockKind::Write.range(0, 10))
        .unwrap();
    h.st.bump(&other);
}

fn clients_from_env() -> usize {
    std::env::var("TARN_CLUSTER_SIM_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

#[test]
fn cluster_failover_cost() {
    let n = clients_from_env();
    let p = Params {
        lease: u64::MAX,
        bound: 90_000,
    };
    let store = Arc::new(MemStore::default());
    let mut ms = 0u64;
    let step = |ms: &mut u64, f: &mut dyn FnMut(&mut ClusterGrace)| {
        *ms += 1;
        loop {
            let (cur, v) = store.grace().unwrap();
            let mut g = cur.unwrap_or_default();
            f(&mut g);
            if store.swap_grace(&g, v).unwrap() {
                return g;
            }
        }
    };
    for node in ["a", "b", "c"] {
        step(&mut ms, &mut |g| {
            g.start(node, 0, p);
        });
    }
    for node in ["a", "b", "c"] {
        step(&mut ms, &mut |g| {
            g.renew(node, 1, true, p);
        });
    }
    let heads: Vec<HeadSim> = ["a", "b", "c"].iter().map(|n| head(&store, n)).collect();
    let now = Instant::now();
    let owners: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("client-{i}"))).collect();

    // Every client on a: recorded, an open and a lock each.
    let t = Instant::now();
    for (i, o) in owners.iter().enumerate() {
        let id = connect(&heads[0], o, now);
        heads[0].st.reclaim_complete(id).unwrap();
        open_and_lock(&heads[0], id, i, now);
    }
    let setup = t.elapsed();
    let w0 = store.writes.load(Ordering::Relaxed);

    // a fails: the rules run, b and c take over its records.
    let t = Instant::now();
    let g = step(&mut ms, &mut |g| {
        g.lose(&["a".to_string()], 10, p);
    });
    assert!(g.in_grace());
    let rules = t.elapsed();
    let t = Instant::now();
    for h in &heads[1..] {
        let adopted = h.rec.adopt("a").unwrap();
        assert_eq!(adopted.len(), n);
        h.st.join_grace(adopted, Grace::new(now, Duration::from_secs(90)));
        h.st.set_cluster_grace(Some(ClusterHold::Reclaiming));
        h.rec.set_epoch(g.current);
    }
    let adopt = t.elapsed();

    // Each client reclaims on b or c.
    let t = Instant::now();
    let w1 = store.writes.load(Ordering::Relaxed);
    for (i, o) in owners.iter().enumerate() {
        let h = &heads[1 + i % 2];
        let id = connect(h, o, now);
        h.st.may_reclaim(id, now).unwrap();
        open_and_lock(h, id, i, now);
        h.st.reclaim_complete(id).unwrap();
        assert!(h.st.reclaimed_here(o));
        h.rec.reclaimed(o).unwrap();
    }
    let reclaim = t.elapsed();
    let w2 = store.writes.load(Ordering::Relaxed);

    // a's records are drained: the grace lifts at the next step.
    let t = Instant::now();
    assert!(store.clients("a").unwrap().is_empty());
    let g = step(&mut ms, &mut |g| {
        g.drained("a", 20);
        for node in ["b", "c"] {
            g.renew(node, 20, true, p);
        }
    });
    assert!(!g.in_grace());
    for h in &heads[1..] {
        h.st.end_grace();
        assert!(!h.st.in_grace(now));
    }
    let lift = t.elapsed();
    let moved: usize = ["b", "c"]
        .iter()
        .map(|n| store.clients(n).unwrap().len())
        .sum();
    assert_eq!(moved, n);
    eprintln!(
        "cluster failover, {n} clients, 3 heads: setup {setup:?} ({w0} store writes); \
         grace rules {rules:?}; takeover (read {n} records, on 2 heads) {adopt:?}; \
         reclaims {reclaim:?} ({:.1} µs/client, {} store writes: {:.1}/client); lift {lift:?}; \
         grace record swaps {ms}",
        reclaim.as_secs_f64() * 1e6 / n as f64,
        w2 - w1,
        (w2 - w1) as f64 / n as f64,
    );
}
