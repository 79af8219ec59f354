//! `tarn mount` with sec=krb5p acting for each local user with that
//! user's own Kerberos credential cache, as rpc.gssd does for the Linux
//! client: a real MIT KDC and a krb5p-only `tarn serve` on loopback that
//! maps each principal to its own ids; the mount is made by root with
//! alice's ticket (mapped to 3000). Users 2001 (bob) and 2002 (carol) with
//! tickets in their own caches (KRB5CCNAME in their environment) create
//! and write files through the mount: the server owns them to 2001 and
//! 2002. User 2003 (dave) without a ticket gets EACCES, also when his
//! KRB5CCNAME names bob's cache (not his file); the refusal is logged
//! once. Root's requests go as the mounter (alice, 3000). Over NFSv4.1,
//! 4.0 and 3. Also: a user's context is renewed ahead of expiry from his
//! refreshed cache (short tickets), and a user whose ticket ran out is
//! refused (logged once) until a kinit, without a remount.
//!
//! Skipped, with a message, where /dev/fuse, fusermount3, setpriv or the
//! MIT KDC tools are missing.
//!
//!   cargo test -p tarn --test fuse_krb -- --nocapture

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use test_support::fuse::Mounted;
use test_support::server::spawn_serving;
use testkdc as kdc;

fn usable() -> bool {
    let runs = |c: &str, a: &str| {
        Command::new(c)
            .arg(a)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    let ok = Path::new("/dev/fuse").exists()
        && runs("fusermount3", "-V")
        && runs("setpriv", "--version");
    if !ok {
        eprintln!("SKIP: needs /dev/fuse, fusermount3 (Debian's fuse3) and setpriv");
        return false;
    }
    if !kdc::available() {
        eprintln!("SKIP: MIT KDC tools not found (scripts/deps.sh --test)");
        return false;
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        eprintln!("SKIP: acting for other users needs a mount made by root");
    }
    root
}

/// A child killed by PID on drop.
struct Proc(Option<Child>);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `script` run by `sh` as `uid` (gid the same, no other groups), with
/// KRB5CCNAME set to `cc` or unset.
fn run_as(uid: u32, cc: Option<&Path>, dir: &Path, script: &str) -> std::process::Output {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        "sh",
        "-c",
        script,
    ])
    .current_dir(dir)
    .env_remove("KRB5CCNAME");
    if let Some(cc) = cc {
        c.env("KRB5CCNAME", format!("FILE:{}", cc.display()));
    }
    c.output().unwrap()
}

fn ok(o: &std::process::Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A KDC with users bob and carol (tickets of `life` in caches of their
/// own, owned by them), a krb5p-only server mapping alice (the mounter)
/// to 3000, bob to 2001 and carol to 2002, and the export mounted by root
/// with alice's ticket. Fields drop in reverse order: mount, server, KDC.
struct Fixture {
    m: Mounted,
    _server: Proc,
    export: PathBuf,
    mnt: PathBuf,
    bob: PathBuf,
    carol: PathBuf,
    tmp: tempfile::TempDir,
    kdc: kdc::Kdc,
    _env: std::sync::MutexGuard<'static, ()>,
}

impl Fixture {
    fn owner(&self, f: &str) -> (u32, u32) {
        let md = std::fs::metadata(self.export.join(f)).unwrap();
        (md.uid(), md.gid())
    }

    fn mount_log(&self) -> String {
        self.m.log_text()
    }

    /// A new ticket of `life` for `name` in its cache, swapped in whole
    /// (a renewal never sees a half-written or root-owned cache).
    fn rekinit(&self, name: &str, uid: u32, life: &str) {
        let cc = self.tmp.path().join("ccs").join(format!("cc-{name}"));
        let new = self.tmp.path().join("ccs").join(format!("new-{name}"));
        self.kdc
            .kinit_user(name, &format!("{name}-pw-1"), life, &new);
        std::os::unix::fs::chown(&new, Some(uid), Some(uid)).unwrap();
        std::fs::rename(&new, &cc).unwrap();
    }
}

fn fixture(vers: &str, life: &str) -> Option<Fixture> {
    if !usable() {
        return None;
    }
    let env = kdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = kdc::Kdc::start();
    let mounter_cc = kdc.kinit("mounter", "10m");
    kdc.activate(&mounter_cc); // the server and the mount inherit it

    let tmp = test_support::var_tmp("tarn-fuse-krb-");
    // The users must reach the mount point below.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let export = tmp.path().join("export");
    let state = tmp.path().join("state");
    let mnt = tmp.path().join("mnt");
    let ccs = tmp.path().join("ccs");
    for d in [&export, &state, &mnt, &ccs] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&ccs, std::fs::Permissions::from_mode(0o755)).unwrap();

    // Each user's ticket in a cache of their own, owned by them.
    let cache = |name: &str, uid: u32| {
        kdc.add_user(name, &format!("{name}-pw-1"));
        let cc = ccs.join(format!("cc-{name}"));
        kdc.kinit_user(name, &format!("{name}-pw-1"), life, &cc);
        std::os::unix::fs::chown(&cc, Some(uid), Some(uid)).unwrap();
        cc
    };
    let bob = cache("bob", 2001);
    let carol = cache("carol", 2002);

    let port = free_port();
    let conf = tmp.path().join("tarn.toml");
    std::fs::write(
        &conf,
        format!(
            "[[export]]\npath = \"{}\"\npseudo = \"/\"\nclients = [\"127.0.0.1\"]\nsec = [\"krb5p\"]\n\n\
             [gss]\nkeytab = \"{}\"\n\n[gss.principals]\n\
             \"alice@TARN.TEST\" = \"3000:3000\"\n\"bob@TARN.TEST\" = \"2001:2001\"\n\
             \"carol@TARN.TEST\" = \"2002:2002\"\n",
            export.display(),
            kdc.keytab.display()
        ),
    )
    .unwrap();
    let slog = state.join("server.log");
    // Its stdout is closed after the first line, as before.
    let (child, _) = spawn_serving(
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(["serve", "--config"])
            .arg(&conf)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
            .arg(&state)
            .args(["--log-level", "debug"]),
        &slog,
        "tarn serve",
    );
    let server = Proc(Some(child));

    // The host as Kerberos names the service: nfs@localhost.
    let url = format!("nfs://localhost:{port}/?sec=krb5p&vers={vers}");
    let m = Mounted::at(&url, &mnt, &tmp.path().join("mount.log"));
    Some(Fixture {
        m,
        _server: server,
        export,
        mnt,
        bob,
        carol,
        tmp,
        kdc,
        _env: env,
    })
}

fn each_user_acts_with_own_credential(vers: &str) {
    let Some(f) = fixture(vers, "10m") else {
        return;
    };
    let (mnt, export) = (&f.mnt, &f.export);
    let (bob, carol) = (&f.bob, &f.carol);
    let owner = |p: &str| f.owner(p);

    // bob and carol, each with their own ticket: a small file and a
    // buffered write of 3 MiB (flushed at close as the opener).
    let o = run_as(
        2001,
        Some(bob),
        mnt,
        "echo bob > by-bob && head -c 3145728 /dev/zero > big-bob && cat by-bob",
    );
    ok(&o, "bob");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "bob\n");
    ok(
        &run_as(
            2002,
            Some(carol),
            mnt,
            "echo carol > by-carol && mkdir d-carol",
        ),
        "carol",
    );
    assert_eq!(owner("by-bob"), (2001, 2001));
    assert_eq!(owner("big-bob"), (2001, 2001));
    assert_eq!(
        std::fs::metadata(export.join("big-bob")).unwrap().len(),
        3 << 20
    );
    assert_eq!(owner("by-carol"), (2002, 2002));
    assert_eq!(owner("d-carol"), (2002, 2002));

    // dave has no ticket: EACCES, not the mounter's identity; nor may he
    // borrow bob's cache by naming it.
    let o = run_as(2003, None, mnt, "echo dave > by-dave");
    assert!(!o.status.success(), "dave without a ticket");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("Permission denied"), "{err}");
    std::thread::sleep(Duration::from_millis(2500)); // past the retry pause
    let o = run_as(2003, Some(bob), mnt, "echo dave > by-dave2; ls >/dev/null");
    assert!(!o.status.success(), "dave with bob's cache");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("Permission denied"), "{err}");
    assert!(!export.join("by-dave").exists() && !export.join("by-dave2").exists());

    // Root acts as the mounter (alice, mapped to 3000).
    std::fs::write(mnt.join("by-root"), b"root\n").unwrap();
    assert_eq!(owner("by-root"), (3000, 3000));

    // bob again: still his context (read back carol's file too).
    let o = run_as(2001, Some(bob), mnt, "cat by-carol && echo more >> by-bob");
    ok(&o, "bob again");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "carol\n");
    assert_eq!(owner("by-bob"), (2001, 2001));

    let log = f.mount_log();
    let refusals = log
        .lines()
        .filter(|l| l.contains("no usable Kerberos credential for uid 2003"))
        .count();
    assert_eq!(refusals, 1, "dave's refusal logged once: {log}");
    assert!(
        log.contains("RPCSEC_GSS context for uid 2001") && log.contains("bob@TARN.TEST"),
        "{log}"
    );
    assert!(!log.contains("uid 2003 from"), "{log}");
}

#[test]
fn each_user_acts_with_own_credential_nfsv41() {
    each_user_acts_with_own_credential("4.1");
}

#[test]
fn each_user_acts_with_own_credential_nfsv40() {
    each_user_acts_with_own_credential("4.0");
}

#[test]
fn each_user_acts_with_own_credential_nfsv3() {
    each_user_acts_with_own_credential("3");
}

/// How many of `log`'s lines say both `a` and `b`.
fn lines_with(log: &str, a: &str, b: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(a) && l.contains(b))
        .count()
}

/// bob's tickets live 24 s and are refreshed in his cache (as k5start
/// would) every 10 s while he appends to a file once a second for 32 s:
/// his context is replaced before each ticket ends, from his own cache,
/// and no append fails.
#[test]
fn a_users_context_is_renewed_before_expiry() {
    let Some(f) = fixture("4.1", "24s") else {
        return;
    };
    let writer = Command::new("setpriv")
        .args([
            "--reuid=2001",
            "--regid=2001",
            "--clear-groups",
            "sh",
            "-ec",
            "for i in $(seq 32); do echo $i >> appended; sleep 1; done",
        ])
        .current_dir(&f.mnt)
        .env("KRB5CCNAME", format!("FILE:{}", f.bob.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(10));
        f.rekinit("bob", 2001, "24s");
    }
    let o = writer.wait_with_output().unwrap();
    ok(&o, "bob appending across ticket lifetimes");
    let text = std::fs::read_to_string(f.export.join("appended")).unwrap();
    assert_eq!(text.lines().count(), 32, "{text}");
    assert_eq!(f.owner("appended"), (2001, 2001));
    let log = f.mount_log();
    let renewals = lines_with(&log, "renewed before expiry", "bob@TARN.TEST");
    assert!(
        renewals >= 2,
        "bob's context renewed ahead of expiry: {log}"
    );
}

/// bob's 10 s ticket runs out with nothing newer in his cache: his calls
/// then fail with EACCES (not as the mounter), the failure is logged once
/// however often he tries, and a kinit brings him back without a remount.
#[test]
fn an_expired_users_calls_are_refused_until_kinit() {
    let Some(f) = fixture("4.1", "10s") else {
        return;
    };
    let bob = Some(f.bob.as_path());
    ok(&run_as(2001, bob, &f.mnt, "echo 1 >> log"), "bob, fresh");
    // Past the ticket's end and the realm's 2 s clock skew.
    std::thread::sleep(Duration::from_secs(14));
    for i in 0..3 {
        let o = run_as(2001, bob, &f.mnt, "echo 2 >> log");
        assert!(!o.status.success(), "bob with an expired ticket ({i})");
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(err.contains("Permission denied"), "{err}");
        std::thread::sleep(Duration::from_millis(1500));
    }
    f.rekinit("bob", 2001, "10m");
    std::thread::sleep(Duration::from_millis(2500));
    ok(
        &run_as(2001, bob, &f.mnt, "echo 3 >> log"),
        "bob after kinit",
    );
    assert_eq!(
        std::fs::read_to_string(f.export.join("log")).unwrap(),
        "1\n3\n"
    );
    assert_eq!(f.owner("log"), (2001, 2001));
    let log = f.mount_log();
    let refusals = lines_with(&log, "uid 2001", "EACCES");
    assert_eq!(refusals, 1, "logged once: {log}");
}
