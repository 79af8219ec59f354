//! The client tools (`tarn ls|cat|stat|df|mkdir|rm|mv|cp`) against a real
//! `tarn serve` on loopback, NFSv4.1/4.2 with AUTH_SYS: a 20 MiB file and a
//! tree of 200 files copied there and back (checksums, modes, mtimes), the
//! namespace commands, and what the user sees when something is wrong.
//!
//!   cargo test -p tarn --test tools -- --nocapture   (prints throughput)

mod common;
use common::*;
use rand::{Rng, RngCore, SeedableRng};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Acting as uid/gid 1000 (not squashed root), so owners are known.
fn url(s: &TestServer, path: &str) -> String {
    format!(
        "nfs://127.0.0.1:{}/{}?uid=1000&gid=1000",
        s.port(),
        path.trim_start_matches('/')
    )
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

fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    std::fs::File::open(p)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

fn mtime(p: &Path) -> (i64, i64) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn cp_20_mib_there_and_back_with_equal_checksums() {
    let s = TestServer::start();
    let src = s.state.join("big.bin");
    let back = s.state.join("back.bin");
    let mut data = vec![0u8; 20 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&src, 1_600_000_000, 123_456_789);

    let up = tarn(&["cp", src.to_str().unwrap(), &url(&s, "/big.bin")]);
    println!("local -> NFS: {}", up.trim());
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

    let down = tarn(&["cp", &url(&s, "/big.bin"), back.to_str().unwrap()]);
    println!("NFS -> local: {}", down.trim());
    assert_eq!(sha256_file(&back), sha256_file(&src));
    assert_eq!(mode(&back), 0o640);
    assert_eq!(mtime(&back), (1_600_000_000, 123_456_789));

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

/// A tree: nested directories, 200 files of assorted sizes and modes, and
/// directory modes and mtimes of their own.
fn make_tree(root: &Path) -> Vec<PathBuf> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let dirs = ["", "a", "a/b", "a/b/c", "d", "d/e", "empty"];
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let modes = [0o644, 0o600, 0o755, 0o640, 0o444, 0o700];
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
        std::fs::write(&p, &b).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(modes[i % modes.len()]))
            .unwrap();
        set_mtime(&p, 1_500_000_000 + i as u64 * 1000, (i * 7) as u32);
        files.push(p);
    }
    for (i, d) in dirs.iter().enumerate().rev() {
        let p = root.join(d);
        std::fs::set_permissions(
            &p,
            std::fs::Permissions::from_mode(0o750 + (i as u32 % 2) * 5),
        )
        .unwrap();
        set_mtime(&p, 1_400_000_000 + i as u64, 0);
    }
    files
}

/// Relative paths under `root`, sorted, with each one's (mode, mtime,
/// contents' sha or "dir").
fn snapshot(root: &Path) -> Vec<(String, u32, (i64, i64), String)> {
    let mut out = vec![];
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let what = if p.is_dir() {
                todo.push(p.clone());
                "dir".to_string()
            } else {
                sha256_file(&p)
            };
            out.push((rel, mode(&p), mtime(&p), what));
        }
    }
    out.sort();
    out
}

#[test]
fn cp_r_tree_there_and_back_keeps_contents_modes_and_times() {
    let s = TestServer::start();
    let src = s.state.join("tree");
    let files = make_tree(&src);
    assert_eq!(files.len(), 200);
    let want = snapshot(&src);
    // Links inside a tree are not followed (and not copied, for now).
    let a_time = mtime(&src.join("a"));
    std::os::unix::fs::symlink("f000", src.join("a/link")).unwrap();
    set_mtime(&src.join("a"), a_time.0 as u64, a_time.1 as u32);

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
    for want in [
        "Type: regular file",
        "Size: 12 ",
        "Mode: 0640 (-rw-r-----)",
        "Owner: 1000 ",
        "Group: 1000",
        "Modify: 2020-01-02 03:00:00.000000000 +0000",
    ] {
        assert!(st.contains(want), "stat lacks {want:?}:\n{st}");
    }
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

    let e = fails(&["ls", &format!("nfs://127.0.0.1:{p}/?vers=3")]);
    assert!(
        e.contains("vers=3 is not supported by the tools yet"),
        "{e}"
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
