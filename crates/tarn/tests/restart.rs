//! Restarts and crashes: file handles survive a restart, the write verifier
//! changes so clients resend uncommitted writes, and data acknowledged as
//! stable (FILE_SYNC) survives a SIGKILL of the server.

mod common;
use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use std::net::TcpStream;

fn write(
    c: &mut TcpStream,
    xid: u32,
    fh: &NfsFh3,
    offset: u64,
    data: &[u8],
    stable: StableHow,
) -> Write3resok {
    let a = Write3args {
        file: fh.clone(),
        offset,
        count: data.len() as u32,
        stable,
        data: Bytes::copy_from_slice(data),
    };
    match nfs_call::<_, Write3res>(c, xid, NFSPROC3_WRITE, &a) {
        Write3res::NFS3_OK(ok) => ok,
        other => panic!("WRITE: {other:?}"),
    }
}

#[test]
fn handles_survive_a_restart_and_the_write_verifier_changes() {
    let mut s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    let fh = create3(&mut c, 1, &root, "kept");
    let v1 = write(&mut c, 2, &fh, 0, b"before", StableHow::UNSTABLE).verf;
    drop(c);
    let (export, state, port) = (s.export.clone(), s.state.clone(), s.port());
    s.stop();
    let mut s2 = TestServer::start_on(&export, &state, port);
    let mut c = TcpStream::connect(s2.addr).unwrap();
    let g: Getattr3res = nfs_call(
        &mut c,
        3,
        NFSPROC3_GETATTR,
        &Getattr3args { object: fh.clone() },
    );
    assert!(
        matches!(g, Getattr3res::NFS3_OK(_)),
        "old handle after restart: {g:?}"
    );
    let v2 = write(&mut c, 4, &fh, 6, b"after", StableHow::UNSTABLE).verf;
    assert_ne!(v1, v2, "the write verifier must change across a restart");
    let cm: Commit3res = nfs_call(
        &mut c,
        5,
        NFSPROC3_COMMIT,
        &Commit3args {
            file: fh,
            offset: 0,
            count: 0,
        },
    );
    let Commit3res::NFS3_OK(ok) = cm else {
        panic!("COMMIT: {cm:?}")
    };
    assert_eq!(ok.verf, v2);
    assert_eq!(std::fs::read(export.join("kept")).unwrap(), b"beforeafter");
    s2.stop();
}

#[test]
fn file_sync_data_survives_a_crash() {
    let mut s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    let fh = create3(&mut c, 1, &root, "durable");
    let block: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    let ok = write(&mut c, 2, &fh, 0, &block, StableHow::FILE_SYNC);
    assert_eq!(ok.committed, StableHow::FILE_SYNC);
    assert_eq!(ok.count, block.len() as u32);
    let export = s.export.clone();
    s.crash();
    // The server process is gone; what it acknowledged as FILE_SYNC is in the file.
    assert_eq!(std::fs::read(export.join("durable")).unwrap(), block);
}

#[test]
fn sigterm_answers_and_stops_cleanly() {
    let mut s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    let fh = create3(&mut c, 1, &root, "f");
    write(&mut c, 2, &fh, 0, b"unstable data", StableHow::UNSTABLE);
    s.stop();
    assert!(!s.alive());
    assert!(
        s.log_text().contains("stopped"),
        "clean stop logged: {}",
        s.log_text()
    );
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), b"unstable data");
}

#[test]
fn a_second_server_on_the_same_state_directory_refuses_to_start() {
    let mut s = TestServer::start();
    let first_pid = s.child.as_ref().unwrap().id();
    let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args([
            "serve",
            s.export.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--state-dir",
            s.state.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = second.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > std::time::Duration::from_secs(20) {
            let _ = second.kill();
            let _ = second.wait();
            panic!("the second server is still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "second server exited 0; stderr: {err}");
    assert!(
        err.contains(&s.state.display().to_string()) && err.contains(&format!("PID {first_pid}")),
        "the refusal names the directory and the holder: {err}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "it must not announce itself"
    );
    // The first still serves, and still owns its admin socket.
    assert!(s.alive());
    let mut c = TcpStream::connect(s.addr).unwrap();
    mnt_root(&mut c);
    assert!(s.admin_socket().exists());
    let stats = tarn_admin(&s, "stats", &["--count", "1", "--interval", "0.1"]);
    assert!(!stats.is_empty());
    s.stop();
}
