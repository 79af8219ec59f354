//! Crash safety by repeated SIGKILL: clients over NFSv3 (with NLM locks)
//! and NFSv4.1 (with opens and byte-range locks) run a mixed workload
//! (UNSTABLE writes and COMMIT, FILE_SYNC writes, creates, renames,
//! removes, lock and unlock) while the server is SIGKILLed at a random
//! moment and started again on the same port and state directory. Each
//! client keeps a model of what the server acknowledged; after every
//! restart it is checked from the clients' side:
//!
//! - every byte acknowledged stable (FILE_SYNC, or UNSTABLE followed by a
//!   COMMIT with the WRITE's verifier) reads back intact;
//! - the write verifier changed, so UNSTABLE writes not yet committed are
//!   sent again, after which each file reads back exactly as modelled;
//! - acknowledged creates, renames and removes are what the directory lists;
//! - locks held before the kill are reclaimed in the grace period (NFSv4.1
//!   by the session's recovery, NLM by the client's reboot check), and a
//!   competing client (NFSv3 and NFSv4.1) asking for the same ranges during
//!   the grace period and after it is refused, never granted.
//!
//! Any violation fails with the seed and the cycle. Knobs (environment):
//! TARN_CRASH_CYCLES (50), TARN_CRASH_SEED (from the clock; printed),
//! TARN_CRASH_GRACE (seconds, 1.5). Long runs: scripts/crash.sh.
//!
//!   cargo build -p tarn && cargo test -p tarn --test crash_cycles -- --nocapture

mod common;
use bytes::Bytes;
use client::nfs3::{LockOwner, LockRange, Nfs3, Nfs3Options};
use client::nfs4::{Nfs4Conn, Security, Session, SessionOptions};
use client::remote::{Fh, HeldLock, Kind, OpenFile, Range, Remote, Stable};
use common::*;
use proto::nfs3::NfsFh3;
use proto::nfs4 as p4;
use proto::nlm4::Nlm4Stats;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rpc::client::ChannelOptions;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const UID: u32 = 1000;
const GID: u32 = 1000;
/// Files a client keeps at most, and the span its writes fall in.
const MAX_FILES: usize = 5;
const SPAN: u64 = 48 << 10;

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn transport() -> ChannelOptions {
    ChannelOptions {
        timeo: Duration::from_secs(10),
        min_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        ..Default::default()
    }
}

async fn v3(addr: SocketAddr, machine: &str) -> Arc<Nfs3> {
    let o = Nfs3Options {
        security: Security::Sys { uid: UID, gid: GID },
        sys_ids: (UID, GID),
        machine: machine.into(),
        mount_port: None,
        transport: transport(),
    };
    Arc::new(Nfs3::connect(addr, o, "/").await.expect("NFSv3 connect"))
}

/// An NFSv4.1 session; `grace_retry`: how long GRACE answers are waited
/// out (0 for the competitor, which must see them).
async fn v41(addr: SocketAddr, grace_retry: Duration) -> Arc<Session> {
    let conn = Nfs4Conn::connect_channel(addr, UID, GID, transport())
        .await
        .expect("NFSv4 connect");
    let o = SessionOptions {
        callbacks: false,
        grace_retry_for: grace_retry,
        ..SessionOptions::default()
    };
    Arc::new(Session::establish(conn, &o).await.expect("session"))
}

/// One file as its client knows it.
struct FileM {
    name: String,
    of: OpenFile,
    data: Vec<u8>,
    /// Bytes acknowledged stable (and not written since).
    stable: Vec<bool>,
    /// UNSTABLE writes not yet committed: offset, length, verifier.
    pending: Vec<(u64, usize, [u8; 8])>,
}

impl FileM {
    fn apply(&mut self, off: u64, d: &[u8], stable: bool) {
        let (off, end) = (off as usize, off as usize + d.len());
        if self.data.len() < end {
            self.data.resize(end, 0);
            self.stable.resize(end, false);
        }
        self.data[off..end].copy_from_slice(d);
        self.stable[off..end].fill(stable);
    }
}

#[derive(Default, Debug, Clone, Copy)]
struct Stats {
    ops: u64,
    stable_bytes: u64,
    lost_bytes: u64,
    resent_bytes: u64,
    creates: u64,
    renames: u64,
    removes: u64,
    locks: u64,
}

/// A lock a client holds: the range and the handle to give it back.
struct Held {
    range: Range,
    lock: HeldLock,
}

struct Client {
    id: usize,
    r: Arc<Remote>,
    dir: Fh,
    lockdir: Fh,
    lockfile: Fh,
    files: Vec<FileM>,
    next: u64,
    rng: StdRng,
    /// Held from the start to the end: reclaimed after every restart.
    kept: Option<Held>,
    /// Taken and given back as the workload goes.
    toggled: Option<Held>,
    /// The COMMIT verifier seen at the last check (the previous boot's).
    boot_verf: Option<[u8; 8]>,
    st: Stats,
}

fn kept_range(id: usize) -> Range {
    Range {
        offset: id as u64 * 100,
        len: 100,
    }
}

fn toggled_range(id: usize) -> Range {
    Range {
        offset: 10_000 + id as u64 * 100,
        len: 50,
    }
}

type Res<T> = Result<T, String>;

impl Client {
    fn what(&self) -> String {
        format!("client {} (NFSv{})", self.id, self.r.version())
    }

    async fn lock(&self, range: Range) -> Res<Held> {
        let lock = self
            .r
            .lock(
                &self.lockfile,
                (&self.lockdir, "lockfile"),
                range,
                true,
                true,
            )
            .await
            .map_err(|e| format!("{}: LOCK {range:?}: {e}", self.what()))?
            .ok_or_else(|| format!("{}: LOCK {range:?} not granted", self.what()))?;
        Ok(Held { range, lock })
    }

    async fn step(&mut self) -> Res<()> {
        self.st.ops += 1;
        let n = self.files.len();
        let pick = self.rng.gen_range(0..100);
        match pick {
            _ if n == 0 || (pick < 10 && n < MAX_FILES) => self.create().await,
            0..=44 => self.write().await,
            45..=64 => self.commit_one().await,
            65..=74 => self.rename().await,
            75..=79 if n > 2 => self.remove().await,
            80..=89 => self.toggle().await,
            _ => self.write().await,
        }
    }

    async fn create(&mut self) -> Res<()> {
        let name = format!("f{}", self.next);
        self.next += 1;
        let of = self
            .r
            .open_write(&self.dir, &name, 0o644, false)
            .await
            .map_err(|e| format!("{}: create {name}: {e}", self.what()))?;
        self.files.push(FileM {
            name,
            of,
            data: vec![],
            stable: vec![],
            pending: vec![],
        });
        self.st.creates += 1;
        Ok(())
    }

    async fn write(&mut self) -> Res<()> {
        let i = self.rng.gen_range(0..self.files.len());
        let off = self.rng.gen_range(0..SPAN);
        let len = self.rng.gen_range(1..12 << 10);
        let mut d = vec![0u8; len];
        self.rng.fill_bytes(&mut d);
        let how = if self.rng.gen_bool(0.4) {
            Stable::FileSync
        } else {
            Stable::Unstable
        };
        let f = &self.files[i];
        let w = self
            .r
            .write(&f.of, off, Bytes::from(d.clone()), how)
            .await
            .map_err(|e| format!("{}: WRITE {} at {off}: {e}", self.what(), f.name))?;
        let d = &d[..w.count as usize];
        let f = &mut self.files[i];
        f.apply(off, d, !w.unstable);
        if w.unstable {
            f.pending.push((off, d.len(), w.verf));
        } else {
            self.st.stable_bytes += d.len() as u64;
        }
        Ok(())
    }

    async fn commit_one(&mut self) -> Res<()> {
        let i = self.rng.gen_range(0..self.files.len());
        self.commit(i).await.map(|_| ())
    }

    /// COMMIT; UNSTABLE writes made under another verifier are sent again
    /// (FILE_SYNC). The verifier.
    async fn commit(&mut self, i: usize) -> Res<[u8; 8]> {
        let what = self.what();
        let f = &mut self.files[i];
        let v = self
            .r
            .commit(&f.of.fh)
            .await
            .map_err(|e| format!("{what}: COMMIT {}: {e}", f.name))?;
        for (off, len, verf) in std::mem::take(&mut f.pending) {
            let (o, e) = (off as usize, off as usize + len);
            if verf != v {
                let d = Bytes::copy_from_slice(&f.data[o..e]);
                let w = self
                    .r
                    .write(&f.of, off, d, Stable::FileSync)
                    .await
                    .map_err(|e| format!("{what}: WRITE again {} at {off}: {e}", f.name))?;
                if w.count as usize != len || w.unstable {
                    return Err(format!("{what}: WRITE again {}: {w:?}", f.name));
                }
                self.st.resent_bytes += len as u64;
            }
            self.st.stable_bytes += len as u64;
            f.stable[o..e].fill(true);
        }
        Ok(v)
    }

    async fn rename(&mut self) -> Res<()> {
        let i = self.rng.gen_range(0..self.files.len());
        let to = format!("f{}", self.next);
        self.next += 1;
        let from = self.files[i].name.clone();
        if let Err(e) = self.r.rename(&self.dir, &from, &self.dir, &to).await {
            // Sent again after a restart, the RENAME finds its work done.
            let done = self.r.lookup(&self.dir, &to).await.is_ok()
                && matches!(self.r.lookup(&self.dir, &from).await, Err(e) if e.kind() == Some(Kind::NoEnt));
            if !done {
                return Err(format!("{}: RENAME {from} -> {to}: {e}", self.what()));
            }
        }
        self.files[i].name = to;
        self.st.renames += 1;
        Ok(())
    }

    async fn remove(&mut self) -> Res<()> {
        let i = self.rng.gen_range(0..self.files.len());
        let f = self.files.remove(i);
        self.r
            .close(&f.of)
            .await
            .map_err(|e| format!("{}: CLOSE {}: {e}", self.what(), f.name))?;
        match self.r.remove(&self.dir, &f.name).await {
            Ok(()) => {}
            // Sent again after a restart: already gone.
            Err(e) if e.kind() == Some(Kind::NoEnt) => {}
            Err(e) => return Err(format!("{}: REMOVE {}: {e}", self.what(), f.name)),
        }
        self.st.removes += 1;
        Ok(())
    }

    async fn toggle(&mut self) -> Res<()> {
        match self.toggled.take() {
            Some(h) => self
                .r
                .unlock(h.lock)
                .await
                .map_err(|e| format!("{}: UNLOCK {:?}: {e}", self.what(), h.range)),
            None => {
                self.toggled = Some(self.lock(toggled_range(self.id)).await?);
                self.st.locks += 1;
                Ok(())
            }
        }
    }

    async fn read_all(&self, f: &FileM) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let (d, eof) = self
                .r
                .read(&f.of.fh, out.len() as u64, self.r.rsize())
                .await
                .map_err(|e| format!("{}: READ {}: {e}", self.what(), f.name))?;
            out.extend_from_slice(&d);
            if eof || d.is_empty() {
                return Ok(out);
            }
        }
    }

    /// The checks after a restart (the workload stopped).
    async fn check(&mut self) -> Res<()> {
        // Stable bytes read back intact, before anything is sent again.
        for f in &self.files {
            let got = self.read_all(f).await?;
            let lost: Vec<usize> = (0..f.data.len())
                .filter(|&i| f.stable[i] && got.get(i) != Some(&f.data[i]))
                .collect();
            if !lost.is_empty() {
                self.st.lost_bytes += lost.len() as u64;
                return Err(format!(
                    "{}: {} bytes of {} acknowledged stable are lost (first at {}; file {} bytes, read {})",
                    self.what(),
                    lost.len(),
                    f.name,
                    lost[0],
                    f.data.len(),
                    got.len()
                ));
            }
        }
        // A new verifier: what was not committed is sent again.
        for i in 0..self.files.len() {
            let v = self.commit(i).await?;
            if self.boot_verf == Some(v) {
                return Err(format!(
                    "{}: the write verifier {v:02x?} did not change across the restart",
                    self.what()
                ));
            }
            let f = &self.files[i];
            let got = self.read_all(f).await?;
            if got != f.data {
                let at = got.iter().zip(&f.data).position(|(a, b)| a != b);
                return Err(format!(
                    "{}: {} after COMMIT and resend: {} bytes, want {}; first difference at {at:?}",
                    self.what(),
                    f.name,
                    got.len(),
                    f.data.len()
                ));
            }
        }
        if let Some(i) = (0..self.files.len()).next() {
            self.boot_verf = Some(self.commit(i).await?);
        }
        // Creates, renames and removes as acknowledged.
        let names: BTreeSet<String> = self
            .r
            .readdir(&self.dir)
            .await
            .map_err(|e| format!("{}: READDIR: {e}", self.what()))?
            .into_iter()
            .map(|e| e.name)
            .collect();
        let want: BTreeSet<String> = self.files.iter().map(|f| f.name.clone()).collect();
        if names != want {
            return Err(format!(
                "{}: the directory holds {names:?}, acknowledged {want:?}",
                self.what()
            ));
        }
        // No NLM lock lost in the restart.
        if let Some(c) = self.r.v3() {
            let lost = c.lost_locks();
            if !lost.is_empty() {
                return Err(format!(
                    "{}: NLM locks lost (not reclaimed in grace): {lost:?}",
                    self.what()
                ));
            }
        }
        Ok(())
    }

    fn held(&self) -> Vec<Range> {
        self.kept
            .iter()
            .chain(&self.toggled)
            .map(|h| h.range)
            .collect()
    }
}

/// Competing clients that ask for ranges others hold and must be refused.
struct Competitor {
    v3: Arc<Nfs3>,
    lockfile3: NfsFh3,
}

#[derive(Default, Debug, Clone, Copy)]
struct Refusals {
    grace: u64,
    denied: u64,
}

impl Competitor {
    /// Asks for each range over NLM and over a new NFSv4.1 client; an
    /// error if any is granted. `during_grace`: GRACE answers are fine.
    async fn probe(&self, addr: SocketAddr, ranges: &[Range], during_grace: bool) -> Res<Refusals> {
        let mut n = Refusals::default();
        let owner = LockOwner::this_process("crash-competitor");
        for r in ranges {
            let lr = LockRange {
                offset: r.offset,
                len: r.len,
                exclusive: true,
            };
            let a = self
                .v3
                .nlm_lock_once(&self.lockfile3, &owner, lr, false)
                .await
                .map_err(|e| format!("competitor NLM LOCK {r:?}: {e}"))?;
            match a {
                Nlm4Stats::NLM4_DENIED => n.denied += 1,
                Nlm4Stats::NLM4_DENIED_GRACE_PERIOD if during_grace => n.grace += 1,
                other => {
                    let _ = self.v3.nlm_unlock(&self.lockfile3, &owner, lr).await;
                    return Err(format!(
                        "competitor over NLM asked for {r:?}, held by another client, and was answered {other:?}{}",
                        if during_grace { " during the grace period" } else { " after the grace period" }
                    ));
                }
            }
        }
        let s = v41(addr, Duration::ZERO).await;
        let r = async {
            let dir = s
                .lookup_path("/locks")
                .await
                .map_err(|e| format!("competitor v4.1 LOOKUP: {e}"))?;
            let (sid, fh) = match s
                .open(&dir, "lockfile", None, p4::OPEN4_SHARE_ACCESS_BOTH)
                .await
            {
                Ok(o) => o,
                Err(e) if during_grace && e.status() == Some(p4::Nfsstat4::NFS4ERR_GRACE) => {
                    n.grace += ranges.len() as u64;
                    return Ok(());
                }
                Err(e) => return Err(format!("competitor v4.1 OPEN: {e}")),
            };
            let mut bad = None;
            for r in ranges {
                let owner = s.new_owner("competitor");
                let locker = s.new_lock_owner(&sid, &owner);
                match s
                    .lock(&fh, locker, p4::NfsLockType4::WRITE_LT, r.offset, r.len)
                    .await
                {
                    Ok(Err(_denied)) => n.denied += 1,
                    Err(e) if during_grace && e.status() == Some(p4::Nfsstat4::NFS4ERR_GRACE) => {
                        n.grace += 1
                    }
                    Ok(Ok(_)) => {
                        bad =
                            Some(format!(
                            "competitor over NFSv4.1 was granted {r:?}, held by another client{}",
                            if during_grace { " (during the grace period)" } else { "" }
                        ));
                        break;
                    }
                    Err(e) => {
                        bad = Some(format!("competitor v4.1 LOCK {r:?}: {e}"));
                        break;
                    }
                }
            }
            let _ = s.close(&fh, &sid).await;
            bad.map_or(Ok(()), Err)
        }
        .await;
        let _ = s.destroy().await;
        r.map(|_| n)
    }
}

async fn setup(addr: SocketAddr, seed: u64) -> (Vec<Client>, Competitor) {
    let mut remotes = vec![];
    for i in 0..2 {
        remotes.push(Arc::new(Remote::from_v3(
            v3(addr, &format!("crash-v3-{i}")).await,
        )));
    }
    for _ in 0..2 {
        let s = v41(addr, Duration::from_secs(300)).await;
        remotes.push(Arc::new(Remote::from_v4(s).await.unwrap()));
    }
    let r0 = &remotes[0];
    let root = r0.lookup_path("/").await.unwrap();
    let lockdir = r0.mkdir(&root, "locks", 0o777).await.unwrap();
    let f = r0
        .open_write(&lockdir, "lockfile", 0o666, false)
        .await
        .unwrap();
    r0.close(&f).await.unwrap();
    let mut clients = vec![];
    for (id, r) in remotes.into_iter().enumerate() {
        let root = r.lookup_path("/").await.unwrap();
        let dir = r.mkdir(&root, &format!("c{id}"), 0o755).await.unwrap();
        let lockdir = r.lookup_path("/locks").await.unwrap();
        let lockfile = r.lookup_path("/locks/lockfile").await.unwrap();
        let mut c = Client {
            id,
            r,
            dir,
            lockdir,
            lockfile,
            files: vec![],
            next: 0,
            rng: StdRng::seed_from_u64(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            kept: None,
            toggled: None,
            boot_verf: None,
            st: Stats::default(),
        };
        c.kept = Some(c.lock(kept_range(id)).await.unwrap());
        clients.push(c);
    }
    let v3c = v3(addr, "crash-competitor").await;
    let lockfile3 = v3c.lookup_path("/locks/lockfile").await.unwrap();
    (clients, Competitor { v3: v3c, lockfile3 })
}

/// What each client believes it holds, for a failure's message.
fn locks_seen(clients: &[Client]) -> String {
    let mut out = String::new();
    for c in clients {
        out += &format!("{}: holds {:?}", c.what(), c.held());
        if let Some(s) = c.r.v4() {
            let b = s.state_book();
            out += &format!(
                "; recoveries {}, state book: {} opens, locks {:?}",
                s.recoveries(),
                b.opens.len(),
                b.locks
                    .iter()
                    .map(|l| (l.offset, l.length))
                    .collect::<Vec<_>>()
            );
        }
        if let Some(c) = c.r.v3() {
            out += &format!(
                "; NLM held {} lost {}",
                c.nlm_held().len(),
                c.lost_locks().len()
            );
        }
        out += "\n";
    }
    out
}

async fn work(mut c: Client, stop: Arc<AtomicBool>) -> (Client, Res<()>) {
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = c.step().await {
            return (c, Err(e));
        }
    }
    (c, Ok(()))
}

#[test]
fn acknowledged_state_survives_repeated_sigkill() {
    let cycles: u64 = env("TARN_CRASH_CYCLES", 50);
    let seed: u64 = env(
        "TARN_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    let grace: f64 = env("TARN_CRASH_GRACE", 1.5);
    println!(
        "crash cycles: {cycles}, seed {seed} (TARN_CRASH_SEED={seed} to repeat), grace {grace} s"
    );
    let grace_s = grace.to_string();
    let serve = ["--grace", &grace_s, "--lease-time", "5"];
    let s0 = TestServer::start_with(&serve);
    let addr = s0.addr;
    let rt = runtime();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut clients, comp) = rt.block_on(setup(addr, seed));
    // The server's log (all its starts) is kept where a failure says.
    let log = s0.log.clone();
    let fail = |cycle: u64, why: String| -> ! {
        let kept = std::env::temp_dir().join(format!("tarn-crash-{seed}.log"));
        let _ = std::fs::copy(&log, &kept);
        panic!(
            "crash cycle {cycle} (TARN_CRASH_SEED={seed}): {why}\nserver log: {}",
            kept.display()
        )
    };
    // Before any crash: the kept locks are refused to the competitor.
    let kept: Vec<Range> = (0..4).map(kept_range).collect();
    rt.block_on(comp.probe(addr, &kept, false))
        .unwrap_or_else(|e| fail(0, e));
    let mut cur: Option<TestServer> = None;
    let mut s0 = Some(s0);
    let mut refusals = Refusals::default();
    let t0 = Instant::now();
    for cycle in 1..=cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = clients
            .drain(..)
            .map(|c| rt.spawn(work(c, stop.clone())))
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(150..900)));
        let server = cur.as_mut().or(s0.as_mut()).unwrap();
        let next = server.crash_and_restart(&serve);
        let restarted = Instant::now();
        cur = Some(next);
        // During the grace period: the locks held since the start are
        // refused to a competitor (the toggled ones may be given back).
        let during = rt.block_on(comp.probe(addr, &kept, true));
        let during = during.unwrap_or_else(|e| fail(cycle, e));
        // The workload goes on a little after the restart.
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let (c, r) = rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(120), w).await })
                .unwrap_or_else(|_| fail(cycle, "a client did not stop within 120 s".into()))
                .unwrap();
            if let Err(e) = r {
                fail(cycle, e);
            }
            clients.push(c);
        }
        // Later in the grace period, once the NFSv4.1 clients have
        // reclaimed (NFSv4's own grace may be over): still refused.
        let mid = if restarted.elapsed() < Duration::from_secs_f64(grace * 0.8) {
            rt.block_on(comp.probe(addr, &kept, true))
                .unwrap_or_else(|e| fail(cycle, e))
        } else {
            Refusals::default()
        };
        for c in &mut clients {
            if let Err(e) = rt.block_on(c.check()) {
                fail(cycle, e);
            }
        }
        // After the grace period: every held lock is still refused.
        let end = restarted + Duration::from_secs_f64(grace) + Duration::from_millis(100);
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let held: Vec<Range> = clients.iter().flat_map(|c| c.held()).collect();
        let after = rt
            .block_on(comp.probe(addr, &held, false))
            .unwrap_or_else(|e| fail(cycle, format!("{e}\n{}", locks_seen(&clients))));
        refusals.grace += during.grace + mid.grace + after.grace;
        refusals.denied += during.denied + mid.denied + after.denied;
        if cycle % 10 == 0 || cycle == cycles {
            let (acked, lost, resent) = clients.iter().fold((0, 0, 0), |a, c| {
                (
                    a.0 + c.st.stable_bytes,
                    a.1 + c.st.lost_bytes,
                    a.2 + c.st.resent_bytes,
                )
            });
            println!(
                "cycle {cycle}: {:.2} s per cycle; bytes acknowledged stable {acked}, lost {lost}, sent again {resent}; refusals {refusals:?}",
                t0.elapsed().as_secs_f64() / cycle as f64
            );
        }
    }
    let total = clients.iter().fold(Stats::default(), |mut a, c| {
        a.ops += c.st.ops;
        a.stable_bytes += c.st.stable_bytes;
        a.lost_bytes += c.st.lost_bytes;
        a.resent_bytes += c.st.resent_bytes;
        a.creates += c.st.creates;
        a.renames += c.st.renames;
        a.removes += c.st.removes;
        a.locks += c.st.locks;
        a
    });
    let nlm_reclaims: u64 = clients
        .iter()
        .filter_map(|c| c.r.v3().map(|c| c.nlm_reclaims()))
        .sum();
    let recoveries: u64 = clients
        .iter()
        .filter_map(|c| c.r.v4().map(|s| s.recoveries()))
        .sum();
    println!(
        "crash cycles done: {cycles} in {:.1} s ({:.2} s per cycle), seed {seed}\n\
         totals: {total:?}\n\
         NLM reclaims sent: {nlm_reclaims}; NFSv4.1 session recoveries: {recoveries}; competitor refusals: {refusals:?}",
        t0.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64() / cycles as f64
    );
    assert_eq!(total.lost_bytes, 0);
    assert!(
        recoveries >= 2 * cycles,
        "each NFSv4.1 client recovered after each restart"
    );
    assert!(
        nlm_reclaims >= 2 * cycles,
        "each NLM client reclaimed after each restart"
    );
    // Held locks are given back cleanly at the end.
    rt.block_on(async {
        for c in &mut clients {
            for h in [c.kept.take(), c.toggled.take()].into_iter().flatten() {
                c.r.unlock(h.lock).await.unwrap();
            }
            c.r.close_all().await;
        }
    });
    drop(cur);
}

/// Regression: with no status monitor of its own the NFSv3 client learns
/// of a restart by itself (a new connection, the server's SM_STAT state
/// changed) and reclaims its NLM locks in the grace period.
#[test]
fn nlm_locks_are_reclaimed_after_a_crash() {
    let serve = ["--grace", "2"];
    let mut s = TestServer::start_with(&serve);
    let addr = s.addr;
    let rt = runtime();
    let lr = |offset| LockRange {
        offset,
        len: 10,
        exclusive: true,
    };
    let (holder, other, fh) = rt.block_on(async {
        let holder = v3(addr, "reclaim-holder").await;
        let other = v3(addr, "reclaim-other").await;
        let root = holder.lookup_path("/").await.unwrap();
        let fh = holder
            .create(
                &root,
                "f",
                proto::nfs3::Createhow3::UNCHECKED(client::nfs3::ops::sattr_mode(0o666)),
            )
            .await
            .unwrap();
        let me = LockOwner::this_process("reclaim-holder");
        assert!(holder.nlm_lock(&fh, &me, lr(0), true).await.unwrap());
        (holder, other, fh)
    });
    let _s2 = s.crash_and_restart(&serve);
    let them = LockOwner::this_process("reclaim-other");
    rt.block_on(async {
        // Any NFS call: its connection is made again, and the reboot seen.
        holder.getattr(&fh).await.unwrap();
        assert_eq!(
            other.nlm_lock_once(&fh, &them, lr(0), false).await.unwrap(),
            Nlm4Stats::NLM4_DENIED_GRACE_PERIOD
        );
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert_eq!(
            other.nlm_lock_once(&fh, &them, lr(0), false).await.unwrap(),
            Nlm4Stats::NLM4_DENIED,
            "the holder reclaimed its lock in the grace period"
        );
        assert_eq!(holder.nlm_reclaims(), 1);
        assert!(holder.lost_locks().is_empty());
        assert_eq!(holder.nlm_held().len(), 1);
        let me = LockOwner::this_process("reclaim-holder");
        holder.nlm_unlock(&fh, &me, lr(0)).await.unwrap();
        assert!(holder.nlm_held().is_empty());
        assert_eq!(
            other.nlm_lock_once(&fh, &them, lr(0), false).await.unwrap(),
            Nlm4Stats::NLM4_GRANTED
        );
    });
}

/// Regression: two locks one NFSv4.1 client holds on a file are given
/// back one at a time (each has its own open; the first unlock's CLOSE
/// used to release both).
#[test]
fn two_nfsv41_locks_on_a_file_are_released_one_at_a_time() {
    let s = TestServer::start_with(&["--grace", "0"]);
    let addr = s.addr;
    runtime().block_on(async {
        let r = Remote::from_v4(v41(addr, Duration::ZERO).await)
            .await
            .unwrap();
        let root = r.lookup_path("/").await.unwrap();
        let f = r.open_write(&root, "f", 0o666, false).await.unwrap();
        r.close(&f).await.unwrap();
        let range = |offset| Range { offset, len: 10 };
        let a = r
            .lock(&f.fh, (&root, "f"), range(0), true, false)
            .await
            .unwrap()
            .unwrap();
        let b = r
            .lock(&f.fh, (&root, "f"), range(100), true, false)
            .await
            .unwrap()
            .unwrap();
        r.unlock(a).await.unwrap();
        let other = v3(addr, "other").await;
        let fh = other.lookup_path("/f").await.unwrap();
        let them = LockOwner::this_process("other");
        let lr = |offset| LockRange {
            offset,
            len: 10,
            exclusive: true,
        };
        assert_eq!(
            other
                .nlm_lock_once(&fh, &them, lr(100), false)
                .await
                .unwrap(),
            Nlm4Stats::NLM4_DENIED,
            "the second lock is still held"
        );
        assert_eq!(
            other.nlm_lock_once(&fh, &them, lr(0), false).await.unwrap(),
            Nlm4Stats::NLM4_GRANTED
        );
        r.unlock(b).await.unwrap();
    });
}
