//! SECINFO and SECINFO_NO_NAME: which security flavors an object needs
//! (the export's `sec=` list); and where NFS4ERR_WRONGSEC is due.

use super::compound::{Compound, Fh};
use super::fail::{log_fail, Fail};
use super::fh::{lookup_fh, lookupp_fh};
use crate::export::Flavor;
use proto::nfs4::*;

/// The Kerberos V5 mechanism, 1.2.840.113554.1.2.2, DER-encoded.
const KRB5_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];

/// The flavors `fh` takes over the call's connection: none at all where
/// the export requires a protection (xprtsec) the connection lacks, since
/// RFC 9289 gives SECINFO no way to say "TLS", and listing flavors that
/// would all meet NFS4ERR_WRONGSEC would send the client round in circles.
fn flavors(c: &Compound<'_>, fh: &Fh) -> Secinfo4resok {
    let sec: &[Flavor] = match fh {
        Fh::Obj { export, .. } if !export.permits_xprt(c.ctx.xprtsec) => {
            export.note_xprt_refusal(c.ctx);
            &[]
        }
        Fh::Obj { export, .. } => &export.sec,
        // Pseudo directories: any flavor may browse them.
        Fh::Pseudo(_) => &Flavor::ALL,
    };
    sec.iter()
        .map(|f| match f.gss_service() {
            None => Secinfo4::Default(proto::rpc::AUTH_SYS),
            Some(s) => Secinfo4::RPCSEC_GSS(RpcsecGssInfo {
                oid: bytes::Bytes::from_static(KRB5_OID),
                qop: 0,
                service: match s {
                    rpc::gss::GssService::None => RpcGssSvcT::RPC_GSS_SVC_NONE,
                    rpc::gss::GssService::Integrity => RpcGssSvcT::RPC_GSS_SVC_INTEGRITY,
                    rpc::gss::GssService::Privacy => RpcGssSvcT::RPC_GSS_SVC_PRIVACY,
                },
            }),
        })
        .collect()
}

/// Whether `op`, which just succeeded, must fail with NFS4ERR_WRONGSEC
/// because it made an export the call's flavor may not use current
/// (RFC 8881 §2.6.3.1.1): not when SECINFO or SECINFO_NO_NAME follows to
/// ask which flavor to use, and not for a PUTFH-like op that a LOOKUP
/// follows or that ends the COMPOUND (the next operation decides).
pub fn wrong_sec(c: &Compound<'_>, op: u32, next: Option<u32>) -> bool {
    use NfsOpnum4 as O;
    let Some(op) = O::from_i32(op as i32) else {
        return false;
    };
    let next = next.map(|n| O::from_i32(n as i32));
    let put = matches!(
        op,
        O::OP_PUTFH | O::OP_PUTROOTFH | O::OP_PUTPUBFH | O::OP_RESTOREFH
    );
    if !put && !matches!(op, O::OP_LOOKUP | O::OP_LOOKUPP | O::OP_OPEN) {
        return false;
    }
    let Some(Fh::Obj { export, .. }) = c.cur.as_ref().map(|x| &x.fh) else {
        return false;
    };
    if export.permits_call(c.ctx) {
        return false;
    }
    let wrong = match next {
        Some(Some(O::OP_SECINFO | O::OP_SECINFO_NO_NAME)) => false,
        Some(Some(O::OP_LOOKUP | O::OP_LOOKUPP)) | None if put => false,
        _ => true,
    };
    if wrong {
        export.note_xprt_refusal(c.ctx);
    }
    wrong
}

pub async fn secinfo(c: &mut Compound<'_>, a: Secinfo4args) -> Secinfo4res {
    let fh = lookup_fh(c, &a.name).await;
    answer(c, "OP_SECINFO", fh)
}

/// The flavors of `fh` as SECINFO and SECINFO_NO_NAME answer them: either
/// consumes the current filehandle (RFC 8881 §2.6.3.1.1.8).
fn answer(c: &mut Compound<'_>, op: &'static str, fh: Result<Fh, Fail>) -> Secinfo4res {
    match fh {
        Ok(fh) => {
            c.cur = None;
            Secinfo4res::NFS4_OK(flavors(c, &fh))
        }
        Err(f) => {
            log_fail(c.ctx, op, &f);
            Secinfo4res::Default(f.status)
        }
    }
}

/// RFC 8881 §18.45.3: the flavors of the current filehandle, or with
/// SECINFO_STYLE4_PARENT of its parent (NFS4ERR_NOENT at the root, as for
/// LOOKUPP); either way the current filehandle is consumed.
pub async fn secinfo_no_name(c: &mut Compound<'_>, a: SecinfoNoName4args) -> Secinfo4res {
    let fh = match a {
        SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH => c.cur().map(|cur| cur.fh.clone()),
        SecinfoStyle4::SECINFO_STYLE4_PARENT => lookupp_fh(c).await,
    };
    answer(c, "OP_SECINFO_NO_NAME", fh)
}
