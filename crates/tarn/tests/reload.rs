//! `tarn serve --config` reloads its exports on SIGHUP without dropping
//! connections: a client that lost access gets ACCES on its next call on
//! the same connection, a removed export's handles go STALE, and a bad file
//! is logged with file:line while the old configuration stays in force.
//! Also `tarn check-config` on good and bad files.

mod common;

use common::*;
use proto::nfs3::*;
use proto::nfs4::{Compound4args, Compound4res, NfsArgop4, NfsFh4, Nfsstat4, Putfh4args};
use rpc::client::auth_sys;
use rpc::msg::{decode_reply, ReplyStatus};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn config(port: u16, state: &Path, a: &Path, b: Option<&Path>, a_client: &str) -> String {
    let mut s = format!(
        "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\n\n[[export]]\npath = \"{}\"\npseudo = \"/\"\nrules = [\n  {{ client = \"{a_client}\", options = [\"rw\"] }},\n]\n",
        state.display(),
        a.display()
    );
    if let Some(b) = b {
        s += &format!(
            "\n[[export]]\npath = \"{}\"\npseudo = \"/b\"\nclients = [\"127.0.0.1\"]\n",
            b.display()
        );
    }
    s
}

fn mnt(c: &mut TcpStream, xid: u32, path: &'static [u8]) -> proto::mount::Mountres3 {
    let args = xdr::to_bytes(&proto::mount::Dirpath(bytes::Bytes::from_static(path)));
    let r = raw_call(
        c,
        &call_record(
            xid,
            proto::mount::MOUNT_PROGRAM,
            3,
            1,
            &auth_sys(1000, 1000, &[], "t"),
            &args,
        ),
    )
    .expect("the connection stays open");
    let (_, st, mut d) = decode_reply(r.into()).unwrap();
    assert_eq!(st, ReplyStatus::Success);
    <proto::mount::Mountres3 as xdr::Unpack>::unpack(&mut d).unwrap()
}

fn mnt_ok(c: &mut TcpStream, xid: u32, path: &'static [u8]) -> NfsFh3 {
    match mnt(c, xid, path) {
        proto::mount::Mountres3::MNT3_OK(ok) => NfsFh3 { data: ok.fhandle.0 },
        other => panic!("MNT {:?}: {other:?}", String::from_utf8_lossy(path)),
    }
}

fn getattr(c: &mut TcpStream, xid: u32, fh: &NfsFh3) -> Result<(), Nfsstat3> {
    match nfs_getattr(c, xid, fh) {
        Getattr3res::NFS3_OK(_) => Ok(()),
        Getattr3res::Default(s) => Err(s),
    }
}

/// An NFSv4.0 COMPOUND of one PUTFH: its status.
fn putfh4(c: &mut TcpStream, xid: u32, fh: &NfsFh3) -> Nfsstat4 {
    let a = Compound4args {
        tag: Default::default(),
        minorversion: 0,
        argarray: vec![NfsArgop4::OP_PUTFH(Putfh4args {
            object: NfsFh4(fh.data.clone()),
        })],
    };
    let r = raw_call(
        c,
        &call_record(
            xid,
            NFS_PROGRAM,
            4,
            1,
            &auth_sys(1000, 1000, &[], "t"),
            &xdr::to_bytes(&a),
        ),
    )
    .expect("the connection stays open");
    let (_, st, mut d) = decode_reply(r.into()).unwrap();
    assert_eq!(st, ReplyStatus::Success);
    <Compound4res as xdr::Unpack>::unpack(&mut d)
        .unwrap()
        .status
}

fn wait_for_log(log: &Path, what: &str, after: usize) -> String {
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.len() > after && text[after..].contains(what) {
            return text[after..].to_string();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no {what:?} in the log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Scrapes /metrics; looks up a sample by name (summing its label sets).
fn metrics(addr: &str) -> impl Fn(&str) -> f64 {
    let r = metrics_text(addr);
    move |name: &str| metric_sum(&r, name).unwrap_or(0.0)
}

/// A temporary directory holding export directories `a` and `b` and a
/// state directory, those three, and a free port to serve them on.
fn exports_a_and_b() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
    u16,
) {
    let (tmp, a, state) = temp_export();
    let b = tmp.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    (tmp, a, b, state, free_port())
}

fn hangup(pid: u32) {
    let ok = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn sighup_reload_takes_access_away_on_the_same_connection() {
    let (tmp, a, b, state, port) = exports_a_and_b();
    let file = tmp.path().join("exports.toml");
    std::fs::write(&file, config(port, &state, &a, Some(&b), "127.0.0.1")).unwrap();
    let log = state.join("server.log");
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
    cmd.args([
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--log-level",
        "debug",
    ])
    .args(["--metrics", &maddr]);
    let mut child = spawn_serving_drained(&mut cmd, &log, "tarn serve");
    let pid = child.id();

    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let fh = mnt_ok(&mut c, 1, b"/");
    let fh_b = mnt_ok(&mut c, 2, b"/b");
    assert_eq!(getattr(&mut c, 3, &fh), Ok(()));
    assert_eq!(getattr(&mut c, 4, &fh_b), Ok(()));
    assert_eq!(putfh4(&mut c, 5, &fh), Nfsstat4::NFS4_OK);
    // The cache's counters reach the metrics (copied once a second).
    let t = Instant::now();
    loop {
        let m = metrics(&maddr);
        if m("tarn_auth_cache_hits_total") >= 2.0 {
            assert!(m("tarn_auth_cache_misses_total") >= 1.0);
            assert!(m("tarn_cache_entries") >= 1.0);
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "auth cache counters stay zero"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Drop 127.0.0.1 from the root export and remove /b.
    std::fs::write(&file, config(port, &state, &a, None, "10.0.0.0/8")).unwrap();
    let seen = std::fs::read_to_string(&log).unwrap().len();
    hangup(pid);
    wait_for_log(&log, "configuration reloaded", seen);
    assert_eq!(
        getattr(&mut c, 6, &fh),
        Err(Nfsstat3::NFS3ERR_ACCES),
        "same connection, next call"
    );
    assert_eq!(
        getattr(&mut c, 7, &fh_b),
        Err(Nfsstat3::NFS3ERR_STALE),
        "removed export"
    );
    assert_eq!(putfh4(&mut c, 8, &fh), Nfsstat4::NFS4ERR_ACCESS);
    assert_eq!(
        mnt(&mut c, 9, b"/"),
        proto::mount::Mountres3::Default(proto::mount::Mountstat3::MNT3ERR_ACCES)
    );

    // A broken file: logged with file:line; the previous rules stay.
    let mut bad = config(port, &state, &a, None, "127.0.0.1");
    bad = bad.replace("options = [\"rw\"]", "options = [\"rw\", \"sometimes\"]");
    std::fs::write(&file, &bad).unwrap();
    let bad_line = bad.lines().position(|l| l.contains("sometimes")).unwrap() + 1;
    let seen = std::fs::read_to_string(&log).unwrap().len();
    hangup(pid);
    let text = wait_for_log(&log, "NOT reloaded", seen);
    let want = format!("{}:{bad_line}:", file.display());
    assert!(text.contains(&want), "expected {want:?} in:\n{text}");
    assert_eq!(
        getattr(&mut c, 10, &fh),
        Err(Nfsstat3::NFS3ERR_ACCES),
        "old config stays"
    );

    // Access comes back with a good file, still on the same connection:
    // exports keep their ids by directory, so the old handles work again,
    // including those of the export that was gone for a while.
    std::fs::write(&file, config(port, &state, &a, Some(&b), "127.0.0.0/8")).unwrap();
    let seen = std::fs::read_to_string(&log).unwrap().len();
    hangup(pid);
    wait_for_log(&log, "configuration reloaded", seen);
    assert_eq!(getattr(&mut c, 11, &fh), Ok(()));
    assert_eq!(getattr(&mut c, 12, &fh_b), Ok(()));
    assert!(std::fs::read_to_string(state.join("export-ids"))
        .unwrap()
        .contains(" "));
    assert!(child.try_wait().unwrap().is_none(), "the server stays up");

    child.kill().unwrap();
    child.wait().unwrap();
}

fn check_config(text: &str) -> (bool, String, String) {
    let (_tmp, f) = temp_file("t.toml", text);
    let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(["check-config", f.to_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_explains_and_points_at_errors() {
    let (ok, out, err) = check_config(
        "[[export]]\npath = \"/srv/home\"\npseudo = \"/home\"\nrules = [\n  { client = \"10.1.0.0/16\", options = [\"rw\", \"no_root_squash\"] },\n  { client = \"*.lab.example.com\", options = [\"all_squash\"], anonuid = 1000, anongid = 1000 },\n]\n",
    );
    assert!(ok, "{err}");
    assert!(out.contains("valid"), "{out}");
    assert!(
        out.contains("10.1.0.0/16") && out.contains("rw, root stays root"),
        "{out}"
    );
    assert!(
        out.contains("*.lab.example.com") && out.contains("ro, everyone squashed to 1000:1000"),
        "{out}"
    );
    assert!(
        out.contains("anyone else") && out.contains("no access"),
        "{out}"
    );
    let (ok, _, err) = check_config(
        "[[export]]\npath = \"/srv\"\nrules = [\n  { client = \"10.0.0.0/8\" },\n  { client = \"bad_host!\" },\n]\n",
    );
    assert!(!ok);
    assert!(
        err.contains("t.toml:5:") && err.contains("expected an address"),
        "{err}"
    );
    let (ok, _, err) =
        check_config("[[export]]\npath = \"/srv\"\nclients = [\"10.0.0.0/8\"]\nrules = []\n");
    assert!(!ok);
    assert!(
        err.contains("t.toml:4:") && err.contains("not both"),
        "{err}"
    );
}

/// `tarn serve --exports` (an exports(5) file): `tarn reload` adds and
/// removes an export and says so while a client keeps working on another
/// export on its own connection; `tarn exports` lists what is exported to whom.
#[test]
fn tarn_reload_adds_and_removes_exports_under_a_busy_client() {
    let (tmp, a, b, state, port) = exports_a_and_b();
    let file = tmp.path().join("exports");
    let write = |text: String| std::fs::write(&file, text).unwrap();
    write(format!(
        "# as in /etc/exports\n{} 127.0.0.1(rw,sync,no_subtree_check,insecure)\n",
        a.display()
    ));
    let log = state.join("server.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
    cmd.args(["serve", "--exports", file.to_str().unwrap()])
        .args(["--state-dir", state.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    let mut child = spawn_serving_drained(&mut cmd, &log, "tarn serve");
    let sock = state.join("admin.sock");
    let sock = sock.to_str().unwrap();
    let leak = |p: &Path| -> &'static [u8] {
        Box::leak(p.to_str().unwrap().as_bytes().to_vec().into_boxed_slice())
    };

    // The busy client: GETATTRs on export a all along, on one connection.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let fh_a = mnt_ok(&mut c, 1, leak(&a));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (stop, fh) = (stop.clone(), fh_a.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                assert_eq!(getattr(&mut c, 100 + n, &fh), Ok(()), "call {n}");
            }
            n
        })
    };

    let listed = tarn(&["exports", "--socket", sock]);
    assert!(
        listed.contains(&format!("{}  sec=sys", a.display()))
            && listed.contains("127.0.0.1")
            && listed.contains("rw, root squashed"),
        "{listed}"
    );

    // Add b.
    write(format!(
        "{} 127.0.0.1(rw,insecure)\n{} 127.0.0.1(ro,all_squash,anonuid=1000,anongid=1000,insecure)\n",
        a.display(),
        b.display()
    ));
    let r = tarn(&["reload", "--socket", sock]);
    assert!(
        r.contains("2 export(s)")
            && r.contains(&format!("added {} as {}", b.display(), b.display())),
        "{r}"
    );
    let mut c2 = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let fh_b = mnt_ok(&mut c2, 1, leak(&b));
    assert_eq!(getattr(&mut c2, 2, &fh_b), Ok(()));
    let json = tarn(&["exports", "--socket", sock, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exports"][1]["rules"][0]["squash"], "all", "{json}");
    assert_eq!(v["exports"][1]["rules"][0]["anonuid"], 1000, "{json}");

    // Remove b, and make a read-only.
    write(format!("{} 127.0.0.1(ro,insecure)\n", a.display()));
    let r = tarn(&["reload", "--socket", sock]);
    assert!(
        r.contains(&format!("removed {}", b.display()))
            && r.contains(&format!(
                "changed {}: 127.0.0.1: ro, root squashed to 65534:65534 (was rw",
                a.display()
            )),
        "{r}"
    );
    assert_eq!(getattr(&mut c2, 3, &fh_b), Err(Nfsstat3::NFS3ERR_STALE));
    let r = tarn(&["reload", "--socket", sock]);
    assert!(r.contains("nothing changed"), "{r}");

    // A socket that does not answer: SIGHUP to the PID in STATE_DIR/lock.
    let seen = std::fs::read_to_string(&log).unwrap().len();
    let gone = state.join("nothing-here.sock");
    let r = tarn(&["reload", "--socket", gone.to_str().unwrap()]);
    assert!(r.contains(&format!("SIGHUP to PID {}", child.id())), "{r}");
    wait_for_log(&log, "configuration reloaded", seen);

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = busy.join().expect("the busy client saw no error");
    assert!(calls > 0);
    assert!(child.try_wait().unwrap().is_none(), "the server stays up");
    child.kill().unwrap();
    child.wait().unwrap();
}
