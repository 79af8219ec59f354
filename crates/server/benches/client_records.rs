//! Recording a new NFSv4 client for reclaim after a restart costs the same
//! whatever the state directory already records (docs/design.md rule 2): the
//! median time of one durable `add_client` (and of one `remove_client`)
//! with 10 and with 8,000 clients recorded (the default table holds
//! 8,192), and their ratio. The store syncs each change, so this measures
//! the disk under the temporary directory too (`TMPDIR`).
//!
//!   cargo bench -p server --bench client_records

use bytes::Bytes;
use server::cluster::{LocalStore, RecoveryStore};
use std::time::Instant;

/// A libnfs-sized client owner (about 50 bytes).
fn owner(tag: &str, i: usize) -> Bytes {
    Bytes::from(format!(
        "Libnfs 4.0.0 {tag} client-{i:08} 1764440000 pid 123456"
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median µs of one add and of one remove, with `recorded` clients already there.
fn cost(recorded: usize, rounds: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4clients");
    // Written as one file, as a previous server instance left it.
    let mut text = String::new();
    for i in 0..recorded {
        for b in owner("old", i).iter() {
            text.push_str(&format!("{b:02x}"));
        }
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let s = LocalStore::open(&path).unwrap();
    assert_eq!(s.clients("local").unwrap().len(), recorded);
    let (mut adds, mut removes) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let o = owner("new", r);
        let t = Instant::now();
        s.add_client("local", &o, 0).unwrap();
        adds.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        s.remove_client("local", &o).unwrap();
        removes.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (median(adds), median(removes))
}

fn main() {
    let rounds = 400;
    let (a0, r0) = cost(10, rounds);
    let (a1, r1) = cost(8000, rounds);
    println!(
        "record a new client: {a0:.0} µs with 10 recorded, {a1:.0} µs with 8000; ratio {:.2}",
        a1 / a0
    );
    println!(
        "remove a client's record: {r0:.0} µs with 10 recorded, {r1:.0} µs with 8000; ratio {:.2}",
        r1 / r0
    );
}
