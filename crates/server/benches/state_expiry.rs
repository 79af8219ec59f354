//! Expiring one NFSv4 client costs the same whatever else the server holds
//! (docs/design.md rule 2): the median time to expire a client with 10 opens and
//! 10 locks, with no other state and with 1,000,000 other open stateids (of
//! 10,000 other clients) present, and their ratio.
//!
//!   cargo bench -p server --bench state_expiry

use bytes::Bytes;
use proto::nfs4::ChannelAttrs4;
use server::locks::{FileKey, LockKind, LockManager, OwnerKey};
use server::nfs4::state::{
    session::{plain_channel, Session},
    State, ACCESS_BOTH,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn attrs() -> ChannelAttrs4 {
    plain_channel(8)
}

fn file(n: u64) -> FileKey {
    FileKey {
        export: 0,
        fid: vfs::Fid::new(&n.to_be_bytes()).unwrap(),
    }
}

fn client(st: &State, name: &str) -> u64 {
    let now = Instant::now();
    let (id, _, _) = st
        .exchange_id(
            &Bytes::from(name.to_string()),
            [1; 8],
            "sys:0",
            false,
            1,
            now,
        )
        .unwrap();
    let s = Arc::new(Session::new(st.new_sessionid(id), id, attrs(), attrs(), 0));
    st.add_session(s, Bytes::new(), now).unwrap();
    id
}

/// Median ns to expire a client holding 10 opens and 10 locks.
fn expire_cost(st: &State, rounds: usize) -> f64 {
    let mut samples = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let id = client(st, &format!("target-{r}"));
        for k in 0..10u64 {
            let f = file(u64::MAX - k);
            let open = st
                .open(
                    id,
                    &Bytes::from_static(b"owner"),
                    f,
                    ACCESS_BOTH,
                    0,
                    Instant::now(),
                )
                .unwrap();
            let lo = OwnerKey {
                client: id,
                owner: Bytes::from_static(b"lock-owner"),
            };
            st.lock_state_from_open(&open, &f, &lo, 1).unwrap();
            st.locks
                .lock(f, &lo, LockKind::Write.range(0, 100))
                .unwrap();
        }
        let t = Instant::now();
        // Revokes its opens and locks (the record stays for its next SEQUENCE).
        st.expire_at(id, Instant::now());
        samples.push(t.elapsed().as_nanos() as f64);
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

fn main() {
    let rounds = 2000;
    let empty = State::new(Duration::from_secs(90), Arc::new(LockManager::new()), 7);
    let base = expire_cost(&empty, rounds);

    let full = State::new(Duration::from_secs(90), Arc::new(LockManager::new()), 7);
    let t = Instant::now();
    for c in 0..10_000u64 {
        let id = client(&full, &format!("other-{c}"));
        for k in 0..100u64 {
            full.open(
                id,
                &Bytes::from_static(b"o"),
                file(c * 100 + k),
                ACCESS_BOTH,
                0,
                Instant::now(),
            )
            .unwrap();
        }
    }
    let (clients, _, stateids, _) = full.counts();
    eprintln!(
        "built {clients} clients, {stateids} open stateids in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let loaded = expire_cost(&full, rounds);
    println!("expire one client (10 opens, 10 locks): {base:.0} ns alone, {loaded:.0} ns with {stateids} other stateids; ratio {:.2}", loaded / base);
}
