//! One `tarn serve` per state directory.
//!
//! The state directory holds what a server owns alone: the admin socket,
//! the NFSv4 client record, the NSM state number and host records. Two
//! servers sharing one would take each other's socket and rewrite each
//! other's records, so a server holds an exclusive flock(2) on
//! `STATE_DIR/lock` for its whole life and writes its PID there for the
//! message a second server prints. The kernel drops the lock when the
//! process exits, however it exits, so a stale file never blocks a start.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Held while the server runs; dropping it (or exiting) releases the lock.
pub struct StateLock {
    _file: File,
    pub path: PathBuf,
}

pub const LOCK_FILE: &str = "lock";

/// Takes the lock of `dir` or says which process holds it.
pub fn acquire(dir: &Path) -> Result<StateLock, String> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {
            let pid = format!("{}\n", std::process::id());
            file.set_len(0)
                .and_then(|()| file.write_all_at(pid.as_bytes(), 0))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(StateLock { _file: file, path })
        }
        Err(TryLockError::WouldBlock) => Err(format!(
            "state directory {} is in use by another tarn serve (PID {}, which holds {}): stop it, or give this one another --state-dir",
            dir.display(),
            holder(&path),
            path.display()
        )),
        Err(TryLockError::Error(e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// The PID the holder wrote; it writes it just after locking, so an empty
/// file is read again for a moment before giving up.
fn holder(path: &Path) -> String {
    let t = Instant::now();
    loop {
        let s = std::fs::read_to_string(path).unwrap_or_default();
        let pid = s.trim();
        if !pid.is_empty() {
            return pid.to_string();
        }
        if t.elapsed() > Duration::from_secs(1) {
            return "unknown".into();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder() {
        let d = tempfile::tempdir().unwrap();
        let first = acquire(d.path()).unwrap();
        let pid = std::fs::read_to_string(&first.path).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        // flock locks belong to the open file: a second open conflicts even
        // within one process.
        let e = acquire(d.path()).err().unwrap();
        assert!(e.contains(&d.path().display().to_string()), "{e}");
        assert!(e.contains(&format!("PID {}", std::process::id())), "{e}");
        drop(first);
        let again = acquire(d.path()).unwrap();
        drop(again);
    }
}
