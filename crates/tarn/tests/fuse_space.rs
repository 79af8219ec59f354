//! `tarn mount` beyond read and write, as a Linux NFS mount offers it:
//! fallocate (allocate, punch hole) as NFSv4.2 ALLOCATE/DEALLOCATE,
//! lseek SEEK_DATA/SEEK_HOLE as SEEK, copy_file_range as a server-side
//! COPY, and where the version has none of these (NFSv3) the answers a
//! program falls back on; O_DIRECT writes that are on the server before
//! write returns; flock between two descriptions of a file and across
//! two mounts. Results are checked byte by byte against what the program
//! meant, in the export's own file (the server's data) and through a
//! second mount.
//!
//! Skipped, with a message, where /dev/fuse or fusermount3 is missing.

mod common;

use common::*;
use nix::errno::Errno;
use nix::fcntl::{copy_file_range, fallocate, FallocateFlags, FlockArg};
use nix::unistd::{lseek, Whence};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_support::fuse::*;

fn server() -> TestServer {
    TestServer::start_with(&["--grace", "0.05"])
}

/// A server with metrics: its address for [`op_calls`].
fn server_with_metrics() -> (TestServer, String) {
    let (s, maddr) = start_with_metrics(&["--grace", "0.05"]);
    (s, maddr)
}

/// Calls of NFS operation `op` the server counted.
fn op_calls(maddr: &str, op: &str) -> f64 {
    let label = format!("op=\"{op}\"");
    metrics_text(maddr)
        .lines()
        .filter(|l| l.starts_with("tarn_op_calls_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

fn rw(p: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .unwrap()
}

fn seek(f: &File, off: i64, w: Whence) -> Result<i64, Errno> {
    lseek(f.as_raw_fd(), off, w)
}

/// Asserts `got` is `want`, naming the first byte that differs.
fn same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: size");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: byte {i} is {} not {}", got[i], want[i]);
    }
}

/// Every copy_file_range asked for, repeated on short counts.
fn copy_all(from: &File, mut off_in: i64, to: &File, mut off_out: i64, len: usize) {
    let mut left = len;
    while left > 0 {
        let n = copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), left).unwrap();
        assert!(n > 0, "copy_file_range: 0 with {left} bytes left");
        left -= n;
    }
}

const MIB: usize = 1 << 20;

fn fallocate_punch_hole_seek_and_copy(vers: &str) {
    let (s, maddr) = server_with_metrics();
    let url = mount_url(&s, vers);
    let m = Mounted::new(&url, "");
    let data = pattern(MIB, 1);
    let f = rw(&m.path("sparse"));
    // Written and not closed: still in the mount's buffer when the
    // fallocate comes, which must not be overtaken by it.
    f.write_all_at(&data, 0).unwrap();
    fallocate(f.as_raw_fd(), FallocateFlags::empty(), 0, 3 * MIB as i64).unwrap();
    assert_eq!(
        f.metadata().unwrap().len(),
        3 * MIB as u64,
        "ALLOCATE's size"
    );
    // Within the size, mode 0 changes no size.
    fallocate(f.as_raw_fd(), FallocateFlags::empty(), MIB as i64, 4096).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3 * MIB as u64);
    // Read into the page cache, then a hole punched through it.
    let mut back = vec![0u8; 3 * MIB];
    f.read_exact_at(&mut back, 0).unwrap();
    let mut want = data.clone();
    want.resize(3 * MIB, 0);
    same("after ALLOCATE", &back, &want);
    let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    fallocate(f.as_raw_fd(), punch, 256 << 10, 512 << 10).unwrap();
    want[256 << 10..768 << 10].fill(0);
    assert_eq!(
        f.metadata().unwrap().len(),
        3 * MIB as u64,
        "punch keeps the size"
    );
    f.read_exact_at(&mut back, 0).unwrap();
    same("punched, same descriptor", &back, &want);
    // Modes Linux's NFS client does not pass on.
    for mode in [
        FallocateFlags::FALLOC_FL_ZERO_RANGE,
        FallocateFlags::FALLOC_FL_KEEP_SIZE,
        FallocateFlags::FALLOC_FL_COLLAPSE_RANGE,
    ] {
        assert_eq!(
            fallocate(f.as_raw_fd(), mode, 0, 4096),
            Err(Errno::EOPNOTSUPP),
            "{mode:?}"
        );
    }

    // SEEK_DATA/SEEK_HOLE answer what the export's file system answers
    // for the server's file, and SEEK_DATA past the end is ENXIO.
    let local = File::open(s.export.join("sparse")).unwrap();
    for off in [
        0,
        100 << 10,
        256 << 10,
        600 << 10,
        768 << 10,
        2 * MIB as i64,
    ] {
        for w in [Whence::SeekData, Whence::SeekHole] {
            assert_eq!(
                seek(&f, off, w),
                seek(&local, off, w),
                "lseek({off}, {w:?})"
            );
        }
    }
    assert_eq!(seek(&f, 0, Whence::SeekData), Ok(0));
    assert_eq!(
        seek(&f, 3 * MIB as i64, Whence::SeekData),
        Err(Errno::ENXIO)
    );
    assert_eq!(
        seek(&f, 3 * MIB as i64 + 1, Whence::SeekHole),
        Err(Errno::ENXIO)
    );
    // Where the export's file system keeps holes (not every one does),
    // the punched range is one.
    if seek(&local, 0, Whence::SeekHole) == Ok(256 << 10) {
        assert_eq!(seek(&f, 300 << 10, Whence::SeekData), Ok(768 << 10));
    }
    // A buffered write at the end, not yet sent, is data SEEK sees.
    f.write_all_at(b"tail", 3 * MIB as u64).unwrap();
    want.extend_from_slice(b"tail");
    assert_eq!(
        seek(&f, 3 * MIB as i64, Whence::SeekData),
        Ok(3 * MIB as i64),
        "buffered data sent before SEEK"
    );

    // copy_file_range into a file with buffered data of its own.
    let g = rw(&m.path("copy"));
    let head = pattern(5000, 7);
    g.write_all_at(&head, 0).unwrap();
    copy_all(&f, 100, &g, 500, 2 * MIB);
    let mut gwant = head[..500].to_vec();
    gwant.extend_from_slice(&want[100..100 + 2 * MIB]);
    let mut gback = vec![0u8; gwant.len()];
    g.read_exact_at(&mut gback, 0).unwrap();
    assert_eq!(g.metadata().unwrap().len(), gwant.len() as u64);
    same("copy, same descriptor", &gback, &gwant);
    drop((f, g));

    // The server's data, and what a fresh mount reads.
    same(
        "sparse in the export",
        &std::fs::read(s.export.join("sparse")).unwrap(),
        &want,
    );
    same(
        "copy in the export",
        &std::fs::read(s.export.join("copy")).unwrap(),
        &gwant,
    );
    let fresh = Mounted::new(&url, "");
    same(
        "sparse, fresh mount",
        &std::fs::read(fresh.path("sparse")).unwrap(),
        &want,
    );
    same(
        "copy, fresh mount",
        &std::fs::read(fresh.path("copy")).unwrap(),
        &gwant,
    );
    // Done by the server, not by the kernel's fallbacks.
    for op in ["ALLOCATE", "DEALLOCATE", "SEEK", "COPY"] {
        assert!(op_calls(&maddr, op) > 0.0, "no {op} reached the server");
    }
    let log = m.log_text();
    assert!(!log.contains("panicked"), "{log}");
}

/// NFSv3 has none of these operations: fallocate is EOPNOTSUPP (as on a
/// Linux NFSv3 mount), copy_file_range still copies (the kernel falls
/// back to reading and writing), and lseek sees the whole file as data.
fn space_ops_fall_back(vers: &str) {
    let s = server();
    let url = mount_url(&s, vers);
    let m = Mounted::new(&url, "");
    let data = pattern(300_000, 3);
    let f = rw(&m.path("f"));
    f.write_all_at(&data, 0).unwrap();
    assert_eq!(
        fallocate(f.as_raw_fd(), FallocateFlags::empty(), 0, 4096),
        Err(Errno::EOPNOTSUPP)
    );
    let punch = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    assert_eq!(
        fallocate(f.as_raw_fd(), punch, 0, 4096),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(seek(&f, 1000, Whence::SeekData), Ok(1000));
    assert_eq!(seek(&f, 1000, Whence::SeekHole), Ok(300_000));
    assert_eq!(seek(&f, 300_000, Whence::SeekData), Err(Errno::ENXIO));
    let g = rw(&m.path("g"));
    copy_all(&f, 10, &g, 0, 200_000);
    drop((f, g));
    same(
        "copy in the export",
        &std::fs::read(s.export.join("g")).unwrap(),
        &data[10..200_010],
    );
}

/// An O_DIRECT write is on the server when write returns (no close, no
/// fsync), and an O_DIRECT read comes from the server, not the pages this
/// mount cached before another mount rewrote the file.
fn o_direct_reaches_the_server(vers: &str) {
    let s = server();
    let url = mount_url(&s, vers);
    let a = Mounted::new(&url, "");
    let b = Mounted::new(&url, "");
    let direct = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .unwrap()
    };
    let f = direct(&a.path("d"));
    // Not aligned, and more than one FUSE write (max_write is 1 MiB).
    let big = pattern(3 * MIB + 123, 5);
    f.write_all_at(&big, 0).unwrap();
    same(
        "in the export before close",
        &std::fs::read(s.export.join("d")).unwrap(),
        &big,
    );
    same(
        "through another mount",
        &std::fs::read(b.path("d")).unwrap(),
        &big,
    );
    // A small one (one FILE_SYNC WRITE).
    f.write_all_at(b"small", 77).unwrap();
    let mut want = big.clone();
    want[77..82].copy_from_slice(b"small");
    same(
        "small write, in the export",
        &std::fs::read(s.export.join("d")).unwrap(),
        &want,
    );
    // Another mount rewrites a range; the direct descriptor reads it.
    let mut back = vec![0u8; 4096];
    f.read_exact_at(&mut back, 8192).unwrap();
    let other = pattern(4096, 9);
    {
        let g = OpenOptions::new().write(true).open(b.path("d")).unwrap();
        g.write_all_at(&other, 8192).unwrap();
    }
    f.read_exact_at(&mut back, 8192).unwrap();
    same("direct read after another mount's write", &back, &other);
}

#[allow(deprecated)]
fn flock(f: &File, arg: FlockArg) -> Result<(), Errno> {
    nix::fcntl::flock(f.as_raw_fd(), arg)
}

/// flock: two descriptions of one file conflict (in one process and
/// across mounts), a dup shares its description's lock, the lock lasts
/// until the last descriptor of the description is closed, and a
/// blocked flock gets the lock when it is let go.
#[test]
fn flock_between_descriptions_and_mounts() {
    if !fuse_usable() {
        return;
    }
    let s = server();
    for vers in ["4.2", "3"] {
        let url = mount_url(&s, vers);
        let a = Mounted::new(&url, "");
        let b = Mounted::new(&url, "");
        let name = format!("lock-{vers}");
        let f1 = rw(&a.path(&name));
        let f2 = rw(&a.path(&name));
        let other = rw(&b.path(&name));
        flock(&f1, FlockArg::LockExclusiveNonblock).unwrap();
        assert_eq!(
            flock(&f2, FlockArg::LockSharedNonblock),
            Err(Errno::EWOULDBLOCK),
            "{vers}: a second description in the same process"
        );
        assert_eq!(
            flock(&other, FlockArg::LockExclusiveNonblock),
            Err(Errno::EWOULDBLOCK),
            "{vers}: another mount"
        );
        // A dup is the same description: its flock is the same lock.
        let dup = f1.try_clone().unwrap();
        flock(&dup, FlockArg::LockExclusiveNonblock).unwrap();
        drop(f1);
        assert_eq!(
            flock(&other, FlockArg::LockExclusiveNonblock),
            Err(Errno::EWOULDBLOCK),
            "{vers}: the dup still holds it"
        );
        // A blocked flock from the other mount gets it at the last close.
        // (Whether it waited is told by a flag, not a clock: on a busy
        // machine the thread may start late.)
        let released = Arc::new(AtomicBool::new(false));
        let t = std::thread::spawn({
            let released = released.clone();
            move || {
                flock(&other, FlockArg::LockExclusive).unwrap();
                (released.load(Ordering::SeqCst), other)
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        released.store(true, Ordering::SeqCst);
        drop(dup);
        let (waited, other) = t.join().unwrap();
        assert!(
            waited,
            "{vers}: the blocked flock got the lock while it was held"
        );
        // Shared locks share; unlock lets the exclusive one in.
        flock(&other, FlockArg::LockShared).unwrap();
        flock(&f2, FlockArg::LockSharedNonblock).unwrap();
        flock(&other, FlockArg::Unlock).unwrap();
        flock(&f2, FlockArg::Unlock).unwrap();
        flock(&f2, FlockArg::LockExclusiveNonblock).unwrap();
        flock(&f2, FlockArg::Unlock).unwrap();
    }
}

test_support::fuse_tests! {
    fallocate_punch_hole_seek_and_copy_over_nfsv42 => fallocate_punch_hole_seek_and_copy("4.2"),
    space_ops_fall_back_over_nfsv3 => space_ops_fall_back("3"),
    o_direct_goes_to_the_server => o_direct_reaches_the_server("4.2"),
}
