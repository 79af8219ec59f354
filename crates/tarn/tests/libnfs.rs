//! End-to-end tests with a real peer: Debian's libnfs-utils (nfs-cp, nfs-ls,
//! nfs-cat) over NFSv3 against `tarn serve` on loopback.

mod common;
use common::*;

#[test]
fn copy_100_mib_in_and_out() {
    let s = TestServer::start();
    let src = s.state.join("src.bin");
    let back = s.state.join("back.bin");
    random_file(&src, 100);
    nfs_cp(&s, src.to_str().unwrap(), &s.url("/big.bin"));
    assert_eq!(
        sha256_file(&s.export.join("big.bin")),
        sha256_file(&src),
        "data on the server's disk"
    );
    nfs_cp(&s, &s.url("/big.bin"), back.to_str().unwrap());
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

/// `name` made in `s`'s export with `n` files, `file(i)` each, holding
/// `data`.
fn dir_with_files(
    s: &TestServer,
    name: &str,
    n: usize,
    file: impl Fn(usize) -> String,
    data: &[u8],
) -> std::path::PathBuf {
    let dir = s.export.join(name);
    std::fs::create_dir(&dir).unwrap();
    for i in 0..n {
        std::fs::write(dir.join(file(i)), data).unwrap();
    }
    dir
}

/// What `nfs-ls` of `path` prints (it must succeed).
fn ls_text(s: &TestServer, path: &str) -> String {
    let out = libnfs("nfs-ls", &[&s.url(path)]);
    assert!(
        out.status.success(),
        "nfs-ls: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log_text()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn list_10000_entry_directory_completely() {
    let s = TestServer::start();
    dir_with_files(&s, "many", 10_000, |i| format!("file-{i:05}"), b"");
    let text = ls_text(&s, "/many");
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

/// `nfs-ls` of `path`: name -> (mode, size) for each listed entry.
fn ls(s: &TestServer, path: &str) -> std::collections::BTreeMap<String, (String, u64)> {
    ls_text(s, path)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6).then(|| (f[5].to_string(), (f[0].to_string(), f[4].parse().unwrap())))
        })
        .collect()
}

/// The server keeps a listing read in full in memory (when it may watch the
/// filesystem with fanotify): later listings must still show every change
/// made directly in the exported directory, at once.
#[test]
fn repeated_listings_show_local_changes_at_once() {
    use std::os::unix::fs::PermissionsExt;
    let s = TestServer::start();
    let dir = dir_with_files(&s, "watched", 3_000, |i| format!("f{i:04}"), b"x");
    let cat = |name: &str| {
        let out = libnfs("nfs-cat", &[&s.url(&format!("/watched/{name}"))]);
        assert!(
            out.status.success(),
            "nfs-cat {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cat("f0001"), "x");
    assert_eq!(cat("f0001"), "x", "looked up again");
    let first = ls(&s, "/watched");
    assert_eq!(first.len(), 3_000);
    assert_eq!(first["f0001"], ("-rw-r--r--".to_string(), 1));
    assert_eq!(ls(&s, "/watched"), first, "the same listing again");

    // Entries change, the directory does not.
    std::fs::write(dir.join("f0001"), b"grown to 17 bytes").unwrap();
    std::fs::set_permissions(dir.join("f0002"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let second = ls(&s, "/watched");
    assert_eq!(second["f0001"].1, 17, "size after a local write");
    assert_eq!(second["f0002"].0, "-rw-------", "mode after a local chmod");
    assert_eq!(second["f0003"], first["f0003"]);
    assert_eq!(
        cat("f0001"),
        "grown to 17 bytes",
        "looked up after a local write"
    );
    assert_eq!(cat("f0004"), "x");
    std::fs::remove_file(dir.join("f0004")).unwrap();
    std::fs::write(dir.join("f0004"), b"another file of that name").unwrap();
    assert_eq!(
        cat("f0004"),
        "another file of that name",
        "the name's new object"
    );

    // The directory changes.
    std::fs::remove_file(dir.join("f0003")).unwrap();
    std::fs::write(dir.join("new"), b"abc").unwrap();
    let third = ls(&s, "/watched");
    assert!(!third.contains_key("f0003"), "a removed entry is gone");
    assert_eq!(third["new"].1, 3, "a created entry is listed");
    assert_eq!(third.len(), 3_000);
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
    nfs_cp(&s, src.to_str().unwrap(), &s.url("/sub/small.txt"));
    assert_eq!(
        std::fs::read(s.export.join("sub/small.txt")).unwrap(),
        b"hello tarn\n"
    );
    let out = libnfs("nfs-cat", &[&s.url("/sub/small.txt")]);
    assert_eq!(out.stdout, b"hello tarn\n");
    // A missing file: the client sees NFS3ERR_NOENT.
    // nfs-cat of `path` fails, saying one of `said`.
    let cat_fails = |path: &str, said: [&str; 2], what: &str| {
        let out = libnfs("nfs-cat", &[&s.url(path)]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.iter().any(|w| err.contains(w)),
            "nfs-cat of {what} said: {err}"
        );
    };
    cat_fails(
        "/sub/missing.txt",
        ["NOENT", "No such file"],
        "a missing file",
    );
    // A file only root may read: the squashed/unprivileged caller gets NFS3ERR_ACCES.
    std::fs::write(s.export.join("secret"), b"x").unwrap();
    std::fs::set_permissions(
        s.export.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    cat_fails("/secret", ["ACCES", "ermission"], "a 0600 root file");
}

/// libnfs splits nfs://SERVER/PATH at its last '/': what comes before is the
/// export it MNTs, the rest the file. With one slash and a bare name the
/// export is empty, which libnfs (4.0 to 6.x, nfs3_mount_3_cb) refuses by
/// itself after a successful MNT unless auto-traverse-mounts=0; the forms
/// that name the export work: the exported directory (as with knfsd), or
/// "/" (nfs://HOST//FILE, what `TestServer::url` makes).
#[test]
fn one_slash_urls_name_the_export() {
    let s = TestServer::start();
    let p = s.port();
    let opts = format!("nfsport={p}&mountport={p}&uid=1000&gid=1000");
    let dir = s.export.canonicalize().unwrap();
    let dir = dir.to_str().unwrap();
    let src = s.state.join("one.txt");
    std::fs::write(&src, b"one slash\n").unwrap();

    let url = format!("nfs://127.0.0.1{dir}/one.txt?{opts}");
    nfs_cp(&s, src.to_str().unwrap(), &url);
    assert_eq!(
        std::fs::read(s.export.join("one.txt")).unwrap(),
        b"one slash\n"
    );
    let out = libnfs("nfs-cat", &[&url]);
    assert_eq!(out.stdout, b"one slash\n", "nfs-cat {url}");
    for (url, what) in [
        (
            format!("nfs://127.0.0.1{dir}?{opts}"),
            "of the export directory",
        ),
        (format!("nfs://127.0.0.1/?{opts}"), "nfs://127.0.0.1/"),
    ] {
        let listing = libnfs("nfs-ls", &[&url]);
        assert!(
            String::from_utf8_lossy(&listing.stdout).contains("one.txt"),
            "nfs-ls {what}: {}{}",
            String::from_utf8_lossy(&listing.stdout),
            String::from_utf8_lossy(&listing.stderr)
        );
    }

    // A bare name: MNT "" is answered as the root (knfsd's mountd does the
    // same), which libnfs uses when told not to walk the export list.
    let bare = format!("nfs://127.0.0.1/two.txt?{opts}&auto-traverse-mounts=0");
    nfs_cp(&s, src.to_str().unwrap(), &bare);
    assert_eq!(
        std::fs::read(s.export.join("two.txt")).unwrap(),
        b"one slash\n"
    );
    // Without that option libnfs gives up with "mount_cb: (null)"; the
    // server's log says which URLs work.
    let plain = format!("nfs://127.0.0.1/three.txt?{opts}");
    let _ = libnfs("nfs-cp", &[src.to_str().unwrap(), &plain]);
    let t = std::time::Instant::now();
    while !s.log_text().contains("libnfs cannot use an empty export")
        && t.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        s.log_text().contains("nfs://HOST//FILE"),
        "the log explains an empty MNT path: {}",
        s.log_text()
    );
}

/// Pipes the server holds (its READ data pipes, and its stdout).
fn pipes_of(s: &TestServer) -> usize {
    let pid = s.child.as_ref().unwrap().id();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("pipe:"))
        .count()
}

/// READ data spliced from the page cache to the socket (`--splice-reads
/// always`: by default only clients on other hosts get it) reaches libnfs
/// over NFSv3 and Tarn's client over NFSv4.1 and NFSv3 whole, from odd
/// offsets and up to an odd end of file (and libnfs's NFSv4.0, whose
/// READs are copied: its replies may stay in the DRC). The metrics count
/// the spliced replies and bytes.
#[test]
fn spliced_reads_arrive_whole() {
    let (s, maddr) = start_with_metrics(&["--splice-reads", "always"]);
    let data: Vec<u8> = (0..(5 << 20) + 4093u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(s.export.join("odd.bin"), &data).unwrap();
    let before = pipes_of(&s);
    let p = s.port();
    let v4 = format!("nfs://127.0.0.1//odd.bin?version=4&nfsport={p}&uid=1000&gid=1000");
    for url in [s.url("/odd.bin"), v4] {
        assert_printed(
            &format!("nfs-cat {url}"),
            &libnfs("nfs-cat", &[&url]),
            &data,
        );
    }
    for vers in ["4.1", "3"] {
        let url = format!("nfs://127.0.0.1:{p}/odd.bin?vers={vers}&uid=1000&gid=1000");
        assert_printed(
            &format!("tarn cat {url}"),
            &tarn_output(&["cat", &url]),
            &data,
        );
    }
    // A READ of 200000 bytes from inside a page, by hand.
    use proto::nfs3::*;
    let (mut c, root) = mounted_root(&s);
    let what = Diropargs3 {
        dir: root,
        name: bytes::Bytes::from_static(b"odd.bin"),
    };
    let l: Lookup3res = nfs_call(&mut c, 2, NFSPROC3_LOOKUP, &Lookup3args { what });
    let Lookup3res::NFS3_OK(ok) = l else {
        panic!("LOOKUP: {l:?}")
    };
    let a = Read3args {
        file: ok.object,
        offset: 4097,
        count: 200_000,
    };
    let r: Read3res = nfs_call(&mut c, 3, NFSPROC3_READ, &a);
    let Read3res::NFS3_OK(ok) = r else {
        panic!("READ: {r:?}")
    };
    assert_eq!((ok.count, ok.eof), (200_000, false));
    assert!(ok.data[..] == data[4097..204_097]);
    assert!(
        pipes_of(&s) >= before + 2,
        "the server made no pipe: the data was copied, not spliced"
    );
    // Three whole reads of the file spliced (libnfs's v3, Tarn's v4.1 and
    // v3) but for their small tails, and the READ by hand.
    let m = metrics_text(&maddr);
    let spliced = metric_sum(&m, "tarn_read_spliced_bytes_total").unwrap();
    let replies = metric_sum(&m, "tarn_read_spliced_replies_total").unwrap();
    assert!(
        spliced >= (3 * (5 << 20) + 200_000) as f64 && replies >= 16.0,
        "spliced {spliced} bytes in {replies} replies:\n{m}"
    );
    assert!(metric_sum(&m, "tarn_read_splice_no_pipe_total").is_some());
}

/// `nfs-cp from to`, which must succeed (a failure shows its stderr and
/// the server's log).
#[track_caller]
fn nfs_cp(s: &TestServer, from: &str, to: &str) {
    let out = libnfs("nfs-cp", &[from, to]);
    assert!(
        out.status.success(),
        "nfs-cp {from} {to}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log_text()
    );
}
