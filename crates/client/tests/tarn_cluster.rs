//! Three `tarn serve` heads exporting the same directory, their recovery
//! records and grace in a real etcd (started here on loopback, its own
//! data directory and ports, killed by PID). A client holding a lock on
//! head A follows the service address to head B after A is SIGKILLed
//! (in-test TCP proxy standing in for the moved address) and reclaims;
//! B and C enter grace meanwhile; grace ends once the reclaim is done,
//! not at its bound; A restarts and rejoins.
//!
//! Skipped (with a message) when etcd is not installed, unless
//! TARN_REQUIRE_ETCD=1.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_cluster

mod harness;
use client::nfs4::*;
use harness::*;
use proto::nfs4::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::etcd::Etcd;
use test_support::proxy::Proxy;
use test_support::server::{kill, spawn_serving};

/// The grace bound the heads run with: long, so a grace that ends on its
/// own before it shows recovery completion ended it.
const GRACE: u64 = 60;

struct Head {
    node: String,
    child: Option<Child>,
    addr: SocketAddr,
    config: PathBuf,
    log: PathBuf,
}

impl Head {
    fn new(tmp: &Path, node: &str, export: &Path, etcd: &str, grace: u64) -> Head {
        let state = tmp.join(format!("state-{node}"));
        std::fs::create_dir_all(&state).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = tmp.join(format!("{node}.toml"));
        std::fs::write(
            &config,
            format!(
                "listen = \"{addr}\"\nstate_dir = {:?}\n\n[[export]]\npath = {:?}\npseudo = \"/\"\nclients = [\"127.0.0.1\"]\nsquash = \"none\"\n\n[nfs4]\ngrace_seconds = {grace}\nlease_seconds = 30\n\n[cluster]\netcd = [\"{etcd}\"]\nnode = \"{node}\"\nname = \"test\"\nlease_seconds = 2\n",
                state.display().to_string(),
                export.display().to_string()
            ),
        )
        .unwrap();
        Head {
            node: node.into(),
            child: None,
            addr,
            config,
            log: tmp.join(format!("{node}.log")),
        }
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(tarn_bin());
        cmd.args(["serve", "--config"]).arg(&self.config);
        let (child, out) = spawn_serving(&mut cmd, &self.log, &format!("head {}", self.node));
        // Later stdout lines go nowhere harmful: keep the pipe open.
        std::mem::forget(out);
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
    }

    fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn channel_session(addr: SocketAddr, owner: &str) -> Arc<Session> {
    let o = SessionOptions {
        callbacks: false,
        ..owner_opts(owner, 1)
    };
    reconnecting_session(addr, 1, &o).await
}

/// Tries a new OPEN (create) of `name` through `s` until `want(result)`,
/// for up to `secs`; the last status.
async fn open_until(
    s: &Session,
    dir: &NfsFh4,
    name: &str,
    secs: u64,
    want: impl Fn(&Option<Nfsstat4>) -> bool,
) -> Option<Nfsstat4> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = s
            .open(dir, name, Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await;
        let st = match r {
            Ok((sid, fh)) => {
                s.close(&fh, &sid).await.unwrap();
                None
            }
            Err(e) => Some(e.status().expect("an NFS status")),
        };
        if want(&st) || Instant::now() > until {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A temporary directory (under /var/tmp) with etcd running in it and
/// an empty `export` directory; None, and the test passes, without etcd.
fn cluster_dirs() -> Option<(tempfile::TempDir, Etcd, std::path::PathBuf)> {
    let tmp = test_support::var_tmp("tarn-cluster-");
    let etcd = Etcd::start(tmp.path())?;
    let export = tmp.path().join("export");
    std::fs::create_dir_all(&export).unwrap();
    Some((tmp, etcd, export))
}

#[test]
fn a_failed_heads_client_reclaims_on_a_survivor_under_cluster_grace() {
    let Some((tmp, etcd, export)) = cluster_dirs() else {
        return;
    };
    chmod(&export, 0o777);
    let mut heads: Vec<Head> = ["a", "b", "c"]
        .iter()
        .map(|n| Head::new(tmp.path(), n, &export, &etcd.url, GRACE))
        .collect();
    heads[0].spawn();
    // The same file handles on every head: one handle key, one export id.
    for h in &heads[1..] {
        let dst = tmp.path().join(format!("state-{}", h.node));
        for f in ["handle.key", "export-ids"] {
            let src = tmp.path().join("state-a").join(f);
            if src.exists() {
                std::fs::copy(&src, dst.join(f)).unwrap();
            }
        }
    }
    heads[1].spawn();
    heads[2].spawn();
    let (a, b) = (heads[0].addr, heads[1].addr);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let service = rt.block_on(Proxy::start(a));
    let (x, y, dir, sid, fh, ysid, yfh) = rt.block_on(async {
        // The starting heads' grace ends once all three recovered (none
        // had clients): well before its bound.
        let y = channel_session(b, "y-on-b").await;
        let dir = y.lookup_path("/").await.unwrap();
        let t0 = Instant::now();
        let st = open_until(&y, &dir, "warm", GRACE, |s| s.is_none()).await;
        assert_eq!(st, None, "the start-up grace never ended");
        assert!(t0.elapsed() < Duration::from_secs(GRACE / 2));
        // y holds an open on b (established state).
        let (ysid, yfh) = y
            .open(&dir, "y-file", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();

        let x = channel_session(service.addr, "x-moves").await;
        let (sid, fh, _) = kept_and_locked(&x, &dir, "lock granted on a").await;
        (x, y, dir, sid, fh, ysid, yfh)
    });

    heads[0].kill();
    let killed = Instant::now();
    rt.block_on(async {
        // b enters grace when a's etcd lease (2 s) runs out: a new OPEN
        // gets NFS4ERR_GRACE...
        let st = open_until(&y, &dir, "during", 20, |s| {
            *s == Some(Nfsstat4::NFS4ERR_GRACE)
        })
        .await;
        assert_eq!(st, Some(Nfsstat4::NFS4ERR_GRACE), "b never entered grace");
        eprintln!("b in grace {:?} after the kill", killed.elapsed());
        // ...while y's established open keeps working.
        write_sync(&y, &ysid, &yfh, 0, b"y")
            .await
            .expect("WRITE on established state during grace");

        // A new lock, even on y's own open file, waits for the reclaims.
        let r = lock_as(
            &y,
            &yfh,
            &ysid,
            "lock-during",
            NfsLockType4::WRITE_LT,
            0,
            10,
        )
        .await;
        assert_eq!(err(r), Nfsstat4::NFS4ERR_GRACE);

        // c enters grace too (each head notices at its own next step,
        // a third of the etcd lease apart at most).
        let z = channel_session(heads_addr_c(&heads), "z-on-c").await;
        let st = open_until(&z, &dir, "z-during", 5, |s| {
            *s == Some(Nfsstat4::NFS4ERR_GRACE)
        })
        .await;
        assert_eq!(st, Some(Nfsstat4::NFS4ERR_GRACE), "c in grace too");

        // The service address moves to b; x recovers there and reclaims.
        service.point_at(b);
        write_sync(&x, &sid, &fh, 6, b" after")
            .await
            .expect("WRITE after the failover");
        eprintln!(
            "first successful call through b {:?} after the kill",
            killed.elapsed()
        );
        assert_eq!(x.recoveries(), 1);
        assert_eq!(x.state_book().locks.len(), 1);

        // Grace ends because recovery is complete, not at its bound.
        let st = open_until(&y, &dir, "after", GRACE, |s| s.is_none()).await;
        assert_eq!(st, None, "grace did not end");
        let lifted = killed.elapsed();
        eprintln!("grace lifted {lifted:?} after the kill");
        assert!(lifted < Duration::from_secs(GRACE - 10), "{lifted:?}");

        // The reclaimed lock is held: y's conflicting lock on b is denied,
        // then granted once x lets go.
        let (osid, ofh) = y
            .open(&dir, "kept", None, OPEN4_SHARE_ACCESS_BOTH)
            .await
            .unwrap();
        let r = lock_as(&y, &ofh, &osid, "lock", NfsLockType4::WRITE_LT, 0, 10)
            .await
            .unwrap();
        assert!(r.is_err(), "the reclaimed lock must hold: {r:?}");
        let lsid = x.state_book().locks[0].stateid.clone();
        x.locku(&fh, &lsid, NfsLockType4::WRITE_LT, 0, 100)
            .await
            .expect("LOCKU of the reclaimed lock");
        let r = lock_as(&y, &ofh, &osid, "lock2", NfsLockType4::WRITE_LT, 0, 10)
            .await
            .unwrap();
        assert!(r.is_ok(), "granted after the unlock: {r:?}");
    });
    assert_eq!(std::fs::read(export.join("kept")).unwrap(), b"before after");

    // a comes back: it registers again and serves, it does not exit.
    heads[0].spawn();
    std::thread::sleep(Duration::from_secs(3));
    assert!(heads[0].alive(), "a exited: {}", heads[0].log());
    rt.block_on(async {
        let w = channel_session(a, "w-on-a").await;
        let st = open_until(&w, &dir, "back", GRACE, |s| s.is_none()).await;
        assert_eq!(st, None, "a serves again");
    });
    for h in heads.iter_mut() {
        assert!(h.alive(), "{} died: {}", h.node, h.log());
    }
    // What the survivor saw, for the test's output.
    for l in heads[1].log().lines().filter(|l| l.contains("cluster:")) {
        eprintln!("b: {l}");
    }
    let log = heads[1].log();
    assert!(log.contains("taking over a failed head's clients"));

    drop(etcd);
}

fn heads_addr_c(heads: &[Head]) -> SocketAddr {
    heads[2].addr
}

fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            out.push(if k <= c.len() {
                T[(n >> (18 - 6 * k)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

/// One POST to etcd's JSON gateway; the whole response.
fn etcd_post(url: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let hp = &url["http://".len()..];
    let mut c = std::net::TcpStream::connect(hp).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: {hp}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    r
}

/// A failed head's NLM hosts (its NSM records in etcd) get SM_NOTIFY from
/// the head that takes over; as NLM hosts never say they are done, the
/// grace then runs to its bound, and the failed head's records go with it.
#[test]
fn a_failed_heads_nlm_hosts_are_notified_and_hold_the_grace_to_its_bound() {
    let Some((tmp, etcd, export)) = cluster_dirs() else {
        return;
    };
    const BOUND: u64 = 6;
    let mut a = Head::new(tmp.path(), "a", &export, &etcd.url, BOUND);
    let mut b = Head::new(tmp.path(), "b", &export, &etcd.url, BOUND);
    a.spawn();
    b.spawn();
    // a granted NLM locks to a host: its NSM record (caller name "host1").
    let nsm_key = "/tarn/test/nsm/a/686f737431";
    let put = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        b64(nsm_key.as_bytes()),
        b64(b"127.0.0.1")
    );
    etcd_post(&etcd.url, "/v3/kv/put", &put);
    a.kill();
    let killed = Instant::now();
    let range = format!(r#"{{"key":"{}"}}"#, b64(nsm_key.as_bytes()));
    loop {
        let log = b.log();
        if log.contains("grace lifted") && log.contains("failed head's entry removed") {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(BOUND + 20),
            "no lift: {log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let lifted = killed.elapsed();
    let log = b.log();
    assert!(
        log.contains("SM_NOTIFY to a failed head's NLM hosts"),
        "{log}"
    );
    assert!(log.contains("timed_out=true"), "{log}");
    // The lease (2 s) plus the bound, not earlier.
    assert!(lifted >= Duration::from_secs(BOUND + 1), "{lifted:?}");
    let r = etcd_post(&etcd.url, "/v3/kv/range", &range);
    assert!(!r.contains("\"kvs\""), "a's NSM record is left: {r}");
    assert!(b.alive(), "{}", b.log());
}
