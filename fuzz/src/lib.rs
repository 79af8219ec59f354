//! Shared pieces of the fuzz targets: the round-trip property of XDR
//! decoders, and the in-memory NFSv4 server COMPOUNDs run against.
//!
//! Fuzzer: libFuzzer through cargo-fuzz, built with `-s none` on the
//! stable toolchain (see README.md for the measurements behind the choice).

use bytes::Bytes;
use xdr::{Decoder, Pack, Unpack};

pub mod nfs3;
pub mod nfs4;
pub mod pipeline;
pub mod proto_args;

/// Decodes a `T` from the front of `data`; if that works, its encoding must
/// be exactly the bytes consumed (XDR has one encoding per value: padding is
/// zero, booleans are 0 or 1), and decoding that again gives it back.
/// Returns the value and the bytes consumed.
pub fn roundtrip<T: Unpack + Pack>(data: &Bytes) -> Option<(T, usize)> {
    let mut d = Decoder::new(data.clone());
    let v = T::unpack(&mut d).ok()?;
    let used = d.position();
    let again = xdr::to_bytes(&v);
    assert_eq!(
        &again[..],
        &data[..used],
        "re-encoding differs from the input"
    );
    let mut d2 = Decoder::new(again.clone());
    let w = T::unpack(&mut d2).expect("an encoding decodes");
    assert_eq!(d2.remaining(), 0);
    assert_eq!(xdr::to_bytes(&w), again);
    Some((v, used))
}

/// `s` cut at every `sep` (several calls in one input).
pub fn split<'a>(mut s: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(i) = s.windows(sep.len()).position(|w| w == sep) {
        out.push(&s[..i]);
        s = &s[i + sep.len()..];
    }
    out.push(s);
    out
}
