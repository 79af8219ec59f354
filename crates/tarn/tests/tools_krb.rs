//! The client tools over Kerberos: `tarn cp` of an 8 MiB file to a
//! krb5p-only `tarn serve` and back with `sec=krb5p` (a real MIT KDC on
//! loopback, the caller's credential cache from KRB5CCNAME), equal
//! checksums, over NFSv4 and NFSv3; `tarn ls` on it; sec=sys to that
//! export is refused with the status in words (NFSv4) or the flavors MNT
//! offers (NFSv3).
//!
//!   cargo test -p tarn --test tools_krb -- --nocapture

mod common;
use common::*;
use rand::RngCore;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;
use testkdc as kdc;

#[test]
fn cp_over_krb5p_there_and_back() {
    let _env = kdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = kdc_with_ticket("tools", "10m"); // the tools we run inherit it

    let (_tmp, export, state) = temp_export();
    // alice maps to the anonymous ids here: a directory she may write.
    std::fs::set_permissions(&export, std::fs::Permissions::from_mode(0o777)).unwrap();
    let s = launch_sec(&kdc, &export, &state, "krb5p", &[]);
    // The host as Kerberos names the service: nfs@localhost.
    let url = |p: &str, sec: &str| format!("nfs://localhost:{}/{p}?sec={sec}", s.port());

    let src = state.join("big.bin");
    let back = state.join("back.bin");
    let mut data = vec![0u8; 8 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    std::fs::write(&src, &data).unwrap();

    let t = Instant::now();
    tarn(&["cp", src.to_str().unwrap(), &url("big.bin", "krb5p")]);
    let up = t.elapsed();
    assert_eq!(sha256_file(&export.join("big.bin")), sha256_file(&src));
    let t = Instant::now();
    tarn(&["cp", &url("big.bin", "krb5p"), back.to_str().unwrap()]);
    let down = t.elapsed();
    assert_eq!(sha256_file(&back), sha256_file(&src));
    println!(
        "krb5p cp of 8 MiB: {:.1} MiB/s up, {:.1} MiB/s down",
        8.0 / up.as_secs_f64(),
        8.0 / down.as_secs_f64()
    );

    // A krb5p-only export refuses weaker flavors, and the user is told why.
    let out = tarn_output(&["ls", &url("", "sys")]);
    assert!(!out.status.success(), "sec=sys to a krb5p-only export");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nfs://localhost:"), "{err}");
    assert!(err.contains("NFS4ERR_WRONGSEC"), "{err}");
    let ls = tarn(&["ls", &url("", "krb5p")]);
    assert!(ls.lines().any(|l| l == "big.bin"), "{ls}");

    // NFSv3: MOUNT (AUTH_SYS) lists krb5p, NFS calls go under it.
    let v3 = |p: &str, sec: &str| url(p, sec) + "&vers=3";
    let t = Instant::now();
    tarn(&["cp", "-q", src.to_str().unwrap(), &v3("big3.bin", "krb5p")]);
    let up = t.elapsed();
    assert_eq!(sha256_file(&export.join("big3.bin")), sha256_file(&src));
    std::fs::remove_file(&back).unwrap();
    tarn(&["cp", "-q", &v3("big3.bin", "krb5p"), back.to_str().unwrap()]);
    assert_eq!(sha256_file(&back), sha256_file(&src));
    println!(
        "NFSv3 krb5p cp of 8 MiB: {:.1} MiB/s up",
        8.0 / up.as_secs_f64()
    );
    let out = tarn_output(&["ls", &v3("", "sys")]);
    assert!(
        !out.status.success(),
        "NFSv3 sec=sys to a krb5p-only export"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("does not offer sec=sys for this export (it offers sec=krb5p)"),
        "{err}"
    );
    drop(s);
}
