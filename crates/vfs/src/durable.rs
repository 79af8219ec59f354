//! Durable small files (the server's state directory: handle key, export
//! ids, NFSv4 client records, NSM state and hosts).
//!
//! Every write goes to a temporary file in the same directory, is synced,
//! is renamed (or linked) into place, and then the directory is synced: after
//! a crash or power loss the file is either the old one or the new one,
//! whole, and a completed call's file survives. Writing in place or renaming
//! without the syncs can leave an empty or torn file behind a rename the
//! filesystem committed first.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `data` atomically and durably (mode 0644 for a new
/// file, less the umask).
pub fn replace(path: &Path, data: &[u8]) -> io::Result<()> {
    replace_with_mode(path, data, 0o644)
}

/// [`replace`] with the mode the file gets (for secrets: 0o600).
pub fn replace_with_mode(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let tmp = write_temp(path, data, mode)?;
    finish(&tmp, fs::rename(&tmp, path), path)
}

/// Creates `path` holding `data`, durably, only if it does not exist yet
/// (`AlreadyExists` otherwise): a reader never sees it partly written, and
/// of two processes racing to create it exactly one wins.
pub fn create_new(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let tmp = write_temp(path, data, mode)?;
    // link(2), unlike rename(2), refuses to replace an existing target.
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    linked?;
    sync_dir(path)
}

/// Appends `data` to the existing file `path` and syncs it. Opened by path
/// each time, so a state directory made read-only since refuses it (an
/// open descriptor would still write through its old mount). Refused with
/// `StorageFull` before writing anything when fewer than `keep_free` bytes
/// would stay free on the file system (room its owner needs to rewrite the
/// file whole later). A failure once writing began may leave part of `data`
/// at the end of the file.
pub fn append(path: &Path, data: &[u8], keep_free: u64) -> io::Result<()> {
    let mut f = fs::OpenOptions::new().append(true).open(path)?;
    let st = rustix::fs::fstatvfs(&f)?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    let needed = keep_free.saturating_add(data.len() as u64);
    if free < needed {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("{}: {free} bytes free, {needed} needed", path.display()),
        ));
    }
    f.write_all(data)?;
    f.sync_data()
}

/// Removes `path` durably; a missing file is not an error.
pub fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A synced temporary beside `path`; removed again if anything fails.
fn write_temp(path: &Path, data: &[u8], mode: u32) -> io::Result<PathBuf> {
    // Unique per process and call, so concurrent writers never share one;
    // starts with '.' so directory scans (NSM hosts) can tell it apart.
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no file name", path.display()),
        )
    })?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(data)?;
            f.sync_all()
        });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn finish(tmp: &Path, moved: io::Result<()>, path: &Path) -> io::Result<()> {
    if let Err(e) = moved {
        let _ = fs::remove_file(tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// Syncs the directory holding `path`, which makes a rename, link or
/// unlink in it durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    }

    #[test]
    fn replace_writes_then_replaces_whole() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("export-ids");
        replace(&p, b"first\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"first\n");
        // A reader holding the old file keeps the old content: a new inode
        // took the name, the old one was not rewritten in place.
        let mut old = fs::File::open(&p).unwrap();
        replace(&p, b"second, longer\n").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second, longer\n");
        let mut s = String::new();
        io::Read::read_to_string(&mut old, &mut s).unwrap();
        assert_eq!(s, "first\n");
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn a_failed_replace_leaves_the_target_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        // rename(2) cannot put a file over a non-empty directory.
        let p = d.path().join("target");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("inside"), b"x").unwrap();
        assert!(replace(&p, b"data").is_err());
        assert!(p.is_dir());
        assert!(leftovers(d.path()).is_empty(), "{:?}", leftovers(d.path()));
        // No directory to write into: fails before anything exists.
        assert!(replace(&d.path().join("missing/file"), b"x").is_err());
    }

    #[test]
    fn create_new_refuses_to_replace() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("handle.key");
        create_new(&p, b"key one", 0o600).unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = create_new(&p, b"key two", 0o600).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"key one");
        assert!(leftovers(d.path()).is_empty());
    }

    #[test]
    fn append_adds_to_the_same_file_while_room_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        // Only to a file that exists (its creation needs replace's syncs).
        assert!(append(&p, b"x\n", 0).is_err());
        replace(&p, b"one\n").unwrap();
        let mut old = fs::File::open(&p).unwrap();
        append(&p, b"two\n", 0).unwrap();
        let mut s = String::new();
        io::Read::read_to_string(&mut old, &mut s).unwrap();
        assert_eq!(s, "one\ntwo\n", "written to the same inode");
        // More room asked for than any file system has: nothing written.
        let e = append(&p, b"three\n", u64::MAX / 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"one\ntwo\n");
    }

    #[test]
    fn remove_is_quiet_about_missing_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("host");
        replace(&p, b"10.0.0.1").unwrap();
        remove(&p).unwrap();
        assert!(!p.exists());
        remove(&p).unwrap();
    }
}
