//! NFSv4 COMPOUNDs run through the real handlers against an in-memory
//! export: every call gets a reply that decodes, with no more results than
//! operations, and nothing panics. See `tarn_fuzz::nfs4` for the server.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tarn_fuzz::nfs4::run(data);
});
