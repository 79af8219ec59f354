#![allow(dead_code)]
//! The realm of crates/testkdc, plus a GSS context made between an MIT
//! initiator and the server's accept path.

pub use testkdc::*;

/// Points this process's GSS-API at the realm with `enctype` only, and
/// establishes a context: MIT initiator (`nfs@localhost`, with sequence
/// checking so that our sequence numbers are checked too) against the
/// server's accept path. Callers hold [`ENV`].
pub fn establish(
    kdc: &Kdc,
    enctype: &str,
) -> (libgssapi::context::ClientCtx, rpc::gss::lucid::MitCtx) {
    use libgssapi::context::{ClientCtx, CtxFlags, SecurityContext};
    use libgssapi::credential::{Cred, CredUsage};
    use libgssapi::name::Name;
    use libgssapi::oid::{GSS_MECH_KRB5, GSS_NT_HOSTBASED_SERVICE};
    let conf = kdc.conf_for(Some(enctype));
    let cc = kdc.kinit_with(&conf, enctype, "1h");
    std::env::set_var("KRB5_CONFIG", &conf);
    std::env::set_var("KRB5CCNAME", format!("FILE:{}", cc.display()));
    std::env::set_var("KRB5_KTNAME", format!("FILE:{}", kdc.keytab.display()));
    let name = Name::new(b"nfs@localhost", Some(GSS_NT_HOSTBASED_SERVICE)).unwrap();
    let cred = Cred::acquire(None, None, CredUsage::Initiate, None).unwrap();
    let mut client = ClientCtx::new(
        Some(cred),
        name,
        CtxFlags::GSS_C_MUTUAL_FLAG | CtxFlags::GSS_C_SEQUENCE_FLAG | CtxFlags::GSS_C_REPLAY_FLAG,
        Some(GSS_MECH_KRB5),
    );
    let mut server = rpc::gss::lucid::MitCtx::new();
    let mut tok = client.step(None, None).unwrap();
    loop {
        let t = tok.expect("the initiator has a token to send");
        let s = server.step(&t).unwrap();
        let reply = (!s.token.is_empty()).then_some(s.token);
        tok = client.step(reply.as_deref(), None).unwrap();
        if s.complete {
            assert!(tok.is_none() && client.is_complete());
            break;
        }
    }
    (client, server)
}
