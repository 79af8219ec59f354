//! A real `tarn serve` on a free loopback port, stopped by PID; and the
//! pieces other harnesses (a cluster's heads, the client tests' server)
//! start theirs with: a temporary export, spawning until the first line,
//! stopping a process tree by PID.

use crate::{free_port, tarn_bin};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    pub child: Option<Child>,
    pub addr: SocketAddr,
    pub export: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

/// A fresh temporary export, writable by everyone (the server squashes root).
pub fn temp_export() -> (tempfile::TempDir, PathBuf, PathBuf) {
    temp_export_prefixed("tarn-e2e-")
}

/// [`temp_export`] in a temporary directory named `prefix...`: the
/// directory, its `export` and its `state`.
pub fn temp_export_prefixed(prefix: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    // /var/tmp: a disk filesystem with kernel file handles (not always true of /tmp).
    temp_export_under(Path::new("/var/tmp"), prefix)
}

/// [`temp_export_prefixed`] under `base` (e.g. /dev/shm, a tmpfs, where a
/// test measures the protocol's own speed rather than the disk's).
pub fn temp_export_under(base: &Path, prefix: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .unwrap();
    let export = tmp.path().join("export");
    let state = tmp.path().join("state");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    (tmp, export, state)
}

/// Spawns `cmd` (a `tarn serve ...`) with its stderr appended to `log`,
/// and waits for the line it prints once it listens (`who` names it if it
/// does not). The reader of the rest of its stdout: dropping it closes the
/// pipe, so a caller whose server prints more keeps it.
pub fn spawn_serving(cmd: &mut Command, log: &Path, who: &str) -> (Child, BufReader<ChildStdout>) {
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(logf)
        .spawn()
        .expect("start tarn");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("tarn: exporting"),
        "{who}: unexpected first line {line:?}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    (child, out)
}

/// [`spawn_serving`] with the rest of the server's stdout read and dropped
/// on a thread, so the server never blocks on a full pipe.
pub fn spawn_serving_drained(cmd: &mut Command, log: &Path, who: &str) -> Child {
    let (child, mut out) = spawn_serving(cmd, log, who);
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    child
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

    /// Starts a server from a configuration file whose text is `config`
    /// with `{export}` standing for a fresh export directory.
    pub fn start_config(config: &str) -> TestServer {
        let (tmp, export, state) = temp_export();
        let file = state.join("tarn.toml");
        std::fs::write(&file, config.replace("{export}", export.to_str().unwrap())).unwrap();
        let mut s = TestServer::launch_serving(
            &tarn_bin(),
            &["--config", file.to_str().unwrap()],
            &export,
            &state,
            free_port(),
            &[],
            &[],
        );
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
        TestServer::launch_serving(
            &tarn_bin(),
            &[export.to_str().unwrap()],
            export,
            state,
            port,
            extra,
            wrapper,
        )
    }

    /// [`TestServer::launch`] of the binary `bin` serving `what` (the
    /// export directory, or `--config FILE`).
    pub fn launch_serving(
        bin: &Path,
        what: &[&str],
        export: &Path,
        state: &Path,
        port: u16,
        extra: &[&str],
        wrapper: &[&str],
    ) -> TestServer {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let log = state.join(format!("server-{port}.log"));
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg("serve").args(what).args([
            "--listen",
            &addr.to_string(),
            "--state-dir",
            state.to_str().unwrap(),
            "--log-level",
            "debug",
        ]);
        cmd.args(extra);
        // The rest of its stdout goes to a closed pipe, as it always did.
        let (child, _) = spawn_serving(&mut cmd, &log, "tarn serve");
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

    /// An NFSv3 URL for libnfs, acting as uid/gid 1000 (see [`libnfs_url`]).
    pub fn url(&self, path: &str) -> String {
        libnfs_url(self.port(), path)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once `done` holds for it, or as it is after 10 s: a line
    /// about something the client has already seen may still be on its way
    /// (the server sends a TLS alert before it logs why).
    pub fn log_when(&self, done: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log_text();
            if done(&log) || Instant::now() >= end {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait (the server answers calls in flight and syncs).
    pub fn stop(&mut self) {
        // A paused server would not act on SIGTERM until continued.
        self.resume();
        if let Some(mut c) = self.child.take() {
            terminate(&mut c);
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
        let t0 = Instant::now();
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

    /// SIGSTOP to the server (and what runs under it): it keeps its
    /// connections and answers nothing, a server hung rather than gone.
    pub fn pause(&self) {
        self.signal_tree("STOP");
    }

    /// SIGCONT after [`TestServer::pause`]: it answers what queued up.
    pub fn resume(&self) {
        self.signal_tree("CONT");
    }

    fn signal_tree(&self, sig: &str) {
        if let Some(c) = &self.child {
            for p in descendants(c.id()) {
                send_signal(p, sig);
            }
            send_signal(c.id(), sig);
        }
    }

    /// Whether the server process is still running.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An NFSv3 URL for libnfs on `port`, acting as uid/gid 1000. libnfs
/// mounts the part of the path before the last '/', and cannot mount an
/// empty path: the extra '/' makes a file directly under the root mount "/".
pub fn libnfs_url(port: u16, path: &str) -> String {
    let p = port;
    format!("nfs://127.0.0.1/{path}?version=3&nfsport={p}&mountport={p}&uid=1000&gid=1000")
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

/// SIGTERM to `c` and every process under it, then waits (20 s at most,
/// then SIGKILL) until all are gone.
pub fn terminate(c: &mut Child) {
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

/// SIGKILL to `c` (a crash), reaped.
pub fn kill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
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
