//! `tarn mount` end to end: a real `tarn serve`, the export mounted through
//! FUSE, and ordinary programs (cp -r, diff -r, ln, mv, truncate, chmod,
//! fio with verify, python fcntl locks from two processes) working on the
//! mount, over NFSv3, NFSv4.0, NFSv4.1 and NFSv4.2, with sec=krb5p (a test
//! KDC), and against NFS-Ganesha (NFSv3 and NFSv4.1, with TARN_GANESHA=1
//! as root). Also the attribute cache (a second stat pass within actimeo
//! sends no GETATTR; noac sends one per stat, counted by the server),
//! close-to-open between two mounts, and st_ino being the server's fileid.
//!
//! Skipped, with a message, where /dev/fuse or fusermount3 is missing.
//! Every mount is undone and every process killed by PID, even on failure
//! (the Drop of [`Mounted`] and of the server).

mod common;

use common::*;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};
use test_support::fuse::*;
use test_support::ganesha::inside_ganesha;

fn sh(dir: &Path, script: &str) {
    run_ok(
        Command::new("sh").arg("-ec").arg(script).current_dir(dir),
        script,
    );
}

/// A server without NLM/NFSv4 grace (locks at once), with metrics.
fn server() -> (TestServer, String) {
    start_with_metrics(&["--grace", "0.05"])
}

/// [`server`], or None where FUSE is not usable (the test then passes).
fn fuse_server() -> Option<(TestServer, String)> {
    fuse_usable().then(server)
}

/// `python3 -c script file`, its stdin and stdout piped: the process, the
/// reader of its output and the first line it printed.
fn python_on(
    script: &str,
    file: &Path,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
    String,
) {
    let mut w = Command::new("python3")
        .args(["-c", script])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(w.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    (w, out, line)
}

/// Ends a [`python_on`] script's wait for a line on its stdin (which is
/// then closed) and returns the next line it prints.
fn release(
    w: &mut std::process::Child,
    out: &mut std::io::BufReader<std::process::ChildStdout>,
) -> String {
    w.stdin.take().unwrap().write_all(b"\n").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line
}

/// Write delegations the server at `maddr` (metrics) granted.
fn write_delegations(maddr: &str) -> f64 {
    metric(maddr, "tarn_delegations_granted_total", "type", "write")
}

/// Mount `m` was recalled and returned a delegation (its `--stats`).
fn assert_returned_on_recall(m: &Mounted) {
    let st = mount_status(m, "delegations_returned", 1);
    assert!(st["recalls"].as_u64().unwrap() >= 1, "{st}");
    assert!(st["delegations_returned"].as_u64().unwrap() >= 1, "{st}");
}

/// Two NFSv4.1 mounts (`opts` each) of a fresh [`server`]'s export: the
/// server, its metrics address and the mounts; None where FUSE is not
/// usable (the test then passes).
fn two_mounts(opts: &str) -> Option<(TestServer, String, Mounted, Mounted)> {
    let (s, maddr) = fuse_server()?;
    let url = mount_url(&s, "4.1");
    let a = Mounted::new(&url, opts);
    let b = Mounted::new(&url, opts);
    Some((s, maddr, a, b))
}

const LOCKERS: &str = r#"
import fcntl, os, sys, time
p = sys.argv[1]
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    fd2 = os.open(p, os.O_RDWR)
    try:
        fcntl.lockf(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os._exit(3)
    except OSError:
        pass
    os.write(w, b"x")
    t = time.time()
    fcntl.lockf(fd2, fcntl.LOCK_EX)
    waited = time.time() - t
    fcntl.lockf(fd2, fcntl.LOCK_UN)
    os._exit(0 if waited > 0.5 else 4)
os.read(r, 1)
time.sleep(1.0)
fcntl.lockf(fd, fcntl.LOCK_UN)
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
"#;

/// fio with verification: random 4 KiB and sequential 128 KiB writes
/// (buffered, fsync at the end) checked by reading back in the same run,
/// then checked again through `fresh` (a mount made afterwards, so its
/// reads come from the server, not this mount's page cache). Skipped with
/// a message without fio (scripts/deps.sh --test installs it).
fn fio_verify(mnt: &Path, fresh: &Path) {
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("SKIP fio step: fio is not installed (Debian's fio)");
        return;
    }
    let jobs: [(&str, &[&str]); 2] = [
        ("rand4k", &["--rw=randwrite", "--bs=4k", "--size=4m"]),
        ("seq128k", &["--rw=write", "--bs=128k", "--size=8m"]),
    ];
    for (dir, verify_only) in [(mnt, false), (fresh, true)] {
        for (name, args) in jobs {
            let mut c = Command::new("timeout");
            c.args(["120", "fio", "--name", name, "--filename"])
                .arg(dir.join(format!("fio-{name}")))
                .args(args)
                .args([
                    "--ioengine=psync",
                    "--direct=0",
                    "--verify=crc32c",
                    "--verify_fatal=1",
                    "--end_fsync=1",
                    "--randseed=17",
                    // No state file left in the working directory.
                    "--verify_state_save=0",
                ])
                .current_dir(dir);
            if verify_only {
                c.arg("--verify_only");
            }
            let out = c.output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && !text.contains("verify: bad"),
                "fio {name} (verify_only={verify_only}): {:?}\n{text}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    sh(mnt, "rm fio-rand4k fio-seq128k");
}

/// The workload against the export mounted at `mnt`, which is `on_server`
/// on this machine's disk; `fresh()` mounts the export again (a mount with
/// nothing cached). `owned`: the mount acts as uid/gid 1000, which may
/// chown to itself (a Kerberos user mapped to nobody may not); `locks`:
/// fcntl locks between two processes (not where the server has no NLM).
fn run_workload(
    mnt: &Path,
    on_server: &Path,
    fresh: impl Fn() -> Mounted,
    owned: bool,
    locks: bool,
) {
    let t = Instant::now();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let chown = if owned {
        "chown 1000:1000 a; test \"$(stat -c %u:%g a)\" = 1000:1000"
    } else {
        "true"
    };
    sh(
        mnt,
        &format!(
            "echo hello > a; test \"$(cat a)\" = hello
             mkdir tree; cp -r {src} tree/src; diff -r {src} tree/src
             ln a hard; test \"$(stat -c %h a)\" = 2
             ln -s a sym; test \"$(readlink sym)\" = a; test \"$(cat sym)\" = hello
             truncate -s 2 a; test \"$(cat hard)\" = he
             truncate -s 100000 a; test \"$(stat -c %s a)\" = 100000
             chmod 640 a; test \"$(stat -c %a hard)\" = 640
             {chown}
             touch -d '2001-02-03 04:05:06' a; test \"$(stat -c %Y a)\" = \"$(date -d '2001-02-03 04:05:06' +%s)\"
             mv a moved; test ! -e a; test -e moved
             mv tree tree2; diff -r {src} tree2/src
             rm moved hard sym; rm -r tree2
             test -z \"$(ls -A)\"
             df . >/dev/null",
            src = src.display()
        ),
    );
    // The server's view matches.
    sh(
        mnt,
        "head -c 5000000 /dev/urandom > big; cp big big2; cmp big big2",
    );
    let a = std::fs::read(mnt.join("big")).unwrap();
    assert_eq!(a, std::fs::read(on_server.join("big2")).unwrap());
    sh(mnt, "rm big big2");
    {
        let f = fresh();
        fio_verify(mnt, &f.dir);
    }
    if locks {
        // Two processes, one exclusive fcntl lock between them.
        std::fs::write(mnt.join("../lockers.py"), LOCKERS).unwrap();
        let out = Command::new("timeout")
            .args(["60", "python3"])
            .arg(mnt.join("../lockers.py"))
            .arg(mnt.join("lockfile"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "locks: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("workload on {}: {:?}", mnt.display(), t.elapsed());
}

fn workload(vers: &str) {
    let Some((s, _)) = fuse_server() else {
        return;
    };
    let url = mount_url(&s, vers);
    let m = Mounted::new(&url, "");
    run_workload(&m.dir, &s.export, || Mounted::new(&url, ""), true, true);
    drop(m);
}

#[test]
fn workload_over_nfsv3() {
    workload("3");
}

#[test]
fn workload_over_nfsv41() {
    workload("4.1");
}

#[test]
fn workload_over_nfsv42() {
    workload("4.2");
}

#[test]
fn workload_over_nfsv40() {
    workload("4.0");
}

/// The workload against NFS-Ganesha (Debian's nfs-ganesha, FSAL VFS),
/// started on loopback in private namespaces by scripts/ganesha-run.sh:
/// `TARN_GANESHA=1 cargo test -p tarn --test fuse_mount ganesha` (as
/// root); otherwise skipped with that hint. Ganesha runs without NLM, so
/// no fcntl locks over NFSv3.
#[test]
fn workload_ganesha_nfs3() {
    against_ganesha("workload_ganesha_nfs3", "3");
}

#[test]
fn workload_ganesha_nfs41() {
    against_ganesha("workload_ganesha_nfs41", "4.1");
}

/// Inside Ganesha's namespaces (common::ganesha): the workload.
fn against_ganesha(name: &str, vers: &str) {
    if std::env::var("TARN_GANESHA_ADDR").is_err() && !fuse_usable() {
        return;
    }
    inside_ganesha(name, |addr, export, dir| {
        assert!(fuse_usable(), "FUSE is needed inside the namespaces too");
        let url = format!("nfs://{addr}{export}?vers={vers}&uid=1000&gid=1000");
        let m = Mounted::new(&url, "");
        run_workload(&m.dir, dir, || Mounted::new(&url, ""), true, vers != "3");
    });
}

/// Through a mount with sec=krb5p (the mounter's credential cache) to a
/// krb5p-only Tarn: files, a tree, fio with verify. The server accepts no
/// other flavor and counts the GSS contexts it made.
#[test]
fn workload_over_krb5p() {
    if !fuse_usable() {
        return;
    }
    if !testkdc::available() {
        eprintln!("SKIP: krb5p through the mount needs the MIT KDC tools (scripts/deps.sh --test)");
        return;
    }
    let _env = testkdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = kdc_with_ticket("fuse", "10m"); // tarn mount inherits KRB5CCNAME and KRB5_CONFIG
    let (_tmp, export, state) = temp_export();
    let maddr = format!("127.0.0.1:{}", free_port());
    let kt = kdc.keytab.display().to_string();
    let s = TestServer::launch(
        &export,
        &state,
        free_port(),
        &["--sec", "krb5p", "--keytab", &kt, "--metrics", &maddr],
        &[],
    );
    // nfs@localhost is the service's name.
    let url = format!("nfs://localhost:{}/?vers=4.1&sec=krb5p", s.port());
    let m = Mounted::new(&url, "");
    run_workload(&m.dir, &export, || Mounted::new(&url, ""), false, false);
    drop(m);
    let contexts = scraped_sum(&maddr, "tarn_gss_contexts_created_total");
    assert!(contexts >= 1.0, "the server made {contexts} GSS contexts");
    let out = tarn_output(&["ls", &format!("nfs://localhost:{}/?sec=sys", s.port())]);
    assert!(!out.status.success(), "the export took sec=sys");
}

/// The sum of a metric's samples (all labels), read line by line
/// (prometheus-parse takes a counter named `..._created` for OpenMetrics'
/// creation-time sample and drops it).
fn scraped_sum(maddr: &str, name: &str) -> f64 {
    metric_sum(&metrics_text(maddr), name).unwrap_or(0.0)
}

/// GETATTR calls the server counted (NFSv3 procedure and NFSv4 operation).
fn getattrs(maddr: &str) -> f64 {
    metric(maddr, "tarn_op_calls_total", "op", "GETATTR")
}

/// The sum of the server's samples of `name` whose label `key` is `value`.
fn metric(maddr: &str, name: &str, key: &str, value: &str) -> f64 {
    let r = metrics_text(maddr);
    let body = r.split_once("\r\n\r\n").unwrap().1;
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    scrape
        .samples
        .iter()
        .filter(|x| x.metric == name && x.labels.get(key) == Some(value))
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

fn stat_all(dir: &Path, n: usize) {
    for i in 0..n {
        std::fs::metadata(dir.join(format!("d/f{i}"))).unwrap();
    }
}

/// FILES files stat'ed twice within actimeo: no GETATTR the second time;
/// with noac every stat asks the server.
fn stat_cache(vers: &str, files: usize) {
    let Some((s, maddr)) = fuse_server() else {
        return;
    };
    std::fs::create_dir(s.export.join("d")).unwrap();
    for i in 0..files {
        std::fs::write(s.export.join(format!("d/f{i}")), b"x").unwrap();
    }
    let url = mount_url(&s, vers);
    // GETATTRs the second of two passes of stat over a mount with `opts`
    // sent (the mount is gone after).
    let second_pass = |opts: &str| {
        let m = Mounted::new(&url, opts);
        stat_all(&m.dir, files);
        let before = getattrs(&maddr);
        stat_all(&m.dir, files);
        getattrs(&maddr) - before
    };
    assert_eq!(
        second_pass("actimeo=600"),
        0.0,
        "second pass within actimeo asked the server"
    );
    let calls = second_pass("noac");
    assert!(
        calls >= files as f64,
        "noac: {calls} GETATTRs for {files} stats"
    );
}

#[test]
fn stat_cache_over_nfsv41() {
    stat_cache("4.1", 2000);
}

#[test]
fn stat_cache_over_nfsv3() {
    stat_cache("3", 2000);
}

/// The stat test at full size (10,000 files): `cargo test --release -- --ignored`.
#[test]
#[ignore]
fn stat_cache_10000_files() {
    stat_cache("4.1", 10_000);
}

/// FILES files opened and read through the mount (the server delegates
/// each to it), then stat'ed twice; the second pass comes after the files'
/// attribute timeout (1 s) has run out, and still sends no GETATTR: the
/// delegations vouch for the cached attributes (the lookups the kernel
/// repeats are LOOKUPs only). Directories keep a long timeout so that only
/// the files' attributes are at stake. Without delegations (`nodeleg`) the
/// same second pass asks the server about every file.
fn stat_with_delegations(files: usize) {
    let Some((s, maddr)) = fuse_server() else {
        return;
    };
    std::fs::create_dir(s.export.join("d")).unwrap();
    for i in 0..files {
        std::fs::write(s.export.join(format!("d/f{i}")), b"x").unwrap();
    }
    let url = mount_url(&s, "4.1");
    let opts = "acregmin=1,acregmax=1,acdirmin=600,acdirmax=600";
    let pass = |m: &Mounted| {
        let granted = metric(&maddr, "tarn_delegations_total", "event", "granted");
        for i in 0..files {
            assert_eq!(std::fs::read(m.path(&format!("d/f{i}"))).unwrap(), b"x");
        }
        let granted = metric(&maddr, "tarn_delegations_total", "event", "granted") - granted;
        stat_all(&m.dir, files);
        std::thread::sleep(Duration::from_millis(1500));
        let before = getattrs(&maddr);
        stat_all(&m.dir, files);
        (granted, getattrs(&maddr) - before)
    };
    {
        let m = Mounted::new(&url, opts);
        let (granted, sent) = pass(&m);
        assert!(
            granted >= files as f64,
            "{granted} delegations for {files} files"
        );
        assert_eq!(sent, 0.0, "second pass under delegations asked the server");
    }
    let m = Mounted::new(&url, &format!("{opts},nodeleg"));
    let (granted, sent) = pass(&m);
    assert_eq!(granted, 0.0, "nodeleg: no back channel, no delegation");
    assert!(
        sent >= files as f64,
        "nodeleg: {sent} GETATTRs for {files} stats after the timeout"
    );
}

#[test]
fn stat_with_delegations_over_nfsv41() {
    stat_with_delegations(300);
}

/// At the issue's size (10,000 files): `cargo test --release -- --ignored`.
#[test]
#[ignore]
fn stat_with_delegations_10000_files() {
    stat_with_delegations(10_000);
}

/// A write delegation recalled while its data is still buffered: mount A
/// creates a file (the server delegates it for writing) and writes to it
/// without closing, so the data sits in A's write buffer, not yet at the
/// server; mount B then opens and reads the file. The server recalls A's
/// delegation, A sends and commits its data and returns the delegation,
/// and B reads the whole of it. The counters show the recall and the
/// DELEGRETURN.
/// `rm -r` of FILES files and a subdirectory: each removal's reply brings
/// the directory's attributes, so stat'ing the directory after each asks
/// the server nothing, and what it shows is what the server has.
fn removals_keep_the_directorys_attributes(vers: &str) {
    use std::os::unix::fs::MetadataExt;
    let Some((s, maddr)) = fuse_server() else {
        return;
    };
    let m = Mounted::new(&mount_url(&s, vers), "actimeo=600");
    let d = m.path("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    for i in 0..50 {
        std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    let before_all = std::fs::metadata(&d).unwrap();
    assert_eq!(before_all.nlink(), 3, "d, d/., d/sub/..");
    std::thread::sleep(Duration::from_millis(20));
    // Round trips: NFSv3 procedures, or NFSv4 COMPOUNDs (whose GETATTR
    // operations ride with the REMOVE).
    let calls = || match vers {
        "3" => scraped_sum(&maddr, "tarn_op_calls_total"),
        _ => metric(&maddr, "tarn_op_calls_total", "op", "COMPOUND"),
    };
    let before = calls();
    for i in 0..50 {
        std::fs::remove_file(d.join(format!("f{i}"))).unwrap();
        std::fs::metadata(&d).unwrap();
    }
    std::fs::remove_dir(d.join("sub")).unwrap();
    let seen = std::fs::metadata(&d).unwrap();
    assert_eq!(
        calls() - before,
        51.0,
        "{vers}: one call per removal, none for the stat after it"
    );
    let truth = std::fs::metadata(s.export.join("d")).unwrap();
    assert_eq!(seen.nlink(), 2, "{vers}: the removed subdirectory's link");
    assert_eq!(
        (seen.mtime(), seen.mtime_nsec()),
        (truth.mtime(), truth.mtime_nsec()),
        "{vers}: the directory's mtime"
    );
    assert!(seen.mtime_nsec() != before_all.mtime_nsec() || seen.mtime() != before_all.mtime());
}

#[test]
fn removals_keep_the_directorys_attributes_over_nfsv41() {
    removals_keep_the_directorys_attributes("4.1");
}

#[test]
fn removals_keep_the_directorys_attributes_over_nfsv3() {
    removals_keep_the_directorys_attributes("3");
}

/// `tar x` of FILES small files: each file's OPEN brings its directory's
/// attributes (the kernel's permission check of the directory before the
/// next lookup asks the server nothing), and its data goes with the times
/// tar sets after it, in one COMPOUND: LOOKUP, OPEN, WRITE+SETATTR and
/// CLOSE per file, what the server has and the mount shows agreeing.
#[test]
fn a_new_files_data_goes_with_its_times_over_nfsv41() {
    use std::os::unix::fs::MetadataExt;
    let Some((s, maddr)) = fuse_server() else {
        return;
    };
    let m = Mounted::new(&mount_url(&s, "4.1"), "actimeo=600");
    let d = m.path("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::metadata(&d).unwrap();
    let calls = || metric(&maddr, "tarn_op_calls_total", "op", "COMPOUND");
    let stamp = |i: u64| UNIX_EPOCH + Duration::from_secs(1_000_000_000 + i);
    let before = calls();
    for i in 0..50u64 {
        let mut f = std::fs::File::create_new(d.join(format!("f{i}"))).unwrap();
        f.write_all(format!("file {i}\n").as_bytes()).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(stamp(i)))
            .unwrap();
        drop(f);
        std::fs::metadata(&d).unwrap();
    }
    // The CLOSEs go as the kernel releases the files, after close(2).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(calls() - before, 200.0, "four calls per file");
    for i in 0..50u64 {
        let on_server = s.export.join(format!("d/f{i}"));
        assert_eq!(
            std::fs::read(&on_server).unwrap(),
            format!("file {i}\n").as_bytes()
        );
        let t = std::fs::metadata(&on_server).unwrap().modified().unwrap();
        assert_eq!(t, stamp(i), "f{i}'s mtime on the server");
        let seen = std::fs::metadata(d.join(format!("f{i}"))).unwrap();
        assert_eq!(
            (seen.len(), seen.modified().unwrap()),
            (7 + (i >= 10) as u64, stamp(i))
        );
    }
    let (seen, truth) = (
        std::fs::metadata(&d).unwrap(),
        std::fs::metadata(s.export.join("d")).unwrap(),
    );
    assert_eq!(
        (seen.mtime(), seen.mtime_nsec(), seen.size()),
        (truth.mtime(), truth.mtime_nsec(), truth.size()),
        "the directory as the server has it"
    );
}

#[test]
fn recall_flushes_buffered_writes() {
    let Some((s, maddr, a, b)) = two_mounts("") else {
        return;
    };
    let writes = write_delegations(&maddr);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    // The writer is a process of its own: a descriptor of the file in this
    // (multi-threaded) test process would be copied into every process
    // another test starts meanwhile, and its close at exec is a close of
    // the file (a FLUSH, which sends the data).
    let (mut w, mut out, line) = python_on(HOLDER, &a.path("f"));
    assert_eq!(line, "written\n");
    assert_eq!(
        write_delegations(&maddr) - writes,
        1.0,
        "a write delegation for the new file"
    );
    // A, under its write delegation, knows the size it wrote.
    assert_eq!(std::fs::metadata(a.path("f")).unwrap().len(), 200_000);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::metadata(s.export.join("f")).unwrap().len(),
        0,
        "the data is still buffered in mount A"
    );
    let returns = metric(&maddr, "tarn_op_calls_total", "op", "DELEGRETURN");
    let t = Instant::now();
    assert_eq!(std::fs::read(b.path("f")).unwrap(), data);
    eprintln!("read through B, recall included: {:?}", t.elapsed());
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), data);
    // The server counts recalls at its lease walk (every lease/4, 22 s by
    // default): the CB_RECALL is counted where it arrived, in mount A.
    assert!(metric(&maddr, "tarn_op_calls_total", "op", "DELEGRETURN") - returns >= 1.0);
    assert_returned_on_recall(&a);
    // A keeps working on the file without its delegation.
    let line = release(&mut w, &mut out);
    assert_eq!(line, "closed\n");
    assert!(w.wait().unwrap().success());
    let mut want = data.clone();
    want.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(s.export.join("f")).unwrap(), want);
    assert_eq!(std::fs::read(b.path("f")).unwrap(), want);
}

/// The recall is answered and the delegation returned while mount A is
/// busy writing the file (a process in a write loop, its WRITEs in flight
/// and the kernel's lock on the inode taken for each write): B's open and
/// read complete while A's writer still runs, and once the writer closes,
/// B reads all it wrote.
#[test]
fn recall_while_the_holder_keeps_writing() {
    let Some((_s, maddr, a, b)) = two_mounts("") else {
        return;
    };
    let writes = write_delegations(&maddr);
    let (mut w, mut out, line) = python_on(STREAMER, &a.path("f"));
    assert_eq!(line, "started\n");
    assert_eq!(write_delegations(&maddr) - writes, 1.0);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let seen = std::fs::read(b.path("f")).unwrap();
    let took = t.elapsed();
    assert!(
        w.try_wait().unwrap().is_none(),
        "the writer ended before B got in"
    );
    eprintln!("B read {} bytes in {took:?} while A wrote", seen.len());
    assert!(took < Duration::from_secs(10), "recall took {took:?}");
    assert_returned_on_recall(&a);
    let line = release(&mut w, &mut out);
    let chunks: usize = line.trim().parse().unwrap();
    assert!(w.wait().unwrap().success());
    let all = std::fs::read(b.path("f")).unwrap();
    assert_eq!(all.len(), chunks * 65536);
    assert!(all.len() > seen.len());
    let chunk: Vec<u8> = (0..65536u32).map(|i| (i % 256) as u8).collect();
    assert!(all.chunks(65536).all(|c| c == &chunk[..]));
}

/// Writes 64 KiB pieces to argv[1] (created), about 64 MB/s, until a line
/// comes on stdin (at most 1 GiB); says "started" after the first, and at
/// the end (after close) the number of pieces.
const STREAMER: &str = r#"
import os, sys, select, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
chunk = bytes(range(256)) * 256
n = 0
while n < 16384:
    m = 0
    while m < len(chunk):
        m += os.write(fd, chunk[m:])
    n += 1
    if n == 1:
        print("started", flush=True)
    if n % 16 == 0:
        if select.select([sys.stdin], [], [], 0)[0]:
            break
        time.sleep(0.015)
os.close(fd)
print(n, flush=True)
"#;

/// Writes 200,000 bytes to argv[1] (created), says "written", waits for a
/// line on stdin, appends "tail", closes, says "closed".
const HOLDER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
data = bytes(i % 253 for i in range(200000))
n = 0
while n < len(data):
    n += os.write(fd, data[n:])
print("written", flush=True)
sys.stdin.readline()
os.write(fd, b"tail")
os.close(fd)
print("closed", flush=True)
"#;

/// st_ino through the mount is the server's fileid (here the export's
/// own inode numbers), the same from a fresh lookup, after GETATTR, from
/// `ls -i` and for a hard link, over NFSv4.1 and NFSv3.
#[test]
fn st_ino_is_the_servers_fileid() {
    use std::os::unix::fs::MetadataExt;
    let Some((s, _)) = fuse_server() else {
        return;
    };
    std::fs::create_dir(s.export.join("d")).unwrap();
    std::fs::write(s.export.join("d/a"), b"a").unwrap();
    std::fs::write(s.export.join("b"), b"b").unwrap();
    std::fs::hard_link(s.export.join("d/a"), s.export.join("link")).unwrap();
    let want = |p: &str| std::fs::metadata(s.export.join(p)).unwrap().ino();
    for vers in ["4.1", "3"] {
        // noac: the second stat asks the server (GETATTR) again.
        for opts in ["actimeo=600", "noac"] {
            let m = Mounted::new(&mount_url(&s, vers), opts);
            for p in ["d", "d/a", "b", "link"] {
                for pass in 0..2 {
                    let got = std::fs::metadata(m.path(p)).unwrap().ino();
                    assert_eq!(got, want(p), "{p} over {vers} ({opts}), stat {pass}");
                }
            }
            let out = Command::new("ls")
                .args(["-i", "-1"])
                .arg(&m.dir)
                .output()
                .unwrap();
            let ls = String::from_utf8_lossy(&out.stdout);
            for p in ["d", "b", "link"] {
                assert!(
                    ls.lines().any(|l| l.trim() == format!("{} {p}", want(p))),
                    "ls -i over {vers}: {ls}"
                );
            }
            assert_eq!(
                std::fs::metadata(&m.dir).unwrap().ino(),
                std::fs::metadata(&s.export).unwrap().ino(),
                "the root"
            );
        }
    }
}

/// Close-to-open: what one mount wrote and closed is read whole through a
/// second mount opened afterwards, even though the second had the old
/// contents cached (same size, within its attribute timeout).
#[test]
fn close_to_open_between_two_mounts() {
    let Some((_s, _, a, b)) = two_mounts("actimeo=600") else {
        return;
    };
    let old = vec![b'o'; 300_000];
    std::fs::write(a.path("f"), &old).unwrap();
    assert_eq!(std::fs::read(b.path("f")).unwrap(), old);
    let new: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(a.path("f"))
            .unwrap();
        f.write_all(&new).unwrap();
    }
    assert_eq!(std::fs::read(b.path("f")).unwrap(), new);
}

/// Two mounts of one export (each its own NFSv4.1 client), names and link
/// counts. What is guaranteed, as on a kernel NFS mount with the default
/// `lookupcache=all`:
/// - open(2) is close-to-open for the name too: a name renamed away or
///   removed by the other mount is ENOENT at once, a new name opens the new
///   file at once, and what the other wrote and closed is read whole;
/// - stat(2) of a cached name (no open) may be answered from the kernel's
///   entry cache until the directory's attribute timeout (acdirmin to
///   acdirmax; 1 s here) has run out, then it sees the change;
/// - nlink after link/unlink: at once in the mount that made the change,
///   in the other at its next open or after the attribute timeout.
#[test]
fn names_and_links_between_two_mounts() {
    use std::os::unix::fs::MetadataExt;
    let Some((_s, _, a, b)) = two_mounts("actimeo=1") else {
        return;
    };
    let gone = |p: &Path| {
        std::fs::File::open(p).map(|_| ()).unwrap_err().kind() == std::io::ErrorKind::NotFound
    };
    std::fs::write(a.path("old"), b"first").unwrap();
    std::fs::write(a.path("doomed"), b"x").unwrap();
    // B caches both names (and the files' attributes and pages).
    assert_eq!(std::fs::read(b.path("old")).unwrap(), b"first");
    assert_eq!(std::fs::read(b.path("doomed")).unwrap(), b"x");

    std::fs::rename(a.path("old"), a.path("new")).unwrap();
    std::fs::remove_file(a.path("doomed")).unwrap();
    let t = Instant::now();
    assert!(gone(&b.path("old")), "B opened the renamed-away name");
    assert!(gone(&b.path("doomed")), "B opened the removed name");
    assert_eq!(std::fs::read(b.path("new")).unwrap(), b"first");
    // Written and closed in A, read whole through B right after.
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(a.path("new"), &data).unwrap();
    assert_eq!(std::fs::read(b.path("new")).unwrap(), data);
    // A name replaced by a rename over it: B opens the new file.
    std::fs::write(a.path("other"), b"replacement").unwrap();
    std::fs::rename(a.path("other"), a.path("new")).unwrap();
    assert_eq!(std::fs::read(b.path("new")).unwrap(), b"replacement");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // stat without open: after the directory's attribute timeout.
    std::thread::sleep(Duration::from_millis(1200));
    assert!(std::fs::metadata(b.path("old")).is_err());
    assert!(std::fs::metadata(b.path("doomed")).is_err());

    // Link counts.
    std::fs::hard_link(a.path("new"), a.path("second")).unwrap();
    assert_eq!(std::fs::metadata(a.path("new")).unwrap().nlink(), 2);
    let f = std::fs::File::open(b.path("new")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 2, "B after open");
    drop(f);
    assert_eq!(std::fs::metadata(b.path("second")).unwrap().nlink(), 2);
    std::fs::remove_file(a.path("new")).unwrap();
    assert_eq!(std::fs::metadata(a.path("second")).unwrap().nlink(), 1);
    let f = std::fs::File::open(b.path("second")).unwrap();
    assert_eq!(f.metadata().unwrap().nlink(), 1, "B after open");
    drop(f);
    assert!(gone(&b.path("new")));
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(std::fs::metadata(b.path("second")).unwrap().nlink(), 1);
}

/// Without uid= in the URL each request goes as the process that made it:
/// a file created by uid 1000 is 1000's on the server, one created by root
/// is squashed to nobody (the server squashes root), never the mounter's by
/// accident.
#[test]
fn each_caller_acts_as_itself() {
    let Some((s, _)) = fuse_server() else {
        return;
    };
    let url = format!("nfs://127.0.0.1:{}/?vers=4.1", s.port());
    let m = Mounted::new(&url, "");
    let run_as = |uid: &str, file: &str| {
        run_ok(
            Command::new("setpriv")
                .args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    "--clear-groups",
                    "touch",
                ])
                .arg(m.path(file)),
            &format!("touch {file} as {uid}"),
        );
    };
    use std::os::unix::fs::MetadataExt;
    run_as("1000", "by-1000");
    run_as("1001", "by-1001");
    std::fs::write(m.path("by-root"), b"x").unwrap();
    let owner = |f: &str| std::fs::metadata(s.export.join(f)).unwrap().uid();
    assert_eq!(owner("by-1000"), 1000);
    assert_eq!(owner("by-1001"), 1001);
    assert_ne!(owner("by-root"), 1000);
    assert_ne!(owner("by-root"), 1001);
}

/// SIGTERM ends the mount process even when the mount lives on in another
/// mount namespace (unmounting here does not end the FUSE session there):
/// it ends the connection itself within seconds, and the copy in the other
/// namespace then fails fast instead of hanging.
#[test]
fn sigterm_ends_a_mount_copied_into_another_namespace() {
    let Some((s, _)) = fuse_server() else {
        return;
    };
    let mut m = Mounted::new(&mount_url(&s, "4.1"), "");
    std::fs::write(m.path("f"), b"x").unwrap();
    // A second mount namespace holding a copy of the mount.
    let mut holder = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "120"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut child = m.child.take().unwrap();
    let pid = child.id().to_string();
    let t = Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let ended = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if t.elapsed() > Duration::from_secs(15) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
    }
    // The copy in the other namespace answers at once (ENOTCONN or
    // ENOENT), never hangs.
    let probe = Command::new("timeout")
        .args(["10", "nsenter", "--mount", "--target"])
        .arg(holder.id().to_string())
        .args(["stat"])
        .arg(&m.dir)
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(
        ended,
        "the mount process was still running 15 s after SIGTERM"
    );
    assert_ne!(
        probe.status.code(),
        Some(124),
        "stat in the other namespace hung"
    );
    eprintln!("mount process ended {:?} after SIGTERM", t.elapsed());
}

/// Two mounts of one export, each its own NFSv4.1 client with delegations:
/// a same-size rewrite of 200 files through one, each written and closed,
/// is read back whole through the other (which had read them all before,
/// under delegations), and a file removed through one is gone for the
/// other at its next open.
#[test]
fn two_mounts_with_delegations_see_each_others_rewrites() {
    let Some((_s, _, a, b)) = two_mounts("") else {
        return;
    };
    let n = 200;
    let body =
        |gen: u8, i: usize| -> Vec<u8> { (0..4096).map(|j| (j as u8) ^ (i as u8) ^ gen).collect() };
    std::fs::create_dir(a.path("d")).unwrap();
    for i in 0..n {
        std::fs::write(a.path(&format!("d/f{i}")), body(1, i)).unwrap();
    }
    for i in 0..n {
        assert_eq!(
            std::fs::read(b.path(&format!("d/f{i}"))).unwrap(),
            body(1, i)
        );
        assert_eq!(
            std::fs::read(a.path(&format!("d/f{i}"))).unwrap(),
            body(1, i)
        );
    }
    for i in 0..n {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(b.path(&format!("d/f{i}")))
            .unwrap();
        f.write_all(&body(2, i)).unwrap();
    }
    let stale: Vec<usize> = (0..n)
        .filter(|i| std::fs::read(a.path(&format!("d/f{i}"))).unwrap() != body(2, *i))
        .collect();
    assert!(
        stale.is_empty(),
        "{} of {n} files read stale through the other mount: {stale:?}",
        stale.len()
    );
    // The name may stay in the other mount's dentry cache for the entry's
    // timeout, but its open goes to the server, which has no such file.
    std::fs::remove_file(b.path("d/f0")).unwrap();
    let e = std::fs::File::open(a.path("d/f0")).unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESTALE)),
        "open of a removed file through the other mount: {e}"
    );
}

/// `f()` on a thread of its own, its result within `secs` (a hung call
/// fails the test instead of hanging it).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: no answer in {secs} s"))
}

/// A writer through the mount for the tests below: opens its file, then
/// for each line on stdin writes it and answers with the result of
/// "close" (the file's close), "fsync" or "write" (a write, buffered in
/// the mount).
const LINE_WRITER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
print("open", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd == "write":
            os.write(fd, b"x" * 4096)
        elif cmd == "fsync":
            os.fsync(fd)
        elif cmd == "close":
            os.close(fd)
        print("ok", flush=True)
    except OSError as e:
        print("errno %d" % e.errno, flush=True)
"#;

/// soft,timeo=5,retrans=2 (as nfs(5): deciseconds, retries): with the
/// server stopped (SIGSTOP: its connections stay, nothing is answered),
/// a stat, a read, an fsync of buffered writes and a close of buffered
/// writes each fail with EIO once a call went unanswered through its
/// retries (0.5 + 1 + 1.5 s), never hang and never report success for data
/// the server did not store; `--stats` shows the major timeouts and the
/// state; after SIGCONT the mount answers again.
#[test]
fn soft_mount_gives_eio_when_the_server_stops_answering() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::FileExt;
    let Some((s, _)) = fuse_server() else {
        return;
    };
    std::fs::write(s.export.join("r"), vec![7u8; 100_000]).unwrap();
    let m = Mounted::new(&mount_url(&s, "4.1"), "soft,timeo=5,retrans=2,noac,nodeleg");
    let rf = std::fs::File::open(m.path("r")).unwrap();
    let mut wf = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("w"))
        .unwrap();
    std::fs::write(m.dir.join("../writer.py"), LINE_WRITER).unwrap();
    let mut py = Command::new("python3")
        .arg(m.dir.join("../writer.py"))
        .arg(m.path("c"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut py_in = py.stdin.take().unwrap();
    let mut py_out = BufReader::new(py.stdout.take().unwrap());
    let mut l = String::new();
    py_out.read_line(&mut l).unwrap();
    assert_eq!(l.trim(), "open");
    let mut ask = move |cmd: &str| -> String {
        writeln!(py_in, "{cmd}").unwrap();
        let mut l = String::new();
        py_out.read_line(&mut l).unwrap();
        l.trim().to_string()
    };

    s.pause();
    // Buffered in the mount, answered without the server: not sent
    // until fsync or close.
    wf.write_all(b"buffered").unwrap();
    // Another process's write, buffered too, then its close.
    let (w, c) = within(60, "write, close", move || (ask("write"), ask("close")));
    assert_eq!(w, "ok");
    assert_eq!(c, format!("errno {}", libc::EIO), "close of unsent writes");
    let t = Instant::now();
    let p = m.path("r");
    let e = within(60, "stat", move || std::fs::metadata(p).unwrap_err());
    let took = t.elapsed();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "stat: {e}");
    // One call's three transmissions wait 0.5 + 1 + 1.5 s; a stat may
    // make two calls (LOOKUP, GETATTR).
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "stat failed after {took:?}"
    );
    let t = Instant::now();
    let e = within(60, "read", move || {
        let mut b = [0u8; 4096];
        rf.read_at(&mut b, 0).unwrap_err()
    });
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "read: {e}");
    eprintln!(
        "soft: stat EIO after {took:?}, read EIO after {:?}",
        t.elapsed()
    );
    // An fstat of the written file sends its buffer first: that WRITE's
    // failure is the fstat's, and still the fsync's.
    // (Through a second descriptor kept open: its close would flush, and
    // report the failure there.)
    let wf2 = wf.try_clone().unwrap();
    let (e, _wf2) = within(60, "fstat of w", move || (wf2.metadata().unwrap_err(), wf2));
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "fstat of w: {e}");
    let r = within(60, "fsync", move || wf.sync_all());
    let stored = std::fs::read(s.export.join("w")).unwrap();
    assert!(
        r.as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EIO)),
        "fsync: {r:?}; the server has {stored:?} {}",
        m.log_text()
    );
    let v = mount_status(&m, "major_timeouts", 3);
    assert!(v["major_timeouts"].as_u64().unwrap() >= 3, "{v}");
    assert!(v["timeouts"].as_u64().unwrap() >= 9, "{v}");
    assert!(v["retransmissions"].as_u64().unwrap() >= 6, "{v}");
    assert_eq!(v["connection"]["state"], "not responding", "{v}");
    assert!(v["connection"]["since"].as_u64().is_some(), "{v}");
    assert_eq!(v["options"]["soft"], true, "{v}");
    assert_eq!(v["options"]["timeo"], 5, "{v}");
    assert_eq!(v["options"]["retrans"], 2, "{v}");

    s.resume();
    let p = m.path("r");
    let md = within(60, "stat after SIGCONT", move || std::fs::metadata(p));
    assert_eq!(md.unwrap().len(), 100_000);
    // The status is rewritten every second.
    let t = Instant::now();
    loop {
        let v = mount_status(&m, "calls", 0);
        if v["connection"]["state"] == "connected" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = py.kill();
    let _ = py.wait();
}

/// The default, hard: with the server killed, a `cat` started meanwhile
/// waits; once a server is back on the same address and export (a new
/// process: the NFSv4.1 session is recovered) it completes with the
/// file's data. Over NFSv4.1 and NFSv3.
#[test]
fn hard_mount_waits_for_a_restarted_server() {
    if !fuse_usable() {
        return;
    }
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    for vers in ["4.1", "3"] {
        let (mut s, _) = server();
        std::fs::write(s.export.join("f"), &data).unwrap();
        let m = Mounted::new(&mount_url(&s, vers), "");
        // Connected, and the directory known (not the file's pages).
        assert!(m.path("f").exists());
        s.crash();
        let mut cat = Command::new("cat")
            .arg(m.path("f"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            cat.try_wait().unwrap().is_none(),
            "cat ended while the server was gone ({vers})"
        );
        let t = Instant::now();
        let back = TestServer::launch(&s.export, &s.state, s.port(), &["--grace", "0.05"], &[]);
        let out = within(90, "cat after the restart", move || {
            cat.wait_with_output().unwrap()
        });
        assert!(out.status.success(), "cat over {vers}: {:?}", out.status);
        assert!(
            out.stdout == data,
            "cat over {vers}: {} bytes, not the file's",
            out.stdout.len()
        );
        eprintln!(
            "hard ({vers}): cat done {:?} after the restart",
            t.elapsed()
        );
        // Unmounted while a server answers (the mount returns its state).
        drop(m);
        drop(back);
    }
}

/// An open file unlinked through a mount is renamed to a hidden name;
/// when that mount dies (SIGKILL) with the file open, the name would stay
/// on the server for ever: the next mount of the export removes it (from
/// the record the dead mount kept), and leaves a live mount's alone.
#[test]
fn hidden_names_left_by_a_killed_mount_are_removed_by_the_next() {
    let Some((s, _)) = fuse_server() else {
        return;
    };
    let url = mount_url(&s, "4.1");
    let hidden = |d: &str| -> Vec<String> {
        std::fs::read_dir(s.export.join(d))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tarn"))
            .collect()
    };
    // A live mount's hidden name, which must stay.
    let live = Mounted::new(&url, "");
    std::fs::create_dir(live.path("l")).unwrap();
    std::fs::write(live.path("l/f"), b"live").unwrap();
    let lf = std::fs::File::open(live.path("l/f")).unwrap();
    std::fs::remove_file(live.path("l/f")).unwrap();
    assert_eq!(hidden("l").len(), 1);

    // nodeleg: a delegation the dead mount held would hold the REMOVE
    // up until the server revokes it (a lease later).
    let mut m = Mounted::new(&url, "nodeleg");
    std::fs::create_dir(m.path("d")).unwrap();
    std::fs::write(m.path("d/f"), b"data").unwrap();
    let f = std::fs::File::open(m.path("d/f")).unwrap();
    std::fs::remove_file(m.path("d/f")).unwrap();
    assert_eq!(hidden("d").len(), 1, "renamed aside while open");
    let v = mount_status(&m, "silly_renamed", 1);
    assert_eq!(v["silly_renamed"], 1, "{v}");
    m.crash();
    m.abort();
    drop(f);
    assert_eq!(hidden("d").len(), 1, "a killed mount cannot remove it");

    let m2 = Mounted::new(&url, "");
    let t = Instant::now();
    while !hidden("d").is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        hidden("d").is_empty(),
        "left: {:?}\n{}",
        hidden("d"),
        m2.log_text()
    );
    assert_eq!(hidden("l").len(), 1, "a live mount's hidden name stays");
    drop(m2);
    drop(lf);
    let t = Instant::now();
    while !hidden("l").is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(hidden("l").is_empty(), "removed at its last close");
}

/// A process writing through the mount, fsync at known points, killed
/// (SIGKILL) between them; the mount then unmounted with `tarn umount`,
/// which ends the FUSE connection and the mount process: every byte up to
/// the last fsync that returned is on the server, and what the file holds
/// past it is only what was written there (never other bytes).
#[test]
fn a_writer_killed_mid_write_loses_nothing_it_synced() {
    if !fuse_usable() {
        return;
    }
    use std::io::{BufRead, BufReader};
    const WRITER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
chunk = 300_000
def piece(k):
    return bytes((k * 7 + i) % 251 for i in range(chunk))
for k in range(3):
    os.write(fd, piece(k))
    os.fsync(fd)
    print("synced", (k + 1) * chunk, flush=True)
k = 3
while True:
    os.write(fd, piece(k))
    if k == 5:
        print("unsynced", flush=True)
    k += 1
"#;
    let (s, _) = server();
    for vers in ["4.1", "3"] {
        let mut m = Mounted::new(&mount_url(&s, vers), "");
        std::fs::write(m.dir.join("../w.py"), WRITER).unwrap();
        let mut w = Command::new("python3")
            .arg(m.dir.join("../w.py"))
            .arg(m.path("f"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(w.stdout.take().unwrap());
        let mut synced = 0u64;
        let mut l = String::new();
        loop {
            l.clear();
            assert!(out.read_line(&mut l).unwrap() > 0, "the writer ended");
            match l.split_whitespace().collect::<Vec<_>>()[..] {
                ["synced", n] => synced = n.parse().unwrap(),
                ["unsynced"] => break,
                _ => panic!("{l}"),
            }
        }
        let _ = w.kill();
        let _ = w.wait();
        assert_eq!(synced, 900_000);
        let st = Command::new(env!("CARGO_BIN_EXE_tarn"))
            .arg("umount")
            .arg(&m.dir)
            .status()
            .unwrap();
        assert!(st.success(), "tarn umount");
        assert!(!is_mounted(&m.dir), "still mounted after tarn umount");
        let mut child = m.child.take().unwrap();
        let t = Instant::now();
        // Seconds unloaded; CI's two loaded cores take longer.
        while child.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{vers}: the mount process still runs 30 s after tarn umount: {}",
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "{vers}: the mount process ended {:?} after tarn umount",
            t.elapsed()
        );
        let got = std::fs::read(s.export.join("f")).unwrap();
        let piece =
            |k: usize| -> Vec<u8> { (0..300_000).map(|i| ((k * 7 + i) % 251) as u8).collect() };
        let written: Vec<u8> = (0..64).flat_map(piece).collect();
        assert!(
            got.len() as u64 >= synced,
            "{vers}: {} bytes on the server, {synced} synced",
            got.len()
        );
        let n = got.len().min(written.len());
        assert!(
            got[..n] == written[..n],
            "{vers}: bytes on the server that were not written"
        );
        eprintln!(
            "{vers}: {synced} synced, {} on the server after the kill",
            got.len()
        );
        std::fs::remove_file(s.export.join("f")).unwrap();
    }
}

/// `tarn mount --stats DIR` against a live mount: the options in force,
/// the server, the connection, the call counts and per operation counts
/// with a mean time, delegations and hidden names pending.
#[test]
fn stats_show_what_an_operator_needs() {
    let Some((s, _)) = fuse_server() else {
        return;
    };
    let m = Mounted::new(&mount_url(&s, "4.1"), "timeo=30,retrans=4,wsize=65536");
    std::fs::write(m.path("a"), vec![1u8; 200_000]).unwrap();
    assert_eq!(std::fs::read(m.path("a")).unwrap().len(), 200_000);
    // The status is rewritten every second: until it shows the WRITEs.
    let t = Instant::now();
    let v = loop {
        let v = mount_status(&m, "calls", 0);
        if v["ops"]["WRITE"]["calls"].as_u64().unwrap_or(0) >= 3 || t.elapsed().as_secs() > 10 {
            break v;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let o = &v["options"];
    assert_eq!(o["vers"], "4.1", "{v}");
    assert_eq!(o["sec"], "sys", "{v}");
    assert_eq!(o["wsize"], 65536, "{v}");
    assert!(o["rsize"].as_u64().unwrap() >= 4096, "{v}");
    assert_eq!(
        (&o["hard"], &o["timeo"], &o["retrans"]),
        (&true.into(), &30.into(), &4.into()),
        "{v}"
    );
    assert_eq!(o["deleg"], true, "{v}");
    assert_eq!(v["server"], s.addr.to_string(), "{v}");
    assert_eq!(v["connection"]["state"], "connected", "{v}");
    assert!(v["connection"]["since"].is_null(), "{v}");
    for k in [
        "retransmissions",
        "timeouts",
        "major_timeouts",
        "reconnects",
    ] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
    let w = &v["ops"]["WRITE"];
    assert!(
        w["calls"].as_u64().unwrap_or(0) >= 3,
        "200 kB in 64 KiB WRITEs: {v}"
    );
    assert!(w["mean_ms"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
    assert!(v["ops"]["OPEN"]["calls"].as_u64().unwrap_or(0) >= 1, "{v}");
    for k in ["delegations", "silly_renamed", "inodes"] {
        assert!(v[k].is_u64(), "{k}: {v}");
    }
    // The text is indented JSON, one key a line.
    let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["mount", "--stats"])
        .arg(&m.dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("\"major_timeouts\"")),
        "{text}"
    );
}
