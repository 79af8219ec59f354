//! The RPC call header and every credential and verifier flavor the server
//! reads: AUTH_NONE, AUTH_SYS (at most 16 gids, a machine name of at most
//! 255 bytes) and RPCSEC_GSS (credential, INIT token, integrity and privacy
//! envelopes). Nothing panics; what decodes re-encodes to the same bytes.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use proto::gss::{RpcGssInitArg, RpcGssIntegData, RpcGssPrivData};
use proto::rpc::{AuthsysParms, RpcMsg, AUTH_SYS, RPCSEC_GSS};
use rpc::gss::GssCred;
use rpc::Auth;
use tarn_fuzz::roundtrip;

fuzz_target!(|data: &[u8]| {
    let rec = Bytes::copy_from_slice(data);
    // The generic message type (calls and replies alike).
    let _ = roundtrip::<RpcMsg>(&rec);
    let Ok(call) = rpc::msg::decode_call(rec.clone()) else {
        return;
    };
    assert!(call.header.len() <= rec.len());
    let rest = call.args.rest();
    match Auth::from_cred(&call.cred) {
        Ok(Auth::Sys(s)) => {
            assert_eq!(call.cred.flavor, AUTH_SYS);
            assert!(s.gids.len() <= 16 && s.machinename.len() <= 255);
            let (_, used) = roundtrip::<AuthsysParms>(&call.cred.body).expect("accepted");
            assert_eq!(used, call.cred.body.len());
        }
        Ok(_) => {}
        Err(_) => {
            let _ = roundtrip::<AuthsysParms>(&call.cred.body);
        }
    }
    if call.cred.flavor == RPCSEC_GSS || call.proc_ == 0 {
        if let Ok(c) = GssCred::parse(&call.cred.body) {
            assert_eq!(c.encode().body, call.cred.body);
        }
        let _ = roundtrip::<RpcGssInitArg>(&rest);
        let _ = roundtrip::<RpcGssIntegData>(&rest);
        let _ = roundtrip::<RpcGssPrivData>(&rest);
    }
});
