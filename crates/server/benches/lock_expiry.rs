//! docs/design.md rule 2: tearing down one client's locks costs the same with a
//! million other locks present as with none. Prints ns per `release_client`
//! of a client holding 10 locks, with 0 and with 1,000,000 other locks, and
//! the ratio. Plain `Instant` timing: `cargo bench -p server --bench lock_expiry`.

use bytes::Bytes;
use server::locks::{FileKey, LockKind, LockManager, OwnerKey};
use std::time::Instant;

fn file(n: u32) -> FileKey {
    FileKey {
        export: 1,
        fid: vfs::Fid::new(&n.to_be_bytes()).unwrap(),
    }
}

fn owner(client: u64, n: u32) -> OwnerKey {
    OwnerKey {
        client,
        owner: Bytes::copy_from_slice(&n.to_be_bytes()),
    }
}

/// Fills `m` with `n` locks of other clients: 10 owners per file, each a
/// read lock of its own 4 KiB block, spread over n / 10 files; the client
/// under test locks some of the same files, so shared per-file state is
/// exercised too.
fn populate(m: &LockManager, n: u32) {
    for i in 0..n {
        let f = i / 10;
        let o = owner(1_000 + (i % 1000) as u64, i % 10);
        m.lock(
            file(f),
            &o,
            LockKind::Read.range((i % 10) as u64 * 4096, 4096),
        )
        .unwrap();
    }
}

fn measure(m: &LockManager, rounds: u32) -> f64 {
    let me = 7u64;
    let mut total = 0u128;
    for r in 0..rounds {
        for k in 0..10u32 {
            // Files 0..10 are shared with the background locks (if any);
            // the range does not overlap theirs.
            let f = file(k * 97 % 50 + (r % 2) * 50);
            m.lock(f, &owner(me, k % 3), LockKind::Write.range(1 << 40, 100))
                .unwrap();
        }
        let t = Instant::now();
        m.release_client(me);
        total += t.elapsed().as_nanos();
    }
    total as f64 / rounds as f64
}

fn main() {
    let rounds = 20_000;
    let empty = LockManager::new();
    measure(&empty, 1000); // warm-up
    let ns0 = measure(&empty, rounds);

    let full = LockManager::new();
    let t = Instant::now();
    populate(&full, 1_000_000);
    eprintln!(
        "populated 1,000,000 locks on {} files in {:.1?}",
        full.file_count(),
        t.elapsed()
    );
    measure(&full, 1000);
    let ns1 = measure(&full, rounds);
    println!("release_client (10 locks), 0 other locks:         {ns0:8.0} ns");
    println!("release_client (10 locks), 1,000,000 other locks: {ns1:8.0} ns");
    println!("ratio (1M / 0): {:.2}", ns1 / ns0);
}
