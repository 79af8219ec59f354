//! Files unlinked while open here: renamed to a hidden name and removed
//! at the last close, as Linux's client does ("silly rename").
//!
//! So that a mount that dies (SIGKILL, a crash) leaves no hidden names on
//! the server for ever, each one is recorded in a small file of this
//! mount's ([`SillyLog`]) before the RENAME and dropped after the REMOVE;
//! the next mount of the same export from this host removes what a dead
//! mount's record still names ([`clean_up`]).

use super::*;
use std::path::{Path, PathBuf};

impl State {
    /// Unlink of a file this mount still has open: the server would drop
    /// the file under the open descriptors (ESTALE on the next read), so,
    /// as Linux's client does, the name is renamed to a hidden one in the
    /// same directory and that is removed at the last close.
    pub(super) async fn silly_rename(
        &self,
        parent: u64,
        dfh: &Fh,
        name: &str,
        ino: u64,
    ) -> Result<(), i32> {
        let n = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let hidden = format!(".tarn{:x}.{:x}.{n:x}", std::process::id(), ino);
        // Recorded first: a crash between the two leaves a record of a
        // name that is not there, which the clean-up passes over.
        let log = self.silly_log.get();
        if let Some(l) = log {
            l.add(dfh, &hidden);
        }
        if let Err(e) = self.remote.rename(dfh, name, dfh, &hidden).await {
            if let Some(l) = log {
                l.remove(dfh, &hidden);
            }
            return Err(errno(e));
        }
        self.silly
            .lock()
            .expect("silly")
            .insert(ino, (dfh.clone(), hidden.clone()));
        self.dir_changed(parent);
        let mut tab = self.table.lock().expect("table");
        if let Some(node) = tab.get_mut(ino) {
            // Its ctime moved, and its link count shows one less.
            node.attr.invalidate();
        }
        tab.renamed(ino, parent, &hidden);
        Ok(())
    }

    /// The inode known here that `parent/name` names, if any: by the name
    /// the table has for it, else (a second hard link) by asking the
    /// server. None when the name is missing or the file is not known.
    pub(super) async fn victim(&self, parent: u64, dfh: &Fh, name: &str) -> Option<u64> {
        if let Some(i) = self.table.lock().expect("table").child(parent, name) {
            return Some(i);
        }
        let fh = self.remote.lookup(dfh, name).await.ok()?;
        self.table.lock().expect("table").ino_of(&fh)
    }

    /// The last open of `ino` went: a hidden name it was unlinked to goes.
    pub(super) async fn silly_remove(&self, ino: u64) {
        if !self.opens(ino).is_empty() {
            return;
        }
        let Some((dfh, hidden)) = self.silly.lock().expect("silly").remove(&ino) else {
            return;
        };
        match self.remote.remove(&dfh, &hidden).await {
            Ok(()) => {}
            Err(e) if e.is(client::remote::Kind::NoEnt) => {}
            Err(e) => {
                // Left in the record: the next mount tries again.
                tracing::warn!("cannot remove {hidden}, an unlinked file's hidden name: {e}");
                return self.forget_silly(ino);
            }
        }
        if let Some(l) = self.silly_log.get() {
            l.remove(&dfh, &hidden);
        }
        self.forget_silly(ino);
    }

    fn forget_silly(&self, ino: u64) {
        let mut tab = self.table.lock().expect("table");
        if tab.get(ino).is_some() {
            tab.renamed(ino, 0, "");
        }
    }
}

impl State {
    /// Hidden names waiting for their file's last close.
    pub fn silly_pending(&self) -> usize {
        self.silly.lock().expect("silly").len()
    }

    /// Records this mount's hidden names in `log` from now on.
    pub fn set_silly_log(&self, log: SillyLog) {
        let _ = self.silly_log.set(log);
    }
}

/// Where the records live: /run/tarn/silly for root, else
/// $XDG_RUNTIME_DIR/tarn/silly, else /tmp/tarn-UID/silly (per user: a
/// user's mount may remove only what that user's mounts left).
pub fn log_dir() -> PathBuf {
    if super::super::own_uid() == 0 {
        return PathBuf::from("/run/tarn/silly");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Path::new(&d).join("tarn/silly"),
        None => std::env::temp_dir()
            .join(format!("tarn-{}", super::super::own_uid()))
            .join("silly"),
    }
}

/// What a record says: whose it is (pid and the process's start time,
/// so a reused pid is not taken for a live mount), which export, and the
/// hidden names (directory handle in hex, name).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Record {
    pid: u32,
    start: u64,
    /// host:port/path of the export, and "3" or "4": handles of one
    /// protocol need not mean anything in the other.
    export: String,
    family: String,
    names: Vec<(String, String)>,
}

/// This mount's record file, rewritten whole (a new file renamed over
/// the old) at each change; gone when no name is pending.
pub struct SillyLog {
    path: PathBuf,
    rec: Mutex<Record>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The start time of process `pid` (clock ticks after boot, field 22 of
/// /proc/PID/stat); None if there is no such process.
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses, which may hold spaces.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    if f.first() == Some(&"Z") {
        return None;
    }
    f.get(19)?.parse().ok()
}

impl SillyLog {
    /// The record of this process's mount of `export` in `dir` (made on
    /// the first hidden name).
    pub fn new(dir: &Path, export: &str, family: &str) -> Option<SillyLog> {
        let pid = std::process::id();
        Some(SillyLog {
            path: dir.join(format!("{pid}.json")),
            rec: Mutex::new(Record {
                pid,
                start: start_time(pid)?,
                export: export.to_string(),
                family: family.to_string(),
                names: vec![],
            }),
        })
    }

    fn add(&self, dfh: &Fh, name: &str) {
        let mut r = self.rec.lock().expect("silly log");
        r.names.push((hex(&dfh.0), name.to_string()));
        self.write(&r);
    }

    fn remove(&self, dfh: &Fh, name: &str) {
        let mut r = self.rec.lock().expect("silly log");
        let d = hex(&dfh.0);
        r.names.retain(|(x, n)| !(x == &d && n == name));
        self.write(&r);
    }

    /// Best effort: a record that cannot be written costs only the
    /// clean-up after a crash (said once in the log).
    fn write(&self, r: &Record) {
        if r.names.is_empty() {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        let res = (|| {
            if let Some(d) = self.path.parent() {
                std::fs::create_dir_all(d)?;
            }
            let tmp = self.path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(r)?)?;
            std::fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = res {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "{}: cannot record hidden names ({e}); a crash would leave them",
                    self.path.display()
                )
            });
        }
    }
}

/// Removes the hidden names that dead mounts of `export` (over `family`)
/// recorded in `dir`, and their records once nothing of them is left.
/// Records of live mounts, of other exports and of the other protocol
/// family stay. A name the server would not remove yet (the dead mount's
/// delegation on it is recalled until its lease runs out: DELAY) is tried
/// again, three passes half a minute apart; what is still left stays
/// recorded for the next mount. Returns how many names were removed.
pub async fn clean_up(remote: &Remote, dir: &Path, export: &str, family: &str) -> usize {
    let mut removed = 0;
    for pass in 0..3 {
        if pass > 0 {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        let (r, left) = clean_pass(remote, dir, export, family).await;
        removed += r;
        if left == 0 {
            break;
        }
    }
    if removed > 0 {
        tracing::info!("removed {removed} hidden names left by a mount that died");
    }
    removed
}

/// One pass of [`clean_up`]: (names removed, names left).
async fn clean_pass(remote: &Remote, dir: &Path, export: &str, family: &str) -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let (mut removed, mut left_total) = (0, 0);
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(mut rec) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        else {
            continue;
        };
        if rec.export != export || rec.family != family || rec.pid == std::process::id() {
            continue;
        }
        if start_time(rec.pid) == Some(rec.start) {
            continue; // that mount is alive: its names are in use
        }
        let mut left = vec![];
        for (d, name) in std::mem::take(&mut rec.names) {
            let Some(fh) = unhex(&d) else { continue };
            match remote.remove(&Fh(Bytes::from(fh)), &name).await {
                Ok(()) => removed += 1,
                // Already gone, or its directory is.
                Err(e) if e.is(client::remote::Kind::NoEnt) => {}
                Err(e) if e.errno() == libc::ESTALE => {}
                Err(e) => {
                    tracing::debug!("cannot remove {name}, left by a dead mount, yet: {e}");
                    left.push((d, name));
                }
            }
        }
        left_total += left.len();
        if left.is_empty() {
            let _ = std::fs::remove_file(&path);
        } else {
            rec.names = left;
            if let Ok(b) = serde_json::to_vec(&rec) {
                let _ = std::fs::write(&path, b);
            }
        }
    }
    (removed, left_total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_follow_the_pending_names() {
        let d = std::env::temp_dir().join(format!("tarn-silly-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let log = SillyLog::new(&d, "h:2049/x", "4").unwrap();
        let fh = Fh(Bytes::from_static(&[1, 2, 0xab]));
        log.add(&fh, ".tarn1.2.3");
        log.add(&fh, ".tarn1.2.4");
        let read = || -> Record {
            serde_json::from_slice(
                &std::fs::read(d.join(format!("{}.json", std::process::id()))).unwrap(),
            )
            .unwrap()
        };
        let r = read();
        assert_eq!(r.names.len(), 2);
        assert_eq!(r.names[0].0, "0102ab");
        assert_eq!(unhex(&r.names[0].0).unwrap(), vec![1, 2, 0xab]);
        assert_eq!(start_time(r.pid), Some(r.start), "this process is alive");
        log.remove(&fh, ".tarn1.2.3");
        assert_eq!(
            read().names,
            vec![("0102ab".to_string(), ".tarn1.2.4".to_string())]
        );
        log.remove(&fh, ".tarn1.2.4");
        assert!(
            std::fs::read_dir(&d).unwrap().next().is_none(),
            "no record when none pending"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
