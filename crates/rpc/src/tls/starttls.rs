//! The STARTTLS exchange that opens RPC-with-TLS (RFC 9289 §4.1): a NULL
//! call with an AUTH_TLS credential, answered with the STARTTLS verifier.

use bytes::{BufMut, Bytes, BytesMut};
use proto::rpc::{OpaqueAuth, AUTH_NONE};

/// The AUTH_TLS credential flavor (RFC 9289 §4.1).
pub const AUTH_TLS: u32 = 7;
/// The body of the verifier that tells the client to start TLS.
pub const STARTTLS: &[u8] = b"STARTTLS";
/// The ALPN protocol name both ends offer (RFC 9289 §5.1.3).
pub const ALPN: &[u8] = b"sunrpc";

/// If `rec` (one record, mark removed) is a NULL call with an AUTH_TLS
/// credential, its xid. Looked at before the pipeline: the answer changes
/// the connection, not just one reply.
pub fn starttls_probe(rec: &[u8]) -> Option<u32> {
    let w = |i: usize| -> Option<u32> {
        rec.get(i * 4..i * 4 + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    // xid, CALL, rpcvers 2, prog, vers, proc 0, cred flavor.
    (w(1)? == 0 && w(2)? == 2 && w(5)? == 0 && w(6)? == AUTH_TLS).then_some(w(0)?)
}

/// The reply to a STARTTLS probe, record mark included: accepted, SUCCESS,
/// an AUTH_NONE verifier whose body is "STARTTLS" (RFC 9289 §4.1).
pub fn starttls_reply(xid: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(40);
    crate::record::begin(&mut out);
    crate::msg::success_header_verf(
        xid,
        OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::from_static(STARTTLS),
        },
        &mut out,
    );
    crate::record::finish(&mut out);
    out.freeze()
}

/// The NULL call a client sends to ask for TLS, record mark included.
pub fn starttls_call(xid: u32, prog: u32, vers: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(48);
    crate::record::begin(&mut out);
    for w in [xid, 0, 2, prog, vers, 0, AUTH_TLS, 0, AUTH_NONE, 0] {
        out.put_u32(w);
    }
    crate::record::finish(&mut out);
    out.freeze()
}

/// Whether `rec` (mark removed) is an accepted, successful reply to `xid`
/// carrying the STARTTLS verifier.
pub fn is_starttls_reply(rec: &[u8], xid: u32) -> bool {
    let mut want = BytesMut::new();
    crate::msg::success_header_verf(
        xid,
        OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::from_static(STARTTLS),
        },
        &mut want,
    );
    rec == &want[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starttls_reply_bytes() {
        let r = starttls_reply(0x01020304);
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x80, 0, 0, 32,         // record mark: last fragment, 32 bytes
            1, 2, 3, 4,             // xid
            0, 0, 0, 1,             // REPLY
            0, 0, 0, 0,             // MSG_ACCEPTED
            0, 0, 0, 0,             // verifier flavor AUTH_NONE
            0, 0, 0, 8,             // verifier length
            b'S', b'T', b'A', b'R', b'T', b'T', b'L', b'S',
            0, 0, 0, 0,             // SUCCESS
        ];
        assert_eq!(&r[..], want);
        assert!(is_starttls_reply(&r[4..], 0x01020304));
        assert!(!is_starttls_reply(&r[4..], 5));
    }

    #[test]
    fn probe_is_recognised() {
        let c = starttls_call(9, 100003, 3);
        assert_eq!(starttls_probe(&c[4..]), Some(9));
        // An AUTH_SYS NULL is not a probe; neither is AUTH_TLS on proc 1.
        let mut x = c[4..].to_vec();
        x[27] = 1;
        assert_eq!(starttls_probe(&x), None);
        let mut y = c[4..].to_vec();
        y[23] = 1;
        assert_eq!(starttls_probe(&y), None);
        assert_eq!(starttls_probe(&c[4..12]), None);
    }
}
