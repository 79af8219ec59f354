//! A file a client has open and locked is removed by someone else (another
//! client, NFSv3, a local process): state the client could not give back
//! (its LOCKU or CLOSE met a file that is gone) must not stop its unmount
//! from ending the client (DESTROY_CLIENTID), as against knfsd.

use super::*;

/// What an unmount ends with: DESTROY_SESSION, then DESTROY_CLIENTID's
/// status.
async fn unmount(fx: &Fx, s: &Sess) -> Nfsstat4 {
    let r = fx
        .compound(
            1,
            vec![NfsArgop4::OP_DESTROY_SESSION(DestroySession4args {
                dsa_sessionid: s.id,
            })],
        )
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK);
    let r = fx
        .compound(
            1,
            vec![NfsArgop4::OP_DESTROY_CLIENTID(DestroyClientid4args {
                dca_clientid: s.clientid,
            })],
        )
        .await;
    r.status
}

/// On the local backend, whose removed files are Stale (even one still
/// open elsewhere), as the kernel's handles are.
#[tokio::test]
async fn a_client_whose_open_file_was_removed_can_still_be_destroyed() {
    let Some((_dir, fs)) = crate::test_util::local_tmp() else {
        eprintln!("skipped: no temp filesystem supports name_to_handle_at");
        return;
    };
    let fs: Arc<dyn vfs::Backend> = Arc::new(fs);
    let fx = Fx::with_export(cfg(90, 0), |e| e.backend = fs);
    let s = fx.client("holder").await;
    let o = fx.open(&s, "f", "o", BOTH, DENY_NONE).await.unwrap();
    fx.new_write_lock(&s, &o.fh, &o.stateid, (0, 10), "lo")
        .await
        .unwrap();

    let other = fx.client("remover").await;
    let r = fx
        .call(
            &other,
            vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_REMOVE(Remove4args { target: name("f") }),
            ],
        )
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{:?}", statuses(&r));

    // The holder's unmount: its LOCKU and CLOSE met NFS4ERR_STALE (the
    // kernel's handle of a removed file, on a server that keeps no open
    // descriptor of it), so the open and the lock are still on record.
    assert_eq!(unmount(&fx, &s).await, Nfsstat4::NFS4_OK);
}

/// State on a file that still exists keeps the client busy.
#[tokio::test]
async fn a_client_with_state_on_a_live_file_stays_busy() {
    let fx = Fx::new(cfg(90, 0));
    let s = fx.client("holder").await;
    fx.open(&s, "f", "o", BOTH, DENY_NONE).await.unwrap();
    assert_eq!(unmount(&fx, &s).await, Nfsstat4::NFS4ERR_CLIENTID_BUSY);
}
