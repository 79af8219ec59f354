//! Stable record of the NFSv4 clients that hold state, so that after a
//! restart exactly those clients may reclaim during the grace period
//! (RFC 8881 §8.4.2). One hex-encoded client owner per line; rewritten
//! atomically (temporary file, fsync, rename) when a client is confirmed
//! or goes away, which is rare next to the I/O it enables.

use bytes::Bytes;
use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct Recovery {
    path: PathBuf,
    current: Arc<Mutex<HashSet<Bytes>>>,
    previous: Arc<HashSet<Bytes>>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Bytes> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(Bytes::from)
}

impl Recovery {
    /// Loads the record the previous server instance left. The clients in
    /// it may reclaim; the new instance's record starts out the same, so a
    /// second restart during grace keeps them.
    pub fn open(path: &Path) -> io::Result<Recovery> {
        let previous: HashSet<Bytes> = match std::fs::read_to_string(path) {
            Ok(s) => s.lines().filter_map(|l| unhex(l.trim())).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => HashSet::new(),
            Err(e) => return Err(e),
        };
        Ok(Recovery {
            path: path.to_path_buf(),
            current: Arc::new(Mutex::new(previous.clone())),
            previous: Arc::new(previous),
        })
    }

    pub fn previous(&self) -> HashSet<Bytes> {
        (*self.previous).clone()
    }

    /// Records `owner`, on disk before this returns Ok. On failure it is
    /// not in the record (so a caller that refuses the client because of
    /// it leaves nothing behind).
    pub fn add(&self, owner: &Bytes) -> io::Result<()> {
        let mut cur = self.current.lock().unwrap();
        if cur.insert(owner.clone()) {
            if let Err(e) = self.write(&cur) {
                cur.remove(owner);
                return Err(e);
            }
        }
        Ok(())
    }

    pub fn remove(&self, owner: &Bytes) -> io::Result<()> {
        let mut cur = self.current.lock().unwrap();
        if cur.remove(owner) {
            self.write(&cur)?;
        }
        Ok(())
    }

    fn write(&self, set: &HashSet<Bytes>) -> io::Result<()> {
        let mut text = String::with_capacity(set.len() * 33);
        for o in set {
            text.push_str(&hex(o));
            text.push('\n');
        }
        vfs::durable::replace(&self.path, text.as_bytes())
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
