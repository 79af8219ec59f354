//! The scenario every NFSv4.1 server must pass with this client (Ganesha
//! now, Tarn once its NFSv4 server lands). It prints what the server chose
//! (flags, channel attributes, limits) so a run documents the peer.

use crate::harness::{lock_by, readdir_names};
use bytes::Bytes;
use client::nfs4::*;
use proto::nfs4::*;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::harness::{GID, UID};
const MIB: usize = 1 << 20;

fn pattern(len: usize) -> Bytes {
    // Not periodic in any power of two, so a misplaced chunk shows.
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 16) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn status<T: std::fmt::Debug>(r: Result<T>) -> Nfsstat4 {
    match r {
        Ok(v) => panic!("expected an NFS error, got {v:?}"),
        Err(e) => e
            .status()
            .unwrap_or_else(|| panic!("expected an NFS error, got {e}")),
    }
}

/// Runs the whole scenario against the server at `addr`, whose export is at
/// `export` in its pseudo-fs and, if known, at `local` on this machine.
pub async fn scenario(addr: SocketAddr, export: &str, local: Option<&Path>) {
    let conn = Nfs4Conn::connect(addr, UID, GID).await.expect("connect");
    conn.null().await.expect("NULL");

    // ---- session setup, step by step, to see what the server grants ----
    let opts = SessionOptions::default();
    let ex = exchange_id(&conn, &opts).await.expect("EXCHANGE_ID");
    println!(
        "EXCHANGE_ID: clientid {:#x} sequenceid {} flags {:#x} state_protect {:?} server_owner {:?} scope {:?} impl {:?}",
        ex.eir_clientid,
        ex.eir_sequenceid,
        ex.eir_flags,
        ex.eir_state_protect,
        ex.eir_server_owner,
        ex.eir_server_scope,
        ex.eir_server_impl_id
    );
    assert_eq!(
        ex.eir_flags & EXCHGID4_FLAG_CONFIRMED_R,
        0,
        "a new client owner is not confirmed"
    );
    let cs = create_session(&conn, ex.eir_clientid, ex.eir_sequenceid, &opts)
        .await
        .expect("CREATE_SESSION");
    println!(
        "CREATE_SESSION: sequence {} flags {:#x}\n  fore {:?}\n  back {:?}",
        cs.csr_sequence, cs.csr_flags, cs.csr_fore_chan_attrs, cs.csr_back_chan_attrs
    );
    // A replay of the same CREATE_SESSION must get the same session back.
    let again = create_session(&conn, ex.eir_clientid, ex.eir_sequenceid, &opts).await;
    match &again {
        Ok(r) => println!(
            "CREATE_SESSION replay: same session id: {}",
            r.csr_sessionid == cs.csr_sessionid
        ),
        Err(e) => println!("CREATE_SESSION replay: {e}"),
    }
    let s = Arc::new(Session::from_parts(conn, &opts, ex.eir_clientid, &cs));
    let rc = s
        .call(vec![NfsArgop4::OP_RECLAIM_COMPLETE(ReclaimComplete4args {
            rca_one_fs: false,
        })])
        .await;
    println!("RECLAIM_COMPLETE: {:?}", rc.as_ref().map(|_| ()));
    if let Err(e) = rc {
        assert_eq!(e.status(), Some(Nfsstat4::NFS4ERR_COMPLETE_ALREADY), "{e}");
    }
    println!(
        "lease time {} s; slot table limit after first SEQUENCE {} of {}; sr_status_flags {:#x}",
        s.lease_time().await.expect("lease_time"),
        s.slot_table().limit(),
        s.slot_table().size(),
        s.status_flags()
    );

    // ---- the raw layer: requests a normal client never sends ----
    let r = s
        .conn()
        .compound(1, vec![NfsArgop4::OP_PUTROOTFH])
        .await
        .unwrap();
    assert_eq!(
        r.status,
        Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION,
        "4.1 without SEQUENCE"
    );
    let r = s.conn().compound(7, vec![]).await.unwrap();
    assert_eq!(r.status, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
    assert!(r.resarray.is_empty());
    {
        let g = s.acquire().await;
        let ahead = g.lease.seqid.wrapping_add(1);
        let r = s
            .conn()
            .compound(1, vec![g.sequence_with(ahead, false)])
            .await
            .unwrap();
        assert_eq!(
            r.status,
            Nfsstat4::NFS4ERR_SEQ_MISORDERED,
            "seqid skips one"
        );
        assert_eq!(g.finish(&r), Outcome::NotProcessed);
    }
    {
        // Do one request on a slot, then send the same seqid again.
        let g = s.acquire().await;
        let (slot, seqid) = (g.lease.slot, g.lease.seqid);
        let r = s
            .conn()
            .compound(1, vec![g.sequence(false), NfsArgop4::OP_PUTROOTFH])
            .await
            .unwrap();
        assert_eq!(g.finish(&r), Outcome::Processed);
        let g = s.acquire_slot(slot).expect("slot free again");
        let r = s
            .conn()
            .compound(
                1,
                vec![g.sequence_with(seqid, false), NfsArgop4::OP_PUTROOTFH],
            )
            .await
            .unwrap();
        let per_op: Vec<_> = r
            .resarray
            .iter()
            .map(client::nfs4::error::op_status)
            .collect();
        println!(
            "replayed SEQUENCE (cachethis false): {:?}, {per_op:?}",
            r.status
        );
        g.release(Outcome::NotProcessed);
        let g = s.acquire_slot(s.slot_table().size()).map(|g| g.lease);
        assert!(g.is_none(), "no slot beyond the table");
    }

    // ---- files ----
    let root = s.lookup_path(export).await.expect("LOOKUP export");
    let ra = s
        .attrs(&root, &[FATTR4_TYPE, FATTR4_MAXREAD, FATTR4_MAXWRITE])
        .await
        .expect("GETATTR export");
    assert_eq!(ra.ftype, Some(NfsFtype4::NF4DIR));
    println!("maxread {:?} maxwrite {:?}", ra.maxread, ra.maxwrite);
    let name = format!("file-{}", std::process::id());
    let how = Openflag4::OPEN4_CREATE(Createhow4::UNCHECKED4(SetAttrs::mode(0o644).encode()));
    let opened = s
        .open_with(
            &s.open_owner(),
            &root,
            &name,
            how,
            OPEN4_SHARE_ACCESS_BOTH,
            OPEN4_SHARE_DENY_NONE,
        )
        .await
        .expect("OPEN create");
    println!(
        "OPEN: rflags {:#x} attrset {:?} delegation {:?} stateid seqid {}",
        opened.res.rflags, opened.res.attrset, opened.res.delegation, opened.stateid.seqid
    );
    assert_eq!(
        opened.res.rflags & OPEN4_RESULT_CONFIRM,
        0,
        "no OPEN_CONFIRM in 4.1"
    );
    let (stateid, fh) = (opened.stateid, opened.fh);

    let data = pattern(MIB);
    let wchunk = (ra.maxwrite.unwrap_or(MIB as u64) as usize).min(MIB);
    let mut verf = None;
    for off in (0..MIB).step_by(wchunk) {
        let end = (off + wchunk).min(MIB);
        let w = s
            .write(
                &stateid,
                &fh,
                off as u64,
                data.slice(off..end),
                StableHow4::UNSTABLE4,
            )
            .await
            .expect("WRITE");
        assert_eq!(w.count as usize, end - off, "short write");
        assert!(
            verf.is_none() || verf == Some(w.writeverf),
            "verifier changed"
        );
        verf = Some(w.writeverf);
    }
    let cv = s.commit(&fh, 0, 0).await.expect("COMMIT");
    assert_eq!(Some(cv), verf, "COMMIT verifier = WRITE verifier");

    let rchunk = (ra.maxread.unwrap_or(MIB as u64) as usize).min(MIB);
    let mut back = Vec::with_capacity(MIB);
    loop {
        let r = s
            .read(&stateid, &fh, back.len() as u64, rchunk as u32)
            .await
            .expect("READ");
        back.extend_from_slice(&r.data);
        if r.eof || r.data.is_empty() {
            break;
        }
    }
    assert!(back == data[..], "read back differs");
    if let Some(dir) = local {
        let disk = std::fs::read(dir.join(&name)).expect("file on disk");
        assert!(disk == data[..], "file on the server's disk differs");
    }

    let a = s
        .attrs(
            &fh,
            &[
                FATTR4_TYPE,
                FATTR4_CHANGE,
                FATTR4_SIZE,
                FATTR4_FILEID,
                FATTR4_MODE,
            ],
        )
        .await
        .expect("GETATTR file");
    println!("file attrs: {a:?}");
    assert_eq!(a.ftype, Some(NfsFtype4::NF4REG));
    assert_eq!(a.size, Some(MIB as u64));
    assert_eq!(a.mode.map(|m| m & 0o777), Some(0o644));
    assert!(a.fileid.is_some() && a.change.is_some());

    // ---- many GETATTRs in flight on one session ----
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (s, fh) = (s.clone(), fh.clone());
            tokio::spawn(async move {
                for _ in 0..20 {
                    let a = s.attrs(&fh, &[FATTR4_SIZE]).await.expect("GETATTR");
                    assert_eq!(a.size, Some(MIB as u64));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(s.slot_table().in_flight(), 0);
    println!(
        "32 x 20 concurrent GETATTRs: ok; slot limit now {}",
        s.slot_table().limit()
    );

    let names = readdir_names(&s, &root).await;
    assert!(names.contains(&name), "{name} not in {names:?}");

    // ---- byte-range locks between two lock owners ----
    let (a_owner, b_owner) = (s.new_owner("lock"), s.new_owner("lock"));
    let a_lock = lock_by(&s, &fh, &stateid, &a_owner, NfsLockType4::WRITE_LT, 0, 100)
        .await
        .expect("LOCK a")
        .expect("a granted");
    let denied = s
        .lockt(&fh, NfsLockType4::WRITE_LT, 50, 10, &b_owner)
        .await
        .expect("LOCKT b")
        .expect("b would conflict");
    assert_eq!(denied.owner, a_owner, "LOCKT names the holder");
    assert_eq!((denied.offset, denied.length), (0, 100));
    assert!(s
        .lockt(&fh, NfsLockType4::WRITE_LT, 100, 10, &b_owner)
        .await
        .expect("LOCKT b beyond")
        .is_none());
    let refused = lock_by(&s, &fh, &stateid, &b_owner, NfsLockType4::READ_LT, 99, 1)
        .await
        .expect("LOCK b");
    println!("LOCK refused: {refused:?}");
    assert!(
        refused.is_err(),
        "b's read lock conflicts with a's write lock"
    );
    s.locku(&fh, &a_lock, NfsLockType4::WRITE_LT, 0, 100)
        .await
        .expect("LOCKU a");
    let b_lock = lock_by(&s, &fh, &stateid, &b_owner, NfsLockType4::READ_LT, 99, 1)
        .await
        .expect("LOCK b again")
        .expect("b granted after a unlocked");
    s.locku(&fh, &b_lock, NfsLockType4::READ_LT, 99, 1)
        .await
        .expect("LOCKU b");

    s.close(&fh, &stateid).await.expect("CLOSE");

    // ---- directories and removal ----
    let dname = format!("dir-{}", std::process::id());
    let dfh = s.mkdir(&root, &dname, 0o755).await.expect("CREATE dir");
    let da = s.attrs(&dfh, &[FATTR4_TYPE]).await.unwrap();
    assert_eq!(da.ftype, Some(NfsFtype4::NF4DIR));
    assert_eq!(
        status(s.remove(&root, &format!("{dname}-nope")).await),
        Nfsstat4::NFS4ERR_NOENT
    );
    s.remove(&root, &dname).await.expect("REMOVE dir");
    s.remove(&root, &name).await.expect("REMOVE file");
    assert_eq!(
        status(s.lookup(&root, &name).await),
        Nfsstat4::NFS4ERR_NOENT
    );
    let names = readdir_names(&s, &root).await;
    assert!(
        !names.contains(&name) && !names.contains(&dname),
        "{names:?}"
    );

    // ---- lease renewal and teardown ----
    let flags = s.renew().await.expect("SEQUENCE-only renewal");
    println!("renewal: sr_status_flags {flags:#x}");
    s.destroy()
        .await
        .expect("DESTROY_SESSION + DESTROY_CLIENTID");
    assert_eq!(
        status(s.renew().await),
        Nfsstat4::NFS4ERR_BADSESSION,
        "a destroyed session is gone"
    );
}
