//! RPC-with-TLS refusals as the client sees them: final
//! ([`ClientError::Tls`]) when the server refuses us after the handshake
//! (an alert, or a close with no word), a network failure
//! ([`ClientError::Io`]) when the server goes away before the handshake;
//! and a hard [`Channel`] that gives up at once on a final one. A small
//! server in the test speaks STARTTLS and TLS 1.3 (rustls); the
//! certificates are made with the openssl CLI.

use super::*;
use crate::tls::{TlsClient, TlsClientOptions};
use std::path::Path;
use tokio::net::TcpListener;
use tokio_rustls::rustls;

/// A CA and a certificate for 127.0.0.1 signed by it, in `dir`.
fn make_certs(dir: &Path) {
    test_support::pki::make_ca(dir, "/CN=ca");
    test_support::pki::leaf(
        dir,
        "srv",
        "/CN=srv",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
        "2",
    );
}

/// What the test server does once the handshake is over.
#[derive(Clone, Copy)]
enum After {
    /// Closes the connection without a word.
    Close,
    /// Answers one call (any reply record will do).
    Answer,
}

/// A server on loopback: the STARTTLS reply (or a close before it, with
/// `before`), then TLS 1.3 asking for a client certificate when
/// `want_cert` (refusing a client without one: certificate_required).
async fn server(dir: &Path, want_cert: bool, before: bool, after: After) -> SocketAddr {
    let certs = crate::tls::load_certs(&dir.join("srv.pem")).unwrap();
    let key = crate::tls::load_key(&dir.join("srv.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap();
    let b = if want_cert {
        let mut roots = rustls::RootCertStore::empty();
        for c in crate::tls::load_certs(&dir.join("ca.pem")).unwrap() {
            roots.add(c).unwrap();
        }
        b.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap(),
        )
    } else {
        b.with_no_client_auth()
    };
    let mut cfg = b.with_single_cert(certs, key).unwrap();
    cfg.alpn_protocols = vec![crate::tls::ALPN.to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let mut mark = [0u8; 4];
                s.read_exact(&mut mark).await.unwrap();
                let mut rec = vec![0u8; (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize];
                s.read_exact(&mut rec).await.unwrap();
                if before {
                    return; // gone before answering the probe
                }
                let xid = crate::tls::starttls_probe(&rec).unwrap();
                s.write_all(&crate::tls::starttls_reply(xid)).await.unwrap();
                let Ok(mut t) = acceptor.accept(s).await else {
                    return; // refused: rustls sent its alert
                };
                match after {
                    After::Close => drop(t),
                    // Every call, until the client ends the connection.
                    After::Answer => {
                        while t.read_exact(&mut mark).await.is_ok() {
                            let n = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
                            let mut rec = vec![0u8; n];
                            if t.read_exact(&mut rec).await.is_err() {
                                return;
                            }
                            let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
                            let mut out = BytesMut::new();
                            record::begin(&mut out);
                            msg::success_header(xid, &mut out);
                            record::finish(&mut out);
                            if t.write_all(&out).await.is_err() || t.flush().await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

fn client(dir: &Path) -> TlsClient {
    TlsClient::new(
        "127.0.0.1",
        &TlsClientOptions {
            ca: Some(dir.join("ca.pem")),
            ..Default::default()
        },
    )
    .unwrap()
}

async fn connect(addr: SocketAddr, tls: &TlsClient) -> Result<RpcClient, ClientError> {
    let s = TcpStream::connect(addr).await.unwrap();
    RpcClient::from_stream_tls(s, auth_none(), tls).await
}

#[tokio::test]
async fn refusals_after_the_handshake_are_final_going_away_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    make_certs(tmp.path());
    let tls = client(tmp.path());

    // Taken: a connection.
    let ok = server(tmp.path(), false, false, After::Answer).await;
    connect(ok, &tls).await.unwrap();

    // A certificate wanted, none sent: the alert comes after our side
    // of the handshake, and is the error.
    let want = server(tmp.path(), true, false, After::Answer).await;
    let e = connect(want, &tls).await.unwrap_err();
    assert_final_saying(&e, "TLS alert certificate_required");

    // Closed right after the handshake, without an alert.
    let close = server(tmp.path(), false, false, After::Close).await;
    let e = connect(close, &tls).await.unwrap_err();
    assert_final_saying(&e, "right after the TLS handshake");

    // Gone before the STARTTLS reply: a network failure, to retry.
    let gone = server(tmp.path(), false, true, After::Answer).await;
    let e = connect(gone, &tls).await.unwrap_err();
    assert!(!e.is_final() && matches!(e, ClientError::Io(_)), "{e:?}");

    // A hard channel gives up at once on a final refusal...
    let o = ChannelOptions {
        hard: true,
        tls: Some(tls.clone()),
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let e = Channel::connect(want, auth_none(), o.clone())
        .await
        .unwrap_err();
    assert!(e.is_final(), "{e:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    // ...and a call on a channel whose reconnect is refused fails with
    // the reason instead of trying for ever.
    let e = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        call_after_refusal(tmp.path(), &tls),
    )
    .await
    .expect("a refused reconnect must not be retried for ever");
    assert!(e.is_final(), "{e:?}");
}

/// `e` is a final refusal (not to be retried) that says `what`.
#[track_caller]
fn assert_final_saying(e: &ClientError, what: &str) {
    assert!(e.is_final(), "{e:?}");
    assert!(e.to_string().contains(what), "{e}");
}

/// A call on a hard channel whose connection broke and whose server now
/// refuses us: its error.
async fn call_after_refusal(dir: &Path, tls: &TlsClient) -> ClientError {
    // Made while the server takes us; the listener then refuses.
    let refuse = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok = server(dir, false, false, After::Answer).await;
    let want = server(dir, true, false, After::Answer).await;
    // A proxy in front: to `ok` first, to `want` once `refuse` is set.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front = l.local_addr().unwrap();
    let r2 = refuse.clone();
    tokio::spawn(async move {
        loop {
            let (mut a, _) = l.accept().await.unwrap();
            let to = if r2.load(Ordering::Relaxed) { want } else { ok };
            tokio::spawn(async move {
                let mut b = TcpStream::connect(to).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            });
        }
    });
    let o = ChannelOptions {
        hard: true,
        timeo: std::time::Duration::from_secs(60),
        min_backoff: std::time::Duration::from_millis(10),
        tls: Some(tls.clone()),
        ..Default::default()
    };
    let ch = Channel::connect(front, auth_none(), o).await.unwrap();
    ch.call_raw(100003, 3, 0, &[]).await.unwrap();
    refuse.store(true, Ordering::Relaxed);
    for (_, c) in ch.connections().await {
        c.close();
    }
    ch.call_raw(100003, 3, 0, &[]).await.unwrap_err()
}
