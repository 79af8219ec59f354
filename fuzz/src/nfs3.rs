//! MOUNT and NFSv3 calls run through the real handlers over an in-memory
//! export (files of at most 1 MiB), built afresh for every input. The
//! handle key is fixed, so the root's handle is the same in every run and
//! the seeds can carry it.

use bytes::{Bytes, BytesMut};
use rpc::{Auth, AuthSys, CallContext};
use server::export::{Cidr, Export, Exports, Squash};
use server::live::Live;
use server::mount::Mount;
use server::nfs3::Nfs3;
use server::pool::Pool;
use std::net::SocketAddr;
use std::sync::Arc;
use vfs::handle::HandleKey;
use xdr::Decoder;

pub fn server() -> Nfs3 {
    let backend: Arc<dyn vfs::Backend> = Arc::new(vfs::memory::MemFs::with_max_file(1 << 20));
    let export = Export::simple(
        "/srv/fuzz",
        "/",
        backend,
        &["127.0.0.0/8".parse::<Cidr>().unwrap()],
        false,
        Squash::Root,
    );
    Nfs3::new(
        Live::fixed(Exports::new(vec![export])),
        Arc::new(HandleKey::from_bytes(&[7; HandleKey::KEY_LEN])),
        Pool::new(1),
    )
}

/// The export root's handle (for the seeds).
pub fn root_handle(n: &Nfs3) -> Bytes {
    let live = n.live.load();
    let e = live.exports.get(0).unwrap();
    n.handle(e, &e.backend.root()).data
}

fn ctx(prog: u32, proc_: u32, uid: u32) -> CallContext {
    let peer: SocketAddr = "127.0.0.1:900".parse().unwrap();
    CallContext::new(
        1,
        prog,
        3,
        proc_,
        Auth::Sys(AuthSys {
            stamp: 0,
            machinename: Bytes::from_static(b"fuzz"),
            uid,
            gid: uid,
            gids: vec![],
        }),
        peer,
        1,
        Arc::new(rpc::observe::NoStats),
    )
}

/// Input: calls separated by `#CALL`, each a byte of options (bit 0: the
/// caller is root, else uid 1000; bit 1: MOUNT, else NFSv3), a byte with
/// the procedure number, and the arguments.
pub fn run(data: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
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
                let c = ctx(proto::mount::MOUNT_PROGRAM, (*proc_ % 8) as u32, uid);
                mount.dispatch(&n, &c, args, &mut out).await
            } else {
                let c = ctx(proto::nfs3::NFS_PROGRAM, (*proc_ % 24) as u32, uid);
                n.dispatch(&c, args, &mut out).await
            };
            if r.is_ok() {
                // Every procedure has results; NULL is answered before here.
                assert!(!out.is_empty() || *proc_ % 24 == 0 || opt & 2 != 0);
            }
        }
    });
    rt.shutdown_background();
}
