//! The RPC call pipeline: what the server does with one record, as pure
//! decisions. No socket, task, clock or file is touched here; the driver
//! ([`crate::server`]) reads records, passes the time they arrived, and
//! carries out what it is told. A call goes through three steps:
//!
//! 1. [`Pipeline::admit`], in the connection's reader, as the record
//!    arrives: decodes the header, refuses what is malformed or not
//!    served, answers NULL, takes the RPCSEC_GSS window snapshot (so the
//!    window is judged as of the moment the call was read, docs/design.md
//!    rule 4) and consults the duplicate request cache for calls that are
//!    not GSS. Its answer is a reply, a drop, or a call to run.
//! 2. [`Pipeline::prepare`], in the call's own task: the GSS steps that
//!    cost crypto (INIT answered, header checksum verified before the
//!    window moves, window judged, DESTROY, arguments unwrapped), then the
//!    DRC lookup of a GSS call (its arguments are known only once
//!    unwrapped). Its answer is again a reply, a drop, or the procedure to
//!    run with its verified context and arguments.
//! 3. [`Pipeline::finish`], once the procedure returned: protects the
//!    results, builds the reply or the RPC error, completes the DRC entry,
//!    and gives the status the metrics count.
//!
//! Crypto over large buffers would stall the async worker that runs it;
//! how to run it is the driver's business, so the pipeline is given an
//! [`Offload`] hook (the tokio driver runs big buffers under
//! `block_in_place`; tests run everything inline). The hook only decides
//! where the closure runs, never what it computes, so decisions stay pure.

mod gss;
#[cfg(test)]
mod tests;

use crate::auth::Auth;
use crate::callback::CallbackConn;
use crate::context::CallContext;
use crate::drc::{self, Drc, Lookup};
use crate::gss::{GssCall, GssServer, GssService};
use crate::msg::{self, BadCall, CallError};
use crate::observe::{self, Event, Observer, PeerStats};
use crate::program::Service;
use crate::record;
use bytes::{Bytes, BytesMut};
use proto::rpc::{AcceptStat, AuthStat, OpaqueAuth};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, warn};
use xdr::Decoder;

/// Runs a crypto closure over `len` bytes (`usize::MAX`: blocking work
/// such as reading the keytab). The driver chooses the thread.
pub type Offload = fn(len: usize, f: &mut dyn FnMut());

/// Runs the closure where it is called.
pub fn inline(_len: usize, f: &mut dyn FnMut()) {
    f()
}

/// What the server does with a record, or with a call after a step.
#[derive(Debug)]
pub enum Decision<T> {
    /// Send these bytes (a whole record, with its mark).
    Reply { bytes: Bytes, why: Answered },
    /// Send nothing; `close`: close the connection so the client
    /// retransmits at once instead of waiting for its timeout.
    Drop { why: Dropped, close: bool },
    /// Go on with this.
    Run(T),
    /// A REPLY from the client to a call the server sent on this
    /// connection (the back channel): the driver hands the record to the
    /// caller waiting on `xid`, and drops it if none waits.
    CallbackReply { xid: u32, record: Bytes },
}

/// Why a call was answered without its procedure (for logs and counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Malformed call header.
    GarbageArgs,
    /// Malformed credential or verifier.
    BadCred,
    RpcMismatch,
    /// The credential was refused (its flavor, an unknown or expired GSS context...).
    AuthError,
    ProgUnavail,
    ProgMismatch,
    /// Procedure 0 (not under RPCSEC_GSS DATA), with its metric slot.
    Null {
        slot: Option<usize>,
    },
    /// A retransmission answered from the duplicate request cache.
    DrcHit,
    /// RPCSEC_GSS INIT or CONTINUE_INIT.
    GssInit,
    /// RPCSEC_GSS DESTROY.
    GssDestroy,
    /// A GSS call whose header checksum fails.
    GssCredProblem,
    /// A GSS call whose arguments fail their checksum or do not decrypt.
    GssGarbageArgs,
    /// The reply verifier could not be computed.
    GssSystemErr,
}

/// Why a call gets no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Too short to hold an xid.
    Unreadable,
    /// A retransmission of a call still executing.
    DrcInProgress,
    /// A GSS sequence number outside the window.
    GssSeqWindow,
    /// A GSS sequence number already seen.
    GssReplay,
    /// A cached reply could not be protected anew.
    GssWrapFailed,
}

/// What the pipeline knows of a record's connection and arrival.
#[derive(Clone, Copy)]
pub struct Arrival<'a> {
    pub peer: SocketAddr,
    pub conn_id: u64,
    /// The client's handle, resolved once per connection.
    pub client: &'a Arc<dyn PeerStats>,
    /// When the record came off the connection.
    pub now: Instant,
    /// The connection, for calls back to the client over it (copied into
    /// each call's context).
    pub back: Option<&'a Arc<dyn CallbackConn>>,
    /// How the connection is protected.
    pub xprtsec: crate::transport::XprtSec,
    /// The user its verified client certificate maps to (mTLS).
    pub tls_id: Option<&'a Arc<crate::tls::identity::TlsIdentity>>,
    /// Whether the driver can send file data from a pipe on this
    /// connection ([`crate::zero_copy`]); GSS integrity and privacy
    /// turn it off per call.
    pub zero_copy: bool,
}

/// A call admitted by the reader, to be prepared in its own task.
#[derive(Debug)]
pub struct Admitted {
    pub ctx: CallContext,
    args: Decoder,
    header: Bytes,
    verf: OpaqueAuth,
    gss: Option<GssCall>,
    drc_key: Option<drc::Key>,
    /// The procedure's metric slot.
    pub slot: Option<usize>,
    /// The record's length.
    pub bytes_in: u64,
}

/// What a verified RPCSEC_GSS DATA call needs to protect its reply.
#[derive(Debug)]
pub(crate) struct Sealer {
    ctx: Arc<crate::gss::GssCtx>,
    service: GssService,
    seq: u32,
    verf: OpaqueAuth,
}

/// A call ready for its procedure: verified context (its arguments travel
/// beside it), and what [`Pipeline::finish`] needs afterwards.
#[derive(Debug)]
pub struct Ready {
    pub ctx: CallContext,
    sealer: Option<Sealer>,
    /// The DRC entry to complete once the reply is known.
    drc_key: Option<drc::Key>,
    pub slot: Option<usize>,
    pub bytes_in: u64,
    head_len: usize,
}

impl Ready {
    /// Whether the procedure is to be called (not for NULL under
    /// RPCSEC_GSS DATA: void results, still protected).
    pub fn runs_procedure(&self) -> bool {
        self.ctx.proc_ != 0
    }

    /// The reply buffer: record mark and SUCCESS header, to which the
    /// procedure appends its results.
    pub fn begin_reply(&mut self) -> BytesMut {
        let mut out = BytesMut::with_capacity(512);
        record::begin(&mut out);
        match &self.sealer {
            None => msg::success_header(self.ctx.xid, &mut out),
            Some(s) => msg::success_header_verf(self.ctx.xid, s.verf.clone(), &mut out),
        }
        self.head_len = out.len();
        out
    }
}

/// The reply of a finished call.
#[derive(Debug)]
pub struct Finished {
    /// None: send nothing (the procedure asked to drop the call).
    pub reply: Option<Bytes>,
    /// File data that belongs inside `reply` (its record mark counts it).
    pub attached: Option<crate::zero_copy::Attachment>,
    /// For the per-status counters (0 = OK, or an `RPC_*` pseudo status).
    pub status: u32,
}

/// The pipeline over the server's shared state.
pub struct Pipeline<'a, S> {
    pub svc: &'a S,
    pub drc: &'a Drc,
    /// RPCSEC_GSS (None: GSS credentials get AUTH_BADCRED).
    pub gss: Option<&'a GssServer>,
    pub obs: &'a dyn Observer,
    pub offload: Offload,
}

pub(crate) fn finish_record(mut out: BytesMut) -> Bytes {
    record::finish(&mut out);
    out.freeze()
}

pub(crate) fn reply_with(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    record::begin(&mut out);
    f(&mut out);
    finish_record(out)
}

impl<S: Service> Pipeline<'_, S> {
    /// Runs `f` through the driver's [`Offload`] hook.
    pub(crate) fn crypto<T>(&self, len: usize, f: impl FnOnce() -> T) -> T {
        let mut f = Some(f);
        let mut out = None;
        (self.offload)(len, &mut || out = f.take().map(|f| f()));
        out.expect("the offload hook runs its closure")
    }

    /// Counts a malformed or refused call; whether it may be logged.
    fn bad(&self, client: &dyn PeerStats) -> bool {
        self.obs.count(Event::BadCall);
        client.log_allowed()
    }

    /// Step 1: one record, as it is read.
    pub fn admit(&self, rec: Bytes, at: Arrival<'_>) -> Decision<Box<Admitted>> {
        let peer = at.peer;
        let client = &**at.client;
        let reply = |bytes, why| Decision::Reply { bytes, why };
        // A malformed header: counted, logged (as the peer's rate allows)
        // and answered with `bytes`.
        let refuse = |xid: u32, what: &str, bytes, why| {
            if self.bad(client) {
                warn!(%peer, xid, "{what}");
            }
            reply(bytes, why)
        };
        let bytes_in = rec.len() as u64;
        let call = match msg::decode_call(rec.clone()) {
            Ok(c) => c,
            Err(BadCall::Unreadable) => {
                if self.bad(client) {
                    warn!(%peer, "dropping record too short to hold an xid");
                }
                return Decision::Drop {
                    why: Dropped::Unreadable,
                    close: false,
                };
            }
            // Whether a call waits for it is the driver's to know.
            Err(BadCall::NotACall(xid)) => return Decision::CallbackReply { xid, record: rec },
            Err(BadCall::Garbage(xid)) => {
                let bytes = reply_with(|o| msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, o));
                let what = "GARBAGE_ARGS: malformed call header";
                return refuse(xid, what, bytes, Answered::GarbageArgs);
            }
            Err(BadCall::BadCred(xid)) => {
                let bytes = reply_with(|o| msg::auth_error(xid, AuthStat::AUTH_BADCRED, o));
                let what = "AUTH_BADCRED: malformed credential or verifier";
                return refuse(xid, what, bytes, Answered::BadCred);
            }
        };
        let xid = call.xid;
        if call.rpcvers != 2 {
            if self.bad(client) {
                warn!(%peer, xid, rpcvers = call.rpcvers, "RPC_MISMATCH");
            }
            return reply(
                reply_with(|o| msg::rpc_mismatch(xid, o)),
                Answered::RpcMismatch,
            );
        }
        let mut gss_call = None;
        let auth = match (self.gss, call.cred.flavor) {
            (Some(g), proto::rpc::RPCSEC_GSS) => match g.classify(&call, at.now, self.obs) {
                Ok(c) => {
                    gss_call = Some(c);
                    Ok(Auth::None) // replaced once the call is verified
                }
                Err(e) => Err(e),
            },
            _ => Auth::from_cred(&call.cred),
        };
        let mut auth = match auth {
            Ok(a) => a,
            Err(stat) => {
                if self.bad(client) {
                    warn!(%peer, xid, flavor = call.cred.flavor, ?stat, "AUTH_ERROR: credential refused");
                }
                return reply(
                    reply_with(|o| msg::auth_error(xid, stat, o)),
                    Answered::AuthError,
                );
            }
        };
        let Some((low, high)) = self.svc.versions(call.prog) else {
            if self.bad(client) {
                warn!(%peer, xid, prog = call.prog, "PROG_UNAVAIL");
            }
            return reply(
                reply_with(|o| msg::accepted_error(xid, AcceptStat::PROG_UNAVAIL, o)),
                Answered::ProgUnavail,
            );
        };
        if call.vers < low || call.vers > high {
            if self.bad(client) {
                warn!(%peer, xid, prog = call.prog, vers = call.vers, low, high, "PROG_MISMATCH");
            }
            return reply(
                reply_with(|o| msg::prog_mismatch(xid, low, high, o)),
                Answered::ProgMismatch,
            );
        }
        let slot = self.svc.op_slot(call.prog, call.vers, call.proc_);
        if call.proc_ == 0 && gss_call.is_none() {
            return reply(
                reply_with(|o| msg::success_header(xid, o)),
                Answered::Null { slot },
            );
        }
        if let Some(id) = at.tls_id {
            id.apply(&mut auth);
        }
        let mut ctx = CallContext::new(
            xid,
            call.prog,
            call.vers,
            call.proc_,
            auth,
            peer,
            at.conn_id,
            at.client.clone(),
        );
        ctx.back = at.back.cloned();
        ctx.xprtsec = at.xprtsec;
        ctx.allow_zero_copy(at.zero_copy);
        // RPCSEC_GSS calls consult the DRC once verified and unwrapped: a
        // retransmission carries a new sequence number, so its protected
        // arguments differ, and its reply must be protected anew.
        let drc_key = if ctx.proc_ == 0
            || gss_call.is_some()
            || !self
                .svc
                .cacheable(ctx.prog, ctx.vers, ctx.proc_, &call.args.rest())
        {
            None
        } else {
            let key = drc::Key {
                xid,
                prog: ctx.prog,
                vers: ctx.vers,
                proc_: ctx.proc_,
                args_sum: drc::args_sum(&call.args.rest()),
                gss_ctx: 0,
            };
            match self.drc.lookup(peer.ip(), key) {
                Lookup::New => Some(key),
                Lookup::InProgress => {
                    self.obs.count(Event::DrcInProgress);
                    debug!(%peer, xid, "retransmission of a call in progress: dropped");
                    return Decision::Drop {
                        why: Dropped::DrcInProgress,
                        close: false,
                    };
                }
                Lookup::Done(r) => {
                    self.obs.count(Event::DrcHit);
                    debug!(%peer, xid, "retransmission answered from the duplicate request cache");
                    return reply(r, Answered::DrcHit);
                }
            }
        };
        Decision::Run(Box::new(Admitted {
            ctx,
            args: call.args,
            header: call.header,
            verf: call.verf,
            gss: gss_call,
            drc_key,
            slot,
            bytes_in,
        }))
    }

    /// Step 2: an admitted call, in its own task. RPCSEC_GSS calls are
    /// verified, judged and unwrapped here, then looked up in the DRC.
    pub fn prepare(&self, a: Box<Admitted>) -> Decision<(Ready, Decoder)> {
        let Admitted {
            mut ctx,
            args,
            header,
            verf,
            gss,
            drc_key,
            slot,
            bytes_in,
        } = *a;
        let (args, sealer) = match gss {
            None => (args, None),
            Some(g) => match self.gss_prelude(&ctx, g, &header, &verf, args) {
                Decision::Run((args, auth, sealer)) => {
                    ctx.auth = auth;
                    // krb5i and krb5p need the results' bytes.
                    let plain = sealer.service == GssService::None;
                    let zc = ctx.zero_copy() && plain;
                    ctx.allow_zero_copy(zc);
                    (args, Some(sealer))
                }
                Decision::Reply { bytes, why } => return Decision::Reply { bytes, why },
                Decision::Drop { why, close } => return Decision::Drop { why, close },
                Decision::CallbackReply { xid, record } => {
                    return Decision::CallbackReply { xid, record }
                }
            },
        };
        let mut drc_key = drc_key;
        if let Some(s) = &sealer {
            let cacheable = ctx.proc_ != 0
                && self
                    .svc
                    .cacheable(ctx.prog, ctx.vers, ctx.proc_, &args.rest());
            if cacheable {
                let xid = ctx.xid;
                let key = drc::Key {
                    xid,
                    prog: ctx.prog,
                    vers: ctx.vers,
                    proc_: ctx.proc_,
                    args_sum: drc::args_sum(&args.rest()),
                    gss_ctx: s.ctx.id(),
                };
                match self.drc.lookup(ctx.peer.ip(), key) {
                    Lookup::New => drc_key = Some(key),
                    Lookup::InProgress => {
                        self.obs.count(Event::DrcInProgress);
                        debug!(peer = %ctx.peer, xid, "RPCSEC_GSS retransmission of a call in progress: dropped");
                        return Decision::Drop {
                            why: Dropped::DrcInProgress,
                            close: false,
                        };
                    }
                    Lookup::Done(results) => {
                        self.obs.count(Event::DrcHit);
                        debug!(peer = %ctx.peer, xid, seq = s.seq, "RPCSEC_GSS retransmission answered from the DRC, protected anew");
                        let mut out = BytesMut::with_capacity(64 + results.len());
                        record::begin(&mut out);
                        msg::success_header_verf(xid, s.verf.clone(), &mut out);
                        if s.service == GssService::None {
                            out.extend_from_slice(&results);
                        } else if self
                            .crypto(results.len(), || {
                                s.ctx.wrap_results(s.service, s.seq, &results, &mut out)
                            })
                            .is_none()
                        {
                            return Decision::Drop {
                                why: Dropped::GssWrapFailed,
                                close: false,
                            };
                        }
                        return Decision::Reply {
                            bytes: finish_record(out),
                            why: Answered::DrcHit,
                        };
                    }
                }
            }
        }
        Decision::Run((
            Ready {
                ctx,
                sealer,
                drc_key,
                slot,
                bytes_in,
                head_len: 0,
            },
            args,
        ))
    }

    /// Step 3: the procedure returned `result` having appended its results
    /// to `out` (from [`Ready::begin_reply`]).
    pub fn finish(&self, r: &Ready, result: Result<(), CallError>, mut out: BytesMut) -> Finished {
        let (ctx, xid, head_len) = (&r.ctx, r.ctx.xid, r.head_len);
        let gss = &r.sealer;
        // What the DRC keeps of a GSS call: its results, unprotected.
        let gss_results = match (gss, &result, r.drc_key) {
            (Some(_), Ok(()), Some(_)) => Some(Bytes::copy_from_slice(&out[head_len..])),
            _ => None,
        };
        // Integrity and privacy protect the results (not the header).
        let result = match (gss, result) {
            (Some(s), Ok(())) if s.service != GssService::None => {
                let results = out.split_off(head_len);
                let ok = self.crypto(results.len(), || {
                    s.ctx.wrap_results(s.service, s.seq, &results, &mut out)
                });
                ok.ok_or(CallError::SystemErr)
            }
            (_, r) => r,
        };
        // Attached only where nothing protects or caches the results
        // (see `prepare` and `CallContext::attach`); an error reply drops it.
        let attached = ctx.take_attachment().filter(|_| result.is_ok());
        let status = match result {
            Ok(()) => ctx.status(),
            Err(CallError::ProcUnavail) => observe::RPC_PROC_UNAVAIL,
            Err(CallError::GarbageArgs) => observe::RPC_GARBAGE_ARGS,
            Err(CallError::SystemErr) => observe::RPC_SYSTEM_ERR,
            Err(CallError::Auth(_)) => observe::RPC_AUTH_ERROR,
            Err(CallError::Drop) => observe::RPC_DROPPED,
        };
        let reply = match result {
            Ok(()) => {
                let extra = attached.as_ref().map_or(0, |a| a.len);
                record::finish_with(&mut out, extra);
                Some(out.freeze())
            }
            Err(CallError::Drop) => None,
            Err(e) => {
                if ctx.client.log_allowed() {
                    let name = self.svc.procedure_name(ctx.prog, ctx.vers, ctx.proc_);
                    warn!(peer = %ctx.peer, xid, procedure = name, error = ?e, "RPC error reply");
                }
                out.clear();
                record::begin(&mut out);
                match gss {
                    None => msg::call_error(xid, e, &mut out),
                    Some(s) => msg::call_error_verf(xid, e, s.verf.clone(), &mut out),
                }
                Some(finish_record(out))
            }
        };
        if let Some(key) = r.drc_key {
            let keep = if gss.is_some() {
                gss_results.filter(|_| result.is_ok())
            } else {
                reply.clone()
            };
            match keep.filter(|_| !ctx.cache_skipped()) {
                Some(b) => self.drc.complete(ctx.peer.ip(), key, b),
                None => self.drc.abandon(ctx.peer.ip(), key),
            }
        }
        Finished {
            reply,
            attached,
            status,
        }
    }
}
