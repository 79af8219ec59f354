//! Stateids: made up, old, future, current (seqid 0), of the wrong open
//! mode, of another client; TEST_STATEID and FREE_STATEID. `bad_old_stateids_and_openmode` and
//! `test_stateid_and_free_stateid` were end to end in
//! `crates/client/tests/tarn_errors.rs`.

use super::*;

fn made_up_stateid() -> Stateid4 {
    Stateid4 {
        seqid: 1,
        other: [0x5a; 12],
    }
}

impl Fx {
    async fn read(&self, s: &Sess, sid: &Stateid4, fh: &NfsFh4) -> Result<Bytes, Nfsstat4> {
        let r = self.call(s, vec![putfh(fh), read_op(sid, 0, 5)]).await;
        match r.resarray.last() {
            Some(NfsResop4::OP_READ(Read4res::NFS4_OK(ok))) => Ok(ok.data.clone()),
            _ => Err(r.status),
        }
    }

    async fn write(&self, s: &Sess, sid: &Stateid4, fh: &NfsFh4, data: &'static [u8]) -> Nfsstat4 {
        self.call(
            s,
            vec![
                putfh(fh),
                write_op(sid, 0, StableHow4::FILE_SYNC4, Bytes::from_static(data)),
            ],
        )
        .await
        .status
    }
}

#[tokio::test]
async fn bad_old_stateids_and_openmode() {
    let fx = Fx::new(Nfs4Config::default());
    let s = fx.client("s").await;
    let o1 = fx.open(&s, "f", "open-a", BOTH, DENY_NONE).await.unwrap();
    let fh = o1.fh.clone();
    assert_eq!(fx.write(&s, &o1.stateid, &fh, b"hello").await, NFS4_OK);

    // Made up: never issued. (In 4.1 STALE_STATEID is for a previous
    // server instance; BAD_STATEID is the answer for a forgery.)
    assert_eq!(
        fx.read(&s, &made_up_stateid(), &fh).await,
        Err(NFS4ERR_BAD_STATEID)
    );
    // A second OPEN by the same owner upgrades the same stateid.
    let o2 = fx
        .open(&s, "f", "open-a", OPEN4_SHARE_ACCESS_READ, DENY_NONE)
        .await
        .unwrap();
    assert_eq!(o2.stateid.other, o1.stateid.other);
    assert!(o2.stateid.seqid > o1.stateid.seqid);
    assert_eq!(
        fx.read(&s, &o1.stateid, &fh).await,
        Err(NFS4ERR_OLD_STATEID)
    );
    assert_eq!(&fx.read(&s, &o2.stateid, &fh).await.unwrap()[..], b"hello");
    // seqid 0: "the current one" (RFC 8881 §8.2.2).
    let cur = Stateid4 {
        seqid: 0,
        ..o1.stateid.clone()
    };
    fx.read(&s, &cur, &fh).await.unwrap();
    // A seqid from the future is not old: it is bad.
    let future = Stateid4 {
        seqid: o2.stateid.seqid + 5,
        ..o2.stateid.clone()
    };
    assert_eq!(fx.read(&s, &future, &fh).await, Err(NFS4ERR_BAD_STATEID));
    // WRITE through a read-only open.
    let ro = fx
        .open(&s, "f", "open-ro", OPEN4_SHARE_ACCESS_READ, DENY_NONE)
        .await
        .unwrap();
    assert_eq!(fx.write(&s, &ro.stateid, &fh, b"x").await, NFS4ERR_OPENMODE);
}

#[tokio::test]
async fn test_stateid_and_free_stateid() {
    let fx = Fx::new(Nfs4Config::default());
    let s = fx.client("s").await;
    let other = fx.client("other").await;
    let o = fx.open(&s, "f", "open-a", BOTH, DENY_NONE).await.unwrap();
    let l = fx
        .new_write_lock(&s, &o.fh, &o.stateid, (0, 1), "lock")
        .await
        .unwrap();
    let anon = Stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    // Special stateids are never valid to TEST_STATEID (RFC 8881 §18.48.3).
    assert_eq!(
        fx.tested(&s, &[o.stateid.clone(), l.clone(), made_up_stateid(), anon])
            .await,
        [NFS4_OK, NFS4_OK, NFS4ERR_BAD_STATEID, NFS4ERR_BAD_STATEID]
    );
    // Another client's stateids are not its to test.
    assert_eq!(
        fx.tested(&other, std::slice::from_ref(&o.stateid)).await,
        [NFS4ERR_BAD_STATEID]
    );
    // Neither an open stateid nor a lock stateid holding a lock can be
    // freed (RFC 8881 §18.38.3).
    let free = |sid: &Stateid4| fx.call(&s, vec![free_stateid(sid)]);
    assert_eq!(free(&o.stateid).await.status, NFS4ERR_LOCKS_HELD);
    assert_eq!(free(&l).await.status, NFS4ERR_LOCKS_HELD);
    assert_eq!(free(&made_up_stateid()).await.status, NFS4ERR_BAD_STATEID);
    let r = fx
        .call(
            &s,
            vec![putfh(&o.fh), locku_op(NfsLockType4::WRITE_LT, 0, &l, 0, 1)],
        )
        .await;
    let Some(NfsResop4::OP_LOCKU(Locku4res::NFS4_OK(l))) = r.resarray.last() else {
        panic!("LOCKU: {:?}", statuses(&r))
    };
    assert_eq!(free(l).await.status, NFS4_OK, "FREE_STATEID");
    assert_eq!(
        fx.tested(&s, &[l.clone(), o.stateid.clone()]).await,
        [NFS4ERR_BAD_STATEID, NFS4_OK]
    );
    let r = fx
        .call(&s, vec![putfh(&o.fh), close_op(0, &o.stateid)])
        .await;
    assert_eq!(r.status, NFS4_OK, "CLOSE after FREE_STATEID");
}
