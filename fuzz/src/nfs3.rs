//! MOUNT and NFSv3 calls run through the real handlers over an in-memory
//! export (files of at most 1 MiB), built afresh for every input. The
//! handle key is fixed, so the root's handle is the same in every run and
//! the seeds can carry it.

use crate::call_context;
use bytes::{Bytes, BytesMut};
use server::export::Squash;
use server::mount::Mount;
use server::nfs3::Nfs3;
use server::pool::Pool;
use xdr::Decoder;

pub fn server() -> Nfs3 {
    Nfs3::new(
        crate::exports(Squash::Root),
        crate::handle_key(),
        Pool::new(1),
    )
}

/// The export root's handle (for the seeds).
pub fn root_handle(n: &Nfs3) -> Bytes {
    let live = n.live.load();
    let e = live.exports.get(0).unwrap();
    n.handle(e, &e.backend.root()).data
}

/// Input: calls separated by `#CALL`, each a byte of options (bit 0: the
/// caller is root, else uid 1000; bit 1: MOUNT, else NFSv3), a byte with
/// the procedure number, and the arguments.
pub fn run(data: &[u8]) {
    crate::block_on(async {
        let n = server();
        let mount = Mount::new();
        for part in crate::split(data, b"#CALL").into_iter().take(16) {
            let [opt, proc_, args @ ..] = part else {
                continue;
            };
            let uid = if opt & 1 != 0 { 0 } else { 1000 };
            let args = Decoder::new(Bytes::copy_from_slice(args));
            let mut out = BytesMut::new();
            let r = if opt & 2 != 0 {
                let c = call_context(1, proto::mount::MOUNT_PROGRAM, 3, (*proc_ % 8) as u32, uid);
                mount.dispatch(&n, &c, args, &mut out).await
            } else {
                let c = call_context(1, proto::nfs3::NFS_PROGRAM, 3, (*proc_ % 24) as u32, uid);
                n.dispatch(&c, args, &mut out).await
            };
            if r.is_ok() {
                // Every procedure has results; NULL is answered before here.
                assert!(!out.is_empty() || *proc_ % 24 == 0 || opt & 2 != 0);
            }
        }
    });
}
