//! `tarn cp` through a server crash: the server is SIGKILLed mid-copy and
//! started again on the same port and state directory; the copy goes on
//! (the tool's channel reconnects and resends, its session is made anew,
//! its open file reclaimed, writes the restart lost written again) and
//! ends with equal checksums, both ways, over NFSv4.1 and over NFSv3 (no
//! session there: calls are resent with the same xid, and the changed
//! write verifier has the lost writes sent again).
//!
//!   cargo test -p tarn --test tools_restart -- --nocapture

mod common;
use common::*;
use rand::RngCore;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZE: usize = 200 << 20;
/// A short grace period: the test's client reclaims at once anyway.
const SERVE: &[&str] = &["--grace", "10"];

fn url_vers(s: &TestServer, path: &str, vers: &str) -> String {
    format!(
        "nfs://127.0.0.1:{}/{path}?vers={vers}&uid=1000&gid=1000",
        s.port()
    )
}

fn spawn_cp(from: &str, to: &str, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["cp", from, to])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Waits until `p` holds at least `n` bytes (the copy is under way).
fn wait_for_size(p: &Path, n: u64, cp: &mut Child) {
    let t = Instant::now();
    loop {
        if std::fs::metadata(p).is_ok_and(|m| m.len() >= n) {
            return;
        }
        assert!(
            cp.try_wait().unwrap().is_none(),
            "the copy ended before the crash"
        );
        assert!(t.elapsed() < Duration::from_secs(120), "copy never started");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for the copy to end (killing it after a while); its stderr.
fn finish_cp(mut cp: Child, log: &Path) -> String {
    let t = Instant::now();
    let status = loop {
        if let Some(st) = cp.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(400) {
            let _ = cp.kill();
            let _ = cp.wait();
            panic!(
                "the copy did not end; stderr: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "tarn cp failed: {err}");
    err
}

#[test]
fn cp_survives_a_server_crash_both_ways() {
    cp_through_crashes("4.1");
}

#[test]
fn cp_survives_a_server_crash_both_ways_over_nfsv3() {
    cp_through_crashes("3");
}

fn cp_through_crashes(vers: &str) {
    let url = |s: &TestServer, path: &str| url_vers(s, path, vers);
    let mut s = TestServer::start_with(SERVE);
    let src = s.state.join("src.bin");
    let mut data = vec![0u8; SIZE];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    drop(data);
    let want = sha256_file(&src);

    // Local -> NFS, the server killed a quarter of the way.
    let log = s.state.join("up.log");
    let on_server = s.export.join("big.bin");
    let t = Instant::now();
    let mut cp = spawn_cp(src.to_str().unwrap(), &url(&s, "big.bin"), &log);
    wait_for_size(&on_server, SIZE as u64 / 4, &mut cp);
    let mut s2 = s.crash_and_restart(SERVE);
    let err = finish_cp(cp, &log);
    println!(
        "NFSv{vers}: local -> NFS through a crash: {:?}; stderr:\n{err}",
        t.elapsed()
    );
    assert_eq!(sha256_file(&on_server), want, "data on the server");
    if vers != "3" {
        assert!(
            err.contains("new session made"),
            "the session was recovered: {err}"
        );
    }
    assert!(
        err.contains("writing again"),
        "UNSTABLE writes the old server held were sent again: {err}"
    );

    // NFS -> local, the server killed again.
    let back = s.state.join("back.bin");
    let log = s.state.join("down.log");
    let t = Instant::now();
    let mut cp = spawn_cp(&url(&s2, "big.bin"), back.to_str().unwrap(), &log);
    wait_for_size(&back, SIZE as u64 / 4, &mut cp);
    let _s3 = s2.crash_and_restart(SERVE);
    let err = finish_cp(cp, &log);
    println!(
        "NFSv{vers}: NFS -> local through a crash: {:?}; stderr:\n{err}",
        t.elapsed()
    );
    assert_eq!(sha256_file(&back), want, "data copied back");
}

fn signal(s: &TestServer, sig: &str) {
    let pid = s.child.as_ref().expect("running").id();
    Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

/// Continues a stopped server however the test ends.
struct Resume<'a>(&'a TestServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

#[test]
fn soft_fails_and_hard_waits_while_the_server_does_not_answer() {
    let s = TestServer::start();
    let q = |extra: &str| {
        format!(
            "nfs://127.0.0.1:{}/?vers=4.1&uid=1000&gid=1000&timeo=5&retrans=1&{extra}",
            s.port()
        )
    };
    // Stopped, the server's kernel still accepts connections: calls go
    // unanswered.
    signal(&s, "STOP");
    let resume = Resume(&s);
    let t = Instant::now();
    let out = tarn_output(&["stat", &q("soft=1")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("timed out"), "{err}");
    // 0.5 s, then 1 s more: two waits.
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());

    let log = s.state.join("hard.log");
    let mut hard = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["stat", &q("hard=1")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(hard.try_wait().unwrap().is_none(), "a hard call waits");
    drop(resume);
    let err = finish_cp(hard, &log);
    assert!(err.contains("not responding, still trying"), "{err}");
    assert!(err.contains("OK"), "{err}");
}
