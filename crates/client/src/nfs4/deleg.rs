//! The client's delegations (RFC 8881 §10.2, §10.4) and the attributes
//! they let it answer without asking the server.
//!
//! Pure bookkeeping, no I/O: OPEN records what the server granted, `stat`
//! reads and fills the cache, WRITE notes what it changed, and the callback
//! service takes delegations out when the server recalls them (the session
//! then returns them). While a file is delegated, nobody else can change
//! it without a recall first, so its cached attributes stay true; for a
//! write delegation the client itself is the authority on size and change.

use super::attr::Attrs;
use bytes::Bytes;
use proto::nfs4::*;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelegKind {
    Read,
    Write,
}

/// One delegation held on one file.
#[derive(Clone, Debug)]
pub struct Delegation {
    pub fh: NfsFh4,
    pub stateid: Stateid4,
    pub kind: DelegKind,
    /// The file's attributes, once fetched under the delegation.
    pub attrs: Option<Attrs>,
    /// Write delegation: changed by this client since `attrs` came from
    /// the server. CB_GETATTR then reports a change attribute one higher
    /// (RFC 8881 §10.4.3), as Linux's client does.
    pub modified: bool,
    /// UNSTABLE writes not yet committed: flushed (COMMIT) before the
    /// delegation goes back.
    pub uncommitted: bool,
}

impl Delegation {
    /// Size and change as this client knows them (CB_GETATTR's answer).
    pub fn size_and_change(&self) -> Option<(u64, u64)> {
        let a = self.attrs.as_ref()?;
        Some((a.size?, a.change? + self.modified as u64))
    }
}

/// What to do about a CB_RECALL.
#[derive(Debug)]
pub enum Recall {
    /// Taken out of the table: flush and DELEGRETURN it.
    Return(Box<Delegation>),
    /// Kept, as the test hook asks (the server will revoke it).
    Ignored,
    /// Not (yet) known, but an OPEN is in flight whose reply may bring
    /// it: returned as soon as that OPEN records it.
    Early,
    /// Not known and no OPEN could bring it.
    Unknown,
}

#[derive(Default)]
struct Inner {
    by_fh: HashMap<Bytes, Delegation>,
    /// Stateids recalled before the OPEN that granted them was recorded
    /// (the CB_RECALL overtook the OPEN reply).
    early: HashSet<[u8; 12]>,
    opens_in_flight: usize,
}

/// Called with a delegated file's handle before its delegation goes back
/// (recall, CB_RECALL_ANY, unmount): whoever buffers data of the file
/// (a mount's write-back) sends it now. Returns true when everything
/// written under the delegation is also committed (no COMMIT owed then).
pub type BeforeReturn =
    Arc<dyn Fn(NfsFh4) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Every delegation a session's client holds, by file handle.
#[derive(Default)]
pub struct DelegTable {
    inner: Mutex<Inner>,
    ignore_recalls: AtomicBool,
    recalls: AtomicU64,
    returned: AtomicU64,
    before_return: Mutex<Option<BeforeReturn>>,
}

/// Counts delegation-bearing OPENs in flight while alive (see [`Recall::Early`]).
pub struct OpenInFlight<'a>(&'a DelegTable);

impl Drop for OpenInFlight<'_> {
    fn drop(&mut self) {
        let mut i = self.0.inner.lock().unwrap();
        i.opens_in_flight -= 1;
        if i.opens_in_flight == 0 {
            i.early.clear();
        }
    }
}

impl DelegTable {
    /// Test hook: answer CB_RECALL but never return the delegation (so
    /// that the server revokes it).
    pub fn set_ignore_recalls(&self, on: bool) {
        self.ignore_recalls.store(on, Ordering::Relaxed);
    }

    /// CB_RECALLs received so far.
    pub fn recalls_received(&self) -> u64 {
        self.recalls.load(Ordering::Relaxed)
    }

    /// Delegations given back so far (DELEGRETURN answered, or the server
    /// had already let go of them).
    pub fn returned(&self) -> u64 {
        self.returned.load(Ordering::Relaxed)
    }

    pub(crate) fn count_returned(&self) {
        self.returned.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets what runs before each delegation goes back (see [`BeforeReturn`]).
    pub fn set_before_return(&self, hook: Option<BeforeReturn>) {
        *self.before_return.lock().unwrap() = hook;
    }

    pub(crate) fn before_return(&self) -> Option<BeforeReturn> {
        self.before_return.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().by_fh.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The delegation held on `fh`, if any.
    pub fn get(&self, fh: &NfsFh4) -> Option<Delegation> {
        self.inner.lock().unwrap().by_fh.get(&fh.0).cloned()
    }

    /// The kind of delegation held on `fh` (no copy of what it caches).
    pub fn kind(&self, fh: &NfsFh4) -> Option<DelegKind> {
        self.inner.lock().unwrap().by_fh.get(&fh.0).map(|d| d.kind)
    }

    /// Held while an OPEN is outstanding.
    pub fn open_in_flight(&self) -> OpenInFlight<'_> {
        self.inner.lock().unwrap().opens_in_flight += 1;
        OpenInFlight(self)
    }

    /// Records the delegation an OPEN granted. Returns it back when it must
    /// be returned at once (recalled before we got here, or granted with
    /// `recall` set).
    pub fn granted(
        &self,
        fh: &NfsFh4,
        stateid: Stateid4,
        kind: DelegKind,
        recall: bool,
    ) -> Option<Delegation> {
        let d = Delegation {
            fh: fh.clone(),
            stateid,
            kind,
            attrs: None,
            modified: false,
            uncommitted: false,
        };
        let mut i = self.inner.lock().unwrap();
        if i.early.remove(&d.stateid.other) || recall {
            return Some(d);
        }
        // A second OPEN of a delegated file may bring the same delegation
        // again; what we know of the file stays.
        match i.by_fh.get_mut(&fh.0) {
            Some(old) if old.stateid.other == d.stateid.other => {
                old.stateid = d.stateid;
                old.kind = d.kind;
            }
            _ => {
                i.by_fh.insert(fh.0.clone(), d);
            }
        }
        None
    }

    /// Cached attributes of a delegated file.
    pub fn attrs(&self, fh: &NfsFh4) -> Option<Attrs> {
        self.inner.lock().unwrap().by_fh.get(&fh.0)?.attrs.clone()
    }

    /// Keeps attributes fetched from the server while `fh` is delegated
    /// (only the stateid that was held when they were asked for).
    pub fn store_attrs(&self, fh: &NfsFh4, under: &Stateid4, a: Attrs) {
        if let Some(d) = self.inner.lock().unwrap().by_fh.get_mut(&fh.0) {
            if d.stateid.other == under.other {
                d.attrs = Some(a);
                d.modified = false;
            }
        }
    }

    /// Forgets a delegated file's cached attributes (a change whose
    /// resulting attributes did not come back): the next stat asks.
    pub fn drop_attrs(&self, fh: &NfsFh4) {
        if let Some(d) = self.inner.lock().unwrap().by_fh.get_mut(&fh.0) {
            d.attrs = None;
        }
    }

    /// This client wrote `len` bytes at `offset`. Under a write delegation
    /// its own size and change stand; under a read one (the client may
    /// write through another open) the cache is dropped.
    pub fn wrote(&self, fh: &NfsFh4, offset: u64, len: u64, unstable: bool) {
        let mut i = self.inner.lock().unwrap();
        let Some(d) = i.by_fh.get_mut(&fh.0) else {
            return;
        };
        match d.kind {
            DelegKind::Read => d.attrs = None,
            DelegKind::Write => {
                d.uncommitted |= unstable;
                if let Some(a) = &mut d.attrs {
                    a.size = Some(a.size.unwrap_or(0).max(offset + len));
                    // Seen by local stat as one change, like CB_GETATTR.
                    d.modified = true;
                }
            }
        }
    }

    /// The file's data is on stable storage (after COMMIT).
    pub fn committed(&self, fh: &NfsFh4) {
        if let Some(d) = self.inner.lock().unwrap().by_fh.get_mut(&fh.0) {
            d.uncommitted = false;
        }
    }

    /// Cached attributes as `stat` should report them: a write delegation's
    /// own changes counted.
    pub fn local_attrs(&self, fh: &NfsFh4) -> Option<Attrs> {
        let i = self.inner.lock().unwrap();
        let d = i.by_fh.get(&fh.0)?;
        let mut a = d.attrs.clone()?;
        if d.modified {
            a.change = a.change.map(|c| c + 1);
        }
        Some(a)
    }

    /// CB_RECALL of `stateid` on `fh`.
    pub fn recall(&self, stateid: &Stateid4, fh: &NfsFh4) -> Recall {
        self.recalls.fetch_add(1, Ordering::Relaxed);
        let mut i = self.inner.lock().unwrap();
        let held = i
            .by_fh
            .iter()
            .find(|(_, d)| d.stateid.other == stateid.other)
            .map(|(k, _)| k.clone())
            // A server may name the file by the handle only.
            .or_else(|| i.by_fh.contains_key(&fh.0).then(|| fh.0.clone()));
        match held {
            Some(_) if self.ignore_recalls.load(Ordering::Relaxed) => Recall::Ignored,
            Some(k) => Recall::Return(Box::new(i.by_fh.remove(&k).expect("found above"))),
            None if i.opens_in_flight > 0 => {
                i.early.insert(stateid.other);
                Recall::Early
            }
            None => Recall::Unknown,
        }
    }

    /// CB_RECALL_ANY: takes out delegations of the kinds asked for, beyond
    /// `keep` of them, for the caller to return.
    pub fn recall_any(&self, keep: u32, read: bool, write: bool) -> Vec<Delegation> {
        if self.ignore_recalls.load(Ordering::Relaxed) {
            return vec![];
        }
        let mut i = self.inner.lock().unwrap();
        let mut of_kind: Vec<Bytes> = i
            .by_fh
            .iter()
            .filter(|(_, d)| match d.kind {
                DelegKind::Read => read,
                DelegKind::Write => write,
            })
            .map(|(k, _)| k.clone())
            .collect();
        // Those without cached attributes are the least used: first to go.
        of_kind.sort_by_key(|k| i.by_fh[k].attrs.is_some());
        let n = of_kind.len().saturating_sub(keep as usize);
        of_kind
            .into_iter()
            .take(n)
            .filter_map(|k| i.by_fh.remove(&k))
            .collect()
    }

    /// Takes the delegation on `fh` out (to return it).
    pub fn take(&self, fh: &NfsFh4) -> Option<Delegation> {
        self.inner.lock().unwrap().by_fh.remove(&fh.0)
    }

    /// Takes every delegation out (before the client goes away).
    pub fn take_all(&self) -> Vec<Delegation> {
        self.inner
            .lock()
            .unwrap()
            .by_fh
            .drain()
            .map(|(_, d)| d)
            .collect()
    }

    /// Every delegation's stateid (to test them after the server says
    /// some were revoked).
    pub fn stateids(&self) -> Vec<(NfsFh4, Stateid4)> {
        let i = self.inner.lock().unwrap();
        i.by_fh
            .values()
            .map(|d| (d.fh.clone(), d.stateid.clone()))
            .collect()
    }

    /// Forgets the delegation with this stateid (revoked by the server).
    pub fn forget(&self, stateid: &Stateid4) {
        let mut i = self.inner.lock().unwrap();
        i.by_fh.retain(|_, d| d.stateid.other != stateid.other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh(n: u8) -> NfsFh4 {
        NfsFh4(Bytes::from(vec![n; 8]))
    }
    fn sid(n: u8) -> Stateid4 {
        Stateid4 {
            seqid: 1,
            other: [n; 12],
        }
    }
    fn attrs(size: u64, change: u64) -> Attrs {
        Attrs {
            size: Some(size),
            change: Some(change),
            ..Attrs::default()
        }
    }

    #[test]
    fn attributes_are_cached_only_under_a_delegation() {
        let t = DelegTable::default();
        t.store_attrs(&fh(1), &sid(1), attrs(1, 1));
        assert!(t.attrs(&fh(1)).is_none(), "not delegated: nothing kept");
        assert!(t.granted(&fh(1), sid(1), DelegKind::Read, false).is_none());
        assert!(t.attrs(&fh(1)).is_none());
        t.store_attrs(&fh(1), &sid(1), attrs(5, 7));
        assert_eq!(t.attrs(&fh(1)), Some(attrs(5, 7)));
        t.store_attrs(&fh(1), &sid(9), attrs(6, 8));
        assert_eq!(
            t.attrs(&fh(1)),
            Some(attrs(5, 7)),
            "fetched under another stateid"
        );
    }

    #[test]
    fn recall_takes_the_delegation_out_unless_ignored() {
        let t = DelegTable::default();
        t.granted(&fh(1), sid(1), DelegKind::Read, false);
        t.granted(&fh(2), sid(2), DelegKind::Read, false);
        t.set_ignore_recalls(true);
        assert!(matches!(t.recall(&sid(2), &fh(2)), Recall::Ignored));
        assert_eq!(t.len(), 2);
        t.set_ignore_recalls(false);
        match t.recall(&sid(1), &fh(1)) {
            Recall::Return(d) => assert_eq!(d.fh, fh(1)),
            r => panic!("{r:?}"),
        }
        assert!(t.get(&fh(1)).is_none());
        assert!(matches!(t.recall(&sid(1), &fh(1)), Recall::Unknown));
        assert_eq!(t.recalls_received(), 3);
    }

    #[test]
    fn a_recall_that_overtakes_its_open_is_returned_at_grant() {
        let t = DelegTable::default();
        let g = t.open_in_flight();
        assert!(matches!(t.recall(&sid(3), &fh(3)), Recall::Early));
        let back = t.granted(&fh(3), sid(3), DelegKind::Read, false);
        assert!(back.is_some(), "returned at once");
        assert!(t.get(&fh(3)).is_none());
        drop(g);
        assert!(matches!(t.recall(&sid(4), &fh(4)), Recall::Unknown));
    }

    #[test]
    fn write_delegation_keeps_its_own_size_and_change() {
        let t = DelegTable::default();
        t.granted(&fh(1), sid(1), DelegKind::Write, false);
        t.store_attrs(&fh(1), &sid(1), attrs(10, 100));
        assert_eq!(t.get(&fh(1)).unwrap().size_and_change(), Some((10, 100)));
        t.wrote(&fh(1), 8, 10, true);
        let d = t.get(&fh(1)).unwrap();
        assert_eq!(d.size_and_change(), Some((18, 101)));
        assert!(d.uncommitted);
        t.wrote(&fh(1), 0, 1, false);
        assert_eq!(
            t.get(&fh(1)).unwrap().size_and_change(),
            Some((18, 101)),
            "one change until the server is asked again"
        );
        assert_eq!(t.local_attrs(&fh(1)).unwrap().change, Some(101));
        t.committed(&fh(1));
        assert!(!t.get(&fh(1)).unwrap().uncommitted);
    }

    #[test]
    fn read_delegation_drops_its_cache_on_own_write() {
        let t = DelegTable::default();
        t.granted(&fh(1), sid(1), DelegKind::Read, false);
        t.store_attrs(&fh(1), &sid(1), attrs(10, 100));
        t.wrote(&fh(1), 0, 1, false);
        assert!(t.attrs(&fh(1)).is_none());
    }

    #[test]
    fn recall_any_keeps_the_number_asked_of_the_kinds_asked() {
        let t = DelegTable::default();
        for n in 1..=4 {
            t.granted(&fh(n), sid(n), DelegKind::Read, false);
        }
        t.granted(&fh(5), sid(5), DelegKind::Write, false);
        t.store_attrs(&fh(1), &sid(1), attrs(1, 1));
        let back = t.recall_any(1, true, false);
        assert_eq!(back.len(), 3);
        assert!(back.iter().all(|d| d.kind == DelegKind::Read));
        assert!(t.get(&fh(1)).is_some(), "the one in use is kept");
        assert!(t.get(&fh(5)).is_some(), "write delegations not asked for");
        assert_eq!(t.recall_any(0, true, true).len(), 2);
        assert!(t.is_empty());
    }
}
