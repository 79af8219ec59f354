//! NFSv4 COMPOUND arguments (every operation of minor versions 0-2), the
//! callback COMPOUND a client receives, and their results: nothing
//! panics, and what decodes re-encodes to the bytes it came from.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use proto::nfs4::{CbCompound4args, CbCompound4res, Compound4args, Compound4res, Fattr4};
use tarn_fuzz::roundtrip;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let b = Bytes::copy_from_slice(rest);
    match sel % 5 {
        0 => {
            if let Some((a, _)) = roundtrip::<Compound4args>(&b) {
                // The count was checked against the bytes present.
                assert!(a.argarray.len() <= rest.len() / 4);
            }
        }
        1 => drop(roundtrip::<Compound4res>(&b)),
        2 => drop(roundtrip::<CbCompound4args>(&b)),
        3 => drop(roundtrip::<CbCompound4res>(&b)),
        _ => drop(roundtrip::<Fattr4>(&b)),
    }
});
