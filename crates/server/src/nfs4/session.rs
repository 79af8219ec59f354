//! Client and session life (NFSv4.1): EXCHANGE_ID, CREATE_SESSION,
//! SEQUENCE, BIND_CONN_TO_SESSION, DESTROY_SESSION, DESTROY_CLIENTID,
//! RECLAIM_COMPLETE.

use super::callback::channel::{self, Backchannel};
use super::compound::Compound;
use super::fail::{failed, log_fail, refused, Fail};
use super::state::session::{Session, SlotUse};
use crate::locks::FileKey;
use bytes::{Bytes, BytesMut};
use proto::nfs4::*;
use std::sync::Arc;
use xdr::Pack;

const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x10000;
const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;
/// The eia_flags bits RFC 8881 §18.35.1 defines for a client to send:
/// MOVED_REFER, MOVED_MIGR, BIND_PRINC_STATEID, the three USE_* roles and
/// UPD_CONFIRMED_REC_A (CONFIRMED_R is the server's alone).
const EXCHGID4_FLAG_MASK_A: u32 = 0x4007_0103;
const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
/// PERSIST, CONN_BACK_CHAN and CONN_RDMA (RFC 8881 §18.36.1).
const CREATE_SESSION4_FLAG_MASK: u32 = 0x7;
/// The size of a successful SEQUENCE result: operation, status, session
/// id, four counters and the status flags.
const SEQUENCE_RESULT: usize = 4 + 4 + 16 + 4 * 5;

/// Who is asking, for the client-owner rules: the RPC credential (the
/// Kerberos principal under RPCSEC_GSS, whatever its service).
pub fn principal(c: &Compound<'_>) -> String {
    match &c.ctx.auth {
        rpc::Auth::Sys(s) => format!("sys:{}", s.uid),
        rpc::Auth::None => "none".into(),
        rpc::Auth::Gss(g) => format!("gss:{}", g.principal),
    }
}

pub fn exchange_id(c: &mut Compound<'_>, a: ExchangeId4args) -> ExchangeId4res {
    let fail = |c: &Compound<'_>, f| failed::<ExchangeId4res>(c.ctx, "OP_EXCHANGE_ID", f);
    // RFC 8881 §18.35.3: bits not defined for eia_flags (CONFIRMED_R among
    // them) MUST get NFS4ERR_INVAL. NFSv4.2's XDR adds SUPP_FENCE_OPS (0x4)
    // for the server's fencing support; Linux's server refuses it from a
    // client at every minor version and Linux's client never sends it, so
    // it is refused here too.
    if a.eia_flags & !EXCHGID4_FLAG_MASK_A != 0 {
        return fail(
            c,
            Fail::new(Nfsstat4::NFS4ERR_INVAL, "undefined bits in eia_flags"),
        );
    }
    if !matches!(a.eia_state_protect, StateProtect4A::SP4_NONE) {
        // Machine-credential and SSV state protection need GSS.
        return fail(
            c,
            Fail::new(
                Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP,
                "only SP4_NONE state protection is supported",
            ),
        );
    }
    if a.eia_clientowner.co_ownerid.is_empty() || a.eia_clientowner.co_ownerid.len() > 1024 {
        return fail(
            c,
            Fail::new(Nfsstat4::NFS4ERR_INVAL, "empty or oversized client owner"),
        );
    }
    let update = a.eia_flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
    let r = c.n.state.exchange_id(
        &a.eia_clientowner.co_ownerid,
        a.eia_clientowner.co_verifier,
        &principal(c),
        update,
        c.minor,
        c.n.clock.now(),
    );
    match r {
        Ok((clientid, seq, confirmed)) => {
            // No pNFS roles; no referral or migration support is claimed.
            let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
            if confirmed {
                flags |= EXCHGID4_FLAG_CONFIRMED_R;
            }
            ExchangeId4res::NFS4_OK(ExchangeId4resok {
                eir_clientid: clientid,
                eir_sequenceid: seq,
                eir_flags: flags,
                eir_state_protect: StateProtect4R::SP4_NONE,
                eir_server_owner: ServerOwner4 {
                    so_minor_id: 0,
                    so_major_id: c.n.server_owner.clone(),
                },
                eir_server_scope: c.n.server_owner.clone(),
                eir_server_impl_id: vec![NfsImplId4 {
                    nii_domain: Bytes::from_static(b"tarn.dev"),
                    nii_name: Bytes::from(format!("tarn {}", env!("CARGO_PKG_VERSION"))),
                    nii_date: Nfstime4 {
                        seconds: 0,
                        nseconds: 0,
                    },
                }],
            })
        }
        Err(s) => fail(c, Fail::new(s, "client owner rules refused EXCHANGE_ID")),
    }
}

/// Fore channel attributes as the server grants them: the client's asks,
/// never more (Linux refuses a session whose sizes exceed what it asked
/// for, or whose operation limit is below it), bounded by what the server
/// supports.
fn negotiate(want: &ChannelAttrs4, max_slots: u32) -> ChannelAttrs4 {
    let max_msg = super::io::MAX_IO + 64 * 1024;
    ChannelAttrs4 {
        ca_headerpadsize: 0,
        ca_maxrequestsize: want.ca_maxrequestsize.min(max_msg),
        ca_maxresponsesize: want.ca_maxresponsesize.min(max_msg),
        // Replies of non-idempotent COMPOUNDs are small; bound what each
        // slot may pin in memory.
        ca_maxresponsesize_cached: want.ca_maxresponsesize_cached.min(64 * 1024),
        ca_maxoperations: want.ca_maxoperations.min(super::compound::MAX_OPS),
        ca_maxrequests: want.ca_maxrequests.clamp(1, max_slots),
        ca_rdma_ird: Vec::new(),
    }
}

pub async fn create_session(c: &mut Compound<'_>, a: CreateSession4args) -> CreateSession4res {
    let fail = |c: &Compound<'_>, f| failed::<CreateSession4res>(c.ctx, "OP_CREATE_SESSION", f);
    if a.csa_flags & !CREATE_SESSION4_FLAG_MASK != 0 {
        return fail(
            c,
            Fail::new(Nfsstat4::NFS4ERR_INVAL, "undefined bits in csa_flags"),
        );
    }
    let st = &c.n.state;
    match st.create_session_seq(
        a.csa_clientid,
        a.csa_sequence,
        &principal(c),
        c.n.clock.now(),
    ) {
        Ok(None) => {}
        Ok(Some(cached)) => {
            // A retry of the last CREATE_SESSION: the same answer again.
            return xdr::from_bytes::<CreateSession4res>(cached)
                .unwrap_or(CreateSession4res::Default(Nfsstat4::NFS4ERR_SERVERFAULT));
        }
        Err(s) => {
            return fail(
                c,
                Fail::new(s, "CREATE_SESSION sequence or client id refused"),
            )
        }
    }
    // Either channel must carry at least a SEQUENCE (or CB_SEQUENCE) and
    // one operation; the back channel is checked although Tarn sends no
    // callbacks yet, so a session never promises one it cannot use.
    let (fore, back) = (&a.csa_fore_chan_attrs, &a.csa_back_chan_attrs);
    if fore.ca_maxrequestsize < 256
        || fore.ca_maxresponsesize < 256
        || back.ca_maxrequestsize < 256
        || back.ca_maxresponsesize < 256
        || back.ca_maxoperations < 2
    {
        return fail(
            c,
            Fail::new(
                Nfsstat4::NFS4ERR_TOOSMALL,
                "channel attributes too small to be useful",
            ),
        );
    }
    // A client about to be confirmed is on stable storage first.
    if let Some(owner) = st.unconfirmed_owner(a.csa_clientid) {
        if c.n
            .records
            .persist_first(&owner, "CREATE_SESSION")
            .await
            .is_err()
        {
            return fail(
                c,
                Fail::new(
                    Nfsstat4::NFS4ERR_DELAY,
                    "the client cannot be recorded in the state directory",
                ),
            );
        }
    }
    let fore = negotiate(&a.csa_fore_chan_attrs, c.n.cfg.max_slots);
    // The back channel is granted as asked (calls use its slot 0 only).
    let back = ChannelAttrs4 {
        ca_rdma_ird: Vec::new(),
        ..a.csa_back_chan_attrs.clone()
    };
    // The back channel is accepted as asked; whether calls can travel on
    // it (a connection, a security flavor Tarn can send) shows in
    // SEQUENCE's status flags.
    let flags = a.csa_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
    let id = st.new_sessionid(a.csa_clientid);
    let ok = CreateSession4resok {
        csr_sessionid: id,
        csr_sequence: a.csa_sequence,
        csr_flags: flags,
        csr_fore_chan_attrs: fore.clone(),
        csr_back_chan_attrs: back.clone(),
    };
    let res = CreateSession4res::NFS4_OK(ok);
    let session = Arc::new(Session::new(id, a.csa_clientid, fore, back, flags));
    match st.add_session(session, xdr::to_bytes(&res), c.n.clock.now()) {
        Ok(newly_confirmed) => {
            let conn = (flags != 0).then(|| c.ctx.back.clone()).flatten();
            let bc = Arc::new(Backchannel::new(
                id,
                a.csa_clientid,
                c.minor,
                a.csa_cb_program,
                channel::callback_cred(&a.csa_sec_parms),
                conn,
                flags != 0,
            ));
            c.n.backchannels.insert(bc.clone());
            c.n.peers.note(a.csa_clientid, c.ctx.peer.ip());
            if bc.usable() {
                probe(bc);
            }
            if newly_confirmed {
                // Recorded for reclaim before the client hears it is confirmed.
                c.n.apply_effects().await;
            }
            res
        }
        Err(s) => fail(c, Fail::new(s, "client vanished during CREATE_SESSION")),
    }
}

/// What SEQUENCE decided for the rest of the COMPOUND.
pub enum Seq {
    Go,
    Replay(Bytes),
    Failed(Nfsstat4),
}

/// `args_len`: the size of the COMPOUND's arguments, checked against the
/// session's ca_maxrequestsize; `reply_len`: the reply's size so far (its
/// header), to which SEQUENCE's result adds.
pub fn sequence(
    c: &mut Compound<'_>,
    a: NfsArgop4,
    args_sum: u64,
    args_len: usize,
    reply_len: usize,
    out: &mut BytesMut,
) -> Seq {
    let NfsArgop4::OP_SEQUENCE(a) = a else {
        unreachable!("called for SEQUENCE only")
    };
    let failed = |c: &Compound<'_>, out: &mut BytesMut, s: Nfsstat4, why: &'static str| {
        log_fail(c.ctx, "OP_SEQUENCE", &Fail::new(s, why));
        NfsResop4::OP_SEQUENCE(Sequence4res::Default(s)).pack(out);
        Seq::Failed(s)
    };
    let st = &c.n.state;
    let Some(session) = st.session(&a.sa_sessionid) else {
        return failed(c, out, Nfsstat4::NFS4ERR_BADSESSION, "unknown session");
    };
    // RFC 8881 §2.10.6.4: a request over ca_maxrequestsize MUST get
    // REQ_TOO_BIG, before anything in it runs and leaving the slot alone.
    // Only the COMPOUND is measured; its RPC header would only add to it.
    if args_len > session.fore.ca_maxrequestsize as usize {
        return failed(
            c,
            out,
            Nfsstat4::NFS4ERR_REQ_TOO_BIG,
            "request larger than ca_maxrequestsize",
        );
    }
    // §2.10.6.4 and §18.46.3: a reply that cannot fit ca_maxresponsesize
    // (or, with sa_cachethis, ca_maxresponsesize_cached) even with SEQUENCE
    // alone gets REP_TOO_BIG (REP_TOO_BIG_TO_CACHE) on SEQUENCE, before the
    // slot is used, as for REQ_TOO_BIG.
    let reply = reply_len + SEQUENCE_RESULT;
    if reply > session.fore.ca_maxresponsesize as usize {
        return failed(
            c,
            out,
            Nfsstat4::NFS4ERR_REP_TOO_BIG,
            "not even SEQUENCE's reply fits ca_maxresponsesize",
        );
    }
    if a.sa_cachethis && reply > session.fore.ca_maxresponsesize_cached as usize {
        return failed(
            c,
            out,
            Nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE,
            "not even SEQUENCE's reply fits ca_maxresponsesize_cached",
        );
    }
    let guard = match session.begin(a.sa_slotid, a.sa_sequenceid, args_sum) {
        Ok(SlotUse::New(g)) => g,
        Ok(SlotUse::Replay(r)) => return Seq::Replay(r),
        Err(s) => return failed(c, out, s, "slot or sequence id refused"),
    };
    let Ok(flags) = st.renew_flags(session.client, c.n.clock.now()) else {
        return failed(
            c,
            out,
            Nfsstat4::NFS4ERR_BADSESSION,
            "the session's client expired",
        );
    };
    let flags = flags | c.n.backchannels.status_flags(session.client, &session.id);
    c.clientid = Some(session.client);
    c.cachethis = a.sa_cachethis;
    let highest = session.highest_slot();
    c.slot = Some(guard);
    NfsResop4::OP_SEQUENCE(Sequence4res::NFS4_OK(Sequence4resok {
        sr_sessionid: a.sa_sessionid,
        sr_sequenceid: a.sa_sequenceid,
        sr_slotid: a.sa_slotid,
        sr_highest_slotid: highest,
        sr_target_highest_slotid: highest,
        sr_status_flags: flags,
    }))
    .pack(out);
    Seq::Go
}

pub fn bind_conn(c: &mut Compound<'_>, a: BindConnToSession4args) -> BindConnToSession4res {
    let Some(s) = c.n.state.session(&a.bctsa_sessid) else {
        log_fail(
            c.ctx,
            "OP_BIND_CONN_TO_SESSION",
            &Fail::new(Nfsstat4::NFS4ERR_BADSESSION, "unknown session"),
        );
        return BindConnToSession4res::Default(Nfsstat4::NFS4ERR_BADSESSION);
    };
    let _ = c.n.state.renew(s.client, c.n.clock.now());
    // Every connection can carry fore-channel calls; the back channel goes
    // along when the session has one, and moves to this connection.
    let dir = match a.bctsa_dir {
        ChannelDirFromClient4::CDFC4_FORE => ChannelDirFromServer4::CDFS4_FORE,
        ChannelDirFromClient4::CDFC4_BACK => ChannelDirFromServer4::CDFS4_BACK,
        _ if s.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 => {
            ChannelDirFromServer4::CDFS4_BOTH
        }
        _ => ChannelDirFromServer4::CDFS4_FORE,
    };
    if dir != ChannelDirFromServer4::CDFS4_FORE {
        if let (Some(bc), Some(conn)) = (
            c.n.backchannels.session(s.client, &s.id),
            c.ctx.back.clone(),
        ) {
            bc.bind(conn);
            if bc.usable() {
                probe(bc);
            }
        }
    }
    BindConnToSession4res::NFS4_OK(BindConnToSession4resok {
        bctsr_sessid: a.bctsa_sessid,
        bctsr_dir: dir,
        bctsr_use_conn_in_rdma_mode: false,
    })
}

/// Sends CB_NULL on a new back channel, so a path that does not work
/// shows as BACKCHANNEL_FAULT before anything depends on it.
fn probe(bc: Arc<Backchannel>) {
    if tokio::runtime::Handle::try_current().is_ok() {
        tokio::spawn(async move {
            if let Err(e) = bc.null(channel::CALL_TIMEOUT).await {
                tracing::debug!(client = bc.client, error = ?e, "CB_NULL probe failed");
            }
        });
    }
}

/// BACKCHANNEL_CTL (RFC 8881 §18.33): a new callback program and
/// security for the session's back channel.
pub fn backchannel_ctl(c: &mut Compound<'_>, a: BackchannelCtl4args) -> BackchannelCtl4res {
    let status = match c.slot.as_ref().map(|g| g.session().clone()) {
        None => Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION,
        Some(s) => match channel::callback_cred(&a.bca_sec_parms) {
            // §18.33.3: none of the flavors can be used.
            None => Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP,
            Some(cred) => {
                match c.n.backchannels.session(s.client, &s.id) {
                    Some(bc) => bc.set_program(a.bca_cb_program, Some(cred)),
                    None => c.n.backchannels.insert(Arc::new(Backchannel::new(
                        s.id,
                        s.client,
                        c.minor,
                        a.bca_cb_program,
                        Some(cred),
                        None,
                        false,
                    ))),
                }
                Nfsstat4::NFS4_OK
            }
        },
    };
    if status != Nfsstat4::NFS4_OK {
        log_fail(c.ctx, "OP_BACKCHANNEL_CTL", &Fail::new(status, "refused"));
    }
    BackchannelCtl4res { bcr_status: status }
}

pub fn destroy_session(c: &mut Compound<'_>, a: DestroySession4args) -> DestroySession4res {
    let client = c.n.state.session(&a.dsa_sessionid).map(|s| s.client);
    let status = match c.n.state.destroy_session(&a.dsa_sessionid) {
        Ok(()) => {
            if let Some(client) = client {
                c.n.backchannels.remove_session(client, &a.dsa_sessionid);
            }
            Nfsstat4::NFS4_OK
        }
        Err(s) => refused(c.ctx, "OP_DESTROY_SESSION", s, "unknown session"),
    };
    DestroySession4res { dsr_status: status }
}

pub async fn destroy_clientid(
    c: &mut Compound<'_>,
    a: DestroyClientid4args,
) -> DestroyClientid4res {
    let gone = gone_files(c, a.dca_clientid).await;
    let status = match c.n.state.destroy_clientid(a.dca_clientid, &gone) {
        Ok(_) => {
            c.n.apply_effects().await;
            Nfsstat4::NFS4_OK
        }
        Err(s) => refused(
            c.ctx,
            "OP_DESTROY_CLIENTID",
            s,
            "client unknown or still has sessions or state",
        ),
    };
    DestroyClientid4res { dcr_status: status }
}

/// The files `clientid` holds state on that no longer exist (the backend
/// says Stale; an export gone since counts too). Asked only of a client
/// that still holds state, so an unmount without it costs nothing.
async fn gone_files(c: &Compound<'_>, clientid: u64) -> Vec<FileKey> {
    let held = c.n.state.files_held(clientid);
    if held.is_empty() {
        return held;
    }
    let snap = c.snap.clone();
    c.n.run(move || {
        held.into_iter()
            .filter(|f| match snap.exports.get(f.export) {
                Some(e) => matches!(e.backend.getattr(&f.fid), Err(vfs::FsError::Stale)),
                None => true,
            })
            .collect()
    })
    .await
}

pub async fn reclaim_complete(
    c: &mut Compound<'_>,
    a: ReclaimComplete4args,
) -> ReclaimComplete4res {
    let status = match c.clientid() {
        // one_fs covers a single filesystem after a migration; Tarn has
        // none, so it changes nothing.
        Ok(_) if a.rca_one_fs => Nfsstat4::NFS4_OK,
        Ok(id) => match c.n.state.reclaim_complete(id) {
            Ok(()) => {
                c.n.records.reclaimed(id).await;
                Nfsstat4::NFS4_OK
            }
            Err(s) => refused(c.ctx, "OP_RECLAIM_COMPLETE", s, "second RECLAIM_COMPLETE"),
        },
        Err(f) => f.status,
    };
    ReclaimComplete4res { rcr_status: status }
}
