//! Unmount cost against other mounts' caches: unmounting (walking then
//! dropping) a mount's inode table of 1,000 inodes, with no other mount in
//! the process and with other mounts holding 1,000,000 inodes between
//! them. Each mount owns its table, so the two should cost the same.
//!
//! `cargo run --release -p client --example unmount_bench`
//! (exits non-zero when the second is over 1.5x the first).

use bytes::Bytes;
use client::cache::attr::AcOptions;
use client::cache::inodes::{InodeTable, ROOT};
use client::remote::{Attr, Fh, FileType};
use std::time::{Duration, Instant};

fn table(n: usize, seed: u64) -> InodeTable {
    let ac = AcOptions::default();
    let now = Instant::now();
    let fh = |i: u64| Fh(Bytes::from([seed.to_be_bytes(), i.to_be_bytes()].concat()));
    let attr = Attr {
        ftype: Some(FileType::Regular),
        size: Some(1),
        change: Some(1),
        ..Default::default()
    };
    let mut t = InodeTable::new(fh(u64::MAX), attr.clone(), now, &ac);
    for i in 0..n as u64 {
        t.found(fh(i), attr.clone(), ROOT, &format!("f{i}"), now, &ac);
    }
    t
}

/// The unmount of one mount: walk its inodes (what a flush of its opens
/// visits), then free the table. Median of `rounds`.
fn unmount_cost(rounds: usize) -> Duration {
    let mut times = vec![];
    for r in 0..rounds {
        let t = table(1000, 1_000_000 + r as u64);
        let start = Instant::now();
        let open = t.iter().filter(|(_, n)| n.opens > 0).count();
        std::hint::black_box(open);
        drop(t);
        times.push(start.elapsed());
    }
    times.sort();
    times[rounds / 2]
}

fn main() {
    let rounds = 201;
    let alone = unmount_cost(rounds);
    // Other mounts of the same process: 1,000,000 inodes in 10 tables.
    let others: Vec<InodeTable> = (0..10).map(|i| table(100_000, i)).collect();
    let cached: usize = others.iter().map(|t| t.stats().inodes).sum();
    let crowded = unmount_cost(rounds);
    let ratio = crowded.as_secs_f64() / alone.as_secs_f64();
    println!(
        "unmount of a 1,000-inode mount: {alone:?} alone, {crowded:?} with {cached} inodes in other mounts ({ratio:.2}x)"
    );
    std::hint::black_box(&others);
    if ratio > 1.5 {
        std::process::exit(1);
    }
}
