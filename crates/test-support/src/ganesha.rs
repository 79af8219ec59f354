//! A test run against NFS-Ganesha (Debian's, FSAL VFS) started on loopback
//! in private namespaces by scripts/ganesha-run.sh, which runs the same
//! test binary again inside them (a mount or client there must share
//! Ganesha's network namespace).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Outside the namespaces (TARN_GANESHA=1, as root): starts Ganesha and
/// the test `name` inside them, and waits for it (300 s at most). Inside
/// (TARN_GANESHA_ADDR set): `scenario(address, export path, the export's
/// directory on this machine)`. Without TARN_GANESHA=1: skipped with a
/// hint.
pub fn inside_ganesha(name: &str, scenario: impl FnOnce(&str, &str, &Path)) {
    if let Ok(addr) = std::env::var("TARN_GANESHA_ADDR") {
        let export = std::env::var("TARN_GANESHA_EXPORT").unwrap();
        let dir = PathBuf::from(std::env::var("TARN_GANESHA_DIR").unwrap());
        scenario(&addr, &export, &dir);
        return;
    }
    if std::env::var("TARN_GANESHA").as_deref() != Ok("1") {
        eprintln!("{name} skipped: set TARN_GANESHA=1 (as root) to run it against NFS-Ganesha");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/ganesha-run.sh");
    let mut child = Command::new(script)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .spawn()
        .expect("ganesha-run.sh");
    // The script stops what it started; if it hangs, killing its PID (the
    // unshare) takes the whole PID namespace with it (--kill-child).
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: timed out after 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{name} against Ganesha: {status}");
}
