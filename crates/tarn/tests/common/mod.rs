//! Starts a real `tarn serve` on a free loopback port, stops it by PID.
#![allow(dead_code)]

pub mod fuse;
pub mod pki;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub export: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

pub use testkdc::free_port;

/// A fresh temporary export, writable by everyone (the server squashes root).
pub fn temp_export() -> (tempfile::TempDir, PathBuf, PathBuf) {
    // /var/tmp: a disk filesystem with kernel file handles (not always true of /tmp).
    let tmp = tempfile::Builder::new()
        .prefix("tarn-e2e-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let export = tmp.path().join("export");
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    (tmp, export, state)
}

impl TestServer {
    pub fn start() -> TestServer {
        let (tmp, export, state) = temp_export();
        let mut s = TestServer::start_on(&export, &state, free_port());
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server with extra `tarn serve` flags (e.g. `--allow`, `--metrics`).
    pub fn start_with(extra: &[&str]) -> TestServer {
        let (tmp, export, state) = temp_export();
        let mut s = TestServer::launch(&export, &state, free_port(), extra, &[]);
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server on a given export, state directory and port (for restarts).
    pub fn start_on(export: &Path, state: &Path, port: u16) -> TestServer {
        TestServer::launch(export, state, port, &[], &[])
    }

    /// The general form: extra serve flags, and a wrapper command that
    /// ends by running its arguments (e.g. `unshare ... sh -c '...; exec "$@"' sh`).
    pub fn launch(
        export: &Path,
        state: &Path,
        port: u16,
        extra: &[&str],
        wrapper: &[&str],
    ) -> TestServer {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = state.join(format!("server-{port}.log"));
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let bin = env!("CARGO_BIN_EXE_tarn");
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .args([
                "serve",
                export.to_str().unwrap(),
                "--listen",
                &addr.to_string(),
                "--state-dir",
                state.to_str().unwrap(),
                "--log-level",
                "debug",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(logf)
            .spawn()
            .expect("start tarn");
        // The server prints one line once it listens.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.starts_with("tarn: exporting"),
            "unexpected first line {line:?}; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        TestServer {
            child: Some(child),
            addr,
            export: export.to_path_buf(),
            state: state.to_path_buf(),
            log,
            _tmp: None,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The admin socket `tarn stats|top|doctor` talk to.
    pub fn admin_socket(&self) -> PathBuf {
        self.state.join("admin.sock")
    }

    /// An NFSv3 URL for libnfs, acting as uid/gid 1000. libnfs mounts the
    /// part of the path before the last '/', and cannot mount an empty
    /// path: the extra '/' makes a file directly under the root mount "/".
    pub fn url(&self, path: &str) -> String {
        let p = self.port();
        format!("nfs://127.0.0.1/{path}?version=3&nfsport={p}&mountport={p}&uid=1000&gid=1000")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once `done` holds for it, or as it is after 10 s: a line
    /// about something the client has already seen may still be on its way
    /// (the server sends a TLS alert before it logs why).
    pub fn log_when(&self, done: impl Fn(&str) -> bool) -> String {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let log = self.log_text();
            if done(&log) || std::time::Instant::now() >= end {
                return log;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait (the server answers calls in flight and syncs).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A wrapper (unshare) runs the server as its child, and neither
            // passes SIGTERM on nor reliably takes the server down with it:
            // the kernel clears a parent-death signal when the server
            // changes its fs credentials. So signal every process by PID.
            let tree = descendants(c.id());
            for &p in tree.iter().rev() {
                send_signal(p, "TERM");
            }
            send_signal(c.id(), "TERM");
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(20) {
                if c.try_wait().unwrap().is_some() && !tree.iter().any(|&p| running(p)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            for &p in &tree {
                send_signal(p, "KILL");
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL: a crash.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            for p in descendants(c.id()) {
                send_signal(p, "KILL");
            }
            let _ = c.kill();
            let _ = c.wait();
            // Descendants (a server under a wrapper) are not ours to reap,
            // and a killed process's files close only when its last thread
            // is gone: wait until the state directory's lock is free for
            // the next server.
            self.wait_state_unlocked();
        }
    }

    /// Until no process holds the state directory's lock (at most 10 s).
    fn wait_state_unlocked(&self) {
        let Ok(f) = std::fs::File::open(self.state.join("lock")) else {
            return;
        };
        let t0 = std::time::Instant::now();
        while f.try_lock().is_err() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Dropping `f` releases the lock this took.
    }

    /// SIGKILL, then a server started in its place on the same export,
    /// state directory and port, with `extra` serve flags.
    pub fn crash_and_restart(&mut self, extra: &[&str]) -> TestServer {
        self.crash();
        std::thread::sleep(Duration::from_millis(300));
        TestServer::launch(&self.export, &self.state, self.port(), extra, &[])
    }

    /// Whether the server process is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }
}

/// A [`TestServer::launch`] wrapper: `script` (which ends by exec'ing
/// `"$@"`, the server) runs in a mount namespace of its own, with `vars`
/// in its environment, so what it mounts is gone with the server.
pub fn mount_ns_wrapper(vars: &[(&str, &Path)], script: &str) -> Vec<String> {
    let mut w = vec!["env".to_string()];
    w.extend(vars.iter().map(|(k, v)| format!("{k}={}", v.display())));
    for a in [
        "unshare",
        "--mount",
        "--fork",
        "--kill-child",
        "sh",
        "-c",
        script,
        "sh",
    ] {
        w.push(a.to_string());
    }
    w
}

/// `pid`'s descendants, parents before their children.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                next.push(k);
            }
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

fn send_signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs a libnfs-utils tool; panics with a clear message if it is not installed.
pub fn libnfs(tool: &str, args: &[&str]) -> std::process::Output {
    Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}): install Debian's libnfs-utils (the README's test command does)")
    })
}

/// Sends one record and reads one reply record on a raw connection.
pub fn raw_call(s: &mut TcpStream, record: &[u8]) -> Option<Vec<u8>> {
    s.write_all(record).ok()?;
    read_record(s)
}

pub fn read_record(s: &mut TcpStream) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    loop {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).ok()?;
        let h = u32::from_be_bytes(h);
        let mut frag = vec![0u8; (h & 0x7fff_ffff) as usize];
        s.read_exact(&mut frag).ok()?;
        out.extend_from_slice(&frag);
        if h & 0x8000_0000 != 0 {
            return Some(out);
        }
    }
}

/// A whole record (one fragment) holding a call with the given credential and args.
pub fn call_record(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &proto::rpc::OpaqueAuth,
    args: &[u8],
) -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    rpc::record::begin(&mut b);
    rpc::msg::encode_call(xid, prog, vers, proc_, cred, &mut b);
    b.extend_from_slice(args);
    rpc::record::finish(&mut b);
    b.to_vec()
}

/// The Prometheus text of a `--metrics` endpoint.
pub fn metrics_text(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    r
}

/// The sum of the samples of `name` (over its label sets) in Prometheus
/// text; None if it has none.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

pub fn sha256_file(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

use proto::nfs3::*;
use rpc::client::auth_sys;
use rpc::msg::{decode_reply, ReplyStatus};

pub fn mnt_root(c: &mut TcpStream) -> NfsFh3 {
    let args = xdr::to_bytes(&proto::mount::Dirpath(bytes::Bytes::from_static(b"/")));
    let r = raw_call(
        c,
        &call_record(
            100,
            proto::mount::MOUNT_PROGRAM,
            3,
            1,
            &auth_sys(1000, 1000, &[], "t"),
            &args,
        ),
    )
    .unwrap();
    let (_, st, mut d) = decode_reply(r.into()).unwrap();
    assert_eq!(st, ReplyStatus::Success);
    match <proto::mount::Mountres3 as xdr::Unpack>::unpack(&mut d).unwrap() {
        proto::mount::Mountres3::MNT3_OK(ok) => NfsFh3 { data: ok.fhandle.0 },
        other => panic!("MNT: {other:?}"),
    }
}

/// CREATE UNCHECKED of `name` in `dir`, mode 0644, nothing else set.
pub fn create3_args(dir: &NfsFh3, name: &str) -> Create3args {
    Create3args {
        r#where: Diropargs3 {
            dir: dir.clone(),
            name: bytes::Bytes::copy_from_slice(name.as_bytes()),
        },
        how: Createhow3::UNCHECKED(Sattr3 {
            mode: Some(0o644),
            uid: None,
            gid: None,
            size: None,
            atime: SetAtime::Default(TimeHow::DONT_CHANGE),
            mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
        }),
    }
}

/// CREATE (as [`create3_args`]) with the given xid: the new file's handle.
pub fn create3(c: &mut TcpStream, xid: u32, dir: &NfsFh3, name: &str) -> NfsFh3 {
    match nfs_call::<_, Create3res>(c, xid, NFSPROC3_CREATE, &create3_args(dir, name)) {
        Create3res::NFS3_OK(ok) => ok.obj.expect("handle"),
        other => panic!("CREATE {name}: {other:?}"),
    }
}

pub fn nfs_call<A: xdr::Pack, R: xdr::Unpack>(c: &mut TcpStream, xid: u32, proc_: u32, a: &A) -> R {
    let r = raw_call(
        c,
        &call_record(
            xid,
            NFS_PROGRAM,
            3,
            proc_,
            &auth_sys(1000, 1000, &[], "t"),
            &xdr::to_bytes(a),
        ),
    )
    .unwrap();
    let (_, st, mut d) = decode_reply(r.into()).unwrap();
    assert_eq!(st, ReplyStatus::Success);
    R::unpack(&mut d).unwrap()
}

/// A connection to the server from another loopback address (127.0.0.N);
/// the server must allow it (`--allow 127.0.0.0/8`).
pub fn connect_from(server: SocketAddr, ip: &str) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ip: std::net::IpAddr = ip.parse().unwrap();
    let t = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(ip, 0)).unwrap();
        sock.connect(server).await.unwrap()
    });
    let std = t.into_std().unwrap();
    std.set_nonblocking(false).unwrap();
    std
}

/// Runs the tarn binary with `args`: its status, stdout and stderr.
pub fn tarn_output(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(args)
        .output()
        .unwrap()
}

/// Asserts that a tool run succeeded and printed exactly `want`.
pub fn assert_printed(what: &str, out: &std::process::Output, want: &[u8]) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == want,
        "{what}: {} bytes differ",
        out.stdout.len()
    );
}

/// Runs the tarn binary with `args` and returns its stdout (panics on failure).
pub fn tarn(args: &[&str]) -> String {
    let out = tarn_output(args);
    assert!(
        out.status.success(),
        "tarn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `tarn doctor` over `window` seconds (thresholds lowered where a
/// debug build on a shared 2-core machine cannot be fast).
pub fn spawn_doctor(s: &TestServer, window: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args([
            "doctor",
            "--socket",
            s.admin_socket().to_str().unwrap(),
            "--window",
            window,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn finish_doctor(c: Child) -> String {
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "doctor failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Sets a local file's mtime (seconds and nanoseconds since the epoch).
pub fn set_mtime(p: &Path, secs: u64, nanos: u32) {
    let t = std::time::SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
    std::fs::File::open(p)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

/// A local path's own mtime (a link's, not its target's): seconds, nanoseconds.
pub fn mtime(p: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec())
}

/// A local path's permission bits (with setuid, setgid and sticky).
pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}
