//! The client tools (`tarn ls|cat|stat|df|mkdir|rm|mv|ln|cp|lock`) against
//! a real `tarn serve` on loopback, NFSv4.0/4.1/4.2 and NFSv3 with AUTH_SYS: a
//! 20 MiB file and a tree of 200 files (and a symbolic link) copied there
//! and back (checksums, modes, mtimes), the namespace commands, locks held
//! by two processes, and what the user sees when something is wrong.
//!
//!   cargo test -p tarn --test tools -- --nocapture   (prints throughput)

mod common;
use common::*;
use rand::{Rng, RngCore, SeedableRng};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Acting as uid/gid 1000 (not squashed root), so owners are known.
fn url(s: &TestServer, path: &str) -> String {
    format!(
        "nfs://127.0.0.1:{}/{}?uid=1000&gid=1000",
        s.port(),
        path.trim_start_matches('/')
    )
}

/// The same over NFSv3.
fn url3(s: &TestServer, path: &str) -> String {
    url(s, path) + "&vers=3"
}

/// The same over NFSv4.0.
fn url40(s: &TestServer, path: &str) -> String {
    url(s, path) + "&vers=4.0"
}

/// stderr of a tool run that must fail.
fn fails(args: &[&str]) -> String {
    let out = tarn_output(args);
    assert!(
        !out.status.success(),
        "tarn {args:?} should fail; stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A 20 MiB random file (mode 0640, a fixed mtime with nanoseconds) copied
/// to the server through `url` ("what" names it in the output) and back:
/// equal checksums, mode, mtime and owner on the server's disk and on the
/// copy back. Returns the source, the copy back and the data.
fn cp_20_mib_there_and_back(
    s: &TestServer,
    url: fn(&TestServer, &str) -> String,
    what: &str,
) -> (PathBuf, PathBuf, Vec<u8>) {
    let src = s.state.join("big.bin");
    let back = s.state.join("back.bin");
    let mut data = vec![0u8; 20 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&src, 1_600_000_000, 123_456_789);

    let up = tarn(&["cp", src.to_str().unwrap(), &url(s, "/big.bin")]);
    println!("local -> {what}: {}", up.trim());
    assert!(
        up.starts_with(&format!("1 files, {} bytes in ", 20 << 20)),
        "{up}"
    );
    let on_server = s.export.join("big.bin");
    assert_eq!(
        sha256_file(&on_server),
        sha256_file(&src),
        "data on the server's disk"
    );
    assert_eq!(mode(&on_server), 0o640);
    assert_eq!(mtime(&on_server), (1_600_000_000, 123_456_789));
    assert_eq!(std::fs::metadata(&on_server).unwrap().uid(), 1000);

    let down = tarn(&["cp", &url(s, "/big.bin"), back.to_str().unwrap()]);
    println!("{what} -> local: {}", down.trim());
    assert_eq!(sha256_file(&back), sha256_file(&src));
    assert_eq!(mode(&back), 0o640);
    assert_eq!(mtime(&back), (1_600_000_000, 123_456_789));
    (src, back, data)
}

#[test]
fn cp_20_mib_there_and_back_with_equal_checksums() {
    let s = TestServer::start();
    let (src, back, data) = cp_20_mib_there_and_back(&s, url, "NFS");

    // NFS -> NFS on the same server, into an existing directory: NFSv4.2
    // COPY, the data never leaving the server; over 4.1 READs and WRITEs.
    tarn(&["mkdir", &url(&s, "/into")]);
    let within = tarn(&["cp", &url(&s, "/big.bin"), &url(&s, "/into")]);
    println!("NFS -> NFS (4.2): {}", within.trim());
    assert!(within.contains("(1 by server-side COPY)"), "{within}");
    let into = s.export.join("into/big.bin");
    assert_eq!(sha256_file(&into), sha256_file(&src));
    assert_eq!(
        (mode(&into), mtime(&into)),
        (0o640, (1_600_000_000, 123_456_789))
    );
    let v41 = |p: &str| url(&s, p) + "&vers=4.1";
    let within = tarn(&["cp", &v41("/big.bin"), &v41("/v41.bin")]);
    println!("NFS -> NFS (4.1): {}", within.trim());
    assert!(!within.contains("COPY"), "{within}");
    assert_eq!(sha256_file(&s.export.join("v41.bin")), sha256_file(&src));
    // Over an existing, longer file: truncated to the source's size.
    std::fs::write(&back, vec![7u8; 21 << 20]).unwrap();
    tarn(&["cp", "-q", &url(&s, "/big.bin"), back.to_str().unwrap()]);
    assert_eq!(sha256_file(&back), sha256_file(&src));
    // One call in flight, and more than the session has slots: same bytes.
    tarn(&[
        "cp",
        "-q",
        "--inflight",
        "64",
        src.to_str().unwrap(),
        &url(&s, "/w64"),
    ]);
    assert_eq!(sha256_file(&s.export.join("w64")), sha256_file(&src));
    tarn(&[
        "cp",
        "-q",
        "--inflight",
        "1",
        &url(&s, "/w64"),
        back.to_str().unwrap(),
    ]);
    assert_eq!(sha256_file(&back), sha256_file(&src));
    // cat writes the same bytes.
    let out = tarn_output(&["cat", &url(&s, "/big.bin")]);
    assert!(out.status.success());
    assert!(out.stdout == data, "cat output differs");
}

/// `tarn stat` of /top/hello.txt shows its type, size, mode, owner and
/// mtime, and `extra`; each missing line is named.
#[track_caller]
fn assert_hello_stat(st: &str, extra: &str) {
    for want in [
        "Type: regular file",
        "Size: 12 ",
        "Mode: 0640 (-rw-r-----)",
        "Owner: 1000 ",
        extra,
        "Modify: 2020-01-02 03:00:00.000000000 +0000",
    ] {
        assert!(st.contains(want), "stat lacks {want:?}:\n{st}");
    }
}

/// After [`cp_20_mib_there_and_back`] over `u` (`what` in the printout):
/// a copy within the server into `/into`, one out to NFSv4.2 as `/{out}`,
/// a copy over an existing longer file (`/longer`, first copied from
/// `longer_from`) and `cat`, each checked against `src`/`data`; what the
/// copy within printed.
fn copies_within_and_out(
    s: &TestServer,
    u: fn(&TestServer, &str) -> String,
    what: &str,
    out: &str,
    longer_from: &str,
    src: &Path,
    data: &[u8],
) -> String {
    tarn(&["mkdir", &u(s, "/into")]);
    let within = tarn(&["cp", &u(s, "/big.bin"), &u(s, "/into")]);
    println!("{what} -> {what}: {}", within.trim());
    assert_eq!(
        sha256_file(&s.export.join("into/big.bin")),
        sha256_file(src)
    );
    tarn(&["cp", "-q", &u(s, "/big.bin"), &url(s, &format!("/{out}"))]);
    assert_eq!(sha256_file(&s.export.join(out)), sha256_file(src));
    // Over an existing, longer file: truncated to the source's size.
    tarn(&["cp", "-q", longer_from, &u(s, "/longer")]);
    std::fs::write(s.export.join("longer"), vec![7u8; 21 << 20]).unwrap();
    tarn(&["cp", "-q", src.to_str().unwrap(), &u(s, "/longer")]);
    assert_eq!(sha256_file(&s.export.join("longer")), sha256_file(src));
    let cat = tarn_output(&["cat", &u(s, "/big.bin")]);
    assert!(cat.status.success());
    assert!(cat.stdout == data, "cat output differs");
    within
}

#[test]
fn v3_cp_20_mib_there_and_back_with_equal_checksums() {
    let s = TestServer::start();
    let (src, _, data) = cp_20_mib_there_and_back(&s, url3, "NFSv3");

    // NFSv3 -> NFSv3 and NFSv3 -> NFSv4.2 (two connections, one server).
    let longer_from = url(&s, "/v4.bin");
    copies_within_and_out(&s, url3, "NFSv3", "v4.bin", &longer_from, &src, &data);

    // libnfs's URL as nfs-cat takes it (version=, nfsport=, mountport=).
    let libnfs_url = s.url("/big.bin");
    let out = tarn_output(&["cat", &libnfs_url]);
    assert!(out.status.success(), "{libnfs_url}: {out:?}");
    assert!(out.stdout == data, "cat of the libnfs URL differs");

    // Another NFSv3 client sees what tarn wrote: libnfs's nfs-ls.
    let out = libnfs("nfs-ls", &[&s.url("/into")]);
    assert!(
        out.status.success(),
        "nfs-ls: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing
            .lines()
            .any(|l| l.contains(&(20u64 << 20).to_string()) && l.ends_with("big.bin")),
        "{listing}"
    );
}

#[test]
fn v40_cp_20_mib_there_and_back_with_equal_checksums() {
    let s = TestServer::start();
    let (src, _, data) = cp_20_mib_there_and_back(&s, url40, "NFSv4.0");

    // 4.0 -> 4.0 (READs and WRITEs, no COPY) and 4.0 -> 4.2.
    let longer_from = url40(&s, "/v42.bin");
    let within = copies_within_and_out(&s, url40, "NFSv4.0", "v42.bin", &longer_from, &src, &data);
    assert!(!within.contains("COPY"), "{within}");
}

/// A tree: nested directories, 200 files of assorted sizes and modes, and
/// directory modes and mtimes of their own.
/// `tarn cat` of a file of 64 MiB or more reads it over connections of
/// its own (four, the one that looked it up aside), unless the URL says
/// `nconnect=`: whole, over NFSv4.1 and NFSv3, and those connections are
/// closed when it ends (the server's log shows each opened and closed).
#[test]
fn cat_reads_a_large_file_over_more_connections() {
    let s = TestServer::start();
    let mut data = vec![0u8; (64 << 20) + 12345];
    rand::rngs::StdRng::seed_from_u64(64).fill_bytes(&mut data);
    std::fs::write(s.export.join("big"), &data).unwrap();
    let opened = || s.log_text().matches("connection opened").count();
    let closed = || s.log_text().matches("connection closed").count();
    // NFSv3: and one for MOUNT per set of connections.
    for (u, conns) in [
        (url(&s, "big"), 1 + 4),
        (url3(&s, "big"), 2 + 5),
        (url(&s, "big") + "&nconnect=2", 2),
    ] {
        let before = opened();
        assert_printed(&format!("tarn cat {u}"), &tarn_output(&["cat", &u]), &data);
        let made = opened() - before;
        assert_eq!(made, conns, "tarn cat {u}: connections opened");
    }
    let t0 = std::time::Instant::now();
    while closed() < opened() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(closed(), opened(), "every connection closed");
}

fn make_tree(root: &Path) -> Vec<PathBuf> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let dirs = ["", "a", "a/b", "a/b/c", "d", "d/e", "empty"];
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let mut files = vec![];
    for i in 0..200 {
        let dir = dirs[i % (dirs.len() - 1)]; // none in "empty"
        let p = root.join(dir).join(format!("f{i:03}"));
        let len = match i % 10 {
            0 => 0,
            1 => 1 << 20, // exactly one chunk
            2 => (1 << 20) + 1,
            _ => rng.gen_range(1..40_000),
        };
        let mut b = vec![0u8; len];
        rng.fill_bytes(&mut b);
        tree_file(&p, i, &b);
        files.push(p);
    }
    tree_dir_times(root, &dirs);
    files
}

#[test]
fn cp_r_tree_there_and_back_keeps_contents_modes_and_times() {
    cp_r_tree_there_and_back(url);
}

#[test]
fn v3_cp_r_tree_there_and_back_keeps_contents_modes_and_times() {
    cp_r_tree_there_and_back(url3);
}

#[test]
fn v40_cp_r_tree_there_and_back_keeps_contents_modes_and_times() {
    cp_r_tree_there_and_back(url40);
}

fn cp_r_tree_there_and_back(url: fn(&TestServer, &str) -> String) {
    let s = TestServer::start();
    let src = s.state.join("tree");
    let files = make_tree(&src);
    assert_eq!(files.len(), 200);
    // Links inside a tree are not followed: copied as links.
    let (a_time, d_time) = (mtime(&src.join("a")), mtime(&src.join("d")));
    std::os::unix::fs::symlink("f000", src.join("a/link")).unwrap();
    std::os::unix::fs::symlink("../nowhere", src.join("d/dangling")).unwrap();
    set_mtime(&src.join("a"), a_time.0 as u64, a_time.1 as u32);
    set_mtime(&src.join("d"), d_time.0 as u64, d_time.1 as u32);
    let want = snapshot(&src);

    let dir_err = fails(&["cp", src.to_str().unwrap(), &url(&s, "/tree")]);
    assert!(dir_err.contains("is a directory (use -r"), "{dir_err}");

    let up = tarn(&["cp", "-r", src.to_str().unwrap(), &url(&s, "/tree")]);
    println!("tree local -> NFS: {}", up.trim());
    assert!(up.starts_with("200 files, "), "{up}");
    assert_eq!(
        snapshot(&s.export.join("tree")),
        want,
        "the tree on the server"
    );

    let back = s.state.join("back");
    let down = tarn(&["cp", "-r", &url(&s, "/tree"), back.to_str().unwrap()]);
    println!("tree NFS -> local: {}", down.trim());
    assert_eq!(snapshot(&back), want, "the tree copied back");
    assert_eq!(mode(&back), mode(&src));

    // Into an existing directory: it receives the tree under its name.
    tarn(&["mkdir", &url(&s, "/copies")]);
    tarn(&["cp", "-r", "-q", &url(&s, "/tree"), &url(&s, "/copies")]);
    assert_eq!(snapshot(&s.export.join("copies/tree")), want, "NFS -> NFS");
}

#[test]
fn namespace_commands() {
    let s = TestServer::start();
    let u = |p: &str| url(&s, p);

    // mkdir, mkdir -p
    tarn(&["mkdir", &u("/top")]);
    let e = fails(&["mkdir", &u("/top")]);
    assert!(e.contains("/top: file exists (NFS4ERR_EXIST)"), "{e}");
    let e = fails(&["mkdir", &u("/x/y")]);
    assert!(
        e.contains("/x/y: no such file or directory (NFS4ERR_NOENT)"),
        "{e}"
    );
    tarn(&["mkdir", "-p", &u("/top/a/b/c")]);
    tarn(&["mkdir", "-p", &u("/top/a/b/c")]);
    assert!(s.export.join("top/a/b/c").is_dir());
    assert_eq!(mode(&s.export.join("top/a/b")), 0o755);

    // A file with a known mode, size and time, through cp.
    let f = s.state.join("hello.txt");
    std::fs::write(&f, b"hello, tarn\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&f, 1_577_934_000, 0); // 2020-01-02 03:00:00 UTC
    tarn(&["cp", "-q", f.to_str().unwrap(), &u("/top/hello.txt")]);

    // A link named on the command line is followed, as cp(1) does.
    let link = s.state.join("link");
    std::os::unix::fs::symlink(&f, &link).unwrap();
    tarn(&["cp", "-q", link.to_str().unwrap(), &u("/top/via-link")]);
    assert_eq!(
        std::fs::read(s.export.join("top/via-link")).unwrap(),
        b"hello, tarn\n"
    );
    tarn(&["rm", &u("/top/via-link")]);

    // cat
    assert_eq!(tarn(&["cat", &u("/top/hello.txt")]), "hello, tarn\n");

    // ls, ls -l, ls -R
    assert_eq!(tarn(&["ls", &u("/top")]), "a\nhello.txt\n");
    let long = tarn(&["ls", "-l", &u("/top")]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 2, "{long}");
    assert!(lines[0].starts_with("drwxr-xr-x "), "{long}");
    assert!(lines[0].ends_with(" a"), "{long}");
    let want = "-rw-r----- 1 1000 1000   12 Jan  2  2020 hello.txt";
    assert_eq!(lines[1], want, "{long}");
    let rec = tarn(&["ls", "-R", &u("/top")]);
    let p = s.port();
    assert_eq!(
        rec,
        format!(
            "nfs://127.0.0.1:{p}/top:\na\nhello.txt\n\nnfs://127.0.0.1:{p}/top/a:\nb\n\n\
             nfs://127.0.0.1:{p}/top/a/b:\nc\n\nnfs://127.0.0.1:{p}/top/a/b/c:\n"
        )
    );
    // ls of a file lists the file.
    let one = tarn(&["ls", "-l", &u("/top/hello.txt")]);
    assert!(
        one.starts_with("-rw-r----- 1 1000 1000 12 Jan  2  2020 nfs://"),
        "{one}"
    );

    // stat
    let st = tarn(&["stat", &u("/top/hello.txt")]);
    assert_hello_stat(&st, "Group: 1000");
    let fileid = std::fs::metadata(s.export.join("top/hello.txt"))
        .unwrap()
        .ino();
    assert!(st.contains(&format!("FileID: {fileid} ")), "{st}");
    assert!(tarn(&["stat", &u("/top")]).contains("Type: directory"));

    // mv: rename, then into a directory
    tarn(&["mv", &u("/top/hello.txt"), &u("/top/renamed.txt")]);
    assert!(s.export.join("top/renamed.txt").is_file());
    assert!(!s.export.join("top/hello.txt").exists());
    tarn(&["mv", &u("/top/renamed.txt"), &u("/top/a")]);
    assert_eq!(
        std::fs::read(s.export.join("top/a/renamed.txt")).unwrap(),
        b"hello, tarn\n"
    );
    let e = fails(&["mv", &u("/top/gone"), &u("/top/x")]);
    assert!(
        e.contains("no such file or directory (NFS4ERR_NOENT)"),
        "{e}"
    );
    let e = fails(&["mv", &u("/top/a"), "nfs://127.0.0.2/top/b"]);
    assert!(e.contains("mv works within one server"), "{e}");

    // df: the export's file system, as statvfs sees it
    let df = tarn(&["df", &u("/")]);
    let rows: Vec<&str> = df.lines().collect();
    assert!(
        rows[0].starts_with("Filesystem") && rows[0].contains("1K-blocks"),
        "{df}"
    );
    let cols: Vec<&str> = rows[1].split_whitespace().collect();
    assert_eq!(cols[0], format!("nfs://127.0.0.1:{p}/"));
    let total: u64 = cols[1].parse().unwrap();
    let avail: u64 = cols[3].parse().unwrap();
    assert!(total > 0 && avail <= total, "{df}");
    assert!(cols[4].ends_with('%'), "{df}");

    // rm, rm -r
    let e = fails(&["rm", &u("/top")]);
    assert!(e.contains("is a directory (NFS4ERR_ISDIR); use -r"), "{e}");
    tarn(&["rm", &u("/top/a/renamed.txt")]);
    assert!(!s.export.join("top/a/renamed.txt").exists());
    tarn(&["rm", "-r", &u("/top")]);
    assert!(!s.export.join("top").exists());
    assert_eq!(tarn(&["ls", &u("/")]), "");
}

#[test]
fn errors_name_the_path_and_the_status() {
    let s = TestServer::start();
    let p = s.port();
    let missing = url(&s, "/nope/file");
    let shown = format!("nfs://127.0.0.1:{p}/nope/file");
    let noent = format!("tarn: {shown}: no such file or directory (NFS4ERR_NOENT)\n");
    for args in [
        vec!["cat", &missing],
        vec!["stat", &missing],
        vec!["ls", &missing],
        vec!["rm", &missing],
    ] {
        assert_eq!(fails(&args), noent, "{args:?}");
    }
    let local = s.state.join("out");
    let e = fails(&["cp", &missing, local.to_str().unwrap()]);
    assert_eq!(e, noent);
    assert!(!local.exists());
    let e = fails(&["cp", "/no/such/local", &url(&s, "/x")]);
    assert!(
        e.contains("/no/such/local: no such file or directory"),
        "{e}"
    );

    let e = fails(&["ls", &format!("nfs://127.0.0.1:{p}/?vers=4.3")]);
    assert!(e.contains("unknown NFS version vers=4.3"), "{e}");
    // NFSv4.0 errors name NFSv4 statuses.
    let e = fails(&["cat", &(missing.clone() + "&vers=4.0")]);
    assert_eq!(e, noent);
    // NFSv3 errors name NFSv3 statuses.
    let e = fails(&["cat", &(missing.clone() + "&vers=3")]);
    assert_eq!(
        e,
        format!("tarn: {shown}: no such file or directory (NFS3ERR_NOENT)\n")
    );
    // Kerberos without a ticket: the server and the reason are named.
    let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["ls", &format!("nfs://127.0.0.1:{p}/?sec=krb5p")])
        .env(
            "KRB5CCNAME",
            format!("FILE:{}", s.state.join("no-cc").display()),
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.starts_with(&format!("tarn: nfs://127.0.0.1:{p}: cannot connect: ")),
        "{e}"
    );
    assert!(e.contains("credentials"), "{e}");
    let e = fails(&["ls", &format!("nfs://127.0.0.1:{p}/?colour=blue")]);
    assert!(e.contains("unknown query key \"colour\""), "{e}");
    let e = fails(&["ls", "nfs://[::1/x"]);
    assert!(e.starts_with("tarn: nfs://[::1/x: "), "{e}");
    let e = fails(&["cp", "/a", "/b"]);
    assert!(e.contains("one side must be an nfs:// URL"), "{e}");

    // Nobody listening: the error says where.
    let dead = free_port();
    let e = fails(&["ls", &format!("nfs://127.0.0.1:{dead}/")]);
    assert!(
        e.contains(&format!("nfs://127.0.0.1:{dead}: cannot connect")),
        "{e}"
    );
}

#[test]
fn v3_namespace_commands_and_links() {
    let s = TestServer::start();
    let u = |p: &str| url3(&s, p);
    tarn(&["mkdir", "-p", &u("/top/a/b")]);
    let e = fails(&["mkdir", &u("/top")]);
    assert!(e.contains("/top: file exists (NFS3ERR_EXIST)"), "{e}");
    let f = s.state.join("hello.txt");
    std::fs::write(&f, b"hello, tarn\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&f, 1_577_934_000, 0);
    tarn(&["cp", "-q", f.to_str().unwrap(), &u("/top/hello.txt")]);
    assert_eq!(tarn(&["cat", &u("/top/hello.txt")]), "hello, tarn\n");

    // ln: a hard link, a symbolic link; ls -l shows both.
    tarn(&["ln", &u("/top/hello.txt"), &u("/top/hard")]);
    tarn(&["ln", "-s", "hello.txt", &u("/top/soft")]);
    // Into a directory: the target's name.
    tarn(&["ln", "-s", "../hello.txt", &u("/top/a")]);
    assert_eq!(
        std::fs::read_link(s.export.join("top/a/hello.txt")).unwrap(),
        Path::new("../hello.txt")
    );
    let on_disk = |p: &str| std::fs::metadata(s.export.join(p)).unwrap().ino();
    assert_eq!(on_disk("top/hard"), on_disk("top/hello.txt"));
    let long = tarn(&["ls", "-l", &u("/top")]);
    let lines: Vec<&str> = long.lines().collect();
    assert_eq!(lines.len(), 4, "{long}");
    assert!(lines[0].starts_with("drwxr-xr-x "), "{long}");
    assert_eq!(
        lines[1], "-rw-r----- 2 1000 1000   12 Jan  2  2020 hard",
        "{long}"
    );
    assert!(lines[3].starts_with("lrwxrwxrwx 1 1000 1000 "), "{long}");
    assert!(lines[3].ends_with(" soft -> hello.txt"), "{long}");
    let one = tarn(&["ls", "-l", &u("/top/soft")]);
    assert!(one.trim_end().ends_with("/top/soft -> hello.txt"), "{one}");
    // The same seen over NFSv4.
    let long4 = tarn(&["ls", "-l", &url(&s, "/top")]);
    assert!(long4.contains(" soft -> hello.txt"), "{long4}");
    tarn(&["ln", "-s", "x", &url(&s, "/top/soft4")]);
    assert_eq!(
        std::fs::read_link(s.export.join("top/soft4")).unwrap(),
        Path::new("x")
    );
    tarn(&["ln", &url(&s, "/top/hello.txt"), &url(&s, "/top/hard4")]);
    assert_eq!(on_disk("top/hard4"), on_disk("top/hello.txt"));
    let e = fails(&["ln", &u("/top/a"), &u("/top/dirlink")]);
    assert!(e.contains("hard link not allowed for directory"), "{e}");
    let e = fails(&["ln", "-s", "x", &u("/top/soft")]);
    assert!(e.contains("/top/soft: file exists (NFS3ERR_EXIST)"), "{e}");

    // stat of a link names its target; of a file its attributes.
    let st = tarn(&["stat", &u("/top/soft")]);
    assert!(st.contains("Type: symbolic link"), "{st}");
    assert!(st.contains("/top/soft -> hello.txt"), "{st}");
    let st = tarn(&["stat", &u("/top/hello.txt")]);
    assert_hello_stat(&st, "Links: 3");

    // A link in a tree copied down and back up stays a link.
    let back = s.state.join("back");
    tarn(&["cp", "-r", "-q", &u("/top"), back.to_str().unwrap()]);
    assert_eq!(
        std::fs::read_link(back.join("soft")).unwrap(),
        Path::new("hello.txt")
    );
    assert_eq!(std::fs::read(back.join("hard")).unwrap(), b"hello, tarn\n");

    // mv, df, rm -r
    tarn(&["mv", &u("/top/hard"), &u("/top/a")]);
    assert!(s.export.join("top/a/hard").is_file());
    let df = tarn(&["df", &u("/")]);
    let cols: Vec<&str> = df.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(cols[1].parse::<u64>().unwrap() > 0, "{df}");
    let e = fails(&["rm", &u("/top")]);
    assert!(e.contains("is a directory (NFS3ERR_ISDIR); use -r"), "{e}");
    tarn(&["rm", "-r", &u("/top")]);
    assert!(!s.export.join("top").exists());
    assert_eq!(tarn(&["ls", &u("/")]), "");
}

/// Two `tarn lock` processes on one file: the second fails at once with
/// -n while the first holds the lock, waits without -n, and takes a
/// shared lock next to another shared one.
fn two_lockers(vers: &str) {
    let s = TestServer::start_with(&["--grace", "0"]);
    let u = format!("{}&vers={vers}", url(&s, "/lockfile"));
    let bin = env!("CARGO_BIN_EXE_tarn");
    let marker = s.state.join("held");
    let mut first = Command::new(bin)
        .args(["lock", &u, "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 3", marker.display()))
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "first lock not taken"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Held: -n fails naming the file, the command does not run.
    let out = tarn_output(&["lock", "-n", &u, "--", "sh", "-c", "exit 9"]);
    assert_eq!(out.status.code(), Some(1), "vers={vers}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("/lockfile: locked by someone else"), "{e}");
    // The first lock covers the whole file: any range conflicts.
    let out = tarn_output(&[
        "lock", "-n", "--offset", "0", "--len", "10", &u, "--", "true",
    ]);
    assert!(
        !out.status.success(),
        "the first lock covers the whole file"
    );
    // Waiting: granted once the first is done; the command's status is ours.
    let waited = std::time::Instant::now();
    let out = tarn_output(&["lock", &u, "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "vers={vers}: {out:?}");
    assert!(first.wait().unwrap().success());
    assert!(
        waited.elapsed() > Duration::from_millis(500),
        "it waited for the first lock"
    );
    // Shared with shared: both granted.
    let shared = tarn_output(&[
        "lock", "-s", &u, "--", bin, "lock", "-s", "-n", &u, "--", "echo", "both",
    ]);
    assert!(shared.status.success(), "{shared:?}");
    assert_eq!(String::from_utf8_lossy(&shared.stdout), "both\n");
    // A command that cannot be run: 127 as from a shell, the lock released.
    let out = tarn_output(&["lock", &u, "--", "/no/such/command"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let out = tarn_output(&["lock", "-n", &u, "--", "true"]);
    assert!(out.status.success(), "released after the failed command");
    // Exclusive ranges that do not overlap: both granted.
    let ranges = tarn_output(&[
        "lock", "--offset", "0", "--len", "10", &u, "--", bin, "lock", "-n", "--offset", "10",
        "--len", "10", &u, "--", "true",
    ]);
    assert!(ranges.status.success(), "{ranges:?}");
}

#[test]
fn lock_v3_two_processes() {
    two_lockers("3");
}

#[test]
fn lock_v41_two_processes() {
    two_lockers("4.1");
}

#[test]
fn lock_v40_two_processes() {
    two_lockers("4.0");
}

/// A relay on a new local port to `server`, where `answer` may answer a
/// call record itself (the reply record) instead of passing it on.
fn relay(server: std::net::SocketAddr, answer: fn(&[u8]) -> Option<bytes::BytesMut>) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            relay_one(c, server, answer);
        }
    });
    port
}

/// Relays `client`'s calls to `server` and the replies back, as [`relay`].
fn relay_one(
    client: std::net::TcpStream,
    server: std::net::SocketAddr,
    answer: fn(&[u8]) -> Option<bytes::BytesMut>,
) {
    use std::io::Write;
    let mut srv = std::net::TcpStream::connect(server).unwrap();
    let to_client = std::sync::Arc::new(std::sync::Mutex::new(client.try_clone().unwrap()));
    let (mut from_srv, back) = (srv.try_clone().unwrap(), to_client.clone());
    std::thread::spawn(move || {
        while let Some(rec) = next_record(&mut from_srv) {
            if back.lock().unwrap().write_all(&framed(&rec)).is_err() {
                return;
            }
        }
    });
    let mut from_client = client;
    std::thread::spawn(move || {
        while let Some(rec) = next_record(&mut from_client) {
            let sent = match answer(&rec) {
                Some(out) => to_client.lock().unwrap().write_all(&out),
                None => srv.write_all(&framed(&rec)),
            };
            if sent.is_err() {
                return;
            }
        }
        let _ = srv.shutdown(std::net::Shutdown::Both);
    });
}

/// Answers NFSv4 calls with PROG_MISMATCH (versions 3 to 3), as a server
/// without NFSv4 does.
fn without_v4(rec: &[u8]) -> Option<bytes::BytesMut> {
    let word = |i: usize| u32::from_be_bytes(rec[i..i + 4].try_into().unwrap());
    if !(rec.len() >= 20 && word(4) == 0 && word(12) == 100003 && word(16) == 4) {
        return None;
    }
    let mut out = bytes::BytesMut::new();
    rpc::record::begin(&mut out);
    rpc::msg::prog_mismatch(word(0), 3, 3, &mut out);
    rpc::record::finish(&mut out);
    Some(out)
}

/// `tarn cp` of a local file holding `text` to `/f` on `s` through the
/// relay on `port`, then `tarn cat` of it; what makes the relay's URLs.
fn cp_and_cat_through(s: &TestServer, port: u16, text: &str) -> impl Fn(&str) -> String {
    let u = move |p: &str| format!("nfs://127.0.0.1:{port}{p}?uid=1000&gid=1000");
    let f = s.state.join("f");
    std::fs::write(&f, text).unwrap();
    tarn(&["cp", "-q", f.to_str().unwrap(), &u("/f")]);
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), text.as_bytes());
    assert_eq!(tarn(&["cat", &u("/f")]), text);
    u
}

/// No vers=: NFSv4.2, then 4.1, then NFSv3, as mount.nfs tries them. A
/// server that answers NFSv4 with PROG_MISMATCH (a relay in front of
/// tarn serve) is used over NFSv3; asked for 4.1, it is an error.
#[test]
fn without_vers_a_server_without_nfsv4_is_used_over_nfsv3() {
    let s = TestServer::start();
    let port = relay(s.addr, without_v4);
    let u = cp_and_cat_through(&s, port, "over v3\n");
    let e = fails(&["ls", &(u("/") + "&vers=4.1")]);
    assert!(e.contains(&format!("nfs://127.0.0.1:{port}")), "{e}");
    assert!(e.contains("it speaks versions 3 to 3"), "{e}");
}

/// Answers as a server that speaks NFSv4.0 only: a COMPOUND of another
/// minor version gets NFS4ERR_MINOR_VERS_MISMATCH, NFSv3 and MOUNT get
/// PROG_MISMATCH.
fn v40_only(rec: &[u8]) -> Option<bytes::BytesMut> {
    let word = |i: usize| {
        rec.get(i..i + 4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    };
    let pad = |n: u32| (n as usize).div_ceil(4) * 4;
    let (xid, prog, vers, proc_) = (word(0)?, word(12)?, word(16)?, word(20)?);
    let mut out = bytes::BytesMut::new();
    rpc::record::begin(&mut out);
    if (prog == 100003 && vers == 3) || prog == 100005 {
        rpc::msg::prog_mismatch(xid, 4, 4, &mut out);
    } else if prog == 100003 && vers == 4 && proc_ == 1 {
        // Past the credential and the verifier: the tag, then the minor version.
        let verf = 32 + pad(word(28)?);
        let args = verf + 8 + pad(word(verf + 4)?);
        let minor = word(args + 4 + pad(word(args)?))?;
        if minor == 0 {
            return None;
        }
        rpc::msg::success_header(xid, &mut out);
        out.extend_from_slice(
            &(proto::nfs4::Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH as u32).to_be_bytes(),
        );
        out.extend_from_slice(&[0; 8]); // empty tag, no results
    } else {
        return None;
    }
    rpc::record::finish(&mut out);
    Some(out)
}

/// No vers= and vers=4: 4.2 and 4.1 refused with
/// NFS4ERR_MINOR_VERS_MISMATCH, the tools use NFSv4.0 (NFSv3 is refused
/// too, so nothing else could have worked); vers=4.1 is an error.
#[test]
fn a_server_with_nfsv4_0_only_is_used_over_4_0() {
    let s = TestServer::start_with(&["--grace", "0"]);
    let port = relay(s.addr, v40_only);
    let u = cp_and_cat_through(&s, port, "over 4.0\n");
    assert_eq!(tarn(&["cat", &(u("/f") + "&vers=4")]), "over 4.0\n");
    let e = fails(&["ls", &(u("/") + "&vers=4.1")]);
    assert!(e.contains("NFS4ERR_MINOR_VERS_MISMATCH"), "{e}");
}
