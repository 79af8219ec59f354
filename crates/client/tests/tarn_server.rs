//! The Ganesha scenario against Tarn's own NFSv4.1 server; it states what
//! the server must do:
//!
//! - `tarn serve DIR --listen 127.0.0.1:PORT` answers NFSv4 COMPOUNDs
//!   (minor version 1) on the same port as NFSv3, and DIR is the root of its
//!   pseudo-fs (PUTROOTFH lands in DIR; TARN_NFS4_EXPORT overrides the path).
//! - EXCHANGE_ID with SP4_NONE, CREATE_SESSION (csa_sequence =
//!   eir_sequenceid, a replay returns the same session), RECLAIM_COMPLETE,
//!   SEQUENCE with per-slot seqids: SEQ_MISORDERED for a skipped seqid,
//!   RETRY_UNCACHED_REP (or the cached reply) for a replay,
//!   OP_NOT_IN_SESSION for a 4.1 COMPOUND without SEQUENCE,
//!   MINOR_VERS_MISMATCH for minor version 7, 64 slots in flight.
//! - OPEN (CLAIM_NULL, UNCHECKED4 create with mode), 1 MiB UNSTABLE WRITEs
//!   whose verifier COMMIT repeats, READ to eof, GETATTR of type, change,
//!   size, fileid, mode, maxread, maxwrite and lease_time, READDIR, LOCK,
//!   LOCKT and LOCKU with two lock owners (LOCK4denied naming the holder),
//!   CLOSE, CREATE of a directory, REMOVE, DESTROY_SESSION and
//!   DESTROY_CLIENTID; BADSESSION afterwards.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_server -- --nocapture

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Kills the server by PID when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn tarn_nfs41() {
    let bin = std::env::var("TARN_BIN")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/debug/tarn").into());
    assert!(
        std::path::Path::new(&bin).exists(),
        "{bin} missing: cargo build -p tarn"
    );
    let tmp = tempfile::Builder::new()
        .prefix("tarn-client-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (export, state) = (tmp.path().join("export"), tmp.path().join("state"));
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let addr = format!("127.0.0.1:{}", testkdc::free_port());
    let log = std::fs::File::create(state.join("server.log")).unwrap();
    let mut child = Command::new(&bin)
        .args(["serve", export.to_str().unwrap(), "--listen", &addr])
        .args([
            "--state-dir",
            state.to_str().unwrap(),
            "--log-level",
            "debug",
        ])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start tarn");
    // The server prints one line once it listens.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    assert!(
        line.starts_with("tarn: exporting"),
        "unexpected first line {line:?}"
    );

    let export_path = std::env::var("TARN_NFS4_EXPORT").unwrap_or_else(|_| "/".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(common::scenario(
        addr.parse().unwrap(),
        &export_path,
        Some(&export),
    ));
}
