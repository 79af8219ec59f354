//! The client against NFS-Ganesha's NFSv4.1 (Debian's nfs-ganesha +
//! nfs-ganesha-vfs), started by `ganesha-run.sh` in private namespaces.
//!
//!   TARN_GANESHA=1 cargo test -p client --test ganesha -- --nocapture
//!
//! Needs root. Without TARN_GANESHA=1 the test only prints how to run it.
//! The test re-runs its own binary inside the namespaces (the client must
//! share Ganesha's network namespace), marked by TARN_GANESHA_ADDR.

mod common;
mod harness;

use test_support::ganesha::inside_ganesha;

#[test]
fn ganesha_nfs41() {
    inside_ganesha("ganesha_nfs41", |addr, export, dir| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(common::scenario(addr.parse().unwrap(), export, Some(dir)));
    });
}
