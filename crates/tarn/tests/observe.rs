//! Metrics and diagnostics against a live `tarn serve`: each `tarn doctor`
//! finding that NFSv3/AUTH_SYS can provoke is provoked by a scripted client
//! from its own loopback address and named; a healthy run has no finding;
//! `/metrics` parses as Prometheus text; `tarn stats` and `tarn top --once`
//! print their columns; error log lines are rate-limited per client.
//! Auth-cache churn is provoked here with AUTH_SYS; the GSS findings (window
//! drops, small sync writes near a context's expiry) in gss_doctor.rs,
//! which starts a KDC.

mod common;
use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static XID: AtomicU32 = AtomicU32::new(1000);

fn xid() -> u32 {
    XID.fetch_add(1, Ordering::Relaxed)
}

fn write(c: &mut TcpStream, fh: &NfsFh3, offset: u64, len: usize, stable: StableHow) {
    let a = Write3args {
        file: fh.clone(),
        offset,
        count: len as u32,
        stable,
        data: Bytes::from(vec![7u8; len]),
    };
    match nfs_call::<_, Write3res>(c, xid(), NFSPROC3_WRITE, &a) {
        Write3res::NFS3_OK(_) => {}
        other => panic!("WRITE: {other:?}"),
    }
}

fn getattr(c: &mut TcpStream, fh: &NfsFh3) -> Getattr3res {
    nfs_getattr(c, xid(), fh)
}

/// Runs `f` in a loop on its own thread until `secs` pass.
fn for_secs(secs: f64, mut f: impl FnMut() + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed().as_secs_f64() < secs {
            f();
        }
    })
}

fn disk_used_pct(p: &std::path::Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=pcent"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().trim_end_matches('%').parse().ok())
        .unwrap_or(0)
}

#[test]
fn healthy_clients_yield_no_findings() {
    let s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    let fh = create3(&mut c, xid(), &root, "healthy");
    let doctor = spawn_doctor(&s, "2", &[]);
    // An ordinary client: big UNSTABLE writes and a COMMIT, a few GETATTRs
    // of the same files, at a human pace.
    let load = for_secs(2.5, move || {
        for i in 0..4u64 {
            write(&mut c, &fh, i * 65536, 65536, StableHow::UNSTABLE);
        }
        let _: Commit3res = nfs_call(&mut c, xid(), NFSPROC3_COMMIT, &commit_all(&fh));
        for _ in 0..5 {
            getattr(&mut c, &root);
            getattr(&mut c, &fh);
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    let out = finish_doctor(doctor);
    load.join().unwrap();
    assert!(!out.contains("client 127.0.0.1"), "{out}");
    if disk_used_pct(&s.export) < 90 {
        assert!(out.contains("no findings"), "{out}");
    }
}

#[test]
fn doctor_names_misbehaving_clients() {
    let s = TestServer::start_with(&["--allow", "127.0.0.0/8"]);
    // 127.0.0.2: GETATTR over many distinct files, as fast as it can.
    let (mut storm, root) = mounted_root_from(&s, "127.0.0.2");
    let files: Vec<NfsFh3> = (0..300)
        .map(|i| create3(&mut storm, xid(), &root, &format!("f{i}")))
        .collect();
    // 127.0.0.3: small FILE_SYNC writes.
    let (mut syncer, sroot) = mounted_root_from(&s, "127.0.0.3");
    let sfh = create3(&mut syncer, xid(), &sroot, "synced");
    // 127.0.0.1: a healthy neighbour that must not be named.
    let (mut calm, croot) = mounted_root(&s);

    let doctor = spawn_doctor(&s, "2.5", &["--small-sync-writes", "10"]);
    let mut i = 0;
    let t1 = for_secs(3.5, move || {
        getattr(&mut storm, &files[i % files.len()]);
        i += 1;
    });
    let mut off = 0;
    let t2 = for_secs(3.5, move || {
        write(&mut syncer, &sfh, off, 4096, StableHow::FILE_SYNC);
        off += 4096;
    });
    // 127.0.0.4: reconnects in a loop (a NULL call per connection).
    let s_addr = s.addr;
    let t3 = std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            let mut c = connect_from(s_addr, "127.0.0.4");
            let r = raw_call(
                &mut c,
                &call_record(xid(), NFS_PROGRAM, 3, 0, &rpc::client::auth_none(), &[]),
            );
            assert!(r.is_some());
            drop(c);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let t4 = for_secs(3.0, move || {
        getattr(&mut calm, &croot);
        std::thread::sleep(Duration::from_millis(50));
    });
    let out = finish_doctor(doctor);
    for t in [t1, t2, t3, t4] {
        t.join().unwrap();
    }
    eprintln!("{out}");
    assert_contains(&out, &["[getattr-storm] client 127.0.0.2", "actimeo"]);
    // An NFSv3 client: no delegations to cure it, and the doctor says so.
    assert_contains(
        &out,
        &[
            "no NFSv4 client record",
            "vers=4.2",
            "[small-sync-writes] client 127.0.0.3",
            "[reconnect-loop] client 127.0.0.4",
        ],
    );
    assert!(!out.contains("client 127.0.0.1"), "{out}");
    assert!(out.contains("remedy:"), "{out}");
}

#[test]
fn doctor_sees_auth_cache_churn() {
    let s = TestServer::start_with(&["--allow", "127.0.0.0/8"]);
    let (mut churn, root) = mounted_root_from(&s, "127.0.0.5");
    let (mut calm, croot) = mounted_root(&s);
    let doctor = spawn_doctor(&s, "2.5", &[]);
    // 127.0.0.5: a new AUTH_SYS credential (uid) on every call, so every
    // lookup misses the per-client credential cache.
    let mut uid = 20_000;
    let t1 = for_secs(3.0, move || {
        let args = xdr::to_bytes(&Getattr3args {
            object: root.clone(),
        });
        let cred = rpc::client::auth_sys(uid, 100, &[], "churn");
        let r = raw_call(
            &mut churn,
            &call_record(xid(), NFS_PROGRAM, 3, NFSPROC3_GETATTR, &cred, &args),
        );
        assert!(r.is_some());
        uid += 1;
    });
    let t2 = for_secs(3.0, move || {
        getattr(&mut calm, &croot);
        std::thread::sleep(Duration::from_millis(50));
    });
    let out = finish_doctor(doctor);
    t1.join().unwrap();
    t2.join().unwrap();
    eprintln!("{out}");
    assert_contains(
        &out,
        &[
            "[auth-cache-churn] client 127.0.0.5",
            "new credential per call",
        ],
    );
    assert!(!out.contains("client 127.0.0.1"), "{out}");
}

#[test]
fn doctor_sees_an_export_near_full() {
    // A private mount namespace with a 2 MiB tmpfs as the export, filled.
    let (_tmp, export, state) = temp_export();
    let script = r#"mount -t tmpfs -o size=2m tmpfs "$EXPORT" && chmod 0777 "$EXPORT" && { dd if=/dev/zero of="$EXPORT/fill" bs=64k 2>/dev/null; true; } && exec "$@""#;
    let wrapper = mount_ns_wrapper(&[("EXPORT", &export)], script);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let s = TestServer::launch(&export, &state, free_port(), &[], &wrapper);
    let out = tarn_admin(&s, "doctor", &["--window", "0.5"]);
    assert!(
        out.contains(&format!("[export-near-full] export {}", export.display())),
        "{out}"
    );
    assert!(out.contains("free space or grow"), "{out}");
}

/// GET `path` from the metrics endpoint; (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

#[test]
fn metrics_parse_as_prometheus_text() {
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let s = TestServer::start_with(&["--metrics", &maddr]);
    let (mut c, root) = mounted_root(&s);
    for _ in 0..10 {
        getattr(&mut c, &root);
    }
    let bad = NfsFh3 {
        data: Bytes::from(vec![1u8; 40]),
    };
    assert!(matches!(
        getattr(&mut c, &bad),
        Getattr3res::Default(Nfsstat3::NFS3ERR_BADHANDLE)
    ));
    let (status, body) = http_get(&maddr, "/metrics");
    assert!(status.contains("200"), "{status}");
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let find = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .map(|x| match x.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert_eq!(
        find("tarn_op_calls_total", &[("op", "GETATTR")]),
        11.0,
        "{body}"
    );
    assert_eq!(
        find(
            "tarn_op_errors_total",
            &[("op", "GETATTR"), ("status", "NFS3ERR_BADHANDLE")]
        ),
        1.0
    );
    assert_eq!(find("tarn_op_calls_total", &[("op", "MNT")]), 1.0);
    assert!(find("tarn_client_calls_total", &[("client", "127.0.0.1")]) >= 12.0);
    assert!(find("tarn_export_calls_total", &[]) >= 10.0, "{body}");
    assert!(find("tarn_export_fs_size_bytes", &[]) > 0.0);
    assert_eq!(
        find("tarn_gss_contexts_live", &[]),
        0.0,
        "no Kerberos client here"
    );
    assert!(find("tarn_cache_entries", &[("cache", "metrics_clients")]) >= 1.0);
    assert!(
        scrape
            .samples
            .iter()
            .any(|x| x.metric == "tarn_op_service_latency_seconds"
                && matches!(x.value, prometheus_parse::Value::Histogram(_))),
        "histograms parse"
    );
    let (status, body) = http_get(&maddr, "/status");
    assert!(status.contains("200"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["calls"].as_u64().unwrap() >= 12, "{body}");
    assert_eq!(v["exports"][0]["path"], s.export.display().to_string());
    assert!(http_get(&maddr, "/nope").0.contains("404"));
}

#[test]
fn stats_and_top_print_their_columns() {
    let s = TestServer::start();
    let (mut c, root) = mounted_root(&s);
    let load = for_secs(3.0, move || {
        getattr(&mut c, &root);
    });
    let sock = s.admin_socket();
    let sock = sock.to_str().unwrap();
    let stats = tarn(&[
        "stats",
        "--socket",
        sock,
        "--interval",
        "0.5",
        "--count",
        "2",
    ]);
    let top = tarn(&["top", "--socket", sock, "--once", "--interval", "0.5"]);
    load.join().unwrap();
    for col in [
        "ops/s",
        "kB/s",
        "kB/op",
        "avg RTT (ms)",
        "avg exe (ms)",
        "errors",
    ] {
        assert!(stats.contains(col), "{col}: {stats}");
    }
    let line = stats
        .lines()
        .find(|l| l.starts_with("GETATTR"))
        .unwrap_or_else(|| panic!("{stats}"));
    let rate: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(rate > 10.0, "{line}");
    assert_eq!(stats.matches("total").count(), 2, "two intervals: {stats}");
    assert!(top.contains("client") && top.contains("ops/s"), "{top}");
    let row = top
        .lines()
        .find(|l| l.starts_with("127.0.0.1"))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(row.ends_with("GETATTR"), "{row}");
    // An NFSv3 client: no delegations or callback path to show.
    assert!(top.contains("delegs") && top.contains("callback"), "{top}");
    assert!(row.contains(" -        -  GETATTR"), "{row}");
}

#[test]
fn error_logs_are_rate_limited_per_client() {
    let s = TestServer::start();
    let mut c = TcpStream::connect(s.addr).unwrap();
    mnt_root(&mut c);
    let bad = NfsFh3 {
        data: Bytes::from(vec![9u8; 40]),
    };
    for _ in 0..300 {
        getattr(&mut c, &bad);
    }
    // The upkeep writes the "suppressed" line within 5 s.
    let t = Instant::now();
    while !s.log_text().contains("suppressed") && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = s.log_text();
    let lines = log.matches("NFS error reply").count();
    assert!((20..=40).contains(&lines), "{lines} error lines");
    assert!(
        log.contains("suppressed") && log.contains("log messages from 127.0.0.1"),
        "{log}"
    );
}
