//! SECINFO over a connection without the protection the export requires
//! (xprtsec): no flavor is offered, since every one would meet
//! NFS4ERR_WRONGSEC; over TLS the export's flavors are.

use super::*;
use rpc::tls::XprtSec;

fn secinfo_of_root() -> Vec<NfsArgop4> {
    vec![
        NfsArgop4::OP_PUTROOTFH,
        NfsArgop4::OP_SECINFO_NO_NAME(SecinfoStyle4::SECINFO_STYLE4_CURRENT_FH),
    ]
}

fn flavors(r: &Compound4res) -> Vec<Secinfo4> {
    match r.resarray.last() {
        Some(NfsResop4::OP_SECINFO_NO_NAME(Secinfo4res::NFS4_OK(f))) => f.clone(),
        other => panic!("SECINFO_NO_NAME failed: {other:?} ({:?})", r.status),
    }
}

#[tokio::test]
async fn no_flavor_without_the_tls_the_export_requires() {
    let fx = Fx::with_export(cfg(90, 0), |e| e.xprtsec = vec![XprtSec::Tls]);
    let s = fx.client("plain").await;

    let r = fx.call(&s, secinfo_of_root()).await;
    assert_eq!(flavors(&r), vec![]);
    // What the empty list stands for: the export refuses this connection.
    let r = fx
        .call(
            &s,
            vec![
                NfsArgop4::OP_PUTROOTFH,
                NfsArgop4::OP_GETATTR(Getattr4args {
                    attr_request: vec![],
                }),
            ],
        )
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4ERR_WRONGSEC);

    fx.set_xprtsec(XprtSec::Tls);
    let r = fx.call(&s, secinfo_of_root()).await;
    assert_eq!(flavors(&r), vec![Secinfo4::Default(proto::rpc::AUTH_SYS)]);
}
