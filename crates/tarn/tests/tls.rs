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
use std::process::Command;
use std::sync::{Arc, Mutex};
use test_support::pki::*;

const PATTERN: &str = "tls-known-pattern-7f3a9c1e-the-wire-must-not-show-this";

fn put_file(s: &TestServer, name: &str) {
    std::fs::write(s.export.join(name), PATTERN.repeat(100)).unwrap();
}

fn fails(args: &[&str]) -> String {
    let out = tarn_output(args);
    assert!(!out.status.success(), "tarn {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `f.txt` read over TLS with NFS version `vers` equals `want`, and a copy
/// written onto the server over TLS reads back the same (`what` names the
/// run in a failure).
fn round_trip_over_tls(pki: &Pki, s: &TestServer, vers: &str, want: &str, what: &str) {
    let q = format!("xprtsec=tls&tls-ca=CA&vers={vers}");
    let u = pki.url(s.port(), "f.txt", &q);
    assert_eq!(tarn(&["cat", &u]), want, "{what}: NFSv{vers} over TLS");
    let up = pki.url(s.port(), &format!("copy{vers}"), &q);
    tarn(&["cp", s.export.join("f.txt").to_str().unwrap(), &up]);
    assert_eq!(
        std::fs::read_to_string(s.export.join(format!("copy{vers}"))).unwrap(),
        want,
        "{what}: NFSv{vers} write over TLS"
    );
}

#[test]
fn tls_round_trips_and_plain_refused() {
    let pki = Pki::new();
    let s = pki.server("tls,mtls");
    put_file(&s, "f.txt");
    let want = PATTERN.repeat(100);
    for vers in ["4.1", "3"] {
        round_trip_over_tls(&pki, &s, vers, &want, "");
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

    // Without TLS: NFSv4 gets WRONGSEC; NFSv3's MOUNT answers (the Linux
    // client sends it in the clear), its NFS calls get AUTH_TOOWEAK.
    let e = fails(&["cat", &pki.url(s.port(), "f.txt", "vers=4.1")]);
    assert!(e.contains("NFS4ERR_WRONGSEC"), "{e}");
    let e = fails(&["cat", &pki.url(s.port(), "f.txt", "vers=3")]);
    assert!(e.contains("AUTH_TOOWEAK"), "{e}");
    let log = s.log_text();
    assert!(log.contains("TLS handshake done"), "{log}");
    assert!(
        log.contains("client=CN=client1,O=Tarn tests"),
        "the client's identity is logged: {log}"
    );
    assert!(
        log.contains("AUTH_TOOWEAK: the export requires a TLS connection"),
        "{log}"
    );
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
    assert!(e.contains("AUTH_TOOWEAK"), "{e}");
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
    // has judged its certificate; the client's first call brings out the
    // refusal, final even when hard (tests/tls_client.rs).
    let rogue = "xprtsec=mtls&tls-ca=CA&tls-cert=ROGUE.pem&tls-key=ROGUE.key&vers=4.1&soft=1&timeo=10&retrans=1";
    fails(&["cat", &pki.url(s.port(), "f.txt", rogue)]);
    let refused =
        |log: &str| log.contains("TLS handshake failed") && log.contains("reason=\"unknown-ca\"");
    let log = s.log_when(refused);
    assert!(refused(&log), "{log}");
    // Counted by reason.
    let body = metrics_text(&maddr);
    let value = |series: &str| sample(&body, series);
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

/// `tarn check-config` reads the TLS material: a good configuration
/// passes and says what it found; an expired certificate and a key that
/// is not the certificate's fail, naming the file.
#[test]
fn check_config_checks_the_certificates() {
    let pki = Pki::new();
    let d = &pki.dir;
    // An expired one: valid until a day before it was made.
    pki.leaf(
        "old",
        "/CN=old.example",
        "subjectAltName=DNS:old.example\n",
        "-1",
    );
    let config = |cert: &str, key: &str, name: &str| -> String {
        let p = d.join(name);
        std::fs::write(
            &p,
            format!(
                "[tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n[[export]]\npath = \"{}\"\nclients = [\"0.0.0.0/0\"]\nxprtsec = [\"mtls\"]\n",
                pki.file(cert),
                pki.file(key),
                pki.file("ca.pem"),
                d.display()
            ),
        )
        .unwrap();
        p.to_str().unwrap().to_string()
    };
    let good = config("server.pem", "server.key", "good.toml");
    let out = tarn_output(&["check-config", &good]);
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{so}{se}");
    assert!(
        so.contains("server certificate CN=localhost (DNS:localhost, IP:127.0.0.1)"),
        "{so}"
    );
    // The test certificates live two days: close to their end.
    assert!(se.contains("warning:") && se.contains("expires on"), "{se}");

    // check-config of `cfg` fails, naming `file` and its `problem`, and
    // saying `detail`.
    let refused = |cfg: &str, file: &str, problem: &str, detail: &str| {
        let e = fails(&["check-config", cfg]);
        assert!(
            e.contains(&format!("{}: {problem}", pki.file(file))) && e.contains(detail),
            "{e}"
        );
    };
    refused(
        &config("old.pem", "old.key", "expired.toml"),
        "old.pem",
        "the server certificate expired on",
        "subject CN=old.example",
    );
    refused(
        &config("server.pem", "client.key", "mismatch.toml"),
        "client.key",
        "this key is not the one of the certificate",
        "expected the private key of CN=localhost",
    );
}

/// `tarn doctor` explains failed handshakes and refusals from the
/// server's record: an expired client certificate, one from a CA the
/// server does not know, a client that does not trust the server's
/// certificate, and one without certificate on an mTLS export.
#[test]
fn doctor_explains_tls_failures() {
    let pki = Pki::new();
    pki.leaf(
        "old",
        "/CN=oldclient",
        "extendedKeyUsage=clientAuth\n",
        "-1",
    );
    let s = pki.server("mtls");
    put_file(&s, "f.txt");
    let soft = "&vers=4.1&soft=1&timeo=10&retrans=1";
    for q in [
        "xprtsec=mtls&tls-ca=CA&tls-cert=ROGUE.pem&tls-key=ROGUE.key",
        "xprtsec=mtls&tls-ca=CA&tls-cert=OLD.pem&tls-key=OLD.key",
        "xprtsec=tls&tls-ca=CERT",
        "xprtsec=tls&tls-ca=CA",
    ] {
        // Placeholders are replaced after url()'s, which a path could contain.
        let u = pki
            .url(s.port(), "f.txt", &format!("{q}{soft}"))
            .replace("OLD", &pki.file("old"));
        fails(&["cat", &u]);
    }
    let text = finish_doctor(spawn_doctor(&s, "0.5", &[]));
    let want = [
        "[tls-client-cert-unknown-ca] client 127.0.0.1: the client's certificate (subject CN=rogue) was issued by CN=rogue, which is not in the configured client CA ",
        "[tls-client-cert-expired] client 127.0.0.1: the client's certificate expired on ",
        "(subject CN=oldclient, issuer CN=Tarn test CA)",
        "[tls-client-distrusts-us] client 127.0.0.1: the client aborted the handshake with the alert ",
        "names DNS:localhost, IP:127.0.0.1 and expires on",
        "must mount by a name or IP address our certificate names",
        "[tls-no-client-cert] client 127.0.0.1: the client sent no certificate but export ",
    ];
    for w in want {
        assert!(text.contains(w), "{w:?} not in:\n{text}");
    }
}

/// `[[tls.identity]]`: the AUTH_SYS calls of a connection whose client
/// certificate maps run as the mapped user whatever uid they send (a
/// certificate mapped to root is still root-squashed by the export); those
/// of an unmapped certificate keep their own.
#[test]
fn mapped_client_certificate_runs_as_its_user() {
    let pki = Pki::new();
    // client2 (a SAN), mapped to root; client3, not mapped.
    for (name, ext) in [
        ("client2", "subjectAltName=DNS:client2.example\n"),
        ("client3", ""),
    ] {
        pki.leaf(
            name,
            &format!("/CN={name}"),
            &format!("{ext}extendedKeyUsage=clientAuth\n"),
            "2",
        );
    }
    let (tmp, export, state) = temp_export();
    let port = free_port();
    let file = tmp.path().join("tarn.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\n\n[tls]\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n\n[[tls.identity]]\nmatch = \"CN=client1\"\nuid = 1234\ngid = 1234\ngids = [1234, 5000]\n\n[[tls.identity]]\nmatch = \"san:dns:client2.example\"\nuid = 0\ngid = 0\n\n[[export]]\npath = \"{}\"\npseudo = \"/\"\nxprtsec = [\"mtls\"]\nrules = [ {{ client = \"127.0.0.1\", options = [\"rw\"] }} ]\n",
            state.display(),
            pki.file("server.pem"),
            pki.file("server.key"),
            pki.file("ca.pem"),
            export.display()
        ),
    )
    .unwrap();
    let log = state.join("server.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tarn"))
        .args([
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--log-level",
            "debug",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let _guard = Kill(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("tarn: exporting"), "{line:?}");
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));

    let src = tmp.path().join("src.txt");
    std::fs::write(&src, "hello").unwrap();
    use std::os::unix::fs::MetadataExt;
    for (cert, name, vers, want) in [
        ("client", "mapped4", "4.1", 1234),
        ("client", "mapped3", "3", 1234),
        // Mapped to root, squashed by the export (root_squash).
        ("client2", "root", "4.1", 65534),
        ("client3", "unmapped", "4.1", 1000),
    ] {
        let q = format!("xprtsec=mtls&tls-ca=CA&tls-cert=@.pem&tls-key=@.key&vers={vers}");
        let u = pki.url(port, name, &q).replace('@', &pki.file(cert));
        tarn(&["cp", src.to_str().unwrap(), &u]);
        let m = std::fs::metadata(export.join(name)).unwrap();
        assert_eq!((m.uid(), name), (want, name));
        if want == 1234 {
            assert_eq!(m.gid(), 1234);
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("TLS identity mapped") && text.contains("client=CN=client1,O=Tarn tests"),
        "{text}"
    );

    // SIGHUP re-reads the rules: client3 now maps to its own user.
    let conf = std::fs::read_to_string(&file).unwrap().replace(
        "[[export]]",
        "[[tls.identity]]\nmatch = \"CN=client3\"\nuid = 4321\ngid = 4321\n\n[[export]]",
    );
    std::fs::write(&file, conf).unwrap();
    let ok = Command::new("kill")
        .args(["-HUP", &_guard.0.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("TLS identity rules: 3 now, 2 before")
    {
        assert!(std::time::Instant::now() < deadline, "no reload logged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let q = "xprtsec=mtls&tls-ca=CA&tls-cert=@.pem&tls-key=@.key&vers=4.1";
    let u = pki
        .url(port, "remapped", q)
        .replace('@', &pki.file("client3"));
    tarn(&["cp", src.to_str().unwrap(), &u]);
    let m = std::fs::metadata(export.join("remapped")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4321, 4321));
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

/// The `tarn_tls_connections_total` series by path, from the metrics page.
fn tls_paths(maddr: &str) -> (f64, f64) {
    let body = metrics_text(maddr);
    let value = |series: &str| sample(&body, series);
    (
        value("tarn_tls_connections_total{path=\"ktls\"}"),
        value("tarn_tls_connections_total{path=\"user\"}"),
    )
}

/// `--tls-ktls auto`: where the kernel has no TLS ULP (no `CONFIG_TLS`,
/// as on the development host) every connection stays in user space and
/// works, the startup line says why once (not per connection), and the
/// metric counts the rustls path; where it has one, the connections go
/// to the kernel and work the same. `off` keeps them all in user space.
#[test]
fn ktls_auto_offloads_or_falls_back() {
    let pki = Pki::new();
    let want = PATTERN.repeat(100);
    let ulp = rpc::ktls_offload::probe_ulp();
    for mode in ["auto", "off"] {
        let maddr = format!("127.0.0.1:{}", free_port());
        let s = pki.server_with("tls,mtls", &["--metrics", &maddr, "--tls-ktls", mode]);
        put_file(&s, "f.txt");
        // NFSv4.1 (one connection) and NFSv3 (MOUNT, then NFS).
        for vers in ["4.1", "3"] {
            round_trip_over_tls(&pki, &s, vers, &want, mode);
        }
        let (kernel, user) = tls_paths(&maddr);
        let log = s.log_text();
        let done = log.matches("TLS handshake done").count() as f64;
        assert!(done >= 4.0, "{log}");
        assert_eq!(
            kernel + user,
            done,
            "every TLS connection counted once: {log}"
        );
        match (mode, &ulp) {
            ("off", _) => {
                assert_eq!(kernel, 0.0);
                assert!(
                    log.contains("no kTLS offload (tls.ktls = \"off\")"),
                    "{log}"
                );
            }
            (_, Err(why)) => {
                assert_eq!(kernel, 0.0, "{log}");
                // Said once, at startup, whatever the connections.
                assert_eq!(
                    log.matches("connections use Tarn's TLS records in user space")
                        .count(),
                    1,
                    "{log}"
                );
                assert!(
                    log.contains("no TLS ULP") || log.contains(&why[..20]),
                    "{log}"
                );
            }
            (_, Ok(())) => {
                assert_eq!(user, 0.0, "the kernel took every connection: {log}");
                assert!(log.contains("kTLS offload: auto"), "{log}");
            }
        }
    }
}
