//! `tarn doctor`'s Kerberos findings, provoked by scripted RPCSEC_GSS
//! clients (each from its own loopback address) against a real MIT KDC:
//! bursts of small FILE_SYNC writes from a client whose context expires
//! within minutes (the credential-expiry field report), and calls dropped
//! as outside the GSS sequence window. A calm GSS neighbour is not named.
//! `tarn top` shows each client's principal.

mod common;
use testkdc as kdc;

use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use rpc::client::gss::GssClient;
use rpc::client::{auth_none, ClientError, RpcClient};
use rpc::gss::GssService;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use xdr::Unpack;

/// A GSS context over a connection from `ip`.
async fn gss_from(server: SocketAddr, ip: &str) -> GssClient {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(ip.parse().unwrap(), 0)).unwrap();
    let s = sock.connect(server).await.unwrap();
    let rpc = RpcClient::from_stream(s, auth_none()).unwrap();
    GssClient::establish(rpc, NFS_PROGRAM, 3, "nfs@localhost")
        .await
        .expect("establish a GSS context")
}

fn write_args(fh: &NfsFh3, offset: u64) -> Bytes {
    xdr::to_bytes(&Write3args {
        file: fh.clone(),
        offset,
        count: 4096,
        stable: StableHow::FILE_SYNC,
        data: Bytes::from(vec![9u8; 4096]),
    })
}

#[test]
fn doctor_explains_kerberos_clients() {
    // A ten-minute ticket: every context made with it expires within the
    // doctor's margin, as in the report where writes turned synchronous in
    // the last minutes of a credential's life.
    let kdc = kdc_with_ticket("short", "10m");
    let (_tmp, export, state) = temp_export();
    // The test principal is not a local user: it works as the anonymous ids.
    let file = export.join("synced");
    world_writable(&file, b"");
    let s = launch_krb(&kdc, &export, &state, &["--allow", "127.0.0.0/8"]);
    let (mut c, root) = mounted_root(&s);
    let fh = match nfs_call::<_, Lookup3res>(
        &mut c,
        7,
        NFSPROC3_LOOKUP,
        &Lookup3args {
            what: Diropargs3 {
                dir: root.clone(),
                name: Bytes::from_static(b"synced"),
            },
        },
    ) {
        Lookup3res::NFS3_OK(ok) => ok.object,
        other => panic!("LOOKUP: {other:?}"),
    };

    let rt = runtime();
    let out = rt.block_on(async {
        let syncer = gss_from(s.addr, "127.0.0.2").await;
        let drifter = gss_from(s.addr, "127.0.0.3").await;
        let calm = gss_from(s.addr, "127.0.0.1").await;
        let doctor = spawn_doctor(&s, "2.5", &["--small-sync-writes", "10"]);
        let until = Instant::now() + Duration::from_secs(3);
        // 127.0.0.2: 4 KiB FILE_SYNC WRITEs under krb5i, one after another.
        let fh2 = fh.clone();
        let t1 = tokio::spawn(async move {
            let mut off = 0;
            while Instant::now() < until {
                let mut d = syncer
                    .call(
                        GssService::Integrity,
                        NFSPROC3_WRITE,
                        &write_args(&fh2, off),
                    )
                    .await
                    .unwrap();
                assert!(matches!(
                    Write3res::unpack(&mut d),
                    Ok(Write3res::NFS3_OK(_))
                ));
                off += 4096;
            }
        });
        // 127.0.0.3: a call numbered far ahead moves the window; one
        // numbered far behind it is then dropped (and the connection closed).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ga = xdr::to_bytes(&Getattr3args {
            object: root.clone(),
        });
        let ahead = drifter
            .build_with(
                proto::gss::RpcGssProcT::RPCSEC_GSS_DATA,
                100_000,
                GssService::None,
                NFSPROC3_GETATTR,
                &ga,
            )
            .unwrap();
        let rep = drifter.send(&ahead).await.unwrap();
        drifter.open_reply(&ahead, rep).unwrap();
        let behind = drifter
            .build(GssService::None, NFSPROC3_GETATTR, &ga)
            .unwrap();
        let e = drifter.send(&behind).await.unwrap_err();
        assert!(matches!(e, ClientError::Closed), "{e}");
        // 127.0.0.1: a few calls, nothing wrong.
        while Instant::now() < until {
            calm.call(GssService::Privacy, NFSPROC3_GETATTR, &ga)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        t1.await.unwrap();
        tokio::task::spawn_blocking(move || finish_doctor(doctor))
            .await
            .unwrap()
    });
    eprintln!("{out}");
    assert_contains(
        &out,
        &[
            "[small-sync-writes] client 127.0.0.2",
            "its GSS context expires in",
            "renew tickets well before they expire",
            "[gss-window-drops] client 127.0.0.3",
        ],
    );
    assert!(!out.contains("client 127.0.0.1"), "{out}");
    // `tarn top` names the clients' principals next to their addresses.
    let top = tarn_admin(&s, "top", &["--once", "--interval", "0.2"]);
    assert!(
        top.contains(&format!("127.0.0.2 ({}@{})", kdc::USER, kdc::REALM)),
        "{top}"
    );
}
