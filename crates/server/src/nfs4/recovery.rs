//! Stable record of the NFSv4 clients that hold state, so that after a
//! restart (or, in a cluster, a failover) exactly those clients may
//! reclaim during the grace period (RFC 8881 §8.4.2). The records live in
//! a [`RecoveryStore`]: the state directory's file by default, etcd for a
//! cluster. This is one head's view of it: its own records, and the ones
//! it took over from failed heads.

use crate::cluster::{LocalStore, RecoveryStore};
use bytes::Bytes;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct Recovery {
    store: Arc<dyn RecoveryStore>,
    node: Arc<str>,
    /// The cluster epoch new records belong to (0: one head).
    epoch: Arc<AtomicU64>,
    previous: Arc<HashSet<Bytes>>,
    /// Owners that may reclaim here → the head whose record names them
    /// (this one's after a restart, a failed head's after a takeover).
    origin: Arc<Mutex<HashMap<Bytes, Arc<str>>>>,
    /// Owners known to be recorded for this head: a second record of one
    /// (the driver records before confirming, then again when the state
    /// core asks) costs no store round trip.
    known: Arc<Mutex<HashSet<Bytes>>>,
}

impl Recovery {
    /// Loads the record the previous server instance left in the state
    /// directory. The clients in it may reclaim; the new instance's record
    /// starts out the same, so a second restart during grace keeps them.
    pub fn open(path: &Path) -> io::Result<Recovery> {
        Self::with_store(Arc::new(LocalStore::open(path)?), "local", 0)
    }

    /// This head's records in `store`, as `node`, at cluster epoch `epoch`.
    pub fn with_store(
        store: Arc<dyn RecoveryStore>,
        node: &str,
        epoch: u64,
    ) -> io::Result<Recovery> {
        let node: Arc<str> = node.into();
        let previous: HashSet<Bytes> = store.clients(&node)?.into_iter().map(|(o, _)| o).collect();
        let origin = previous.iter().map(|o| (o.clone(), node.clone())).collect();
        Ok(Recovery {
            store,
            node,
            epoch: Arc::new(AtomicU64::new(epoch)),
            previous: Arc::new(previous.clone()),
            origin: Arc::new(Mutex::new(origin)),
            known: Arc::new(Mutex::new(previous)),
        })
    }

    pub fn previous(&self) -> HashSet<Bytes> {
        (*self.previous).clone()
    }

    pub fn store(&self) -> &Arc<dyn RecoveryStore> {
        &self.store
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Takes over the records of the failed head `node`: its clients may
    /// reclaim here. Returns them.
    pub fn adopt(&self, node: &str) -> io::Result<HashSet<Bytes>> {
        let owners: HashSet<Bytes> = self
            .store
            .clients(node)?
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        let node: Arc<str> = node.into();
        let mut m = self.origin.lock().unwrap();
        for o in &owners {
            m.entry(o.clone()).or_insert_with(|| node.clone());
        }
        Ok(owners)
    }

    /// Records `owner`, durably before this returns Ok. On failure it is
    /// not in the record (so a caller that refuses the client because of
    /// it leaves nothing behind).
    pub fn add(&self, owner: &Bytes) -> io::Result<()> {
        if self.known.lock().unwrap().contains(owner) {
            return Ok(());
        }
        self.store
            .add_client(&self.node, owner, self.epoch.load(Ordering::Relaxed))?;
        self.known.lock().unwrap().insert(owner.clone());
        Ok(())
    }

    pub fn remove(&self, owner: &Bytes) -> io::Result<()> {
        self.store.remove_client(&self.node, owner)?;
        self.known.lock().unwrap().remove(owner);
        Ok(())
    }

    /// `owner` sent RECLAIM_COMPLETE here: its record moves to this head
    /// and the current epoch (nothing to do with one head and no epochs).
    pub fn reclaimed(&self, owner: &Bytes) -> io::Result<()> {
        let Some(from) = self.origin.lock().unwrap().remove(owner) else {
            return Ok(());
        };
        self.known.lock().unwrap().insert(owner.clone());
        let others: Vec<String> = if *from == *self.node {
            vec![]
        } else {
            vec![from.to_string()]
        };
        self.store.reclaimed(
            &self.node,
            owner,
            self.epoch.load(Ordering::Relaxed),
            &others,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_add_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        // The record's path is a directory: every write fails.
        let p = d.path().join("v4clients");
        let r = Recovery::open(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert!(r.add(&Bytes::from_static(b"a")).is_err());
        std::fs::remove_dir(&p).unwrap();
        r.add(&Bytes::from_static(b"b")).unwrap();
        let r2 = Recovery::open(&p).unwrap();
        assert_eq!(r2.previous(), HashSet::from([Bytes::from_static(b"b")]));
        // A retry of the one that failed is written this time.
        r.add(&Bytes::from_static(b"a")).unwrap();
        assert_eq!(Recovery::open(&p).unwrap().previous().len(), 2);
    }

    #[test]
    fn survives_a_restart() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("v4clients");
        let r = Recovery::open(&p).unwrap();
        assert!(r.previous().is_empty());
        r.add(&Bytes::from_static(b"linux client a")).unwrap();
        r.add(&Bytes::from_static(b"\x00\xffb")).unwrap();
        r.remove(&Bytes::from_static(b"linux client a")).unwrap();
        let r2 = Recovery::open(&p).unwrap();
        assert_eq!(
            r2.previous(),
            HashSet::from([Bytes::from_static(b"\x00\xffb")])
        );
    }
}
