//! The arguments of every MOUNT v3, NFSv3, NLM v4 and NSM procedure, decoded
//! with the generated codecs the server uses (the first byte picks the
//! procedure). Nothing panics, nothing is allocated for data that is not
//! there, and what decodes re-encodes to exactly the bytes it came from.
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let all = tarn_fuzz::proto_args::TABLE;
    (all[sel as usize % all.len()].1)(&Bytes::copy_from_slice(rest));
});
