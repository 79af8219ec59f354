//! The client against NFS-Ganesha's NFSv4.1 (Debian's nfs-ganesha +
//! nfs-ganesha-vfs), started by `ganesha-run.sh` in private namespaces.
//!
//!   TARN_GANESHA=1 cargo test -p client --test ganesha -- --nocapture
//!
//! Needs root. Without TARN_GANESHA=1 the test only prints how to run it.
//! The test re-runs its own binary inside the namespaces (the client must
//! share Ganesha's network namespace), marked by TARN_GANESHA_ADDR.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn ganesha_nfs41() {
    if let Ok(addr) = std::env::var("TARN_GANESHA_ADDR") {
        let export = std::env::var("TARN_GANESHA_EXPORT").unwrap();
        let dir = std::env::var("TARN_GANESHA_DIR").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(common::scenario(
            addr.parse().unwrap(),
            &export,
            Some(std::path::Path::new(&dir)),
        ));
        return;
    }
    if std::env::var("TARN_GANESHA").as_deref() != Ok("1") {
        eprintln!(
            "ganesha_nfs41 skipped: set TARN_GANESHA=1 (as root) to run it against NFS-Ganesha"
        );
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ganesha-run.sh");
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(script)
        .arg(exe)
        .args([
            "--exact",
            "ganesha_nfs41",
            "--nocapture",
            "--test-threads=1",
        ])
        .spawn()
        .expect("ganesha-run.sh");
    // The script stops what it started; if it hangs, killing its PID (the
    // unshare) kills the whole PID namespace (--kill-child).
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "scenario against Ganesha: {status}");
}
