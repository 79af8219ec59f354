//! Fixtures that the in-crate tests of NFSv3, NFSv4 and NLM share.

use crate::export::{Cidr, Export, Squash};
use bytes::Bytes;
use proto::nfs3::{Diropargs3, NfsFh3, Sattr3, SetAtime, SetMtime, TimeHow};
use rpc::CallContext;
use std::sync::Arc;

/// An export of `backend` from /srv/test, at the pseudo root, to the
/// clients in CIDR `clients`, root squashed.
pub fn export(backend: Arc<dyn vfs::Backend>, read_only: bool, clients: &str) -> Export {
    Export::simple(
        "/srv/test",
        "/",
        backend,
        &[clients.parse::<Cidr>().unwrap()],
        read_only,
        Squash::Root,
    )
}

/// NFSv3's name `name` in directory `dir`.
pub fn dirop(dir: &NfsFh3, name: &str) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Bytes::copy_from_slice(name.as_bytes()),
    }
}

/// NFSv3 attributes to set: `mode` if given, nothing else.
pub fn sattr(mode: Option<u32>) -> Sattr3 {
    Sattr3 {
        mode,
        uid: None,
        gid: None,
        size: None,
        atime: SetAtime::Default(TimeHow::DONT_CHANGE),
        mtime: SetMtime::Default(TimeHow::DONT_CHANGE),
    }
}

/// AUTH_SYS as uid and gid 1000 from machine "test".
pub fn user_1000() -> rpc::Auth {
    rpc::Auth::Sys(rpc::AuthSys {
        stamp: 0,
        machinename: Bytes::from_static(b"test"),
        uid: 1000,
        gid: 1000,
        gids: vec![],
    })
}

/// A call of `prog` `vers` procedure `proc_` from `peer` ("ip:port").
pub fn call_ctx(
    xid: u32,
    (prog, vers, proc_): (u32, u32, u32),
    auth: rpc::Auth,
    peer: &str,
) -> CallContext {
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    CallContext::new(
        xid,
        prog,
        vers,
        proc_,
        auth,
        peer,
        1,
        metrics::ClientStats::detached(peer.ip()),
    )
}

/// A temp dir whose filesystem supports file handles, or None.
pub fn local_tmp() -> Option<(tempfile::TempDir, vfs::local::LocalFs)> {
    use std::os::unix::fs::PermissionsExt;
    for base in [
        "/tmp",
        "/var/tmp",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target"),
    ] {
        let Ok(d) = tempfile::Builder::new()
            .prefix("server-test")
            .tempdir_in(base)
        else {
            continue;
        };
        // World-writable so the test's uid 1000 may create in it.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).ok()?;
        if let Ok(fs) = vfs::local::LocalFs::new(d.path()) {
            return Some((d, fs));
        }
    }
    None
}
