//! The harnesses Tarn's tests share: a `tarn serve` started and stopped by
//! PID ([`server`]), a FUSE mount ([`fuse`]), a run against NFS-Ganesha
//! ([`ganesha`]), a throwaway PKI ([`pki`]), Ceph and etcd on loopback
//! ([`ceph`], [`etcd`]), a TCP proxy that cuts connections ([`proxy`]),
//! Prometheus text ([`metrics`]), and the Kerberos realm of `testkdc`.
//!
//! Used only as a dev-dependency. It depends on none of Tarn's crates, so
//! any of them (their unit tests too) can use it. What runs the `tarn`
//! binary finds it with [`tarn_bin`] or takes its path as an argument.
#![forbid(unsafe_code)]

pub mod ceph;
pub mod etcd;
pub mod fuse;
pub mod ganesha;
pub mod metrics;
pub mod pki;
pub mod proxy;
pub mod server;

pub use testkdc;
pub use testkdc::free_port;

use std::path::PathBuf;

/// The `tarn` binary the tests run: `TARN_BIN` if set, else the one cargo
/// built beside this test binary (`<target>/<profile>/tarn`, the path of
/// `CARGO_BIN_EXE_tarn` in the tarn crate's own tests).
pub fn tarn_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("TARN_BIN") {
        return b.into();
    }
    // A test binary is <target>/<profile>/deps/NAME-HASH.
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("tarn"))
        .expect("a test binary under <target>/<profile>/deps");
    assert!(
        bin.exists(),
        "{} missing: cargo build -p tarn (or set TARN_BIN)",
        bin.display()
    );
    bin
}

/// A new temporary directory `/var/tmp/PREFIX...` (a disk file system,
/// with kernel file handles, which /tmp is not everywhere), removed on drop.
pub fn var_tmp(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// Runs `cmd` to its end and returns its output; it must succeed (else
/// the panic names `what` and gives its stdout and stderr).
pub fn run_ok(cmd: &mut std::process::Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
