//! `tarn serve` over a CephFS (a throwaway cluster on loopback, started by
//! scripts/ceph-cluster.sh): files, a tree, rename and remove through Tarn's
//! client tools and libnfs, then two heads over the same file system: what
//! one writes the other reads, and a file handle one issued works on the
//! other (both have the same handle key and export list) and on itself
//! after a restart. Locks through one head conflict with the other head
//! (NFSv4.1 and NLM, both ways), are free again after an unlock, and after
//! the holding head is killed and restarted.
//!
//! Skipped with a message when Ceph is not installed, unless
//! TARN_REQUIRE_CEPH=1 (scripts/deps.sh --ceph installs it).
//!
//!   cargo test -p tarn --test cephfs -- --nocapture

mod common;
use common::*;
use proto::nfs3::*;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use test_support::ceph::Cluster;
use test_support::etcd::Etcd;
use test_support::server::{kill, libnfs_url, spawn_serving, terminate};

/// One `tarn serve --config` (a head), stopped by PID on drop.
struct Head {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Head {
    fn start(config: &Path, state: &Path) -> Head {
        Head::start_with(config, state, &[])
    }

    fn start_with(config: &Path, state: &Path, extra: &[&str]) -> Head {
        std::fs::create_dir_all(state).unwrap();
        let port = free_port();
        let log = state.join("server.log");
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
        cmd.args(["serve", "--config"])
            .arg(config)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
            .arg(state)
            .args(extra);
        let (child, _) = spawn_serving(&mut cmd, &log, "head");
        Head { child, port, log }
    }

    /// A URL for Tarn's tools (NFSv4.1), acting as uid/gid 1000.
    fn url(&self, path: &str) -> String {
        format!(
            "nfs://127.0.0.1:{}/{}?uid=1000&gid=1000",
            self.port,
            path.trim_start_matches('/')
        )
    }

    /// An NFSv3 URL for libnfs.
    fn libnfs_url(&self, path: &str) -> String {
        libnfs_url(self.port, path)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Head {
    /// SIGKILL: a crash (the process is gone when this returns).
    fn crash(&mut self) {
        kill(&mut self.child);
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_some() {
            return; // crashed already
        }
        terminate(&mut self.child);
    }
}

fn tree_files(root: &Path) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for d in 0..3 {
        for f in 0..10 {
            let rel = format!("d{d}/f{f}");
            v.push((rel.clone(), sha256_file(&root.join(rel))));
        }
    }
    v
}

/// One throwaway Ceph cluster at a time: each test starts its own, and
/// two at once would share this machine's two cores.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A test's cluster (one test at a time), with `/nfs` made, its work
/// directory and the heads' configuration there; dropped in this order:
/// the work directory, the cluster, the turn.
struct Setup {
    config: PathBuf,
    work: tempfile::TempDir,
    cl: Cluster,
    _one: std::sync::MutexGuard<'static, ()>,
}

/// None when Ceph is not installed (the test is skipped). `nfs4` is the
/// configuration's [nfs4] section.
fn setup(prefix: &str, nfs4: &str) -> Option<Setup> {
    let one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let cl = Cluster::start("cephfs test", vfs::cephfs::available())?;
    make_export_dir(&cl);
    let work = test_support::var_tmp(prefix);
    Some(Setup {
        config: nfs_config(&cl, work.path(), nfs4),
        work,
        cl,
        _one: one,
    })
}

/// Makes `/nfs` in the file system, writable by the test's uid 1000.
fn make_export_dir(cl: &Cluster) {
    let fs = vfs::cephfs::CephFs::new(&vfs::cephfs::CephConfig {
        path: "/".into(),
        conf: Some(cl.conf().display().to_string()),
        ..Default::default()
    })
    .unwrap();
    use vfs::Core;
    fs.mkdir(
        &vfs::Cred::root(),
        &fs.root(),
        b"nfs",
        &vfs::SetAttr::mode(0o777),
    )
    .unwrap();
}

/// A head's configuration in `w`: the cluster's /nfs exported as /, with
/// `nfs4` as the [nfs4] section.
fn nfs_config(cl: &Cluster, w: &Path, nfs4: &str) -> PathBuf {
    let config = w.join("tarn.toml");
    std::fs::write(
        &config,
        format!(
            "[nfs4]\n{nfs4}\n\n[[export]]\npath = \"cephfs:///nfs\"\nceph_conf = \"{}\"\npseudo = \"/\"\nclients = [\"127.0.0.1/32\"]\n",
            cl.conf().display()
        ),
    )
    .unwrap();
    config
}

/// Heads A and B (state in `w`/state-a and state-b) serving `config`.
fn two_heads(config: &Path, w: &Path) -> (Head, Head) {
    let t = Instant::now();
    let a = Head::start(config, &w.join("state-a"));
    eprintln!("head A serving in {:.1?}", t.elapsed());
    // Every head signs handles with the same key (and numbers the exports
    // the same way: one export, id 0, in a fresh state directory).
    std::fs::create_dir_all(w.join("state-b")).unwrap();
    std::fs::copy(w.join("state-a/handle.key"), w.join("state-b/handle.key")).unwrap();
    let b = Head::start(config, &w.join("state-b"));
    (a, b)
}

#[test]
fn two_heads_over_one_cephfs() {
    // No grace after a start: NLM locks are granted at once.
    let Some(setup) = setup("tarn-ceph-e2e-", "grace_seconds = 0") else {
        return;
    };
    let (config, w) = (&setup.config, setup.work.path());
    let check = tarn(&["check-config", config.to_str().unwrap()]);
    assert!(check.contains("CephFS /nfs"), "{check}");
    let (a, b) = two_heads(config, w);

    // A file in through head A with libnfs (NFSv3), out through head B
    // with Tarn's client (NFSv4.1).
    let src = w.join("src.bin");
    random_file(&src, 8);
    let t = Instant::now();
    let out = libnfs(
        "nfs-cp",
        &[src.to_str().unwrap(), &a.libnfs_url("/big.bin")],
    );
    assert!(
        out.status.success(),
        "nfs-cp: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        a.log_text()
    );
    eprintln!("8 MiB in through A (libnfs, NFSv3) in {:.1?}", t.elapsed());
    let back = w.join("back.bin");
    let t = Instant::now();
    tarn(&["cp", "-q", &b.url("/big.bin"), back.to_str().unwrap()]);
    eprintln!(
        "8 MiB out through B (tarn cp, NFSv4.1) in {:.1?}",
        t.elapsed()
    );
    assert_eq!(
        sha256_file(&back),
        sha256_file(&src),
        "B reads what A wrote"
    );
    let out = libnfs("nfs-ls", &[&b.libnfs_url("/")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("big.bin"));

    // A tree in through B, back out through A.
    let tree = w.join("tree");
    for d in 0..3 {
        std::fs::create_dir_all(tree.join(format!("d{d}"))).unwrap();
        for f in 0..10 {
            let data: Vec<u8> = (0..(f * 1000 + d)).map(|i| (i * 31 + f) as u8).collect();
            std::fs::write(tree.join(format!("d{d}/f{f}")), data).unwrap();
        }
    }
    let out = tarn_output(&["cp", "-q", "-r", tree.to_str().unwrap(), &b.url("/tree")]);
    assert!(
        out.status.success(),
        "tarn cp -r through B: {}\nB's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        b.log_text()
    );
    let tree_back = w.join("tree-back");
    tarn(&[
        "cp",
        "-q",
        "-r",
        &a.url("/tree"),
        tree_back.to_str().unwrap(),
    ]);
    assert_eq!(tree_files(&tree_back), tree_files(&tree));

    // Rename through A, seen through B; remove through B, gone on A.
    tarn(&["mv", &a.url("/tree/d0/f0"), &a.url("/renamed")]);
    let ls = tarn(&["ls", &b.url("/")]);
    assert!(ls.contains("renamed"), "{ls}");
    let ls = tarn(&["ls", &b.url("/tree/d0")]);
    assert!(!ls.lines().any(|l| l.trim() == "f0"), "{ls}");
    tarn(&["rm", "-r", &b.url("/tree")]);
    tarn(&["rm", &b.url("/renamed")]);
    let ls = tarn(&["ls", &a.url("/")]);
    assert!(!ls.contains("tree") && !ls.contains("renamed"), "{ls}");

    // A handle from head A works on head B: same root handle, and a file
    // A created answers GETATTR on B with the same file id.
    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let mut cb = TcpStream::connect(("127.0.0.1", b.port)).unwrap();
    let root_a = mnt_root(&mut ca);
    let root_b = mnt_root(&mut cb);
    assert_eq!(root_a, root_b, "both heads issue the same root handle");
    let fh = create3(&mut ca, 2, &root_a, "from-a");
    let (Getattr3res::NFS3_OK(on_a), Getattr3res::NFS3_OK(on_b)) =
        (nfs_getattr(&mut ca, 3, &fh), nfs_getattr(&mut cb, 3, &fh))
    else {
        panic!(
            "GETATTR of A's handle on both heads; B's log: {}",
            b.log_text()
        );
    };
    assert_eq!(on_a.obj_attributes.fileid, on_b.obj_attributes.fileid);
    let w3: Write3res = nfs_call(
        &mut cb,
        4,
        NFSPROC3_WRITE,
        &Write3args {
            file: fh.clone(),
            offset: 0,
            count: 5,
            stable: StableHow::FILE_SYNC,
            data: bytes::Bytes::from_static(b"hello"),
        },
    );
    assert!(matches!(w3, Write3res::NFS3_OK(_)), "{w3:?}");
    let r3: Read3res = nfs_call(
        &mut ca,
        5,
        NFSPROC3_READ,
        &Read3args {
            file: fh.clone(),
            offset: 0,
            count: 100,
        },
    );
    let Read3res::NFS3_OK(r3) = r3 else {
        panic!("READ on A: {r3:?}")
    };
    assert_eq!(
        &r3.data[..],
        b"hello",
        "A reads what B wrote through A's handle"
    );
    // Head A restarts (a new libcephfs client, same state directory): the
    // handle it issued before still works.
    drop(ca);
    drop(a);
    let a = Head::start(config, &w.join("state-a"));
    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let Getattr3res::NFS3_OK(again) = nfs_getattr(&mut ca, 8, &fh) else {
        panic!("GETATTR after A's restart; log: {}", a.log_text());
    };
    assert_eq!(again.obj_attributes.fileid, on_a.obj_attributes.fileid);
    assert_eq!(again.obj_attributes.size, 5);
    // Removed through B: A's handle is stale on A too.
    let rm: Remove3res = nfs_call(
        &mut cb,
        6,
        NFSPROC3_REMOVE,
        &Remove3args {
            object: Diropargs3 {
                dir: root_b.clone(),
                name: bytes::Bytes::from_static(b"from-a"),
            },
        },
    );
    assert!(matches!(rm, Remove3res::NFS3_OK(_)), "{rm:?}");
    assert_eq!(
        nfs_getattr(&mut ca, 7, &fh),
        Getattr3res::Default(Nfsstat3::NFS3ERR_STALE)
    );

    // Head A crashes holding capabilities on a file it just wrote; when it
    // comes back (same state directory, so the same Ceph client uuid) the
    // MDS drops the dead session at once, and B's write to that file does
    // not wait for the old session to time out (60 s and more).
    let held = create3(&mut ca, 9, &root_a, "held");
    let w3: Write3res = nfs_call(
        &mut ca,
        10,
        NFSPROC3_WRITE,
        &Write3args {
            file: held.clone(),
            offset: 0,
            count: 4,
            stable: StableHow::FILE_SYNC,
            data: bytes::Bytes::from_static(b"mine"),
        },
    );
    assert!(matches!(w3, Write3res::NFS3_OK(_)), "{w3:?}");
    drop(ca);
    let mut a = a;
    a.crash();
    let t = Instant::now();
    let a = Head::start(config, &w.join("state-a"));
    let w3: Write3res = nfs_call(
        &mut cb,
        11,
        NFSPROC3_WRITE,
        &Write3args {
            file: held.clone(),
            offset: 4,
            count: 6,
            stable: StableHow::FILE_SYNC,
            data: bytes::Bytes::from_static(b" yours"),
        },
    );
    assert!(matches!(w3, Write3res::NFS3_OK(_)), "{w3:?}");
    let took = t.elapsed();
    eprintln!(
        "A killed and restarted; B's write to a file A held: {took:.1?} after the restart began"
    );
    assert!(
        took < Duration::from_secs(30),
        "B waited {took:?} for the dead session"
    );
    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let r3: Read3res = nfs_call(
        &mut ca,
        12,
        NFSPROC3_READ,
        &Read3args {
            file: held,
            offset: 0,
            count: 100,
        },
    );
    let Read3res::NFS3_OK(r3) = r3 else {
        panic!("READ on A after its crash: {r3:?}")
    };
    assert_eq!(&r3.data[..], b"mine yours");
    drop(ca);
    delegations_across_heads(&a, &b);
    locks_across_heads(a, &b, config, w);
    drop(b);
}

/// The record of an NLM call as a client host's lockd makes it.
fn nlm_record<A: xdr::Pack>(xid: u32, proc_: u32, a: &A) -> Vec<u8> {
    call_record(
        xid,
        proto::nlm4::NLM_PROG,
        4,
        proc_,
        &rpc::client::auth_sys(0, 0, &[], "t"),
        &xdr::to_bytes(a),
    )
}

/// An NLM call as a client host's lockd makes it.
fn nlm_call<A: xdr::Pack, R: xdr::Unpack>(c: &mut TcpStream, xid: u32, proc_: u32, a: &A) -> R {
    let r = raw_call(c, &nlm_record(xid, proc_, a)).unwrap();
    let (_, st, mut d) = rpc::msg::decode_reply(r.into()).unwrap();
    assert_eq!(st, rpc::msg::ReplyStatus::Success);
    R::unpack(&mut d).unwrap()
}

/// An NLM lock of `host`'s process `svid` (exclusive).
fn nlm_lock_of(host: &str, svid: i32, fh: &NfsFh3, off: u64, len: u64) -> proto::nlm4::Nlm4Lock {
    proto::nlm4::Nlm4Lock {
        caller_name: bytes::Bytes::copy_from_slice(host.as_bytes()),
        fh: proto::nlm4::Netobj(fh.data.clone()),
        oh: proto::nlm4::Netobj(bytes::Bytes::from(format!("{svid}@{host}"))),
        svid,
        l_offset: off,
        l_len: len,
    }
}

/// Non-blocking exclusive NLM LOCK arguments for `l`.
fn lock_args(l: proto::nlm4::Nlm4Lock, reclaim: bool) -> proto::nlm4::Nlm4Lockargs {
    proto::nlm4::Nlm4Lockargs {
        cookie: proto::nlm4::Netobj(bytes::Bytes::from_static(b"c")),
        block: false,
        exclusive: true,
        alock: l,
        reclaim,
        state: 1,
    }
}

fn nlm_lock(c: &mut TcpStream, xid: u32, l: proto::nlm4::Nlm4Lock) -> proto::nlm4::Nlm4Stats {
    use proto::nlm4::*;
    nlm_call::<_, Nlm4Res>(c, xid, NLMPROC4_LOCK, &lock_args(l, false))
        .stat
        .stat
}

fn nlm_test(c: &mut TcpStream, xid: u32, l: proto::nlm4::Nlm4Lock) -> proto::nlm4::Nlm4Testrply {
    use proto::nlm4::*;
    let a = Nlm4Testargs {
        cookie: Netobj(bytes::Bytes::new()),
        exclusive: true,
        alock: l,
    };
    nlm_call::<_, Nlm4Testres>(c, xid, NLMPROC4_TEST, &a).test_stat
}

fn nlm_unlock(c: &mut TcpStream, xid: u32, l: proto::nlm4::Nlm4Lock) -> proto::nlm4::Nlm4Stats {
    use proto::nlm4::*;
    let a = Nlm4Unlockargs {
        cookie: Netobj(bytes::Bytes::new()),
        alock: l,
    };
    nlm_call::<_, Nlm4Res>(c, xid, NLMPROC4_UNLOCK, &a)
        .stat
        .stat
}

/// A client host's lockd: answers NLMPROC4_GRANTED and passes it on.
struct Lockd(tokio::sync::mpsc::UnboundedSender<proto::nlm4::Nlm4Testargs>);

impl rpc::Service for Lockd {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        (prog == proto::nlm4::NLM_PROG).then_some((4, 4))
    }
    fn idempotent(&self, _: u32, _: u32, _: u32) -> bool {
        true
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "lockd"
    }
    async fn call(
        &self,
        ctx: &rpc::CallContext,
        mut args: xdr::Decoder,
        out: &mut bytes::BytesMut,
    ) -> Result<(), rpc::CallError> {
        use proto::nlm4::*;
        use xdr::{Pack, Unpack};
        if ctx.proc_ != NLMPROC4_GRANTED {
            return Err(rpc::CallError::ProcUnavail);
        }
        let a = Nlm4Testargs::unpack(&mut args).map_err(|_| rpc::CallError::GarbageArgs)?;
        Nlm4Res {
            cookie: a.cookie.clone(),
            stat: Nlm4Stat {
                stat: Nlm4Stats::NLM4_GRANTED,
            },
        }
        .pack(out);
        let _ = self.0.send(a);
        Ok(())
    }
}

async fn lockd() -> (
    u16,
    tokio::sync::mpsc::UnboundedReceiver<proto::nlm4::Nlm4Testargs>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let srv = rpc::Server::new(std::sync::Arc::new(Lockd(tx)), rpc::ServerConfig::default());
    tokio::spawn(async move { srv.run(l).await });
    (port, rx)
}

async fn v41_session(port: u16, owner: &str) -> client::nfs4::Session {
    session_as_1000(port, owner, false).await
}

/// With a back channel: the server may grant (and recall) delegations.
async fn v41_session_with_callbacks(port: u16, owner: &str) -> client::nfs4::Session {
    session_as_1000(port, owner, true).await
}

async fn session_as_1000(port: u16, owner: &str, callbacks: bool) -> client::nfs4::Session {
    let o = client::nfs4::SessionOptions {
        security: client::nfs4::Security::Sys {
            uid: 1000,
            gid: 1000,
        },
        owner: bytes::Bytes::from(owner.to_string()),
        callbacks,
        ..Default::default()
    };
    client::nfs4::Session::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)), &o)
        .await
        .expect("NFSv4.1 session")
}

/// A runtime with one worker thread, so that servers spawned on it (a
/// client host's lockd, callbacks) answer while the test blocks.
fn one_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// OPEN of `name` in the export's root (created with `mode` if given).
async fn open_in_root(
    s: &client::nfs4::Session,
    name: &str,
    mode: Option<u32>,
    access: u32,
) -> (proto::nfs4::Stateid4, proto::nfs4::NfsFh4) {
    let dir = s.lookup_path("/").await.unwrap();
    s.open(&dir, name, mode, access).await.unwrap()
}

/// A FILE_SYNC WRITE of `data` at the start of the file.
async fn write_sync(
    s: &client::nfs4::Session,
    sid: &proto::nfs4::Stateid4,
    fh: &proto::nfs4::NfsFh4,
    data: &'static [u8],
) {
    s.write(
        sid,
        fh,
        0,
        bytes::Bytes::from_static(data),
        proto::nfs4::StableHow4::FILE_SYNC4,
    )
    .await
    .unwrap();
}

/// A read delegation granted through head A stands on one of CephFS's: a
/// read through head B leaves it be; a write through B waits in CephFS
/// while A, called back by CephFS, recalls it from its client, which
/// returns it; then B's write goes on and A's client sees the new data.
/// B's client closes the file it wrote before A's opens it: B keeps a file
/// open for writing in CephFS (until a COMMIT, a CLOSE or 250 ms unused),
/// and CephFS gives no other head a read delegation meanwhile.
fn delegations_across_heads(a: &Head, b: &Head) {
    use proto::nfs4::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};
    let rt = one_worker_runtime();
    rt.block_on(async {
        let sa = v41_session_with_callbacks(a.port, "reader-on-a").await;
        let sb = v41_session(b.port, "writer-on-b").await;
        let (bsid, bfh) =
            open_in_root(&sb, "delegated", Some(0o666), OPEN4_SHARE_ACCESS_BOTH).await;
        write_sync(&sb, &bsid, &bfh, b"old").await;
        sb.close(&bfh, &bsid).await.unwrap();
        let (bsid, bfh) = open_in_root(&sb, "delegated", None, OPEN4_SHARE_ACCESS_BOTH).await;
        let (asid, afh) = open_in_root(&sa, "delegated", None, OPEN4_SHARE_ACCESS_READ).await;
        assert!(
            sa.delegations().get(&afh).is_some(),
            "a read delegation from A over CephFS; log:\n{}",
            a.log_text()
        );
        assert_eq!(&sb.read(&bsid, &bfh, 0, 10).await.unwrap().data[..], b"old");
        assert_eq!(
            sa.delegations().recalls_received(),
            0,
            "a read elsewhere recalls nothing"
        );
        let t = Instant::now();
        write_sync(&sb, &bsid, &bfh, b"new data").await;
        let took = t.elapsed();
        eprintln!("a write through B waited {took:?} for A's client to return its delegation");
        assert_eq!(sa.delegations().recalls_received(), 1, "CB_RECALL from A");
        assert!(sa.delegations().is_empty(), "returned");
        assert!(
            took < Duration::from_secs(10),
            "returned, not revoked: {took:?}"
        );
        assert_eq!(sa.stat(&afh).await.unwrap().size, Some(8));
        assert_eq!(
            &sa.read(&asid, &afh, 0, 10).await.unwrap().data[..],
            b"new data"
        );
        sa.close(&afh, &asid).await.unwrap();
        sb.close(&bfh, &bsid).await.unwrap();
        sa.destroy().await.unwrap();
        sb.destroy().await.unwrap();
    });
}

/// Byte-range locks over CephFS conflict across heads: NFSv4.1 through A
/// against NFSv4.1 and NLM through B, NLM through A against both through
/// B; an unlock frees the range for the other head at once, and so does
/// killing and restarting the holding head.
fn locks_across_heads(a: Head, b: &Head, config: &Path, w: &Path) {
    use proto::nfs4::{NfsLockType4, OPEN4_SHARE_ACCESS_BOTH};
    use proto::nlm4::{Nlm4Stats, Nlm4Testrply};
    // A worker thread: the client host's lockd below answers GRANTED
    // while the test waits in plain blocking calls.
    let rt = one_worker_runtime();
    // A again, calling back this test's lockd with GRANTED.
    let (cb_port, mut granted) = rt.block_on(lockd());
    drop(a);
    let a = Head::start_with(
        config,
        &w.join("state-a"),
        &["--nlm-callback-port", &cb_port.to_string()],
    );
    let (sa, sb) = rt.block_on(async {
        (
            v41_session(a.port, "locker-on-a").await,
            v41_session(b.port, "locker-on-b").await,
        )
    });
    let (asid, afh, bsid, bfh) = rt.block_on(async {
        let (asid, afh) = open_in_root(&sa, "locked", Some(0o666), OPEN4_SHARE_ACCESS_BOTH).await;
        let (bsid, bfh) = open_in_root(&sb, "locked", None, OPEN4_SHARE_ACCESS_BOTH).await;
        (asid, afh, bsid, bfh)
    });
    // B's NFSv4 lock attempt with a fresh lock owner each time (a LOCK
    // that fails keeps no lock stateid for a new owner).
    let b_lock = |kind: NfsLockType4, off: u64, len: u64| {
        rt.block_on(async {
            let o = sb.new_owner("lock");
            sb.lock(&bfh, sb.new_lock_owner(&bsid, &o), kind, off, len)
                .await
                .unwrap()
        })
    };

    // NFSv4.1 through A blocks NFSv4.1 through B.
    let t = Instant::now();
    let alo = sa.new_owner("lock");
    let alsid = rt
        .block_on(sa.lock(
            &afh,
            sa.new_lock_owner(&asid, &alo),
            NfsLockType4::WRITE_LT,
            0,
            100,
        ))
        .unwrap()
        .expect("LOCK through A");
    eprintln!(
        "NFSv4 LOCK through A (Ceph lock taken) in {:.1?}",
        t.elapsed()
    );
    let t = Instant::now();
    let d = b_lock(NfsLockType4::WRITE_LT, 50, 10).expect_err("A's lock must deny B");
    eprintln!("NFSv4 LOCK through B denied in {:.1?}", t.elapsed());
    assert_eq!(
        (d.offset, d.length, d.locktype, &d.owner.owner[..]),
        (0, 100, NfsLockType4::WRITE_LT, &b"another head"[..]),
        "LOCK4denied names the range and type Ceph reports"
    );
    let bo = sb.new_owner("tester");
    let t = rt
        .block_on(sb.lockt(&bfh, NfsLockType4::READ_LT, 99, 1, &bo))
        .unwrap();
    assert!(t.is_some(), "LOCKT through B sees A's lock");
    assert!(
        b_lock(NfsLockType4::READ_LT, 100, 10).is_ok(),
        "past A's range is free"
    );

    // NLM through B is denied by A's NFSv4 lock too, and TEST says so.
    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let mut cb = TcpStream::connect(("127.0.0.1", b.port)).unwrap();
    let root_a = mnt_root(&mut ca);
    let Lookup3res::NFS3_OK(l) = nfs_call::<_, Lookup3res>(
        &mut ca,
        20,
        NFSPROC3_LOOKUP,
        &Lookup3args {
            what: Diropargs3 {
                dir: root_a,
                name: bytes::Bytes::from_static(b"locked"),
            },
        },
    ) else {
        panic!("LOOKUP locked")
    };
    let fh3 = l.object;
    assert_eq!(
        nlm_lock(&mut cb, 21, nlm_lock_of("host-b", 1, &fh3, 10, 10)),
        Nlm4Stats::NLM4_DENIED
    );
    match nlm_test(&mut cb, 22, nlm_lock_of("host-b", 1, &fh3, 0, 100)) {
        Nlm4Testrply::NLM4_DENIED(h) => {
            assert_eq!((h.l_offset, h.l_len, h.exclusive), (0, 100, true));
            assert_eq!(&h.oh.0[..], b"another head");
        }
        other => panic!("NLM TEST through B: {other:?}"),
    }

    // A unlocks: B gets the range at once, through NLM.
    rt.block_on(sa.locku(&afh, &alsid, NfsLockType4::WRITE_LT, 0, 100))
        .unwrap();
    let t = Instant::now();
    assert_eq!(
        nlm_lock(&mut cb, 23, nlm_lock_of("host-b", 1, &fh3, 0, 100)),
        Nlm4Stats::NLM4_GRANTED,
        "granted on B after A's LOCKU"
    );
    eprintln!(
        "NLM LOCK through B after A's LOCKU granted in {:.1?}",
        t.elapsed()
    );
    // Now B's NLM lock denies NLM and NFSv4.1 through A.
    assert_eq!(
        nlm_lock(&mut ca, 24, nlm_lock_of("host-a", 1, &fh3, 0, 1)),
        Nlm4Stats::NLM4_DENIED
    );
    let r = rt.block_on(async {
        let o = sa.new_owner("lock2");
        sa.lock(
            &afh,
            sa.new_lock_owner(&asid, &o),
            NfsLockType4::READ_LT,
            5,
            1,
        )
        .await
        .unwrap()
    });
    assert!(r.is_err(), "B's NLM lock denies NFSv4 through A: {r:?}");
    // A blocking NLM LOCK through A waits for B's lock: no release on A
    // would wake it, so A tries it again until B lets go, then calls the
    // client back with GRANTED.
    let blocking = proto::nlm4::Nlm4Lockargs {
        cookie: proto::nlm4::Netobj(bytes::Bytes::from_static(b"wait")),
        block: true,
        ..lock_args(nlm_lock_of("host-a", 3, &fh3, 0, 10), false)
    };
    let st =
        nlm_call::<_, proto::nlm4::Nlm4Res>(&mut ca, 30, proto::nlm4::NLMPROC4_LOCK, &blocking);
    assert_eq!(st.stat.stat, Nlm4Stats::NLM4_BLOCKED);
    assert!(
        granted.try_recv().is_err(),
        "nothing granted while B holds it"
    );
    assert_eq!(
        nlm_unlock(&mut cb, 25, nlm_lock_of("host-b", 1, &fh3, 0, 100)),
        Nlm4Stats::NLM4_GRANTED
    );
    let t = Instant::now();
    let g = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), granted.recv()).await })
        .expect("GRANTED within 20 s")
        .unwrap();
    eprintln!(
        "blocked NLM LOCK through A granted {:.1?} after B's UNLOCK",
        t.elapsed()
    );
    assert_eq!((g.alock.svid, g.alock.l_offset, g.alock.l_len), (3, 0, 10));
    assert_eq!(
        nlm_lock(&mut cb, 31, nlm_lock_of("host-b", 1, &fh3, 5, 1)),
        Nlm4Stats::NLM4_DENIED,
        "the granted lock holds in Ceph"
    );
    assert_eq!(
        nlm_unlock(&mut ca, 32, nlm_lock_of("host-a", 3, &fh3, 0, 10)),
        Nlm4Stats::NLM4_GRANTED
    );

    // A holds an NLM lock and is killed: its Ceph session keeps the lock
    // until A comes back and ends that session.
    assert_eq!(
        nlm_lock(&mut ca, 26, nlm_lock_of("host-a", 2, &fh3, 200, 0)),
        Nlm4Stats::NLM4_GRANTED
    );
    assert_eq!(
        nlm_lock(&mut cb, 27, nlm_lock_of("host-b", 2, &fh3, 300, 1)),
        Nlm4Stats::NLM4_DENIED
    );
    drop((ca, sa));
    let mut a = a;
    a.crash();
    assert_eq!(
        nlm_lock(&mut cb, 28, nlm_lock_of("host-b", 2, &fh3, 300, 1)),
        Nlm4Stats::NLM4_DENIED,
        "the dead head's session still holds its lock"
    );
    let t = Instant::now();
    let a = Head::start(config, &w.join("state-a"));
    assert_eq!(
        nlm_lock(&mut cb, 29, nlm_lock_of("host-b", 2, &fh3, 300, 1)),
        Nlm4Stats::NLM4_GRANTED,
        "A restarted: its old session's locks are gone"
    );
    eprintln!(
        "A killed and restarted; B's NLM lock on A's old range granted {:.1?} after the restart began",
        t.elapsed()
    );
    drop((cb, sb, a));
}

/// Without libcephfs (here: a file name that is not there), check-config
/// and serve say which library is missing; no cluster needed.
#[test]
fn missing_library_is_named() {
    let (work, config) = temp_file(
        "tarn.toml",
        "[[export]]\npath = \"cephfs://nfs@cephfs/shared\"\nclients = [\"127.0.0.1/32\"]\n",
    );
    let missing = "/nonexistent/libcephfs.so.2";
    // `tarn` run so: it fails; what it says.
    let failure = |cmd: &mut Command| {
        let out = cmd.env("TARN_LIBCEPHFS", missing).output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = failure(
        Command::new(env!("CARGO_BIN_EXE_tarn")).args(["check-config", config.to_str().unwrap()]),
    );
    assert!(
        err.contains(missing) && err.contains("install libcephfs2"),
        "{err}"
    );
    let err = failure(
        Command::new(env!("CARGO_BIN_EXE_tarn"))
            .args(["serve", "--config", config.to_str().unwrap(), "--state-dir"])
            .arg(work.path().join("state"))
            .args(["--listen", &format!("127.0.0.1:{}", free_port())]),
    );
    assert!(
        err.contains("cannot export cephfs://nfs@cephfs/shared") && err.contains(missing),
        "{err}"
    );
}

/// NLM LOCK (reclaim or not) of `host`'s process 1 on `fh`, bytes 0..100.
fn nlm_lock_as(
    c: &mut TcpStream,
    xid: u32,
    host: &str,
    fh: &NfsFh3,
    reclaim: bool,
) -> proto::nlm4::Nlm4Stats {
    let a = lock_args(nlm_lock_of(host, 1, fh, 0, 100), reclaim);
    nlm_call::<_, proto::nlm4::Nlm4Res>(c, xid, proto::nlm4::NLMPROC4_LOCK, &a)
        .stat
        .stat
}

/// Two heads in an etcd cluster over one CephFS. Head A holds an NLM lock
/// and is killed; once B finds A failed (its etcd lease, 2 s), B ends A's
/// CephFS session, and the lock's reclaim through B is granted: it does not
/// wait for the MDS to time the dead session out.
#[test]
fn failed_head_locks_are_freed_for_reclaims() {
    use proto::nlm4::Nlm4Stats::*;
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let work = test_support::var_tmp("tarn-ceph-failover-");
    let w = work.path();
    let Some(etcd) = Etcd::start(w) else { return };
    let Some(cl) = Cluster::start("cephfs test", vfs::cephfs::available()) else {
        return;
    };
    make_export_dir(&cl);
    let config = |node: &str| {
        let p = w.join(format!("{node}.toml"));
        std::fs::write(
            &p,
            format!(
                "[nfs4]\ngrace_seconds = 60\n\n[cluster]\netcd = [\"{}\"]\nnode = \"{node}\"\nname = \"ceph\"\nlease_seconds = 2\n\n[[export]]\npath = \"cephfs:///nfs\"\nceph_conf = \"{}\"\npseudo = \"/\"\nclients = [\"127.0.0.1/32\"]\n",
                etcd.url,
                cl.conf().display()
            ),
        )
        .unwrap();
        p
    };
    let a = Head::start(&config("a"), &w.join("state-a"));
    std::fs::create_dir_all(w.join("state-b")).unwrap();
    std::fs::copy(w.join("state-a/handle.key"), w.join("state-b/handle.key")).unwrap();
    let b = Head::start(&config("b"), &w.join("state-b"));

    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let root = mnt_root(&mut ca);
    let fh = create3(&mut ca, 1, &root, "held");
    // The start-up grace ends once both heads have recovered (no clients).
    let until = Instant::now() + Duration::from_secs(60);
    let mut xid = 100;
    loop {
        xid += 1;
        match nlm_lock_as(&mut ca, xid, "host-a", &fh, false) {
            NLM4_GRANTED => break,
            NLM4_DENIED_GRACE_PERIOD if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(200))
            }
            other => panic!("NLM LOCK through A: {other:?}; log: {}", a.log_text()),
        }
    }
    let mut cb = TcpStream::connect(("127.0.0.1", b.port)).unwrap();
    assert_eq!(nlm_lock_as(&mut cb, 2, "host-b", &fh, false), NLM4_DENIED);

    drop(ca);
    let mut a = a;
    a.crash();
    let killed = Instant::now();
    // host-a's lockd reclaims through B (its statd heard from B, or the
    // service address moved there): refused until B is in grace and the
    // dead session's lock is gone from Ceph.
    loop {
        xid += 1;
        match nlm_lock_as(&mut cb, xid, "host-a", &fh, true) {
            NLM4_GRANTED => break,
            NLM4_DENIED_GRACE_PERIOD if killed.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            other => panic!(
                "NLM reclaim through B: {other:?} after {:?}; log: {}",
                killed.elapsed(),
                b.log_text()
            ),
        }
    }
    let took = killed.elapsed();
    eprintln!(
        "A killed holding an NLM lock; its reclaim through B granted {took:.1?} after the kill"
    );
    // The thread that ended the session logs once the MDS has answered,
    // which may come a moment after the grant it made possible.
    let until = Instant::now() + Duration::from_secs(10);
    let ended = loop {
        let log = b.log_text();
        if let Some(l) = log
            .lines()
            .find(|l| l.contains("ended a failed head's CephFS session"))
        {
            break l.to_string();
        }
        assert!(Instant::now() < until, "B never ended A's session: {log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("B: {ended}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    drop((cb, b));
}

/// How long a killed head's POSIX lock outlives it in CephFS when nothing
/// ends its session (no cluster, no restart): the MDS's own timeout.
/// A measurement, not a check (minutes):
///   cargo test -p tarn --test cephfs -- --ignored --nocapture dead_head
#[test]
#[ignore]
fn dead_head_lock_lasts_until_the_mds_times_it_out() {
    use proto::nlm4::Nlm4Stats::*;
    let Some(setup) = setup("tarn-ceph-dead-", "grace_seconds = 0") else {
        return;
    };
    let (mut a, b) = two_heads(&setup.config, setup.work.path());
    let mut ca = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let root = mnt_root(&mut ca);
    let fh = create3(&mut ca, 1, &root, "held");
    assert_eq!(nlm_lock_as(&mut ca, 2, "host-a", &fh, false), NLM4_GRANTED);
    drop(ca);
    a.crash();
    let killed = Instant::now();
    let mut cb = TcpStream::connect(("127.0.0.1", b.port)).unwrap();
    let mut xid = 10;
    let mut answers = Vec::new();
    loop {
        xid += 1;
        // A call may wait in the MDS (for the dead session's capabilities)
        // far longer than nlm_call's 10 s: wait for its answer here.
        let asked = Instant::now();
        let a = lock_args(nlm_lock_of("host-b", 1, &fh, 0, 100), false);
        use std::io::Write;
        cb.write_all(&nlm_record(xid, proto::nlm4::NLMPROC4_LOCK, &a))
            .unwrap();
        let r = loop {
            if let Some(r) = read_record(&mut cb) {
                break r;
            }
            assert!(killed.elapsed() < Duration::from_secs(900), "no answer");
        };
        let (_, _, mut d) = rpc::msg::decode_reply(r.into()).unwrap();
        let stat = <proto::nlm4::Nlm4Res as xdr::Unpack>::unpack(&mut d)
            .unwrap()
            .stat
            .stat;
        answers.push((
            killed.elapsed().as_secs_f32(),
            asked.elapsed().as_secs_f32(),
            stat,
        ));
        match stat {
            NLM4_GRANTED => break,
            NLM4_DENIED if killed.elapsed() < Duration::from_secs(900) => {
                std::thread::sleep(Duration::from_secs(5))
            }
            other => panic!("{other:?} after {:?}", killed.elapsed()),
        }
    }
    eprintln!("answers (s after the kill, s the call took, answer): {answers:?}");
    eprintln!(
        "a killed head's lock was freed by the MDS {:.0?} after the kill",
        killed.elapsed()
    );
    drop((cb, b));
}

/// A client on head A that never returns a recalled delegation: A's state
/// core revokes it after a lease and A gives CephFS's back, so the write
/// through B waits about a lease, well inside libcephfs's deadline (two
/// leases), past which it would have unmounted A's whole mount. A still
/// serves the file afterwards.
#[test]
fn an_unreturned_delegation_is_revoked_before_cephfs_would_drop_the_head() {
    use proto::nfs4::{OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ};
    let Some(setup) = setup("tarn-ceph-deleg-", "grace_seconds = 0\nlease_seconds = 5") else {
        return;
    };
    let (cl, w) = (&setup.cl, setup.work.path());
    let (a, b) = two_heads(&setup.config, w);
    let rt = one_worker_runtime();
    rt.block_on(async {
        let sa = v41_session_with_callbacks(a.port, "deaf-reader-on-a").await;
        sa.delegations().set_ignore_recalls(true);
        let sb = v41_session(b.port, "writer-on-b").await;
        // Made and closed through B first: B keeps a file its client
        // holds open for writing open in CephFS, which refuses A a read
        // delegation until that client's CLOSE.
        let (bsid, bfh) = open_in_root(&sb, "kept", Some(0o666), OPEN4_SHARE_ACCESS_BOTH).await;
        sb.close(&bfh, &bsid).await.unwrap();
        let (bsid, bfh) = open_in_root(&sb, "kept", None, OPEN4_SHARE_ACCESS_BOTH).await;
        let (_asid, afh) = open_in_root(&sa, "kept", None, OPEN4_SHARE_ACCESS_READ).await;
        assert!(sa.delegations().get(&afh).is_some(), "a read delegation");
        let t = Instant::now();
        write_sync(&sb, &bsid, &bfh, b"written").await;
        let took = t.elapsed();
        eprintln!("a write through B waited {took:?} for A to revoke an unreturned delegation (lease 5 s)");
        assert_eq!(sa.delegations().recalls_received(), 1);
        assert!(
            // Revoked after a lease (5 s) and given back at the next
            // sweep; the backstop would give it back at 15 s.
            took >= Duration::from_secs(3) && took < Duration::from_secs(14),
            "about a lease: {took:?}"
        );
        // A's mount is still there: a new client of A reads the file.
        let sc = v41_session(a.port, "reader-after").await;
        let (csid, cfh) = open_in_root(&sc, "kept", None, OPEN4_SHARE_ACCESS_READ).await;
        assert_eq!(&sc.read(&csid, &cfh, 0, 10).await.unwrap().data[..], b"written");
        sb.close(&bfh, &bsid).await.unwrap();
    });
    let log = a.log_text();
    assert!(!log.contains("in time: giving the backend's back"), "{log}");
    drop(a);
    drop(b);

    // `tarn serve cephfs:///nfs`, no configuration file: the directory the
    // heads served (ceph.conf from CEPH_CONF, as for every Ceph tool).
    let port = free_port();
    let log = w.join("c.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tarn"));
    cmd.args([
        "serve",
        "cephfs:///nfs",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .arg("--state-dir")
    .arg(w.join("state-c"))
    .env("CEPH_CONF", cl.conf());
    let (child, _) = spawn_serving(&mut cmd, &log, "tarn serve cephfs:///nfs");
    // Stopped as the other heads are (SIGTERM: its CephFS session ends
    // cleanly; a killed one would hold the directory's capabilities until
    // the MDS times it out, and B's next change there would wait).
    let c = Head { child, port, log };
    let st = tarn(&[
        "stat",
        &format!("nfs://127.0.0.1:{port}/kept?uid=1000&gid=1000"),
    ]);
    assert!(st.contains("Size: 7 "), "{st}");
    drop(c);
    assert!(
        !Path::new("cephfs:").exists(),
        "no local directory made of the URL"
    );
}
