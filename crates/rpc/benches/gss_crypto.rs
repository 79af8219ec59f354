//! RPCSEC_GSS per-message crypto, MIT GSS-API vs the Rust path, on 1 MiB
//! messages: krb5p (the server unwraps the client's sealed token and
//! seals a reply) and krb5i (verifies the client's MIC, makes one).
//! Prints MiB/s of message per unwrap+wrap (or verify+get) pair for each
//! AES enctype, and the ratio Rust / MIT. Both sides handle the same
//! message with the same enctype, each on its own context (the export
//! consumes the MIT context, so one context cannot serve both).
//! Starts a throwaway KDC; skips when MIT's KDC is not installed:
//! `cargo bench -p rpc --bench gss_crypto`.

#[path = "../tests/common/kdc.rs"]
mod kdc;

use libgssapi::context::SecurityContext;
use std::hint::black_box;
use std::time::Instant;

const MIB: usize = 1 << 20;

fn rate(bytes: usize, f: impl FnMut()) -> f64 {
    let mut f = f;
    f(); // warm up
    let t = Instant::now();
    let mut n = 0;
    while n < 4 || t.elapsed().as_secs_f64() < 1.0 {
        f();
        n += 1;
    }
    (n * bytes) as f64 / MIB as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    if !kdc::available() {
        println!("gss_crypto: skipped, MIT KDC tools not installed (scripts/deps.sh --test)");
        return;
    }
    let _env = kdc::ENV.lock().unwrap();
    let kdc = kdc::Kdc::start();
    let msg: Vec<u8> = (0..MIB as u32).map(|i| (i * 13 + i / 4093) as u8).collect();
    println!("1 MiB messages, server side, MiB/s (message bytes per pair of operations):");
    for (name, _) in kdc::ENCTYPES {
        // MIT: an established context left with MIT.
        let (mut c1, mut mit) = kdc::establish(&kdc, name);
        let sealed = c1.wrap(true, &msg).unwrap();
        let mic = c1.get_mic(&msg).unwrap();
        let mit_p = rate(MIB, || {
            let (p, _) = mit.unwrap(&sealed).unwrap();
            black_box(mit.wrap(true, &p).unwrap());
        });
        let mit_i = rate(MIB, || {
            mit.verify_mic(&msg, &mic).unwrap();
            black_box(mit.get_mic(&msg).unwrap());
        });
        // Rust: another context, its keys exported.
        let (mut c2, acc) = kdc::establish(&kdc, name);
        let cfx = rpc::gss::cfx_from_lucid(&acc.export().map_err(|(_, e)| e).unwrap()).unwrap();
        let sealed = c2.wrap(true, &msg).unwrap();
        let mic = c2.get_mic(&msg).unwrap();
        // As the server does it: one copy into the buffer decrypted in
        // place, and the reply sealed straight into its output buffer.
        let mut buf = vec![0u8; sealed.len()];
        let mut out = vec![0u8; cfx.wrap_len(true, MIB)];
        let rust_p = rate(MIB, || {
            buf.copy_from_slice(&sealed);
            let u = cfx.unwrap_in_place(&mut buf).unwrap();
            cfx.wrap_into(true, &[&buf[u.range]], &mut out);
            black_box(&out);
        });
        let rust_i = rate(MIB, || {
            cfx.verify_mic(&msg, &mic).unwrap();
            black_box(cfx.get_mic(&[&msg]));
        });
        println!(
            "{name:28} krb5p MIT {mit_p:7.1}  Rust {rust_p:7.1}  x{:5.1}   krb5i MIT {mit_i:7.1}  Rust {rust_i:7.1}  x{:5.1}",
            rust_p / mit_p,
            rust_i / mit_i
        );
    }
}
