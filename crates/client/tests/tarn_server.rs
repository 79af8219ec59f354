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
mod harness;

use test_support::server::TestServer;

#[test]
fn tarn_nfs41() {
    let server = TestServer::start();
    let export_path = std::env::var("TARN_NFS4_EXPORT").unwrap_or_else(|_| "/".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(common::scenario(
        server.addr,
        &export_path,
        Some(&server.export),
    ));
}
