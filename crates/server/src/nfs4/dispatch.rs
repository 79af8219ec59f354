//! The COMPOUND loop ([`Nfs4::dispatch`]): decodes the header, then one
//! operation at a time (so an unknown operation number becomes
//! OP_ILLEGAL after the results so far), runs it, and stops at the first
//! error, as RFC 8881 §16.2.3 says. Results are written straight into the
//! reply. What each operation is and which handler runs it: the table in
//! [`super::ops`].

use super::compound::{Compound, MAX_OPS};
use super::ops::{self, Run};
use super::server::Nfs4;
use super::{secinfo, session, v40};
use bytes::{BufMut, Bytes, BytesMut};
use proto::nfs4::*;
use rpc::{CallContext, CallError};
use std::time::Instant;
use tracing::{debug, warn};
use xdr::{Decoder, Unpack};

const OP_ACCESS: u32 = NfsOpnum4::OP_ACCESS as u32;
const OP_SEQUENCE: u32 = NfsOpnum4::OP_SEQUENCE as u32;
const OP_SETATTR: u32 = NfsOpnum4::OP_SETATTR as u32;
const OP_BIND_CONN_TO_SESSION: u32 = NfsOpnum4::OP_BIND_CONN_TO_SESSION as u32;
const OP_ILLEGAL: u32 = NfsOpnum4::OP_ILLEGAL as u32;

/// The highest operation number of each minor version.
fn max_op(minor: u32) -> u32 {
    match minor {
        0 => NfsOpnum4::OP_RELEASE_LOCKOWNER as u32,
        1 => NfsOpnum4::OP_RECLAIM_COMPLETE as u32,
        // RFC 7862's operations, then RFC 8276's extended attributes.
        _ => NfsOpnum4::OP_REMOVEXATTR as u32,
    }
}

/// The minor version of a COMPOUND's arguments (after the tag), if they
/// are well-formed that far.
pub fn minor_version(args: &[u8]) -> Option<u32> {
    let word = |at: usize| Some(u32::from_be_bytes(args.get(at..at + 4)?.try_into().ok()?));
    let tag = word(0)? as usize;
    word(4usize.checked_add(tag.checked_next_multiple_of(4)?)?)
}

/// Largest NFSv4.0 reply kept in the duplicate request cache: replies of
/// changing operations are small; a big one (a READ in the same COMPOUND)
/// would only crowd the cache.
const DRC_MAX_REPLY: usize = 16 << 10;

/// Where the COMPOUND's reply header sits in `out`.
struct Reply {
    /// The COMPOUND's status.
    start: usize,
    /// The count of results.
    count_at: usize,
}

/// How an operation ended the COMPOUND loop, if it did.
enum Step {
    Next,
    /// Stop with this status (the result is written).
    Stop(Nfsstat4),
    /// SEQUENCE found the reply in the slot's cache: it is the reply.
    Replayed,
}

impl Nfs4 {
    pub async fn dispatch(
        &self,
        ctx: &CallContext,
        mut args: Decoder,
        out: &mut BytesMut,
    ) -> Result<(), CallError> {
        if ctx.proc_ != 1 {
            return Err(CallError::ProcUnavail);
        }
        let args_sum = rpc::drc::args_sum(&args.rest());
        let args_len = args.remaining();
        let (minor, nops, reply) = header(ctx, &mut args, out)?;
        if minor > 2 {
            set_status(out, reply.start, Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH);
            ctx.set_status(Nfsstat4::NFS4ERR_MINOR_VERS_MISMATCH as u32);
            return Ok(());
        }
        let mut c = Compound::new(self, ctx, minor);
        let mut done = 0u32;
        let mut status = Nfsstat4::NFS4_OK;
        let mut changing = false;
        for i in 0..nops {
            // Peek at the operation number so an unknown one becomes
            // OP_ILLEGAL instead of failing the whole call.
            let op = args.clone().u32().unwrap_or(OP_ILLEGAL);
            changing |= ops::get(op).is_some_and(|o| o.changes);
            let at = out.len();
            if let Some((op, s)) = refuse(&c, i, nops, op) {
                put_error(out, op, s);
                status = s;
                done += 1;
                break;
            }
            // Service time for metrics: real time, not the lease clock.
            let t0 = Instant::now();
            let step = self
                .step(&mut c, op, &mut args, (args_sum, args_len), &reply, out)
                .await;
            match step {
                Step::Next => {}
                Step::Replayed => return Ok(()),
                Step::Stop(s) => {
                    status = s;
                    done += 1;
                    break;
                }
            }
            done += 1;
            let s = u32::from_be_bytes(out[at + 4..at + 8].try_into().unwrap());
            self.count(&c, op, s, t0);
            if s != 0 {
                status = Nfsstat4::from_i32(s as i32).unwrap_or(Nfsstat4::NFS4ERR_SERVERFAULT);
                if tracing::enabled!(tracing::Level::DEBUG) && ctx.client.log_allowed() {
                    debug!(peer = %ctx.peer, xid = ctx.xid, op = ops::name(op), ?status, "NFSv4 operation failed");
                }
                break;
            }
        }
        set_status(out, reply.start, status);
        out[reply.count_at..reply.count_at + 4].copy_from_slice(&done.to_be_bytes());
        ctx.set_status(status as u32);
        if minor == 0 && (!changing || out.len() - reply.start > DRC_MAX_REPLY) {
            ctx.skip_cache();
        }
        if let Some(slot) = c.slot.take() {
            // Bounded by the check after each operation (plus one status).
            let reply = c
                .cachethis
                .then(|| Bytes::copy_from_slice(&out[reply.start..]));
            slot.finish(reply);
        }
        Ok(())
    }

    /// Decodes and runs operation `op` (the next in `args`), SEQUENCE
    /// included, and checks its result against the security and the
    /// session's bounds. `sum`: the checksum and length of the COMPOUND's
    /// arguments (SEQUENCE's replay check).
    async fn step(
        &self,
        c: &mut Compound<'_>,
        op: u32,
        args: &mut Decoder,
        sum: (u64, usize),
        reply: &Reply,
        out: &mut BytesMut,
    ) -> Step {
        let ctx = c.ctx;
        let a = match NfsArgop4::unpack(args) {
            Ok(a) => a,
            Err(e) => {
                if ctx.client.log_allowed() {
                    warn!(peer = %ctx.peer, xid = ctx.xid, op = ops::name(op), error = %e, "NFS4ERR_BADXDR");
                }
                put_error(out, op, Nfsstat4::NFS4ERR_BADXDR);
                return Step::Stop(Nfsstat4::NFS4ERR_BADXDR);
            }
        };
        if op == OP_SEQUENCE {
            let so_far = out.len() - reply.start;
            return match session::sequence(c, a, sum.0, sum.1, so_far, out) {
                session::Seq::Go => Step::Next,
                session::Seq::Replay(r) => {
                    if let Some(m) = &self.metrics {
                        m.server
                            .slot_replays
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    out.truncate(reply.start);
                    out.extend_from_slice(&r);
                    Step::Replayed
                }
                session::Seq::Failed(s) => Step::Stop(s),
            };
        }
        let at = out.len();
        self.op(c, op, a, out).await;
        if !c.snap.exports.call_everywhere(ctx)
            && out[at + 4..at + 8] == [0; 4]
            && secinfo::wrong_sec(c, op, args.clone().u32().ok())
        {
            out.truncate(at);
            ctx.detach_from(at);
            put_error(out, op, Nfsstat4::NFS4ERR_WRONGSEC);
        }
        if let Some(s) = too_big(c, reply.start, out) {
            out.truncate(at);
            ctx.detach_from(at);
            put_error(out, op, s);
        }
        Step::Next
    }

    /// Runs one operation (not SEQUENCE), packing its result (operation
    /// number first): the handler its row in [`ops::OPS`] names, and for
    /// NFSv4.0 the open and lock owners' sequencing around it.
    async fn op(&self, c: &mut Compound<'_>, op: u32, a: NfsArgop4, out: &mut BytesMut) {
        let v40 = c.minor == 0;
        // NFSv4.0 open and lock owners sequence their requests themselves.
        let seq = if v40 { v40::sequenced(c, &a) } else { None };
        if let Some(k) = &seq {
            // A stateful operation renews the lease (RFC 7530 §9.6) and
            // brings a courteous client back with its state.
            let _ = self.state.renew(k.0, self.clock.now());
            if let Some(reply) = v40::before(c, op, k) {
                out.extend_from_slice(&reply);
                return;
            }
        }
        let start = out.len();
        let run = match ops::get(op) {
            Some(o) if v40 || !o.v40_only => o.run,
            _ => Run::NotSupp,
        };
        match run {
            Run::Now(f) => f(c, a, out),
            Run::Wait(f) => f(c, a, out).await,
            Run::Sequence | Run::NotSupp => {}
        }
        if out.len() == start {
            // Defined but not (yet) implemented here, or belonging to
            // another minor version: NOTSUPP, never a crash. Results of
            // these ops are `status` alone or a union whose non-OK arms
            // are void, so the status is the whole result.
            out.put_u32(op);
            out.put_u32(Nfsstat4::NFS4ERR_NOTSUPP as u32);
            return;
        }
        if let Some(k) = seq {
            v40::after(c, k, &out[start..]);
        }
    }

    /// An operation's trace line and per-operation metrics.
    fn count(&self, c: &Compound<'_>, op: u32, status: u32, t0: Instant) {
        let ctx = c.ctx;
        tracing::trace!(peer = %ctx.peer, xid = ctx.xid, minor = c.minor, op = ops::name(op), status, "NFSv4 operation");
        if let Some(m) = &self.metrics {
            let slot = ops::get(op).map_or(metrics::ops::nfs4_op_slot(op), |o| o.metric_slot());
            m.op_end(slot, &ctx.client, status, t0.elapsed().as_nanos() as u64);
        }
    }
}

/// Reads the COMPOUND header (tag, minor version, operation count) and
/// starts the reply: status and count to fill in later, the tag echoed.
fn header(
    ctx: &CallContext,
    args: &mut Decoder,
    out: &mut BytesMut,
) -> Result<(u32, u32, Reply), CallError> {
    let garbage = |what: &str| {
        if ctx.client.log_allowed() {
            warn!(peer = %ctx.peer, xid = ctx.xid, what, "GARBAGE_ARGS in COMPOUND header");
        }
        CallError::GarbageArgs
    };
    let tag = args.opaque(None).map_err(|_| garbage("tag"))?;
    let minor = args.u32().map_err(|_| garbage("minorversion"))?;
    let nops = args.count(None).map_err(|_| garbage("operation count"))? as u32;
    let start = out.len();
    out.put_u32(0);
    xdr::pack_opaque(&tag, out);
    let count_at = out.len();
    out.put_u32(0);
    Ok((minor, nops, Reply { start, count_at }))
}

/// Whether operation `op`, the `i`th of `nops`, is refused before it is
/// decoded: the operation number and status to answer with.
fn refuse(c: &Compound<'_>, i: u32, nops: u32, op: u32) -> Option<(u32, Nfsstat4)> {
    if op > max_op(c.minor) || op < OP_ACCESS {
        return Some((OP_ILLEGAL, Nfsstat4::NFS4ERR_OP_ILLEGAL));
    }
    if i >= MAX_OPS {
        return Some((op, Nfsstat4::NFS4ERR_RESOURCE));
    }
    if c.minor > 0 {
        return session_rule(c, i, nops, op).map(|s| (op, s));
    }
    None
}

/// Session rules: SEQUENCE first, or one sessionless op alone.
/// After a SEQUENCE, EXCHANGE_ID (RFC 8881 §18.35.3: "MAY be
/// sent in a COMPOUND procedure that starts with SEQUENCE"),
/// CREATE_SESSION (§18.36.3: "with or without a preceding
/// SEQUENCE"), DESTROY_SESSION (§18.37.3) and DESTROY_CLIENTID
/// (§18.50.3) run like any other operation; NOT_ONLY_OP is only
/// for a COMPOUND that does not start with SEQUENCE (§15.1.3.3).
/// BIND_CONN_TO_SESSION "MUST be the only operation" (§18.34.3).
fn session_rule(c: &Compound<'_>, i: u32, nops: u32, op: u32) -> Option<Nfsstat4> {
    if i == 0 {
        if op == OP_SEQUENCE {
            None
        } else if ops::get(op).is_some_and(|o| o.sessionless) {
            (nops > 1).then_some(Nfsstat4::NFS4ERR_NOT_ONLY_OP)
        } else {
            Some(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
        }
    } else if op == OP_SEQUENCE {
        Some(Nfsstat4::NFS4ERR_SEQUENCE_POS)
    } else if op == OP_BIND_CONN_TO_SESSION {
        Some(Nfsstat4::NFS4ERR_NOT_ONLY_OP)
    } else if c
        .slot
        .as_ref()
        .is_some_and(|s| i >= s.session().fore.ca_maxoperations)
    {
        Some(Nfsstat4::NFS4ERR_TOO_MANY_OPS)
    } else {
        None
    }
}

/// RFC 8881 §2.10.6.4: a reply that outgrows the session's
/// ca_maxresponsesize ends, in place of the result that overflowed, with
/// REP_TOO_BIG; one sa_cachethis asks to cache that outgrows
/// ca_maxresponsesize_cached, with REP_TOO_BIG_TO_CACHE, and is cached
/// like that (a retry must not run it again). Only the COMPOUND is
/// measured. (READ data in a pipe counts: see rpc::zero_copy.)
fn too_big(c: &Compound<'_>, start: usize, out: &BytesMut) -> Option<Nfsstat4> {
    let s = c.slot.as_ref()?;
    let fore = &s.session().fore;
    let len = out.len() - start + c.ctx.attached_len();
    if len > fore.ca_maxresponsesize as usize {
        Some(Nfsstat4::NFS4ERR_REP_TOO_BIG)
    } else if c.cachethis && len > fore.ca_maxresponsesize_cached as usize {
        Some(Nfsstat4::NFS4ERR_REP_TOO_BIG_TO_CACHE)
    } else {
        None
    }
}

/// An operation's result that is an error decided outside its handler:
/// the operation number and status, and what the result carries whatever
/// the status (SETATTR4res always has its `attrsset` bitmap, here empty).
fn put_error(out: &mut BytesMut, op: u32, s: Nfsstat4) {
    out.put_u32(op);
    out.put_u32(s as u32);
    if op == OP_SETATTR {
        out.put_u32(0);
    }
}

fn set_status(out: &mut BytesMut, start: usize, s: Nfsstat4) {
    out[start..start + 4].copy_from_slice(&(s as u32).to_be_bytes());
}
