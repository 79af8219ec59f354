//! NFSv4.0 client life: SETCLIENTID, SETCLIENTID_CONFIRM, RENEW and
//! OPEN_CONFIRM (RFC 7530 §16). Tarn never asks for OPEN_CONFIRM, so open
//! owners need no confirmation step.

use super::compound::Compound;
use super::session::principal;
use super::{log_fail, Fail};
use proto::nfs4::*;
use std::time::Instant;

pub fn setclientid(c: &mut Compound<'_>, a: Setclientid4args) -> Setclientid4res {
    let r = c.n.state.exchange_id(
        &a.client.id,
        a.client.verifier,
        &principal(c),
        false,
        0,
        Instant::now(),
    );
    match r.and_then(|(id, _, _)| c.n.state.confirm_verifier(id).map(|v| (id, v))) {
        Ok((clientid, setclientid_confirm)) => Setclientid4res::NFS4_OK(Setclientid4resok {
            clientid,
            setclientid_confirm,
        }),
        Err(s) => {
            log_fail(
                c,
                "OP_SETCLIENTID",
                &Fail::new(s, "client owner rules refused SETCLIENTID"),
            );
            Setclientid4res::Default(s)
        }
    }
}

pub async fn setclientid_confirm(
    c: &mut Compound<'_>,
    a: SetclientidConfirm4args,
) -> SetclientidConfirm4res {
    let status = match c
        .n
        .state
        .confirm_v40(a.clientid, a.setclientid_confirm, Instant::now())
    {
        Ok(newly) => {
            if newly {
                if let (Some(rec), Some(owner)) =
                    (&c.n.recovery, c.n.state.client_owner(a.clientid))
                {
                    let rec = rec.clone();
                    let _ = c.n.run(move || rec.add(&owner)).await;
                }
            }
            Nfsstat4::NFS4_OK
        }
        Err(s) => {
            log_fail(
                c,
                "OP_SETCLIENTID_CONFIRM",
                &Fail::new(s, "unknown client or wrong verifier"),
            );
            s
        }
    };
    SetclientidConfirm4res { status }
}

pub fn renew(c: &mut Compound<'_>, a: Renew4args) -> Renew4res {
    let status = match c.n.state.renew(a.clientid, Instant::now()) {
        Ok(()) => Nfsstat4::NFS4_OK,
        Err(s) => {
            log_fail(c, "OP_RENEW", &Fail::new(s, "client unknown or expired"));
            s
        }
    };
    Renew4res { status }
}

/// Never requested by Tarn; answered with the open stateid as it is.
pub fn open_confirm(c: &mut Compound<'_>, a: OpenConfirm4args) -> OpenConfirm4res {
    match c.n.state.owner_client(&a.open_stateid) {
        Some(_) => OpenConfirm4res::NFS4_OK(OpenConfirm4resok {
            open_stateid: a.open_stateid,
        }),
        None => OpenConfirm4res::Default(Nfsstat4::NFS4ERR_BAD_STATEID),
    }
}
