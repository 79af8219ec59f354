//! NFSv3 over `rpc::client::Channel` (what an NFSv3 client uses for
//! retransmission), through an in-test proxy that drops a reply with its
//! connection: the REMOVE is resent with the same xid on a new connection
//! and the server's duplicate request cache answers it, so it is not run
//! twice (a second execution would say NFS3ERR_NOENT).
//!
//!   cargo test -p tarn --test v3_resend

mod common;
use bytes::Bytes;
use common::*;
use proto::nfs3::*;
use rpc::client::{auth_sys, Channel, ChannelOptions};
use std::sync::atomic::Ordering;
use std::time::Duration;
use test_support::proxy::Proxy;

async fn call<A: xdr::Pack, R: xdr::Unpack>(ch: &Channel, prog: u32, proc_: u32, a: &A) -> R {
    let mut d = ch.call(prog, 3, proc_, a).await.expect("call");
    R::unpack(&mut d).expect("decode")
}

#[test]
fn a_remove_whose_reply_was_lost_is_answered_from_the_drc() {
    let s = TestServer::start();
    let rt = runtime();
    rt.block_on(async {
        // Drops the server's next bytes with the connection once `cut` is set.
        let p = Proxy::start(s.addr).await;
        let (addr, cut, conns) = (p.addr, p.cut.clone(), p.accepted.clone());
        let opts = ChannelOptions {
            timeo: Duration::from_secs(10),
            min_backoff: Duration::from_millis(20),
            ..Default::default()
        };
        let ch = Channel::connect(addr, auth_sys(1000, 1000, &[1000], "t"), opts)
            .await
            .unwrap();
        let mnt: proto::mount::Mountres3 = call(
            &ch,
            proto::mount::MOUNT_PROGRAM,
            1,
            &proto::mount::Dirpath(Bytes::from_static(b"/")),
        )
        .await;
        let proto::mount::Mountres3::MNT3_OK(ok) = mnt else {
            panic!("MNT: {mnt:?}")
        };
        let root = NfsFh3 { data: ok.fhandle.0 };
        let name = Diropargs3 {
            dir: root.clone(),
            name: Bytes::from_static(b"gone"),
        };
        let c: Create3res = call(
            &ch,
            NFS_PROGRAM,
            NFSPROC3_CREATE,
            &create3_args(&root, "gone"),
        )
        .await;
        assert!(matches!(c, Create3res::NFS3_OK(_)), "{c:?}");

        cut.store(true, Ordering::SeqCst);
        let r: Remove3res = call(
            &ch,
            NFS_PROGRAM,
            NFSPROC3_REMOVE,
            &Remove3args {
                object: name.clone(),
            },
        )
        .await;
        assert!(
            matches!(r, Remove3res::NFS3_OK(_)),
            "answered from the DRC: {r:?}"
        );
        assert_eq!((ch.reconnects(), ch.retransmits()), (1, 1));
        assert_eq!(conns.load(Ordering::SeqCst), 2);
        assert!(!s.export.join("gone").exists());
        // Sent as a new call it is run, and finds nothing.
        let r: Remove3res = call(
            &ch,
            NFS_PROGRAM,
            NFSPROC3_REMOVE,
            &Remove3args { object: name },
        )
        .await;
        assert!(
            matches!(r, Remove3res::Default(Nfsstat3::NFS3ERR_NOENT, _)),
            "{r:?}"
        );
    });
}
