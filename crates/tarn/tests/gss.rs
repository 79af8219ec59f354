//! RPCSEC_GSS against a real MIT KDC started on loopback: contexts with
//! krb5, krb5i and krb5p; NFSv3 GETATTR/WRITE/READ under each; krb5p data
//! never in clear on the wire; a forged header checksum refused without
//! moving the window; a replay dropped and counted (and the connection
//! closed); out-of-order calls inside the window accepted; 1024 calls with
//! 128 in flight on one krb5p context and zero drops; an expired context
//! gets RPCSEC_GSS_CREDPROBLEM; AUTH_SYS (and krb5) to a krb5p-only export
//! get AUTH_TOOWEAK, NFSv4 WRONGSEC; a ticket from a realm the server has no
//! key for is refused at INIT; a retransmitted REMOVE is answered from the
//! DRC with a reply protected for its new sequence number. Prints 1 MiB READ
//! throughput per flavor.

mod common;
use testkdc as kdc;

use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use proto::rpc::AuthStat;
use rpc::client::gss::GssClient;
use rpc::client::{auth_none, auth_sys, ClientError, RpcClient};
use rpc::gss::GssService;
use rpc::msg::ReplyStatus;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use test_support::metrics::metric;
use xdr::Unpack;

const MARK: &[u8] = b"TARN-SECRET-PAYLOAD-";

fn secret(n: usize) -> Vec<u8> {
    MARK.iter().copied().cycle().take(n).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn gss(addr: SocketAddr) -> GssClient {
    let rpc = RpcClient::connect(addr, auth_none()).await.unwrap();
    GssClient::establish(rpc, NFS_PROGRAM, 3, "nfs@localhost")
        .await
        .expect("establish a GSS context")
}

async fn lookup(c: &GssClient, svc: GssService, dir: &NfsFh3, name: &str) -> NfsFh3 {
    let a = Lookup3args {
        what: Diropargs3 {
            dir: dir.clone(),
            name: Bytes::copy_from_slice(name.as_bytes()),
        },
    };
    let mut d = c
        .call(svc, NFSPROC3_LOOKUP, &xdr::to_bytes(&a))
        .await
        .unwrap();
    match Lookup3res::unpack(&mut d).unwrap() {
        Lookup3res::NFS3_OK(ok) => ok.object,
        other => panic!("LOOKUP {name}: {other:?}"),
    }
}

fn read_args(fh: &NfsFh3, offset: u64, count: u32) -> Bytes {
    xdr::to_bytes(&Read3args {
        file: fh.clone(),
        offset,
        count,
    })
}

fn read_ok(mut d: xdr::Decoder) -> Bytes {
    match Read3res::unpack(&mut d).unwrap() {
        Read3res::NFS3_OK(ok) => ok.data,
        other => panic!("READ: {other:?}"),
    }
}

fn getattr_args(fh: &NfsFh3) -> Bytes {
    xdr::to_bytes(&Getattr3args { object: fh.clone() })
}

fn is_getattr_ok(mut d: xdr::Decoder) -> bool {
    matches!(Getattr3res::unpack(&mut d), Ok(Getattr3res::NFS3_OK(_)))
}

/// `e` is the server's refusal of the call's credential with `want`.
#[track_caller]
fn assert_auth_error(e: &ClientError, want: AuthStat) {
    assert!(
        matches!(e, ClientError::Rpc(ReplyStatus::AuthError(got)) if *got == want),
        "{e}"
    );
}

#[test]
fn rpcsec_gss_with_a_real_kdc() {
    let t0 = Instant::now();
    let kdc = kdc::Kdc::start();
    // The server and this process's GSS client read the test realm's config.
    let cc = kdc.kinit("long", "10m");
    kdc.activate(&cc);

    let (tmp, export, state) = temp_export();
    // alice is not a local user here: she maps to the anonymous ids, so
    // the file she uses is world-writable.
    let data = secret(1 << 20);
    let file = export.join("data");
    world_writable(&file, &data);
    let mport = free_port();
    let maddr = format!("127.0.0.1:{mport}");
    let s = launch_krb(&kdc, &export, &state, &["--metrics", &maddr]);
    // A second server whose export is krb5p only.
    let (_tmp2, export2, state2) = temp_export();
    std::fs::write(export2.join("f"), b"x").unwrap();
    let s2 = launch_sec(&kdc, &export2, &state2, "krb5p", &[]);

    // MOUNT (with AUTH_SYS, as clients do) lists the export's flavors.
    let (mut c, root) = mounted_root(&s);
    let mnt = {
        let args = xdr::to_bytes(&proto::mount::Dirpath(Bytes::from_static(b"/")));
        let r = raw_call(
            &mut c,
            &call_record(
                9,
                proto::mount::MOUNT_PROGRAM,
                3,
                1,
                &auth_sys(0, 0, &[], "t"),
                &args,
            ),
        )
        .unwrap();
        let (_, _, mut d) = rpc::msg::decode_reply(r.into()).unwrap();
        proto::mount::Mountres3::unpack(&mut d).unwrap()
    };
    let proto::mount::Mountres3::MNT3_OK(ok) = mnt else {
        panic!("{mnt:?}")
    };
    assert_eq!(ok.auth_flavors, vec![390003, 390004, 390005, 1]);

    let rt = runtime();
    rt.block_on(async {
        // --- every service: GETATTR, WRITE, READ ---
        for svc in [GssService::None, GssService::Integrity, GssService::Privacy] {
            let g = gss(s.addr).await;
            assert_eq!(g.window, 128, "advertised window");
            let fh = lookup(&g, svc, &root, "data").await;
            assert!(is_getattr_ok(
                g.call(svc, NFSPROC3_GETATTR, &getattr_args(&fh))
                    .await
                    .unwrap()
            ));
            let chunk = secret(8192);
            let w = Write3args {
                file: fh.clone(),
                offset: 0,
                count: chunk.len() as u32,
                stable: StableHow::FILE_SYNC,
                data: Bytes::from(chunk.clone()),
            };
            let b = g.build(svc, NFSPROC3_WRITE, &xdr::to_bytes(&w)).unwrap();
            // krb5p: what goes on the wire never shows the data.
            assert_eq!(
                contains(&b.record, MARK),
                svc != GssService::Privacy,
                "{svc:?} call bytes"
            );
            let rep = g.send(&b).await.unwrap();
            let mut d = g.open_reply(&b, rep).unwrap();
            assert!(matches!(
                Write3res::unpack(&mut d).unwrap(),
                Write3res::NFS3_OK(_)
            ));
            let b = g
                .build(svc, NFSPROC3_READ, &read_args(&fh, 0, 65536))
                .unwrap();
            let rep = g.send(&b).await.unwrap();
            assert_eq!(
                contains(&rep, MARK),
                svc != GssService::Privacy,
                "{svc:?} reply bytes"
            );
            let got = read_ok(g.open_reply(&b, rep).unwrap());
            assert_eq!(&got[..], &data[..65536], "{svc:?} READ");
            g.destroy().await.unwrap();
            // A destroyed context is gone.
            let e = g
                .call(svc, NFSPROC3_GETATTR, &getattr_args(&fh))
                .await
                .unwrap_err();
            assert_auth_error(&e, AuthStat::RPCSEC_GSS_CREDPROBLEM);
        }

        let g = gss(s.addr).await;
        let p = GssService::Privacy;
        let fh = lookup(&g, p, &root, "data").await;
        let ga = getattr_args(&fh);

        // --- a retransmitted REMOVE (same xid, new sequence number) is answered
        // from the DRC, protected for its own sequence number ---
        for svc in [GssService::None, GssService::Integrity, GssService::Privacy] {
            let name = format!("drc-{svc:?}");
            std::fs::write(export.join(&name), b"x").unwrap();
            let a = xdr::to_bytes(&Remove3args {
                object: Diropargs3 {
                    dir: root.clone(),
                    name: Bytes::from(name.clone()),
                },
            });
            let removed = |d: xdr::Decoder| {
                let mut d = d;
                matches!(Remove3res::unpack(&mut d), Ok(Remove3res::NFS3_OK(_)))
            };
            let b = g.build(svc, NFSPROC3_REMOVE, &a).unwrap();
            let rep = g.send(&b).await.unwrap();
            assert!(removed(g.open_reply(&b, rep).unwrap()), "{svc:?} REMOVE");
            let again = g.rebuild(&b, NFSPROC3_REMOVE, &a).unwrap();
            assert_ne!(again.seq, b.seq);
            let rep = g.send(&again).await.unwrap();
            // Executed again it would be NOENT; the verifier must check with the new seq.
            assert!(
                removed(g.open_reply(&again, rep).unwrap()),
                "{svc:?} retransmitted REMOVE"
            );
        }

        // --- a tampered ciphertext (krb5p) and checksum (krb5i) are GARBAGE_ARGS ---
        for svc in [GssService::Privacy, GssService::Integrity] {
            let b = g.build(svc, NFSPROC3_GETATTR, &ga).unwrap();
            let mut rec = b.record.to_vec();
            let n = rec.len();
            rec[n - 8] ^= 0x40;
            let rep = g.rpc.send_record(b.xid, &rec).await.unwrap();
            let (_, st, _) = rpc::msg::decode_reply(rep).unwrap();
            assert_eq!(
                st,
                ReplyStatus::Accepted(proto::rpc::AcceptStat::GARBAGE_ARGS),
                "{svc:?}"
            );
        }

        // --- a forged header checksum far ahead is refused and does not move the window ---
        let b = g.build(p, NFSPROC3_GETATTR, &ga).unwrap();
        let far = g
            .build_with(
                proto::gss::RpcGssProcT::RPCSEC_GSS_DATA,
                b.seq + 1_000_000,
                p,
                NFSPROC3_GETATTR,
                &ga,
            )
            .unwrap();
        let mut rec = far.record.to_vec();
        // Flip a byte of the verifier's checksum (after its 16-byte token header).
        let mic = 4 + 24 + 8 + far_cred_len(&far.record) + 8;
        rec[mic + 20] ^= 1;
        let rep = g.rpc.send_record(far.xid, &rec).await.unwrap();
        let (_, st, _) = rpc::msg::decode_reply(rep).unwrap();
        assert_eq!(st, ReplyStatus::AuthError(AuthStat::RPCSEC_GSS_CREDPROBLEM));
        // The genuine call built before it (seq far behind the forged one) is accepted.
        let rep = g.send(&b).await.unwrap();
        assert!(is_getattr_ok(g.open_reply(&b, rep).unwrap()));

        // --- out of order inside the window ---
        let calls: Vec<_> = (0..5)
            .map(|_| g.build(p, NFSPROC3_GETATTR, &ga).unwrap())
            .collect();
        for i in [4, 0, 2, 1, 3] {
            let rep = g.send(&calls[i]).await.unwrap();
            assert!(
                is_getattr_ok(g.open_reply(&calls[i], rep).unwrap()),
                "out of order #{i}"
            );
        }

        // --- 1024 krb5p READs, 128 in flight on one context: zero drops ---
        let t = Instant::now();
        let futs = (0..1024u64).map(|i| {
            let g = &g;
            let a = read_args(&fh, (i % 16) * 4096, 4096);
            async move { read_ok(g.call(p, NFSPROC3_READ, &a).await.unwrap()) }
        });
        let results = futures::future::join_all(futs).await;
        for (i, r) in results.iter().enumerate() {
            let off = (i % 16) * 4096;
            assert_eq!(&r[..], &data[off..off + 4096]);
        }
        println!("1024 krb5p 4 KiB READs, 128 in flight: {:?}", t.elapsed());
        assert_eq!(
            metric(
                &maddr,
                "tarn_gss_dropped_calls_total{reason=\"seq_window\"}"
            ),
            0.0
        );

        // --- throughput of 1 MiB READs per flavor (debug build: ratios only indicative) ---
        let sys = RpcClient::connect(s.addr, auth_sys(0, 0, &[], "t"))
            .await
            .unwrap();
        let n = 12;
        let st = Instant::now();
        for _ in 0..n {
            let mut d = sys
                .call(
                    NFS_PROGRAM,
                    3,
                    NFSPROC3_READ,
                    &Read3args {
                        file: fh.clone(),
                        offset: 0,
                        count: 1 << 20,
                    },
                )
                .await
                .unwrap();
            assert_eq!(
                Read3res::unpack(&mut d).map(|r| matches!(r, Read3res::NFS3_OK(_))),
                Ok(true)
            );
        }
        let sys_mbs = n as f64 / st.elapsed().as_secs_f64();
        print!("1 MiB READ MiB/s: sys {sys_mbs:.0}");
        for svc in [GssService::None, GssService::Integrity, GssService::Privacy] {
            let st = Instant::now();
            for _ in 0..n {
                let got = read_ok(
                    g.call(svc, NFSPROC3_READ, &read_args(&fh, 0, 1 << 20))
                        .await
                        .unwrap(),
                );
                assert_eq!(got.len(), 1 << 20);
            }
            let mbs = n as f64 / st.elapsed().as_secs_f64();
            print!(", {svc:?} {mbs:.0} ({:.0}% of sys)", 100.0 * mbs / sys_mbs);
        }
        println!();

        // --- a replay is dropped, counted, and the connection closed ---
        let b = g.build(p, NFSPROC3_GETATTR, &ga).unwrap();
        let rep = g.send(&b).await.unwrap();
        assert!(is_getattr_ok(g.open_reply(&b, rep).unwrap()));
        let e = g.send(&b).await.unwrap_err();
        assert!(matches!(e, ClientError::Closed), "replay: {e}");
        assert_eq!(
            metric(&maddr, "tarn_gss_dropped_calls_total{reason=\"other\"}"),
            1.0
        );
        assert_eq!(
            metric(
                &maddr,
                "tarn_gss_dropped_calls_total{reason=\"seq_window\"}"
            ),
            0.0
        );
        assert!(
            metric(
                &maddr,
                "tarn_gss_dropped_calls_total{reason=\"bad_checksum\"}"
            ) >= 1.0
        );
        assert!(metric(&maddr, "tarn_gss_contexts_created_total") >= 4.0);
        // The context table's memory is reported with the other caches.
        assert!(metric(&maddr, "tarn_cache_entries{cache=\"gss_contexts\"}") >= 1.0);

        // --- a krb5p-only export: AUTH_SYS and krb5 are too weak ---
        let (_c2, root2) = mounted_root(&s2);
        let sys2 = RpcClient::connect(s2.addr, auth_sys(0, 0, &[], "t"))
            .await
            .unwrap();
        let e = sys2
            .call(
                NFS_PROGRAM,
                3,
                NFSPROC3_GETATTR,
                &Getattr3args {
                    object: root2.clone(),
                },
            )
            .await
            .unwrap_err();
        assert_auth_error(&e, AuthStat::AUTH_TOOWEAK);
        let g2 = gss(s2.addr).await;
        let e = g2
            .call(GssService::None, NFSPROC3_GETATTR, &getattr_args(&root2))
            .await
            .unwrap_err();
        assert_auth_error(&e, AuthStat::AUTH_TOOWEAK);
        assert!(is_getattr_ok(
            g2.call(p, NFSPROC3_GETATTR, &getattr_args(&root2))
                .await
                .unwrap()
        ));
        // NFSv4.0: PUTROOTFH + GETATTR into it with AUTH_SYS is WRONGSEC.
        use proto::nfs4::*;
        let comp = Compound4args {
            tag: Default::default(),
            minorversion: 0,
            argarray: vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_GETATTR(Getattr4args {
                    attr_request: vec![1 << 1],
                }),
            ],
        };
        let mut d = sys2.call(NFS4_PROGRAM, 4, 1, &comp).await.unwrap();
        assert_eq!(d.u32().unwrap(), Nfsstat4::NFS4ERR_WRONGSEC as u32);

        // --- a ticket from a realm the server has no key for is refused at INIT ---
        // (another KDC's realm maps localhost to itself; the server's keytab
        // holds only nfs/localhost@TARN.TEST).
        let other = kdc::Kdc::start_realm("OTHER.TEST");
        let occ = other.kinit("other", "10m");
        other.activate(&occ);
        let c = RpcClient::connect(s.addr, auth_none()).await.unwrap();
        let e = GssClient::establish(c, NFS_PROGRAM, 3, "nfs@localhost")
            .await
            .err()
            .expect("a context from the wrong realm");
        assert!(e.to_string().contains("server refused the context"), "{e}");
        kdc.activate(&cc);
        drop(other);
        // The server still serves the right realm.
        let g2 = gss(s.addr).await;
        assert!(is_getattr_ok(
            g2.call(p, NFSPROC3_GETATTR, &ga).await.unwrap()
        ));

        // --- an expired context gets RPCSEC_GSS_CREDPROBLEM ---
        let short = kdc.kinit("short", "4s");
        kdc.activate(&short);
        let ge = gss(s.addr).await;
        assert!(is_getattr_ok(
            ge.call(p, NFSPROC3_GETATTR, &ga).await.unwrap()
        ));
        // Ticket lifetime plus the realm's 2 s clock skew, and a margin.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let e = ge.call(p, NFSPROC3_GETATTR, &ga).await.unwrap_err();
        assert_auth_error(&e, AuthStat::RPCSEC_GSS_CREDPROBLEM);
        assert!(metric(&maddr, "tarn_gss_contexts_expired_total") >= 1.0);
    });
    drop(s);
    drop(s2);
    drop(tmp);
    println!("gss test took {:?}", t0.elapsed());
}

/// Length of the (padded) credential body in a built call record.
fn far_cred_len(rec: &[u8]) -> usize {
    let at = 4 + 24 + 4; // record mark, six header words, cred flavor
    let n = u32::from_be_bytes(rec[at..at + 4].try_into().unwrap()) as usize;
    (n + 3) & !3
}
