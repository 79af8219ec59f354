//! The RPCSEC_GSS part of [`Pipeline::prepare`], in order: INIT is
//! answered here; DATA and DESTROY have their header checksum verified
//! before the sequence window is touched, then are judged against the
//! window snapshot taken when they were read (docs/design.md rule 4); a call
//! that must be dropped is counted and closes the connection so the
//! client retransmits at once.

use super::{reply_with, Answered, Decision, Dropped, Pipeline, Sealer};
use crate::auth::{Auth, AuthGss};
use crate::context::CallContext;
use crate::gss::{DropReason, GssCall};
use crate::msg;
use crate::observe::Event;
use crate::program::Service;
use bytes::Bytes;
use proto::rpc::{AcceptStat, AuthStat, OpaqueAuth};
use tracing::warn;
use xdr::Decoder;

impl<S: Service> Pipeline<'_, S> {
    pub(super) fn gss_prelude(
        &self,
        ctx: &CallContext,
        call: GssCall,
        header: &Bytes,
        verf: &OpaqueAuth,
        args: Decoder,
    ) -> Decision<(Decoder, Auth, Sealer)> {
        let g = self.gss.expect("GSS call without GSS");
        let m = self.obs;
        let xid = ctx.xid;
        let reply = |bytes, why| Decision::Reply { bytes, why };
        match call {
            GssCall::Init { cred, ctx: gctx } => {
                let mut a = args;
                let Ok(arg) = <proto::gss::RpcGssInitArg as xdr::Unpack>::unpack(&mut a) else {
                    return reply(
                        reply_with(|o| msg::accepted_error(xid, AcceptStat::GARBAGE_ARGS, o)),
                        Answered::GarbageArgs,
                    );
                };
                // Reads the keytab and decrypts the ticket: off the async workers.
                let (v, res) =
                    self.crypto(usize::MAX, || g.init_step(&cred, gctx, &arg.gss_token, m));
                reply(
                    reply_with(|o| {
                        msg::success_header_verf(xid, v.unwrap_or_else(msg::none_verf), o);
                        xdr::Pack::pack(&res, o);
                    }),
                    Answered::GssInit,
                )
            }
            GssCall::Data {
                cred,
                ctx: gctx,
                snap,
            } => {
                if !g.verify_header(&gctx, header, verf, m) {
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid, principal = ?gctx.principal(), "RPCSEC_GSS header checksum fails: refused");
                    }
                    return reply(
                        reply_with(|o| msg::auth_error(xid, AuthStat::RPCSEC_GSS_CREDPROBLEM, o)),
                        Answered::GssCredProblem,
                    );
                }
                if let Err(why) = gctx.accept_seq(cred.seq, snap, g.cfg.window) {
                    m.count(match why {
                        DropReason::SeqWindow => Event::GssDroppedSeqWindow,
                        DropReason::Replay => Event::GssDroppedOther,
                    });
                    ctx.client.gss_dropped(why);
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid, seq = cred.seq, ?snap, reason = ?why, "RPCSEC_GSS call dropped; closing the connection so the client retransmits");
                    }
                    return Decision::Drop {
                        why: match why {
                            DropReason::SeqWindow => Dropped::GssSeqWindow,
                            DropReason::Replay => Dropped::GssReplay,
                        },
                        close: true,
                    };
                }
                ctx.client.note_gss(gctx.expires_unix(), gctx.principal());
                let Some(rverf) = gctx.verifier(cred.seq) else {
                    return reply(
                        reply_with(|o| msg::accepted_error(xid, AcceptStat::SYSTEM_ERR, o)),
                        Answered::GssSystemErr,
                    );
                };
                if cred.proc_ == proto::gss::RpcGssProcT::RPCSEC_GSS_DESTROY {
                    g.destroy(&gctx, m);
                    return reply(
                        reply_with(|o| msg::success_header_verf(xid, rverf, o)),
                        Answered::GssDestroy,
                    );
                }
                let n = args.remaining();
                let Some(args) = self.crypto(n, || gctx.unwrap_args(cred.service, cred.seq, args))
                else {
                    if ctx.client.log_allowed() {
                        warn!(peer = %ctx.peer, xid, service = ?cred.service, "RPCSEC_GSS arguments fail their checksum or do not decrypt: GARBAGE_ARGS");
                    }
                    return reply(
                        reply_with(|o| {
                            msg::accepted_error_verf(xid, AcceptStat::GARBAGE_ARGS, rverf, o)
                        }),
                        Answered::GssGarbageArgs,
                    );
                };
                let auth = Auth::Gss(AuthGss {
                    principal: gctx.principal().cloned().unwrap_or_else(|| "".into()),
                    service: cred.service,
                    ids: gctx.ids().cloned(),
                });
                Decision::Run((
                    args,
                    auth,
                    Sealer {
                        ctx: gctx,
                        service: cred.service,
                        seq: cred.seq,
                        verf: rverf,
                    },
                ))
            }
        }
    }
}
