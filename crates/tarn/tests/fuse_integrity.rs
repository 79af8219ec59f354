//! `tarn mount`'s data integrity: what a program writes through the mount
//! it reads back, size and bytes, whatever the mix of writes, truncates,
//! mmap, fsync and reopen.
//!
//! - fsx (the file-system exerciser, fsx-rs from crates.io, installed by
//!   scripts/deps.sh --test): random operations on one file, every read
//!   checked against a model, over NFSv3 and NFSv4.1, mmap on and off,
//!   against Tarn and (TARN_GANESHA=1, as root) NFS-Ganesha. FSX_OPS sets
//!   the number of operations per run (the test command's default; `--full`
//!   runs a million).
//! - The cases that failed before as regression tests: two O_APPEND writes
//!   with an fstat between them, truncate-down then extending writes, and
//!   1 MiB operations on a 16 MiB file beside truncates.
//!
//! Skipped, with a message, where /dev/fuse or fusermount3 is missing.

mod common;

use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use test_support::fuse::*;
use test_support::ganesha::inside_ganesha;

fn server() -> TestServer {
    TestServer::start_with(&["--grace", "0.05"])
}

/// fsx's operation mix. With mmap: reads and writes through pread/pwrite
/// and through shared mappings (msync, MS_INVALIDATE), truncates up and
/// down, fsync/fdatasync, close and reopen, fadvise, sendfile.
fn fsx_config(mmap: bool, flen: u64, max_op: u64) -> String {
    fsx_config_with(mmap, false, flen, max_op)
}

/// [`fsx_config`], with `space` also posix_fallocate, punch hole and
/// copy_file_range (within the file): NFSv4.2's ALLOCATE, DEALLOCATE and
/// COPY.
fn fsx_config_with(mmap: bool, space: bool, flen: u64, max_op: u64) -> String {
    let m = if mmap { 10 } else { 0 };
    let inval = if mmap { 1 } else { 0 };
    let sp = if space { 2 } else { 0 };
    format!(
        "flen = {flen}\n\
         [opsize]\nmax = {max_op}\nmin = 0\nalign = 1\n\
         [weights]\n\
         close_open = 2\nread = 10\nwrite = 10\nmapread = {m}\nmapwrite = {m}\n\
         invalidate = {inval}\ntruncate = 5\nfsync = 2\nfdatasync = 2\n\
         posix_fallocate = {sp}\npunch_hole = {sp}\nsendfile = 1\nposix_fadvise = 1\n\
         copy_file_range = {sp}\n"
    )
}

fn fsx_bin() -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut cands: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("fsx")).collect())
        .unwrap_or_default();
    cands.push(Path::new(&home).join(".cargo/bin/fsx"));
    cands.into_iter().find(|p| p.is_file())
}

/// Operations per fsx run: FSX_OPS, else `default`.
fn fsx_ops(default: u64) -> u64 {
    std::env::var("FSX_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs fsx on `dir/name` with `config`; panics with fsx's own account of
/// the first bad operation (and its log) if any read disagrees.
fn fsx(dir: &Path, name: &str, config: &str, ops: u64, seed: u64) {
    let Some(bin) = fsx_bin() else {
        if std::env::var("CI").is_ok() {
            panic!("fsx is missing: scripts/deps.sh --test installs it (cargo install fsx)");
        }
        eprintln!("SKIP fsx {name}: fsx is not installed (cargo install --locked fsx)");
        return;
    };
    let (work, cfg) = temp_file("fsx.toml", config);
    let t = Instant::now();
    // Runs here take 2-3 ms an operation; a hang is cut off.
    let limit = (ops / 50).max(900);
    let out = Command::new("timeout")
        .arg(limit.to_string())
        .arg(&bin)
        .arg("-f")
        .arg(&cfg)
        .arg("-N")
        .arg(ops.to_string())
        .arg("-S")
        .arg(seed.to_string())
        .arg("-P")
        .arg(work.path())
        .arg(dir.join(name))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let log =
        std::fs::read_to_string(work.path().join(format!("{name}.fsxlog"))).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    assert!(
        out.status.success(),
        "fsx {name} (seed {seed}, {ops} operations) failed: {:?}\n{err}\nlast operations:\n{}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "fsx {name}: {ops} operations (seed {seed}) in {:?}",
        t.elapsed()
    );
    let _ = std::fs::remove_file(dir.join(name));
}

/// fsx through one mount of `url`: with and without mmap, then large
/// operations on a larger file.
fn fsx_battery(url: &str, tag: &str) {
    let ops = fsx_ops(10_000);
    let m = Mounted::new(url, "");
    fsx(
        &m.dir,
        &format!("fsx-{tag}-mmap"),
        &fsx_config(true, 256 << 10, 64 << 10),
        ops,
        1,
    );
    fsx(
        &m.dir,
        &format!("fsx-{tag}-nommap"),
        &fsx_config(false, 256 << 10, 64 << 10),
        ops,
        2,
    );
    // 1 MiB operations on a 16 MiB file (this deadlocked once: a truncate
    // waited on a reader holding a page lock).
    fsx(
        &m.dir,
        &format!("fsx-{tag}-large"),
        &fsx_config(true, 16 << 20, 1 << 20),
        (ops / 20).max(200),
        3,
    );
    drop(m);
}

/// [`fsx_battery`] through a mount of a fresh server over NFS `vers`.
fn fsx_over(vers: &str, tag: &str) {
    let s = server();
    fsx_battery(&mount_url(&s, vers), tag);
}

/// NFSv4.2 with fallocate, punch hole and copy_file_range in the mix
/// (ALLOCATE, DEALLOCATE, COPY beside buffered writes, mmap and
/// truncates); one run, the rest of the battery being NFSv4.1's.
fn fsx_with_space_ops() {
    let s = server();
    let m = Mounted::new(&mount_url(&s, "4.2"), "");
    fsx(
        &m.dir,
        "fsx-v42-space",
        &fsx_config_with(true, true, 256 << 10, 64 << 10),
        fsx_ops(10_000),
        5,
    );
}

/// The same without delegations: the mount's own writes must show in its
/// stat without a write delegation to vouch for its cache.
fn fsx_without_delegations() {
    let s = server();
    let url = mount_url(&s, "4.1");
    let m = Mounted::new(&url, "nodeleg");
    fsx(
        &m.dir,
        "fsx-nodeleg",
        &fsx_config(true, 256 << 10, 64 << 10),
        fsx_ops(10_000),
        4,
    );
}

/// Against NFS-Ganesha (Debian's, FSAL VFS), in private namespaces
/// (scripts/ganesha-run.sh): `TARN_GANESHA=1 cargo test -p tarn --test
/// fuse_integrity ganesha` as root.
#[test]
fn fsx_ganesha_nfs3() {
    inside_ganesha("fsx_ganesha_nfs3", |addr, export, _dir| {
        let url = format!("nfs://{addr}{export}?vers=3&uid=1000&gid=1000");
        fsx_battery(&url, "ganesha-v3");
    });
}

#[test]
fn fsx_ganesha_nfs41() {
    inside_ganesha("fsx_ganesha_nfs41", |addr, export, _dir| {
        let url = format!("nfs://{addr}{export}?vers=4.1&uid=1000&gid=1000");
        fsx_battery(&url, "ganesha-v41");
    });
}

/// Two O_APPEND writes of 100 bytes with an fstat between them leave 200
/// bytes (the stat once handed the kernel the size from before the first
/// write, and the second append went to offset 0).
fn append_with_fstat(vers: &str, opts: &str) {
    let s = server();
    let on_server = &s.export;
    let m = Mounted::new(&mount_url(&s, vers), opts);
    for round in 0..5 {
        let name = format!("append-{round}");
        let p = m.path(&name);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(&p)
            .unwrap();
        f.write_all(&[b'a'; 100]).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 100, "fstat after one append");
        f.write_all(&[b'b'; 100]).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 200, "fstat after two appends");
        drop(f);
        let mut want = vec![b'a'; 100];
        want.extend_from_slice(&[b'b'; 100]);
        assert_eq!(std::fs::read(&p).unwrap(), want);
        assert_eq!(std::fs::read(on_server.join(&name)).unwrap(), want);
    }
}

/// Truncate down, then writes past the new end: reads inside the file
/// return every byte (zeros in the hole), never a short count.
fn truncate_then_extend(vers: &str) {
    let s = server();
    let m = Mounted::new(&mount_url(&s, vers), "");
    let p = m.path("trunc");
    for round in 0..20u64 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .mode(0o644)
            .open(&p)
            .unwrap();
        let first: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
        f.write_all(&first).unwrap();
        let cut = 10_000 + round * 3_000;
        f.set_len(cut).unwrap();
        let far = 150_000 + round * 7;
        f.write_all_at(&[0xee; 5_000], far).unwrap();
        let mut want = first[..cut as usize].to_vec();
        want.resize(far as usize, 0);
        want.extend_from_slice(&[0xee; 5_000]);
        assert_eq!(f.metadata().unwrap().len(), want.len() as u64);
        let mut got = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), want.len(), "round {round}: length read back");
        assert!(got == want, "round {round}: data read back differs");
        let mut mid = vec![0u8; 20_000];
        f.read_exact_at(&mut mid, cut - 1_000).unwrap();
        assert_eq!(&mid[..], &want[cut as usize - 1_000..cut as usize + 19_000]);
    }
}

test_support::fuse_tests! {
    fsx_over_nfsv3 => fsx_over("3", "v3"),
    fsx_over_nfsv41 => fsx_over("4.1", "v41"),
    fsx_over_nfsv42_with_space_ops => fsx_with_space_ops(),
    fsx_over_nfsv41_without_delegations => fsx_without_delegations(),
    append_after_fstat_over_nfsv3 => append_with_fstat("3", ""),
    append_after_fstat_over_nfsv41_without_delegations => append_with_fstat("4.1", "nodeleg"),
    append_after_fstat_over_nfsv41 => append_with_fstat("4.1", ""),
    truncate_then_extend_over_nfsv3 => truncate_then_extend("3"),
    truncate_then_extend_over_nfsv41 => truncate_then_extend("4.1"),
}
