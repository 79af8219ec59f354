//! The client tools against NFS-Ganesha (Debian's nfs-ganesha +
//! nfs-ganesha-vfs), a server nobody here wrote, started on loopback in
//! private namespaces by scripts/ganesha-run.sh: a 20 MiB file and a tree
//! (nested and empty directories, an empty file, names with spaces and
//! Unicode, assorted modes, a 1 MiB file) copied there and back (checksums,
//! `diff -r`, modes, mtimes), and ls -l, stat, mkdir -p, mv, rm -r, df,
//! over NFSv4.1, NFSv4.0 and NFSv3.
//!
//!   TARN_GANESHA=1 cargo test -p tarn --test tools_ganesha -- --nocapture
//!
//! Needs root (scripts/test.sh runs it as its own stage). Without
//! TARN_GANESHA=1 the tests only print how to run them. Each test re-runs
//! its own binary inside the namespaces (the tools must share Ganesha's
//! network namespace), marked by TARN_GANESHA_ADDR.

mod common;
use common::*;
use rand::{Rng, RngCore, SeedableRng};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use test_support::ganesha::inside_ganesha;

#[test]
fn tools_ganesha_nfs41() {
    against_ganesha("tools_ganesha_nfs41", "4.1");
}

/// MOUNT found through the namespace's rpcbind, as on any Ganesha host.
#[test]
fn tools_ganesha_nfs3() {
    against_ganesha("tools_ganesha_nfs3", "3");
}

#[test]
fn tools_ganesha_nfs40() {
    against_ganesha("tools_ganesha_nfs40", "4.0");
}

/// Inside Ganesha's namespaces (common::ganesha): the scenario.
fn against_ganesha(name: &str, vers: &str) {
    inside_ganesha(name, |addr, export, dir| scenario(addr, export, dir, vers));
}

/// Names a user may well have: spaces, Unicode, shell and URL specials
/// (inside a tree they are names, never parsed as URLs).
const ODD: &[&str] = &[
    "with space",
    "ünïcødé 日本語",
    "100% #1?x=y&z",
    "-dash",
    ".hidden",
];

/// A tree of 60 files: nested directories (some with odd names), an
/// empty directory, an empty file, a 1 MiB file and one just over, odd file
/// names, assorted modes; directory modes and mtimes of their own.
fn make_tree(root: &Path) -> usize {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let dirs = ["", "a", "a/b", "a/b/c d", "ünï", "ünï/with space", "empty"];
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let n = 60;
    for i in 0..n {
        let dir = dirs[i % (dirs.len() - 1)]; // none in "empty"
        let name = match ODD.get(i / 7) {
            Some(odd) if i % 7 == 3 => format!("{odd} {i}"),
            _ => format!("f{i:02}"),
        };
        let len = match i {
            0 => 0,
            1 => 1 << 20,
            2 => (1 << 20) + 1,
            _ => rng.gen_range(1..40_000),
        };
        let mut b = vec![0u8; len];
        rng.fill_bytes(&mut b);
        tree_file(&root.join(dir).join(name), i, &b);
    }
    tree_dir_times(root, &dirs);
    n
}

fn diff_r(a: &Path, b: &Path) {
    run_ok(
        Command::new("diff").arg("-r").arg(a).arg(b),
        &format!("diff -r {} {}", a.display(), b.display()),
    );
}

/// The tools against the server at `addr`, below `export` (its pseudo
/// path), which is `dir` on this machine's disk.
fn scenario(addr: &str, export: &str, dir: &Path, vers: &str) {
    let tag = format!("v{}", vers.replace('.', ""));
    let url = |p: &str| {
        format!(
            "nfs://{addr}{export}/{tag}{p}?vers={vers}&sec=sys&uid=1000&gid=1000",
            p = p
                .replace('%', "%25")
                .replace(' ', "%20")
                .replace('?', "%3F")
                .replace('#', "%23")
        )
    };
    let on_server = dir.join(&tag);
    let tmp = test_support::var_tmp("tarn-tools-ganesha-");
    let local = tmp.path();

    // mkdir, mkdir -p
    tarn(&["mkdir", &url("")]);
    tarn(&["mkdir", "-p", &url("/p/q/r")]);
    tarn(&["mkdir", "-p", &url("/p/q/r")]);
    assert!(on_server.join("p/q/r").is_dir());
    let out = tarn_output(&["mkdir", &url("/p")]);
    assert!(!out.status.success(), "mkdir of an existing directory");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("/p: file exists"), "{e}");

    // A 20 MiB file there and back.
    let src = local.join("big.bin");
    let back = local.join("big.back");
    let mut data = vec![0u8; 20 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_mtime(&src, 1_600_000_000, 123_456_789);
    let up = tarn(&["cp", src.to_str().unwrap(), &url("/big.bin")]);
    println!("NFSv{vers} local -> Ganesha: {}", up.trim());
    let there = on_server.join("big.bin");
    assert_eq!(sha256_file(&there), sha256_file(&src), "on Ganesha's disk");
    assert_eq!(mode(&there), 0o640);
    assert_eq!(mtime(&there), (1_600_000_000, 123_456_789));
    assert_eq!(std::fs::metadata(&there).unwrap().uid(), 1000);
    let down = tarn(&["cp", &url("/big.bin"), back.to_str().unwrap()]);
    println!("NFSv{vers} Ganesha -> local: {}", down.trim());
    assert_eq!(sha256_file(&back), sha256_file(&src));
    assert_eq!(mode(&back), 0o640);
    assert_eq!(mtime(&back), (1_600_000_000, 123_456_789));
    let out = tarn_output(&["cat", &url("/big.bin")]);
    assert!(out.status.success());
    assert!(out.stdout == data, "cat output differs");
    // A single file with an odd name, by a %-escaped URL.
    let odd = local.join("odd");
    std::fs::write(&odd, b"odd\n").unwrap();
    tarn(&["cp", "-q", odd.to_str().unwrap(), &url("/100% #1?x=y")]);
    assert_eq!(
        std::fs::read(on_server.join("100% #1?x=y")).unwrap(),
        b"odd\n"
    );
    assert_eq!(tarn(&["cat", &url("/100% #1?x=y")]), "odd\n");

    // A tree there and back.
    let tree = local.join("tree");
    let n = make_tree(&tree);
    let want = snapshot(&tree);
    let up = tarn(&["cp", "-r", tree.to_str().unwrap(), &url("/tree")]);
    println!("NFSv{vers} tree local -> Ganesha: {}", up.trim());
    assert!(up.starts_with(&format!("{n} files, ")), "{up}");
    diff_r(&tree, &on_server.join("tree"));
    assert_eq!(snapshot(&on_server.join("tree")), want, "tree on Ganesha");
    let tback = local.join("tree.back");
    let down = tarn(&["cp", "-r", &url("/tree"), tback.to_str().unwrap()]);
    println!("NFSv{vers} tree Ganesha -> local: {}", down.trim());
    diff_r(&tree, &tback);
    assert_eq!(snapshot(&tback), want, "tree copied back");
    assert_eq!(mode(&tback), mode(&tree));

    // ls, ls -l, ls -R
    let names = tarn(&["ls", &url("/tree/ünï")]);
    let mut want_names: Vec<String> = std::fs::read_dir(tree.join("ünï"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    want_names.sort();
    assert_eq!(names.lines().collect::<Vec<_>>(), want_names, "{names}");
    let long = tarn(&["ls", "-l", &url("")]);
    let line = long
        .lines()
        .find(|l| l.ends_with(" big.bin"))
        .unwrap_or_else(|| panic!("no big.bin in:\n{long}"));
    // Owners as the server names them: Ganesha maps uid 1000 to
    // user@domain when /etc/passwd knows it (the disk says 1000, above).
    assert!(line.starts_with("-rw-r----- 1 "), "{long}");
    assert!(
        line.contains(&format!(" {} Sep 13  2020 big.bin", 20 << 20)),
        "{long}"
    );
    assert!(
        long.lines()
            .any(|l| l.starts_with("drwxr-x") && l.ends_with(" tree")),
        "{long}"
    );
    let rec = tarn(&["ls", "-R", "-a", &url("/tree")]);
    for (rel, ..) in &want {
        let name = rel.rsplit('/').next().unwrap();
        assert!(rec.lines().any(|l| l == name), "ls -R lacks {rel}:\n{rec}");
    }

    // stat
    let st = tarn(&["stat", &url("/big.bin")]);
    for want in [
        "Type: regular file",
        &format!("Size: {} ", 20 << 20),
        "Mode: 0640 (-rw-r-----)",
        "Owner: ",
        "Group: ",
        "Modify: 2020-09-13 12:26:40.123456789 +0000",
    ] {
        assert!(st.contains(want), "stat lacks {want:?}:\n{st}");
    }
    let ino = std::fs::metadata(&there).unwrap().ino();
    // FSAL VFS hands out the inode number as the fileid.
    assert!(st.contains(&format!("FileID: {ino} ")), "{st}");
    assert!(tarn(&["stat", &url("/tree")]).contains("Type: directory"));

    // mv: rename, then into a directory
    tarn(&["mv", &url("/big.bin"), &url("/renamed.bin")]);
    assert!(on_server.join("renamed.bin").is_file() && !there.exists());
    tarn(&["mv", &url("/renamed.bin"), &url("/p/q")]);
    assert_eq!(
        sha256_file(&on_server.join("p/q/renamed.bin")),
        sha256_file(&src)
    );

    // df: the export's file system
    let df = tarn(&["df", &url("")]);
    let rows: Vec<&str> = df.lines().collect();
    assert!(rows[0].starts_with("Filesystem"), "{df}");
    let cols: Vec<&str> = rows[1].split_whitespace().collect();
    let total: u64 = cols[1].parse().unwrap();
    let avail: u64 = cols[3].parse().unwrap();
    assert!(total > 0 && avail <= total, "{df}");

    // rm, rm -r
    let out = tarn_output(&["rm", &url("/p")]);
    assert!(!out.status.success(), "rm of a directory without -r");
    tarn(&["rm", &url("/p/q/renamed.bin")]);
    assert!(!on_server.join("p/q/renamed.bin").exists());
    tarn(&["rm", "-r", &url("/tree")]);
    tarn(&["rm", "-r", &url("/p")]);
    tarn(&["rm", &url("/100% #1?x=y")]);
    assert_eq!(tarn(&["ls", "-a", &url("")]), "");
    assert_eq!(std::fs::read_dir(&on_server).unwrap().count(), 0);
    tarn(&["rm", "-r", &url("")]);
    assert!(!on_server.exists());
}
