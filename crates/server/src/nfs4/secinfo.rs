//! SECINFO and SECINFO_NO_NAME: which security flavors an object needs.
//! AUTH_SYS until RPCSEC_GSS lands.

use super::compound::Compound;
use super::fh::lookup_fh;
use super::log_fail;
use proto::nfs4::*;

const AUTH_SYS: u32 = 1;

fn flavors() -> Secinfo4resok {
    vec![Secinfo4::Default(AUTH_SYS)]
}

pub async fn secinfo(c: &mut Compound<'_>, a: Secinfo4args) -> Secinfo4res {
    match lookup_fh(c, &a.name).await {
        Ok(_) => {
            // RFC 8881 §2.6.3.1.1.8: SECINFO consumes the current filehandle.
            c.cur = None;
            Secinfo4res::NFS4_OK(flavors())
        }
        Err(f) => {
            log_fail(c, "OP_SECINFO", &f);
            Secinfo4res::Default(f.status)
        }
    }
}

pub fn secinfo_no_name(c: &mut Compound<'_>, _a: SecinfoNoName4args) -> Secinfo4res {
    if c.cur.is_none() {
        return Secinfo4res::Default(Nfsstat4::NFS4ERR_NOFILEHANDLE);
    }
    c.cur = None;
    Secinfo4res::NFS4_OK(flavors())
}
