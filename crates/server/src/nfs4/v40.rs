//! NFSv4.0 client life: SETCLIENTID, SETCLIENTID_CONFIRM, RENEW and
//! OPEN_CONFIRM (RFC 7530 §16), and the open and lock owners' seqids. A
//! new open owner confirms its first OPEN with OPEN_CONFIRM.

use super::compound::{file_key, Compound};
use super::fail::{log_fail, refused, Fail};
use super::session::principal;
use super::state::{SeqCheck, SeqOwner};
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;

pub fn setclientid(c: &mut Compound<'_>, a: Setclientid4args) -> Setclientid4res {
    let r = c.n.state.setclientid(
        &a.client.id,
        a.client.verifier,
        &principal(c),
        c.n.clock.now(),
    );
    match r {
        Ok((clientid, setclientid_confirm)) => {
            // The callback is used once confirmed; an address Tarn cannot
            // use leaves the path down, SETCLIENTID still succeeds.
            let loc = &a.callback.cb_location;
            let addr = super::callback::cb40::parse_uaddr(&loc.na_r_netid, &loc.na_r_addr);
            c.n.backchannels.v40.setclientid(
                clientid,
                super::callback::cb40::Target {
                    addr,
                    prog: a.callback.cb_program,
                    ident: a.callback_ident,
                    cred: super::callback::cb40::cred_for(&c.ctx.auth),
                },
            );
            Setclientid4res::NFS4_OK(Setclientid4resok {
                clientid,
                setclientid_confirm,
            })
        }
        Err(s) => {
            log_fail(
                c.ctx,
                "OP_SETCLIENTID",
                &Fail::new(s, "client owner rules refused SETCLIENTID"),
            );
            if s == Nfsstat4::NFS4ERR_CLID_INUSE {
                // The union's CLID_INUSE arm carries the other client's
                // callback address; Tarn keeps none, so it is empty (as
                // knfsd sends it). Without the arm the reply is malformed.
                return Setclientid4res::NFS4ERR_CLID_INUSE(Clientaddr4 {
                    na_r_netid: Bytes::new(),
                    na_r_addr: Bytes::new(),
                });
            }
            Setclientid4res::Default(s)
        }
    }
}

pub async fn setclientid_confirm(
    c: &mut Compound<'_>,
    a: SetclientidConfirm4args,
) -> SetclientidConfirm4res {
    // A client about to be confirmed is on stable storage first (the
    // verifier is checked by confirm_v40; recording an owner whose
    // confirmation then fails only lets it reclaim nothing it held).
    if let Some(owner) = c.n.state.unconfirmed_owner(a.clientid) {
        if c.n
            .records
            .persist_first(&owner, "SETCLIENTID_CONFIRM")
            .await
            .is_err()
        {
            log_fail(
                c.ctx,
                "OP_SETCLIENTID_CONFIRM",
                &Fail::new(
                    Nfsstat4::NFS4ERR_DELAY,
                    "the client cannot be recorded in the state directory",
                ),
            );
            return SetclientidConfirm4res {
                status: Nfsstat4::NFS4ERR_DELAY,
            };
        }
    }
    let status = match c.n.state.confirm_v40(
        a.clientid,
        a.setclientid_confirm,
        &principal(c),
        c.n.clock.now(),
    ) {
        Ok(newly) => {
            c.n.peers.note(a.clientid, c.ctx.peer.ip());
            if newly {
                c.n.apply_effects().await;
            }
            // The callback SETCLIENTID named is the path from now on.
            c.n.backchannels.v40.confirm(a.clientid);
            Nfsstat4::NFS4_OK
        }
        Err(s) => refused(
            c.ctx,
            "OP_SETCLIENTID_CONFIRM",
            s,
            "unknown client or wrong verifier",
        ),
    };
    SetclientidConfirm4res { status }
}

pub fn renew(c: &mut Compound<'_>, a: Renew4args) -> Renew4res {
    let status = match c.n.state.renew(a.clientid, c.n.clock.now()) {
        // RFC 7530 §16.29.4: the lease is renewed, but a client holding
        // delegations hears that they cannot be recalled.
        Ok(())
            if c.n.state.client_delegations(a.clientid) > 0
                && !c.n.backchannels.v40.is_up(a.clientid) =>
        {
            c.n.backchannels.v40.retry(a.clientid);
            log_fail(
                c.ctx,
                "OP_RENEW",
                &Fail::new(
                    Nfsstat4::NFS4ERR_CB_PATH_DOWN,
                    "the client holds delegations and its callback path is down",
                ),
            );
            Nfsstat4::NFS4ERR_CB_PATH_DOWN
        }
        Ok(()) => Nfsstat4::NFS4_OK,
        Err(s) => refused(c.ctx, "OP_RENEW", s, "client unknown or expired"),
    };
    Renew4res { status }
}

/// Confirms a new open owner's first OPEN (RFC 7530 §16.18): the stateid
/// comes back with its seqid moved on. The current filehandle and the
/// stateid are checked first for their own errors.
pub fn open_confirm(c: &mut Compound<'_>, a: OpenConfirm4args) -> OpenConfirm4res {
    let r = (|| {
        let (export, fid, _) = c.obj(Nfsstat4::NFS4ERR_ISDIR)?;
        let sid = c.stateid(&a.open_stateid)?;
        Ok::<_, Fail>(
            c.n.state
                .open_confirm(&sid, &file_key(&export, &fid), c.minor)?,
        )
    })();
    match r {
        Ok(sid) => {
            c.cur_sid = Some(sid.clone());
            OpenConfirm4res::NFS4_OK(OpenConfirm4resok { open_stateid: sid })
        }
        Err(f) => {
            log_fail(c.ctx, "OP_OPEN_CONFIRM", &f);
            OpenConfirm4res::Default(f.status)
        }
    }
}

/// The owner and seqid an NFSv4.0 operation is sequenced by, if any.
pub fn sequenced(c: &Compound<'_>, a: &NfsArgop4) -> Option<(u64, SeqOwner, u32)> {
    let st = &c.n.state;
    let by_stateid =
        |sid: &Stateid4, seqid: u32| st.stateid_owner(sid).map(|(cl, o)| (cl, o, seqid));
    match a {
        NfsArgop4::OP_OPEN(o) => Some((
            o.owner.clientid,
            SeqOwner {
                owner: o.owner.owner.clone(),
                lock: false,
            },
            o.seqid,
        )),
        NfsArgop4::OP_OPEN_CONFIRM(o) => by_stateid(&o.open_stateid, o.seqid),
        NfsArgop4::OP_OPEN_DOWNGRADE(o) => by_stateid(&o.open_stateid, o.seqid),
        NfsArgop4::OP_CLOSE(o) => by_stateid(&o.open_stateid, o.seqid),
        NfsArgop4::OP_LOCK(l) => match &l.locker {
            // A new lock owner is sequenced by the open owner's seqid.
            Locker4::TRUE(o) => by_stateid(&o.open_stateid, o.open_seqid),
            Locker4::FALSE(e) => by_stateid(&e.lock_stateid, e.lock_seqid),
        },
        NfsArgop4::OP_LOCKU(l) => by_stateid(&l.lock_stateid, l.seqid),
        _ => None,
    }
}

/// Before a sequenced operation: Some(reply) when it must not run (a
/// replay, answered from the owner's last reply, or a bad seqid).
pub fn before(c: &Compound<'_>, op: u32, k: &(u64, SeqOwner, u32)) -> Option<Bytes> {
    match c.n.state.seq_check(k.0, &k.1, k.2) {
        SeqCheck::New => None,
        SeqCheck::Replay(r) => Some(r),
        SeqCheck::Bad => {
            log_fail(
                c.ctx,
                "seqid",
                &Fail::new(
                    Nfsstat4::NFS4ERR_BAD_SEQID,
                    "open or lock owner seqid out of order",
                ),
            );
            let mut b = BytesMut::with_capacity(8);
            b.put_u32(op);
            b.put_u32(Nfsstat4::NFS4ERR_BAD_SEQID as u32);
            Some(b.freeze())
        }
    }
}

/// After a sequenced operation: the seqid advances except on the errors
/// RFC 7530 §9.1.7 lists, and the reply is kept for a retransmission.
pub fn after(c: &Compound<'_>, k: (u64, SeqOwner, u32), reply: &[u8]) {
    use Nfsstat4::*;
    let status = reply
        .get(4..8)
        .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
        .unwrap_or(0);
    let keeps = [
        NFS4ERR_STALE_CLIENTID,
        NFS4ERR_STALE_STATEID,
        NFS4ERR_BAD_STATEID,
        NFS4ERR_BAD_SEQID,
        NFS4ERR_BADXDR,
        NFS4ERR_RESOURCE,
        NFS4ERR_NOFILEHANDLE,
        NFS4ERR_MOVED,
    ];
    if keeps.iter().any(|s| *s as u32 == status) {
        return;
    }
    c.n.state
        .seq_done(k.0, k.1, k.2, Bytes::copy_from_slice(reply));
}
