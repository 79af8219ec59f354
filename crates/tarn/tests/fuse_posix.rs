//! The POSIX file-system suite through `tarn mount`: pjdfstest (the Rust
//! rewrite, 0.2.2 from crates.io, installed by scripts/deps.sh --test), the
//! whole suite, as root on an export that keeps root (no squash), over
//! NFSv3 and NFSv4.1. Every case must pass or be skipped for a reason the
//! mount cannot change:
//! - `link::link_count_max`: glibc's pathconf(LINK_MAX) knows no limit for
//!   a FUSE file system, so the case skips itself;
//! - `utimensat::y2038` over NFSv3: nfstime3 has 32-bit seconds, so a time
//!   in 2106 cannot be carried (the protocol's limit, not the mount's).
//!
//! Also the cases the suite was first seen failing by: an unlinked file
//! still open reads and writes (silly rename), fifos, sockets and device
//! nodes made through the mount.
//!
//! Needs root (chown, device nodes, the suite's user switches); skipped
//! with a message otherwise, or where FUSE or pjdfstest is missing.

mod common;

use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use test_support::fuse::*;

/// A server whose export keeps root as root.
fn server() -> TestServer {
    TestServer::start_config(
        "[[export]]\npath = \"{export}\"\npseudo = \"/\"\nclients = [\"127.0.0.1\"]\nsquash = \"none\"\n",
    )
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}

fn pjdfstest_bin() -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut cands: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("pjdfstest"))
                .collect()
        })
        .unwrap_or_default();
    cands.push(Path::new(&home).join(".cargo/bin/pjdfstest"));
    cands.into_iter().find(|p| p.is_file())
}

/// The suite's configuration: the optional features Linux has, and two
/// users Debian always has for its permission cases.
const PJD_CONFIG: &str =
    "[features]\nposix_fallocate = {}\nrename_ctime = {}\nutime_now = {}\nutimensat = {}\n\
    [settings]\nnaptime = 0.01\nallow_remount = false\n\
    [dummy_auth]\nentries = [ [\"nobody\", \"nogroup\"], [\"daemon\", \"daemon\"] ]\n";

/// Runs the whole suite in `dir`; returns the failed cases' names (and
/// panics if it did not run to its summary).
fn pjdfstest(dir: &Path) -> Vec<String> {
    let bin = pjdfstest_bin().expect("pjdfstest");
    let (_work, cfg) = temp_file("pjdfstest.toml", PJD_CONFIG);
    let out = Command::new("timeout")
        .arg("900")
        .arg(bin)
        .arg("-c")
        .arg(&cfg)
        .arg("-p")
        .arg(dir)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let summary = text
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("pjdfstest did not finish ({:?}):\n{text}", out.status));
    eprintln!("pjdfstest in {}: {summary}", dir.display());
    text.lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

fn ready(name: &str) -> bool {
    if !fuse_usable() {
        return false;
    }
    if !is_root() {
        eprintln!("SKIP {name}: pjdfstest needs root");
        return false;
    }
    if pjdfstest_bin().is_none() {
        if std::env::var("CI").is_ok() {
            panic!("pjdfstest is missing: scripts/deps.sh --test installs it");
        }
        eprintln!("SKIP {name}: pjdfstest is not installed (cargo install --locked pjdfstest)");
        return false;
    }
    true
}

fn suite(vers: &str, allowed: &[&str]) {
    let s = server();
    let m = Mounted::new(&format!("nfs://127.0.0.1:{}/?vers={vers}", s.port()), "");
    let dir = m.path("pjd");
    std::fs::create_dir(&dir).unwrap();
    let failed: Vec<String> = pjdfstest(&dir)
        .into_iter()
        .filter(|f| !allowed.contains(&f.as_str()))
        .collect();
    assert!(
        failed.is_empty(),
        "pjdfstest through the mount over NFSv{vers}: {} failed: {failed:?}",
        failed.len()
    );
}

#[test]
fn pjdfstest_over_nfsv41() {
    if ready("pjdfstest_over_nfsv41") {
        suite("4.1", &[]);
    }
}

#[test]
fn pjdfstest_over_nfsv3() {
    if ready("pjdfstest_over_nfsv3") {
        // nfstime3's seconds are 32 bits: 2^32 (year 2106) cannot be set.
        suite("3", &["utimensat::y2038"]);
    }
}

/// Unlinked while open: the descriptor still reads and writes the file,
/// fstat shows no link left, the name is gone at once and the data at the
/// last close (Linux's client renames such a file aside; so does the
/// mount, to a hidden `.tarn…` name).
fn unlinked_while_open(vers: &str) {
    let s = TestServer::start();
    let url = format!(
        "nfs://127.0.0.1:{}/?vers={vers}&uid=1000&gid=1000",
        s.port()
    );
    let m = Mounted::new(&url, "");
    let p = m.path("open-unlinked");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all(b"still here").unwrap();
    std::fs::remove_file(&p).unwrap();
    assert!(!p.exists(), "the name is gone");
    assert_eq!(f.metadata().unwrap().nlink(), 0, "fstat's link count");
    f.write_all(b", and more").unwrap();
    let mut got = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "still here, and more");
    // Renaming another file over an open one works the same way.
    std::fs::write(m.path("a"), b"old").unwrap();
    let mut old = std::fs::File::open(m.path("a")).unwrap();
    std::fs::write(m.path("b"), b"new").unwrap();
    std::fs::rename(m.path("b"), m.path("a")).unwrap();
    let mut got = String::new();
    old.read_to_string(&mut got).unwrap();
    assert_eq!(got, "old");
    assert_eq!(std::fs::read(m.path("a")).unwrap(), b"new");
    drop(old);
    drop(f);
    // The last close removes the hidden names (the kernel's RELEASE comes
    // after close(2) returns).
    let left = || -> Vec<String> {
        std::fs::read_dir(&s.export)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let t = std::time::Instant::now();
    while left().len() > 1 && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        left(),
        vec!["a".to_string()],
        "on the server after the last close"
    );
}

/// mkfifo, a socket bound in the mount, and (as root) device nodes: made
/// on the server with their type, mode and device numbers.
fn special_files(vers: &str) {
    let s = server();
    let m = Mounted::new(&format!("nfs://127.0.0.1:{}/?vers={vers}", s.port()), "");
    let run = |args: &[&str]| {
        run_ok(
            Command::new(args[0]).args(&args[1..]).current_dir(&m.dir),
            &format!("{args:?}"),
        );
    };
    run(&["mkfifo", "-m", "0640", "fifo"]);
    let on_server = |n: &str| std::fs::symlink_metadata(s.export.join(n)).unwrap();
    assert!(on_server("fifo").file_type().is_fifo());
    assert_eq!(on_server("fifo").mode() & 0o777, 0o640);
    let sock = std::os::unix::net::UnixListener::bind(m.path("sock")).unwrap();
    assert!(on_server("sock").file_type().is_socket());
    drop(sock);
    if is_root() {
        run(&["mknod", "-m", "0600", "chr", "c", "1", "3"]);
        run(&["mknod", "-m", "0600", "blk", "b", "7", "300"]);
        let c = on_server("chr");
        assert!(c.file_type().is_char_device());
        assert_eq!((libc::major(c.rdev()), libc::minor(c.rdev())), (1, 3));
        let b = on_server("blk");
        assert!(b.file_type().is_block_device());
        assert_eq!((libc::major(b.rdev()), libc::minor(b.rdev())), (7, 300));
        // The mount shows the same numbers.
        let seen = std::fs::symlink_metadata(m.path("blk")).unwrap();
        assert_eq!(
            (libc::major(seen.rdev()), libc::minor(seen.rdev())),
            (7, 300)
        );
    }
    // mknod of an existing name: EEXIST.
    let out = Command::new("mkfifo")
        .arg("fifo")
        .current_dir(&m.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("File exists"));
}

test_support::fuse_tests! {
    unlinked_while_open_over_nfsv3 => unlinked_while_open("3"),
    unlinked_while_open_over_nfsv41 => unlinked_while_open("4.1"),
    special_files_over_nfsv3 => special_files("3"),
    special_files_over_nfsv41 => special_files("4.1"),
}
