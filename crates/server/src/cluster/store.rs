//! Where recovery records live. One trait, two implementations: the
//! local state directory (one head; the file format of before, node names
//! ignored) and etcd ([`super::etcd`]; per-head keys, shared by
//! every head). Blocking calls: the NFSv4 driver runs them on its pool.

use super::grace::ClusterGrace;
use bytes::Bytes;
use std::collections::HashSet;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The records a head needs to let clients reclaim after a restart or a
/// failover: NFSv4 client records, NSM monitored hosts, the grace record. `node` names a head; `epoch` is the cluster epoch a record
/// was written in (see [`ClusterGrace`]; 0 for a single head).
pub trait RecoveryStore: Send + Sync {
    /// The NFSv4 client owners recorded for `node`, each with its epoch.
    fn clients(&self, node: &str) -> io::Result<Vec<(Bytes, u64)>>;
    /// Records `owner` for `node` (durable on Ok); an existing record
    /// keeps its epoch, so a client that came back but has not reclaimed
    /// yet still counts as one to wait for.
    fn add_client(&self, node: &str, owner: &Bytes, epoch: u64) -> io::Result<()>;
    fn remove_client(&self, node: &str, owner: &Bytes) -> io::Result<()>;
    /// `owner` finished reclaiming on `node`: its record there is of
    /// `epoch` now, and the records other (failed) heads kept for it go.
    fn reclaimed(&self, node: &str, owner: &Bytes, epoch: u64, from: &[String]) -> io::Result<()>;
    /// The NLM hosts `node` granted monitored locks to (caller name,
    /// address), so the head that takes over a failed one can send them
    /// SM_NOTIFY.
    fn monitored(&self, node: &str) -> io::Result<Vec<(Bytes, IpAddr)>>;
    fn monitor(&self, node: &str, name: &[u8], addr: IpAddr) -> io::Result<()>;
    fn unmonitor(&self, node: &str, name: &[u8]) -> io::Result<()>;
    /// The shared grace record and a version for [`RecoveryStore::swap_grace`]
    /// (None: no record yet).
    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)>;
    /// Replaces the grace record if it is still at `version`; false: someone
    /// changed it first (read it again and retry).
    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool>;
}

pub(crate) fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

pub(crate) fn unhex(s: &str) -> Option<Bytes> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

/// The state directory's record: a log of hex-encoded client owners, one
/// per line, a line starting with `-` removing one. A change appends one
/// line and syncs it, so a new client costs the same whether 10 or 10,000
/// are recorded (rewriting the whole set on every change made a change
/// with 8,000 recorded cost a 0.4 MB write and 18 ms, 39 times one with 10:
/// `cargo bench -p server --bench client_records`). Once the log holds more
/// than twice the live records (plus [`COMPACT_SLACK`]), it is rewritten
/// atomically (temporary file, fsync, rename) as the live set alone: O(1)
/// per change amortised. A change is refused while the file system could
/// not hold that rewrite (or is read-only), as it was when every change
/// rewrote. A record file of before (owners only) reads the same. One
/// head: the node names and epochs are not stored, and the grace record
/// stays in memory (nobody else reads it).
pub struct LocalStore {
    path: PathBuf,
    /// [`COMPACT_SLACK`], smaller in tests.
    slack: usize,
    log: Mutex<Log>,
    grace: Mutex<(Option<ClusterGrace>, u64)>,
}

/// Log lines beyond twice the live records before the file is compacted.
pub const COMPACT_SLACK: usize = 1024;

struct Log {
    current: HashSet<Bytes>,
    /// The bytes `current` takes written out (the size of a compacted file).
    live_bytes: u64,
    /// Lines in the file.
    lines: usize,
    /// False: the file is rewritten whole at the next change (it does not
    /// exist yet, ends in a torn line, or an append failed and may have
    /// left one).
    appendable: bool,
}

/// An owner's line in the file, without the `-` of a removal.
fn line_len(owner: &[u8]) -> u64 {
    owner.len() as u64 * 2 + 1
}

impl LocalStore {
    pub fn open(path: &Path) -> io::Result<LocalStore> {
        Self::open_with(path, COMPACT_SLACK)
    }

    fn open_with(path: &Path, slack: usize) -> io::Result<LocalStore> {
        let text = match std::fs::read_to_string(path) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut current = HashSet::new();
        let mut lines = 0;
        let mut clean = false;
        if let Some(text) = &text {
            // A last line without its newline is an append a crash cut
            // short: it was never acknowledged.
            clean = text.is_empty() || text.ends_with('\n');
            let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
            for l in complete.lines().map(str::trim).filter(|l| !l.is_empty()) {
                lines += 1;
                match l.strip_prefix('-') {
                    Some(gone) => {
                        if let Some(o) = unhex(gone) {
                            current.remove(&o);
                        }
                    }
                    None => {
                        if let Some(o) = unhex(l) {
                            current.insert(o);
                        }
                    }
                }
            }
        }
        let live_bytes = current.iter().map(|o| line_len(o)).sum();
        Ok(LocalStore {
            path: path.to_path_buf(),
            slack,
            log: Mutex::new(Log {
                current,
                live_bytes,
                lines,
                appendable: clean,
            }),
            grace: Mutex::new((None, 0)),
        })
    }

    /// Records `line` (the change already made to `log.current`), durably.
    fn append(&self, log: &mut Log, line: &str) -> io::Result<()> {
        if !log.appendable || log.lines + 1 > 2 * log.current.len() + self.slack {
            return self.compact(log);
        }
        // Room is kept for the compacted file the log will need one day.
        match vfs::durable::append(&self.path, line.as_bytes(), log.live_bytes) {
            Ok(()) => {
                log.lines += 1;
                Ok(())
            }
            Err(e) => {
                log.appendable = false;
                Err(e)
            }
        }
    }

    /// Rewrites the file as the live set alone.
    fn compact(&self, log: &mut Log) -> io::Result<()> {
        log.appendable = false;
        let mut text = String::with_capacity(log.current.len() * 33);
        for o in &log.current {
            text.push_str(&hex(o));
            text.push('\n');
        }
        vfs::durable::replace(&self.path, text.as_bytes())?;
        log.lines = log.current.len();
        log.appendable = true;
        Ok(())
    }
}

impl RecoveryStore for LocalStore {
    fn clients(&self, _node: &str) -> io::Result<Vec<(Bytes, u64)>> {
        Ok(self
            .log
            .lock()
            .unwrap()
            .current
            .iter()
            .map(|o| (o.clone(), 0))
            .collect())
    }

    /// On failure the owner is not in the record (so a caller that
    /// refuses the client because of it leaves nothing behind).
    fn add_client(&self, _node: &str, owner: &Bytes, _epoch: u64) -> io::Result<()> {
        let mut log = self.log.lock().unwrap();
        if log.current.insert(owner.clone()) {
            log.live_bytes += line_len(owner);
            let line = format!("{}\n", hex(owner));
            if let Err(e) = self.append(&mut log, &line) {
                log.current.remove(owner);
                log.live_bytes -= line_len(owner);
                return Err(e);
            }
        }
        Ok(())
    }

    fn remove_client(&self, _node: &str, owner: &Bytes) -> io::Result<()> {
        let mut log = self.log.lock().unwrap();
        if log.current.remove(owner) {
            log.live_bytes -= line_len(owner);
            let line = format!("-{}\n", hex(owner));
            self.append(&mut log, &line)?;
        }
        Ok(())
    }

    fn reclaimed(&self, _: &str, _: &Bytes, _: u64, _: &[String]) -> io::Result<()> {
        Ok(())
    }

    /// One head: the NSM host records stay where `nlm::nsm::Nsm` keeps
    /// them (`<state-dir>/nsm/hosts`), read back at start; nobody else
    /// needs them.
    fn monitored(&self, _node: &str) -> io::Result<Vec<(Bytes, IpAddr)>> {
        Ok(Vec::new())
    }

    fn monitor(&self, _: &str, _: &[u8], _: IpAddr) -> io::Result<()> {
        Ok(())
    }

    fn unmonitor(&self, _: &str, _: &[u8]) -> io::Result<()> {
        Ok(())
    }

    fn grace(&self) -> io::Result<(Option<ClusterGrace>, u64)> {
        Ok(self.grace.lock().unwrap().clone())
    }

    fn swap_grace(&self, g: &ClusterGrace, version: u64) -> io::Result<bool> {
        let mut cur = self.grace.lock().unwrap();
        if cur.1 != version {
            return Ok(false);
        }
        *cur = (Some(g.clone()), version + 1);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Where a test's store lives: a fresh directory (removed when the
    /// guard drops) and the log's path in it.
    fn store_path() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v4clients");
        (dir, path)
    }

    fn owners(s: &LocalStore) -> Vec<Bytes> {
        let mut v: Vec<Bytes> = s
            .clients("local")
            .unwrap()
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        v.sort();
        v
    }

    fn o(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn changes_survive_a_reopen() {
        let (_dir, path) = store_path();
        let s = LocalStore::open(&path).unwrap();
        for n in ["a", "b", "c"] {
            s.add_client("local", &o(n), 0).unwrap();
        }
        s.remove_client("local", &o("b")).unwrap();
        s.add_client("local", &o("a"), 0).unwrap();
        drop(s);
        let s = LocalStore::open(&path).unwrap();
        assert_eq!(owners(&s), vec![o("a"), o("c")]);
        // And the reopened log goes on from there.
        s.remove_client("local", &o("a")).unwrap();
        drop(s);
        assert_eq!(owners(&LocalStore::open(&path).unwrap()), vec![o("c")]);
    }

    #[test]
    fn a_change_appends_one_line_whatever_is_recorded() {
        let (_dir, path) = store_path();
        let s = LocalStore::open(&path).unwrap();
        for i in 0..300 {
            s.add_client("local", &o(&format!("client-{i}")), 0)
                .unwrap();
        }
        // Appended to the same file, not a new file renamed into place.
        let meta = || {
            let m = std::fs::metadata(&path).unwrap();
            (m.ino(), m.len())
        };
        let (ino, before) = meta();
        s.add_client("local", &o("one more"), 0).unwrap();
        let after = meta();
        assert_eq!(after, (ino, before + "one more".len() as u64 * 2 + 1));
        s.remove_client("local", &o("client-7")).unwrap();
        let removed = meta();
        assert_eq!(removed, (ino, after.1 + "client-7".len() as u64 * 2 + 2));
    }

    #[test]
    fn the_log_is_compacted_to_the_live_set() {
        let (_dir, path) = store_path();
        let slack = 16;
        let s = LocalStore::open_with(&path, slack).unwrap();
        s.add_client("local", &o("stays"), 0).unwrap();
        // Clients that come and go: the file does not grow with them.
        for i in 0..10 * slack {
            let c = o(&format!("passing-{i}"));
            s.add_client("local", &c, 0).unwrap();
            s.remove_client("local", &c).unwrap();
        }
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 2 + slack, "{lines} lines");
        drop(s);
        assert_eq!(owners(&LocalStore::open(&path).unwrap()), vec![o("stays")]);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_rewritten() {
        let (_dir, path) = store_path();
        // The old format (owners only), then an append a crash cut short.
        std::fs::write(
            &path,
            format!("{}\n{}\n{}", hex(b"a"), hex(b"b"), &hex(b"torn")[..5]),
        )
        .unwrap();
        let s = LocalStore::open(&path).unwrap();
        assert_eq!(owners(&s), vec![o("a"), o("b")]);
        s.add_client("local", &o("c"), 0).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.ends_with('\n') && !text.contains(&hex(b"torn")[..5]),
            "{text:?}"
        );
        drop(s);
        assert_eq!(
            owners(&LocalStore::open(&path).unwrap()),
            vec![o("a"), o("b"), o("c")]
        );
    }
}
