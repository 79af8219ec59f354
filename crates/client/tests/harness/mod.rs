//! Starts `tarn serve` (test-support's `tarn_bin`) on a free port with its own export and
//! state directories (under one temporary directory, removed at the end),
//! kills it by PID (SIGKILL) on `kill`, `restart` or drop, and gives the
//! tests small helpers: sessions, raw COMPOUND bytes, status extraction.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use client::nfs4::*;
use proto::nfs4::*;
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command};
use std::sync::Arc;
use xdr::{Pack, Unpack};

pub const UID: u32 = 1000;
pub const GID: u32 = 1000;

pub struct Tarn {
    child: Option<Child>,
    /// Kept open: the server's later stdout lines must not hit a closed pipe.
    _stdout: Option<BufReader<ChildStdout>>,
    pub addr: SocketAddr,
    pub export: PathBuf,
    pub state: PathBuf,
    /// Served instead of `export` when set (`tarn serve --config`).
    config: Option<PathBuf>,
    tmp: tempfile::TempDir,
}

#[allow(unused_imports)] // not every test binary reads metrics
pub use test_support::metrics::{metric, metrics_text as metrics};
use test_support::server::{kill, spawn_serving, temp_export_prefixed, temp_export_under};
pub use test_support::{free_port, tarn_bin};

impl Tarn {
    /// A server with `extra` flags (`--lease-time 2`, `--grace 5`, ...).
    pub fn start(extra: &[&str]) -> Tarn {
        Tarn::start_with_export(temp_export_prefixed("tarn-errors-"), extra)
    }

    /// [`Tarn::start`] with the export on tmpfs (/dev/shm): for a test that
    /// measures throughput over minutes, whose COMMITs would otherwise
    /// measure this shared machine's disk.
    #[allow(dead_code)] // not every test binary measures throughput
    pub fn start_on_tmpfs(extra: &[&str]) -> Tarn {
        let dir = temp_export_under(std::path::Path::new("/dev/shm"), "tarn-tmpfs-");
        Tarn::start_with_export(dir, extra)
    }

    fn start_with_export(
        (tmp, export, state): (tempfile::TempDir, PathBuf, PathBuf),
        extra: &[&str],
    ) -> Tarn {
        let mut t = Tarn {
            child: None,
            _stdout: None,
            addr: "127.0.0.1:1".parse().unwrap(),
            export,
            state,
            config: None,
            tmp,
        };
        t.spawn(extra);
        t
    }

    /// A server with several exports from a config file: each (directory
    /// name under the temporary directory, pseudo path).
    pub fn start_exports(exports: &[(&str, &str)]) -> Tarn {
        let tmp = test_support::var_tmp("tarn-exports-");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let mut toml = String::new();
        for (dir, pseudo) in exports {
            let p = tmp.path().join(dir);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
            toml += &format!(
                "[[export]]\npath = {:?}\npseudo = {pseudo:?}\nclients = [\"127.0.0.1\"]\n\n",
                p.display().to_string()
            );
        }
        let config = tmp.path().join("exports.toml");
        std::fs::write(&config, toml).unwrap();
        let mut t = Tarn {
            child: None,
            _stdout: None,
            addr: "127.0.0.1:1".parse().unwrap(),
            export: tmp.path().join(exports[0].0),
            state,
            config: Some(config),
            tmp,
        };
        t.spawn(&[]);
        t
    }

    fn spawn(&mut self, extra: &[&str]) {
        self.addr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let what = match &self.config {
            Some(c) => vec!["--config".to_string(), c.display().to_string()],
            None => vec![self.export.display().to_string()],
        };
        let mut cmd = Command::new(tarn_bin());
        cmd.arg("serve")
            .args(what)
            .args(["--listen", &self.addr.to_string()])
            .args(["--state-dir", self.state.to_str().unwrap()])
            .args(extra);
        let (child, out) = spawn_serving(&mut cmd, &self.tmp.path().join("server.log"), "tarn");
        self.child = Some(child);
        self._stdout = Some(out);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("server.log")).unwrap_or_default()
    }

    /// SIGKILL to the server's PID, then reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(&mut c);
        }
        self._stdout = None;
    }

    /// Kills the server and starts a new one on the same directories.
    pub fn restart(&mut self, extra: &[&str]) {
        self.kill();
        self.spawn(extra);
    }
}

impl Drop for Tarn {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A test KDC with `name`'s ticket, good for `life`, as this process's
/// default credential; the guard holds the process environment (the
/// KRB5 variables) for the test.
pub fn kdc_with_ticket(
    name: &str,
    life: &str,
) -> (std::sync::MutexGuard<'static, ()>, testkdc::Kdc) {
    let env = testkdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = testkdc::Kdc::start();
    let cc = kdc.kinit(name, life);
    kdc.activate(&cc);
    (env, kdc)
}

/// Sets `path`'s permission bits to `mode` (the tests run as another
/// user than the clients' AUTH_SYS uid).
pub fn chmod(path: impl AsRef<std::path::Path>, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs one async test body on a small runtime.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Runs one async test body against its own fresh `tarn serve` (no extra
/// flags), given the server's address; the server is killed at the end.
pub fn with_server<F, Fut>(body: F) -> Fut::Output
where
    F: FnOnce(SocketAddr) -> Fut,
    Fut: std::future::Future,
{
    with_export(|addr, _| body(addr))
}

/// [`with_server`], the body also given the export directory.
pub fn with_export<F, Fut>(body: F) -> Fut::Output
where
    F: FnOnce(SocketAddr, PathBuf) -> Fut,
    Fut: std::future::Future,
{
    let t = Tarn::start(&[]);
    run(body(t.addr, t.export.clone()))
}

/// [`with_server`] with a first [`session`] already made.
pub fn with_session<F, Fut>(body: F) -> Fut::Output
where
    F: FnOnce(SocketAddr, Arc<Session>) -> Fut,
    Fut: std::future::Future,
{
    with_server(|addr| async move { body(addr, session(addr).await).await })
}

/// The state the failover tests follow: `dir/kept` created and opened,
/// "before" written to it (FILE_SYNC), bytes 0-99 write-locked (`granted`:
/// the expectation that the lock is granted). Its open stateid, handle
/// and lock stateid.
pub async fn kept_and_locked(
    s: &Session,
    dir: &NfsFh4,
    granted: &str,
) -> (Stateid4, NfsFh4, Stateid4) {
    let (sid, fh) = s
        .open(dir, "kept", Some(0o644), OPEN4_SHARE_ACCESS_BOTH)
        .await
        .unwrap();
    write_sync(s, &sid, &fh, 0, b"before").await.unwrap();
    let locker = s.new_lock_owner(&sid, &s.new_owner("lock"));
    let lsid = s
        .lock(&fh, locker, NfsLockType4::WRITE_LT, 0, 100)
        .await
        .unwrap()
        .expect(granted);
    (sid, fh, lsid)
}

/// A FILE_SYNC WRITE of `data` at `offset`.
pub async fn write_sync(
    s: &Session,
    sid: &Stateid4,
    fh: &NfsFh4,
    offset: u64,
    data: &'static [u8],
) -> Result<Write4resok> {
    write_at(s, sid, fh, offset, data, StableHow4::FILE_SYNC4).await
}

/// A WRITE of `data` at `offset`, `stable` as asked.
pub async fn write_at(
    s: &Session,
    sid: &Stateid4,
    fh: &NfsFh4,
    offset: u64,
    data: &'static [u8],
    stable: StableHow4,
) -> Result<Write4resok> {
    s.write(sid, fh, offset, Bytes::from_static(data), stable)
        .await
}

/// LOCK of `len` bytes at `offset` of `fh` by a new lock owner named
/// `owner`, for the open `sid`.
pub async fn lock_as(
    s: &Session,
    fh: &NfsFh4,
    sid: &Stateid4,
    owner: &str,
    typ: NfsLockType4,
    offset: u64,
    len: u64,
) -> Result<std::result::Result<Stateid4, Lock4denied>> {
    lock_by(s, fh, sid, &s.new_owner(owner), typ, offset, len).await
}

/// LOCK of `len` bytes at `offset` of `fh` by `owner`, new to the server
/// (open-to-lock-owner), for the open `sid`.
pub async fn lock_by(
    s: &Session,
    fh: &NfsFh4,
    sid: &Stateid4,
    owner: &StateOwner4,
    typ: NfsLockType4,
    offset: u64,
    len: u64,
) -> Result<std::result::Result<Stateid4, Lock4denied>> {
    s.lock(fh, s.new_lock_owner(sid, owner), typ, offset, len)
        .await
}

/// The names READDIR lists in `dir`, in the server's order.
pub async fn readdir_names(s: &Session, dir: &NfsFh4) -> Vec<String> {
    let entries = s.readdir(dir).await.expect("READDIR");
    entries.into_iter().map(|e| e.name).collect()
}

pub async fn conn(addr: SocketAddr) -> Nfs4Conn {
    Nfs4Conn::connect(addr, UID, GID).await.expect("connect")
}

/// A fresh client (its own client owner) with a session, RECLAIM_COMPLETE done.
pub async fn session(addr: SocketAddr) -> Arc<Session> {
    session_with(addr, &SessionOptions::default()).await
}

pub async fn session_with(addr: SocketAddr, o: &SessionOptions) -> Arc<Session> {
    Arc::new(
        Session::establish(conn(addr).await, o)
            .await
            .expect("session"),
    )
}

/// A session over a reconnecting channel of `nconnect` connections
/// (10 s timeout, 20 to 200 ms between reconnects).
pub async fn reconnecting_session(
    addr: SocketAddr,
    nconnect: usize,
    o: &SessionOptions,
) -> Arc<Session> {
    let opts = rpc::client::ChannelOptions {
        nconnect,
        timeo: std::time::Duration::from_secs(10),
        min_backoff: std::time::Duration::from_millis(20),
        max_backoff: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let conn = Nfs4Conn::connect_channel(addr, UID, GID, opts)
        .await
        .expect("connect");
    Arc::new(Session::establish(conn, o).await.expect("session"))
}

/// Options with a given client owner and verifier.
pub fn owner_opts(owner: &str, verifier: u64) -> SessionOptions {
    SessionOptions {
        owner: Bytes::from(owner.to_string()),
        verifier: verifier.to_be_bytes(),
        ..SessionOptions::default()
    }
}

/// A COMPOUND's argument bytes, as the generated types encode them.
pub fn encode(tag: &str, minor: u32, ops: Vec<NfsArgop4>) -> BytesMut {
    let mut b = BytesMut::new();
    Compound4args {
        tag: Bytes::from(tag.to_string()),
        minorversion: minor,
        argarray: ops,
    }
    .pack(&mut b);
    b
}

/// Sets the operation count of an encoded COMPOUND (the word after the
/// tag and the minor version), for appending hand-made operations.
pub fn set_op_count(b: &mut BytesMut, n: u32) {
    let taglen = u32::from_be_bytes(b[0..4].try_into().unwrap()) as usize;
    let at = 4 + taglen.div_ceil(4) * 4 + 4;
    b[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

/// Sends COMPOUND argument bytes as they are; returns the COMPOUND reply
/// bytes (the RPC reply header stripped).
pub async fn send_raw(c: &Nfs4Conn, args: &[u8]) -> Bytes {
    let rec = c
        .rpc()
        .call_raw(NFS4_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, args)
        .await
        .expect("RPC");
    let (_, st, d) = rpc::msg::decode_reply(rec).expect("reply header");
    assert_eq!(st, rpc::msg::ReplyStatus::Success, "RPC-level refusal");
    d.rest()
}

pub fn decode(reply: &Bytes) -> Compound4res {
    Compound4res::unpack(&mut xdr::Decoder::new(reply.clone())).expect("COMPOUND reply")
}

/// Each result's operation and status.
pub fn statuses(r: &Compound4res) -> Vec<(NfsOpnum4, Nfsstat4)> {
    r.resarray
        .iter()
        .map(client::nfs4::error::op_status)
        .collect()
}

/// The NFS status of a failed call (panics on success or a non-NFS error).
pub fn err<T: std::fmt::Debug>(r: Result<T>) -> Nfsstat4 {
    match r {
        Ok(v) => panic!("expected an NFS error, got {v:?}"),
        Err(e) => e
            .status()
            .unwrap_or_else(|| panic!("expected an NFS error, got {e}")),
    }
}

pub fn name(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::OP_PUTFH(Putfh4args { object: fh.clone() })
}
