//! Call headers in, reply headers out (RFC 5531 section 9). Pure code.

use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::{
    AcceptStat, AcceptedReply, AcceptedReplyReplyData, AuthStat, MismatchInfo, OpaqueAuth,
    RejectedReply, ReplyBody, RpcMsg, RpcMsgBody, AUTH_NONE,
};
use xdr::{Decoder, Pack, Unpack};

/// How a program call failed at the RPC level (the reply is not the
/// program's own result but an RPC error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    /// AUTH_ERROR with this status (for example AUTH_TOOWEAK).
    Auth(AuthStat),
    /// Send nothing (the client will retransmit); used for calls that are
    /// still in progress when a retransmission arrives.
    Drop,
}

/// A decoded call header; `args` is the rest of the record, not copied.
#[derive(Debug)]
pub struct Call {
    pub xid: u32,
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth,
    pub verf: OpaqueAuth,
    /// The header from the xid to the end of the credential: what an
    /// RPCSEC_GSS verifier checksums.
    pub header: Bytes,
    pub args: Decoder,
}

/// Why a record is not a usable call.
#[derive(Debug, PartialEq, Eq)]
pub enum BadCall {
    /// Not even an xid: nothing can be answered.
    Unreadable,
    /// A REPLY sent to a server: ignored, as RFC 5531 asks.
    NotACall(u32),
    /// The header is cut short or malformed after the xid.
    Garbage(u32),
    /// The credential or verifier is malformed or too long.
    BadCred(u32),
}

pub fn decode_call(record: Bytes) -> Result<Call, BadCall> {
    let mut d = Decoder::new(record.clone());
    let xid = d.u32().map_err(|_| BadCall::Unreadable)?;
    match d.i32() {
        Ok(0) => {}
        Ok(1) => return Err(BadCall::NotACall(xid)),
        _ => return Err(BadCall::Garbage(xid)),
    }
    let mut head =
        || -> xdr::Result<(u32, u32, u32, u32)> { Ok((d.u32()?, d.u32()?, d.u32()?, d.u32()?)) };
    let (rpcvers, prog, vers, proc_) = head().map_err(|_| BadCall::Garbage(xid))?;
    let cred = OpaqueAuth::unpack(&mut d).map_err(|_| BadCall::BadCred(xid))?;
    let header = record.slice(..d.position());
    let verf = OpaqueAuth::unpack(&mut d).map_err(|_| BadCall::BadCred(xid))?;
    Ok(Call {
        xid,
        rpcvers,
        prog,
        vers,
        proc_,
        cred,
        verf,
        header,
        args: d,
    })
}

pub fn none_verf() -> OpaqueAuth {
    OpaqueAuth {
        flavor: AUTH_NONE,
        body: Bytes::new(),
    }
}

fn reply(xid: u32, body: ReplyBody, out: &mut BytesMut) {
    RpcMsg {
        xid,
        body: RpcMsgBody::REPLY(body),
    }
    .pack(out);
}

/// Header of a successful reply; the program appends its results after it.
pub fn success_header(xid: u32, out: &mut BytesMut) {
    success_header_verf(xid, none_verf(), out)
}

/// [`success_header`] with a verifier (RPCSEC_GSS replies).
pub fn success_header_verf(xid: u32, verf: OpaqueAuth, out: &mut BytesMut) {
    reply(
        xid,
        ReplyBody::MSG_ACCEPTED(AcceptedReply {
            verf,
            reply_data: AcceptedReplyReplyData::SUCCESS([]),
        }),
        out,
    );
}

/// Length of [`success_header`]'s output with an AUTH_NONE verifier.
pub const SUCCESS_HEADER_LEN: usize = 24;

/// An accepted reply that is not SUCCESS.
pub fn accepted_error(xid: u32, stat: AcceptStat, out: &mut BytesMut) {
    accepted_error_verf(xid, stat, none_verf(), out)
}

/// [`accepted_error`] with a verifier (RPCSEC_GSS replies).
pub fn accepted_error_verf(xid: u32, stat: AcceptStat, verf: OpaqueAuth, out: &mut BytesMut) {
    debug_assert!(stat != AcceptStat::SUCCESS && stat != AcceptStat::PROG_MISMATCH);
    reply(
        xid,
        ReplyBody::MSG_ACCEPTED(AcceptedReply {
            verf,
            reply_data: AcceptedReplyReplyData::Default(stat),
        }),
        out,
    );
}

pub fn prog_mismatch(xid: u32, low: u32, high: u32, out: &mut BytesMut) {
    reply(
        xid,
        ReplyBody::MSG_ACCEPTED(AcceptedReply {
            verf: none_verf(),
            reply_data: AcceptedReplyReplyData::PROG_MISMATCH(MismatchInfo { low, high }),
        }),
        out,
    );
}

pub fn rpc_mismatch(xid: u32, out: &mut BytesMut) {
    reply(
        xid,
        ReplyBody::MSG_DENIED(RejectedReply::RPC_MISMATCH(MismatchInfo {
            low: 2,
            high: 2,
        })),
        out,
    );
}

pub fn auth_error(xid: u32, stat: AuthStat, out: &mut BytesMut) {
    reply(
        xid,
        ReplyBody::MSG_DENIED(RejectedReply::AUTH_ERROR(stat)),
        out,
    );
}

/// Encodes the reply for an RPC-level failure of a call.
pub fn call_error(xid: u32, e: CallError, out: &mut BytesMut) {
    call_error_verf(xid, e, none_verf(), out)
}

/// [`call_error`] with the verifier accepted replies carry.
pub fn call_error_verf(xid: u32, e: CallError, verf: OpaqueAuth, out: &mut BytesMut) {
    match e {
        CallError::ProcUnavail => accepted_error_verf(xid, AcceptStat::PROC_UNAVAIL, verf, out),
        CallError::GarbageArgs => accepted_error_verf(xid, AcceptStat::GARBAGE_ARGS, verf, out),
        CallError::SystemErr => accepted_error_verf(xid, AcceptStat::SYSTEM_ERR, verf, out),
        CallError::Auth(s) => auth_error(xid, s, out),
        CallError::Drop => {}
    }
}

/// Encodes a call (for clients): header, credential, AUTH_NONE verifier.
pub fn encode_call(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    out: &mut BytesMut,
) {
    encode_call_head(xid, prog, vers, proc_, cred, out);
    none_verf().pack(out);
}

/// Encodes a call header up to the end of the credential (what an
/// RPCSEC_GSS verifier checksums); the caller appends the verifier.
pub fn encode_call_head(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &OpaqueAuth,
    out: &mut BytesMut,
) {
    out.put_u32(xid);
    out.put_u32(0); // CALL
    out.put_u32(2);
    out.put_u32(prog);
    out.put_u32(vers);
    out.put_u32(proc_);
    cred.pack(out);
}

/// What a client learns from a reply header.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyStatus {
    /// SUCCESS: the results follow in the decoder.
    Success,
    Accepted(AcceptStat),
    ProgMismatch(u32, u32),
    RpcMismatch(u32, u32),
    AuthError(AuthStat),
}

/// Decodes a reply header (for clients). Returns the xid, status and the rest.
pub fn decode_reply(record: Bytes) -> xdr::Result<(u32, ReplyStatus, Decoder)> {
    decode_reply_verf(record).map(|(x, s, _, d)| (x, s, d))
}

/// [`decode_reply`], also returning an accepted reply's verifier.
pub fn decode_reply_verf(
    record: Bytes,
) -> xdr::Result<(u32, ReplyStatus, Option<OpaqueAuth>, Decoder)> {
    let mut d = Decoder::new(record);
    let xid = d.u32()?;
    if d.i32()? != 1 {
        return Err(xdr::Error::BadUnion {
            name: "rpc_msg",
            value: 0,
        });
    }
    let mut verf = None;
    let st = match ReplyBody::unpack(&mut d)? {
        ReplyBody::MSG_ACCEPTED(a) => {
            verf = Some(a.verf);
            match a.reply_data {
                AcceptedReplyReplyData::SUCCESS(_) => ReplyStatus::Success,
                AcceptedReplyReplyData::PROG_MISMATCH(m) => {
                    ReplyStatus::ProgMismatch(m.low, m.high)
                }
                AcceptedReplyReplyData::Default(s) => ReplyStatus::Accepted(s),
            }
        }
        ReplyBody::MSG_DENIED(RejectedReply::RPC_MISMATCH(m)) => {
            ReplyStatus::RpcMismatch(m.low, m.high)
        }
        ReplyBody::MSG_DENIED(RejectedReply::AUTH_ERROR(s)) => ReplyStatus::AuthError(s),
    };
    Ok((xid, st, verf, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_roundtrip_and_header_len() {
        let mut b = BytesMut::new();
        encode_call(7, 100003, 3, 1, &none_verf(), &mut b);
        b.put_u32(42);
        let c = decode_call(b.freeze()).unwrap();
        assert_eq!(
            (c.xid, c.rpcvers, c.prog, c.vers, c.proc_),
            (7, 2, 100003, 3, 1)
        );
        assert_eq!(c.args.remaining(), 4);
        let mut out = BytesMut::new();
        success_header(7, &mut out);
        assert_eq!(out.len(), SUCCESS_HEADER_LEN);
        let (xid, st, d) = decode_reply(out.freeze()).unwrap();
        assert_eq!((xid, st, d.remaining()), (7, ReplyStatus::Success, 0));
    }

    #[test]
    fn bad_headers() {
        assert_eq!(
            decode_call(Bytes::from_static(&[1, 2])).unwrap_err(),
            BadCall::Unreadable
        );
        assert_eq!(
            decode_call(Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 1])).unwrap_err(),
            BadCall::NotACall(9)
        );
        assert_eq!(
            decode_call(Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 0, 0])).unwrap_err(),
            BadCall::Garbage(9)
        );
        let mut b = BytesMut::new();
        encode_call(5, 1, 1, 1, &none_verf(), &mut b);
        let mut v = b.to_vec();
        v[28..32].copy_from_slice(&1000u32.to_be_bytes()); // cred body length 1000 > 400
        assert_eq!(decode_call(v.into()).unwrap_err(), BadCall::BadCred(5));
    }

    #[test]
    fn error_replies_decode() {
        for (e, want) in [
            (
                CallError::ProcUnavail,
                ReplyStatus::Accepted(AcceptStat::PROC_UNAVAIL),
            ),
            (
                CallError::GarbageArgs,
                ReplyStatus::Accepted(AcceptStat::GARBAGE_ARGS),
            ),
            (
                CallError::Auth(AuthStat::AUTH_TOOWEAK),
                ReplyStatus::AuthError(AuthStat::AUTH_TOOWEAK),
            ),
        ] {
            let mut out = BytesMut::new();
            call_error(3, e, &mut out);
            assert_eq!(decode_reply(out.freeze()).unwrap().1, want);
        }
        let mut out = BytesMut::new();
        rpc_mismatch(3, &mut out);
        assert_eq!(
            decode_reply(out.freeze()).unwrap().1,
            ReplyStatus::RpcMismatch(2, 2)
        );
    }
}
