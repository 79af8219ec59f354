//! A connection's bytes through record marking, the RPC call pipeline and
//! Tarn's whole service (MOUNT, NFSv3, NLM, NSM, NFSv4) over an in-memory
//! export: every call gets a well-formed reply with its xid, nothing
//! panics. See `tarn_fuzz::pipeline`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tarn_fuzz::pipeline::run(data);
});
