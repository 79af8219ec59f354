//! Faults against a real `tarn serve`: connections that break or stall
//! mid-record or mid-reply, a client that never reads its replies, a
//! record over the limit, a backend that runs out of space or quota or
//! fails with EIO, a state directory that turns read-only or full. Each
//! gets the right error, a log line saying why, and the server keeps
//! serving another client meanwhile.
//!
//! Tests that need root (mounts, quotas) skip with a message without it.

mod common;
use common::*;
use proto::nfs3::*;
use rpc::client::{auth_none, auth_sys};
use rpc::msg::decode_reply;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A NULL call answered on a fresh connection: the server serves others.
fn null_works(s: &TestServer) {
    assert_eq!(null_on_new_connection(s).0, 77);
}

/// Seconds until the server closes `c` (reads return 0 or fail), at most `max`.
fn closed_within(c: &mut TcpStream, max: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = vec![0u8; 1 << 16];
    while t0.elapsed() < max {
        match c.read(&mut b) {
            Ok(0) => return Some(t0.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(t0.elapsed()),
        }
    }
    None
}

/// Waits until the server's log contains `what`.
fn log_says(s: &TestServer, what: &str) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if s.log_text().contains(what) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn is_root() -> bool {
    // The real uid, read from /proc.
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

fn lookup(c: &mut TcpStream, dir: &NfsFh3, n: &str) -> NfsFh3 {
    match nfs_lookup(c, 1, dir, n) {
        Lookup3res::NFS3_OK(ok) => ok.object,
        other => panic!("LOOKUP {n}: {other:?}"),
    }
}

/// READ arguments: `count` bytes at `offset` of `fh`.
fn read_args(fh: &NfsFh3, offset: u64, count: u32) -> Read3args {
    Read3args {
        file: fh.clone(),
        offset,
        count,
    }
}

/// READ of `count` bytes at `offset` of `fh`.
fn read3(c: &mut TcpStream, xid: u32, fh: &NfsFh3, offset: u64, count: u32) -> Read3res {
    nfs_call(c, xid, NFSPROC3_READ, &read_args(fh, offset, count))
}

fn read_record_of(xid: u32, fh: &NfsFh3, count: u32) -> Vec<u8> {
    call_record(
        xid,
        NFS_PROGRAM,
        3,
        NFSPROC3_READ,
        &auth_sys(1000, 1000, &[], "t"),
        &xdr::to_bytes(&read_args(fh, 0, count)),
    )
}

#[test]
fn a_record_begun_and_not_finished_is_closed_after_the_timeout() {
    let (s, maddr) = start_with_metrics(&["--record-timeout", "1", "--idle-timeout", "3"]);
    // A record header promising 100 bytes, then 10 of them, then nothing.
    let mut stalled = TcpStream::connect(s.addr).unwrap();
    stalled
        .write_all(&(0x8000_0000u32 | 100).to_be_bytes())
        .unwrap();
    stalled.write_all(&[0u8; 10]).unwrap();
    let stalled_at = std::time::Instant::now();
    // Only a header.
    let mut header_only = TcpStream::connect(s.addr).unwrap();
    header_only
        .write_all(&(0x8000_0000u32 | 100).to_be_bytes())
        .unwrap();
    // An idle connection that has been served: it outlives the stalled ones.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    raw_call(
        &mut idle,
        &call_record(1, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .unwrap();
    // Others are served while the stalled ones wait.
    null_works(&s);
    // Timed from when its bytes were sent, not from when this wait began
    // (serving the others above can take a while on a busy machine).
    let waited = stalled_at.elapsed();
    let t = waited
        + closed_within(&mut stalled, Duration::from_secs(5)).expect("stalled record closed");
    assert!(
        t >= Duration::from_millis(700),
        "closed after {t:?}, before the timeout"
    );
    assert!(closed_within(&mut header_only, Duration::from_secs(2)).is_some());
    assert!(log_says(&s, "a record was begun and not finished in time"));
    // The idle connection is still open (3 s idle timeout), and served.
    let r = raw_call(
        &mut idle,
        &call_record(2, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .expect("the idle connection is still served");
    assert_eq!(decode_reply(r.into()).unwrap().0, 2);
    // Then left idle, it is closed after its own timeout.
    let t = closed_within(&mut idle, Duration::from_secs(6)).expect("idle connection closed");
    assert!(t >= Duration::from_secs(2), "idle closed after {t:?}");
    assert!(log_says(&s, "closing idle connection"));
    null_works(&s);
    let m = metrics_text(&maddr);
    assert!(
        m.contains(r#"tarn_connections_closed_by_server_total{reason="stalled_record"} 2"#),
        "{m}"
    );
    assert!(
        m.contains(r#"tarn_connections_closed_by_server_total{reason="idle"} 1"#),
        "{m}"
    );
}

#[test]
fn connections_dropped_mid_record_and_mid_reply_hurt_no_one() {
    let s = TestServer::start();
    std::fs::write(s.export.join("big"), vec![7u8; 1 << 20]).unwrap();
    let (mut c, root) = mounted_root(&s);
    let fh = lookup(&mut c, &root, "big");
    for round in 0..10 {
        // Mid-record: half a READ call, then gone.
        let rec = read_record_of(round, &fh, 1 << 20);
        let mut a = TcpStream::connect(s.addr).unwrap();
        a.write_all(&rec[..rec.len() / 2]).unwrap();
        drop(a);
        // Mid-reply: eight 1 MiB READs, a few bytes of the first reply
        // read, then gone (the close resets what the server still sends).
        let mut b = TcpStream::connect(s.addr).unwrap();
        for i in 0..8 {
            b.write_all(&read_record_of(100 + i, &fh, 1 << 20)).unwrap();
        }
        let mut some = [0u8; 1000];
        b.read_exact(&mut some).unwrap();
        drop(b);
    }
    // The first connection and new ones are served, and the data is whole.
    let r = read3(&mut c, 9, &fh, 0, 1 << 20);
    let Read3res::NFS3_OK(ok) = r else {
        panic!("READ: {r:?}")
    };
    assert_eq!(ok.data.len(), 1 << 20);
    null_works(&s);
    let mut s = s;
    assert!(s.alive());
}

#[test]
fn a_record_over_the_limit_closes_its_connection_only() {
    let s = TestServer::start();
    let mut bystander = TcpStream::connect(s.addr).unwrap();
    let limit = rpc::record::DEFAULT_MAX_RECORD;
    // One fragment one byte over the limit, its bytes really sent.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(&(0x8000_0000u32 | (limit as u32 + 1)).to_be_bytes())
        .unwrap();
    let _ = c.write_all(&vec![0u8; 64 << 10]);
    assert!(closed_within(&mut c, Duration::from_secs(5)).is_some());
    // Fragments that add up past it.
    let mut c = TcpStream::connect(s.addr).unwrap();
    let frag = vec![0u8; 512 << 10];
    let mut refused = false;
    for _ in 0..3 {
        let h = (frag.len() as u32).to_be_bytes();
        if c.write_all(&h).and_then(|_| c.write_all(&frag)).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused || closed_within(&mut c, Duration::from_secs(5)).is_some());
    assert!(log_says(&s, "closing connection: bad record"));
    assert!(s.log_text().contains("exceeds the maximum"));
    let r = raw_call(
        &mut bystander,
        &call_record(5, NFS_PROGRAM, 3, 0, &auth_none(), &[]),
    )
    .expect("bystander served");
    assert_eq!(decode_reply(r.into()).unwrap().0, 5);
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_client_that_never_reads_its_replies_is_paused_then_closed() {
    let (s, maddr) = start_with_metrics(&[
        "--max-queued-reply-bytes",
        "2097152",
        "--send-timeout",
        "2",
        "--max-calls-per-connection",
        "16",
    ]);
    let pid = s.child.as_ref().unwrap().id();
    std::fs::write(s.export.join("big"), vec![7u8; 1 << 20]).unwrap();
    let (mut c, root) = mounted_root(&s);
    let fh = lookup(&mut c, &root, "big");
    let before = rss_kib(pid);
    // 600 READs of 1 MiB each (small calls, all taken by the kernel at
    // once), none of whose replies is read: 600 MiB asked for.
    let mut hog = TcpStream::connect(s.addr).unwrap();
    let reqs: Vec<u8> = (0..600)
        .flat_map(|i| read_record_of(1000 + i, &fh, 1 << 20))
        .collect();
    hog.write_all(&reqs).unwrap();
    // The server says it stopped reading, and serves others meanwhile.
    assert!(log_says(&s, "client is not reading its replies"));
    let t0 = Instant::now();
    let mut peak = 0;
    while t0.elapsed() < Duration::from_secs(1) {
        null_works(&s);
        let r: Getattr3res = nfs_call(
            &mut c,
            3,
            NFSPROC3_GETATTR,
            &Getattr3args { object: fh.clone() },
        );
        assert!(matches!(r, Getattr3res::NFS3_OK(_)), "{r:?}");
        peak = peak.max(rss_kib(pid));
    }
    // Then it closes the hog's connection.
    assert!(log_says(
        &s,
        "closing connection: the client has not read its replies"
    ));
    peak = peak.max(rss_kib(pid));
    // Held at most: the calls running (16 replies of 1 MiB) and the
    // queued bytes (2 MiB), plus the allocator's slack; far from the 600
    // MiB asked for.
    let grew = peak.saturating_sub(before) / 1024;
    eprintln!("server RSS grew by {grew} MiB");
    assert!(grew < 100, "server RSS grew by {grew} MiB");
    // The hog's connection is gone: draining what the kernel held for it
    // ends well short of the 600 MiB.
    hog.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = vec![0u8; 1 << 20];
    let mut got = 0usize;
    loop {
        match hog.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(got < 300 << 20, "{got} bytes of replies after the close");
    null_works(&s);
    let m = metrics_text(&maddr);
    assert!(
        m.contains(r#"tarn_connections_closed_by_server_total{reason="unread"} 1"#),
        "{m}"
    );
    assert!(!m.contains("tarn_reading_paused_total 0"), "{m}");
}

static XID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(5000);

/// A fresh xid per call, so no reply comes from the duplicate request cache.
fn xid() -> u32 {
    XID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// WRITE: the count acknowledged, or the error.
fn write3(
    c: &mut TcpStream,
    fh: &NfsFh3,
    offset: u64,
    len: usize,
    stable: StableHow,
) -> Result<u32, Nfsstat3> {
    let a = Write3args {
        file: fh.clone(),
        offset,
        count: len as u32,
        stable,
        data: bytes::Bytes::from(vec![(offset / 4096) as u8 | 1; len]),
    };
    match nfs_call::<_, Write3res>(c, xid(), NFSPROC3_WRITE, &a) {
        Write3res::NFS3_OK(ok) => {
            assert!(ok.count as usize <= len);
            if stable != StableHow::UNSTABLE {
                assert_ne!(
                    ok.committed,
                    StableHow::UNSTABLE,
                    "a stable write reported unstable"
                );
            }
            Ok(ok.count)
        }
        Write3res::Default(s, _) => Err(s),
    }
}

fn size3(c: &mut TcpStream, fh: &NfsFh3) -> u64 {
    match nfs_call::<_, Getattr3res>(
        c,
        xid(),
        NFSPROC3_GETATTR,
        &Getattr3args { object: fh.clone() },
    ) {
        Getattr3res::NFS3_OK(ok) => ok.obj_attributes.size,
        other => panic!("GETATTR: {other:?}"),
    }
}

/// A server exporting a fresh 16 MiB ext4 image (half of it reserved for
/// root, as `mkfs -m 50`) mounted in its own mount namespace, with the
/// debug fault injection on (eio-*, edquot-* files). None without root or
/// loop devices.
fn server_on_small_ext4() -> Option<(TestServer, tempfile::TempDir)> {
    if !is_root() {
        eprintln!("skipped: mounting a loop filesystem needs root");
        return None;
    }
    let (tmp, export, state) = temp_export();
    let img = tmp.path().join("fs.img");
    let mkfs = format!(
        "truncate -s 16M {0} && mkfs.ext4 -q -F -m 50 {0}",
        img.display()
    );
    let mount = format!("mount -o loop {} {}", img.display(), export.display());
    // `argv` ran and succeeded; else the test is skipped, saying `why`.
    let runs = |argv: &[&str], why: &str| {
        let ok = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("skipped: {why}");
        }
        ok
    };
    if !runs(
        &["sh", "-c", &mkfs],
        "cannot make an ext4 image (mkfs.ext4)",
    ) || !runs(
        &["unshare", "--mount", "sh", "-c", &mount],
        "cannot mount a loop device here",
    ) {
        return None;
    }
    let s = launch_on_image(&export, &state, &img);
    Some((s, tmp))
}

/// `tarn serve` on the image `img` mounted at `export` in its own mount
/// namespace (gone with the server), with the debug fault injection on.
fn launch_on_image(export: &Path, state: &Path, img: &Path) -> TestServer {
    let script = r#"mount -o loop "$IMG" "$EXPORT" && chmod 0777 "$EXPORT" && exec "$@""#;
    let wrapper = mount_ns_wrapper(&[("EXPORT", export), ("IMG", img)], script);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    TestServer::launch(
        export,
        state,
        free_port(),
        &["--debug-inject-faults"],
        &wrapper,
    )
}

#[test]
fn storage_errors_over_nfsv3() {
    let Some((mut s, tmp)) = server_on_small_ext4() else {
        return;
    };
    let (mut c, root) = mounted_root(&s);
    let (mut other, other_root) = mounted_root(&s);
    let mut others_served = || {
        null_works(&s);
        size3(&mut other, &other_root);
    };

    // Quota: a write reaching past it is partial and says so; the next
    // fails with DQUOT; what was acknowledged is what the file holds.
    let q = create3(&mut c, xid(), &root, "edquot-1");
    assert_eq!(
        write3(&mut c, &q, 0, 48 << 10, StableHow::FILE_SYNC),
        Ok(48 << 10)
    );
    assert_eq!(
        write3(&mut c, &q, 48 << 10, 48 << 10, StableHow::FILE_SYNC),
        Ok(16 << 10),
        "the count written, not the count asked"
    );
    assert_eq!(
        write3(&mut c, &q, 64 << 10, 4096, StableHow::FILE_SYNC),
        Err(Nfsstat3::NFS3ERR_DQUOT)
    );
    assert_eq!(size3(&mut c, &q), 64 << 10);
    others_served();

    // EIO: a stable write that could not be flushed is an error, never a
    // success; an unstable one is taken, and its COMMIT fails.
    let e = create3(&mut c, xid(), &root, "eio-1");
    assert_eq!(
        write3(&mut c, &e, 0, 8192, StableHow::FILE_SYNC),
        Err(Nfsstat3::NFS3ERR_IO)
    );
    assert_eq!(
        write3(&mut c, &e, 0, 8192, StableHow::DATA_SYNC),
        Err(Nfsstat3::NFS3ERR_IO)
    );
    assert_eq!(write3(&mut c, &e, 0, 8192, StableHow::UNSTABLE), Ok(8192));
    let r: Commit3res = nfs_call(&mut c, xid(), NFSPROC3_COMMIT, &commit_all(&e));
    assert!(
        matches!(r, Commit3res::Default(Nfsstat3::NFS3ERR_IO, _)),
        "COMMIT: {r:?}"
    );
    let r = read3(&mut c, xid(), &e, 0, 4096);
    assert!(
        matches!(r, Read3res::Default(Nfsstat3::NFS3ERR_IO, _)),
        "READ: {r:?}"
    );
    others_served();

    // A real full filesystem: writes as uid 1000 until NOSPC. Half the
    // image is kept for root, and the server acting for a user does not
    // get it (CAP_SYS_RESOURCE dropped, as knfsd does).
    let f = create3(&mut c, xid(), &root, "fill");
    let mut acked = 0u64;
    let status = loop {
        match write3(&mut c, &f, acked, 256 << 10, StableHow::FILE_SYNC) {
            Ok(n) => acked += n as u64,
            Err(s) => break s,
        }
        assert!(acked < 32 << 20, "16 MiB filesystem never full");
    };
    assert_eq!(status, Nfsstat3::NFS3ERR_NOSPC);
    assert_eq!(
        size3(&mut c, &f),
        acked,
        "acknowledged = what the file holds"
    );
    assert!(
        acked < 10 << 20,
        "{acked} bytes written by uid 1000: the root reserve was used"
    );
    others_served();
    for what in ["NFS3ERR_NOSPC", "NFS3ERR_DQUOT", "NFS3ERR_IO"] {
        assert!(log_says(&s, what), "no log line for {what}");
    }
    // What was acknowledged FILE_SYNC is there after a crash, whole.
    let (export, state) = (s.export.clone(), s.state.clone());
    s.crash();
    let s = launch_on_image(&export, &state, &tmp.path().join("fs.img"));
    let (mut c, root) = mounted_root(&s);
    let f = lookup(&mut c, &root, "fill");
    assert_eq!(size3(&mut c, &f), acked);
    let mut off = 0u64;
    while off < acked {
        let r = read3(&mut c, xid(), &f, off, 1 << 20);
        let Read3res::NFS3_OK(ok) = r else {
            panic!("READ after the restart: {r:?}")
        };
        assert!(!ok.data.is_empty());
        // write3 fills each 4 KiB block with (offset / 4096) | 1 of its write.
        for (i, chunk) in ok.data.chunks(256 << 10).enumerate() {
            let w = off + (i as u64) * (256 << 10);
            assert!(
                chunk.iter().all(|&b| b == (w / 4096) as u8 | 1),
                "data at {w} not what was written"
            );
        }
        off += ok.data.len() as u64;
    }
    let q = lookup(&mut c, &root, "edquot-1");
    assert_eq!(size3(&mut c, &q), 64 << 10);
}

/// The process whose parent is `pid` (the server under `unshare --fork`).
fn child_of(pid: u32) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            return Some(p);
        }
    }
    None
}

/// Runs `script` in the server's mount namespace.
fn in_server_ns(server_pid: u32, script: &str) -> bool {
    std::process::Command::new("nsenter")
        .args(["-t", &server_pid.to_string(), "-m", "sh", "-c", script])
        .status()
        .is_ok_and(|s| s.success())
}

/// An NLM LOCK (monitored) by a host named after `who`.
async fn nlm_lock(addr: std::net::SocketAddr, fh: &NfsFh3, who: &str) -> proto::nlm4::Nlm4Stats {
    use proto::nlm4::*;
    use xdr::Unpack;
    let host = bytes::Bytes::from(format!("host-{who}"));
    let c = rpc::client::RpcClient::connect(addr, auth_sys(0, 0, &[], "h"))
        .await
        .unwrap();
    let a = Nlm4Lockargs {
        cookie: Netobj(bytes::Bytes::from_static(b"c")),
        block: false,
        exclusive: true,
        alock: Nlm4Lock {
            caller_name: host.clone(),
            fh: Netobj(fh.data.clone()),
            oh: Netobj(host),
            svid: 1,
            // A byte of its own per host: the hosts do not conflict.
            l_offset: who.len() as u64,
            l_len: 1,
        },
        reclaim: false,
        state: 1,
    };
    let mut d = c.call(NLM_PROG, 4, NLMPROC4_LOCK, &a).await.unwrap();
    Nlm4Res::unpack(&mut d).unwrap().stat.stat
}

/// An NFSv4.0 client set up (SETCLIENTID, SETCLIENTID_CONFIRM), or the error.
async fn v40(
    addr: std::net::SocketAddr,
) -> Result<std::sync::Arc<client::nfs40::Client40>, client::nfs4::Error> {
    let conn = client::nfs4::Nfs4Conn::connect(addr, 1002, 1002).await?;
    let o = client::nfs40::Options40 {
        retry_for: Duration::ZERO,
        renew: false,
        ..Default::default()
    };
    client::nfs40::Client40::establish(conn, &o).await
}

fn v41(uid: u32) -> client::nfs4::SessionOptions {
    client::nfs4::SessionOptions {
        security: client::nfs4::Security::Sys { uid, gid: uid },
        delay_retry_for: Duration::ZERO,
        callbacks: false,
        ..Default::default()
    }
}

#[test]
fn state_directory_read_only_or_full_refuses_new_clients_until_it_recovers() {
    if !is_root() {
        eprintln!("skipped: mounting a tmpfs state directory needs root");
        return;
    }
    // The state directory is a 1 MiB tmpfs in the server's own mount
    // namespace (the log stays in the directory beneath, where the test
    // reads it).
    let (_tmp, export, state) = temp_export();
    let script = r#"mount -t tmpfs -o size=1m tmpfs "$STATE" && exec "$@""#;
    let wrapper = mount_ns_wrapper(&[("STATE", &state)], script);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let s = TestServer::launch(&export, &state, free_port(), &["--grace", "0"], &wrapper);
    std::fs::write(export.join("locked"), b"x").unwrap();
    let locked = {
        let (mut c, root) = mounted_root(&s);
        lookup(&mut c, &root, "locked")
    };
    let pid = child_of(s.child.as_ref().unwrap().id()).expect("the server process");
    let st = state.display().to_string();
    let rt = current_thread_runtime();
    use client::nfs4::Session;
    use proto::nfs4::Nfsstat4;
    rt.block_on(async {
        // A client recorded while all is well.
        let a = Session::connect(s.addr, &v41(1000)).await.unwrap();
        let root = a.lookup_path("/").await.unwrap();
        for (break_it, mend_it, what) in [
            // A read-only bind mount over it (the directory's own mount is
            // busy: the server holds its lock file open for writing).
            (
                format!("mount --bind {st} {st} && mount -o remount,bind,ro {st}"),
                format!("umount {st}"),
                "read-only",
            ),
            (
                format!("dd if=/dev/zero of={st}/fill bs=64k 2>/dev/null; true"),
                format!("rm {st}/fill"),
                "full",
            ),
        ] {
            assert!(in_server_ns(pid, &break_it), "{break_it}");
            // A new client cannot be recorded: refused, to retry later.
            let e = Session::connect(s.addr, &v41(1001))
                .await
                .err()
                .unwrap_or_else(|| {
                    panic!("a new client confirmed with the state directory {what}")
                });
            assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_DELAY), "{what}: {e}");
            assert!(log_says(
                &s,
                "the state directory cannot record a new NFSv4 client"
            ));
            // Nor an NFSv4.0 client (SETCLIENTID_CONFIRM).
            let e = v40(s.addr).await.err().expect("a 4.0 client confirmed");
            assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_DELAY), "{what}: {e}");
            // Nor a new NLM lock holder (it could not be told to reclaim).
            assert_eq!(
                nlm_lock(s.addr, &locked, what).await,
                proto::nlm4::Nlm4Stats::NLM4_DENIED_NOLOCKS
            );
            assert!(log_says(&s, "cannot record lock holder in stable storage"));
            // The recorded client and NFSv3 clients are served meanwhile.
            let (sid, fh) = a
                .open(&root, &format!("f-{what}"), Some(0o644), 3)
                .await
                .unwrap();
            let w = a
                .write(
                    &sid,
                    &fh,
                    0,
                    bytes::Bytes::from_static(b"still served"),
                    proto::nfs4::StableHow4::FILE_SYNC4,
                )
                .await
                .unwrap();
            assert_eq!(w.count, 12);
            a.close(&fh, &sid).await.unwrap();
            null_works(&s);
            // Writable again: the same kind of client gets in.
            assert!(in_server_ns(pid, &mend_it), "{mend_it}");
            let b = Session::connect(s.addr, &v41(1001))
                .await
                .unwrap_or_else(|e| panic!("after the state directory was {what}: {e}"));
            b.lookup_path("/").await.unwrap();
            v40(s.addr).await.unwrap();
            assert_eq!(
                nlm_lock(s.addr, &locked, what).await,
                proto::nlm4::Nlm4Stats::NLM4_GRANTED
            );
        }
    });
}

#[test]
fn storage_errors_over_nfsv41() {
    let Some((s, _tmp)) = server_on_small_ext4() else {
        return;
    };
    use client::nfs4::Session;
    use proto::nfs4::{Nfsstat4, StableHow4};
    let (mut other, other_root) = mounted_root(&s);
    let mut others_served = || {
        null_works(&s);
        size3(&mut other, &other_root);
    };
    let rt = current_thread_runtime();
    rt.block_on(async {
        let a = Session::connect(s.addr, &v41(1000)).await.unwrap();
        let root = a.lookup_path("/").await.unwrap();
        let data = |n: usize| bytes::Bytes::from(vec![0x5au8; n]);
        let both = proto::nfs4::OPEN4_SHARE_ACCESS_BOTH;

        // Quota: partial write reported as such, then DQUOT.
        let (sid, q) = a.open(&root, "edquot-4", Some(0o644), both).await.unwrap();
        let w = a.write(&sid, &q, 0, data(48 << 10), StableHow4::FILE_SYNC4);
        assert_eq!(w.await.unwrap().count, 48 << 10);
        let w = a.write(&sid, &q, 48 << 10, data(48 << 10), StableHow4::FILE_SYNC4);
        assert_eq!(w.await.unwrap().count, 16 << 10, "the count written");
        let e = a
            .write(&sid, &q, 64 << 10, data(4096), StableHow4::FILE_SYNC4)
            .await
            .unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_DQUOT), "{e}");
        assert_eq!(a.stat(&q).await.unwrap().size, Some(64 << 10));
        others_served();

        // EIO: never a stable success; COMMIT and READ fail.
        let (sid, f) = a.open(&root, "eio-4", Some(0o644), both).await.unwrap();
        for how in [StableHow4::FILE_SYNC4, StableHow4::DATA_SYNC4] {
            let e = a.write(&sid, &f, 0, data(8192), how).await.unwrap_err();
            assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_IO), "{e}");
        }
        let w = a.write(&sid, &f, 0, data(8192), StableHow4::UNSTABLE4);
        assert_eq!(w.await.unwrap().count, 8192);
        let e = a.commit(&f, 0, 0).await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_IO), "{e}");
        let e = a.read(&sid, &f, 0, 4096).await.unwrap_err();
        assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_IO), "{e}");
        others_served();

        // A real full filesystem (the root reserve not given to uid 1000).
        let (sid, f) = a.open(&root, "fill", Some(0o644), both).await.unwrap();
        let mut acked = 0u64;
        let status = loop {
            match a
                .write(&sid, &f, acked, data(256 << 10), StableHow4::FILE_SYNC4)
                .await
            {
                Ok(w) => acked += w.count as u64,
                Err(e) => break e.status(),
            }
            assert!(acked < 32 << 20, "16 MiB filesystem never full");
        };
        assert_eq!(status, Some(Nfsstat4::NFS4ERR_NOSPC));
        assert_eq!(a.stat(&f).await.unwrap().size, Some(acked));
        assert!(acked < 10 << 20, "{acked} bytes: the root reserve was used");
        others_served();
    });
    for what in ["NFS4ERR_NOSPC", "NFS4ERR_DQUOT", "NFS4ERR_IO"] {
        assert!(log_says(&s, what), "no log line for {what}");
    }
}

fn commit3(c: &mut TcpStream, fh: &NfsFh3) -> Result<[u8; 8], Nfsstat3> {
    let r: Commit3res = nfs_call(c, xid(), NFSPROC3_COMMIT, &commit_all(fh));
    match r {
        Commit3res::NFS3_OK(ok) => Ok(ok.verf),
        Commit3res::Default(s, _) => Err(s),
    }
}

fn write3_verf(c: &mut TcpStream, fh: &NfsFh3, stable: StableHow) -> [u8; 8] {
    let a = Write3args {
        file: fh.clone(),
        offset: 0,
        count: 4096,
        stable,
        data: bytes::Bytes::from(vec![1u8; 4096]),
    };
    match nfs_call::<_, Write3res>(c, xid(), NFSPROC3_WRITE, &a) {
        Write3res::NFS3_OK(ok) => ok.verf,
        other => panic!("WRITE: {other:?}"),
    }
}

/// Writeback fails once; the kernel tells only the first fsync. The
/// COMMIT that hears it fails, and the write verifier changes, so that
/// a later COMMIT that succeeds does not vouch for the lost unstable
/// data (the client sees a new verifier and sends it again), for NFSv3
/// and NFSv4.1 clients alike.
#[test]
fn a_lost_write_changes_the_write_verifier() {
    let s = TestServer::start_with(&["--debug-inject-faults"]);
    let (mut c, root) = mounted_root(&s);
    let f = create3(&mut c, xid(), &root, "lostwrite-1");
    let plain = create3(&mut c, xid(), &root, "plain");
    let v1 = write3_verf(&mut c, &f, StableHow::UNSTABLE);
    assert_eq!(commit3(&mut c, &f), Err(Nfsstat3::NFS3ERR_IO));
    let v2 = commit3(&mut c, &f).expect("the retry succeeds");
    assert_ne!(v1, v2, "a COMMIT after lost data vouched for it");
    // The new verifier is the server's, for every file and both protocols.
    assert_eq!(write3_verf(&mut c, &plain, StableHow::UNSTABLE), v2);
    let rt = current_thread_runtime();
    rt.block_on(async {
        let a = client::nfs4::Session::connect(s.addr, &v41(1000))
            .await
            .unwrap();
        let r = a.lookup_path("/").await.unwrap();
        let fh = a.lookup(&r, "plain").await.unwrap();
        assert_eq!(a.commit(&fh, 0, 0).await.unwrap(), v2);
    });
    assert!(log_says(&s, "new write verifier"));
}
