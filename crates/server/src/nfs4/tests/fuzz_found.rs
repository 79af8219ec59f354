//! Inputs the COMPOUND fuzz target (fuzz/fuzz_targets/compound_exec.rs)
//! found wrong, kept as tests; the inputs themselves are in
//! fuzz/corpus/compound_exec/regress-*.

use super::*;

/// SETATTR4res is a struct whose `attrsset` bitmap is there whatever the
/// status: an error decided before the handler runs (here BADXDR, for
/// arguments cut short) must still carry it, or the reply does not decode.
#[tokio::test]
async fn setattr_refused_before_its_handler_still_has_attrsset() {
    let fx = Fx::new(cfg(90, 0));
    let mut args = BytesMut::new();
    xdr::pack_opaque(b"", &mut args);
    args.put_u32(0); // minor version
    args.put_u32(1); // one operation
    args.put_u32(NfsOpnum4::OP_SETATTR as u32);
    args.put_slice(&[0; 16]); // a stateid cut short
    let raw = fx.raw_bytes(args.freeze()).await;
    let r = Compound4res::unpack(&mut Decoder::new(raw)).expect("the reply decodes");
    assert_eq!(r.status, NFS4ERR_BADXDR);
    assert!(matches!(
        &r.resarray[..],
        [NfsResop4::OP_SETATTR(Setattr4res { status: NFS4ERR_BADXDR, attrsset })] if attrsset.is_empty()
    ));
}
