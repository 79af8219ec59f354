//! RPC-with-TLS with `tls.ktls = auto`: calls go through, every
//! connection is counted on one path (kTLS where the kernel has the TLS
//! ULP, rustls where it has not, as on the development host), a client's
//! close_notify closes the connection cleanly (the server answers with its
//! own), and a client's KeyUpdate closes the connection, under kTLS (the
//! kernel cannot be given the client's next key) and under Tarn's own
//! records alike (tls_records: the traffic secret the next key derives
//! from is not extracted from rustls).
//!
//! The certificate is made with the openssl CLI, or taken from
//! `$KTLS_TEST_PKI` (server.pem, server.key, optionally ca.pem; the
//! certificate must name 127.0.0.1): the Debian 13 guest, where the kTLS
//! path runs, has no openssl.
//!
//!   cargo test -p rpc --test ktls

use bytes::BytesMut;
use rpc::ktls_offload::{probe_ulp, KtlsMode};
use rpc::tls::{TlsClient, TlsClientOptions, TlsFiles, TlsServer};
use rpc::{CallContext, CallError, Observer, PeerStats, Server, ServerConfig, Service};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::Decoder;

const PROG: u32 = 400001;

/// Program 400001 v1: its NULL procedure only.
struct Null;

impl Service for Null {
    fn versions(&self, prog: u32) -> Option<(u32, u32)> {
        (prog == PROG).then_some((1, 1))
    }
    fn idempotent(&self, _: u32, _: u32, _: u32) -> bool {
        true
    }
    fn procedure_name(&self, _: u32, _: u32, _: u32) -> &'static str {
        "NULL"
    }
    async fn call(&self, _: &CallContext, _: Decoder, _: &mut BytesMut) -> Result<(), CallError> {
        Err(CallError::ProcUnavail)
    }
}

/// Counts the connections on each path: [kernel, rustls].
#[derive(Default)]
struct Paths([AtomicU64; 2]);

impl Observer for Paths {
    fn connection_opened(&self, _: IpAddr) -> Arc<dyn PeerStats> {
        Arc::new(rpc::observe::NoStats)
    }
    fn tls_path(&self, kernel: bool) {
        self.0[usize::from(!kernel)].fetch_add(1, Ordering::Relaxed);
    }
}

/// (server certificate, its key, the CA a client trusts), and the temp
/// dir that holds them.
fn pki() -> (PathBuf, PathBuf, PathBuf, Option<tempfile::TempDir>) {
    if let Some(d) = std::env::var_os("KTLS_TEST_PKI") {
        let d = PathBuf::from(d);
        let ca = if d.join("ca.pem").exists() {
            d.join("ca.pem")
        } else {
            d.join("server.pem")
        };
        return (d.join("server.pem"), d.join("server.key"), ca, None);
    }
    let t = tempfile::tempdir().unwrap();
    let mut a = vec!["req", "-x509"];
    a.extend(test_support::pki::EC_KEY);
    a.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-addext",
        "extendedKeyUsage=serverAuth",
    ]);
    test_support::pki::openssl(t.path(), &a);
    let p = |n: &str| t.path().join(n);
    (p("server.pem"), p("server.key"), p("server.pem"), Some(t))
}

async fn start(cert: &Path, key: &Path) -> (std::net::SocketAddr, Arc<Paths>) {
    let tls = TlsServer::new(TlsFiles {
        cert: cert.into(),
        key: key.into(),
        client_ca: None,
    })
    .unwrap();
    tls.set_ktls(KtlsMode::Auto);
    let cfg = ServerConfig {
        tls: Some(tls),
        ..Default::default()
    };
    let paths = Arc::new(Paths::default());
    let s = Server::with_observer(Arc::new(Null), cfg, paths.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { s.run(l).await });
    (addr, paths)
}

/// A NULL call to PROG, record mark included.
fn null_call(xid: u32) -> Vec<u8> {
    let mut v = (0x8000_0000u32 | 40).to_be_bytes().to_vec();
    for w in [xid, 0, 2, PROG, 1, 0, 0, 0, 0, 0] {
        v.extend(w.to_be_bytes());
    }
    v
}

/// Sends a NULL call and reads its reply: whether it came back accepted.
async fn ping<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, xid: u32) -> std::io::Result<bool> {
    s.write_all(&null_call(xid)).await?;
    s.flush().await?;
    let mut mark = [0u8; 4];
    s.read_exact(&mut mark).await?;
    let mut rec = vec![0u8; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
    s.read_exact(&mut rec).await?;
    let w = |i: usize| u32::from_be_bytes(rec[i * 4..i * 4 + 4].try_into().unwrap());
    // xid, REPLY, MSG_ACCEPTED, verifier (AUTH_NONE, 0), SUCCESS.
    Ok(rec.len() == 24 && w(0) == xid && w(1) == 1 && w(2) == 0 && w(5) == 0)
}

/// STARTTLS and the handshake, as Tarn's client does them.
async fn connect(
    addr: std::net::SocketAddr,
    ca: &Path,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&rpc::tls::starttls_call(7, PROG, 1))
        .await
        .unwrap();
    let mut rec = [0u8; 36];
    s.read_exact(&mut rec).await.unwrap();
    assert!(rpc::tls::is_starttls_reply(&rec[4..], 7));
    let c = TlsClient::new(
        "127.0.0.1",
        &TlsClientOptions {
            ca: Some(ca.into()),
            ..Default::default()
        },
    )
    .unwrap();
    tokio_rustls::TlsConnector::from(c.config.clone())
        .connect(c.server_name.clone(), s)
        .await
        .unwrap()
}

/// Reads until the server closes: Ok(true) after its close_notify, Ok(false)
/// at a bare EOF, Err if it does not close within 10 s.
async fn closed<S: AsyncRead + Unpin>(s: &mut S) -> Result<bool, ()> {
    let mut b = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await {
        Ok(Ok(0)) => Ok(true),
        Ok(Ok(n)) => panic!("{n} bytes after the close"),
        Ok(Err(_)) => Ok(false),
        Err(_) => Err(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ktls_auto_serves_alerts_and_key_updates() {
    // The server's log lines, shown with --nocapture.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("rpc=debug")
        .with_ansi(false)
        .with_test_writer()
        .try_init();
    let kernel = probe_ulp().is_ok();
    let (cert, key, ca, _dir) = pki();
    let (addr, paths) = start(&cert, &key).await;

    // Calls work, several on one connection; the client's close_notify
    // closes it, the server answering with its own.
    let mut t = connect(addr, &ca).await;
    for xid in 1..=3 {
        assert!(ping(&mut t, xid).await.unwrap(), "call {xid}");
    }
    t.get_mut().1.send_close_notify();
    t.flush().await.unwrap();
    assert_eq!(closed(&mut t).await, Ok(true), "close_notify answered");

    // A KeyUpdate from the client.
    let mut t = connect(addr, &ca).await;
    assert!(ping(&mut t, 10).await.unwrap());
    t.get_mut().1.refresh_traffic_keys().unwrap();
    // Logged and closed (the reader sees the end of the stream).
    let r = ping(&mut t, 11).await;
    assert!(!matches!(r, Ok(true)), "a call after KeyUpdate: {r:?}");
    assert!(closed(&mut t).await.is_ok());
    drop(t);

    let n = |i: usize| paths.0[i].load(Ordering::Relaxed);
    if kernel {
        assert_eq!((n(0), n(1)), (2, 0), "both connections in the kernel");
    } else {
        assert_eq!((n(0), n(1)), (0, 2), "both connections on Tarn's records");
    }
}
