//! RPC-with-TLS (RFC 9289) end to end: `tarn serve --tls-cert/--tls-key
//! [--tls-client-ca] --xprtsec ...` and the Tarn client tools with
//! `?xprtsec=tls|mtls`, over NFSv3 (MOUNT too) and NFSv4.1; a plain client
//! refused by an export that requires TLS; an mTLS export refusing a
//! client without certificate; and a recording proxy between client and
//! server showing a file's content never crosses the wire in the clear.
//! The CA and certificates are made by the test with the openssl CLI.
//!
//!   cargo test -p tarn --test tls

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// A throwaway CA, a server certificate for localhost and 127.0.0.1, and
/// a client certificate, in `dir`.
fn make_pki(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Tarn test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run(&a);
    // A client certificate no configured CA signed.
    let mut a = vec!["req", "-x509"];
    a.extend(ec);
    a.extend([
        "-keyout",
        "rogue.key",
        "-out",
        "rogue.pem",
        "-days",
        "2",
        "-subj",
        "/CN=rogue",
        "-addext",
        "basicConstraints=CA:FALSE",
    ]);
    run(&a);
    for (name, subj, san, usage) in [
        (
            "server",
            "/CN=localhost",
            "DNS:localhost,IP:127.0.0.1",
            "serverAuth",
        ),
        (
            "client",
            "/CN=client1/O=Tarn tests",
            "DNS:client1",
            "clientAuth",
        ),
    ] {
        let (key, csr, ext, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}.pem"),
        );
        let mut a = vec!["req"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &csr, "-subj", subj]);
        run(&a);
        std::fs::write(
            dir.join(&ext),
            format!("subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

struct Pki {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        make_pki(&dir);
        Pki { _tmp: tmp, dir }
    }

    fn file(&self, n: &str) -> String {
        self.dir.join(n).to_str().unwrap().to_string()
    }

    /// A server exporting with `xprtsec`, TLS configured (client CA too).
    fn server(&self, xprtsec: &str) -> TestServer {
        self.server_with(xprtsec, &[])
    }

    fn server_with(&self, xprtsec: &str, extra: &[&str]) -> TestServer {
        let (cert, key, ca) = (
            self.file("server.pem"),
            self.file("server.key"),
            self.file("ca.pem"),
        );
        let mut args = vec![
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
            "--xprtsec",
            xprtsec,
        ];
        args.extend(extra);
        TestServer::start_with(&args)
    }

    /// A URL for `path` on `port` with `query` (acting as uid 1000).
    fn url(&self, port: u16, path: &str, query: &str) -> String {
        let ca = self.file("ca.pem");
        let q = query
            .replace("ROGUE", &self.file("rogue"))
            .replace("CA", &ca)
            .replace("CERT", &self.file("client.pem"))
            .replace("KEY", &self.file("client.key"));
        format!("nfs://127.0.0.1:{port}/{path}?uid=1000&gid=1000&{q}")
    }
}

const PATTERN: &str = "tls-known-pattern-7f3a9c1e-the-wire-must-not-show-this";

fn put_file(s: &TestServer, name: &str) {
    std::fs::write(s.export.join(name), PATTERN.repeat(100)).unwrap();
}

fn fails(args: &[&str]) -> String {
    let out = tarn_output(args);
    assert!(!out.status.success(), "tarn {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn tls_round_trips_and_plain_refused() {
    let pki = Pki::new();
    let s = pki.server("tls,mtls");
    put_file(&s, "f.txt");
    let want = PATTERN.repeat(100);
    for vers in ["4.1", "3"] {
        let u = pki.url(
            s.port(),
            "f.txt",
            &format!("xprtsec=tls&tls-ca=CA&vers={vers}"),
        );
        assert_eq!(tarn(&["cat", &u]), want, "NFSv{vers} over TLS");
        // Writing too: a copy onto the server and back.
        let up = pki.url(
            s.port(),
            &format!("copy{vers}"),
            &format!("xprtsec=tls&tls-ca=CA&vers={vers}"),
        );
        tarn(&["cp", s.export.join("f.txt").to_str().unwrap(), &up]);
        assert_eq!(
            std::fs::read_to_string(s.export.join(format!("copy{vers}"))).unwrap(),
            want
        );
    }
    // By name as well as by IP address SAN.
    let by_name = pki
        .url(s.port(), "f.txt", "xprtsec=tls&tls-ca=CA&vers=4.1")
        .replace("127.0.0.1", "localhost");
    assert_eq!(tarn(&["cat", &by_name]), want);
    // mTLS on an export that takes tls too.
    let m = pki.url(
        s.port(),
        "f.txt",
        "xprtsec=mtls&tls-ca=CA&tls-cert=CERT&tls-key=KEY&vers=4.1",
    );
    assert_eq!(tarn(&["cat", &m]), want);

    // Without TLS: NFSv4 gets WRONGSEC, NFSv3's MOUNT is refused.
    let e = fails(&["cat", &pki.url(s.port(), "f.txt", "vers=4.1")]);
    assert!(e.contains("NFS4ERR_WRONGSEC"), "{e}");
    let e = fails(&["cat", &pki.url(s.port(), "f.txt", "vers=3")]);
    assert!(e.contains("ACCES"), "{e}");
    let log = s.log_text();
    assert!(log.contains("TLS handshake done"), "{log}");
    assert!(
        log.contains("client=CN=client1,O=Tarn tests"),
        "the client's identity is logged: {log}"
    );
    assert!(log.contains("the export requires TLS"), "{log}");
}

#[test]
fn mtls_export_wants_a_client_certificate() {
    let pki = Pki::new();
    let maddr = format!("127.0.0.1:{}", free_port());
    let s = pki.server_with("mtls", &["--metrics", &maddr]);
    put_file(&s, "f.txt");
    let e = fails(&[
        "cat",
        &pki.url(s.port(), "f.txt", "xprtsec=tls&tls-ca=CA&vers=4.1"),
    ]);
    assert!(e.contains("NFS4ERR_WRONGSEC"), "{e}");
    let e = fails(&[
        "cat",
        &pki.url(s.port(), "f.txt", "xprtsec=tls&tls-ca=CA&vers=3"),
    ]);
    assert!(e.contains("ACCES"), "{e}");
    for vers in ["4.1", "3"] {
        let m = pki.url(
            s.port(),
            "f.txt",
            &format!("xprtsec=mtls&tls-ca=CA&tls-cert=CERT&tls-key=KEY&vers={vers}"),
        );
        assert_eq!(tarn(&["cat", &m]), PATTERN.repeat(100));
    }
    // A client that does not trust the server's CA gives up.
    let e = fails(&[
        "cat",
        &pki.url(s.port(), "f.txt", "xprtsec=tls&tls-ca=CERT&vers=4.1"),
    ]);
    assert!(e.contains("TLS"), "{e}");
    // A client certificate from a CA the server does not know.
    // Under TLS 1.3 the client finishes its handshake before the server
    // has judged its certificate: it learns only when the connection
    // closes, so soft, or it would reconnect for ever.
    let rogue = "xprtsec=mtls&tls-ca=CA&tls-cert=ROGUE.pem&tls-key=ROGUE.key&vers=4.1&soft=1&timeo=10&retrans=1";
    fails(&["cat", &pki.url(s.port(), "f.txt", rogue)]);
    let log = s.log_text();
    assert!(
        log.contains("TLS handshake failed") && log.contains("reason=\"unknown-ca\""),
        "{log}"
    );
    // Counted by reason.
    let mut c = TcpStream::connect(&maddr).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    let value = |series: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in {body}"))
    };
    // NFSv4.1 (one connection) and NFSv3 (MOUNT and NFS) with a certificate.
    assert!(value("tarn_tls_handshakes_total{xprtsec=\"mtls\"}") >= 3.0);
    assert!(value("tarn_tls_handshakes_total{xprtsec=\"tls\"}") >= 2.0);
    assert!(value("tarn_tls_handshake_failures_total{reason=\"unknown-ca\"}") >= 1.0);
}

/// Forwards connections on a port of its own to `to`, recording every
/// byte either way.
fn recording_proxy(to: std::net::SocketAddr) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let Ok(u) = TcpStream::connect(to) else {
                return;
            };
            for (mut a, mut b) in [(c.try_clone().unwrap(), u.try_clone().unwrap()), (u, c)] {
                let seen = s2.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        match a.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                seen.lock().unwrap().extend_from_slice(&buf[..n]);
                                if b.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = b.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
    (port, seen)
}

#[test]
fn the_wire_shows_no_plaintext() {
    let pki = Pki::new();
    let s = pki.server("none,tls,mtls");
    put_file(&s, "f.txt");
    let (port, seen) = recording_proxy(s.addr);
    let contains = |hay: &[u8]| hay.windows(PATTERN.len()).any(|w| w == PATTERN.as_bytes());
    // The proxy sees the pattern when the connection is plain...
    let plain = pki.url(port, "f.txt", "vers=4.1");
    assert_eq!(tarn(&["cat", &plain]), PATTERN.repeat(100));
    assert!(
        contains(&seen.lock().unwrap()),
        "the proxy records what passes"
    );
    seen.lock().unwrap().clear();
    // ...and not under TLS, though the same file went through.
    let tls = pki.url(port, "f.txt", "xprtsec=tls&tls-ca=CA&vers=4.1");
    assert_eq!(tarn(&["cat", &tls]), PATTERN.repeat(100));
    let wire = seen.lock().unwrap().clone();
    assert!(
        wire.len() > PATTERN.len() * 100,
        "the file crossed the proxy ({} bytes)",
        wire.len()
    );
    assert!(!contains(&wire), "plaintext on the wire under TLS");
    // The STARTTLS reply is the only RPC in the clear.
    assert!(wire.windows(8).any(|w| w == b"STARTTLS"));
}

/// `tarn bench --sec tls` against an export that takes only TLS: the
/// set-up and every workload go through TLS, and the rows say so.
#[test]
fn bench_over_tls() {
    let pki = Pki::new();
    let s = pki.server("tls");
    let (server, ca) = (format!("127.0.0.1:{}", s.port()), pki.file("ca.pem"));
    let out = tarn_output(&[
        "bench",
        "--server",
        &server,
        "--sec",
        "tls",
        "--tls-ca",
        &ca,
        "--ops",
        "read4k,write1m",
        "--inflight",
        "2",
        "--seconds",
        "0.2",
        "--file-size",
        "2M",
    ]);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "tarn bench failed: {o}\n{e}");
    for op in ["read4k", "write1m"] {
        assert!(
            o.lines()
                .any(|l| l.split_whitespace().take(2).eq([op, "tls"])),
            "no {op} tls row in:\n{o}"
        );
    }
    // Without the CA the server cannot be verified: refused, and said why.
    let e = fails(&[
        "bench", "--server", &server, "--sec", "tls", "--ops", "null",
    ]);
    assert!(e.contains("CA"), "{e}");
}
