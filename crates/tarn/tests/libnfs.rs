//! End-to-end tests with a real peer: Debian's libnfs-utils (nfs-cp, nfs-ls,
//! nfs-cat) over NFSv3 against `tarn serve` on loopback.

mod common;
use common::*;
use std::process::Command;

#[test]
fn copy_100_mib_in_and_out() {
    let s = TestServer::start();
    let src = s.state.join("src.bin");
    let back = s.state.join("back.bin");
    let st = Command::new("dd")
        .args([
            "if=/dev/urandom",
            &format!("of={}", src.display()),
            "bs=1M",
            "count=100",
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let out = libnfs("nfs-cp", &[src.to_str().unwrap(), &s.url("/big.bin")]);
    assert!(
        out.status.success(),
        "nfs-cp in: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log_text()
    );
    assert_eq!(
        sha256_file(&s.export.join("big.bin")),
        sha256_file(&src),
        "data on the server's disk"
    );
    let out = libnfs("nfs-cp", &[&s.url("/big.bin"), back.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "nfs-cp out: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sha256_file(&back),
        sha256_file(&src),
        "data read back over NFS"
    );
    let meta = std::fs::metadata(s.export.join("big.bin")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        1000,
        "created as the caller"
    );
}

#[test]
fn list_10000_entry_directory_completely() {
    let s = TestServer::start();
    let dir = s.export.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..10_000 {
        std::fs::write(dir.join(format!("file-{i:05}")), b"").unwrap();
    }
    let out = libnfs("nfs-ls", &[&s.url("/many")]);
    assert!(
        out.status.success(),
        "nfs-ls: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log_text()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.starts_with("file-"))
        .collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "no entry listed twice");
    assert_eq!(names.len(), 10_000, "every entry listed");
}

#[test]
fn create_nested_read_and_errors_reach_the_client() {
    let s = TestServer::start();
    std::fs::create_dir(s.export.join("sub")).unwrap();
    std::fs::set_permissions(
        s.export.join("sub"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let src = s.state.join("small.txt");
    std::fs::write(&src, b"hello tarn\n").unwrap();
    let out = libnfs("nfs-cp", &[src.to_str().unwrap(), &s.url("/sub/small.txt")]);
    assert!(
        out.status.success(),
        "nfs-cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(s.export.join("sub/small.txt")).unwrap(),
        b"hello tarn\n"
    );
    let out = libnfs("nfs-cat", &[&s.url("/sub/small.txt")]);
    assert_eq!(out.stdout, b"hello tarn\n");
    // A missing file: the client sees NFS3ERR_NOENT.
    let out = libnfs("nfs-cat", &[&s.url("/sub/missing.txt")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NOENT") || err.contains("No such file"),
        "nfs-cat of a missing file said: {err}"
    );
    // A file only root may read: the squashed/unprivileged caller gets NFS3ERR_ACCES.
    std::fs::write(s.export.join("secret"), b"x").unwrap();
    std::fs::set_permissions(
        s.export.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = libnfs("nfs-cat", &[&s.url("/secret")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ACCES") || err.contains("ermission"),
        "nfs-cat of a 0600 root file said: {err}"
    );
}
