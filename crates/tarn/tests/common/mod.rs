//! What the tarn crate's tests share beyond test-support's harnesses
//! (which this re-exports): raw NFSv3 calls, the tarn tools, local files.
#![allow(dead_code, unused_imports)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use test_support::metrics::{metric_sum, metrics_text, sample};
pub use test_support::server::{mount_ns_wrapper, spawn_serving_drained, temp_export, TestServer};
pub use test_support::{free_port, run_ok};

/// A file anyone may read and write (a Kerberos test's principal is not a
/// local user: it works as the anonymous ids).
pub fn world_writable(file: &Path, data: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(file, data).unwrap();
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// A test KDC with `name`'s ticket, good for `life`, made this process's
/// default credential (the tools and mounts a test starts inherit it).
pub fn kdc_with_ticket(name: &str, life: &str) -> testkdc::Kdc {
    let kdc = testkdc::Kdc::start();
    let cc = kdc.kinit(name, life);
    kdc.activate(&cc);
    kdc
}

/// A server on `export` taking Kerberos (all three services, with `kdc`'s
/// keytab) and AUTH_SYS, with `extra` flags.
pub fn launch_krb(kdc: &testkdc::Kdc, export: &Path, state: &Path, extra: &[&str]) -> TestServer {
    launch_sec(kdc, export, state, "krb5,krb5i,krb5p,sys", extra)
}

/// A server on `export` taking the flavors `sec` (`--sec`), with `kdc`'s
/// keytab and `extra` flags.
pub fn launch_sec(
    kdc: &testkdc::Kdc,
    export: &Path,
    state: &Path,
    sec: &str,
    extra: &[&str],
) -> TestServer {
    let kt = kdc.keytab.to_str().unwrap();
    let mut flags = vec!["--sec", sec, "--keytab", kt];
    flags.extend_from_slice(extra);
    TestServer::launch(export, state, free_port(), &flags, &[])
}

/// A runtime on the calling thread, for a test's async part.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `mib` MiB of random bytes written to `path` (by dd).
pub fn random_file(path: &Path, mib: u32) {
    let st = Command::new("dd")
        .args([
            "if=/dev/urandom",
            &format!("of={}", path.display()),
            "bs=1M",
            &format!("count={mib}"),
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

/// A two-worker runtime for a test's async part.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
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
    next_record(s)
}

/// The next RPC record on `s`, its fragments joined, however long it is
/// in coming (None at the end of the stream or on an error).
pub fn next_record(s: &mut TcpStream) -> Option<Vec<u8>> {
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
/// `body` as one last-fragment record.
pub fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

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

pub fn sha256_file(p: &Path) -> String {
    let out = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// The URL `tarn mount` mounts `s`'s export by over NFS `vers`, as uid
/// 1000 (the server squashes root).
pub fn mount_url(s: &TestServer, vers: &str) -> String {
    format!(
        "nfs://127.0.0.1:{}/?vers={vers}&uid=1000&gid=1000",
        s.port()
    )
}

use proto::nfs3::*;
use rpc::client::auth_sys;
use rpc::msg::{decode_reply, ReplyStatus};

/// A new connection to `s` and its export's root handle (MNT of "/").
pub fn mounted_root(s: &TestServer) -> (TcpStream, NfsFh3) {
    let mut c = TcpStream::connect(s.addr).unwrap();
    let root = mnt_root(&mut c);
    (c, root)
}

/// [`mounted_root`] over a connection from `ip` (see [`connect_from`]).
pub fn mounted_root_from(s: &TestServer, ip: &str) -> (TcpStream, NfsFh3) {
    let mut c = connect_from(s.addr, ip);
    let root = mnt_root(&mut c);
    (c, root)
}

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

/// The xid and status of the reply to a NULL call (xid 77, AUTH_NONE) on
/// a fresh connection to `s`.
pub fn null_on_new_connection(s: &TestServer) -> (u32, ReplyStatus) {
    let mut c = TcpStream::connect(s.addr).unwrap();
    let rec = call_record(77, NFS_PROGRAM, 3, 0, &rpc::client::auth_none(), &[]);
    let r = raw_call(&mut c, &rec).expect("NULL answered");
    let (xid, st, _) = decode_reply(r.into()).unwrap();
    (xid, st)
}

/// GETATTR of `fh`, as [`nfs_call`] sends it.
pub fn nfs_getattr(c: &mut TcpStream, xid: u32, fh: &NfsFh3) -> Getattr3res {
    nfs_call(
        c,
        xid,
        NFSPROC3_GETATTR,
        &Getattr3args { object: fh.clone() },
    )
}

/// LOOKUP of `name` in `dir`, as [`nfs_call`] sends it.
pub fn nfs_lookup(c: &mut TcpStream, xid: u32, dir: &NfsFh3, name: &str) -> Lookup3res {
    let what = Diropargs3 {
        dir: dir.clone(),
        name: bytes::Bytes::copy_from_slice(name.as_bytes()),
    };
    nfs_call(c, xid, NFSPROC3_LOOKUP, &Lookup3args { what })
}

/// COMMIT of all of `fh`'s data.
pub fn commit_all(fh: &NfsFh3) -> Commit3args {
    Commit3args {
        file: fh.clone(),
        offset: 0,
        count: 0,
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
    connect_from_port(server, ip, 0).expect("connect from another loopback address")
}

/// A connection from `ip` with source port `port` (0: any), or None when
/// the port cannot be bound (a reserved one without privilege).
pub fn connect_from_port(server: SocketAddr, ip: &str, port: u16) -> Option<TcpStream> {
    let rt = current_thread_runtime();
    let ip: std::net::IpAddr = ip.parse().unwrap();
    let t = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_reuseaddr(true).unwrap();
        sock.bind(SocketAddr::new(ip, port)).ok()?;
        sock.connect(server).await.ok()
    })?;
    let std = t.into_std().unwrap();
    std.set_nonblocking(false).unwrap();
    Some(std)
}

/// [`TestServer::start_with`] `extra` and a `--metrics` endpoint on a free
/// port: the server and the endpoint's address.
pub fn start_with_metrics(extra: &[&str]) -> (TestServer, String) {
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut flags = extra.to_vec();
    flags.extend(["--metrics", &maddr]);
    (TestServer::start_with(&flags), maddr)
}

/// `tarn <cmd> --socket <s's admin socket> <args>`: its standard output.
pub fn tarn_admin(s: &TestServer, cmd: &str, args: &[&str]) -> String {
    let sock = s.admin_socket();
    let mut all = vec![cmd, "--socket", sock.to_str().unwrap()];
    all.extend_from_slice(args);
    tarn(&all)
}

/// Runs the tarn binary with `args`: its status, stdout and stderr.
pub fn tarn_output(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args(args)
        .output()
        .unwrap()
}

/// A temporary directory holding one file, `name`, of `text`: the
/// directory (the file goes with it) and the file's path.
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// Asserts that `text` (a tool's output) contains each of `wanted`.
pub fn assert_contains(text: &str, wanted: &[&str]) {
    for w in wanted {
        assert!(text.contains(w), "{text}");
    }
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

/// The mount's own counts (`tarn mount --stats`), once they show `key` at
/// least `min` (the file is written every second).
pub fn mount_status(m: &test_support::fuse::Mounted, key: &str, min: u64) -> serde_json::Value {
    let t = std::time::Instant::now();
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(["mount", "--stats"])
            .arg(&m.dir)
            .output()
            .unwrap();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            if v[key].as_u64().unwrap_or(0) >= min || t.elapsed() > Duration::from_secs(10) {
                return v;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no mount status");
        std::thread::sleep(Duration::from_millis(100));
    }
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

/// File `i` of a test tree: `data`, one of six modes and an mtime (with
/// nanoseconds) of its own.
pub fn tree_file(p: &Path, i: usize, data: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    let modes = [0o644, 0o600, 0o755, 0o640, 0o444, 0o700];
    std::fs::write(p, data).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(modes[i % modes.len()])).unwrap();
    set_mtime(p, 1_500_000_000 + i as u64 * 1000, (i * 7) as u32);
}

/// The directories `dirs` of a test tree under `root` (made before their
/// files) given modes and mtimes of their own, deepest first, once their
/// files are written.
pub fn tree_dir_times(root: &Path, dirs: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    for (i, d) in dirs.iter().enumerate().rev() {
        let p = root.join(d);
        std::fs::set_permissions(
            &p,
            std::fs::Permissions::from_mode(0o750 + (i as u32 % 2) * 5),
        )
        .unwrap();
        set_mtime(&p, 1_400_000_000 + i as u64, 0);
    }
}

/// Relative paths under `root`, sorted, with each one's (mode, mtime,
/// contents' sha or "dir"); a symbolic link as its text (its own mode and
/// times are not copied).
pub fn snapshot(root: &Path) -> Vec<(String, u32, (i64, i64), String)> {
    let mut out = vec![];
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push((rel, 0, (0, 0), format!("-> {}", t.display())));
                continue;
            }
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
