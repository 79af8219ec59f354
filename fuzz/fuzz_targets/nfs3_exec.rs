//! MOUNT and NFSv3 calls through the real handlers against an in-memory
//! export: nothing panics, and no argument from the wire sizes an
//! allocation past the per-input memory cap. See `tarn_fuzz::nfs3`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tarn_fuzz::nfs3::run(data);
});
